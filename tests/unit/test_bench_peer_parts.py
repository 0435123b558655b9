"""The benchmark peers' pure parts: the port of botocore's adaptive rate limiting (checked
step by step against values computed by hand from botocore's formulas), the peers' retry
delays, and how a peer is scored (best of its grid; an error is never a win)."""

from __future__ import annotations

import asyncio
import math
import os
import random
import subprocess
import sys
import time

import pytest

from jobs.bench.cubic import (
    BETA,
    SCALE,
    ClientRateLimiter,
    CubicCalculator,
    RateClocker,
    TokenBucket,
    standard_delay_s,
)
from jobs.bench.paced import best
from jobs.bench.peer_review import jittered_delay_s
from jobs.bench.peer_scoring import peer_error, peer_targets, pick_best, run_error


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- CUBIC (botocore retries/throttling.py) -------------------------------------------


def test_botocore_constants() -> None:
    assert (SCALE, BETA) == (0.4, 0.7)


def test_cubic_grows_from_zero_as_scale_times_t_cubed() -> None:
    cubic = CubicCalculator(starting_max_rate=0, start_time=0.0)
    assert cubic.k == 0
    assert cubic.success_received(1.0) == pytest.approx(0.4)
    assert cubic.success_received(2.0) == pytest.approx(3.2)
    assert cubic.success_received(5.0) == pytest.approx(50.0)


def test_cubic_after_a_throttle_backs_off_to_beta_and_returns_to_w_max_at_k() -> None:
    cubic = CubicCalculator(starting_max_rate=0, start_time=0.0)
    assert cubic.error_received(10.0, 5.0) == pytest.approx(7.0)  # 0.7 x 10
    k = (10 * 0.3 / 0.4) ** (1 / 3)  # cbrt(7.5) = 1.9574...
    assert cubic.k == pytest.approx(k) and cubic.k == pytest.approx(1.957433820)
    assert cubic.success_received(5.0) == pytest.approx(7.0)  # 0.4 (-k)^3 + 10
    assert cubic.success_received(5.0 + k) == pytest.approx(10.0)  # the plateau at W_max
    assert cubic.success_received(6.0) == pytest.approx(0.4 * (1 - k) ** 3 + 10)  # 9.6489...
    assert cubic.success_received(6.0) == pytest.approx(9.64894, abs=1e-4)


# --- token bucket (bucket.py) ----------------------------------------------------------


def test_token_bucket_starts_empty_and_fills_at_the_rate() -> None:
    clock = FakeClock(100.0)
    bucket = TokenBucket(max_rate=1, clock=clock)
    assert bucket.try_acquire() == pytest.approx(1.0)  # empty: a whole token to wait for
    clock.now = 100.5
    assert bucket.try_acquire() == pytest.approx(0.5)
    clock.now = 101.0
    assert bucket.try_acquire() == 0.0  # taken
    assert bucket.capacity == pytest.approx(0.0)


def test_token_bucket_rate_floor_and_capacity() -> None:
    clock = FakeClock()
    bucket = TokenBucket(max_rate=1, clock=clock)
    bucket.set_max_rate(0.2)
    assert (bucket.max_rate, bucket.max_capacity) == (0.5, 1.0)  # _MIN_RATE, capacity >= 1
    bucket.set_max_rate(8.0)
    clock.now = 10.0
    bucket.refill()
    assert bucket.capacity == pytest.approx(8.0)  # capped at the rate
    bucket.set_max_rate(3.0)
    assert bucket.capacity == pytest.approx(3.0)  # scaling down trims what was banked


def test_token_bucket_banks_tokens_at_the_old_rate_before_changing_it() -> None:
    clock = FakeClock()
    bucket = TokenBucket(max_rate=4, clock=clock)
    clock.now = 0.5  # 2 tokens at 4/s
    bucket.set_max_rate(1.0)
    assert bucket.capacity == pytest.approx(1.0)  # 2 earned, trimmed to the new capacity 1
    bucket.set_max_rate(10.0)
    clock.now = 0.6  # 1 more at 10/s
    bucket.refill()
    assert bucket.capacity == pytest.approx(2.0)


def test_token_bucket_acquire_waits_for_a_token() -> None:
    async def go() -> float:
        bucket = TokenBucket(max_rate=20, clock=lambda: asyncio.get_running_loop().time())
        started = asyncio.get_running_loop().time()
        for _ in range(3):
            await bucket.acquire()
        return asyncio.get_running_loop().time() - started

    assert 0.12 <= asyncio.run(go()) < 1.0  # 3 tokens at 20/s from empty: 0.15 s


# --- measured rate (adaptive.py RateClocker) -------------------------------------------


def test_rate_clocker_counts_half_second_buckets_smoothed() -> None:
    clock = FakeClock(10.2)
    clocker = RateClocker(clock)  # first bucket: floor(10.2) = 10
    clock.now = 10.3
    assert clocker.record() == 0.0  # still in bucket 10.0
    clock.now = 10.6
    assert clocker.record() == pytest.approx(3.2)  # 2 in 0.5 s = 4/s; 0.8 x 4
    clock.now = 10.7
    assert clocker.record() == pytest.approx(3.2)
    clock.now = 11.6
    assert clocker.record() == pytest.approx(2.24)  # 2 in 1 s: 0.8 x 2 + 0.2 x 3.2


# --- the limiter (adaptive.py ClientRateLimiter) ---------------------------------------


def test_limiter_is_off_until_the_first_throttle_then_paces_at_beta_of_measured() -> None:
    clock = FakeClock(0.0)
    limiter = ClientRateLimiter(clock)
    for i in range(1, 21):  # 20 successes at 20/s over one second
        clock.now = i * 0.05
        limiter.on_response(throttled=False)
    assert not limiter.enabled
    measured = limiter.clocker.measured_rate
    assert measured == pytest.approx(19.2)  # buckets 0.5 (10/0.5 x 0.8 = 16), 1.0: 0.8x20+0.2x16
    clock.now = 1.01
    new_rate = limiter.on_response(throttled=True)
    assert limiter.enabled
    assert new_rate == pytest.approx(0.7 * measured)
    assert limiter.bucket.max_rate == pytest.approx(0.7 * measured)
    assert limiter.cubic.w_max == pytest.approx(measured)
    # At K after the throttle CUBIC is back at W_max; the bucket is capped at twice the
    # measured rate, which has fallen: 2 calls in the 2 s since bucket 1.0 -> 0.8 x 1 +
    # 0.2 x 19.2 = 4.64.
    clock.now = 1.01 + limiter.cubic.k  # k = cbrt(14.4) = 2.43
    assert limiter.on_response(throttled=False) == pytest.approx(measured)
    assert limiter.clocker.measured_rate == pytest.approx(4.64)
    assert limiter.bucket.max_rate == pytest.approx(9.28)


def test_limiter_second_throttle_backs_off_from_the_lower_of_measured_and_current() -> None:
    clock = FakeClock(0.0)
    limiter = ClientRateLimiter(clock)
    limiter.clocker.measured_rate = 50.0
    clock.now = 0.1
    limiter.on_response(throttled=True)  # same bucket: measured stays 50; rate 35
    current = limiter.bucket.max_rate
    assert current == pytest.approx(35.0)
    limiter.clocker.measured_rate = 1000.0
    clock.now = 0.2  # same 0.5 s bucket: measured stays 1000
    rate = limiter.on_response(throttled=True)
    assert limiter.cubic.w_max == pytest.approx(current)
    assert rate == pytest.approx(0.7 * current)


# --- retry delays -------------------------------------------------------------------


def test_botocore_standard_backoff() -> None:
    half = lambda: 0.5  # noqa: E731
    assert standard_delay_s(1, throttled=True, retry_after_s=None, rand=half) == 0.5
    assert standard_delay_s(3, throttled=True, retry_after_s=None, rand=half) == 2.0
    assert standard_delay_s(10, throttled=True, retry_after_s=None, rand=half) == 10.0  # cap 20
    assert standard_delay_s(1, throttled=False, retry_after_s=None, rand=half) == 0.025
    assert standard_delay_s(1, throttled=True, retry_after_s=1.0, rand=half) == 1.0
    assert standard_delay_s(10, throttled=True, retry_after_s=30.0, rand=half) == 15.0  # t + 5


def test_jittered_delay_honours_retry_after_and_spreads_above_it() -> None:
    rng = random.Random(1)
    first = [jittered_delay_s(1, 1.0, rng) for _ in range(200)]
    assert min(first) >= 1.0 and max(first) <= 1.25
    assert max(first) - min(first) > 0.2  # spread, not all due together
    later = [jittered_delay_s(6, None, rng) for _ in range(200)]
    assert max(later) <= 4.0 and max(later) > 2.0  # capped, and grown
    assert math.isfinite(jittered_delay_s(10_000, None, rng))
    with pytest.raises(ValueError, match="attempt must be >= 1"):
        jittered_delay_s(0, None, rng)


# --- scoring -------------------------------------------------------------------------


def test_a_run_counts_only_when_it_reaches_the_truth() -> None:
    assert run_error({"decisions": 300, "final": 120}, 120, 120) is None
    assert "crashed" in run_error({"failed": "RayTaskError: boom"}, 120, 120)
    assert "3 abandoned" in run_error({"abandoned": 3}, 117, 120)
    assert "1 crashed" in run_error({"crashed": 1}, 119, 120)
    assert "119/120" in run_error({"final": 120}, 119, 120)  # said done, but is not


def test_best_of_the_grid_is_the_fastest_run_that_reached_the_truth() -> None:
    points = [
        {"setting": {"concurrency": 8}, "active_s": 30.0},
        {"setting": {"concurrency": 32}, "active_s": 12.0},
        {"setting": {"concurrency": 128}, "active_s": 5.0, "error": "missed the truth"},
    ]
    assert pick_best(points)["setting"] == {"concurrency": 32}
    assert pick_best([points[2]]) is None
    assert pick_best([]) is None
    assert "concurrency" in peer_error("fanout", [points[2]])


def test_targets_compare_only_a_peer_that_has_a_best_run() -> None:
    ref = {"active_s": 10.0, "rate_limited_share": 0.01}
    targets = peer_targets("fanout", {"active_s": 12.0, "rate_limited_share": 0.05}, ref)
    wall = targets["fanout.wall_to_driver_review_ratio"]
    assert wall["value"] == pytest.approx(1.2) and wall["met"]
    share = targets["fanout.rate_limited_share_minus_driver_review"]
    assert share["value"] == pytest.approx(0.04) and share["met"]
    faster = peer_targets("x", {"active_s": 5.0, "rate_limited_share": 0.0}, ref)
    assert not faster["x.wall_to_driver_review_ratio"]["met"]
    assert not faster["x.rate_limited_share_minus_driver_review"]["met"]


# --- CPU accounting of the ceiling scenario ------------------------------------------


def test_spent_counts_growth_per_process_and_new_processes_from_zero() -> None:
    from jobs.bench.cpu import spent_s

    assert spent_s({1: 2.0, 2: 1.0}, {1: 3.5, 2: 1.0, 3: 0.25}) == pytest.approx(1.75)
    assert spent_s({1: 2.0}, {}) == 0.0  # a process gone: nothing more to count


def test_tree_cpu_sees_this_process_spend_cpu() -> None:
    from jobs.bench.cpu import tree_cpu_s

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    before = tree_cpu_s([os.getpid()])
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # bounded busy loop
        pass
    after = tree_cpu_s([os.getpid()])
    assert after[os.getpid()] - before[os.getpid()] >= 0.2


# A parent that, like Ray's raylet, never adds the children it reaps to its own CPU
# (SIGCHLD ignored: the kernel reaps them), with one child that burns 0.6 s and exits.
_REAPER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass"])
time.sleep(float(sys.argv[1]))
"""


def test_tree_cpu_counts_a_process_that_exited_before_the_end() -> None:
    import subprocess

    from jobs.bench.cpu import TreeCpu, spent_s, tree_cpu_s

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    parent = subprocess.Popen([sys.executable, "-c", _REAPER, "4"])
    try:
        before = tree_cpu_s([parent.pid])  # Popen returns once the parent exists
        with TreeCpu([parent.pid], interval_s=0.05) as meter:
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline and len(tree_cpu_s([parent.pid])) < 2:
                time.sleep(0.02)  # the burner started
            while time.monotonic() < deadline and len(tree_cpu_s([parent.pid])) > 1:
                time.sleep(0.02)  # ... and is gone
        after = tree_cpu_s([parent.pid])
    finally:
        parent.kill()
        parent.wait()
    assert spent_s(before, after) < 0.3  # read at the end only, the burner is missed
    assert meter.spent_s >= 0.4 and meter.readings >= 3


def test_tree_cpu_refuses_a_bad_interval() -> None:
    from jobs.bench.cpu import TreeCpu

    with pytest.raises(ValueError, match="interval_s must be > 0"):
        TreeCpu([1], interval_s=0)


def _step(rate: float, calls: int, refused: int, errors: int = 0) -> dict:
    return {
        "rate_per_s": rate,
        "calls": calls,
        "rate_limited_calls": refused,
        "rate_limited_share": refused / calls if calls else None,
        "transport_errors": errors,
    }


def test_the_paced_reference_is_the_fastest_step_within_one_percent_of_429s() -> None:
    steps = [_step(58.8, 117, 30), _step(57.0, 114, 2), _step(54.0, 108, 1)]
    # 57/s refused 1.75%: too many; 54/s refused 0.93%, served 53.5/s of 60.
    assert best(steps, 60.0) == pytest.approx(54.0 * (1 - 1 / 108) / 60.0)
    assert best([_step(58.8, 117, 0)], 60.0) == pytest.approx(0.98)
    # A step with transport errors, or none within 1%, is no reference.
    assert best([_step(58.8, 117, 0, errors=3)], 60.0) is None
    assert best([_step(30.0, 60, 6)], 60.0) is None
    assert best([], 60.0) is None


def test_the_paced_client_refuses_a_bad_limit_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobs.bench.paced", "http://127.0.0.1:9", "--limit", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--limit and --step-s must be > 0" in done.stderr

"""Each rate-limiter shape on a fake clock: what it admits, refuses and delays, as the real
servers do (nginx's integer millisecond arithmetic, HAProxy counting denied requests)."""

from __future__ import annotations

import httpx
import pytest

from driver_review.errors import ConfigError
from driver_review.sim import SimServer, SimSettings
from driver_review.sim.cli import settings_from_args
from driver_review.sim.limiters import (
    SHAPES,
    WINDOWED,
    FixedWindow,
    HaproxyRate,
    NginxLeaky,
    SlidingCounter,
    SlidingLog,
    make_shape,
)


def admitted_at(shape, times: list[float]) -> list[bool]:
    return [shape.admit(t).admitted for t in times]


def test_nginx_without_burst_needs_a_whole_period_in_milliseconds() -> None:
    leaky = NginxLeaky(60)  # 16.67 ms per request; nginx counts whole milliseconds
    assert admitted_at(leaky, [0.0, 0.016, 0.017, 0.034, 0.050]) == [True, False, True, True, False]
    refused = leaky.admit(0.0505)
    assert not refused.admitted and refused.wait_s == pytest.approx(0.001)


def test_nginx_burst_nodelay_admits_the_burst_at_once_then_the_rate() -> None:
    leaky = NginxLeaky(10, 5, nodelay=True)
    first = admitted_at(leaky, [0.0] * 8)
    assert first == [True] * 6 + [False] * 2  # the first plus burst=5
    assert all(leaky.admit(0.0).delay_s == 0 for _ in range(1))
    assert admitted_at(leaky, [0.099, 0.100, 0.150, 0.200]) == [False, True, False, True]


def test_nginx_burst_with_delay_holds_the_excess_instead_of_refusing() -> None:
    leaky = NginxLeaky(10, 3, nodelay=False)
    verdicts = [leaky.admit(0.0) for _ in range(5)]
    assert [v.admitted for v in verdicts] == [True, True, True, True, False]
    assert [v.delay_s for v in verdicts[:4]] == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_fixed_window_resets_on_the_clock_boundary() -> None:
    fixed = FixedWindow(5)
    assert admitted_at(fixed, [0.9] * 6) == [True] * 5 + [False]
    assert fixed.admit(0.95).wait_s == pytest.approx(0.05)
    assert admitted_at(fixed, [1.0] * 5) == [True] * 5  # ten inside 0.1 s: fixed windows allow it


def test_sliding_log_admits_limit_in_any_trailing_window() -> None:
    log = SlidingLog(5)
    assert admitted_at(log, [0.9] * 6) == [True] * 5 + [False]
    assert not log.admit(1.0).admitted and log.admit(1.9).admitted


def test_sliding_counter_weighs_the_previous_window() -> None:
    counter = SlidingCounter(10)
    assert admitted_at(counter, [0.5] * 10) == [True] * 10
    # At 1.5 half of the previous window still counts: 5 of 10 used.
    assert admitted_at(counter, [1.5] * 6) == [True] * 5 + [False]
    refused = counter.admit(1.5)
    assert refused.wait_s > 0 and counter.admit(1.5 + refused.wait_s + 1e-6).admitted


def test_haproxy_counts_denied_requests_so_sending_over_keeps_it_shut() -> None:
    table = HaproxyRate(10)
    assert admitted_at(table, [0.01 * i for i in range(15)]) == [True] * 10 + [False] * 5
    # Next period: the previous 15 weigh in as they slide out, denied ones included.
    assert not table.admit(1.05).admitted  # 1 + 15 * 0.95 > 10
    assert table.admit(2.5).admitted


def test_make_shape_names_every_shape_and_refuses_others() -> None:
    for name in SHAPES:
        assert make_shape(name, 50).rate == 50
    with pytest.raises(ValueError, match="unknown limiter shape 'nope'"):
        make_shape("nope", 50)
    with pytest.raises(ValueError, match="rate must be a positive number"):
        make_shape("fixed", 0)


@pytest.mark.parametrize("name", WINDOWED)
def test_a_window_shape_counts_its_quota_over_the_window_given(name: str) -> None:
    """600 a minute: the quota passes at once, then nothing for the rest of the minute."""
    shape = make_shape(name, 10, window_s=60)
    admitted = sum(shape.admit(0.001 * i).admitted for i in range(700))
    assert admitted == 600
    assert not shape.admit(30.0).admitted


def test_sim_limiter_flag_is_validated() -> None:
    import argparse

    from driver_review.sim.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(["--rate-limit", "5", "--limiter", "fixed"])
    assert settings_from_args(ns).limiter == "fixed"
    ns = parser.parse_args(["--rate-limit", "5", "--limiter", "fixed", "--ratelimit-headers"])
    with pytest.raises(ConfigError, match="--ratelimit-headers: only with limiter token"):
        settings_from_args(ns)
    ns = parser.parse_args(["--rate-limit", "5", "--limiter", "fixed", "--rate-window-s", "60"])
    assert settings_from_args(ns).rate_window_s == 60
    ns = parser.parse_args(["--rate-limit", "5", "--rate-window-s", "60"])  # a token bucket
    with pytest.raises(ConfigError, match="--rate-window-s: only with a window limiter"):
        settings_from_args(ns)


@pytest.mark.parametrize(("limiter", "retry_after"), [("fixed", True), ("haproxy", False)])
def test_the_simulator_serves_the_shape(limiter: str, retry_after: bool) -> None:
    settings = SimSettings(drivers=5, seed=1, rate_limit=5, limiter=limiter)
    with SimServer(settings) as sim, httpx.Client(base_url=sim.url, timeout=10) as client:
        answers = [client.get("/v1/drivers", params={"limit": 1}) for _ in range(12)]
    refused = [a for a in answers if a.status_code == 429]
    assert 1 <= len(refused) <= 7
    assert all(("retry-after" in a.headers) == retry_after for a in refused)

"""Long windows, on the fake clock: a quota per minute or per ten seconds, as vendors set
them (the simulator's shapes all count over one second).

Such a window, once its quota is spent, refuses every request at any pace until it turns
over. A governor that reads each 429 as a pace too fast steps its rate down while the
window stays shut and, without Retry-After, sends on into it: it drew 39% 429s from a fixed
window of 600 a minute and 49% from a HAProxy stick table over a minute (which counts the
refused requests too, so sending on keeps it shut), both after the first minute. Now a 429
for one of the first requests after a pause means *still shut*: the pause doubles (up to a
minute), one request at a time finds out whether it opened, and the rate is left alone.
A spell of 8 s or more without service was a long window: the limit is read as what the
endpoint served from the start of the run that spent the quota until it served again.
"""

from __future__ import annotations

import math

import pytest

from driver_review import governor as gv
from driver_review.config import GovernorConfig
from driver_review.governor import RateGovernor
from driver_review.sim.limiters import FixedWindow, HaproxyRate, Shape, SlidingCounter, SlidingLog
from tests.support.rate_sim import simulate

RATE = 10.0  # requests/s on average: 600 a minute
DURATION_S = 600.0
COLD_S = 60.0  # the first minute: slow start spends the first window's quota at once


class WindowServer:
    """A long-window shape, its 429 with ``Retry-After`` (whole seconds) or without."""

    def __init__(self, shape: Shape, *, retry_after: bool) -> None:
        self.shape, self.retry_after = shape, retry_after

    def handle(self, t: float) -> tuple[int, dict[str, str], float]:
        verdict = self.shape.admit(t)
        if verdict.admitted:
            return 200, {}, verdict.delay_s
        wait = str(max(1, math.ceil(verdict.wait_s)))
        return 429, {"Retry-After": wait} if self.retry_after else {}, 0.0


SHAPES = {
    "fixed": FixedWindow,
    "sliding-log": SlidingLog,
    "sliding": SlidingCounter,
    "haproxy": HaproxyRate,
}
#: (shape, window s, Retry-After) -> utilization after the first minute today, under 0.95.
NOT_YET = {
    ("fixed", 10, False): "0.947: its spells, about 7 s, are under a long window's 8 s and"
    " read as paces, until one that the doubling pauses drew out past it",
    ("haproxy", 60, False): "0.562: it reopens between two of the doubling pauses, up to a"
    " minute apart, and its quota over that whole time reads low",
}
CASES = [
    ("fixed", 60, True),
    ("fixed", 60, False),
    ("fixed", 10, True),
    ("fixed", 10, False),
    ("sliding-log", 60, True),
    ("sliding", 60, True),
    ("haproxy", 60, False),
    ("haproxy", 10, False),
]


def _run(name: str, window_s: int, retry_after: bool):
    """A run that starts 0.37 of a window after one turned over: windows turn over with
    the clock, so a sweep spends its first one part of the way through."""
    shape = SHAPES[name](RATE, window_s)
    start = 0.37 * window_s
    run = simulate(
        WindowServer(shape, retry_after=retry_after),
        start_s=start,
        duration_s=start + DURATION_S,
        latency_s=0.02,
        jitter_s=0.001,
        processes=3,
    )
    return run, start


def _id(name: str, window_s: int, retry_after: bool) -> str:
    return f"{name}-{window_s}s-{'retry-after' if retry_after else 'bare'}"


@pytest.mark.parametrize(
    ("name", "window_s", "retry_after"), [pytest.param(*c, id=_id(*c)) for c in CASES]
)
def test_a_spent_window_is_waited_out_not_hammered(
    name: str, window_s: int, retry_after: bool
) -> None:
    run, start = _run(name, window_s, retry_after)
    end = start + DURATION_S
    after, overall = run.share_429(start + COLD_S, end), run.share_429(start, end)
    print(f"{_id(name, window_s, retry_after)}: 429s {after:.2%} after the first minute")
    assert after <= 0.01
    assert overall <= 0.04  # slow start's burst into the first window included


@pytest.mark.parametrize(
    ("name", "window_s", "retry_after"),
    [
        pytest.param(
            *c,
            id=_id(*c),
            marks=[pytest.mark.xfail(strict=True, reason=f"today {NOT_YET[c]}")]
            if c in NOT_YET
            else [],
        )
        for c in CASES
    ],
)
def test_a_long_window_is_paced_near_its_quota(name: str, window_s: int, retry_after: bool) -> None:
    run, start = _run(name, window_s, retry_after)
    utilization = run.served_rate(start + COLD_S, start + DURATION_S) / RATE
    print(f"{_id(name, window_s, retry_after)}: utilization {utilization:.3f} after 60 s")
    assert utilization >= 0.95


def _served(gov: RateGovernor, n: int, start: float, end: float) -> None:
    for i in range(n):
        sent = start + (end - start) * i / n
        gov.observe(200, {}, sent, sent_at=sent)


def test_still_shut_doubles_the_pause_probes_one_request_at_a_time_then_reads_the_window() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=50.0))
    _served(gov, 600, 0.0, 2.0)  # a quota of 600 spent in two seconds
    gov.on_429(None, 2.0)  # the 429 that is news: a decision, then an echo ...
    for i in range(1, 40):
        gov.on_429(None, 2.0 + i * 0.005)
    assert gov.stats()["echo_pauses"] == 1
    rate, resumed = gov.rate, 2.2 + gov.paused_for_s(2.2)
    pauses = []
    for i in range(8):  # the first request after each pause is refused: still shut
        grant = gov.lease(8, resumed)
        if i:  # once shut, one request finds out, and the others wait for its answer
            assert len(grant.delays_s) == 1
            assert gov.lease(8, resumed + 0.01).delays_s == ()
        gov.on_429(None, resumed + 0.02, sent_at=resumed)
        pauses.append(round(gov.paused_for_s(resumed + 0.02), 2))
        assert gov.rate == rate and gov.stats()["decreases"] == 1
        resumed += 0.02 + pauses[-1]
    assert pauses == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert gov.stats()["shut_pauses"] == 8
    # Served again: 600 over the time from the run that spent them, about a window each.
    gov.observe(200, {}, resumed + 0.02, sent_at=resumed)
    horizon = resumed + 0.02 - 0.0
    assert gov.stats()["limit_estimate"] == pytest.approx(601 / horizon, rel=0.01)
    assert gov.rate == pytest.approx(gv.SETTLE * 601 / horizon, rel=0.01)
    assert gov.stats()["window_s"] == pytest.approx(horizon, rel=0.01)
    assert gov.lease(8, resumed + 0.1).delays_s  # open: leases as before
    assert gov.learnt()["window_s"] == pytest.approx(horizon, rel=0.01)


def test_a_retry_after_pause_that_ends_a_short_spell_changes_nothing() -> None:
    """A bucket refills, and a one-second window turns over, in the pause the server asked
    for: the first requests after it are served, and the spell ends there, read as before."""
    gov = RateGovernor(GovernorConfig(initial_rate=50.0))
    _served(gov, 100, 0.0, 1.0)
    gov.on_429(1.0, 1.0)
    rate = gov.rate
    gov.observe(200, {}, 2.05, sent_at=2.01)
    assert gov.stats()["shut_pauses"] == 0 and gov.stats()["window_s"] is None
    assert gov.rate == rate

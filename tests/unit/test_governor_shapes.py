"""Cold discovery on every limiter shape, on the fake clock: over 60 s of saturating
demand, at least 0.95 of the limit with at most 1% 429s (the target).

Cases not met yet are strict xfails naming the figure today, so the gap stays visible and
a governor change that closes one shows up as an XPASS to promote.
"""

from __future__ import annotations

import pytest

from driver_review import governor as gv
from driver_review.config import GovernorConfig
from driver_review.governor import RateGovernor
from tests.support.rate_sim import GlitchServer, ShapeServer, TokenBucketServer, simulate

DURATION_S = 60.0
LATENCY_S = 0.02
#: (shape, whether its 429 says Retry-After): the sim's windows do; nginx and HAProxy don't.
SHAPES = [
    ("token", True),
    ("leaky", False),
    ("leaky-burst", False),
    ("leaky-delay", False),
    ("fixed", True),
    ("sliding", True),
    ("sliding-log", True),
    ("haproxy", False),
]
#: (shape, limit) -> utilization and 429 share measured today, below the target.
NOT_YET = {
    ("token", 60): "0.858",
    ("token", 150): "0.888",
    ("leaky", 10): "0.955, 1.2% 429s",
    ("leaky", 60): "0.916 (nginx without burst: 17 ms apart, 58.8/s at most)",
    ("leaky", 150): "0.884",
    ("leaky-burst", 60): "0.948",
    ("fixed", 10): "0.928",
    ("fixed", 60): "0.871",
    ("fixed", 150): "0.898",
    ("sliding", 10): "0.847",
    ("sliding", 60): "0.861",
    ("sliding", 150): "0.858",
    ("sliding-log", 10): "0.947",
    ("sliding-log", 60): "0.801",
    ("sliding-log", 150): "0.872",
    ("haproxy", 10): "0.892, 4.1% 429s (0.908 and 9% before the echo pause)",
    ("haproxy", 60): "0.914, 1.1% 429s (0.837 and 17% before the echo pause)",
    ("haproxy", 150): "0.907, 0.56% 429s (0.316 and 5% before the echo pause)",
}


def _cases() -> list:
    out = []
    for name, retry_after in SHAPES:
        for rate in (10, 60, 150):
            marks = (
                [pytest.mark.xfail(strict=True, reason=f"today {NOT_YET[name, rate]}")]
                if (name, rate) in NOT_YET
                else []
            )
            out.append(pytest.param(name, retry_after, rate, marks=marks, id=f"{name}-{rate}"))
    return out


@pytest.mark.parametrize(("name", "retry_after", "rate"), _cases())
def test_cold_discovery_holds_on_every_shape(name: str, retry_after: bool, rate: float) -> None:
    run = simulate(
        ShapeServer(name, rate, retry_after=retry_after), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    utilization = run.served_rate(0, DURATION_S) / rate
    share = run.share_429(0, DURATION_S)
    first_15s = sum(1 for t, s in run.log if t < 15 and s == 429)
    print(
        f"{name} at {rate}/s: utilization {utilization:.3f}, 429 share {share:.4f}, "
        f"429s in the first 15 s {first_15s}"
    )
    assert utilization >= 0.95 and share <= 0.01


@pytest.mark.parametrize("name", ["leaky-burst", "leaky-delay"])
def test_without_retry_after_the_bracket_closes_after_each_hold(name: str) -> None:
    """A 429 without Retry-After costs one request, not a pause: after a rate holds, the
    governor bisects up to the last 429 even when it is near (it stayed at 0.85 before)."""
    run = simulate(
        ShapeServer(name, 60, retry_after=False), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    assert run.served_rate(30, DURATION_S) >= 0.96 * 60
    assert run.share_429(30, DURATION_S) <= 0.01


def test_an_echo_of_refusals_that_count_pauses_instead_of_locking_out() -> None:
    """HAProxy counts the requests it denies: sending on after an overshoot, even at a
    lower rate, keeps its count over the limit (0.32 of the limit at 150/s before). After
    a decrease, 429s that outnumber successes pause the endpoint for its window instead."""
    run = simulate(
        ShapeServer("haproxy", 150, retry_after=False), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    assert run.gov.stats()["echo_pauses"] >= 1
    assert run.served_rate(0, DURATION_S) >= 0.8 * 150
    assert run.share_429(0, DURATION_S) <= 0.03


def test_without_retry_after_slow_start_falls_back_to_the_rate_that_held() -> None:
    """A 429 without Retry-After ends slow start at the rate before its last doubling (it
    went a whole interval without a 429), not in the middle of the bracket: the middle is
    over the limit as often as not, and HAProxy, which counts what it refuses, shuts for a
    second each time. With Retry-After the pause is paid already: bisect."""
    gov = RateGovernor(GovernorConfig(initial_rate=160))
    gov.on_429(None, 0.0)
    assert gov.stats()["safe_rate"] == 80 and gov.rate == pytest.approx(gv.SETTLE * 80)
    paused = RateGovernor(GovernorConfig(initial_rate=160))
    paused.on_429(1.0, 0.0)
    assert paused.rate == pytest.approx(gv.SETTLE * (80 + 160) / 2)
    for rate in (60, 150):
        run = simulate(
            ShapeServer("haproxy", rate, retry_after=False),
            duration_s=DURATION_S,
            latency_s=LATENCY_S,
        )
        # Before: 0.876 / 2.4% and 0.860 / 2.0% (one bisection more above the limit).
        print(
            f"haproxy {rate}/s: utilization {run.served_rate(0, DURATION_S) / rate:.3f}, "
            f"429 share {run.share_429(0, DURATION_S):.4f}"
        )
        assert run.served_rate(0, DURATION_S) >= 0.9 * rate
        assert run.share_429(0, DURATION_S) <= 0.015


def test_one_429_without_retry_after_among_a_few_answers_bounds_nothing() -> None:
    """Early in slow start one 429 among six answers reads as the server serving under 0.9
    of what it was sent, but says nothing of where its limit is: a bound read from it (5.4/s
    against nginx at 10/s, no burst) held the rate near half the limit for a minute. A 429
    without Retry-After costs one request, so it takes three before what was served bounds
    the limit; one with Retry-After pauses, and there one is all there will be."""
    for retry_after, bound in ((None, 20.0), (1.0, 5 / 0.3)):
        gov = RateGovernor(GovernorConfig(initial_rate=20))
        for i in range(6):
            gov.lease(1, i * 0.05)
            if i < 5:
                gov.observe(200, {}, i * 0.05 + 0.01)
        gov.on_429(retry_after, 0.3)
        assert gov.stats()["limit_estimate"] == pytest.approx(bound)


def test_what_nginx_without_burst_serves_while_refusing_is_no_bound_below_a_held_rate() -> None:
    """Sent 12.2/s, nginx at 10/s without burst serves every other request: 6.1/s. Read as
    the limit showing through, that bound held the rate at 0.69 of the limit for a minute;
    a rate that held for ``HOLD_S`` says the limit is no lower than that."""
    run = simulate(ShapeServer("leaky", 10, retry_after=False), duration_s=DURATION_S)
    print(f"leaky 10/s: utilization {run.served_rate(0, DURATION_S) / 10:.3f}")
    assert run.gov.stats()["limit_estimate"] >= 9.5
    assert run.served_rate(0, DURATION_S) >= 0.9 * 10


@pytest.mark.parametrize("name", ["leaky-burst", "leaky-delay", "leaky"])
def test_a_limiter_that_serves_its_limit_through_an_overshoot_is_no_echo(name: str) -> None:
    """nginx serves its rate while refusing the rest: no echo pause there."""
    run = simulate(
        ShapeServer(name, 60, retry_after=False), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    assert run.gov.stats()["429s"] > 0 and run.gov.stats()["echo_pauses"] == 0


@pytest.mark.parametrize(("name", "retry_after"), [("token", True), ("leaky-burst", False)])
def test_successes_heard_a_lease_late_from_several_processes(name: str, retry_after: bool) -> None:
    """As Ray's workers are: four processes lease apart, each hears of a void only from the
    governor, and reports its successes with its next lease while a 429 goes at once. The
    governor then judges a 429 against a served rate that reads low, and the other
    processes spend what they hold at the old pace. Today: token 0.865 with 0.80% 429s,
    nginx with a burst 0.960 with 1.59% (0.858 / 0.29% and 0.957 / 0.92% heard at once)."""
    run = simulate(
        ShapeServer(name, 60, retry_after=retry_after),
        duration_s=DURATION_S,
        latency_s=LATENCY_S,
        processes=4,
    )
    print(
        f"{name}: utilization {run.served_rate(0, DURATION_S) / 60:.3f}, "
        f"429 share {run.share_429(0, DURATION_S):.4f}"
    )
    assert run.served_rate(0, DURATION_S) >= 0.85 * 60
    assert run.share_429(0, DURATION_S) <= 0.02


#: (limit, burst, glitch at s) -> utilization over [10 s, 60 s] today, below 0.9.
GLITCHED = {
    (15, 3, 1.0): "0.296",
    (15, 3, 2.0): "0.793",
    (100, 20, 1.0): "0.044",
    (100, 20, 2.0): "0.354",
}


@pytest.mark.parametrize(
    ("rate", "burst", "at"),
    [
        pytest.param(
            *case,
            marks=pytest.mark.xfail(strict=True, reason=f"today {today}"),
            id=f"{case[0]}-at-{case[2]:g}s",
        )
        for case, today in GLITCHED.items()
    ],
)
def test_one_glitch_in_slow_start_is_left_within_seconds(
    rate: float, burst: int, at: float
) -> None:
    """One 429 early in slow start that says nothing of the limit (a vendor's hiccup; in
    full suite runs on a loaded machine, a client's stall sending its held-back requests
    as one burst: 17.7/s learnt of 100, 6/s settled of 15) sets a bound far under it, and
    the probe takes a minute and a half to leave it. Target: 0.9 of the limit from 10 s.

    Tried: stepping over a bound no 429 has met again after each hold (5%, then 10%, ...,
    then slow start; a 429 to a step goes back to the rate that held before the steps and
    confirms the bound): 0.82-0.91 here, but the extra crossing of a true limit costs a
    Retry-After pause: a token bucket with a burst fell from 0.885 to 0.855 of its limit
    over a minute, the cold grid's mean from 0.909 to 0.906 with two shapes fewer on
    target. Left for a test that tells a glitch from a limit without crossing it."""
    run = simulate(
        GlitchServer(TokenBucketServer(rate, burst), at), duration_s=60.0, latency_s=LATENCY_S
    )
    utilization = run.served_rate(10, 60) / rate
    print(f"{rate}/s, glitch at {at}s: utilization from 10 s {utilization:.3f}")
    assert utilization >= 0.9

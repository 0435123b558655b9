"""Cold discovery on every limiter shape, on the fake clock: over 60 s of saturating
demand, at least 0.95 of the limit with at most 1% 429s (the target).

Cases not met yet are strict xfails naming the figure today, so the gap stays visible and
a governor change that closes one shows up as an XPASS to promote.
"""

from __future__ import annotations

import pytest

from tests.support.rate_sim import ShapeServer, simulate

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
    ("leaky", 60): "0.719 (nginx without burst: 17 ms apart, 58.8/s at most)",
    ("leaky", 150): "0.899",
    ("leaky-burst", 10): "0.907",
    ("leaky-delay", 10): "0.918",
    ("fixed", 10): "0.928",
    ("fixed", 60): "0.871",
    ("fixed", 150): "0.898",
    ("sliding", 10): "0.847",
    ("sliding", 60): "0.861",
    ("sliding", 150): "0.858",
    ("sliding-log", 10): "0.947",
    ("sliding-log", 60): "0.801",
    ("sliding-log", 150): "0.872",
    ("haproxy", 10): "0.908, 3.5% 429s (0.908 and 9% before the echo pause)",
    ("haproxy", 60): "0.876, 2.4% 429s (0.837 and 17% before the echo pause)",
    ("haproxy", 150): "0.860, 2.0% 429s (0.316 and 5% before the echo pause)",
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

"""Cold discovery on every limiter shape, on the fake clock: over 60 s of saturating
demand, at least 0.95 of the limit with at most 1% 429s (the target).

Beside each figure, what a governor that *knew* the limit from its first 429 on gets
(:class:`~tests.support.rate_sim.KnowingGovernor`: the same slow start, one Retry-After
honoured, then the rate held at SETTLE of the limit): 0.95-0.97 where a 429 says
Retry-After, so there the target asks for all but perfect knowledge after one 429.

Cases not met yet are strict xfails naming the figure today, so the gap stays visible and
a governor change that closes one shows up as an XPASS to promote. Every case is also held
near the knowing figure, so that no shape falls far behind while another gains.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.rate_sim import (
    GlitchServer,
    ShapeServer,
    TokenBucketServer,
    best_paced_utilization,
    knowing_utilization,
    simulate,
)
from tests.support.shape_grid import SHAPES

DURATION_S = 60.0
LATENCY_S = 0.02
#: (shape, limit) -> why the target cannot be met there: the shape serves less than 0.95 of
#: its nominal limit to any client.
CANNOT = {
    ("sliding", 10): "the two-window estimate admits while prev * (1 - f) + curr + 1 <= 10:"
    " 9/s at a steady pace, 0.9 of the limit",
    ("leaky", 150): "nginx passes requests at least ceil(1000 / 150) = 7 ms apart: 142.9/s,"
    " 0.952 of the limit, so 0.95 needs 0.998 of that",
}
#: (shape, limit) -> utilization and 429 share today, below the target; the knowing
#: governor's figure in brackets.
NOT_YET = {
    ("token", 60): "0.941 (0.953)",
    ("token", 150): "0.937 (0.950)",
    ("leaky", 60): "0.914 (0.962)",
    ("leaky-burst", 10): "1.000, 1.8% 429s (0.977)",
    ("leaky-delay", 10): "0.997, 1.8% 429s (0.980)",
    ("fixed", 10): "0.927 (0.968)",
    ("fixed", 60): "0.912 (0.965)",
    ("fixed", 150): "0.899 (0.958)",
    ("sliding", 60): "0.903 (0.961)",
    ("sliding", 150): "0.905 (0.957)",
    ("sliding-log", 10): "0.920 (0.968)",
    ("sliding-log", 60): "0.930 (0.960)",
    ("sliding-log", 150): "0.929 (0.956)",
    ("haproxy", 10): "0.935, 2.4% 429s (0.962)",
    ("haproxy", 60): "0.949 (0.960)",
    ("haproxy", 150): "0.920, 1.04% 429s (0.957)",
}


def _cases() -> list:
    out = []
    for name, retry_after in SHAPES:
        for rate in (10, 60, 150):
            why = CANNOT.get((name, rate)) or (
                f"today {NOT_YET[name, rate]}" if (name, rate) in NOT_YET else None
            )
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(name, retry_after, rate, marks=marks, id=f"{name}-{rate}"))
    return out


def _run(name: str, retry_after: bool, rate: float) -> tuple[float, float, float]:
    """Utilization, 429 share, and what the knowing governor gets on the same shape."""
    run = simulate(
        ShapeServer(name, rate, retry_after=retry_after), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    knowing = knowing_utilization(
        ShapeServer(name, rate, retry_after=retry_after),
        rate,
        duration_s=DURATION_S,
        latency_s=LATENCY_S,
    )
    utilization = run.served_rate(0, DURATION_S) / rate
    share = run.share_429(0, DURATION_S)
    print(
        f"{name} at {rate}/s: utilization {utilization:.3f} (knowing the limit {knowing:.3f}), "
        f"429 share {share:.4f}"
    )
    return utilization, share, knowing


@pytest.mark.parametrize(("name", "retry_after", "rate"), _cases())
def test_cold_discovery_holds_on_every_shape(name: str, retry_after: bool, rate: float) -> None:
    utilization, share, _ = _run(name, retry_after, rate)
    assert utilization >= 0.95 and share <= 0.01


@pytest.mark.parametrize(
    ("name", "retry_after", "rate"),
    [
        pytest.param(name, ra, rate, id=f"{name}-{rate}")
        for name, ra in SHAPES
        for rate in (10, 60, 150)
        if (name, rate) not in CANNOT
    ],
)
def test_cold_discovery_stays_near_what_knowing_the_limit_gets(
    name: str, retry_after: bool, rate: float
) -> None:
    """No shape far behind: within 0.1 of the knowing governor, and few 429s (at 10/s a
    minute is 600 requests: 1% is six 429s, two of them the first)."""
    utilization, share, knowing = _run(name, retry_after, rate)
    assert utilization >= knowing - 0.1
    assert share <= (0.03 if rate <= 10 else 0.015)


@pytest.mark.parametrize("name", ["leaky-burst", "leaky-delay"])
def test_without_retry_after_the_rate_settles_at_the_limit(name: str) -> None:
    """A 429 without Retry-After costs a request: after the first half minute the rate
    runs at the limit, a 429 now and then (the rate climbs so that about 0.3% draw one)."""
    run = simulate(
        ShapeServer(name, 60, retry_after=False), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    assert run.served_rate(30, DURATION_S) >= 0.96 * 60
    assert run.share_429(30, DURATION_S) <= 0.01


def test_an_echo_of_refusals_that_count_pauses_instead_of_locking_out() -> None:
    """HAProxy counts the requests it denies: sending on after an overshoot, even at a
    lower rate, keeps its count over the limit (0.32 of the limit at 150/s once). After a
    decision, 429s that outnumber successes pause the endpoint for its window instead,
    and its 429s count as costly from then on."""
    run = simulate(
        ShapeServer("haproxy", 150, retry_after=False), duration_s=DURATION_S, latency_s=LATENCY_S
    )
    assert run.gov.stats()["echo_pauses"] >= 1
    assert run.served_rate(0, DURATION_S) >= 0.85 * 150
    assert run.share_429(0, DURATION_S) <= 0.015


def test_nginx_without_burst_is_found_though_what_it_serves_while_refusing_is_less() -> None:
    """Sent faster than its rate, nginx without burst serves every other request: half the
    pace, under its limit. Slow start ends on a bucket reading far under the limit (5 of
    10 per second served); seeking on from it finds the limit within seconds (0.944 of it
    from 10 s on)."""
    run = simulate(ShapeServer("leaky", 10, retry_after=False), duration_s=DURATION_S)
    print(f"leaky 10/s: utilization {run.served_rate(0, DURATION_S) / 10:.3f}")
    assert (run.gov.stats()["limit_estimate"] or 0) >= 9.0
    assert run.served_rate(10, DURATION_S) >= 0.9 * 10


@pytest.mark.parametrize(
    ("jitter_s", "rate"), [(0.002, 10), (0.002, 60), (0.002, 150), (0.005, 10), (0.005, 60)]
)
def test_nginx_without_burst_under_arrival_jitter_settles_where_the_jitter_allows(
    jitter_s: float, rate: float
) -> None:
    """nginx without burst refuses a request closer than 1/rate to the last one it passed,
    so requests that leave up to ``jitter_s`` late (an event loop, a connection) are
    refused well under the limit: no client with that jitter serves much more than
    ``1 / (1 / rate + jitter_s)``. The best fixed pace that knows both the limit and the
    jitter, at most 1% of its requests refused, is the bound (2 ms at 60/s: 0.896 of the
    limit, what the benchmark's paced client gets from real nginx). From 20 s on, discovery
    serves within 0.95 of it (today 0.962-0.993; the cold start costs 0.03-0.04 more over
    the whole minute), with at most 1% 429s."""
    bound = best_paced_utilization("leaky", rate, jitter_s=jitter_s, duration_s=DURATION_S)
    run = simulate(
        ShapeServer("leaky", rate, retry_after=False),
        duration_s=DURATION_S,
        latency_s=LATENCY_S,
        jitter_s=jitter_s,
    )
    settled = run.served_rate(20, DURATION_S) / rate
    share = run.share_429(0, DURATION_S)
    print(
        f"leaky {rate}/s, jitter {jitter_s * 1000:.0f} ms: from 20 s on {settled:.3f} of the "
        f"limit, the best fixed pace {bound:.3f}; 429 share {share:.4f}"
    )
    assert 0.0 < bound < 1.0
    assert settled >= 0.95 * bound and share <= 0.01


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
    governor then reads a 429 against a served count that is low, and reads it again once
    the reports are in. Today: token 0.938 with 0.38% 429s, nginx with a burst 0.991 with
    0.61% (0.931 / 0.12% and 0.987 / 0.56% heard at once)."""
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
    assert run.served_rate(0, DURATION_S) >= 0.9 * 60
    assert run.share_429(0, DURATION_S) <= 0.01


def test_a_void_never_hands_out_a_slot_a_process_still_holds() -> None:
    """Four processes, nginx without burst at 60/s: a process hears that its permits are
    void only when it next leases. A new schedule that began where the voided one did gave
    the same slots twice, two requests at once, both of a pair refused by a limiter on
    spacing, and each pair a new decision: 0.39 of the limit for a minute. Each slot is
    handed out once now."""
    run = simulate(
        ShapeServer("leaky", 60, retry_after=False),
        duration_s=DURATION_S,
        latency_s=LATENCY_S,
        processes=4,
    )
    sends = sorted(t - LATENCY_S for t, _ in run.log)
    pairs = sum(1 for a, b in itertools.pairwise(sends) if b - a < 1e-6)
    assert pairs == 0
    assert run.served_rate(0, DURATION_S) >= 0.88 * 60


@pytest.mark.parametrize(
    ("rate", "burst", "at"),
    [
        pytest.param(rate, burst, at, id=f"{rate}-at-{at:g}s")
        for rate, burst in ((15, 3), (100, 20))
        for at in (1.0, 2.0)
    ],
)
def test_one_glitch_in_slow_start_is_left_within_seconds(
    rate: float, burst: int, at: float
) -> None:
    """One 429 early in slow start that says nothing of the limit (a vendor's hiccup; in
    full suite runs on a loaded machine, a client's stall sending its held-back requests
    as one burst) ends slow start far under the limit. Its readings are guesses, so the
    rate seeks on above them: 0.96 of the limit from 10 s at 15/s (0.30 and 0.79 when a
    glitch set a bound the probe took a minute and a half to leave). Target: 0.9. At
    100/s the glitch at 2 s refuses the first request after slow start's pause: the
    endpoint reads as still shut, so the pause doubles and the rate is left alone (it
    was read as a limit, served nothing, and held 0.740 of it from 10 s on)."""
    run = simulate(
        GlitchServer(TokenBucketServer(rate, burst), at), duration_s=60.0, latency_s=LATENCY_S
    )
    utilization = run.served_rate(10, 60) / rate
    print(f"{rate}/s, glitch at {at}s: utilization from 10 s {utilization:.3f}")
    assert utilization >= 0.9


#: Held out while the governor was tuned on the cases above: other limits, latencies of
#: 5 and 80 ms, workers in several processes with their arrivals jittered.
HELD_OUT = [
    pytest.param(name, ra, rate, kw, id=f"{name}-{rate}-{tag}")
    for name, ra in SHAPES
    for rate, kw, tag in (
        (25, {"latency_s": 0.005}, "5ms"),
        (100, {"latency_s": 0.08, "workers": 32}, "80ms"),
        (200, {"latency_s": LATENCY_S, "processes": 3, "jitter_s": 0.002, "seed": 2}, "3proc"),
    )
]


@pytest.mark.parametrize(("name", "retry_after", "rate", "kw"), HELD_OUT)
def test_held_out_shapes_stay_near_what_knowing_the_limit_gets(
    name: str, retry_after: bool, rate: float, kw: dict
) -> None:
    """Within 0.13 of the knowing governor, which is beaten where spacing jittered by
    processes bounds any client (nginx without burst at 200/s, 5 ms apart at most: 0.66
    knowing, 0.72 found) or a steady pace at 0.98 of the limit is over it (the two-window
    estimate at 25/s). Few 429s everywhere. Today the fixed and two-window shapes trail
    by 0.04-0.06 (0.06-0.13 before a refusal at a count held was climbed on from), the
    others by 0.06 at most."""
    run = simulate(ShapeServer(name, rate, retry_after=retry_after), duration_s=DURATION_S, **kw)
    knowing = knowing_utilization(
        ShapeServer(name, rate, retry_after=retry_after), rate, duration_s=DURATION_S, **kw
    )
    utilization = run.served_rate(0, DURATION_S) / rate
    share = run.share_429(0, DURATION_S)
    print(f"{name} {rate}/s {kw}: {utilization:.3f} (knowing {knowing:.3f}), 429s {share:.4f}")
    assert utilization >= knowing - 0.13
    assert share <= 0.02


def test_a_window_read_twice_as_the_same_bucket_is_held_at_its_count() -> None:
    """The two-window estimate at 60/s, four processes sending up to 3 ms late: climbed
    alike twice, it gave the same bucket reading twice (55.2, 55.1) under the 59 it served
    at a steady 60.2/s, and the rate sat at 54 for the rest of the minute (0.859-0.879 of
    the limit over four seeds). Held at the count instead, a window never refuses it: today
    0.909-0.912, 0.911 on average."""
    utilization = [
        simulate(
            ShapeServer("sliding", 60, retry_after=True),
            duration_s=DURATION_S,
            latency_s=LATENCY_S,
            processes=4,
            jitter_s=0.003,
            workers=32,
            seed=seed,
        ).served_rate(0, DURATION_S)
        / 60
        for seed in range(4)
    ]
    assert sum(utilization) / len(utilization) >= 0.89, utilization


def test_a_limiter_that_refuses_at_once_is_read_as_one_that_refuses_late() -> None:
    """nginx, HAProxy and the simulator answer a 429 at once, while what they admit takes
    the server's latency. Read by when answers came back, the successes sent just before a
    429 came after it: a token bucket of 100/s read 87-94 after slow start on the real
    simulator, under the 101 read at the seek's 429, and a third 429 was spent verifying.
    Read by when each request was sent (what the limiter saw), the search takes the same
    path whether a refusal comes back in 1 ms or in the 30 ms a success takes (read by
    when answers came, 90 after slow start here, and three 429s)."""
    runs = [
        simulate(
            TokenBucketServer(100, 20),
            duration_s=30.0,
            latency_s=0.03,
            refuse_latency_s=refuse_s,
            processes=4,
            jitter_s=0.002,
            seed=3,
        )
        for refuse_s in (None, 0.001)
    ]
    same, fast = (r.gov.stats() for r in runs)
    print(
        f"decisions {same['decreases']} / {fast['decreases']}, estimates "
        f"{same['limit_estimate']:.1f} / {fast['limit_estimate']:.1f}, utilization "
        f"{runs[0].served_rate(0, 30) / 100:.3f} / {runs[1].served_rate(0, 30) / 100:.3f}"
    )
    assert fast["decreases"] == same["decreases"] == 2  # slow start's and the seek's
    assert fast["limit_estimate"] == pytest.approx(100.0, rel=0.02)
    assert runs[1].served_rate(0, 30) >= runs[0].served_rate(0, 30) - 1.0

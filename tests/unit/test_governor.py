"""The rate governor's policy on a fake clock, and the permit bucket over it.

Convergence is measured against a simulated token-bucket server in pure Python: a small
discrete-event loop in which clients spend leased permits exactly on time, each request
takes ``latency_s``, and every answer is reported back as the real client would.
"""

from __future__ import annotations

import asyncio
import itertools
from email.utils import formatdate

import pytest

from driver_review import governor as gv
from driver_review.config import GovernorConfig
from driver_review.governor import RateGovernor
from driver_review.limiter import LocalLimiter, PermitBucket
from tests.support.fakes import FakeTime
from tests.support.rate_sim import WALL0, ShapeServer, TokenBucketServer, simulate

# --- discovery ---------------------------------------------------------------------------


def test_slow_start_doubles_each_busy_interval() -> None:
    run = simulate(TokenBucketServer(10_000, 10_000), duration_s=1.2)
    changes: list[tuple[float, float]] = []
    for t, rate, _ in run.rates:
        if not changes or changes[-1][1] != rate:
            changes.append((t, rate))
    assert run.gov.state() == "slow_start" and run.gov.stats()["429s"] == 0
    assert [r for _, r in changes][:6] == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0]
    # Never more than one doubling per interval, and one in every other interval at least
    # (at 5/s an interval of 0.125 s may see no answer, so demand cannot show).
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(changes)]
    assert all(g >= gv.INTERVAL_S - 0.03 for g in gaps) and max(gaps) <= 2 * gv.INTERVAL_S + 0.03


def test_slow_start_waits_for_demand() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=10))
    for i in range(20):  # one request every half second: far below 10/s
        now = i * 0.5
        gov.lease(1, now)
        gov.observe(200, {}, now + 0.01)
    assert gov.rate == 10.0


def test_after_slow_start_each_429_steps_the_rate_down_and_it_climbs_in_small_steps() -> None:
    run = simulate(TokenBucketServer(50, 10), duration_s=180)
    states = {s for _, _, s in run.rates}
    assert {"slow_start", "aimd", "paused"} <= states
    stats = run.gov.stats()
    assert stats["decreases"] >= 2 and stats["429s"] >= stats["decreases"]
    # Each 429 after slow start takes the rate down by a factor read from what the server
    # served (never a collapse), and it climbs back in many small steps: few 429s, and a
    # minute and a half at 0.96 of the limit or better.
    rates = [r for _, r, s in run.rates if s != "slow_start"]
    drops = [b / a for a, b in itertools.pairwise(rates) if b < a]
    rises = sum(1 for a, b in itertools.pairwise(rates) if b > a)
    assert drops and all(0.75 <= d < 1.0 for d in drops)
    assert rises > 20 * len(drops)
    assert run.served_rate(90, 180) >= 0.96 * 50


@pytest.mark.parametrize(("rate", "burst"), [(50, 10), (50, 50), (200, 40), (20, 4)])
def test_converges_near_the_real_limit_with_few_429s(rate: float, burst: int) -> None:
    run = simulate(TokenBucketServer(rate, burst), duration_s=120)
    served = run.served_rate(30, 120)
    share = run.share_429(30, 120)
    print(f"limit {rate}/s burst {burst}: served {served:.2f}/s, 429 share {share:.4f}")
    assert 0.96 * rate <= served <= 1.01 * rate
    assert share < 0.005
    assert run.gov.stats()["limit_estimate"] == pytest.approx(rate, rel=0.1)


@pytest.mark.parametrize(("rate", "burst"), [(50, 10), (100, 20), (200, 40), (20, 4)])
def test_a_rate_a_burst_carried_through_its_hold_is_not_kept_as_safe(
    rate: float, burst: int
) -> None:
    """Bisecting up from a rate that held, the governor tries one a few percent over the
    limit; the bucket's burst pays the difference for longer than a hold (at 54/s against
    50 with a burst of 10, 2.3 s), so that rate passes for safe and is refused just after.
    Kept as the lower bound, every later 429 (each a whole Retry-After second) cost only a
    2% step down; the rate safe before is the lower bound instead. (With it kept, served
    from 7 to 15 s: 0.795, 0.866, 0.923, 0.756 of the limit; over 60 s 0.875, 0.869, 0.862,
    0.896.)"""
    run = simulate(TokenBucketServer(rate, burst), duration_s=60, latency_s=0.005)
    early, whole = run.served_rate(7, 15) / rate, run.served_rate(0, 60) / rate
    print(f"limit {rate}/s burst {burst}: served 7-15 s {early:.3f}, 0-60 s {whole:.3f}")
    assert early >= 0.86 and whole >= 0.885
    assert run.share_429(0, 60) <= 0.005


@pytest.mark.parametrize(
    ("limit", "raised", "steady_s", "found_s"),
    [
        (20.0, 60.0, 40.0, 120.0),
        # Nine minutes at one limit, crossed at the slowest probe (``PROBE_DOUBLING_MOST_S``),
        # then it doubles: the slower probe still finds it within five minutes.
        (50.0, 100.0, 540.0, 300.0),
    ],
)
def test_a_limit_that_rises_is_found_again(
    limit: float, raised: float, steady_s: float, found_s: float
) -> None:
    server = TokenBucketServer(limit, round(limit / 5))
    run = simulate(server, duration_s=steady_s)
    assert run.gov.rate < 1.25 * limit
    server.rate = raised
    end_s = steady_s + found_s
    later = simulate(server, start_s=steady_s, duration_s=end_s, governor=run.gov)
    assert later.served_rate(end_s - 40, end_s) >= 0.85 * raised


@pytest.mark.parametrize(("limit", "lowered"), [(120.0, 50.0), (60.0, 20.0), (100.0, 10.0)])
def test_a_limit_that_falls_is_followed_down(limit: float, lowered: float) -> None:
    """A vendor lowers its limit (a bucket holding 0.2 s of its rate) under a governor
    that knew the old one: the pace is then two to ten times over it, and what the bucket
    serves after each pause is what it refilled, capped by its small burst, so a count
    and the bucket emptied at the 429 before agree far under the new rate. Taken as the
    limit (once tried) that left the rate at 0.66 and 0.52 of it; stepping down by the
    floor instead, the two minutes after serve 0.95, 0.94 and 0.92 of it."""
    server = TokenBucketServer(limit, round(limit / 5))
    run = simulate(server, duration_s=60.0, jitter_s=0.001, processes=3)
    server.rate, server.burst = lowered, max(1, round(lowered / 5))
    later = simulate(
        server, start_s=60.0, duration_s=180.0, governor=run.gov, jitter_s=0.001, processes=3
    )
    served = later.served_rate(60.0, 180.0) / lowered
    share = later.share_429(60.0, 180.0)
    print(f"{limit:g} -> {lowered:g}/s: served {served:.3f} of it, 429s {share:.2%}")
    assert served >= 0.9 and share <= 0.03


@pytest.mark.parametrize(
    ("shape", "least"), [("token", 0.985), ("fixed", 0.973), ("sliding", 0.962)]
)
def test_a_limit_that_stays_put_is_crossed_less_often(shape: str, least: float) -> None:
    """Above a limit it trusts the rate probes up slowly, to notice the limit rising; each
    crossing of one that stayed put costs a Retry-After pause. A crossing that reads the
    same limit again makes the next probe slower (up to ``PROBE_DOUBLING_MOST_S``): over
    the nine minutes after the first, 6 crossings on each shape, served 0.988, 0.977 and
    0.967 of the limit (with the probe's pace fixed: 12, 11 and 12 crossings, a pause
    every 45 s; 0.980, 0.967, 0.955)."""
    server = (
        TokenBucketServer(100, 20)
        if shape == "token"
        else ShapeServer(shape, 100, retry_after=True)
    )
    run = simulate(server, duration_s=600, latency_s=0.02)
    crossings = sum(1 for t, s in run.log if s == 429 and t > 60)
    served = run.served_rate(60, 600) / 100
    print(f"{shape}: {crossings} crossings after the first minute, served {served:.3f}")
    assert crossings <= 7 and served >= least


def test_only_one_decrease_per_burst_of_429s() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=40))
    gov.on_429(None, 1.0)
    after_first = gov.rate
    for i in range(1, 5):
        gov.on_429(None, 1.0 + i * 0.01)
    assert gov.stats()["decreases"] == 1 and gov.stats()["429s"] == 5
    # Out of slow start the limit is bracketed by the last two rates; without Retry-After
    # the rate falls back to the lower one.
    assert after_first == gov.rate == pytest.approx(gv.SETTLE * 20)
    # Five 429s without Retry-After and no success: an echo, so a pause (and 429s still
    # coming back during it are for requests sent before it).
    assert gov.stats()["echo_pauses"] == 1
    gov.on_429(None, 1.0 + gv.HOLDOFF_S + 0.1)  # past the holdoff, still in the pause
    assert gov.stats()["decreases"] == 1
    # The first request after the pause refused too: still shut, so the pause doubles and
    # the rate stays (no pace is served while a window is out).
    resumed = 1.04 + max(gv.HOLDOFF_S, gv.ECHO_PAUSE_S)
    gov.on_429(None, resumed + 0.01)
    assert gov.stats()["decreases"] == 1 and gov.stats()["shut_pauses"] == 1
    assert gov.rate == after_first
    assert gov.paused_for_s(resumed + 0.01) == pytest.approx(2 * gv.ECHO_PAUSE_S)
    # Served once the pause is over; a 429 after that is news again.
    reopened = resumed + 0.01 + 2 * gv.ECHO_PAUSE_S
    gov.observe(200, {}, reopened + 0.02, sent_at=reopened)
    gov.on_429(None, reopened + 0.5)
    assert gov.stats()["decreases"] == 2


def test_a_429_judged_before_the_successes_were_reported_is_judged_again() -> None:
    """Workers report successes with their next lease, 429s at once. A 429 judged at once
    then sees three in four successes missing: the server looks as if it served a quarter
    of its pace, and the estimate falls (as far as one 429 lets it: 15%). Once the reports
    are in (``REPORTED_S`` later) the 429 is read again on them, and the estimate comes
    back (a real HAProxy sweep ran at 20/s for 50 s against a limit of 60 once)."""
    gov = RateGovernor(GovernorConfig(initial_rate=60))
    late: list[float] = []

    def send(t0: float, t1: float, rate: float, heard_every: int) -> None:
        i, t = 0, t0
        while t < t1:
            gov.lease(1, t)
            if i % heard_every == 0:
                gov.observe(200, {}, t)
            else:
                late.append(t)
            i += 1
            t = t0 + i / rate

    send(0.0, 2.0, 60, 1)
    gov.on_429(None, 2.0)
    send(2.0, 3.2, gov.rate, 4)
    for t in (3.2, 3.25, 3.3):  # one decrease, two 429s in its holdoff
        gov.on_429(None, t)
    pace = gov.rate
    send(3.3, 3.75, pace, 4)
    gov.on_429(None, 3.75)
    judged_at_once = gov.stats()["limit_estimate"]
    assert judged_at_once is not None and judged_at_once < 0.9 * pace  # read low
    for t in late:
        gov.observe(200, {}, t)
    gov.lease(1, 3.75 + gv.REPORTED_S + 0.01)
    assert gov.stats()["limit_estimate"] == pytest.approx(pace, rel=0.02)
    assert gov.rate > 0.95 * pace


def test_after_a_decrease_the_next_permit_keeps_its_distance_from_the_last_one_due() -> None:
    """A 429 voids the schedule. The permit leased next must not follow the one just sent
    closer than the new rate allows: a limiter on spacing (nginx without a burst) would
    refuse it, and that 429 would void the schedule again, and again (a 429 every round
    trip on the fake clock before)."""
    gov = RateGovernor(GovernorConfig(initial_rate=50))
    grant = gov.lease(5, 0.0)  # due at 0, 0.02, 0.04, 0.06, 0.08
    last_due = grant.delays_s[2]
    now = last_due + 0.001  # the third was just sent; a 429 comes for an earlier one
    gov.on_429(None, now)
    after = gov.lease(1, now)
    assert after.epoch != grant.epoch
    assert now + after.delays_s[0] >= last_due + 1.0 / gov.rate - 1e-9


def test_a_bucket_whose_burst_carried_slow_start_far_past_its_rate_costs_few_429s() -> None:
    """A bucket of 26 lets slow start double on to 320/s against a limit of 130 before it
    refuses. Read after the pause, what it served says where its rate is (not the pace
    doubled past it): a few Retry-After pauses, not a slow walk down from 320, one at a
    time (eleven 429s before)."""
    run = simulate(TokenBucketServer(130, 26), duration_s=65, workers=32, latency_s=0.012)
    print(
        f"limit 130/s burst 26: {run.gov.stats()['429s']} 429s, "
        f"served {run.served_rate(0, 65):.1f}/s"
    )
    assert run.gov.stats()["decreases"] <= 4
    assert run.served_rate(0, 65) >= 0.9 * 130


def test_rate_stays_within_min_and_max() -> None:
    cfg = GovernorConfig(initial_rate=4, min_rate=2, max_rate=30)
    run = simulate(TokenBucketServer(10_000, 10_000), duration_s=5, config=cfg)
    assert run.gov.rate == 30.0
    gov = RateGovernor(cfg)
    for i in range(40):
        gov.on_429(None, i * 1.0)
    assert gov.rate == 2.0


# --- Retry-After and headers -------------------------------------------------------------


@pytest.mark.parametrize("value", ["3", formatdate(WALL0 + 3, usegmt=True)])
def test_retry_after_pauses_every_permit_until_then(value: str) -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=10), wall_clock=lambda: WALL0)
    first = gov.lease(4, 100.0)
    epoch = gov.observe(429, {"Retry-After": value}, 100.1)
    assert epoch != first.epoch and gov.state(100.2) == "paused"
    assert gov.paused_for_s(100.1) == pytest.approx(3.0)
    # Nothing is granted before the pause ends; the first permit is due exactly then.
    grant = gov.lease(4, 100.5)
    assert grant.delays_s == () and grant.retry_in_s > 0
    asked_at = 100.5 + grant.retry_in_s
    grant = gov.lease(4, asked_at)
    assert asked_at + grant.delays_s[0] == pytest.approx(103.1)
    assert gov.state(103.2) == "aimd"


def test_garbage_retry_after_is_ignored_but_the_429_still_counts() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=10))
    gov.observe(429, {"Retry-After": "whenever"}, 1.0)
    assert gov.state(1.0) == "aimd" and gov.paused_for_s(1.0) == 0


def test_ratelimit_headers_set_the_rate_and_pace() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=5))
    headers = {"RateLimit-Policy": '"default";q=100;w=10', "RateLimit": '"default";r=50;t=4'}
    gov.observe(200, headers, 0.0)
    assert gov.state(0.0) == "header" and gov.rate == pytest.approx(10 * gv.HEADER_MARGIN)
    grant = gov.lease(8, 0.1)
    spacing = [b - a for a, b in itertools.pairwise(grant.delays_s)]
    assert spacing == pytest.approx([1 / gov.rate] * (len(grant.delays_s) - 1))
    # No quota left: wait for the effective window.
    gov.observe(200, {**headers, "RateLimit": '"default";r=0;t=4'}, 1.0)
    assert gov.state(1.5) == "paused" and gov.paused_for_s(1.0) == pytest.approx(4.0)


def test_header_mode_against_an_advertising_server_has_no_429s() -> None:
    run = simulate(TokenBucketServer(50, 10, headers=True), duration_s=30)
    assert run.gov.stats()["429s"] == 0 and run.gov.state() == "header"
    assert run.served_rate(5, 30) == pytest.approx(50 * gv.HEADER_MARGIN, rel=0.02)


def test_header_mode_expires_into_discovery_seeded_with_the_advertised_rate() -> None:
    gov = RateGovernor(GovernorConfig())
    gov.observe(200, {"RateLimit-Policy": '"p";q=30;w=1'}, 0.0)
    gov.lease(1, gv.HEADER_TTL_S + 1)
    assert gov.state() == "aimd" and gov.stats()["limit_estimate"] == 30


def test_legacy_ratelimit_trio_is_understood() -> None:
    gov = RateGovernor(GovernorConfig())
    gov.observe(
        200,
        {"RateLimit-Limit": "20, 20;w=2", "RateLimit-Remaining": "5", "RateLimit-Reset": "1"},
        0.0,
    )
    assert gov.state(0.0) == "header" and gov.rate == pytest.approx(10 * gv.HEADER_MARGIN)


# --- leases ------------------------------------------------------------------------------


def test_leases_are_spaced_at_the_rate_and_bounded_by_the_horizon() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=20))
    grant = gov.lease(8, 10.0)
    assert grant.delays_s == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2, 0.25][: len(grant.delays_s)])
    assert len(grant.delays_s) == 1 + int(gv.LEASE_HORIZON_S * 20)
    # The schedule is full: the next caller is told when a whole batch will fit.
    empty = gov.lease(8, 10.0)
    assert empty.delays_s == () and empty.retry_in_s > 0
    nxt = gov.lease(8, 10.0 + empty.retry_in_s)
    assert nxt.delays_s[0] + empty.retry_in_s == pytest.approx(0.30)
    assert gov.stats()["grants"] == 2 and gov.stats()["permits"] == 12


def test_unused_permits_of_the_newest_grant_can_be_given_back() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=20))
    grant = gov.lease(4, 0.0)
    gov.give_back(grant, 3, 0.01)
    again = gov.lease(4, 0.01)
    assert again.delays_s[0] == pytest.approx(0.04)  # right after the one permit used
    old = gov.lease(4, 0.02)
    gov.lease(4, 0.3)
    gov.give_back(old, 4, 0.3)  # not the tail any more: nothing is rewound
    assert gov.stats()["returned"] == 7


# --- the permit bucket -------------------------------------------------------------------


def test_local_limiter_hands_out_permits_on_schedule() -> None:
    t = FakeTime()
    limiter = LocalLimiter(  # held at 10/s: slow start would double it within the test
        RateGovernor(GovernorConfig(initial_rate=10, max_rate=10)), clock=t.clock, sleep=t.sleep
    )

    async def main() -> list[float]:
        times = []
        for _ in range(6):
            await limiter.acquire()
            times.append(t.now)
            limiter.observe(200, {})
        await limiter.aclose()
        return times

    times = asyncio.run(main())
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([0.1] * 5)
    assert limiter.stats()["bucket"]["acquired"] == 6


def test_a_429_drops_held_permits_and_the_next_one_waits_out_the_pause() -> None:
    t = FakeTime()
    gov = RateGovernor(GovernorConfig(initial_rate=10))
    limiter = LocalLimiter(gov, clock=t.clock, sleep=t.sleep)

    async def main() -> float:
        await limiter.acquire()
        limiter.observe(429, {"Retry-After": "2"})
        await limiter.acquire()
        return t.now

    assert asyncio.run(main()) == pytest.approx(2.0, abs=0.01)
    assert limiter.stats()["bucket"]["dropped"] >= 1


def test_permit_bucket_works_over_any_lease_coroutine() -> None:
    t = FakeTime()
    gov = RateGovernor(GovernorConfig(initial_rate=50))
    calls: list[int] = []
    returned: list[int] = []

    async def lease(n: int):  # as a remote governor would answer, after a round trip
        calls.append(n)
        t.now += 0.001
        return gov.lease(n, t.now)

    async def give_back(grant, unused: int) -> None:
        returned.append(unused)

    bucket = PermitBucket(lease, batch=4, give_back=give_back, clock=t.clock, sleep=t.sleep)

    async def main() -> None:
        for _ in range(5):
            await bucket.acquire()
        await bucket.aclose()

    asyncio.run(main())
    assert calls == [4, 4] and returned == [3]


def test_permits_overdue_after_a_stall_are_forfeited_not_burst() -> None:
    t = FakeTime()
    limiter = LocalLimiter(
        RateGovernor(GovernorConfig(initial_rate=40)), clock=t.clock, sleep=t.sleep
    )

    async def main() -> list[float]:
        await limiter.acquire()
        t.now += 2.0  # the process stalled with permits in hand
        times = []
        for _ in range(4):
            await limiter.acquire()
            times.append(t.now)
        return times

    times = asyncio.run(main())
    assert limiter.stats()["bucket"]["late"] >= 1
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([1 / 40] * 3)


# --- long windows (quotas) and 503 ---------------------------------------------------------

DAILY = '"burst";q=100;w=1, "daily";q=5000;w=86400'


def test_an_exhausted_daily_quota_pauses_until_it_resets_and_says_so() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=5))
    headers = {"RateLimit-Policy": DAILY, "RateLimit": '"burst";r=90;t=1, "daily";r=0;t=3600'}
    epoch = gov.observe(200, headers, 10.0)
    assert epoch == 1 and gov.state(11.0) == "paused"
    stats = gov.stats(11.0)
    assert stats["paused_for_s"] == pytest.approx(3599.0)
    assert stats["pause_reason"] == "quota 'daily' exhausted"
    assert (stats["quota"], stats["quota_window_s"]) == ("daily", 86400)
    # A grant says how long the pause lasts, so clients stop taking work for this endpoint.
    grant = gov.lease(4, 11.0)
    assert grant.delays_s == () and grant.paused_for_s == pytest.approx(3599.0)
    # Nothing passes before the window resets; then the short window paces again.
    grant = gov.lease(4, 3610.0 - 0.2)
    assert grant.delays_s == () or 3609.8 + grant.delays_s[0] >= 3610.0 - 1e-9
    assert gov.state(3610.0) == "header" and gov.stats(3610.0)["pause_reason"] is None


def test_a_daily_quota_with_budget_left_paces_by_the_short_window_until_the_budget_binds() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=5, min_rate=0.01))
    # Plenty left for the time left (4000 in 40 s): the burst window (100/s) paces.
    gov.observe(
        200, {"RateLimit-Policy": DAILY, "RateLimit": '"burst";r=80;t=1, "daily";r=4000;t=40'}, 0.0
    )
    assert gov.rate == pytest.approx(100 * gv.HEADER_MARGIN)
    # Little left for long (360 in an hour): spread it, 0.1/s, instead of spending it in
    # 4 s and going dark for the rest of the hour. Not the daily average (0.058/s) either.
    gov.observe(
        200, {"RateLimit-Policy": DAILY, "RateLimit": '"burst";r=80;t=1, "daily";r=360;t=3600'}, 1.0
    )
    assert gov.rate == pytest.approx(0.1 * gv.HEADER_MARGIN, rel=1e-6)
    assert gov.state(1.0) == "header" and gov.paused_for_s(1.0) == 0


def test_a_429_on_an_exhausted_quota_without_retry_after_names_the_quota() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=5))
    gov.observe(429, {"RateLimit-Policy": DAILY, "RateLimit": '"daily";r=0;t=600'}, 0.0)
    stats = gov.stats(1.0)
    assert stats["paused_for_s"] == pytest.approx(599.0)
    assert stats["pause_reason"] == "quota 'daily' exhausted" and stats["quota"] == "daily"


def test_503_with_retry_after_pauses_without_decreasing_the_rate() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=40))
    first = gov.lease(4, 0.0)
    epoch = gov.observe(503, {"Retry-After": "5"}, 0.1)
    assert epoch != first.epoch and gov.state(1.0) == "paused"
    stats = gov.stats(1.0)
    assert stats["pause_reason"] == "503 Retry-After" and stats["503s"] == 1
    assert gov.rate == 40 and stats["decreases"] == 0 and stats["429s"] == 0
    # A 503 without Retry-After is an answer like any other: no pause.
    gov2 = RateGovernor(GovernorConfig(initial_rate=40))
    gov2.observe(503, {}, 0.0)
    assert gov2.paused_for_s(0.0) == 0 and gov2.rate == 40


def test_a_429_pause_is_named_in_stats_and_cleared_after() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=10))
    gov.observe(429, {"Retry-After": "2"}, 0.0)
    assert gov.stats(1.0)["pause_reason"] == "429 Retry-After"
    assert gov.stats(1.0)["quota"] is None
    assert gov.stats(2.5)["pause_reason"] is None and gov.stats(2.5)["paused_for_s"] == 0


def test_grants_ask_for_strict_spacing_once_a_429_came_without_retry_after() -> None:
    """A 429 without Retry-After may be a pair refused (nginx without ``burst``): from then
    on a request late for its permit takes a fresh one. One with Retry-After (a bucket or a
    window, which absorb a late request) turns it off; before any 429 it is off."""
    gov = RateGovernor(GovernorConfig(initial_rate=10), wall_clock=lambda: WALL0)
    assert not gov.lease(2, 0.0).strict_spacing
    gov.observe(429, {}, 1.0)
    assert gov.lease(2, 1.0).strict_spacing and gov.stats(1.0)["strict_spacing"]
    assert (gov.learnt() or {})["strict_spacing"] is True
    gov.observe(429, {"Retry-After": "1"}, 10.0)
    assert not gov.lease(2, 12.0).strict_spacing
    assert (gov.learnt() or {})["strict_spacing"] is False


def test_the_permit_bucket_says_what_its_last_grant_said() -> None:
    t = FakeTime()
    limiter = LocalLimiter(
        RateGovernor(GovernorConfig(initial_rate=10)), clock=t.clock, sleep=t.sleep
    )

    async def main() -> list[bool]:
        seen = []
        await limiter.acquire()
        seen.append(limiter.strict_spacing)
        limiter.observe(429, {})
        await limiter.acquire()
        seen.append(limiter.strict_spacing)
        return seen

    assert asyncio.run(main()) == [False, True]

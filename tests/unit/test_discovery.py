"""Reading a limit from a 429: the meter's bucket reading and the decisions of
:mod:`driver_review.discovery`, each on numbers worked out by hand."""

from __future__ import annotations

import dataclasses

import pytest

from driver_review import discovery as dv
from driver_review.discovery import Decision, Discovery, Moment, Prior, Reading, decide
from driver_review.meter import RateMeter
from driver_review.sim.limiters import TokenBucket


def _moment(**kw: object) -> Moment:
    base: dict[str, object] = {
        "at": 10.0,
        "pace": 60.0,
        "ran_s": 1.0,
        "slope": 0.0,
        "slow_start": False,
        "costly": True,
        "run_from": 9.0,
        "prior": Prior(),
    }
    base.update(kw)
    return Moment(**base)  # type: ignore[arg-type]


def test_the_bucket_reading_finds_a_buckets_rate_from_where_it_refused() -> None:
    """A token bucket of 60/s holding 12 (the prior's 0.2 s), full, sent 80/s: it serves
    12 + 60 t against 80 t + 1 and refuses after 0.55 s. The fastest bucket of that burst
    that would have refused there is the one."""
    bucket, meter = TokenBucket(60, 12), RateMeter(lag_s=0.25)
    t = 0.0
    while bucket.admit(t).admitted:
        meter.answered(t, ok=True)
        t += 1 / 80
    assert t == pytest.approx(0.55, abs=0.02)
    assert meter.bucket_rate(t, dv.BURST_S) == pytest.approx(60, rel=0.03)
    # Read only over what came after ``since`` (when it was last known full), and nothing
    # when nothing was served.
    assert meter.bucket_rate(t, dv.BURST_S, since=t) is None


def test_a_count_twice_the_same_and_once_under_the_pace_is_a_windows_limit() -> None:
    """Slow start ran a sliding window of 60 past 160/s: 60 served in its last second. The
    next 429, at 60.5/s after the pause, again 60 served: the same count, confirmed."""
    first = decide(
        _moment(pace=160.0, slow_start=True),
        Reading(served=60, refused=1, whole=True, bucket=68.0),
    )
    assert first.est == 60 and first.ceiling == 68 and first.seeking and not first.reliable
    assert first.prior.clipped  # 60 served against 160 sent
    second = decide(
        _moment(pace=60.5, ran_s=0.8, prior=first.prior),
        Reading(served=60, refused=1, whole=True, bucket=51.0),
    )
    assert second.reliable and second.est == second.ceiling == 60
    assert second.rate == pytest.approx(dv.SETTLE * 60)


def test_all_that_was_sent_twice_is_no_window() -> None:
    """Served all it was sent in the second before each 429: the counts say nothing of a
    window, whatever they are. The bucket reading, from a run too short to hold at the
    count, is a guess."""
    prior = Prior(count=63.0, clipped=False, bucket=0.0)
    d = decide(
        _moment(pace=63.7, ran_s=dv.VERIFY_RAN_S - 0.2, prior=prior),
        Reading(served=63, refused=1, whole=True, bucket=55.0),
    )
    assert not d.reliable and d.ceiling == d.est
    # the bucket reading, and a step of 15% at most
    assert d.est == max(55.0, (1 - dv.MAX_MARGIN) * 63.7)


def test_a_count_under_a_climbing_pace_is_not_clipped_by_the_climb() -> None:
    """Seeking at 1.1x a second, a token bucket of 50 (burst 10) refused at 59.6/s after
    serving 57 in the second before: all it was sent over that second, whose pace rose
    from 54 to 59.6. That is no window's limit showing through (it would be held to be
    verified, below); at a steady 59.6/s the same count was clipped. (Slow start read the
    bucket low, at 47: that does not confirm this reading.)"""
    prior = Prior(count=33.0, clipped=True, bucket=47.0, seeking=True)
    reading = Reading(served=57, refused=1, whole=True, bucket=50.2)
    climbing = decide(_moment(pace=59.6, ran_s=4.5, slope=5.7, prior=prior), reading)
    assert not climbing.prior.clipped and climbing.verify
    steady = decide(_moment(pace=59.6, ran_s=4.5, slope=0.0, prior=prior), reading)
    assert steady.prior.clipped and steady.ceiling == 57 and not steady.verify


def test_a_count_served_in_full_is_held_to_tell_a_window_from_a_bucket() -> None:
    """Climbing 1% a second, refused at 60.7/s after serving 60 of it: a window of 60, or a
    bucket of 57.3 (the bucket reading) whose burst carried the climb past it. The rate
    holds at SETTLE of the count: a window never refuses there and after VERIFY_S the
    count is the limit; a bucket refuses again, at a steady pace, and its reading is taken.
    A count read within VERIFY_RAN_S of a pause may hold the pause's edge: not held."""
    reading = Reading(served=60, refused=1, whole=True, bucket=57.3)
    d = decide(_moment(pace=60.7, ran_s=9.0, slope=0.6), reading)
    assert d.verify and not d.reliable and d.est == 57.3 and d.ceiling == 60
    short = decide(_moment(pace=60.7, ran_s=dv.VERIFY_RAN_S - 0.5, slope=0.6), reading)
    assert not short.verify and short.ceiling == short.est == 57.3

    # A window: the approach to SETTLE of the count, a hold there, then the count is taken.
    search = Discovery()
    search.apply(d, _moment(pace=60.7), d.rate, 0.0, 1)
    rate, now, path = d.rate, 0.0, []
    while now < 4.0 + dv.VERIFY_S + 2.0:
        now += 0.125
        grown = search.grow(rate, now, 0.125)
        assert grown is not None
        rate = grown
        path.append((now, rate))
    held = [r for t, r in path if 4.0 < t <= 4.0 + dv.VERIFY_S - 0.5]
    assert held and all(r == pytest.approx(dv.SETTLE * 60) for r in held)
    assert search.decision is not None and search.decision.reliable
    assert search.estimate == 60 and rate < 60

    # A bucket: refused at the count held, its reading is taken (here 2.3% from the one
    # before, too far to confirm it), and not held again. Not as the limit yet: a count a
    # fixed window let through across its edge is over its limit, refused alike, and its
    # bucket reading is a guess. The rate climbs on from it.
    held = decide(
        _moment(pace=dv.SETTLE * 60, ran_s=6.0, prior=d.prior),
        Reading(served=59, refused=1, whole=True, bucket=56.0),
    )
    assert not held.reliable and held.est == held.ceiling == 56.0 and not held.verify
    # Refused again a little over it, the same bucket reading: now the limit.
    then = decide(
        _moment(pace=56.6, ran_s=3.0, prior=held.prior),
        Reading(served=56, refused=1, whole=True, bucket=56.2),
    )
    assert then.reliable and then.est == 56.2


def test_a_count_over_the_limit_soon_after_a_pause_rules_out_no_window() -> None:
    """The simulator's two-window estimate of 60 on the real pipeline: 62 served at 62.7/s
    0.8 s after a pause (more than its limit in a second: the window before weighed
    little), then 59 served at 59.6/s, both with a bucket reading of about 54. A faster
    pace served in full rules out a window only when it was served over a long run: here
    the rate holds at the count (taken as the bucket's rate instead, 54, the sweep ran at
    0.85 of the limit)."""
    reading = Reading(served=59, refused=1, whole=True, bucket=54.1)
    prior = Prior(count=62.0, clipped=False, bucket=54.8, reliable=True, ran_s=0.8)
    soon = decide(_moment(pace=59.6, ran_s=2.0, prior=prior), reading)
    assert soon.verify and soon.est == 54.1 and soon.ceiling == 59
    long = dataclasses.replace(prior, ran_s=dv.RELIABLE_S)
    bucket = decide(_moment(pace=59.6, ran_s=2.0, prior=long), reading)
    assert bucket.reliable and bucket.est == bucket.ceiling == 54.1 and not bucket.verify


def test_after_slow_start_the_same_count_confirms_a_window_crossed_far() -> None:
    """A sliding log of 60 after slow start: 60 served, the bucket reading 90. The climb to
    the higher reading in two seconds crossed the window far (70.9/s, 18% over): the same
    count again is its limit, though the pace was further over it than a refused pace is
    taken to be (``MAX_MARGIN``) once the rate runs near its readings."""
    first = decide(
        _moment(pace=320.0, slow_start=True),
        Reading(served=60, refused=1, whole=True, bucket=90.2),
    )
    assert first.seeking and first.est == 60
    again = decide(
        _moment(pace=70.9, ran_s=1.5, slope=15.0, prior=first.prior),
        Reading(served=60, refused=1, whole=True, bucket=53.5),
    )
    assert again.reliable and again.est == again.ceiling == 60
    # Near its readings, a pace that far over the count is not taken as a window's.
    settled = decide(
        _moment(pace=70.9, ran_s=1.5, prior=dataclasses.replace(first.prior, seeking=False)),
        Reading(served=60, refused=1, whole=True, bucket=53.5),
    )
    assert settled.est == pytest.approx(0.85 * 70.9)


def test_refused_soon_after_settling_under_a_reading_steps_back_a_little() -> None:
    """A two-window estimate of 150 confirmed 155 (it lets a little over its limit through
    now and then); at 0.98 of it, refused after a second with all sent served. That reading
    was a little high: step back 2%, not to the bucket reading of the short run (128.8)."""
    confirmed = decide(
        _moment(pace=196.2, ran_s=1.4, prior=Prior(count=157.0, clipped=True, seeking=True)),
        Reading(served=155, refused=1, whole=True, bucket=141.3),
    )
    assert confirmed.reliable and confirmed.est == 155 and confirmed.prior.reliable
    again = decide(
        _moment(pace=151.9, ran_s=1.0, prior=confirmed.prior),
        Reading(served=151, refused=1, whole=True, bucket=128.8),
    )
    assert again.reliable and again.est == pytest.approx(0.98 * 151)
    # Without a reading taken as the limit before, the same 429 lands on the bucket's floor.
    unsure = decide(
        _moment(pace=151.9, ran_s=1.0, prior=dataclasses.replace(confirmed.prior, reliable=False)),
        Reading(served=151, refused=1, whole=True, bucket=128.8),
    )
    assert unsure.est == pytest.approx(0.85 * 151.9) and not unsure.reliable


def test_a_narrow_step_refused_soon_again_lands_on_the_buckets_floor() -> None:
    """The benchmark's cold sweep through the simulator's fixed window of 60/s: a count of
    75 let through across the window's edge, read twice (the Retry-After of a whole second
    kept the phase), was taken as the limit. Refused at 73.5/s two seconds later, all sent
    served, the rate stepped back a little; refused as soon again at 69.15/s, it stepped
    back a little four more times, a pause each, down to 57.6/s. The second refusal says
    the reading was wrong, not a little high: land on the bucket's floor, unconfirmed."""
    same_count = Prior(count=75.0, clipped=True, bucket=65.66, reliable=True, ran_s=2.2)
    first = decide(
        _moment(pace=73.5, ran_s=2.0, prior=same_count),
        Reading(served=72, refused=1, whole=True, bucket=61.92),
    )
    assert first.why == "narrow step" and first.est == pytest.approx(0.98 * 72)
    assert first.reliable and first.prior.narrowed
    again = decide(
        _moment(pace=69.15, ran_s=2.0, prior=first.prior),
        Reading(served=69, refused=1, whole=True, bucket=58.9),
    )
    assert again.why == "narrowed again" and again.est == again.ceiling == 58.9
    assert not again.reliable and not again.verify and not again.prior.narrowed
    # The floor where the bucket reads lower; a long run still reads where it refused.
    assert decide(
        _moment(pace=69.15, ran_s=2.0, prior=first.prior),
        Reading(served=69, refused=1, whole=True, bucket=50.0),
    ).est == pytest.approx(0.85 * 69.15)
    assert (
        decide(
            _moment(pace=69.15, ran_s=12.0, prior=first.prior),
            Reading(served=69, refused=1, whole=True, bucket=58.9),
        ).why
        == "long run"
    )


def test_the_same_bucket_reading_twice_is_a_buckets_rate() -> None:
    d = decide(
        _moment(pace=64.5, ran_s=5.0, slope=2.0, prior=Prior(bucket=60.2)),
        Reading(served=64, refused=1, whole=True, bucket=60.0),
    )
    assert d.reliable and d.est == d.ceiling == 60.0


def test_the_seeks_crossing_confirms_a_bucket_reading_slow_start_took_a_little_high() -> None:
    """A real sweep through the simulator's token bucket of 100/s (holding 20): slow start
    read the bucket at 108.4 over a fraction of a second at 320/s, once the late reports
    were in. The seek after it was refused at 118.5/s, climbing 10% a second, having
    served all it was sent (113 in the last second) over a run of 3.7 s whose bucket
    reading is 99.9. That confirms slow start's, taken high: the bucket's rate, at once.
    (Read as a count served in full, it was held at 113 to be verified, which the bucket
    refused: a second pause.) A slow start 12% over, or under by more than NARROW, does
    not confirm it."""
    reading = Reading(served=113, refused=1, whole=True, bucket=99.9)

    def after(start_bucket: float) -> Decision:
        prior = Prior(count=85.0, clipped=True, bucket=start_bucket, seeking=True)
        return decide(_moment(pace=118.5, ran_s=3.7, slope=11.3, prior=prior), reading)

    d = after(108.4)
    assert d.reliable and not d.verify and d.est == d.ceiling == 99.9 and d.why == "same bucket"
    for start_bucket in (1.12 * 99.9, 0.97 * 99.9):
        held = after(start_bucket)
        assert held.verify and held.ceiling == 113 and held.why == "verify count"
    # Not after a reading that was not slow start's: there two readings agree within NARROW.
    settled = decide(
        _moment(pace=118.5, ran_s=3.7, slope=11.3, prior=Prior(count=85.0, bucket=108.4)),
        reading,
    )
    assert settled.verify and settled.why == "verify count"


def test_the_same_bucket_reading_twice_under_a_steady_pace_served_in_full_is_verified() -> None:
    """A two-window estimate of 60 climbed alike twice reads 55.2 then 55.1 as a bucket,
    but at 60.2/s, steady, it served 59 in the last second: a bucket of 55.1 or a window
    near 59. Held at the count, a bucket soon refuses; a window never does, and the count
    is taken (the rate ran at 54 for a minute when the bucket reading was taken)."""
    d = decide(
        _moment(
            pace=60.2, ran_s=2.3, slope=0.7, prior=Prior(count=63.0, clipped=True, bucket=55.2)
        ),
        Reading(served=59, refused=1, whole=True, bucket=55.1),
    )
    assert d.verify and not d.reliable and d.est == 55.1 and d.ceiling == 59
    # Refused again on the way or while held: no window there, the bucket's rate.
    again = decide(
        _moment(pace=57.0, ran_s=3.0, slope=0.5, prior=d.prior),
        Reading(served=57, refused=1, whole=True, bucket=55.0),
    )
    assert again.reliable and again.est == 55.0 and not again.verify


def test_after_a_long_run_the_limit_is_where_it_refused() -> None:
    """Refused after 20 s of climbing: a window's limit is what it served in the last
    second; a bucket's burst may have carried the climb past its rate, which the 429 after
    the next run, at a steady pace, reads (the same bucket reading twice)."""
    window = decide(
        _moment(pace=60.4, ran_s=20.0, slope=0.02),
        Reading(served=60, refused=1, whole=True, bucket=57.1),
    )
    assert window.reliable and window.est == 60
    bucket = decide(
        _moment(pace=68.0, ran_s=10.2, slope=5.0),
        Reading(served=68, refused=1, whole=True, bucket=60.1),
    )
    assert bucket.est == 68
    again = decide(
        _moment(pace=66.7, ran_s=1.6, prior=bucket.prior),
        Reading(served=66, refused=1, whole=True, bucket=60.0),
    )
    assert again.reliable and again.est == 60.0


def test_a_long_run_past_a_pace_refused_before_reads_the_bucket() -> None:
    """Refused at 98/s before, now after 12 s of climbing to 105.8/s: a window with its
    limit up at 105 would never have refused 98, so a bucket's burst carried the climb
    and its reading is the limit. A pace refused before that is within NARROW of this one
    refutes nothing (jitter at the same limit)."""
    reading = Reading(served=105, refused=1, whole=True, bucket=100.2)
    bucket = decide(_moment(pace=105.8, ran_s=12.0, slope=1.0, refused=98.0), reading)
    assert bucket.reliable and bucket.est == 100.2
    near = decide(_moment(pace=105.8, ran_s=12.0, slope=1.0, refused=104.5), reading)
    assert near.est == 105
    never = decide(_moment(pace=105.8, ran_s=12.0, slope=1.0), reading)
    assert never.est == 105


def test_where_a_429_costs_a_request_it_steps_back_a_little() -> None:
    lone = decide(
        _moment(pace=60.0, costly=False),
        Reading(served=60, refused=1, whole=True, bucket=50.0),
    )
    assert lone.cheap and lone.rate == pytest.approx((1 - dv.CHEAP_STEP) * 60)
    # ... and when a seek after slow start went past the limit, further: as far as what
    # the server served, if that was less (a server delaying what it admits, nginx's
    # burst without nodelay, serves less than it is sent) ...
    under = decide(
        _moment(pace=13.0, costly=False, prior=Prior(seeking=True)),
        Reading(served=10, refused=1, whole=True, bucket=9.6),
    )
    assert under.rate == pytest.approx(max((1 + dv.NARROW) * 10, (1 - dv.MAX_MARGIN) * 13))
    # ... and, clipped (served well under the pace, several 429s), to the reading.
    clipped = decide(
        _moment(pace=150.0, costly=False),
        Reading(served=60, refused=40, whole=True, bucket=90.0),
    )
    assert clipped.est == pytest.approx((1 - dv.MAX_MARGIN) * 150)


def test_a_cheap_slow_start_seeks_from_its_bucket_reading() -> None:
    d = decide(
        _moment(pace=80.0, slow_start=True, costly=False),
        Reading(served=17, refused=1, whole=True, bucket=24.2),
    )
    assert d.est == 24.2 and d.seeking and d.cheap
    ended = decide(
        _moment(pace=62.0, costly=False, prior=d.prior),
        Reading(served=61, refused=1, whole=True, bucket=50.0),
    )
    assert ended.rate == pytest.approx((1 - dv.SEEK_STEP) * 62) and not ended.seeking


def test_the_rate_approaches_the_higher_reading_then_probes_slowly_above_it() -> None:
    search = Discovery()
    d = Decision(50.0, 60.0, True, False, False, Prior())
    m = _moment(pace=70.0)
    search.apply(d, m, d.rate, 0.0, 1)
    rate, now, path = d.rate, 0.0, []
    while now < 30.0:
        now += 0.125
        grown = search.grow(rate, now, 0.125)
        assert grown is not None
        rate = grown
        path.append(rate)
    reached = next(i for i, r in enumerate(path) if r >= dv.SETTLE * 60 - 1e-9)
    assert reached * 0.125 <= dv.APPROACH_S + 0.5  # the approach: at most APPROACH_S
    assert rate < 60.0  # the probe above it: under 2% in the 20 s after it
    assert search.safe is not None and search.safe <= rate


def test_well_over_a_pace_refused_without_a_429_the_limit_rose() -> None:
    search = Discovery()
    d = Decision(20.0, 20.0, True, False, False, Prior())
    search.apply(d, _moment(pace=20.5), d.rate, 0.0, 1)
    assert search.grow(dv.REPROBE * 20.5 + 1, 1.0, 0.125) is None
    assert search.decision is None and search.refused is None


def test_a_bucket_emptied_at_the_last_429_bounds_its_rate_by_what_it_served_since() -> None:
    """Slow start ran through a bucket of 40 at 2/s up to 160/s, and a 429 paused it. After
    the pause (1 s, Retry-After) 2 were served at 30/s before the next 429: no second held
    enough to read a count, and the 15% floor (25.8/s) would take a dozen pauses to come
    down. The bucket was empty at the 429 before: over the 1.2 s since it refilled no more
    than (2 + 1) / 1.2 = 2.5/s, unless it filled up and spilled. Land there, and approach
    the floor (a small bucket full within the pause served less than its rate)."""
    reading = Reading(served=2, refused=1, whole=True, bucket=11.3, emptied=2.5)
    d = decide(_moment(pace=30.4, ran_s=0.0), reading)
    assert d.est == 2.5 and d.ceiling == pytest.approx(0.85 * 30.4) and not d.reliable
    # Without it, the floor.
    assert decide(_moment(pace=30.4, ran_s=0.0), dataclasses.replace(reading, emptied=0.0)).est == (
        pytest.approx(0.85 * 30.4)
    )
    # Where a second held a count, a bucket that spilled in the pause looks alike (its
    # burst and the run since): the bound is not read.
    counted = Reading(served=30, refused=1, whole=True, bucket=55.0, emptied=24.0)
    assert decide(_moment(pace=70.0, ran_s=0.3), counted).est >= 0.85 * 70.0
    # Nor after slow start: the bucket was full before it.
    seen = decide(_moment(pace=160.0, slow_start=True), Reading(31, 1, True, 36.5, emptied=2.0))
    assert seen.est == 31.0

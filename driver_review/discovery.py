"""Finding an endpoint's rate limit from its answers, when it does not say what it is.

:class:`~driver_review.governor.RateGovernor` owns the permit schedule, pauses and
RateLimit headers; it hands this module one :class:`Reading` for each 429 that is news,
and asks it how the rate grows over each interval of saturated demand. Pure, on the
caller's clock.

**Two readings of a 429.** Limiters refuse for different reasons, and what the server
served before a 429 reads differently under each:

- *count*: a limiter that counts requests in a window (fixed, sliding, HAProxy's stick
  table) refuses once the window holds its limit, so the successes of the last second are
  its limit showing through.
- *bucket*: a bucket (a token bucket, nginx ``limit_req`` with ``burst``) refuses a pace
  over its rate only once its burst is spent. With ``n`` requests from ``t`` to the 429,
  a bucket of rate ``r`` holding ``BURST_S * r`` refuses once
  ``n > r * (t_429 - t) + BURST_S * r`` for some ``t``, so ``r = max n / (t_429 - t + BURST_S)``
  over the run since the bucket was last known full (see
  :meth:`~driver_review.meter.RateMeter.bucket_rate`). The burst itself is unknown; the
  reading errs by it over the run: little after a long run, much after a short one.

- *emptied*: a bucket that refused the 429 before was empty then, so what it served
  since, over the time since (the pause included), bounds its rate, unless it filled up
  in the pause and spilled. Read only where no second held ``MIN_SAMPLES`` successes for a
  count: after slow start ran through a burst of many seconds (a bucket of 40 at 2/s),
  the rate lands there instead of stepping down ``MAX_MARGIN`` a pause.

Neither is right for every limiter, and one 429 cannot tell which applies: the
readings are combined by how the 429 came about.

**What a 429 costs** decides how boldly to look for the limit:

- *costly*: a 429 with Retry-After pauses every caller (a second or more), and so does a
  limiter that counts its refusals (the governor's echo pause). A costly 429 lands the
  rate on the lower reading and climbs to the higher one steadily (``APPROACH_S``), so
  that the next 429, if the higher was too high, comes after a long run whose readings
  are good. A reading confirmed by the next 429 (the same count twice, once under the
  pace sent; the same bucket reading twice) or taken after ``RELIABLE_S`` is *reliable*:
  above it the rate probes up very slowly (``PROBE_PER_S``, doubling every
  ``PROBE_DOUBLING_S``), crossing a limit that stays put after about 45 s; each crossing
  that reads the same limit again doubles that doubling time (up to
  ``PROBE_DOUBLING_MOST_S``): a limit that stays put costs fewer pauses, and one that
  rose is still found in minutes. Refused
  soon after settling under such a reading, with all it was sent served, the rate steps
  back ``NARROW``, not to the floor: the reading was a little high (a two-window estimate
  lets a little over its limit through now and then). Refused as soon again, it was
  wrong, not a little high: the rate lands on the floor and climbs from there.
  A server that served all it was sent up to the 429 (after ``VERIFY_RAN_S`` of running)
  is a window at that count, or a bucket whose burst carried a climb past its rate:
  unless the last two bucket readings agree, the rate holds at the count for
  ``VERIFY_S``, which a window never refuses and a bucket soon does, at a steady pace
  whose bucket reading is then taken, and climbed on from (a count a fixed window let
  through across its edge is over its limit, and refused as a bucket's would be).
- *cheap*: a 429 without Retry-After costs a request (nginx). The rate steps back by
  ``CHEAP_STEP`` and climbs so that about ``CHEAP_SHARE`` of requests draw one (an
  additive increase against a multiplicative decrease), slowed by how many 429s a step
  back draws (requests already on their way), and faster after a quiet spell. A 429
  that comes with the server clearly serving less than it was sent (``CLIP``) reads the
  limit instead.

After slow start the readings are guesses (the pace doubled past the limit on the way,
so a window saw a burst a bucket would not have passed): the rate lands on the lower
one, climbs to the higher in ``SEEK_APPROACH_S`` and *seeks* upward from there
(``SEEK_PER_S``, faster where a 429 is cheap) until the next 429, so a limiter read far
too low is soon left. A climb that fast crosses a window far: the same count at its 429
confirms the window though the pace was up to ``2 * MAX_MARGIN`` over it. Slow start's
bucket reading is taken over a fraction of a second at a pace far over the limit, where a
few successes still on their way to being reported, or sent a little out of order, weigh
much: in real sweeps through the simulator's token bucket it read up to 8.5% high, where
the seek's crossing read the bucket's rate within 0.8%. A crossing that reads up to
``START_HIGH`` under it confirms it (the lower of the two is taken): one pause less.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

SETTLE = 0.98  # run at this share of the estimated limit
BURST_S = 0.2  # a bucket's burst, unknown, is taken to last this long at its rate
MAX_MARGIN = 0.15  # a refused pace is taken to be over the limit by at most this share
NARROW = 0.02  # readings this close agree
RELIABLE_S = 10.0  # a 429 after running this long reads the limit within BURST_S / this
CLIMB_S = 1.5  # under the estimate (a warm start), close the gap by 1/e this often
APPROACH_PER_S = 0.01  # from the lower reading to the higher, at least this share of the
APPROACH_S = 4.0  # ... lower per second, and in at most this long
PROBE_PER_S = 0.0001  # above a reliable estimate, grow by this share of it per second,
PROBE_DOUBLING_S = 12.0  # ... a pace that doubles every this long without a 429,
PROBE_DOUBLING_MOST_S = 48.0  # ... twice as long after each crossing that reads the same
SEEK_APPROACH_S = 2.0  # after slow start, approach the higher reading in this long
START_HIGH = 0.1  # slow start's bucket reading errs up to this share high (requests in flight)
SEEK_PER_S = 1.1  # after slow start, above its readings: multiply the rate by this a second
CHEAP_SEEK_PER_S = 1.25  # ... where a 429 is cheap
SEEK_STEP = 0.05  # the 429 that ends a cheap seek steps back this share of its pace
CHEAP_STEP = 0.03  # a cheap 429 steps back this share of the pace ...
CHEAP_SHARE = 0.003  # ... and the rate grows so that about this share of requests draw one,
CHEAP_STEP_429S_MAX = 4.0  # ... counting at most this many 429s per step back,
CHEAP_DOUBLING_S = 10.0  # ... a growth that doubles every this long without a 429
CLIP = 0.9  # served under this share of the pace sent: the server clipped it ...
MIN_REFUSED = 3  # ... with at least this many 429s, when a 429 costs a request
MIN_SAMPLES = 5  # fewer successes than this in a second say nothing of the limit
VERIFY_RAN_S = 1.0  # a count read after a shorter run may hold a pause's edge
VERIFY_S = RELIABLE_S  # held this long at a count without a 429: the count is the limit
HOLD_S = 2.0  # busy this long at a rate without a 429: the rate is safe
STEADY_PER_S = 0.02  # a pace growing slower than this share of itself per second is steady
REPROBE = 1.15  # this far over the lowest pace refused without a 429: the limit rose


@dataclass(frozen=True)
class Prior:
    """What the decision before read: a reading is confirmed when the next one agrees."""

    count: float | None = None
    clipped: bool = False  # that count was clearly under the pace refused
    bucket: float = 0.0
    seeking: bool = False  # the rate was seeking after slow start
    holding: bool = False  # the rate was held at a count to verify it
    reliable: bool = False  # the rate settled under a reading taken as the limit
    ran_s: float = 0.0  # how long the run that ended in that reading lasted
    narrowed: bool = False  # that reading stepped back a little from one refused soon


@dataclass(frozen=True)
class Moment:
    """A 429 that was news, as the governor saw it when it came."""

    at: float
    pace: float  # of the permits due just before it
    ran_s: float  # busy time the schedule ran without a 429 since the last decision
    slope: float  # how fast the rate was growing when it came, per second
    slow_start: bool
    costly: bool  # it paused every caller: Retry-After, or an echo
    run_from: float  # when that run began (the end of the last pause or decision)
    prior: Prior
    refused: float | None = None  # the lowest pace refused before, since the limit rose
    last_at: float | None = None  # when the request of the 429 before that was news left


@dataclass(frozen=True)
class Reading:
    """What the server served before a 429, read from the governor's meter."""

    served: float  # successes per second before it: in the last second, or over a long window
    refused: int  # 429s in that second
    whole: bool  # the governor was running for all of that second
    bucket: float  # the bucket reading since the bucket was last known full (0: none)
    # The fastest rate of a bucket, empty at the 429 before and refilled since without
    # spilling, that refused this one: (successes since + 1) / time since (0: none before
    # it since slow start, or too long ago to count).
    emptied: float = 0.0


@dataclass(frozen=True)
class Decision:
    est: float  # the limit, as this 429 shows it: the rate is SETTLE of it
    ceiling: float  # the higher reading: the rate climbs to SETTLE of it
    reliable: bool  # read after a long run, or confirmed: probe slowly above it
    seeking: bool  # after slow start: seek above the ceiling
    cheap: bool  # a 429 costs a request
    prior: Prior  # for the next decision
    verify: bool = False  # hold at the ceiling (no climb) and take it once held VERIFY_S
    why: str = ""  # which reading decided (stats count them: where a run lost its share)

    @property
    def rate(self) -> float:
        return SETTLE * self.est


def decide(m: Moment, r: Reading) -> Decision:
    """Estimate the limit from a 429 and what the server served before it."""
    p = m.pace
    count = None
    if r.whole and r.served >= MIN_SAMPLES and (m.costly or r.refused >= MIN_REFUSED):
        count = min(p, float(r.served))
    bucket = min(p, r.bucket)
    if count is None and r.emptied:
        bucket = min(bucket, r.emptied) if bucket else r.emptied
    floor = (1.0 - MAX_MARGIN) * p
    # Clearly under what was sent over that second: at a climbing pace, that is its mean,
    # under the pace the 429 came at (a seek at SEEK_PER_S sends 5% less over its last second).
    clipped = count is not None and count + 1.0 <= (1.0 - NARROW) * (p - m.slope / 2)
    last = m.prior

    def made(
        est: float,
        ceiling: float,
        reliable: bool,
        *,
        why: str,
        seeking: bool = False,
        verify: bool = False,
        narrowed: bool = False,
    ) -> Decision:
        holding = verify and ceiling > est
        return Decision(
            est,
            max(est, ceiling),
            reliable,
            seeking,
            not m.costly,
            Prior(
                count,
                clipped,
                bucket,
                seeking,
                holding,
                reliable,
                m.ran_s,
                narrowed,
            ),
            holding,
            why,
        )

    if not m.costly:
        if m.slow_start:
            return made(bucket or p / 2, 0.0, True, seeking=True, why="cheap slow start")
        if r.refused >= MIN_REFUSED and r.whole and r.served + 1.0 < CLIP * p:
            # Clipped: served well under the pace sent, the limit showing through.
            return made(max(bucket, floor), 0.0, True, why="cheap clipped")
        # Touched it (or arrivals bunched at the edge: nginx without burst refuses two
        # requests closer than its spacing): step back a little. Further if the seek
        # after slow start went past it: as far as what the server served, if that was
        # less (never below the floor).
        if not last.seeking:
            return made((1.0 - CHEAP_STEP) * p / SETTLE, 0.0, True, why="cheap step")
        est = (1.0 - SEEK_STEP) * p
        if r.whole:
            est = min(est, max((1.0 + NARROW) * r.served, floor))
        return made(est / SETTLE, 0.0, True, why="cheap seek step")
    if m.slow_start:
        readings = [x for x in (bucket, count) if x] or [p / 2]
        return made(min(readings), max(readings), False, seeking=True, why="slow start")
    if count is None and 0.0 < r.emptied < floor:
        # Too few served to read a count, and fewer since the last 429 than a bucket
        # refilling at the floor would have served: a burst larger than the pause carried
        # the climb far past the bucket's rate. Land at what it refilled, and approach the
        # floor (a small bucket, full well within the pause, served less than its rate).
        return made(r.emptied, floor, False, why="emptied bucket")
    if (
        count is not None
        and last.count is not None
        and count >= ((1.0 - 2 * MAX_MARGIN) * p if last.seeking else floor)
        and (clipped or last.clipped)
        and (1.0 - NARROW) * last.count <= count <= (1.0 + NARROW / 2) * last.count
    ):
        # The same count as the 429 before, once clearly under the pace: a window's limit
        # (a server that served more than before in a second is not one).
        est = min(count, last.count)
        return made(est, est, True, why="same count")
    if m.ran_s >= RELIABLE_S:
        # A long run: refused at the pace (or what was served in the last second) the
        # limit is at, unless a bucket's burst carried a climb past it; then the 429 after
        # the next run, at a steady pace, reads the bucket's rate. A pace clearly under
        # this one was refused before: no window's limit is up here (a window never
        # refuses under its limit), so a burst carried the climb: the bucket's rate.
        high = min(p, count if count is not None else p)
        refuted = m.refused is not None and m.refused < (1.0 - NARROW) * high
        est = bucket if refuted and bucket else max(bucket, high)
        return made(est, est, True, why="long run")
    if (
        last.bucket
        and bucket
        and (
            abs(bucket - last.bucket) <= NARROW * bucket
            or (last.seeking and bucket <= last.bucket <= (1.0 + START_HIGH) * bucket)
        )
    ):
        if (
            count is not None
            and not clipped
            and not last.holding
            and m.slope <= STEADY_PER_S * p
            and count > (1.0 + 2 * NARROW) * bucket
            and (last.count is None or last.clipped or last.count < p or last.ran_s < RELIABLE_S)
        ):
            # The same bucket reading twice, but all sent at a steady pace well over it
            # was served: a bucket, or a window climbed alike twice. Hold at the count:
            # a bucket soon refuses it, a window never does. (Not when all of a faster
            # pace was served in a second of a long run before: no window refuses under
            # what it served there. Soon after a pause, a fixed window's edge or a
            # two-window estimate lets more than its limit through in a second.)
            return made(bucket, count, False, verify=True, why="verify bucket")
        # The same bucket reading twice: its rate. (Slow start's, over a fraction of a
        # second, reads high by the successes in flight: the one the seek crossed, over
        # seconds, confirms it a little under it.)
        return made(bucket, bucket, True, why="same bucket")
    est = max(bucket, floor)
    if last.reliable and count is not None and not clipped:
        if last.narrowed:
            # Refused soon again after stepping back a little: that reading was not a
            # little high but wrong (a count a fixed window let through across its edge,
            # read twice as the Retry-After of a whole second kept the phase): land on the
            # bucket's floor and climb from there, rather than a pause for every 4%.
            return made(est, est, False, why="narrowed again")
        # Refused soon after settling under a reading taken as the limit, all it was sent
        # served: that reading was a little high (a window that lets a little over its
        # limit through now and then). Step back a little, not to the floor.
        stepped = (1.0 - NARROW) * min(p, count)
        return made(stepped, stepped, True, narrowed=True, why="narrow step")
    if last.holding and bucket:
        # Refused at the count held to verify it (or on the way): no window at it. Its
        # bucket reading is a guess still (a run long enough to read it well is caught
        # above): the rate climbs on from it. (Taken as the limit, a fixed window's count
        # let through across its edge, held and refused, left the rate at 0.95 of it.)
        return made(est, est, False, why="refused holding")
    if count is not None and not clipped and m.ran_s >= VERIFY_RAN_S:
        # Served all it was sent: a window at the count, or a bucket whose burst carried
        # the climb past its rate (the bucket reading). Hold just under the count: a
        # bucket refuses again soon at that steady pace (its reading then good); a window
        # never does, and the count is taken.
        return made(est, count, False, verify=True, why="verify count")
    return made(est, count if clipped and count else est, False, why="floor")


class Discovery:
    """The search for one endpoint's limit between two 429s: what the last decision
    read, and how the rate grows from it."""

    def __init__(self) -> None:
        self.decision: Decision | None = None
        self.refused: float | None = None  # the lowest pace refused since the limit rose
        self.safe: float | None = None  # the highest rate held busy HOLD_S without a 429
        self.decided_at = -math.inf  # when the last decision took effect
        self.ran_s = 0.0  # busy time without a 429 since then
        self.slope = 0.0  # how fast the rate grew in the last interval, per second
        self._held_s = 0.0
        self._hold_rate = 0.0
        self._reached_at = -math.inf  # when the rate last climbed to SETTLE of the ceiling
        self._step_429s = 0.0  # 429s per decision, on average (cheap: see grow)
        self._verified_s = 0.0  # busy time held at a ceiling to verify
        self._probe_doubling_s = PROBE_DOUBLING_S
        # A long window the limiter showed (a quota per minute): a pace takes that long to
        # show there, so the probe above the estimate doubles no faster.
        self.window_s = 0.0

    @property
    def estimate(self) -> float | None:
        return self.decision.est if self.decision else None

    def prior(self) -> Prior:
        return self.decision.prior if self.decision else Prior()

    def apply(self, d: Decision, m: Moment, rate: float, since: float, step_429s: int) -> None:
        """A decision took effect at ``since`` (the end of its pause), setting ``rate``;
        ``step_429s``: the 429s since the decision before."""
        last = self.decision
        same = (
            last is not None
            and last.reliable
            and d.reliable
            and not m.slow_start
            and abs(d.est - last.est) <= NARROW * last.est
        )
        # The probe crossed the limit it trusted and read it again: the limit stays put,
        # so probe less often (each crossing costs a pause; the limit rising is rarer news).
        doubling_s = min(PROBE_DOUBLING_MOST_S, 2 * self._probe_doubling_s)
        self._probe_doubling_s = doubling_s if same else PROBE_DOUBLING_S
        self.decision = d
        if not m.slow_start and d.cheap:
            n = float(step_429s)
            self._step_429s = 0.7 * self._step_429s + 0.3 * n if self._step_429s else n
        self.refused = m.pace if self.refused is None or m.slow_start else min(self.refused, m.pace)
        if self.safe is not None and self.safe > d.est:
            self.safe = None  # held only while a burst allowance lasted, or the limit fell
        self.start(rate, since)

    def revise(self, d: Decision, rate: float) -> None:
        """The same 429 read again once late reports are in, setting ``rate``."""
        self.decision = d
        if self.safe is not None and self.safe > d.est:
            self.safe = None
        self._hold_rate, self._held_s = rate, 0.0

    def start(self, rate: float, since: float) -> None:
        """The rate is set afresh at ``since``: the hold and the probe start from there."""
        self._hold_rate = rate
        self._held_s = self.ran_s = self._verified_s = 0.0
        self.decided_at = since

    def seed(
        self,
        est: float,
        rate: float,
        now: float,
        *,
        refused: float | None = None,
        ceiling: float | None = None,
    ) -> None:
        """Start from a limit known from elsewhere (a warm start, RateLimit headers no
        longer sent, a long window's quota over its length), at ``rate``: approached up to
        ``ceiling`` if given (a bound of the same reading), probed slowly from there, read
        again at the next 429."""
        self.decision = Decision(est, max(est, ceiling or est), True, False, False, Prior())
        self.refused = refused
        self._probe_doubling_s = PROBE_DOUBLING_S
        self.start(rate, now)

    def grow(self, rate: float, now: float, elapsed_s: float) -> float | None:
        """The rate after an interval of saturated demand without a 429; ``None`` when
        the limit rose (the rate ran well over a pace refused before): slow start again."""
        self.ran_s += elapsed_s
        self._held_s += elapsed_s
        if self._held_s >= HOLD_S:
            # A rate is safe once sending went on at least that fast for HOLD_S without a 429.
            self.safe = max(self.safe or 0.0, self._hold_rate)
            self._held_s, self._hold_rate = 0.0, rate
        before = rate
        rate = self._grown(rate, now, elapsed_s)
        self.slope = max(0.0, rate - before) / elapsed_s
        if self.refused is not None and rate > REPROBE * self.refused:
            self.decision, self.refused = None, None
            return None
        return rate

    def _grown(self, rate: float, now: float, elapsed_s: float) -> float:
        d = self.decision
        if d is None:
            return rate
        est, ceiling = d.est, d.ceiling
        if d.cheap:
            if d.seeking and (self.refused is None or rate < SETTLE * self.refused):
                # After slow start the reading is a guess, and a crossing costs a request.
                return rate * math.pow(CHEAP_SEEK_PER_S, elapsed_s)
            # An additive increase against CHEAP_STEP back per 429: in balance, about
            # CHEAP_SHARE of the requests draw one. A quiet spell doubles it.
            per_step = min(CHEAP_STEP_429S_MAX, max(1.0, self._step_429s))
            quiet = 2 ** (max(0.0, now - self.decided_at) / CHEAP_DOUBLING_S)
            return rate * (1.0 + CHEAP_SHARE * CHEAP_STEP * rate / per_step * quiet * elapsed_s)
        if rate < (1.0 - NARROW / 4) * SETTLE * est:
            # Under the estimate (a warm start): close the gap, fast, then slowly.
            self._reached_at = now
            return rate + (SETTLE * est - rate) * min(1.0, elapsed_s / CLIMB_S)
        if rate < SETTLE * ceiling:
            # Between the two readings of the last 429: approach the higher one steadily,
            # so that a limit under it is crossed gently (a bucket's burst lets a steep
            # climb run far past its rate before it refuses).
            self._reached_at = now
            approach_s = SEEK_APPROACH_S if d.seeking else max(APPROACH_S, self.window_s)
            step = max(APPROACH_PER_S * est, (ceiling - est) / approach_s) * elapsed_s
            return min(SETTLE * ceiling, rate + step)
        if d.verify:
            self._verified_s += elapsed_s
            if self._verified_s >= VERIFY_S:
                self.decision = dataclasses.replace(
                    d,
                    est=ceiling,
                    reliable=True,
                    verify=False,
                    prior=dataclasses.replace(d.prior, holding=False),
                )
                self._reached_at = now
            return rate
        if d.reliable:
            # Start slow and double the pace every _probe_doubling_s without a 429: a good
            # estimate keeps the rate just under the limit for long.
            probing_s = max(0.0, now - max(self.decided_at, self._reached_at))
            doublings = probing_s / max(self._probe_doubling_s, self.window_s)
            return rate + PROBE_PER_S * 2**doublings * est * elapsed_s
        if d.seeking:
            return rate * math.pow(SEEK_PER_S, elapsed_s)  # the readings of slow start: a guess
        return rate + APPROACH_PER_S * est * elapsed_s  # near them, still a guess

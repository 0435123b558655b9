"""The rate governor: how fast one endpoint key may be called, learnt from its answers.

A plain class without I/O: every method takes ``now`` (a monotonic reading of the caller's
choice), so the policy is tested on a fake clock and the Ray actor around it only remotes.
Permits are *leased* in small batches: a :class:`Grant` holds the delays, relative to the
lease (so it travels between processes whose clocks differ), at which each permit may be
used. Callers report every response (``observe``) and may ``give_back`` unused permits.

Policy, in order of authority:

1. **Retry-After** on a 429 pauses every permit until then (both forms, RFC 9110). A pause
   bumps the *epoch*: outstanding grants are void and clients drop what they hold.
   A ``503`` with ``Retry-After`` pauses the same way but leaves the learnt rate alone:
   the server is down for a while, which says nothing about its rate limit.
2. **RateLimit headers** (``state == "header"``): the strictest *short* window
   (``w <= LONG_WINDOW_S``) paces at ``q / w``, times a margin (0.98) that shrinks on a
   429 despite it and recovers slowly. A *long* window (a daily quota) is a budget: it
   caps the pace at ``r / t`` (what is left over the time left) when that is slower, so
   the budget lasts until it resets instead of going dark for hours. ``r=0`` on any
   window pauses until ``t``; the pause names the quota in :meth:`RateGovernor.stats`.
   Without a policy, ``r / t`` paces (see :meth:`~driver_review.retry.RateLimitInfo.plan`).
   After ``HEADER_TTL_S`` without headers the advertised rate becomes the discovery
   estimate below.
3. **Discovery** otherwise. The limit is bracketed: ``lo`` is a rate held busy for
   ``HOLD_S`` without a 429, ``hi`` the rate that last drew one.

   - *slow start*: every ``INTERVAL_S`` in which demand kept the permit schedule busy and no
     429 came, the rate doubles. The first 429 brackets the limit between the last two
     rates; the lower one is only a guess (a burst allowance can absorb one interval
     over the limit), dropped if a second 429 comes before any rate held. Without
     Retry-After the rate falls back to that guess rather than bisecting: a 429 there
     costs one request, and bisecting lands over the limit as often as not (HAProxy,
     which counts what it refuses, then shuts for a second).
   - on a 429 (``"aimd"`` from then on), ``hi`` becomes the pace of the permits due just
     before it, or, if over the last second the server visibly served less than it
     was sent (``CLIPPED``, see :mod:`driver_review.meter`), what it served: the limit
     showing through. Without Retry-After that takes ``MIN_REFUSED`` 429s and never goes
     below a rate that held: nginx without burst serves every other request sent at up
     to twice its rate, HAProxy nothing while it remembers an overshoot. (Sent is what
     it answered, not the permits leased: a client short of work leaves permits unspent,
     and those say nothing about the limit. Workers report successes with their next
     lease and 429s at once, so what was served reads low just after a 429: a clipped
     bound can come out low, and the probe must find it again.) The new rate bisects
     ``[lo, hi]`` (times ``SETTLE``: a multiplicative decrease in effect), or, once the
     bracket is ``NARROW``, is ``SETTLE * hi``, just under the limit; with no ``lo`` (or
     one refused before it held) it is ``DECREASE * hi``.
   - between 429s the rate *probes* up additively: ``PROBE_PER_S`` of ``hi`` per second, a
     pace that doubles every ``PROBE_DOUBLING_S`` without a 429. A good bracket keeps the
     rate just under the limit for long stretches (few 429s, each of which costs a whole
     Retry-After pause); a ``WIDE`` one is bisected upwards after each hold, and so is any
     wider than ``NARROW`` when the last 429 had no Retry-After (nginx ``limit_req``,
     HAProxy: a 429 then costs one request, not a pause, so the bracket closes sooner).
   - ``REPROBE * hi`` reached without a 429 means the limit rose: slow start again.

   Only one decrease per ``HOLDOFF_S`` (or per pause): 429s for requests sent before a
   decrease say nothing new. But 429s without Retry-After that still outnumber successes
   ``ECHO_RATIO`` to one in that holdoff are an *echo*: a limiter that counts refused
   requests too (HAProxy) stays over its limit while they go on, so the governor pauses
   ``ECHO_PAUSE_S`` for its window to forget them. Rates stay within ``min_rate`` and
   ``max_rate`` of the config.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from driver_review.config import GovernorConfig
from driver_review.meter import Measure, RateMeter
from driver_review.retry import RateLimitInfo, parse_ratelimit, parse_retry_after

State = Literal["slow_start", "aimd", "header", "paused"]

INTERVAL_S = 0.5  # how often the rate is reconsidered (slow start doubles per interval)
BUSY_FRACTION = 0.8  # demand "saturates" when the schedule was busy this share of the time
KEPT_UP = 0.5  # ... and answers came at least at this share of the rate (lagging by latency)
DECREASE = 0.85  # multiplicative decrease on a 429 when nothing better is known
SETTLE = 0.98  # settle at this share of a limit the server showed us
CLIPPED = 0.9  # served below this share of what was sent shows where the limit is
NARROW = 0.05  # bounds closer than this share of ``hi`` are done bisecting (down) ...
WIDE = 0.15  # ... and bounds wider than this share are bisected upwards after a hold
HOLD_S = 2.0  # busy this long at a rate without a 429: the rate is safe
PROBE_PER_S = 0.0002  # above it, grow by this share of the estimate per second ...
PROBE_DOUBLING_S = 16.0  # ... a pace that doubles every this long without a 429
REPROBE = 1.15  # this far above the estimate without a 429: the limit rose
HOLDOFF_S = 0.5  # after a decrease ignore 429s this long (or to the end of its pause)
# Workers report successes with their next lease, 429s at once: this long after a 429, the
# successes from before it are in, and the 429 is judged again on them.
REPORTED_S = 0.5
MIN_SAMPLES = 5  # fewer successes than this say nothing about the limit
# ... nor, without Retry-After (a 429 then costs one request: wait for more), fewer 429s
# than this that the server clipped what it was sent
MIN_REFUSED = 3
LEASE_HORIZON_S = 0.25  # a grant reaches no further ahead than this (beyond its first permit)
HEADER_TTL_S = 30.0  # header mode lasts this long after the last RateLimit header
HEADER_MARGIN = 0.98  # pace a little under the advertised rate: arrival jitter
HEADER_MARGIN_MIN = 0.5
HEADER_RECOVER_PER_S = 0.002
LONG_WINDOW_S = 60.0  # a RateLimit window longer than this is a quota (a budget), not a rate
BUSY_SPANS = 1000  # spans of saturated demand kept (merged when contiguous)
# An echo: 429s without Retry-After still outnumber successes this many to one during the
# holdoff after a decrease, and are at least ECHO_MIN and this share of the permits the
# holdoff held ... then pause this long, so a limiter that counts refused requests forgets.
ECHO_RATIO = 3.0
ECHO_MIN = 3
ECHO_SHARE = 0.25
ECHO_PAUSE_S = 1.0


@dataclass(frozen=True)
class Grant:
    """Permits leased from a governor.

    ``delays_s[i]`` is when permit ``i`` may be used, in seconds after the lease was made
    (never negative, non-decreasing). An empty grant means the schedule is full for now:
    ask again after ``retry_in_s``. ``epoch`` changes whenever the governor voids
    outstanding grants (a pause or a decrease).
    """

    grant_id: int
    epoch: int
    delays_s: tuple[float, ...]
    rate: float
    retry_in_s: float = 0.0
    #: The endpoint is paused this much longer (a Retry-After, an exhausted quota): a
    #: client stops taking work for it rather than queue it behind the pause.
    paused_for_s: float = 0.0
    #: When the lease was made on ``clock`` (a name for the issuer's monotonic clock, e.g.
    #: its node): a client reading the same clock schedules from ``issued_at`` rather
    #: than from when the grant reached it, so a grant that arrived late does not
    #: overlap the next one another client got promptly (a burst the server never allowed).
    issued_at: float | None = None
    clock: str | None = None


class RateGovernor:
    """Adaptive permit issuer for one endpoint key. Not thread-safe; one owner calls it."""

    def __init__(
        self,
        config: GovernorConfig | None = None,
        *,
        key: str = "default",
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or GovernorConfig()
        self.key = key
        self._wall_clock = wall_clock  # only to read HTTP-date Retry-After values
        self._rate = self._clamp(self.config.initial_rate)
        self._mode: State = "slow_start"
        # The limit lies between ``lo`` (held without 429s) and ``hi`` (drew a 429).
        self._lo: float | None = None
        self._hi: float | None = None
        self._held_s = 0.0  # busy time without a 429 since the rate was ``_hold_rate``
        self._hold_rate = self._rate
        self._held_since_429 = True
        self._lo_guessed = False  # ``lo`` came from slow start and no rate has held since
        # When ``lo`` last rose by a hold, and what it was before: a 429 soon after says a
        # burst allowance, not the limit, carried the rate through that hold.
        self._lo_raised_at = -math.inf
        self._lo_before: float | None = None
        self._decreased_at = -math.inf
        # 429s and successes since the last decrease, while its holdoff lasts (echo test).
        self._echo_429s = self._holdoff_ok = 0
        self._echoed = False
        self._bisect_above = WIDE  # bisect upwards after a hold while hi - lo > this * hi
        self._epoch = 0
        self._next_slot = -math.inf
        self._paused_until = -math.inf
        # Why the current pause: e.g. "429 Retry-After", "quota 'daily' exhausted".
        self._pause_reason: str | None = None
        self._pause_quota: tuple[str, float | None] | None = None  # (name, window_s)
        self._last_now = 0.0
        # Rate reconsideration interval and how busy the schedule was in it.
        self._interval_start: float | None = None
        self._idle_s = 0.0
        self._idle_mark = -math.inf
        self._last_decrease_until = -math.inf
        self._saw_429_in_interval = False
        self._answered = 0  # responses observed in this interval
        self._meter = RateMeter(lag_s=LEASE_HORIZON_S, keep_s=REPORTED_S)
        self._rejudge: _Rejudge | None = None  # the last decrease, to judge again
        self._header_rate: float | None = None
        self._header_seen_at = -math.inf
        self._header_margin = HEADER_MARGIN
        self._last_grant: tuple[int, int] | None = None  # (id, epoch) of the schedule's tail
        self._grant_id = 0
        self._warm: dict[str, float] | None = None  # set by warm_start
        # When demand exceeded the permits: how close to its limit the endpoint ran is
        # only a fair question then (benchmark, status).
        self._busy_s = 0.0
        self._busy_spans: deque[tuple[float, float]] = deque(maxlen=BUSY_SPANS)
        self._n = {
            "grants": 0,
            "permits": 0,
            "returned": 0,
            "429s": 0,
            "503s": 0,
            "ok": 0,
            "decreases": 0,
            "echo_pauses": 0,
        }

    # --- leasing ----------------------------------------------------------------------
    def lease(self, n: int, now: float) -> Grant:
        """Up to ``n`` permits spaced at the current rate, none beyond the lease horizon.

        Permits far in the future would outlive a change of rate (and let one eager caller
        queue up the schedule), so a full schedule answers an empty grant saying when to
        ask again.
        """
        if n < 1:
            raise ValueError(f"lease: n must be >= 1, got {n}")
        self._tick(now)
        self._account_idle(now)
        spacing_s = 1.0 / self._rate
        start = max(now, self._next_slot, self._paused_until)
        horizon = now + LEASE_HORIZON_S
        # As many as asked if they fit in an idle schedule; a busy one waits until they do,
        # so leases stay batches instead of one permit per round trip.
        count = min(n, 1 + int(LEASE_HORIZON_S / spacing_s))
        self._grant_id += 1
        last = start + (count - 1) * spacing_s
        paused_for_s = self.paused_for_s(now)
        if last > horizon + 1e-9:
            return Grant(
                self._grant_id,
                self._epoch,
                (),
                self._rate,
                retry_in_s=last - horizon,
                paused_for_s=paused_for_s,
            )
        self._next_slot = start + count * spacing_s
        self._last_grant = (self._grant_id, self._epoch)
        self._n["grants"] += 1
        self._n["permits"] += count
        delays = tuple(start - now + i * spacing_s for i in range(count))
        self._meter.offered((now + d for d in delays), self._rate)
        return Grant(self._grant_id, self._epoch, delays, self._rate, paused_for_s=paused_for_s)

    def give_back(self, grant: Grant, unused: int, now: float) -> None:
        """Return the last ``unused`` permits of ``grant``. Only the newest grant of the
        epoch is the schedule's tail and can be rewound; others are lost (errs slow)."""
        self._n["returned"] += max(0, unused)
        if unused <= 0 or self._last_grant != (grant.grant_id, grant.epoch):
            return
        unused = min(unused, len(grant.delays_s))
        rewound = self._next_slot - unused / grant.rate
        self._next_slot = max(rewound, now, self._paused_until)
        self._last_grant = None

    # --- feedback ---------------------------------------------------------------------
    def observe(self, status: int, headers: Mapping[str, str], now: float) -> int:
        """Account one response; returns the epoch (a change voids held grants)."""
        self._tick(now)
        self._answered += 1
        info = parse_ratelimit(headers) if headers else None
        if status == 429:
            retry_after_s = parse_retry_after(_header(headers, "retry-after"), self._wall_clock())
            if retry_after_s is None and info is not None:
                # Retry-After takes precedence; without it the exhausted window says when
                # (and _use_headers below names it).
                retry_after_s = info.plan(LONG_WINDOW_S).pause_s
            self.on_429(retry_after_s, now, header_mode=info is not None)
        elif status == 503 and (
            retry_after_s := parse_retry_after(_header(headers, "retry-after"), self._wall_clock())
        ):
            # Down for maintenance or overloaded: wait as asked, but the rate that worked
            # before still works after, so nothing is decreased.
            self._n["503s"] += 1
            self._pause(now + retry_after_s, "503 Retry-After")
        else:
            self._n["ok"] += 1
            self._meter.answered(now, ok=True)
            if now < self._last_decrease_until:
                self._holdoff_ok += 1
        if info is not None:
            self._use_headers(info, now)
        return self._epoch

    def on_429(self, retry_after_s: float | None, now: float, *, header_mode: bool = False) -> int:
        """A 429 (with the server's Retry-After, if any); returns the epoch."""
        self._tick(now)
        self._n["429s"] += 1
        self._meter.answered(now, ok=False)
        self._saw_429_in_interval = True
        # Measured before the pause below moves the window.
        measure_from = self._paused_until
        measured = self._meter.measure(now, not_before=measure_from)
        pace = self._meter.pace(now, self._rate)
        if retry_after_s is not None and retry_after_s > 0:
            self._pause(now + retry_after_s, "429 Retry-After")
        # A 429 that pauses costs a whole Retry-After: bisect up only from far below. One
        # without (nginx, HAProxy) costs one request: close the bracket sooner.
        self._bisect_above = WIDE if retry_after_s else NARROW
        if now < self._last_decrease_until:
            if not retry_after_s:
                self._echo_429s += 1
                self._pause_on_echo(now)
            return self._epoch
        self._echo_429s, self._holdoff_ok, self._echoed = 0, 0, False
        if header_mode or self._mode == "header":
            # The server's own numbers were too generous for our arrival pattern.
            self._header_margin = max(HEADER_MARGIN_MIN, self._header_margin * 0.9)
            if self._header_rate is not None:
                self._rate = self._clamp(self._header_rate * self._header_margin)
        else:
            before = _Bounds(self._lo, self._hi, self._lo_guessed, self._held_since_429, self._mode)
            self._rate = self._clamp(self._after_429(measured, pace, now, bool(retry_after_s)))
            decreases = self._n["decreases"] + 1
            self._rejudge = _Rejudge(
                now, measure_from, pace, before, self._rate, decreases, bool(retry_after_s)
            )
            self._held_since_429 = False
            self._mode = "aimd"
            self._held_s, self._hold_rate = 0.0, self._rate
            self._decreased_at = max(now, self._paused_until)
        self._n["decreases"] += 1
        self._last_decrease_until = max(now + HOLDOFF_S, self._paused_until)
        self._void_grants(now)
        return self._epoch

    # --- reading ----------------------------------------------------------------------
    @property
    def rate(self) -> float:
        return self._rate

    @property
    def epoch(self) -> int:
        return self._epoch

    def state(self, now: float | None = None) -> State:
        now = self._last_now if now is None else now
        return "paused" if now < self._paused_until else self._mode

    def paused_for_s(self, now: float) -> float:
        return max(0.0, self._paused_until - now)

    def stats(self, now: float | None = None) -> dict[str, Any]:
        now = self._last_now if now is None else now
        paused = now < self._paused_until
        quota = self._pause_quota if paused else None
        return {
            "key": self.key,
            "state": self.state(now),
            "rate": self._rate,
            "limit_estimate": self._hi,
            "safe_rate": self._lo,
            "header_rate": self._header_rate,
            "paused_for_s": self.paused_for_s(now),
            # Only while paused: why, and for a quota its name and window (status shows it).
            "pause_reason": self._pause_reason if paused else None,
            "quota": quota[0] if quota else None,
            "quota_window_s": quota[1] if quota else None,
            "epoch": self._epoch,
            # When this run started from an earlier one's limit: when that was learnt.
            "warm_start": self._warm,
            "busy_s": self._busy_s,
            **self._n,
        }

    # --- warm start -------------------------------------------------------------------
    def learnt(self) -> dict[str, Any] | None:
        """What this governor knows of its endpoint's limit, for the next run to start
        from (see :meth:`warm_start`); ``None`` while it knows nothing."""
        lo = None if self._lo_guessed else self._lo
        if lo is None and self._hi is None and self._header_rate is None:
            return None
        return {
            "safe_rate": lo,
            "limit_estimate": self._hi,
            "header_rate": self._header_rate,
            "learnt_at": self._wall_clock(),
        }

    def warm_start(self, learnt: Mapping[str, Any], now: float) -> bool:
        """Start from what an earlier run learnt instead of slow start from
        ``initial_rate``, if it is recent. Nothing is taken on faith:
        the learnt safe rate is a guess again until it holds for ``HOLD_S``, a 429 before
        that drops it and the bracket is found afresh, and the probe above it runs as after
        any 429. Older than ``config.warm_start_s``, it is ignored. Returns whether it was
        used."""
        age_s = self._wall_clock() - float(learnt.get("learnt_at") or 0.0)
        header = _positive(learnt.get("header_rate"))
        hi = _positive(learnt.get("limit_estimate")) or header
        lo = _positive(learnt.get("safe_rate"))
        if not 0.0 <= age_s <= self.config.warm_start_s or (hi is None and lo is None):
            return False
        if lo is None or (hi is not None and lo >= hi):
            lo = SETTLE * hi if hi is not None else lo
        self._tick(now)
        self._mode = "aimd"
        self._lo, self._hi, self._lo_guessed = lo, hi, True
        self._held_since_429 = False
        self._rate = self._hold_rate = self._clamp(lo or self._rate)
        self._held_s = 0.0
        self._decreased_at = now  # the probe above starts slow, as after a decrease
        self._warm = {"learnt_at": float(learnt["learnt_at"]), "age_s": age_s}
        return True

    # --- internals --------------------------------------------------------------------
    def _clamp(self, rate: float) -> float:
        return min(self.config.max_rate, max(self.config.min_rate, rate))

    def _pause(
        self, until: float, reason: str, quota: tuple[str, float | None] | None = None
    ) -> None:
        if until == self._paused_until and quota is not None:
            # A 429 paused us until the exhausted window resets: name the window.
            self._pause_reason, self._pause_quota = reason, quota
        if until > self._paused_until:
            self._paused_until = until
            self._pause_reason, self._pause_quota = reason, quota
            self._next_slot = max(self._next_slot, until)
            self._epoch += 1

    def _pause_on_echo(self, now: float) -> None:
        """Refused far more than served since a decrease, with no Retry-After to say for how
        long: the limiter may count refused requests too (HAProxy's ``http_req_rate``), so
        that sending on, even at the lower rate, keeps its count over the limit. Pause once
        per decrease, long enough for its window to forget them."""
        needed = max(ECHO_MIN, ECHO_SHARE * self._rate * HOLDOFF_S, ECHO_RATIO * self._holdoff_ok)
        if not self._echoed and self._echo_429s >= needed:
            self._echoed = True
            self._n["echo_pauses"] += 1
            self._pause(now + ECHO_PAUSE_S, "429s without Retry-After")
            # 429s still coming back for requests sent before the pause say nothing new.
            self._last_decrease_until = max(self._last_decrease_until, self._paused_until)
            self._void_grants(now)

    def _void_grants(self, now: float) -> None:
        """Void every grant out (clients drop what they hold); the new schedule starts one
        spacing, at the new rate, after the last permit that fell due: a permit handed out
        at once could follow one sent a moment ago, closer than either rate allows, and a
        limiter on spacing (nginx without a burst) refuses it, so voids again, and again."""
        self._epoch += 1
        last = self._meter.last_due(now)
        after_last = now if last is None else last + 1.0 / self._rate
        self._next_slot = max(now, self._paused_until, after_last)
        self._last_grant = None

    def _account_idle(self, now: float) -> None:
        """Add the time since the schedule ran dry (if it did) to this interval's idle time."""
        start = max(self._next_slot, self._idle_mark, self._paused_until)
        if now > start:
            self._idle_s += now - start
        self._idle_mark = max(self._idle_mark, now)

    def _use_headers(self, info: RateLimitInfo, now: float) -> None:
        self._header_seen_at = now
        plan = info.plan(LONG_WINDOW_S)
        if plan.rate_per_s is not None:
            self._header_rate = plan.rate_per_s
            self._rate = self._clamp(plan.rate_per_s * self._header_margin)
        self._mode = "header"
        if plan.pause_s:
            name = plan.quota or "default"
            self._pause(now + plan.pause_s, f"quota {name!r} exhausted", (name, plan.window_s))

    def _tick(self, now: float) -> None:
        """Let time act on the rate: one step per elapsed interval of activity."""
        self._last_now = max(self._last_now, now)
        if self._rejudge is not None and now >= self._rejudge.at + REPORTED_S:
            self._judge_again(self._rejudge)
        self._meter.trim(now)
        if self._interval_start is None:
            self._interval_start = self._idle_mark = now
            self._meter.start(now)
        if now < self._paused_until:
            return
        if self._interval_start < self._paused_until:
            self._start_interval(self._paused_until)  # a pause is not an interval of demand
        elapsed_s = now - self._interval_start
        if elapsed_s < INTERVAL_S:
            return
        self._account_idle(now)
        # Demand saturates the rate when the schedule stayed full and the answers kept up
        # with it (a client short of CPU leases permits it cannot spend on time).
        busy = (
            self._idle_s <= (1.0 - BUSY_FRACTION) * elapsed_s
            and self._answered >= KEPT_UP * self._rate * elapsed_s
        )
        if busy:
            self._note_busy(self._interval_start, now)
        if self._mode == "header":
            self._header_step(now, elapsed_s)
        elif busy and not self._saw_429_in_interval:
            if self._mode == "slow_start":
                self._rate = self._clamp(self._rate * 2.0)
                self._meter.paced_up(now)
            else:
                self._increase(now, elapsed_s)
        self._start_interval(now)

    def _judge_again(self, r: _Rejudge) -> None:
        """Decide the last decrease again, now that the successes from before its 429 are
        reported: judged at once, the server seemed to serve less than it did, and a
        schedule it never clipped could pass for clipped (a bound far under the limit)."""
        self._rejudge = None
        if self._n["decreases"] != r.decreases or self._mode != "aimd":
            return  # decided anew since (another 429, headers): the moment has passed
        measured = self._meter.measure(r.at, not_before=r.measure_from)
        after = self._lo, self._hi, self._lo_guessed
        b = r.before
        self._lo, self._hi, self._lo_guessed = b.lo, b.hi, b.lo_guessed
        self._held_since_429, self._mode = b.held_since_429, b.mode
        rate = self._clamp(self._after_429(measured, r.pace, r.at, r.paused))
        self._held_since_429, self._mode = False, "aimd"
        if rate == r.rate:
            self._lo, self._hi, self._lo_guessed = after
            return
        self._rate = self._hold_rate = rate
        self._held_s = 0.0
        if rate < r.rate:
            self._void_grants(self._last_now)

    def _note_busy(self, start: float, end: float) -> None:
        self._busy_s += end - start
        if self._busy_spans and self._busy_spans[-1][1] >= start - 1e-9:
            self._busy_spans[-1] = (self._busy_spans[-1][0], end)
        else:
            self._busy_spans.append((start, end))

    def busy_spans(self) -> list[tuple[float, float]]:
        """When demand kept the schedule full (the endpoint was the constraint), as
        ``(start, end)`` readings of the caller's clock, the newest ``BUSY_SPANS``."""
        return list(self._busy_spans)

    def _start_interval(self, at: float) -> None:
        self._interval_start = at
        self._idle_s = 0.0
        self._idle_mark = at
        self._saw_429_in_interval = False
        self._answered = 0

    def _after_429(
        self, measured: Measure | None, sent: float, now: float, paused: bool = False
    ) -> float:
        """The new rate, after narrowing the bounds on the limit with a 429 at pace ``sent``."""
        m = measured
        if (
            paused
            and self._lo is not None
            and now - self._lo_raised_at < HOLD_S
            and sent <= (1 + WIDE) * self._lo
            and (self._lo_before is None or sent > self._lo_before)
        ):
            # Refused at the rate a hold just made safe, within one more hold: a bucket's
            # burst lasted through that hold (at 54/s against 50 with a burst of 10, 2.3 s),
            # not the limit. The rate safe before it is what is known to hold. (A 429 at a
            # rate well above ``lo``, a bisection up, says nothing against ``lo``.) Only a 429
            # with Retry-After: it costs a whole pause. One without (nginx, HAProxy) costs a
            # request, and there it fell on noise near the limit as often: real sweeps through
            # nginx without burst and HAProxy ran at 0.236 and 0.558 of the limit with it.
            self._lo = self._lo_before
        if (
            m
            and m.served >= MIN_SAMPLES
            and (paused or m.refused >= MIN_REFUSED)
            and m.served_per_s < CLIPPED * m.answered_per_s
        ):
            # The server visibly refused part of what it was sent: its limit showing through
            # (plus what a burst allowance let by: an upper bound, tight over a long window).
            clipped = m.served_per_s
            if not paused and self._lo is not None and not self._lo_guessed:
                # Not below a rate that held, though: nginx without burst serves only every
                # other request sent up to twice its rate, HAProxy nothing while it remembers
                # an overshoot. What they served while refusing is under their limit.
                clipped = max(clipped, self._lo)
            sent = min(sent, clipped)
        self._hi = sent
        if self._mode == "slow_start" and self._lo is None:
            # The rate before the last doubling went without a 429; but it lasted one
            # interval, which a burst allowance can absorb: a guess until a rate holds.
            self._lo, self._lo_guessed = sent / 2, True
        elif self._lo_guessed and not self._held_since_429:
            self._lo, self._lo_guessed = None, False  # refused again before any rate held
        if self._lo is not None and self._lo >= sent:
            self._lo = None  # a 429 at a rate once safe: the limit dropped
        if self._lo is None:
            return DECREASE * sent
        if self._mode == "slow_start" and not paused:
            return SETTLE * self._lo
        if sent - self._lo <= NARROW * sent:
            if not self._held_since_429:
                # Settled at ``lo`` and refused again before holding: ``lo`` was never safe
                # (a burst allowance made it look so). Start the bracket afresh.
                self._lo = None
                return DECREASE * sent
            # Done bisecting: settle just under the 429, then probe slowly.
            self._lo = min(self._lo, SETTLE * sent)
            return self._lo
        # Bisect, a little low: landing right on the limit would make the probe cross it.
        return SETTLE * (self._lo + sent) / 2

    def _increase(self, now: float, elapsed_s: float) -> None:
        # A rate is safe once sending went on at least that fast for HOLD_S without a 429.
        self._held_s += elapsed_s
        if self._held_s >= HOLD_S:
            if self._lo is None or self._hold_rate > self._lo:
                self._lo_before, self._lo_raised_at = self._lo, now
                self._lo = self._hold_rate
            self._lo_guessed = False
            self._held_since_429 = True
            self._held_s, self._hold_rate = 0.0, self._rate
            if (
                self._lo is not None
                and self._hi is not None
                and self._hi - self._lo > self._bisect_above * self._hi
            ):
                # Far below the last 429 and safe here: bisect upwards.
                self._rate = self._hold_rate = self._clamp((self._lo + self._hi) / 2)
                return
        hi = max(self._hi or self._rate, self.config.min_rate)
        # The probe starts slow and doubles its pace every PROBE_DOUBLING_S without a 429: a
        # good estimate keeps the rate just under the limit for long, a stale one is soon left.
        probing_s = max(0.0, now - self._decreased_at)
        step = PROBE_PER_S * 2 ** (probing_s / PROBE_DOUBLING_S) * hi * elapsed_s
        self._rate = self._clamp(self._rate + step)
        if self._rate > REPROBE * hi:
            self._mode, self._hi = "slow_start", None  # the limit rose: find it again

    def _header_step(self, now: float, elapsed_s: float) -> None:
        if now - self._header_seen_at > HEADER_TTL_S:
            self._mode = "aimd"
            self._hi = self._header_rate
            return
        self._header_margin = min(
            HEADER_MARGIN, self._header_margin + HEADER_RECOVER_PER_S * elapsed_s
        )
        if self._header_rate is not None:
            self._rate = self._clamp(self._header_rate * self._header_margin)


@dataclass(frozen=True)
class _Bounds:
    lo: float | None
    hi: float | None
    lo_guessed: bool
    held_since_429: bool
    mode: State


@dataclass(frozen=True)
class _Rejudge:
    """A decrease to decide again once late reports are in (see ``REPORTED_S``)."""

    at: float  # when its 429 came
    measure_from: float  # the window it was measured over began no earlier
    pace: float
    before: _Bounds
    rate: float  # the rate it set
    decreases: int  # the count of decreases with it
    paused: bool  # its 429 said Retry-After


def _positive(value: Any) -> float | None:
    """A finite rate above zero, or None (what a hand-edited or corrupt file may hold)."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) and rate > 0 else None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive, for plain dicts as well as ``httpx.Headers``."""
    return next((v for k, v in headers.items() if k.lower() == name), None)

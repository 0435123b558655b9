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
3. **Discovery** otherwise (:mod:`driver_review.discovery`). *Slow start* doubles the rate
   every ``INTERVAL_S`` in which demand kept the permit schedule busy and no 429 came.
   Every 429 that is news is then read against what the server served before it (the
   :class:`~driver_review.meter.RateMeter`), and the rate set from that reading climbs
   or probes between 429s as the discovery module says.

Only one decision per ``HOLDOFF_S`` (or per pause): 429s for requests sent before it say
nothing new. Workers report successes with their next lease and 429s at once, so each
decision is read again ``REPORTED_S`` later (after the end of its pause: workers lease
again then), once the successes from before its 429 are in. 429s without Retry-After
that still outnumber successes ``ECHO_RATIO`` to one during a holdoff are an *echo*: a
limiter that counts refused requests too (HAProxy) stays over its limit while they go on,
so the governor pauses ``ECHO_PAUSE_S`` for its window to forget them, reads the limit
again, and takes its 429s as costly from then on. A small step back (a cheap 429) leaves
the permits already out alone; a larger one, or a pause, voids them. Rates stay within
``min_rate`` and ``max_rate`` of the config.

A window that ran out (a quota per minute) refuses at any pace until it turns over: a 429
for one of the first requests after a pause for 429s finds the endpoint *still shut*, so
the pause doubles (up to ``SHUT_PAUSE_MAX_S``) with the rate left alone, and one request
at a time asks whether it opened. A spell of ``LONG_SPELL_S`` or more without service was
a long window: the limit is what the endpoint served from the start of the run that spent
the quota until it served again, later 429s are read over that window, and the probe
above the estimate doubles no faster than the window is long.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from driver_review import discovery
from driver_review.config import GovernorConfig
from driver_review.discovery import SETTLE, Discovery, Moment, Reading
from driver_review.meter import HISTORY_S, WINDOW_S, RateMeter
from driver_review.retry import RateLimitInfo, parse_ratelimit, parse_retry_after

State = Literal["slow_start", "aimd", "header", "paused"]

INTERVAL_S = 0.125  # how often the rate is reconsidered (slow start doubles per interval)
BUSY_FRACTION = 0.8  # demand "saturates" when the schedule was busy this share of the time
KEPT_UP = 0.5  # ... and answers came at least at this share of the rate (lagging by latency)
HOLDOFF_S = 0.5  # after a decision ignore 429s this long (or to the end of its pause)
# Workers report successes with their next lease, 429s at once: this long after a 429, the
# successes from before it are in, and the decision is made again on them.
REPORTED_S = 0.5
PAUSED_REPORTS_S = 2.0  # ... after the end of a pause, as long as it is no longer than this
SMALL_STEP = 0.06  # a step back no larger than this share leaves the permits out alone
LEASE_HORIZON_S = 0.25  # a grant reaches no further ahead than this (beyond its first permit)
HEADER_TTL_S = 30.0  # header mode lasts this long after the last RateLimit header
HEADER_MARGIN = 0.98  # pace a little under the advertised rate: arrival jitter
HEADER_MARGIN_MIN = 0.5
HEADER_RECOVER_PER_S = 0.002
LONG_WINDOW_S = 60.0  # a RateLimit window longer than this is a quota (a budget), not a rate
BUSY_SPANS = 1000  # spans of saturated demand kept (merged when contiguous)
RECENT_DECISIONS = 8  # the last decisions kept with what they read, for status
# An echo: 429s without Retry-After still outnumber successes this many to one during the
# holdoff after a decision, and are at least ECHO_MIN and this share of the permits the
# holdoff held ... then pause this long, so a limiter that counts refused requests forgets.
ECHO_RATIO = 3.0
ECHO_MIN = 3
ECHO_SHARE = 0.25
ECHO_PAUSE_S = 1.0
# A spell without service runs from a pause for 429s until a request sent after it is
# served. A 429 for one of the first requests after its pause (within SHUT_FIRST_S, or one
# permit) finds the endpoint still shut: a window that ran out (a quota per minute, a stick
# table that counts refusals) stays shut at any pace, so the pause doubles (up to
# SHUT_PAUSE_MAX_S) and the rate is left alone. A spell of LONG_SPELL_S or more was a long
# window: the limit is what the endpoint served from the start of the run that ran it out
# until it served again (per-second counts of the last SERVED_HISTORY_S).
SHUT_FIRST_S = 0.05
PROBE_WAIT_S = 1.0  # while shut, one request at a time: the next one this long after
SHUT_PAUSE_MAX_S = 60.0
SHUT_REASON = "still shut after a pause"
LONG_SPELL_S = 8.0
SERVED_HISTORY_S = 600


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
    #: The endpoint refuses requests bunched closer than its rate (its 429s come without
    #: Retry-After, as nginx ``limit_req`` without ``burst`` answers a pair): a request that
    #: leaves well after its permit waits for a fresh one (:func:`~driver_review.limiter.on_time`).
    strict_spacing: bool = False


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
        self._search = Discovery()
        self._moment: Moment | None = None  # the last decision's 429, to read again ...
        self._read_again_at = -math.inf  # ... then
        self._429s_at_decision = 0  # the count of 429s when the last decision was made
        self._epoch = 0
        self._next_slot = -math.inf
        self._paused_until = -math.inf
        self._pause_began = -math.inf  # when the pause that ends at _paused_until began
        self._spell_from: float | None = None  # a spell without service began (a pause)
        self._spell_run_from = -math.inf  # ... ending the run that began then
        self._run_from = -math.inf  # when the run the last 429 that was news ended began
        self._news_at: float | None = None  # when the request of the last 429 that was news left
        self._shut_pause_s = 0.0  # the spell's last pause while it stayed shut (0: none)
        self._served_s: deque[list[int]] = deque()  # [second, successes], for a long spell
        self._probe_at = -math.inf  # while shut, when the last single permit was leased
        self._refused_shut_at: float | None = None  # the last request found still shut, sent
        self._reopened_at: float | None = None  # when a spell last ended (served again)
        # A long spell showed a long window, about this long: 429s are read over it.
        self._window_s: float | None = None
        # Why the current pause: e.g. "429 Retry-After", "quota 'daily' exhausted".
        self._pause_reason: str | None = None
        self._pause_quota: tuple[str, float | None] | None = None  # (name, window_s)
        self._last_now = 0.0
        self._origin: float | None = None  # the first reading of the clock
        # Rate reconsideration interval and how busy the schedule was in it.
        self._interval_start: float | None = None
        self._idle_s = 0.0
        self._idle_mark = -math.inf
        self._saw_429_in_interval = False
        self._answered = 0  # responses observed in this interval
        self._holdoff_until = -math.inf
        # 429s and successes since the last decision, while its holdoff lasts (echo test).
        self._echo_429s = self._holdoff_ok = 0
        self._echoed = False
        self._meter = RateMeter(lag_s=LEASE_HORIZON_S, keep_s=PAUSED_REPORTS_S + REPORTED_S)
        self._header_rate: float | None = None
        self._header_seen_at = -math.inf
        self._header_margin = HEADER_MARGIN
        self._last_grant: tuple[int, int] | None = None  # (id, epoch) of the schedule's tail
        self._grant_id = 0
        self._warm: dict[str, float] | None = None  # set by warm_start
        # The last 429 came without Retry-After: late requests wait for a fresh permit.
        self._strict_spacing = False
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
            "shut_pauses": 0,
        }
        # Which reading decided each 429 that was news (discovery's ``Decision.why``).
        self._decided: dict[str, int] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)

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
        if self._shut_pause_s and start <= horizon:
            # Still shut when last asked: one request finds out whether it opened.
            if now < self._probe_at + PROBE_WAIT_S:
                return Grant(
                    self._grant_id,
                    self._epoch,
                    (),
                    self._rate,
                    retry_in_s=self._probe_at + PROBE_WAIT_S - now,
                    strict_spacing=self._strict_spacing,
                )
            count, self._probe_at = 1, start
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
                strict_spacing=self._strict_spacing,
            )
        self._next_slot = start + count * spacing_s
        self._last_grant = (self._grant_id, self._epoch)
        self._n["grants"] += 1
        self._n["permits"] += count
        delays = tuple(start - now + i * spacing_s for i in range(count))
        self._meter.offered((now + d for d in delays), self._rate)
        return Grant(
            self._grant_id,
            self._epoch,
            delays,
            self._rate,
            paused_for_s=paused_for_s,
            strict_spacing=self._strict_spacing,
        )

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
    def observe(
        self, status: int, headers: Mapping[str, str], now: float, *, sent_at: float | None = None
    ) -> int:
        """Account one response; returns the epoch (a change voids held grants).

        ``sent_at``: when its request left (default ``now``). The meter keeps answers at
        that moment, which is when a limiter admitted or refused them: a limiter in front
        of the server refuses at once, while what it admits takes the server's time, so
        by when they came back, the successes sent just before a 429 came after it."""
        self._tick(now)
        sent = now if sent_at is None else min(now, sent_at)
        self._answered += 1
        info = parse_ratelimit(headers) if headers else None
        if status == 429:
            retry_after_s = parse_retry_after(_header(headers, "retry-after"), self._wall_clock())
            if retry_after_s is None and info is not None:
                # Retry-After takes precedence; without it the exhausted window says when
                # (and _use_headers below names it).
                retry_after_s = info.plan(LONG_WINDOW_S).pause_s
            self.on_429(retry_after_s, now, header_mode=info is not None, sent_at=sent)
        elif status == 503 and (
            retry_after_s := parse_retry_after(_header(headers, "retry-after"), self._wall_clock())
        ):
            # Down for maintenance or overloaded: wait as asked, but the rate that worked
            # before still works after, so nothing is decreased.
            self._n["503s"] += 1
            self._pause(now + retry_after_s, "503 Retry-After", spell=False)
        else:
            self._n["ok"] += 1
            self._meter.answered(sent, ok=True)
            self._count_served(sent)
            if self._spell_from is not None and sent >= self._spell_from:
                self._reopened(sent, now)
            if sent < self._holdoff_until:
                self._holdoff_ok += 1
        if info is not None:
            self._use_headers(info, now)
        return self._epoch

    def on_429(
        self,
        retry_after_s: float | None,
        now: float,
        *,
        header_mode: bool = False,
        sent_at: float | None = None,
    ) -> int:
        """A 429 (with the server's Retry-After, if any) that came at ``now`` for a request
        sent at ``sent_at`` (default ``now``); returns the epoch. It is read against what
        was sent before it; its pause and holdoff run from when it came."""
        self._tick(now)
        sent = now if sent_at is None else min(now, sent_at)
        self._n["429s"] += 1
        self._meter.answered(sent, ok=False)
        self._saw_429_in_interval = True
        if self._mode != "header" and self._still_shut(sent):
            self._refused_shut_at = sent
            self._shut_again(now, retry_after_s)
            return self._epoch
        if now >= self._holdoff_until:  # news: the run it ended began then
            origin = now if self._origin is None else self._origin
            opened = origin if self._reopened_at is None else self._reopened_at
            self._run_from = max(self._search.decided_at, origin, opened)
        pace = self._meter.pace(now, self._rate)
        paused = retry_after_s is not None and retry_after_s > 0
        if paused:
            self._pause(now + retry_after_s, "429 Retry-After")  # type: ignore[operator]
        if now < self._holdoff_until:
            if not paused:
                self._echo_429s += 1
                self._pause_on_echo(now)
            return self._epoch
        self._echo_429s, self._holdoff_ok, self._echoed = 0, 0, False
        self._n["decreases"] += 1
        self._holdoff_until = max(now + HOLDOFF_S, self._paused_until)
        if header_mode or self._mode == "header":
            # The server's own numbers were too generous for our arrival pattern.
            self._header_margin = max(HEADER_MARGIN_MIN, self._header_margin * 0.9)
            if self._header_rate is not None:
                self._rate = self._clamp(self._header_rate * self._header_margin)
            self._void_grants(now)
            return self._epoch
        search = self._search
        moment = Moment(
            at=sent,
            pace=pace,
            ran_s=search.ran_s,
            slope=search.slope,
            slow_start=self._mode == "slow_start",
            costly=paused or self._n["echo_pauses"] > 0,
            run_from=search.decided_at,
            prior=search.prior(),
            refused=search.refused,
            last_at=self._news_at,
        )
        self._news_at = sent
        before, self._mode, self._moment = self._rate, "aimd", moment
        # A 429 without Retry-After may be a pair refused (nginx without burst): from now on
        # a request late for its permit takes a fresh one. Elsewhere a late request is
        # absorbed (a bucket's burst, a window's count) and holding it only costs its slot.
        self._strict_spacing = not paused
        # Workers paused by a Retry-After lease (and so report) again when it ends.
        resume = min(self._paused_until, now + PAUSED_REPORTS_S) if paused else now
        self._read_again_at = resume + REPORTED_S
        reading = self._reading(moment)
        decision = discovery.decide(moment, reading)
        self._decided[decision.why] = self._decided.get(decision.why, 0) + 1
        self._rate = self._clamp(decision.rate)
        self._recent.append(_entry(moment, reading, decision, self._rate))
        step_429s = self._n["429s"] - 1 - self._429s_at_decision
        self._429s_at_decision = self._n["429s"] - 1
        search.apply(decision, moment, self._rate, max(now, self._paused_until), step_429s)
        if paused or self._rate < (1.0 - SMALL_STEP) * before:
            self._void_grants(now)
        # else a small step back: the permits out stay good (voiding them would mix what
        # other processes still hold with the new schedule, bunching requests).
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
            "limit_estimate": self._search.estimate,
            "safe_rate": self._search.safe,
            "header_rate": self._header_rate,
            "paused_for_s": self.paused_for_s(now),
            # Only while paused: why, and for a quota its name and window (status shows it).
            "pause_reason": self._pause_reason if paused else None,
            "quota": quota[0] if quota else None,
            "quota_window_s": quota[1] if quota else None,
            "epoch": self._epoch,
            "strict_spacing": self._strict_spacing,
            # When this run started from an earlier one's limit: when that was learnt.
            "warm_start": self._warm,
            "busy_s": self._busy_s,
            # A long window it showed (a quota per minute): 429s are read over it.
            "window_s": self._window_s,
            "decided": dict(self._decided),
            # The last decisions, oldest first: what each 429 read and the rate it set.
            "decisions": [
                {"ago_s": now - e["at"], **{k: v for k, v in e.items() if k != "at"}}
                for e in self._recent
            ],
            **self._n,
        }

    # --- warm start -------------------------------------------------------------------
    def learnt(self) -> dict[str, Any] | None:
        """What this governor knows of its endpoint's limit, for the next run to start
        from (see :meth:`warm_start`); ``None`` while it knows nothing."""
        est, safe = self._search.estimate, self._search.safe
        if safe is None and est is None and self._header_rate is None:
            return None
        return {
            "safe_rate": safe,
            "limit_estimate": est,
            "header_rate": self._header_rate,
            "strict_spacing": self._strict_spacing,
            "window_s": self._window_s,
            "learnt_at": self._wall_clock(),
        }

    def warm_start(self, learnt: Mapping[str, Any], now: float) -> bool:
        """Start from what an earlier run learnt instead of slow start from
        ``initial_rate``, if it is recent. Nothing is taken on faith: the run begins at
        ``SETTLE`` of the learnt estimate (at the learnt safe rate, if lower), the probe
        above runs as after any 429, and a 429 is read as any other. Older than
        ``config.warm_start_s``, it is ignored. Returns whether it was used."""
        age_s = self._wall_clock() - float(learnt.get("learnt_at") or 0.0)
        header = _positive(learnt.get("header_rate"))
        est = _positive(learnt.get("limit_estimate")) or header
        safe = _positive(learnt.get("safe_rate"))
        if not 0.0 <= age_s <= self.config.warm_start_s or (est is None and safe is None):
            return False
        self._tick(now)
        self._mode = "aimd"
        est = est if est is not None else safe / SETTLE  # type: ignore[operator]
        start = SETTLE * est if safe is None else min(SETTLE * est, safe)
        self._rate = self._clamp(start)
        self._search.seed(est, self._rate, now)
        self._strict_spacing = learnt.get("strict_spacing") is True
        if (window_s := _positive(learnt.get("window_s"))) is not None:
            self._window_s = self._search.window_s = min(float(SERVED_HISTORY_S), window_s)
        self._warm = {"learnt_at": float(learnt["learnt_at"]), "age_s": age_s}
        return True

    # --- internals --------------------------------------------------------------------
    def _clamp(self, rate: float) -> float:
        return min(self.config.max_rate, max(self.config.min_rate, rate))

    def _reading(self, m: Moment, *, echo: bool = False) -> Reading:
        """What the meter says of the second before ``m`` (and since when a bucket was
        last known full: the start of the run the 429 ended, all of it in slow start)."""
        start = m.at - WINDOW_S
        refused = self._meter.refused(start, m.at)
        if self._window_s is not None and self._origin is not None:
            # A long window: what it served over its length is its limit; a burst's reading
            # says nothing of it (any pace passes until the quota runs out).
            since = m.at - self._window_s
            served = self._served_since(since)
            return Reading(served / self._window_s, max(refused, 1), True, 0.0)
        emptied = 0.0
        last = m.last_at
        if not m.slow_start and last is not None and last < m.run_from and m.at <= last + HISTORY_S:
            emptied = (self._meter.served(last, m.at) + 1) / (m.at - last)
        return Reading(
            emptied=emptied,
            served=self._meter.served(start, m.at),
            refused=max(refused, discovery.MIN_REFUSED) if echo else refused,
            whole=self._origin is not None and start >= self._origin,
            bucket=self._meter.bucket_rate(
                m.at, discovery.BURST_S, -math.inf if m.slow_start else m.run_from
            )
            or 0.0,
        )

    def _read_again(self) -> None:
        """The last decision, again, now that the successes from before its 429 are in:
        read at once, the server seemed to serve less than it did."""
        m, self._moment = self._moment, None
        if m is None or self._mode != "aimd":
            return
        reading = self._reading(m, echo=self._echoed)
        decision = discovery.decide(m, reading)
        rate = self._clamp(decision.rate)
        self._search.revise(decision, rate)
        self._revised(m, _entry(m, reading, decision, rate))
        if abs(rate - self._rate) <= 1e-9 * rate:
            return
        lower = rate < (1.0 - SMALL_STEP) * self._rate
        self._rate = rate
        if lower:
            self._void_grants(self._last_now)

    def _revised(self, m: Moment, entry: dict[str, Any]) -> None:
        """The last decision read again: counted and shown by the reading now in force
        (the one it made first is kept beside it, when it differs)."""
        if not self._recent or self._recent[-1]["at"] != m.at:
            return
        first = self._recent[-1]
        if entry["why"] != first["why"]:
            self._decided[first["why"]] -= 1
            if not self._decided[first["why"]]:
                del self._decided[first["why"]]
            self._decided[entry["why"]] = self._decided.get(entry["why"], 0) + 1
            entry["first"] = first.get("first", first["why"])
        self._recent[-1] = entry

    def _pause(
        self,
        until: float,
        reason: str,
        quota: tuple[str, float | None] | None = None,
        *,
        spell: bool = True,
    ) -> None:
        """Pause until ``until``; ``spell``: for 429s, so the endpoint is without service
        until a request sent after it is served (a 503's pause says nothing of a limit)."""
        if until == self._paused_until and quota is not None:
            # A 429 paused us until the exhausted window resets: name the window.
            self._pause_reason, self._pause_quota = reason, quota
        if until > self._paused_until:
            if self._paused_until < self._last_now:
                self._pause_began = self._last_now
            if spell and self._spell_from is None:
                self._spell_from, self._spell_run_from = self._last_now, self._run_from
            self._paused_until = until
            self._pause_reason, self._pause_quota = reason, quota
            self._next_slot = max(self._next_slot, until)
            self._epoch += 1

    def _pause_on_echo(self, now: float) -> None:
        """Refused far more than served since a decision, with no Retry-After to say for how
        long: the limiter may count refused requests too (HAProxy's ``http_req_rate``), so
        that sending on, even at the lower rate, keeps its count over the limit. Pause once
        per decision, long enough for its window to forget them, and read the limit again
        from what it served before it shut: its 429s are costly from now on."""
        needed = max(ECHO_MIN, ECHO_SHARE * self._rate * HOLDOFF_S, ECHO_RATIO * self._holdoff_ok)
        if self._echoed or self._echo_429s < needed:
            return
        self._echoed = True
        self._n["echo_pauses"] += 1
        self._pause(now + ECHO_PAUSE_S, "429s without Retry-After")
        # 429s still coming back for requests sent before the pause say nothing new.
        self._holdoff_until = max(self._holdoff_until, self._paused_until)
        m = self._moment
        if m is not None and self._mode == "aimd":
            m = self._moment = dataclasses.replace(m, costly=True)
            reading = self._reading(m, echo=True)
            decision = discovery.decide(m, reading)
            rate = self._clamp(decision.rate)
            if rate < self._rate:
                self._rate = rate
                self._search.revise(decision, rate)
                self._revised(m, _entry(m, reading, decision, rate))
                self._search.start(rate, self._paused_until)
        self._void_grants(now)

    def _still_shut(self, sent: float) -> bool:
        """Refused among the first requests after a pause for 429s: the endpoint is as shut
        as before it (a bucket refills, and a window turns over, in the pause the server
        asked for; a window that ran out for longer does not)."""
        end = self._paused_until
        first = sent <= end + max(SHUT_FIRST_S, 1.0 / self._rate)
        return self._spell_from is not None and end <= sent and (first or self._shut_pause_s > 0)

    def _shut_again(self, now: float, retry_after_s: float | None) -> None:
        """Pause twice as long as the last time (at least as long as asked), the rate
        untouched: no pace is served while a window is out."""
        last = self._shut_pause_s or max(ECHO_PAUSE_S, self._paused_until - self._pause_began)
        self._shut_pause_s = min(SHUT_PAUSE_MAX_S, max(retry_after_s or 0.0, 2.0 * last))
        self._n["shut_pauses"] += 1
        self._probe_at = -math.inf
        self._pause(now + self._shut_pause_s, SHUT_REASON)
        self._holdoff_until = max(self._holdoff_until, self._paused_until)
        self._void_grants(now)

    def _reopened(self, sent: float, now: float) -> None:
        """A request sent after the spell began was served. A shut pause begun since, for
        a request refused after this one, ends now. After a long spell the limit is what
        the endpoint served from the start of the run that ran it out until now: a long
        window's quota over about its length (a short run at any pace spends a quota)."""
        spell_s, run_from = now - (self._spell_from or now), self._spell_run_from
        self._reopened_at = now
        refused_at, self._refused_shut_at = self._refused_shut_at, None
        self._spell_from, self._shut_pause_s, self._probe_at = None, 0.0, -math.inf
        shut = self._pause_reason == SHUT_REASON
        if shut and sent < self._pause_began < now < self._paused_until:
            self._paused_until = now
            self._void_grants(now)
        if spell_s < LONG_SPELL_S or self._mode != "aimd":
            return
        horizon_s = min(float(SERVED_HISTORY_S), now - run_from)
        served = self._served_since(now - horizon_s)
        if horizon_s <= 0 or served <= 0:
            return
        # It opened again between the last request refused and this one: over the whole
        # time, the lower bound is the estimate; over half the gap, the ceiling approached.
        est, ceiling = served / horizon_s, None
        if refused_at is not None and run_from < refused_at < sent:
            ceiling = served / min(horizon_s, (refused_at + sent) / 2 - run_from)
        self._window_s = self._search.window_s = horizon_s
        self._rate = self._clamp(SETTLE * est)
        self._search.seed(est, self._rate, now, ceiling=ceiling)
        # The 429s still coming back for the requests sent with it are not news.
        self._holdoff_until = max(self._holdoff_until, now + HOLDOFF_S)
        self._void_grants(now)

    def _served_since(self, since: float) -> int:
        """Successes counted in the seconds that reach past ``since``."""
        return sum(n for second, n in self._served_s if second + 1 > since)

    def _count_served(self, sent: float) -> None:
        second = math.floor(sent)
        if self._served_s and self._served_s[-1][0] >= second:
            self._served_s[-1][1] += 1  # reported late: counted a second or so late
        else:
            self._served_s.append([second, 1])
        while self._served_s and self._served_s[0][0] < second - SERVED_HISTORY_S:
            self._served_s.popleft()

    def _void_grants(self, now: float) -> None:
        """Void every grant out: clients drop what they hold when they next hear from the
        governor. The new schedule starts after the last permit granted, not where the
        voided ones began: a process that has not heard yet still spends what it holds,
        and a permit handed out again beside it is a pair of requests closer together
        than any rate allows (nginx without a burst refuses the second)."""
        self._epoch += 1
        self._meter.void(now)
        self._next_slot = max(now, self._paused_until, self._next_slot)
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
        if self._moment is not None and now >= self._read_again_at:
            self._read_again()
        self._meter.trim(now)
        if self._interval_start is None:
            self._interval_start = self._idle_mark = self._origin = now
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
            else:
                grown = self._search.grow(self._rate, now, elapsed_s)
                if grown is None:
                    self._mode = "slow_start"  # the limit rose: find it again
                else:
                    self._rate = self._clamp(grown)
        self._start_interval(now)

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

    def _header_step(self, now: float, elapsed_s: float) -> None:
        if now - self._header_seen_at > HEADER_TTL_S:
            self._mode = "aimd"
            if self._header_rate is not None:
                self._search.seed(self._header_rate, self._rate, now, refused=self._header_rate)
            return
        self._header_margin = min(
            HEADER_MARGIN, self._header_margin + HEADER_RECOVER_PER_S * elapsed_s
        )
        if self._header_rate is not None:
            self._rate = self._clamp(self._header_rate * self._header_margin)


def _entry(m: Moment, r: Reading, d: discovery.Decision, rate: float) -> dict[str, Any]:
    """One decision as status shows it: the pace refused, what the meter read before it
    (successes in the last second, the bucket reading; 0: none), what it concluded."""
    return {
        "at": m.at,
        "why": d.why,
        "pace": m.pace,
        "served": r.served,
        "bucket": r.bucket,
        "estimate": d.est,
        "ceiling": d.ceiling,
        "rate": rate,
        "costly": m.costly,
    }


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

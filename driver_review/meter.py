"""What an endpoint was recently offered, sent and served: the evidence the rate governor
reads when a 429 arrives (see :mod:`driver_review.governor`). Pure, on the caller's clock.

*Offered* is the permits whose time came (each remembers the rate it was issued at): the
pace of the schedule. *Answered* is every response, *served* the answers other than 429.
What was answered, not what was offered, is what the server saw: a client short of work
or of CPU leaves permits unspent, and a server that served all it was sent must not look
as if it had clipped the schedule. All are kept only as long as they can be read.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

WINDOW_S = 1.0  # rates are measured over at most this much recent time ...
MIN_WINDOW_S = 0.25  # ... and at least this much, else they are noise
RECENT_S = 0.5  # the pace that drew a 429 is that of the permits due this long before it


@dataclass(frozen=True)
class Measure:
    served_per_s: float
    answered_per_s: float  # 429s included: the rate the server was sent, as it answered
    served: int  # how many answers the rates rest on
    refused: int = 0  # how many of the answers were 429s


class RateMeter:
    def __init__(self, *, lag_s: float, keep_s: float = 0.0) -> None:
        """``lag_s``: how long after a change of pace permits at the old pace still fall due
        (the lease horizon); ``keep_s``: how much longer a window stays readable after it
        ends (to read it again once late reports are in)."""
        self.lag_s = lag_s
        self.keep_s = keep_s
        self._served: deque[float] = deque()  # when answers other than 429 came
        self._answered: deque[float] = deque()  # when any answer came
        self._offered: deque[tuple[float, float]] = deque()  # (permit due at, rate issued at)
        self._paced_at: deque[float] = deque(maxlen=2)  # when the pace last stepped up
        self._origin = -math.inf

    def start(self, now: float) -> None:
        self._origin = now

    def offered(self, due: Iterable[float], rate: float) -> None:
        self._offered.extend((t, rate) for t in due)

    def answered(self, now: float, *, ok: bool) -> None:
        """One response: ``ok`` unless it was a 429."""
        self._answered.append(now)
        if ok:
            self._served.append(now)

    def paced_up(self, now: float) -> None:
        self._paced_at.append(now)

    def trim(self, now: float) -> None:
        oldest = now - WINDOW_S - self.lag_s - self.keep_s  # nothing older is ever read
        while self._served and self._served[0] < oldest:
            self._served.popleft()
        while self._answered and self._answered[0] < oldest:
            self._answered.popleft()
        while self._offered and self._offered[0][0] < oldest:
            self._offered.popleft()

    def last_due(self, now: float) -> float | None:
        """When the newest permit due by ``now`` was due (perhaps sent just now)."""
        return max((t for t, _ in self._offered if t <= now), default=None)

    def pace(self, now: float, default: float) -> float:
        """The pace of the permits due just before ``now``: what the server just saw. After
        a step up, the schedule still holds permits at the old pace for a while."""
        paces = [r for t, r in self._offered if now - RECENT_S <= t <= now]
        return max(paces) if paces else default

    def measure(self, now: float, *, not_before: float) -> Measure | None:
        """Rates since sending reached its present pace (at most ``WINDOW_S`` back, never
        before ``not_before``, e.g. the end of a pause); ``None`` if too short to tell."""
        start = max(now - WINDOW_S, not_before, self._origin)
        for stepped_at in reversed(self._paced_at):
            if now - (stepped_at + self.lag_s) >= MIN_WINDOW_S:
                start = max(start, stepped_at + self.lag_s)
                break
        span_s = now - start
        if span_s < MIN_WINDOW_S:
            return None
        served = sum(1 for t in self._served if start <= t <= now)
        answered = sum(1 for t in self._answered if start <= t <= now)
        return Measure(served / span_s, answered / span_s, served, answered - served)

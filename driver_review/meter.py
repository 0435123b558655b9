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

WINDOW_S = 1.0  # counts are read over at most this much recent time ...
HISTORY_S = 20.0  # ... and the successes that a bucket admitted over this long,
HISTORY_MOST = 4096  # ... at most this many of them
RECENT_S = 0.5  # the pace that drew a 429 is that of the permits due this long before it


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

    def offered(self, due: Iterable[float], rate: float) -> None:
        self._offered.extend((t, rate) for t in due)

    def answered(self, now: float, *, ok: bool) -> None:
        """One response: ``ok`` unless it was a 429. Late reports may come out of order."""
        self._answered.append(now)
        if ok:
            self._served.append(now)

    def trim(self, now: float) -> None:
        oldest = now - WINDOW_S - self.lag_s - self.keep_s  # nothing older is ever read
        while self._served and self._served[0] < now - HISTORY_S - self.keep_s:
            self._served.popleft()
        while self._answered and self._answered[0] < oldest:
            self._answered.popleft()
        while self._offered and self._offered[0][0] < oldest:
            self._offered.popleft()

    def void(self, now: float) -> None:
        """Permits not yet due were voided: they will never be sent."""
        while self._offered and self._offered[-1][0] > now:
            self._offered.pop()

    def last_due(self, now: float) -> float | None:
        """When the newest permit due by ``now`` was due (perhaps sent just now)."""
        return max((t for t, _ in self._offered if t <= now), default=None)

    def pace(self, now: float, default: float) -> float:
        """The pace of the permits due just before ``now``: what the server just saw. After
        a step up, the schedule still holds permits at the old pace for a while."""
        paces = [r for t, r in self._offered if now - RECENT_S <= t <= now]
        return max(paces) if paces else default

    def served(self, start: float, end: float) -> int:
        """Answers other than 429 that came in ``(start, end]``."""
        return sum(1 for t in self._served if start < t <= end)

    def bucket_rate(self, at: float, burst_s: float, since: float = -math.inf) -> float | None:
        """The fastest rate ``r`` of a token bucket holding ``burst_s * r`` that would have
        refused a request at ``at`` after serving what it served before (over the last
        ``HISTORY_S``): with ``n`` requests from ``t`` to ``at``, the refused one included,
        such a bucket refuses once ``n > r * (at - t) + burst_s * r`` for some ``t``, so
        ``r = max over t of n / (at - t + burst_s)``, over the successes after ``since``
        (when the bucket was last known full). ``None`` with nothing served."""
        times = sorted(t for t in self._served if since < t <= at)[-HISTORY_MOST:]
        if not times:
            return None
        best, n = 0.0, 1
        for t in reversed(times):
            n += 1
            best = max(best, n / (at - t + burst_s))
        return best

    def refused(self, start: float, end: float) -> int:
        """429s that came in ``(start, end]``."""
        return sum(1 for t in self._answered if start < t <= end) - self.served(start, end)

"""Which webhook ids this replica has already accepted.

Senders retry with the same ``webhook-id`` (and a fresh signature), so a retry of a
message we took — its 202 lost on the way back — must not be taken again. Entries live
for the signature tolerance window: a replay older than that would need a fresh
timestamp, which only the sender can sign. Bounded by count, oldest dropped first; per
replica, so with several replicas a replay may land elsewhere and be enqueued again,
which is harmless (the orchestrator ignores news it already has).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class SeenIds:
    def __init__(self, *, max_size: int, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_size = max_size
        self.ttl_s = ttl_s
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()  # id -> accepted at, oldest first

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, msg_id: object) -> bool:
        self._expire(self._clock())
        return msg_id in self._seen

    def add(self, msg_id: str) -> None:
        now = self._clock()
        self._expire(now)
        self._seen[msg_id] = now
        self._seen.move_to_end(msg_id)  # keeps the order by acceptance time
        while len(self._seen) > self.max_size:
            self._seen.popitem(last=False)

    def _expire(self, now: float) -> None:
        horizon = now - self.ttl_s
        seen = self._seen
        while seen:
            oldest = next(iter(seen.values()))
            if oldest >= horizon:
                break
            seen.popitem(last=False)

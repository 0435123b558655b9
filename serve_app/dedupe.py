"""Which webhook ids this replica has already accepted.

Senders retry with the same ``webhook-id`` (and a fresh signature), so a retry of a
message we took — its 202 lost on the way back — must not be taken again. A message
verifies while ``|now - timestamp| <= tolerance``, so an id is remembered until its own
``timestamp + tolerance``: a future-dated message stays replayable exactly that long, and
remembering it for one tolerance after acceptance would let it in again meanwhile. Later
than that, a replay needs a fresh timestamp, which only the sender can sign.

Bounded by count: when full, the entry that expires soonest goes first. Per replica, so
with several replicas a replay may land elsewhere and be enqueued again, which is
harmless (the orchestrator ignores news it already has).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable


class SeenIds:
    def __init__(self, *, max_size: int, clock: Callable[[], float] = time.time) -> None:
        if max_size <= 0:
            raise ValueError(f"max_size must be > 0, got {max_size}")
        self.max_size = max_size
        self._clock = clock  # wall clock: expiries are signed Unix times
        self._expires: dict[str, float] = {}
        # (expires at, id), soonest first; an entry whose time differs from _expires[id]
        # is stale (the id was added again) and is skipped when popped.
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expires)

    def __contains__(self, msg_id: object) -> bool:
        self._expire(self._clock())
        return msg_id in self._expires

    def add(self, msg_id: str, expires_at: float) -> None:
        """Remember ``msg_id`` until ``expires_at`` (Unix seconds: timestamp + tolerance)."""
        now = self._clock()
        self._expire(now)
        if expires_at <= now:
            return  # it could not verify again anyway
        self._expires[msg_id] = max(expires_at, self._expires.get(msg_id, 0.0))
        heapq.heappush(self._heap, (self._expires[msg_id], msg_id))
        while len(self._expires) > self.max_size:
            self._pop()
        if len(self._heap) > 2 * self.max_size:  # only re-added ids leave stale entries
            self._heap = [(t, i) for i, t in self._expires.items()]
            heapq.heapify(self._heap)

    def _pop(self) -> None:
        while self._heap:
            at, msg_id = heapq.heappop(self._heap)
            if self._expires.get(msg_id) == at:
                del self._expires[msg_id]
                return

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] < now:
            at, msg_id = heapq.heappop(heap)
            if self._expires.get(msg_id) == at:
                del self._expires[msg_id]

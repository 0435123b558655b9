"""The stage-pool autoscaling policy: pure, fed with what the pool observes each tick.

Grow by one worker when, for ``sustain_ticks`` in a row, the backlog exceeds what the
current workers can hold in flight and they are busy — unless the stage is held back by
the rate governor, where another worker would only queue for the same permits, or its
workers' demand is capped by a check endpoint's limit or pause (``held``: another worker
would only hold more drivers for the same scarce endpoint). Shrink by
one (with a graceful drain) after the stage has been idle for ``idle_shrink_s``.
One step per decision: the pool's own tick paces the change.

Where a new worker goes is :func:`spread_target`: a worker asks for no resources, and for
such a request Ray places ``SPREAD`` and soft affinity at random, so a stage's workers
could all land on one node; the pool picks the node itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

BUSY_UTILIZATION = 0.75  # share of in-flight slots in use that counts as busy
IDLE_UTILIZATION = 0.10
THROTTLED_SHARE = 0.30  # share of in-flight work waiting for a rate permit
SUSTAIN_TICKS = 3


@dataclass(frozen=True, slots=True)
class PoolSample:
    backlog: int  # items queued for this stage
    workers: int
    in_flight: int  # items being worked on, over all workers
    capacity: int  # max_in_flight x workers
    waiting_for_permit: int  # in-flight items blocked on the rate governor
    now: float
    held: bool = False  # some worker's demand is capped by a check endpoint (limit or pause)


class AutoscalePolicy:
    def __init__(
        self,
        *,
        min_workers: int,
        max_workers: int,
        idle_shrink_s: float,
        sustain_ticks: int = SUSTAIN_TICKS,
    ) -> None:
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.idle_shrink_s = idle_shrink_s
        self.sustain_ticks = sustain_ticks
        self._pressure_ticks = 0
        self._idle_since: float | None = None
        self.last_reason = "start"

    def decide(self, s: PoolSample) -> int:
        """+1 to add a worker, -1 to drain one, 0 to hold."""
        if s.workers < self.min_workers:
            self.last_reason = "below min"
            return +1
        utilization = s.in_flight / s.capacity if s.capacity else 1.0
        throttled = s.in_flight > 0 and s.waiting_for_permit / s.in_flight >= THROTTLED_SHARE
        pressed = s.backlog > s.capacity - s.in_flight and utilization >= BUSY_UTILIZATION
        self._pressure_ticks = self._pressure_ticks + 1 if pressed and not throttled else 0

        idle = s.backlog == 0 and utilization <= IDLE_UTILIZATION
        if not idle:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = s.now

        if throttled and pressed:
            self.last_reason = "held by the rate governor"
            return 0
        if s.held:
            self._pressure_ticks = 0
            self.last_reason = "held by a check endpoint"
            if s.workers > self.max_workers:
                return -1
            return 0 if self._idle_since is None else self._shrink(s)
        if self._pressure_ticks >= self.sustain_ticks and s.workers < self.max_workers:
            self._pressure_ticks = 0
            self.last_reason = "backlog above capacity"
            return +1
        if self._shrink(s):
            return -1
        if s.workers > self.max_workers:
            self.last_reason = "above max"
            return -1
        self.last_reason = "steady"
        return 0

    def _shrink(self, s: PoolSample) -> int:
        if (
            self._idle_since is not None
            and s.now - self._idle_since >= self.idle_shrink_s
            and s.workers > self.min_workers
        ):
            self._idle_since = s.now  # one step per idle period
            self.last_reason = "idle"
            return -1
        return 0


def spread_target(nodes: Iterable[str], placed: Mapping[str, int], offset: int = 0) -> str | None:
    """The node for a pool's next worker: the alive node holding fewest of the pool's
    workers (``placed``: node -> count; nodes it does not name hold none). Ties go round
    the sorted node list from ``offset`` (the stage's index), so single-worker pools of
    different stages start on different nodes. ``None`` when no node is known."""
    ring = sorted(set(nodes))
    if not ring:
        return None
    k = offset % len(ring)
    ring = ring[k:] + ring[:k]
    return min(ring, key=lambda n: placed.get(n, 0))  # the first of the fewest, in ring order

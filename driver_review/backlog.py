"""Per-stage backlog: two priority lanes of segments, each segment an Arrow batch in the
object store plus the ledger rows it names.

Work enters a small per-lane buffer; a full buffer is sealed into a segment (one
``put`` of an Arrow batch: ``driver_id, version, stage, lane, enqueued_at``), so what the
orchestrator keeps in its own heap per queued driver is one int64 row number. Segments are
handed out whole when they fit the demand; the fresh lane always goes first.

Pure logic: ``put`` is injected (``ray.put`` in the actor, identity in unit tests).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import pyarrow as pa

ITEM_SCHEMA = pa.schema(
    [
        ("driver_id", pa.string()),
        ("version", pa.string()),
        ("stage", pa.string()),
        ("lane", pa.int8()),
        ("enqueued_at", pa.float64()),
        # Ask the catalog before trusting a cached record: re-sweeps, restored work.
        ("revalidate", pa.bool_()),
    ]
)


class Lane(IntEnum):
    FRESH = 0  # changes, pings, follow-ups after an approval, retries
    STALE = 1  # the outer loop's freshness re-sweeps and full sweeps


@dataclass(slots=True)
class Segment:
    rows: np.ndarray  # ledger rows, int64
    ref: Any  # the put Arrow batch (an ObjectRef in Ray)
    lane: Lane
    enqueued_at: float


@dataclass(slots=True)
class _Lane:
    segments: deque[Segment] = field(default_factory=deque)
    buffer: list[int] = field(default_factory=list)
    buffered_at: float = 0.0
    queued: int = 0  # items in segments and buffer


#: Builds the Arrow batch of a segment from ledger rows: (rows, lane, now) -> RecordBatch.
BatchBuilder = Callable[[np.ndarray, Lane, float], pa.RecordBatch]


class StageBacklog:
    def __init__(
        self, stage: str, *, batch_size: int, build: BatchBuilder, put: Callable[[Any], Any]
    ) -> None:
        self.stage = stage
        self.batch_size = batch_size
        self._build = build
        self._put = put
        self._lanes = {lane: _Lane() for lane in Lane}
        self.sealed = 0

    def __len__(self) -> int:
        return sum(lane.queued for lane in self._lanes.values())

    def depth(self, lane: Lane) -> int:
        return self._lanes[lane].queued

    def push(self, rows: list[int] | np.ndarray, lane: Lane, now: float) -> None:
        q = self._lanes[lane]
        if not q.buffer:
            q.buffered_at = now
        q.buffer.extend(int(r) for r in rows)
        q.queued += len(rows)
        while len(q.buffer) >= self.batch_size:
            self._seal(q, lane, self.batch_size, now)

    def push_segment_front(self, rows: np.ndarray, lane: Lane, now: float) -> None:
        """Return work to the head of its lane (an expired lease goes first next time)."""
        if len(rows) == 0:
            return
        q = self._lanes[lane]
        q.segments.appendleft(self._segment(rows, lane, now))
        q.queued += len(rows)

    def flush(self, now: float, max_age_s: float = 0.0) -> None:
        """Seal buffers older than ``max_age_s`` (0: all of them)."""
        for lane, q in self._lanes.items():
            if q.buffer and now - q.buffered_at >= max_age_s:
                self._seal(q, lane, len(q.buffer), now)

    def take(
        self, n: int, now: float, keep: Callable[[np.ndarray, Lane], np.ndarray]
    ) -> list[Segment]:
        """Up to ``n`` items as segments, fresh lane first.

        ``keep(rows, lane) -> mask`` drops rows that no longer need this stage (coalesced away,
        decided meanwhile); a segment that lost rows, or is larger than what is left of the
        demand, is rebuilt from the ledger, so the worker never gets more than it asked for.
        """
        out: list[Segment] = []
        for lane in Lane:
            q = self._lanes[lane]
            # Only what the lane held when the call began: rows ``keep`` sends back to this
            # very lane wait for the next call instead of looping this one forever.
            left = q.queued
            while n > 0 and left > 0 and (q.segments or q.buffer):
                if not q.segments:
                    self._seal(q, lane, min(len(q.buffer), max(n, 1)), now)
                seg = q.segments.popleft()
                q.queued -= len(seg.rows)
                left -= len(seg.rows)
                mask = keep(seg.rows, lane)
                rows = seg.rows if mask.all() else seg.rows[mask]
                if len(rows) == 0:
                    continue
                if len(rows) > n:
                    rest = rows[n:]
                    q.segments.appendleft(self._segment(rest, lane, seg.enqueued_at))
                    q.queued += len(rest)
                    rows = rows[:n]
                if len(rows) != len(seg.rows):
                    seg = self._segment(rows, lane, seg.enqueued_at)
                out.append(seg)
                n -= len(rows)
        return out

    def _seal(self, q: _Lane, lane: Lane, count: int, now: float) -> None:
        rows = np.asarray(q.buffer[:count], dtype=np.int64)
        del q.buffer[:count]
        q.segments.append(self._segment(rows, lane, q.buffered_at or now))
        q.buffered_at = now

    def _segment(self, rows: np.ndarray, lane: Lane, enqueued_at: float) -> Segment:
        self.sealed += 1
        return Segment(rows, self._put(self._build(rows, lane, enqueued_at)), lane, enqueued_at)

    def stats(self) -> dict[str, int]:
        return {
            "queued": len(self),
            "fresh": self.depth(Lane.FRESH),
            "stale": self.depth(Lane.STALE),
            "segments": sum(len(q.segments) for q in self._lanes.values()),
            "sealed_total": self.sealed,
        }

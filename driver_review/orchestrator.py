"""The orchestrator's logic: update window, coalescing, lanes, demand, leases, ledger.

A plain class, made a Ray actor in :mod:`driver_review.runtime` (one place), so all of
this is unit-tested without Ray. The actor adds the asyncio parts: long-polled demand,
the periodic tick, snapshots.

Flow of one driver::

    intake(changes) ─▶ ledger.observe ─▶ backlog[stage].push ─▶ demand(stage, n) ─▶ Lease
         ▲                                                                         │
         └──────────── report(lease, outcomes): decide, follow to next stage ◀─────┘

* **Coalescing**: a driver has at most one work item. A change for a driver that is queued
  or leased only moves the ledger's target; whoever reviews it next reviews the newest
  version (10 changes in a window → one review).
* **Skip**: a change whose (version, stage) is already decided queues nothing.
* **Lanes**: fresh changes before staleness re-sweeps.
* **Backpressure**: above ``high_water`` queued items, intake raises ``IntakeFull`` and
  accepts nothing of that call, so the caller keeps (and retries) what it holds.
* **Leases**: work handed out expires after ``lease_s``; its rows go back to the head of
  their lane. A late report from an expired lease (or from before a restart) is still
  applied when it is news, and follows a row it decides to its next stage.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from driver_review import wire
from driver_review.backlog import ITEM_SCHEMA, Lane, StageBacklog
from driver_review.config import PipelineConfig
from driver_review.errors import IntakeFull
from driver_review.identifiers import id_problem, time_problem, version_problem
from driver_review.ledger import (
    NO_STAGE,
    Change,
    Ledger,
    Status,
    Verdict,
    Work,
)
from driver_review.quarantine import IN_REVIEW_WITHOUT_STAGE, BadRow, QuarantineTable, bad_row

log = logging.getLogger(__name__)

ERROR_RETRY_BASE_S = 5.0  # first retry of an errored review; doubles per consecutive error
#: The outer loop revisits every driver once per this share of the freshness bound, so the
#: time a re-review waits in queues and for permits still fits inside the bound (the
#: re-review of an unchanged driver is one conditional GET answered 304) ...
REVISIT_SHARE = 0.5
#: ... and leaves alone drivers reviewed more recently than this share of it.
REVISIT_MIN_AGE_SHARE = 0.25
WINDOW_HISTORY = 12  # closed buckets kept in stats


@dataclass(frozen=True, slots=True)
class Lease:
    lease_id: int
    stage: str
    batch: list[Any]  # [ObjectRef of an Arrow batch]: a list so Ray does not resolve it
    count: int
    lease_s: float


@dataclass(frozen=True, slots=True)
class ItemResult:
    """What a worker did with one item. ``after`` is the catalog's state it saw last
    (from the decision's answer, or the record it fetched), so approvals advance the
    driver without waiting for the next poll."""

    driver_id: str
    version: str
    stage: str
    verdict: Verdict
    after: Change | None = None
    bad: BadRow | None = None  # what the worker fetched or was answered cannot be taken


@dataclass(slots=True)
class _LeaseState:
    stage: str
    rows: np.ndarray
    lanes: np.ndarray
    deadline: float
    worker: str


@dataclass(slots=True)
class _Bucket:
    start: float
    events: int = 0
    news: int = 0
    queued: int = 0
    coalesced: int = 0


@dataclass(slots=True)
class _Counters:
    intake_calls: int = 0
    events: int = 0
    refused: int = 0
    handed_out: int = 0
    dropped_at_handout: int = 0
    leases_expired: int = 0
    late_reports: int = 0
    invalid: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    # The same by stage (stage -> verdict -> n): the live page's decisions/s per stage.
    verdicts_by_stage: dict[str, dict[str, int]] = field(default_factory=dict)


class OrchestratorCore:
    def __init__(
        self,
        config: PipelineConfig,
        *,
        put: Callable[[pa.RecordBatch], Any] = lambda batch: batch,
        clock: Callable[[], float] = time.time,
        ledger: Ledger | None = None,
    ) -> None:
        self.config = config
        self.window = config.window
        self.clock = clock
        self.stages = config.stage_names
        self.ledger = ledger if ledger is not None else Ledger()
        self.backlogs = {
            s: StageBacklog(
                s,
                batch_size=self.window.batch_size,
                build=functools.partial(self._build, stage=s),
                put=put,
            )
            for s in self.stages
        }
        self._leases: dict[int, _LeaseState] = {}
        # Lease ids are unique across restarts: a worker may still hold (and report or
        # extend) a lease of the previous incarnation, which must not name a new one.
        self._lease_ids = itertools.count(secrets.randbits(48) << 12)
        self._bucket = _Bucket(self._bucket_start(clock()))
        self._history: deque[_Bucket] = deque(maxlen=WINDOW_HISTORY)
        self.counters = _Counters()
        # Bad rows set aside, and the ledger rows of their drivers: a parked row is not
        # queued and does not hold up quiescence until a good change releases it.
        self.quarantine = QuarantineTable()
        self._parked: set[int] = set()
        #: Catalog time up to which every change is in the ledger ("changes since" resumes
        #: here). Only the poller moves it, and only after intake held what it read.
        self.watermark = 0.0
        if ledger is not None:
            self._requeue_pending()

    # -- names ------------------------------------------------------------------------
    def stage_index(self, stage: str | None) -> int:
        return wire.stage_index(self.stages, stage)

    def stage_name(self, index: int) -> str | None:
        return wire.stage_name(self.stages, index)

    # -- intake -----------------------------------------------------------------------
    def queued(self) -> int:
        return sum(len(b) for b in self.backlogs.values())

    def room(self) -> int:
        return max(0, self.window.high_water - self.queued())

    def intake(self, changes: Sequence[Change], lane: Lane = Lane.FRESH) -> int:
        """Take a batch of changes whole, or refuse it whole with ``IntakeFull``.

        Returns how many of them queued new work.
        """
        now = self.clock()
        self._roll_window(now)
        self.counters.intake_calls += 1
        if self.queued() + len(changes) > self.window.high_water and self.queued() > 0:
            self.counters.refused += len(changes)
            raise IntakeFull(
                f"intake full: {self.queued()} queued, high water {self.window.high_water}",
                # Long enough for the workers to make room, short for a webhook sender.
                retry_after_s=max(1.0, min(5.0, self.window.bucket_s / 60)),
            )
        self.counters.events += len(changes)
        self._bucket.events += len(changes)
        touched: dict[int, None] = {}
        for ch in changes:
            problem = _invalid(ch, len(self.stages), now)
            if problem:
                # One bad record must not block the batch it came in (a poll would retry
                # it forever): it is refused alone, counted and logged once.
                self.counters.invalid += 1
                self.quarantine_rows(
                    [
                        bad_row(
                            dataclasses.asdict(ch),
                            *problem,
                            source="intake",
                            seen_at=now,
                            raw_id=ch.driver_id,
                        )
                    ]
                )
                continue
            self._release(ch.driver_id)
            if self.ledger.observe(ch):
                self._bucket.news += 1
                touched[self.ledger.row(ch.driver_id)] = None
        return self._enqueue(list(touched), lane, now)

    def quarantine_rows(self, rows: Sequence[BadRow]) -> list[BadRow]:
        """Set bad rows aside; returns those not held before (to log, count and write).
        A driver already in the ledger is parked until a good change releases it."""
        new = self.quarantine.add(rows)
        for row in rows:
            if row.driver_id is not None and row.driver_id in self.ledger:
                self._parked.add(self.ledger.row(row.driver_id))
        return new

    def _release(self, driver_id: str) -> None:
        if self.quarantine.release(driver_id) is not None and driver_id in self.ledger:
            self._parked.discard(self.ledger.row(driver_id))

    def requeue_rows(self, rows: np.ndarray | Sequence[int], lane: Lane) -> int:
        """Queue work for rows that need it (outer loop, retries)."""
        return self._enqueue([int(r) for r in rows], lane, self.clock())

    def _enqueue(self, rows: list[int], lane: Lane, now: float) -> int:
        by_stage: dict[int, list[int]] = {}
        ledger = self.ledger
        for row in rows:
            if row in self._parked:
                continue
            if ledger.work_of(row) != Work.IDLE:
                self._bucket.coalesced += 1  # its pending item will review the newest state
                continue
            if not ledger.needs_review(row):
                continue
            stage = ledger.target(row)[1]
            if not 0 <= stage < len(self.stages):
                continue  # refused at intake; never queued where no stage would keep it
            by_stage.setdefault(stage, []).append(row)
        total = 0
        for stage, stage_rows in by_stage.items():
            ledger.set_work(stage_rows, Work.QUEUED)
            self.backlogs[self.stages[stage]].push(stage_rows, lane, now)
            total += len(stage_rows)
        self._bucket.queued += total
        return total

    # -- demand and leases ------------------------------------------------------------------
    def demand(self, stage: str, n: int, worker: str = "") -> list[Lease]:
        """At most ``n`` items of ``stage`` for a worker that has room for them."""
        if n <= 0:
            return []
        now = self.clock()
        backlog = self.backlogs[stage]  # a KeyError for an unknown stage, as before
        stage_idx = self.stage_index(stage)
        segments = backlog.take(n, now, keep=lambda rows, lane: self._keep(rows, lane, stage_idx))
        leases = []
        for seg in segments:
            lease_id = next(self._lease_ids)
            self.ledger.set_work(seg.rows, Work.LEASED)
            self._leases[lease_id] = _LeaseState(
                stage,
                seg.rows,
                np.full(len(seg.rows), seg.lane, np.int8),
                now + self.window.lease_s,
                worker,
            )
            self.counters.handed_out += len(seg.rows)
            leases.append(Lease(lease_id, stage, [seg.ref], len(seg.rows), self.window.lease_s))
        return leases

    def _keep(self, rows: np.ndarray, lane: Lane, stage_idx: int) -> np.ndarray:
        """Rows still worth handing out; the others go idle (or to their own stage).

        A fresh item is kept while its driver still needs this stage. A re-sweep confirms
        even a final state, so it is kept unless the driver was reviewed meanwhile."""
        ledger = self.ledger
        if lane == Lane.STALE:
            # A re-sweep is kept unless the driver was reviewed meanwhile, or a change made
            # it due for review at another stage (it goes there, in the fresh lane).
            recent = self.clock() - self.window.freshness_s / 2
            mask = (ledger.col("reviewed_at")[rows] < recent) & np.fromiter(
                (
                    not ledger.needs_review(int(r)) or ledger.target(int(r))[1] == stage_idx
                    for r in rows
                ),
                dtype=bool,
                count=len(rows),
            )
        else:
            mask = np.fromiter(
                (
                    ledger.needs_review(int(r)) and ledger.target(int(r))[1] == stage_idx
                    for r in rows
                ),
                dtype=bool,
                count=len(rows),
            )
        dropped = rows[~mask]
        if len(dropped):
            self.counters.dropped_at_handout += len(dropped)
            ledger.set_work(dropped, Work.IDLE)
            self._enqueue([int(r) for r in dropped], Lane.FRESH, self.clock())
        return np.asarray(mask, dtype=bool)

    def extend(self, lease_id: int) -> bool:
        """Keep a lease alive (a worker still busy with a slow batch)."""
        lease = self._leases.get(lease_id)
        if lease is None:
            return False
        lease.deadline = self.clock() + self.window.lease_s
        return True

    def report(self, lease_id: int, outcomes: Sequence[ItemResult]) -> None:
        now = self.clock()
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            self.counters.late_reports += 1
        ledger = self.ledger
        idle: list[int] = []
        for out in outcomes:
            if out.driver_id not in ledger:
                continue
            row = ledger.row(out.driver_id)
            if lease is None and ledger.work_of(row) == Work.IDLE:
                idle.append(row)
            stage = self.stage_index(out.stage)
            # NONE: nothing was decided (the catalog had moved on); ``after`` says where to.
            # CONFIRMED: a re-sweep found the recorded final state still true (only its time).
            news = out.verdict == Verdict.CONFIRMED or (
                out.verdict != Verdict.NONE and not ledger.is_decided(row, out.version, stage)
            )
            if news:
                ledger.decide(
                    row,
                    version=out.version,
                    stage=stage,
                    verdict=out.verdict,
                    reviewed_at=now,
                    retry_backoff_s=ERROR_RETRY_BASE_S,
                )
                name = wire.text_of(out.verdict, Verdict)
                self.counters.verdicts[name] = self.counters.verdicts.get(name, 0) + 1
                by_stage = self.counters.verdicts_by_stage.setdefault(out.stage, {})
                by_stage[name] = by_stage.get(name, 0) + 1
            after: Change | BadRow | None = out.after
            if isinstance(after, Change):
                problem = _invalid(after, len(self.stages), now)
                if problem:  # e.g. a version too long for the ledger: refused, never cut
                    after = bad_row(
                        dataclasses.asdict(after),
                        *problem,
                        source="report",
                        seen_at=now,
                        raw_id=after.driver_id,
                    )
            if out.bad is not None:
                after = out.bad
            if isinstance(after, BadRow):
                self.quarantine_rows([after])
            elif after is not None:
                self._release(after.driver_id)
                ledger.observe(after)
        if lease is not None:
            # Follow approvals to the next stage at once; rows the worker did not report on
            # are still pending and go back too. Errored rows wait for their retry time.
            ledger.set_work(lease.rows, Work.IDLE)
            self._enqueue(
                [int(r) for r in lease.rows if ledger.errors_of(int(r)) == 0], Lane.FRESH, now
            )
        elif idle:
            # A late report can decide a row that sits idle meanwhile: one whose retried
            # review errored and now waits for ``retry_at``. The approval clears that retry,
            # so follow the row to its next stage here, or nothing ever would.
            self._enqueue([r for r in idle if ledger.errors_of(r) == 0], Lane.FRESH, now)

    def expire_leases(self) -> int:
        now = self.clock()
        expired = [lid for lid, lease in self._leases.items() if lease.deadline <= now]
        for lid in expired:
            lease = self._leases.pop(lid)
            self.counters.leases_expired += 1
            self.ledger.set_work(lease.rows, Work.QUEUED)
            for lane in Lane:
                rows = lease.rows[lease.lanes == lane]
                self.backlogs[lease.stage].push_segment_front(rows, lane, now)
        return len(expired)

    # -- periodic -----------------------------------------------------------------------
    def tick(self, *, stale_slice: int | None = None) -> dict[str, int]:
        """Expire leases, retry errors whose backoff passed, queue a slice of stale drivers,
        seal buffers that waited long enough. Called by the actor every second or so."""
        now = self.clock()
        self._roll_window(now)
        expired = self.expire_leases()
        retries = self.requeue_rows(self.ledger.due_retries(now, limit=self.room()), Lane.FRESH)
        stale = 0
        if stale_slice is None:
            stale_slice = self.stale_slice_size()
        if stale_slice > 0 and self.room() > 0:
            limit = min(stale_slice, self.room())
            min_age_s = self.window.freshness_s * REVISIT_MIN_AGE_SHARE
            rows = self.ledger.stale_rows(now, min_age_s, limit)
            stale = self._enqueue_stale(rows, now)
        for backlog in self.backlogs.values():
            backlog.flush(now, max_age_s=1.0)
        return {"expired": expired, "retries": retries, "stale": stale}

    def stale_slice_size(self, tick_s: float = 1.0) -> int:
        """Drivers to re-sweep per tick: oldest first, at a steady pace that visits every
        driver once per ``REVISIT_SHARE`` of the freshness bound, so the load is even rather
        than a burst when a whole bound expires at once."""
        n = len(self.ledger)
        return math.ceil(n * tick_s / (self.window.freshness_s * REVISIT_SHARE)) if n else 0

    def _enqueue_stale(self, rows: np.ndarray, now: float) -> int:
        """A re-sweep reviews the driver's stage when in review, and otherwise confirms its
        final state against the catalog (a conditional GET), queued at its last stage."""
        by_stage: dict[int, list[int]] = {}
        for row in rows:
            r = int(row)
            if self.ledger.work_of(r) != Work.IDLE or r in self._parked:
                continue
            stage = self.ledger.target(r)[1]
            if stage == NO_STAGE:
                stage = len(self.stages) - 1
            by_stage.setdefault(stage, []).append(r)
        total = 0
        for stage, stage_rows in by_stage.items():
            self.ledger.set_work(stage_rows, Work.QUEUED)
            self.backlogs[self.stages[stage]].push(stage_rows, Lane.STALE, now)
            total += len(stage_rows)
        return total

    def _requeue_pending(self) -> None:
        """After loading a snapshot: no work item survived the old process, so every row
        that was queued, leased or undecided is queued again."""
        pending = self.ledger.pending_rows()
        self.ledger.set_work(pending, Work.IDLE)
        self.ledger.mark_restored(pending)
        self._enqueue([int(r) for r in pending], Lane.FRESH, self.clock())

    def advance_watermark(self, catalog_time: float) -> float:
        self.watermark = max(self.watermark, catalog_time)
        return self.watermark

    def driver(self, driver_id: str) -> dict[str, Any] | None:
        entry = self.ledger.entry(driver_id)
        if entry is None:
            return None
        for key in ("stage", "decided_stage"):
            position = entry[key]
            assert isinstance(position, int)
            entry[key] = self.stage_name(position)
        return entry

    # -- window -------------------------------------------------------------------------
    def _bucket_start(self, now: float) -> float:
        return now - (now % self.window.bucket_s)

    def _roll_window(self, now: float) -> None:
        start = self._bucket_start(now)
        if start != self._bucket.start:
            self._history.append(self._bucket)
            self._bucket = _Bucket(start)

    # -- batches ------------------------------------------------------------------------
    def _build(
        self, rows: np.ndarray, lane: Lane, enqueued_at: float, *, stage: str
    ) -> pa.RecordBatch:
        """The batch of one stage's backlog. Its stage is the backlog's, never the ledger's
        (a change may move a queued driver's target meanwhile): a stage's workers review
        only their own stage; hand-out and the reviewer catch a driver that moved on."""
        ledger = self.ledger
        ids = ledger.ids(rows)
        versions = [v.decode() for v in ledger.col("version")[rows]]
        stage_names = [stage] * len(rows)
        n = len(rows)
        revalidate = (ledger.col("restored")[rows] != 0) | (lane == Lane.STALE)
        return pa.record_batch(
            [
                ids,
                versions,
                stage_names,
                pa.array(np.full(n, lane, np.int8)),
                pa.array(np.full(n, enqueued_at)),
                pa.array(revalidate),
            ],
            schema=ITEM_SCHEMA,
        )

    # -- introspection ------------------------------------------------------------------
    def quiescent(self) -> bool:
        """Nothing queued, nothing leased, and nothing in review left undecided."""
        if self._leases or self.queued():
            return False
        c = self.ledger.counts()
        pending = self.ledger.pending_rows()
        if self._parked:
            pending = np.setdiff1d(pending, np.fromiter(self._parked, np.int64))
        return c["queued"] == 0 and c["leased"] == 0 and len(pending) == 0

    def parked(self) -> int:
        """Drivers whose newest row or record could not be taken: waiting, not pending."""
        return len(self._parked)

    def stats(self) -> dict[str, Any]:
        now = self.clock()
        b = self._bucket
        return {
            "window": {
                "bucket_s": self.window.bucket_s,
                "bucket_start": b.start,
                "events": b.events,
                "news": b.news,
                "queued": b.queued,
                "coalesced": b.coalesced,
                "history": [
                    {"start": h.start, "events": h.events, "coalesced": h.coalesced}
                    for h in self._history
                ],
            },
            "backlog": {s: bl.stats() for s, bl in self.backlogs.items()},
            "leases": len(self._leases),
            "leased_items": int(sum(len(lease.rows) for lease in self._leases.values())),
            "leased_by_stage": self._leased_by_stage(),
            "ledger": self.ledger.counts(),
            "ledger_bytes": self.ledger.nbytes,
            "oldest_review_age_s": self.ledger.oldest_review_age(now),
            "high_water": self.window.high_water,
            "watermark": self.watermark,
            "quarantined": {**self.quarantine.stats(), "parked": self.parked()},
            "counters": {
                "intake_calls": self.counters.intake_calls,
                "events": self.counters.events,
                "refused": self.counters.refused,
                "handed_out": self.counters.handed_out,
                "dropped_at_handout": self.counters.dropped_at_handout,
                "leases_expired": self.counters.leases_expired,
                "late_reports": self.counters.late_reports,
                "invalid": self.counters.invalid,
                "verdicts": dict(self.counters.verdicts),
                "verdicts_by_stage": {
                    s: dict(v) for s, v in self.counters.verdicts_by_stage.items()
                },
            },
        }

    def _leased_by_stage(self) -> dict[str, int]:
        out = dict.fromkeys(self.stages, 0)
        for lease in self._leases.values():
            out[lease.stage] = out.get(lease.stage, 0) + len(lease.rows)
        return out


def _invalid(ch: Change, stages: int, now: float) -> tuple[str, str] | None:
    """``(kind, reason)`` why a change cannot enter the ledger, or None."""
    for name, value in (("stage", ch.stage), ("status", ch.status), ("changed_at", ch.changed_at)):
        # Changes come from our own conversions, but a wrong type here would raise
        # inside the ledger and refuse the whole batch.
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (name != "changed_at" and not isinstance(value, int))
        ):
            return "wrong_type", f"{name} is {type(value).__name__}"
    if ch.status not in Status.__members__.values():
        return "bad_status", f"status {ch.status} is not a known status"
    problem = id_problem(ch.driver_id)
    if problem:
        return "bad_id", problem
    problem = version_problem(ch.version)  # the ledger's column width (VERSION_BYTES)
    if problem:
        return "bad_version", problem
    if ch.stage != NO_STAGE and not 0 <= ch.stage < stages:
        return "unknown_stage", f"stage index {ch.stage} out of range"
    if ch.stage == NO_STAGE and ch.status == Status.IN_REVIEW:
        return "unknown_stage", IN_REVIEW_WITHOUT_STAGE
    problem = time_problem(ch.changed_at, now)
    if problem:
        return "bad_time", problem
    return None

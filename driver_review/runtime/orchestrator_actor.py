"""The orchestrator as an async actor around :class:`~driver_review.orchestrator.OrchestratorCore`.

Adds what needs an event loop: demand is long-polled (a worker that asks when nothing is
queued waits up to ``wait_s`` for work instead of polling), and a tick loop expires
leases, retries errors and queues the outer loop's staleness slices.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray

from driver_review.backlog import Lane
from driver_review.config import PipelineConfig
from driver_review.errors import ConfigError
from driver_review.ledger import Change, Ledger
from driver_review.orchestrator import ItemResult, Lease, OrchestratorCore
from driver_review.quarantine import BadRow
from driver_review.quarantine import writer as quarantine_writer
from driver_review.runtime import metrics
from driver_review.snapshot import SnapshotStore
from driver_review.stage_names import StagesRemoved
from driver_review.statcache import CachedValue

log = logging.getLogger(__name__)

TICK_S = 1.0


class OrchestratorService:
    def __init__(
        self,
        config: PipelineConfig,
        *,
        instance: str,
        outer_loop: bool = True,
        data_dir: str | None = None,
        results_dir: str | None = None,
    ) -> None:
        self.instance = instance
        # Quarantined rows go to <results_dir>/quarantine/ (what `report` reads).
        self._quarantine_out = (
            quarantine_writer(
                results_dir,
                name=f"{instance}-orchestrator",
                rollover_rows=config.results.rollover_rows,
                rollover_s=config.results.rollover_s,
            )
            if results_dir
            else None
        )
        # With a data dir, the ledger and watermark survive this process: a (re)start
        # resumes from the newest complete snapshot and re-queues what was pending.
        self.snapshots = SnapshotStore(data_dir, instance) if data_dir else None
        loaded = self.snapshots.load() if self.snapshots else None
        #: Why this orchestrator takes no work (its snapshot names a stage the pipeline no
        #: longer has), or None. ``start_system`` refuses such a start before creating the
        #: actor; this catches the rest (a snapshot written meanwhile, an actor created
        #: elsewhere). Raising would not help: Ray restarts a detached actor forever, and
        #: starting empty would snapshot over the ledger. So it says why, in its log, its
        #: stats and every call, and keeps the snapshot as it is.
        self.refused: str | None = None
        ledger = None
        if loaded is not None:
            try:
                ledger = Ledger.from_arrow(
                    loaded.table,
                    config.stage_names,
                    migrate=config.window.migrate_stages,
                    where=f"the snapshot of instance {instance!r}",
                )
            except StagesRemoved as exc:
                self.refused, self.snapshots, loaded = str(exc), None, None
                log.error("orchestrator refuses work: %s", exc)
        self.core = OrchestratorCore(config, put=ray.put, ledger=ledger)
        if loaded is not None:
            self.core.advance_watermark(loaded.watermark)
            log.info(
                "resumed from snapshot %s: %d drivers, watermark %s",
                loaded.path,
                loaded.table.num_rows,
                loaded.watermark,
            )
        self.restored_from = loaded.path if loaded else None
        self.started_at = time.time()
        # Names this process: a watermark advance must come from a poll whose intake this
        # process held (see ``advance_watermark``).
        self.incarnation = uuid.uuid4().hex
        self.stale_advances = 0
        self._last_snapshot = time.monotonic()
        self.snapshots_written = 0
        self._work_ready = {stage: asyncio.Event() for stage in self.core.stages}
        self._outer_loop = outer_loop
        # What status() answers: computed once per tick, so /status never walks the ledger.
        self._status = CachedValue(self._full_stats, max_age_s=2 * TICK_S)
        self._ticker: asyncio.Task | None = None
        self._ensure_ticker()  # the constructor runs on the actor's event loop

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.core.tick(stale_slice=None if self._outer_loop else 0)
            self._export_quarantined()
            self._signal()
            self._export_metrics(self._status.refresh())
            period = self.core.config.window.snapshot_s
            if self.snapshots and time.monotonic() - self._last_snapshot >= period:
                await self.snapshot()

    def _export_quarantined(self, flush: bool = False) -> None:
        rows = self.core.quarantine.take_unexported()
        for row in rows:
            metrics.quarantined().inc(
                1, {"instance": self.instance, "source": row.source, "kind": row.kind}
            )
        out = self._quarantine_out
        if out is not None:
            out.add(rows)
            if flush or out.due():
                out.flush()

    async def quarantine(self, rows: Sequence[BadRow]) -> int:
        """Set aside bad rows a poll or sweep read; returns how many were new."""
        return len(self.core.quarantine_rows(rows))

    async def snapshot(self) -> str | None:
        """Write the ledger and watermark now (also on clean shutdown)."""
        self._export_quarantined(flush=True)
        if self.snapshots is None:
            return None
        # Taken in one step on the event loop, so table and watermark agree; written off it.
        table = self.core.ledger.to_arrow(self.core.stages)  # names: see stage_names.py
        watermark = self.core.watermark
        self._last_snapshot = time.monotonic()
        path = await asyncio.to_thread(self.snapshots.write, table, watermark)
        self.snapshots_written += 1
        return path

    def _export_metrics(self, stats: dict[str, Any]) -> None:
        tags = {"instance": self.instance}
        for stage, backlog in self.core.backlogs.items():
            for lane in Lane:
                metrics.backlog().set(
                    backlog.depth(lane), {**tags, "stage": stage, "lane": lane.name.lower()}
                )
        metrics.leased().set(stats["leased_items"], tags)
        metrics.oldest_review_age().set(stats["oldest_review_age_s"], tags)

    def _signal(self) -> None:
        for stage, event in self._work_ready.items():
            if len(self.core.backlogs[stage]):
                event.set()

    def _open(self) -> None:
        """Raise the refusal's one line (a ``ConfigError``) when this orchestrator refuses
        work; callers see it instead of a dead actor."""
        if self.refused is not None:
            raise ConfigError(self.refused)

    async def ping(self) -> bool:
        self._open()
        self._ensure_ticker()
        return True

    async def intake(self, changes: Sequence[Change], lane: int = Lane.FRESH) -> int:
        """Raises ``IntakeFull`` (nothing taken) above the high-water mark."""
        self._open()
        self._ensure_ticker()
        queued = self.core.intake(changes, Lane(lane))
        self._signal()
        return queued

    async def room(self) -> int:
        return self.core.room()

    async def demand(
        self, stage: str, n: int, worker: str = "", wait_s: float = 1.0
    ) -> list[Lease]:
        if self.refused is not None:  # no work to give: workers wait instead of spinning
            await asyncio.sleep(max(0.0, wait_s))
            return []
        self._ensure_ticker()
        event = self._work_ready[stage]
        leases = self.core.demand(stage, n, worker)
        if leases or wait_s <= 0:
            return leases
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), timeout=wait_s)
        except TimeoutError:
            return []
        return self.core.demand(stage, n, worker)

    async def report(self, lease_id: int, outcomes: Sequence[ItemResult]) -> None:
        self._open()
        self.core.report(lease_id, outcomes)
        self._signal()

    async def extend(self, lease_ids: Sequence[int]) -> int:
        return sum(self.core.extend(lid) for lid in lease_ids)

    async def driver(self, driver_id: str) -> dict[str, Any] | None:
        """The ledger entry of one driver (``GET /drivers/{id}``)."""
        return self.core.driver(driver_id)

    async def watermark(self) -> tuple[float, str]:
        """The watermark, and the incarnation that holds what it covers."""
        self._open()  # the poller must not bootstrap into an orchestrator that refuses
        return self.core.watermark, self.incarnation

    async def advance_watermark(self, catalog_time: float, incarnation: str) -> float:
        """Move the watermark on for a poll that read it from ``incarnation``.

        A poll that straddled a restart may have handed part of what it read to the
        process that died (before a snapshot kept it): moving this process's watermark past
        it would lose it. Such an advance is refused; the next poll reads the window again.
        """
        self._open()
        if incarnation != self.incarnation:
            self.stale_advances += 1
            return self.core.watermark
        first = self.core.watermark <= 0
        mark = self.core.advance_watermark(catalog_time)
        if first:  # the bootstrap listing is held: never repeat it, even after a crash
            await self.snapshot()
        return mark

    async def quiescent(self) -> bool:
        self._open()  # an orchestrator that refuses work holds nothing: never "all done"
        return self.core.quiescent()

    async def progress(self) -> dict[str, Any]:
        """What a sweep polls, in one call so that quiescence and the incarnation reporting
        it always agree: a restarted, empty process is quiescent too, and only the
        incarnation that holds the sweep's whole feed may be believed."""
        counts = self.core.ledger.counts()
        return {
            "incarnation": self.incarnation,
            "quiescent": self.core.quiescent(),
            "drivers": counts["drivers"],
            "in_review": counts["in_review"],
            "queued": self.core.queued(),
            "leased": counts["leased"],
            "invalid": self.core.counters.invalid,
            "parked": self.core.parked(),
            "verdicts": dict(self.core.counters.verdicts),
        }

    async def stats(self) -> dict[str, Any]:
        """Exact now (tests, sweeps); its cost grows with the ledger."""
        return self._full_stats()

    async def status(self) -> dict[str, Any]:
        """``stats()`` as of the last tick (at most ~1 s old): what /status shows."""
        return self._status.get()

    def _full_stats(self) -> dict[str, Any]:
        return {
            **self.core.stats(),
            "memory": process_memory(),
            "restored_from": self.restored_from,
            "started_at": self.started_at,
            "snapshots_written": self.snapshots_written,
            "incarnation": self.incarnation,
            "stale_advances": self.stale_advances,
            "node_id": ray.get_runtime_context().get_node_id(),
            "refused": self.refused,
        }

    async def backlog_depths(self) -> dict[str, int]:
        return {stage: len(b) for stage, b in self.core.backlogs.items()}


def process_memory() -> dict[str, int]:
    """This process's resident memory: ``heap`` (anonymous pages, what the ledger and
    backlog bookkeeping cost) apart from ``shared`` (object-store pages mapped in)."""
    fields = {"VmRSS": "rss", "RssAnon": "heap", "RssShmem": "shared", "VmHWM": "peak_rss"}
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in fields:
                    out[fields[key]] = int(value.split()[0]) * 1024
    except OSError:  # not Linux: the peak is what getrusage offers
        import resource

        out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out

"""The delta poller: pings make changes fast; the poller makes them certain.

Every window it asks the catalog for changes since the orchestrator's watermark (less a
small overlap for clock skew), pages through them into intake, and advances the
watermark only once intake held everything it read. A restarted poller, or orchestrator,
therefore re-reads from the last watermark; re-reading is harmless because intake only
keeps news. An advance names the orchestrator incarnation the poll read the watermark
from, and a restarted orchestrator refuses it: what the poll fed the dead one is read
again. The very first start of an instance, with no watermark at all, lists the
whole catalog once (bootstrap), and polls changes from then on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from driver_review.backlog import Lane
from driver_review.config import PipelineConfig
from driver_review.errors import IntakeFull
from driver_review.identifiers import MAX_FUTURE_SKEW_S
from driver_review.ledger import Change
from driver_review.quarantine import BadRow, taken
from driver_review.runtime.clients import make_catalog
from driver_review.runtime.handles import OrchestratorClient

log = logging.getLogger(__name__)

INTAKE_CHUNK = 1000
MAX_FULL_WAIT_S = 5.0


class PollerService:
    def __init__(
        self, config: PipelineConfig, *, instance: str, interval_s: float | None = None
    ) -> None:
        self.config = config
        self.instance = instance
        self.interval_s = interval_s if interval_s is not None else config.window.bucket_s
        self.orchestrator = OrchestratorClient(instance)
        self._catalog: Any = None
        self._task: asyncio.Task | None = None
        self.polls = 0
        self.bootstraps = 0
        self.changes_read = 0
        self.queued = 0
        self.intake_full_waits = 0
        self.quarantined = 0  # rows set aside by this poller, new to the orchestrator
        self.last_poll: dict[str, Any] = {}
        self.failures = 0
        # Polls from the start, and again by itself after Ray restarts it.
        self._boot = asyncio.get_running_loop().create_task(self.start())

    async def start(self) -> bool:
        if self._task is None or self._task.done():
            self._catalog, _ = make_catalog(self.config, self.instance)
            self._task = asyncio.get_running_loop().create_task(self._run())
        return True

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
        if self._catalog is not None:
            await self._catalog.aclose()
        return await self.stats()

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception as exc:  # the catalog or the orchestrator is down: next window
                self.failures += 1
                log.warning("poll failed: %s", exc)
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def poll_once(self) -> dict[str, Any]:
        """One pass; returns what it read. Safe to call while the loop runs."""
        started = time.monotonic()
        watermark, incarnation = await self.orchestrator.watermark()
        if watermark <= 0:
            # Catalog time is unknown before the first answer; our clock less the overlap
            # covers changes made while the listing pages through.
            # A listing is no snapshot: a driver listed early may change before the last page.
            mark = time.time() - self.config.window.skew_overlap_s
            read, _ = await self._feed(self._catalog.iter_drivers(), Lane.STALE)
            newest = mark
            self.bootstraps += 1
            kind = "bootstrap"
        else:
            since = datetime.fromtimestamp(watermark - self.config.window.skew_overlap_s, UTC)
            read, newest = await self._feed(self._catalog.changes_since(since), Lane.FRESH)
            kind = "changes"
        advanced = watermark
        if newest > watermark:
            advanced = await self.orchestrator.advance_watermark(newest, incarnation)
        self.polls += 1
        self.changes_read += read
        self.last_poll = {
            "kind": kind,
            "read": read,
            "watermark": advanced,
            "took_s": round(time.monotonic() - started, 3),
            "at": time.time(),
        }
        return self.last_poll

    async def _feed(self, summaries: Any, lane: Lane) -> tuple[int, float]:
        read, newest = 0, 0.0
        chunk: list[Change] = []
        bad: list[BadRow] = []
        source = "listing" if lane == Lane.STALE else "changes"
        # A CatalogError midway propagates: what was held stays held, and the watermark
        # does not move, so the next poll reads this window again.
        async for s in summaries:
            read += 1
            item = taken(self.config.stage_names, s, now=time.time(), source=source)
            if isinstance(item, BadRow):
                # Set aside alone: it neither stops the poll nor moves the watermark.
                bad.append(item)
                continue
            chunk.append(item)
            newest = max(newest, item.changed_at)
            if len(chunk) >= INTAKE_CHUNK:
                await self._intake(chunk, lane)
                chunk = []
        if chunk:
            await self._intake(chunk, lane)
        if bad:  # held before the watermark moves past them
            self.quarantined += await self.orchestrator.quarantine(bad)
        # Good rows are never beyond the skew allowance; the cap keeps that true whatever
        # a future adapter lets through, so later changes are never skipped.
        return read, min(newest, time.time() + MAX_FUTURE_SKEW_S)

    async def _intake(self, chunk: list[Change], lane: Lane) -> None:
        while True:
            try:
                self.queued += await self.orchestrator.intake(chunk, lane)
                return
            except IntakeFull as full:
                self.intake_full_waits += 1
                await asyncio.sleep(min(full.retry_after_s, MAX_FULL_WAIT_S))

    async def stats(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "polls": self.polls,
            "bootstraps": self.bootstraps,
            "changes_read": self.changes_read,
            "queued": self.queued,
            "intake_full_waits": self.intake_full_waits,
            "quarantined": self.quarantined,
            "rows": self._catalog.stats().get("rows", {}) if self._catalog is not None else {},
            "failures": self.failures,
            "last_poll": self.last_poll,
        }

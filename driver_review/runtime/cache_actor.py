"""The driver cache actor: versioned records as ObjectRefs, single-flight fetching.

A hit returns the ObjectRef the cache already holds (no copy, no fetch). A miss, or an
entry of another version, fetches once however many workers ask at the same moment (they
await one future), conditionally with the ETag held, so an unchanged driver costs a 304
and no body. A fat ping fills an entry without any fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import ray

from driver_review.cache import CacheCore, Entry
from driver_review.catalog.models import DriverRecord
from driver_review.config import PipelineConfig
from driver_review.errors import CatalogError
from driver_review.runtime import metrics
from driver_review.runtime.answers import CacheItem
from driver_review.runtime.clients import make_catalog


class CacheService:
    def __init__(self, config: PipelineConfig, *, instance: str) -> None:
        self.config = config
        self.instance = instance
        self.core = CacheCore(
            max_entries=config.cache.max_entries, max_bytes=config.cache.max_bytes
        )
        self._inflight: dict[str, asyncio.Future[Entry]] = {}
        self._catalog: Any = None
        self._limiter: Any = None
        self.fetches = 0
        self.not_modified = 0

    def _client(self) -> Any:
        if self._catalog is None:
            self._catalog, self._limiter = make_catalog(self.config, self.instance)
        return self._catalog

    async def get_many(self, items: Sequence[tuple[str, str | None, bool]]) -> list[CacheItem]:
        """``(driver_id, version, revalidate)`` each; ``revalidate`` asks the catalog even
        on a hit (a conditional GET: a 304 costs no body) — the freshness re-sweeps use it
        to confirm that what we hold is still what the catalog says."""
        got = list(await asyncio.gather(*(self._get(*item) for item in items)))
        metrics.cache_hit_ratio().set(self.core.stats()["hit_ratio"], {"instance": self.instance})
        return got

    async def _get(self, driver_id: str, version: str | None, revalidate: bool) -> CacheItem:
        entry = self.core.lookup(driver_id, version)
        if entry is None or revalidate:
            try:
                entry = await self._fetch(driver_id)
            except CatalogError as exc:
                return None, type(exc).__name__
        return [entry.value], None

    async def refresh(self, driver_id: str) -> list[Any] | None:
        """Revalidate one driver now (after a 409 said it moved on)."""
        try:
            return [(await self._fetch(driver_id)).value]
        except CatalogError:
            return None

    async def lookup(self, driver_ids: Sequence[str]) -> list[tuple[DriverRecord | None, str]]:
        """Thin pings: each driver as the catalog has it now (a conditional GET, single
        flight with any fetch under way), as ``(record, "")`` or ``(None, error class)``."""

        async def one(driver_id: str) -> tuple[DriverRecord | None, str]:
            try:
                entry = await self._fetch(driver_id)
            except CatalogError as exc:
                return None, type(exc).__name__
            return await entry.value, ""

        return list(await asyncio.gather(*(one(d) for d in driver_ids)))

    async def _fetch(self, driver_id: str) -> Entry:
        pending = self._inflight.get(driver_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self._inflight[driver_id] = future
        try:
            entry = await self._fetch_now(driver_id)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters, if any, re-raise it themselves
            raise
        finally:
            del self._inflight[driver_id]

    async def _fetch_now(self, driver_id: str) -> Entry:
        held = self.core.peek(driver_id)
        record, etag = await self._client().get_driver(driver_id, etag=held.etag if held else None)
        if record is None and held is not None:
            self.not_modified += 1
            return held
        assert record is not None
        self.fetches += 1
        return self._store(record, etag)

    def _store(self, record: DriverRecord, etag: str | None) -> Entry:
        size = len(record.model_dump_json())
        entry = Entry(record.version, etag, ray.put(record), size)
        self.core.store(record.id, entry)
        return entry

    async def fill(self, records: Sequence[DriverRecord]) -> int:
        """Fat pings: the record came with the ping, so no fetch is needed."""
        for record in records:
            held = self.core.peek(record.id)
            if held is None or held.version != record.version:
                self._store(record, None)
                self.core.fills += 1
        return len(records)

    async def stats(self) -> dict[str, Any]:
        calls = self._catalog.stats().get("calls", {}) if self._catalog is not None else {}
        return {
            **self.core.stats(),
            "fetches": self.fetches,
            "not_modified": self.not_modified,
            "calls": calls,
            "in_flight": len(self._inflight),
            "waiting_for_permit": self._limiter.waiting if self._limiter is not None else 0,
        }

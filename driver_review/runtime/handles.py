"""A typed client per actor role: every remote call of the package goes through one.

Each client is an :class:`~driver_review.runtime.names.ActorRef` named from the instance
(and stage, worker number) it is built with, so no call site spells a name or a method
as a string, and a dead or restarting actor is looked up again in one place,
:meth:`ActorRef.call` / :meth:`ActorRef.call_sync`. A client method has the name of the
remote method it calls (``_sync`` for a blocking variant, only where a caller cannot
await), the same parameters, and a typed answer (:mod:`.answers`, or the dataclasses of
the pure cores); ``tests/unit/test_handles.py`` holds both sides to that.

The string form (``ref.call("stats")``) stays on the base class for tests and for callers
not converted yet; the package itself does not use it (a test checks that too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from driver_review.backlog import Lane
from driver_review.catalog.models import DriverRecord
from driver_review.governor import Grant
from driver_review.ledger import Change
from driver_review.orchestrator import ItemResult, Lease
from driver_review.quarantine import BadRow
from driver_review.runtime.answers import (
    CacheItem,
    CacheStats,
    EndpointStats,
    LedgerEntry,
    OrchestratorStats,
    PollerStats,
    PoolStats,
    SweepProgress,
    Watermark,
    WorkerStats,
)
from driver_review.runtime.names import LOOKUP_TIMEOUT_S, ActorRef, actor_name

__all__ = [
    "AdminClient",
    "CacheClient",
    "GovernorClient",
    "OrchestratorClient",
    "PollerClient",
    "StagePoolClient",
    "StageWorkerClient",
]


class OrchestratorClient(ActorRef):
    """``<instance>/orchestrator``: intake, demand and leases, the ledger, the watermark."""

    def __init__(
        self, instance: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "orchestrator"), timeout_s=timeout_s, handle=handle)

    async def ping(self) -> bool:
        return bool(await self.call("ping"))

    def ping_sync(self) -> bool:
        return bool(self.call_sync("ping"))

    async def intake(self, changes: Sequence[Change], lane: Lane = Lane.FRESH) -> int:
        """How many changes queued work; raises ``IntakeFull`` (nothing taken) when full."""
        # The lane travels as an int: the actor's signature is the wire format.
        return int(await self.call("intake", changes, int(lane)))

    async def quarantine(self, rows: Sequence[BadRow]) -> int:
        return int(await self.call("quarantine", rows))

    async def demand(
        self, stage: str, n: int, worker: str = "", wait_s: float = 1.0
    ) -> list[Lease]:
        leases: list[Lease] = await self.call("demand", stage, n, worker, wait_s)
        return leases

    async def report(self, lease_id: int, outcomes: Sequence[ItemResult]) -> None:
        await self.call("report", lease_id, outcomes)

    async def extend(self, lease_ids: Sequence[int]) -> int:
        return int(await self.call("extend", lease_ids))

    async def driver(self, driver_id: str) -> LedgerEntry | None:
        entry: LedgerEntry | None = await self.call("driver", driver_id)
        return entry

    async def watermark(self) -> Watermark:
        return Watermark(*await self.call("watermark"))

    async def advance_watermark(self, catalog_time: float, incarnation: str) -> float:
        return float(await self.call("advance_watermark", catalog_time, incarnation))

    async def quiescent(self) -> bool:
        return bool(await self.call("quiescent"))

    def quiescent_sync(self) -> bool:
        return bool(self.call_sync("quiescent"))

    async def progress(self) -> SweepProgress:
        progress: SweepProgress = await self.call("progress")
        return progress

    async def stats(self) -> OrchestratorStats:
        """Exact now; its cost grows with the ledger (tests, sweeps)."""
        stats: OrchestratorStats = await self.call("stats")
        return stats

    def stats_sync(self) -> OrchestratorStats:
        stats: OrchestratorStats = self.call_sync("stats")
        return stats

    async def status(self) -> OrchestratorStats:
        """:meth:`stats` as of the orchestrator's last tick: cheap, what /status shows."""
        stats: OrchestratorStats = await self.call("status")
        return stats

    async def backlog_depths(self) -> dict[str, int]:
        depths: dict[str, int] = await self.call("backlog_depths")
        return depths

    async def snapshot(self) -> str | None:
        """Write the ledger and watermark now; the snapshot's path (None: none kept)."""
        path: str | None = await self.call("snapshot")
        return path


class GovernorClient(ActorRef):
    """``<instance>/governor``: permits per endpoint key, and what was learnt of each."""

    def __init__(
        self, instance: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "governor"), timeout_s=timeout_s, handle=handle)

    async def lease(self, key: str, n: int, successes: Sequence[float] = ()) -> Grant:
        grant: Grant = await self.call("lease", key, n, successes)
        return grant

    async def give_back(self, key: str, grant: Grant, unused: int) -> None:
        await self.call("give_back", key, grant, unused)

    async def observe(
        self,
        key: str,
        status: int,
        headers: Mapping[str, str],
        successes: Sequence[float] = (),
        age_s: float = 0.0,
    ) -> int:
        return int(await self.call("observe", key, status, dict(headers), successes, age_s))

    async def report(self, key: str, successes: Sequence[float]) -> None:
        await self.call("report", key, successes)

    async def flush(self) -> int:
        """Save what changed of the learnt limits; how many endpoints were written."""
        return int(await self.call("flush"))

    async def stats(self) -> dict[str, EndpointStats]:
        stats: dict[str, EndpointStats] = await self.call("stats")
        return stats

    async def busy_spans(self) -> dict[str, list[tuple[float, float]]]:
        spans: dict[str, list[tuple[float, float]]] = await self.call("busy_spans")
        return spans


class CacheClient(ActorRef):
    """``<instance>/cache``: driver records as ObjectRefs, fetched once however many ask."""

    def __init__(
        self, instance: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "cache"), timeout_s=timeout_s, handle=handle)

    async def get_many(self, items: Sequence[tuple[str, str | None, bool]]) -> list[CacheItem]:
        """``(driver_id, version, revalidate)`` each."""
        got: list[CacheItem] = await self.call("get_many", items)
        return got

    async def refresh(self, driver_id: str) -> list[Any] | None:
        """``[ObjectRef of the record]`` fetched now, or None when the catalog failed."""
        fresh: list[Any] | None = await self.call("refresh", driver_id)
        return fresh

    async def lookup(self, driver_ids: Sequence[str]) -> list[tuple[DriverRecord | None, str]]:
        found: list[tuple[DriverRecord | None, str]] = await self.call("lookup", driver_ids)
        return found

    async def fill(self, records: Sequence[DriverRecord]) -> int:
        return int(await self.call("fill", records))

    async def stats(self) -> CacheStats:
        stats: CacheStats = await self.call("stats")
        return stats

    def stats_sync(self) -> CacheStats:
        stats: CacheStats = self.call_sync("stats")
        return stats


class StagePoolClient(ActorRef):
    """``<instance>/pool/<stage>``: the stage's autoscaled workers."""

    def __init__(
        self, instance: str, stage: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "pool", stage), timeout_s=timeout_s, handle=handle)

    async def start(self) -> int:
        """How many workers it has once started."""
        return int(await self.call("start"))

    def start_sync(self) -> int:
        return int(self.call_sync("start"))

    async def stop(self, drain_timeout_s: float) -> PoolStats:
        """Drain every worker within ``drain_timeout_s``; the stats, with what they did."""
        stats: PoolStats = await self.call("stop", drain_timeout_s)
        return stats

    async def stats(self) -> PoolStats:
        stats: PoolStats = await self.call("stats")
        return stats

    async def status(self) -> PoolStats:
        """The stats as of the pool's last tick, without asking its workers now."""
        stats: PoolStats = await self.call("status")
        return stats


class StageWorkerClient(ActorRef):
    """``<instance>/worker/<stage>/<n>``, owned by its pool.

    No retries by default (``timeout_s`` 0): a worker that dies is replaced by its pool,
    not waited for, and its leases expire and are re-queued.
    """

    def __init__(
        self, instance: str, stage: str, n: int, *, timeout_s: float = 0.0, handle: Any = None
    ) -> None:
        super().__init__(self.name_for(instance, stage, n), timeout_s=timeout_s, handle=handle)

    @staticmethod
    def name_for(instance: str, stage: str, n: int) -> str:
        """The name to create worker ``n`` of ``stage`` under."""
        return actor_name(instance, "worker", stage, str(n))

    async def start(self) -> str:
        return str(await self.call("start"))

    async def ping(self) -> str:
        """Its name; raises when the worker's start failed."""
        return str(await self.call("ping"))

    async def drain(self, timeout_s: float) -> WorkerStats:
        stats: WorkerStats = await self.call("drain", timeout_s)
        return stats

    async def stats(self) -> WorkerStats:
        stats: WorkerStats = await self.call("stats")
        return stats


class PollerClient(ActorRef):
    """``<instance>/poller``: the delta poller of an always-on service."""

    def __init__(
        self, instance: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "poller"), timeout_s=timeout_s, handle=handle)

    async def start(self) -> bool:
        return bool(await self.call("start"))

    def start_sync(self) -> bool:
        return bool(self.call_sync("start"))

    async def stop(self) -> PollerStats:
        stats: PollerStats = await self.call("stop")
        return stats

    async def stats(self) -> PollerStats:
        stats: PollerStats = await self.call("stats")
        return stats

    def stats_sync(self) -> PollerStats:
        stats: PollerStats = self.call_sync("stats")
        return stats


class AdminClient(ActorRef):
    """``<instance>/admin``: the server of the admin endpoint (``serve_app.admin_server``)."""

    def __init__(
        self, instance: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        super().__init__(actor_name(instance, "admin"), timeout_s=timeout_s, handle=handle)

    def address_sync(self) -> tuple[str, int]:
        """``(host, port)`` it listens on, once it does."""
        host, port = self.call_sync("address")
        return str(host), int(port)

    def stop_sync(self) -> None:
        self.call_sync("stop")

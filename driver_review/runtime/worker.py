"""A stage worker: asks for work when it has room, reviews, decides, reports.

GenStage-style demand: the worker never receives what it did not ask for. It asks the
orchestrator for as many items as it has free in-flight slots (``max_in_flight``), fetches
the drivers through the shared cache in one call per batch, has them reviewed
(:func:`driver_review.review.review_batch`: the checks, and each decision PUT with its
idempotency key), appends the result rows, and reports the batch back under its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from typing import Any

import httpx
import ray

from driver_review.catalog.models import DriverRecord
from driver_review.catalog.transport import AiohttpTransport
from driver_review.checks import build_stage_checks, context_factory
from driver_review.checks.http_check import HttpCheck
from driver_review.config import PipelineConfig
from driver_review.orchestrator import Lease
from driver_review.results import ResultWriter
from driver_review.review import Fetched, Reviewer, review_batch
from driver_review.runtime import metrics
from driver_review.runtime.clients import make_catalog
from driver_review.runtime.governor_actor import RemoteLimiter
from driver_review.runtime.handles import CacheClient, GovernorClient, OrchestratorClient

log = logging.getLogger(__name__)

DEMAND_WAIT_S = 1.0
#: A worker asks for no more drivers while the queue for a check endpoint's permits holds
#: what that endpoint grants in this long: more would only queue and use up their checks'
#: wait budgets.
ENDPOINT_HORIZON_S = 2.0
ENDPOINT_RECHECK_S = 0.2
#: While a check endpoint is paused, look again at least this often (draining, a new lease).
PAUSE_RECHECK_S = 5.0


class StageWorker:
    def __init__(
        self,
        config: PipelineConfig,
        *,
        stage: str,
        instance: str,
        name: str,
        data_dir: str,
    ) -> None:
        self.config = config
        self.stage = stage
        self.name = name
        self.max_in_flight = config.stage(stage).pool.max_in_flight
        self.checks = build_stage_checks(config)[stage]
        self.orchestrator = OrchestratorClient(instance)
        self.cache = CacheClient(instance)
        self.instance = instance
        self.writer = ResultWriter(
            data_dir,
            name=name,
            rollover_rows=config.results.rollover_rows,
            rollover_s=config.results.rollover_s,
        )
        self.in_flight = 0
        self.counts: Counter[str] = Counter()
        self._room = asyncio.Event()
        self._draining = False
        self._loop_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._catalog: Any = None
        self._limiter: Any = None
        self._http: httpx.AsyncClient | None = None
        # One limiter per check endpoint key (checks sharing a key share it).
        self._check_limiters: dict[str, RemoteLimiter] = {}
        self.held_by: str | None = None  # the check endpoint key that caps demand, if any
        # Started from the constructor (it runs on the actor's event loop), so a worker
        # that Ray restarts goes back to work by itself.
        self._boot = asyncio.get_running_loop().create_task(self.start())
        self._boot.add_done_callback(self._booted)

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> str:
        if self._loop_task is None:
            self._catalog, self._limiter = make_catalog(self.config, self.instance)
            self._reviewer = Reviewer(
                stage_names=self.config.stage_names,
                checks=self.checks,
                contexts=context_factory(
                    self._catalog, http=self._check_client(), limiters=self._limiters_by_check()
                ),
                catalog=self._catalog,
                refresh=self._refresh,
                worker=self.name,
            )
            self._loop_task = asyncio.get_running_loop().create_task(self._demand_loop())
        return self.name

    def _booted(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            # Seen here and by every ping: a worker that cannot start is replaced.
            log.error("%s: start failed: %r", self.name, task.exception())

    async def ping(self) -> str:
        """Liveness for the pool: the name, or the error the worker's start died of."""
        if self._boot.done() and not self._boot.cancelled() and self._boot.exception():
            raise RuntimeError(f"{self.name} did not start: {self._boot.exception()!r}")
        return self.name

    async def drain(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Stop asking for work, finish what is held, flush results. Then safe to kill."""
        self._draining = True
        self._room.set()
        deadline = time.monotonic() + timeout_s
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(0.0, deadline - time.monotonic()))
        if self._loop_task is not None:
            self._loop_task.cancel()
        self.writer.flush()
        if self._catalog is not None:
            await self._catalog.aclose()
        for limiter in self._check_limiters.values():
            await limiter.aclose()
        if self._http is not None:
            await self._http.aclose()
        return await self.stats()

    def _check_client(self) -> httpx.AsyncClient | None:
        """One client for the stage's http checks: connections are reused across drivers."""
        if self._http is None and any(isinstance(c.run, HttpCheck) for c in self.checks):
            self._http = httpx.AsyncClient(
                headers={"user-agent": "driver-review"}, transport=AiohttpTransport()
            )
        return self._http

    def _limiters_by_check(self) -> dict[str, RemoteLimiter]:
        """Each http check paces through its endpoint's key in the governor actor."""
        governor = GovernorClient(self.instance)
        by_check: dict[str, RemoteLimiter] = {}
        for check in self.checks:
            if isinstance(check.run, HttpCheck):
                key = check.run.endpoint_key
                if key not in self._check_limiters:
                    self._check_limiters[key] = RemoteLimiter(
                        governor, key, batch=self.config.governor.lease_size
                    )
                by_check[check.name] = self._check_limiters[key]
        return by_check

    async def stats(self) -> dict[str, Any]:
        limiter = self._limiter.stats() if self._limiter is not None else {}
        catalog = self._catalog.stats() if self._catalog is not None else {}
        return {
            "name": self.name,
            "stage": self.stage,
            "node_id": ray.get_runtime_context().get_node_id(),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "waiting_for_permit": limiter.get("waiting", 0)
            + sum(lim.waiting for lim in self._check_limiters.values()),
            "held_by": self.held_by,
            "endpoints": {k: lim.stats() for k, lim in self._check_limiters.items()},
            "counts": dict(self.counts),
            "calls": catalog.get("calls", {}),
            "results_buffered": self.writer.buffered,
            "results_written": self.writer.rows_written,
            "draining": self._draining,
        }

    # -- demand -------------------------------------------------------------------------
    async def _demand_loop(self) -> None:
        while not self._draining:
            free, paused_s = self._free_slots()
            if paused_s > 0:
                # A check endpoint is paused: take no drivers it would only hold.
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), min(paused_s, PAUSE_RECHECK_S))
                continue
            if free <= 0:
                self._room.clear()
                # The permit queue drains without anything finishing: look again soon.
                timeout_s = ENDPOINT_RECHECK_S if self.held_by is not None else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), timeout_s)
                continue
            try:
                leases = await self.orchestrator.demand(self.stage, free, self.name, DEMAND_WAIT_S)
            except Exception as exc:  # the orchestrator is restarting: ask again shortly
                log.warning("%s: demand failed: %s", self.name, exc)
                await asyncio.sleep(1.0)
                continue
            for lease in leases:
                self.in_flight += lease.count
                task = asyncio.get_running_loop().create_task(self._process(lease))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if self.writer.due():
                self.writer.flush()

    def _free_slots(self) -> tuple[int, float]:
        """How many drivers to ask for, and how long a check endpoint stays paused.

        Its free in-flight slots, capped for each check endpoint by the permits it grants
        in ``ENDPOINT_HORIZON_S`` less the calls already queued for them: a scanner at 2/s
        is not sent 32 drivers to queue for it. Only the queue counts, not drivers still
        being fetched or decided, so a slow round trip elsewhere never starves the endpoint.
        """
        free, self.held_by = self.max_in_flight - self.in_flight, None
        for key, limiter in self._check_limiters.items():
            paused_s = limiter.paused_for_s()
            if paused_s > 0:
                self.held_by = key
                return 0, paused_s
            rate = limiter.rate or self.config.governor.initial_rate
            room = max(1, math.ceil(rate * ENDPOINT_HORIZON_S)) - limiter.waiting
            if room < free:
                free, self.held_by = room, key
        return free, 0.0

    async def _process(self, lease: Lease) -> None:
        keepalive = asyncio.get_running_loop().create_task(self._keep_alive(lease))
        try:
            batch = await lease.batch[0]
            items = batch.to_pylist()
            got = await self.cache.get_many(
                [(it["driver_id"], it["version"], it["revalidate"]) for it in items]
            )
            fetched = await asyncio.gather(*(_fetched(ref, error) for ref, error in got))
            reviewed = await review_batch(self._reviewer, items, fetched)
            for r in reviewed:
                self.counts[r.outcome] += 1
                if r.decided:
                    metrics.decisions().inc(
                        1, {"instance": self.instance, "stage": self.stage, "verdict": r.decided}
                    )
            self.writer.add([r.row for r in reviewed if r.row is not None])
            await self.orchestrator.report(lease.lease_id, [r.result for r in reviewed])
        except Exception:
            # The lease expires and the orchestrator re-queues the batch: nothing is lost.
            log.exception("%s: lease %s failed", self.name, lease.lease_id)
            self.counts["lease_failed"] += 1
        finally:
            keepalive.cancel()
            self.in_flight -= lease.count
            self._room.set()

    async def _refresh(self, driver_id: str) -> DriverRecord | None:
        fresh = await self.cache.refresh(driver_id)
        return await fresh[0] if fresh else None

    async def _keep_alive(self, lease: Lease) -> None:
        while True:
            await asyncio.sleep(lease.lease_s / 3)
            await self.orchestrator.extend([lease.lease_id])


async def _fetched(ref: list | None, error: str | None) -> Fetched:
    """The cache's answer for one item (a record in the object store, or why not)."""
    return Fetched(await ref[0] if ref is not None else None, error)

"""A stage pool: between ``min_workers`` and ``max_workers`` stage workers, autoscaled.

Each tick it samples the stage's backlog (from the orchestrator) and its workers'
in-flight and permit-waiting counts, and asks :class:`~driver_review.autoscale.AutoscalePolicy`
whether to add a worker or drain one. Workers are owned by the pool: if the pool dies
they go with it, its restart makes ``min_workers`` anew, and the leases they held expire
and are re-queued — nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError

from driver_review.autoscale import AutoscalePolicy, PoolSample, spread_target
from driver_review.config import PipelineConfig
from driver_review.runtime import metrics
from driver_review.runtime.answers import WorkerStats
from driver_review.runtime.handles import CacheClient, OrchestratorClient, StageWorkerClient

log = logging.getLogger(__name__)

TICK_S = 1.0
DRAIN_TIMEOUT_S = 60.0
#: A worker slower than this to give its stats is busy (see ``_worker_stats``).
WORKER_ANSWER_S = 2.0
#: Names tried when adding a worker (a restarted pool may find its first ones taken).
NAME_ATTEMPTS = 1000


class StagePoolService:
    def __init__(
        self,
        config: PipelineConfig,
        *,
        stage: str,
        instance: str,
        data_dir: str,
        autoscale: bool = True,
    ) -> None:
        self.config = config
        self.stage = stage
        self.instance = instance
        self.data_dir = data_dir
        self.autoscale = autoscale
        pool = config.stage(stage).pool
        self.policy = AutoscalePolicy(
            min_workers=pool.min_workers,
            max_workers=pool.max_workers,
            idle_shrink_s=pool.idle_shrink_s,
        )
        self.orchestrator = OrchestratorClient(instance)
        self.cache = CacheClient(instance)
        self.workers: dict[str, StageWorkerClient] = {}
        # Where each worker runs (as it last said; the node it was sent to until then).
        self.node_of: dict[str, str] = {}
        self._stage_index = config.stage_names.index(stage)
        self._serial = 0
        self._ticker: asyncio.Task | None = None
        self.events: list[dict[str, Any]] = []  # scale events, newest last (bounded)
        self.peak_workers = 0
        self.last_sample: PoolSample | None = None
        # The workers' stats as last gathered (each tick), for ``status``.
        self._seen: dict[str, WorkerStats] = {}
        self._seen_at: float | None = None
        self._asking: dict[str, asyncio.Future[WorkerStats]] = {}  # stats asked, unanswered
        # An async actor's constructor runs on its event loop: start here, so a pool that
        # Ray restarts (its node died, say) makes its workers again without being asked.
        self._starting = asyncio.Lock()
        self._boot = asyncio.get_running_loop().create_task(self.start())
        # Totals of drained workers, so a pool's figures survive its workers.
        self.retired: dict[str, int] = {}
        self.retired_calls: dict[str, dict[str, int]] = {}

    async def start(self) -> int:
        async with self._starting:  # the constructor's start and an explicit one
            if self._ticker is None or self._ticker.done():
                try:
                    while len(self.workers) < self.policy.min_workers:
                        await self._add("start")
                    await self._worker_stats()  # what ``status`` shows until the first tick
                finally:
                    # Whatever happened, tick: the autoscaler tops a pool up to min_workers,
                    # so a restarted pool whose first start failed still gets its workers.
                    self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        return len(self.workers)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self._tick()
            except Exception:
                log.exception("pool %s: tick failed", self.stage)

    async def _tick(self) -> None:
        stats = await self._worker_stats()
        depths = await self.orchestrator.backlog_depths()
        # Driver fetches wait for permits in the shared cache; the endpoint is the same, so
        # a cache held by the governor holds this stage too.
        cache = await self.cache.stats()
        in_flight = sum(s["in_flight"] for s in stats.values())
        sample = PoolSample(
            backlog=depths.get(self.stage, 0),
            workers=len(self.workers),
            in_flight=in_flight,
            capacity=sum(s["max_in_flight"] for s in stats.values()),
            waiting_for_permit=min(
                in_flight,
                sum(s["waiting_for_permit"] for s in stats.values()) + cache["waiting_for_permit"],
            ),
            now=time.monotonic(),
            held=any(s.get("held_by") for s in stats.values()),
        )
        self.last_sample = sample
        metrics.workers().set(len(self.workers), {"instance": self.instance, "stage": self.stage})
        step = self.policy.decide(sample) if self.autoscale else 0
        if step > 0:
            await self._add(self.policy.last_reason)
        elif step < 0 and stats:
            idlest = min(stats, key=lambda n: stats[n]["in_flight"])
            await self._retire(idlest, self.policy.last_reason)

    async def _worker_stats(self) -> dict[str, WorkerStats]:
        """Stats of live workers. A dead one is replaced (its leases expire and re-queue);
        one that does not answer within ``WORKER_ANSWER_S`` is busy (a synchronous check
        holds its event loop, say): it stays, counted with every slot in use, so the tick
        goes on and the autoscaler sees a stage that is not keeping up."""
        names = list(self.workers)
        answers = await asyncio.gather(
            *(self._look(n, self.workers[n]) for n in names), return_exceptions=True
        )
        # The autoscaling tick runs beside this coroutine and may add or retire a worker
        # while we await: pair the answers with the names they were asked of, and keep
        # only workers still in the pool.
        live: dict[str, WorkerStats] = {}
        for name, answer in zip(names, answers, strict=True):
            if name not in self.workers:
                continue
            if isinstance(answer, BaseException):
                log.warning(
                    "pool %s: worker %s is gone (%s)", self.stage, name, type(answer).__name__
                )
                worker = self.workers.pop(name)
                self.node_of.pop(name, None)
                with contextlib.suppress(Exception):  # if it lingers, it must not lease
                    ray.kill(worker.handle, no_restart=True)
            elif answer is None:
                live[name] = self._busy(name)
            else:
                live[name] = answer
                self.node_of[name] = answer["node_id"]  # as it says (Ray placed some)
        self._seen, self._seen_at = live, time.time()
        return live

    async def _look(self, name: str, worker: StageWorkerClient) -> WorkerStats | None:
        """The worker's stats, or ``None`` if it has not answered within
        ``WORKER_ANSWER_S``; raises if it is gone. A question not yet answered is waited
        on again rather than asked anew, so a blocked worker's queue does not grow."""
        asking = self._asking.get(name)
        if asking is None or asking.done():
            asking = self._asking[name] = asyncio.ensure_future(worker.stats())
            # Read even if no one waits for it any more (the worker retired meanwhile).
            asking.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            return await asyncio.wait_for(asyncio.shield(asking), WORKER_ANSWER_S)
        except TimeoutError:
            return None
        finally:
            if asking.done():
                self._asking.pop(name, None)

    def _busy(self, name: str) -> WorkerStats:
        """A worker that did not answer in time: as last seen (what it waited for, what
        held it), with every slot it last said it had in use."""
        last = self._seen.get(name, {})
        slots = last.get("max_in_flight", self.config.stage(self.stage).pool.max_in_flight)
        seen: WorkerStats = {
            **last,
            "name": name,
            "stage": self.stage,
            "in_flight": slots,
            "max_in_flight": slots,
            "waiting_for_permit": min(slots, last.get("waiting_for_permit", 0)),
            "answering": False,
        }
        return seen

    async def _next_node(self) -> str | None:
        """The alive node holding fewest of this pool's workers (see
        :func:`~driver_review.autoscale.spread_target`); ``None`` (Ray's ``SPREAD``) when
        the node list cannot be read."""
        try:
            nodes = await asyncio.to_thread(ray.nodes)
        except Exception as exc:  # the GCS is restarting, say: Ray still places it
            log.warning("pool %s: node list unavailable (%s); placed by Ray", self.stage, exc)
            return None
        placed: dict[str, int] = {}
        for name in self.workers:
            if name in self.node_of:
                placed[self.node_of[name]] = placed.get(self.node_of[name], 0) + 1
        alive = [n["NodeID"] for n in nodes if n.get("Alive")]
        return spread_target(alive, placed, self._stage_index)

    async def _add(self, reason: str) -> None:
        from driver_review.runtime.actors import new_worker

        node = await self._next_node()
        for _ in range(NAME_ATTEMPTS):
            self._serial += 1
            name = StageWorkerClient.name_for(self.instance, self.stage, self._serial)
            try:
                worker = StageWorkerClient(
                    self.instance,
                    self.stage,
                    self._serial,
                    handle=new_worker(
                        self.config,
                        stage=self.stage,
                        instance=self.instance,
                        name=name,
                        data_dir=self.data_dir,
                        node_id=node,
                    ),
                )
                break
            except ActorAlreadyExistsError:
                # A restarted pool counts from 1 again, and the workers of the process that
                # died (owned by it, so dying with it) may not be gone yet: skip their names.
                continue
        else:
            raise RuntimeError(f"pool {self.stage}: {NAME_ATTEMPTS} worker names all taken")
        await worker.start()
        self.workers[name] = worker
        if node is not None:
            self.node_of[name] = node
        self.peak_workers = max(self.peak_workers, len(self.workers))
        self._event("add", name, reason)

    async def _retire(self, name: str, reason: str, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        worker = self.workers.pop(name)
        self.node_of.pop(name, None)
        self._asking.pop(name, None)
        self._event("drain", name, reason)
        try:
            final = await worker.drain(timeout_s)
            merge_counts(self.retired, final["counts"])
            merge_calls(self.retired_calls, final["calls"])
        finally:
            ray.kill(worker.handle, no_restart=True)

    def _event(self, kind: str, name: str, reason: str) -> None:
        self.events.append(
            {
                "at": time.time(),
                "event": kind,
                "worker": name,
                "reason": reason,
                "workers": len(self.workers),
            }
        )
        del self.events[:-100]

    async def stop(self, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> dict[str, Any]:
        """Graceful: stop autoscaling, drain every worker (finish what it holds, within
        ``drain_timeout_s``; flush), then kill."""
        if self._ticker is not None:
            self._ticker.cancel()
        summary = await self.stats()
        await asyncio.gather(
            *(self._retire(n, "stop", drain_timeout_s) for n in list(self.workers)),
            return_exceptions=True,
        )
        summary["retired"] = dict(self.retired)
        summary["retired_calls"] = self.retired_calls
        return summary

    async def stats(self) -> dict[str, Any]:
        """Stats with every worker asked now (one silent for ``WORKER_ANSWER_S`` counts
        as busy)."""
        return self._summary(await self._worker_stats())

    async def status(self) -> dict[str, Any]:
        """The stats as of the last tick's look at the workers (``stats_age_s`` old), at
        once: what ``/status`` shows, which a worker whose event loop is busy (a slow
        synchronous check, a loaded machine) must not hold up."""
        summary = self._summary({n: s for n, s in self._seen.items() if n in self.workers})
        summary["stats_age_s"] = None if self._seen_at is None else time.time() - self._seen_at
        return summary

    def _summary(self, stats: dict[str, WorkerStats]) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "workers": len(self.workers),
            "peak_workers": self.peak_workers,
            "min_workers": self.policy.min_workers,
            "max_workers": self.policy.max_workers,
            "last_reason": self.policy.last_reason,
            "in_flight": sum(s["in_flight"] for s in stats.values()),
            # Workers that did not answer in time (a blocking check holds their loop).
            "not_answering": sum(1 for s in stats.values() if s.get("answering") is False),
            # As the autoscaler saw it last: this stage's items held by the rate governor.
            "waiting_for_permit": self.last_sample.waiting_for_permit if self.last_sample else 0,
            "backlog": self.last_sample.backlog if self.last_sample else 0,
            # Check endpoints capping this stage's demand (their limit or a pause).
            "held_by": sorted({s["held_by"] for s in stats.values() if s.get("held_by")}),
            "worker_stats": stats,
            "retired": dict(self.retired),
            "events": self.events[-20:],
        }


def merge_counts(into: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value
    return into


def merge_calls(
    into: dict[str, dict[str, int]], more: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Add call counts by route and status."""
    for route, by_status in more.items():
        merge_counts(into.setdefault(route, {}), by_status)
    return into

"""The three peers as a good engineer would write them, each run once per grid setting.

- **fanout**: one Ray task (``num_cpus=0``, a process of its own so it never shares a GIL
  with the simulator) running asyncio: one client, a semaphore of ``concurrency``
  drivers in flight, jittered exponential backoff above ``Retry-After``.
- **ray_data**: ``map_batches`` over an actor pool of ``pool`` actors; each actor keeps
  one client on an event loop of its own across batches and reviews a batch's
  ``batch_size`` drivers concurrently, with the same jittered retries.
- **adaptive**: as fanout, paced by botocore's adaptive client rate limiter
  (:mod:`.cubic`) with botocore's standard backoff.

Each returns the counters of :func:`.peer_review.review_all` summed over its drivers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import ray

from driver_review.checks import build_stage_checks
from driver_review.config import load_config
from jobs.bench.peer_review import PeerCatalog, review_all, review_sync

#: What a Ray Data actor reserves: a quarter, so pools of 4 fit a 2-core machine's Ray.
RAY_DATA_ACTOR_CPUS = 0.25
GRACE_S = 15.0  # after the deadline, for in-flight work to notice and stop
_COUNTS = (
    "decisions",
    "fetches",
    "final",
    "conflicts",
    "call_errors",
    "check_errors",
    "abandoned",
    "crashed",
    "gave_up",
)


@ray.remote(num_cpus=0, max_retries=0)
def _review_task(
    url: str, ids: list[str], deadline: float, reviewer: str, options: dict[str, Any]
) -> dict[str, Any]:
    return review_sync(url, ids, deadline, reviewer, **options)


def run_fanout(
    url: str, ids: list[str], deadline: float, setting: Mapping[str, Any]
) -> dict[str, Any]:
    options = {"concurrency": int(setting["concurrency"]), "policy": "jittered"}
    return _get(_review_task.remote(url, ids, deadline, "fanout", options), deadline)


def run_adaptive(
    url: str, ids: list[str], deadline: float, setting: Mapping[str, Any]
) -> dict[str, Any]:
    options = {"concurrency": int(setting["concurrency"]), "policy": "botocore", "adaptive": True}
    return _get(_review_task.remote(url, ids, deadline, "adaptive", options), deadline)


def _get(ref: ray.ObjectRef, deadline: float) -> dict[str, Any]:
    """The task's counters; a task still running well after the deadline is cancelled
    (and the run is then an error: ``GetTimeoutError`` propagates)."""
    try:
        return ray.get(ref, timeout=max(1.0, deadline - time.time() + GRACE_S))
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        raise


class _DataReviewer:
    """The Ray Data UDF: a batch of driver ids in, what became of them out. One client
    per actor, kept on the actor's own event loop across batches."""

    def __init__(self, url: str, deadline: float, concurrency: int) -> None:
        self.concurrency = concurrency
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="peer-loop").start()
        self.checks = build_stage_checks(load_config())
        self.catalog = self._run(self._open(url, deadline))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def _open(self, url: str, deadline: float) -> PeerCatalog:
        return PeerCatalog(url, deadline, policy="jittered", concurrency=self.concurrency)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        ids = [str(d) for d in batch["driver_id"]]
        counts = self._run(review_all(self.catalog, self.checks, ids, "ray-data", self.concurrency))
        return {k: np.array([int(counts.get(k, 0))]) for k in _COUNTS}


def run_ray_data(
    url: str, ids: list[str], deadline: float, setting: Mapping[str, Any]
) -> dict[str, Any]:
    from ray.data import ActorPoolStrategy, DataContext

    DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    batch = int(setting["batch_size"])
    ds = ray.data.from_items([{"driver_id": d} for d in ids]).map_batches(
        _DataReviewer,
        fn_constructor_args=(url, deadline, batch),
        compute=ActorPoolStrategy(size=int(setting["pool"])),
        batch_size=batch,
        num_cpus=RAY_DATA_ACTOR_CPUS,
        batch_format="numpy",
    )
    totals: Counter[str] = Counter()
    for row in ds.take_all():
        totals.update({k: int(row[k]) for k in _COUNTS})
    return {k: v for k, v in totals.items() if v}


RUNNERS: dict[str, Callable[[str, list[str], float, Mapping[str, Any]], dict[str, Any]]] = {
    "fanout": run_fanout,
    "ray_data": run_ray_data,
    "adaptive": run_adaptive,
}

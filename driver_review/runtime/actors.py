"""The one place where plain classes become Ray actors, with their options.

I/O-bound actors ask for no CPU so a 2-core laptop hosts them all; the package digest
runs in a thread. Long-lived actors are named, detached and restart forever; stage
workers are owned by their pool (see :mod:`.pool`), which spreads them across nodes.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from driver_review import env
from driver_review.config import PipelineConfig
from driver_review.runtime.cache_actor import CacheService
from driver_review.runtime.governor_actor import GovernorService
from driver_review.runtime.names import NAMESPACE, actor_name
from driver_review.runtime.orchestrator_actor import OrchestratorService
from driver_review.runtime.poller import PollerService
from driver_review.runtime.pool import StagePoolService
from driver_review.runtime.worker import StageWorker

_SERVICE = {
    "namespace": NAMESPACE,
    "lifetime": "detached",
    "max_restarts": -1,
    "num_cpus": 0,
    "get_if_exists": True,
    "max_concurrency": 1000,
}

Orchestrator = ray.remote(OrchestratorService)
Governor = ray.remote(GovernorService)
Cache = ray.remote(CacheService)
StagePool = ray.remote(StagePoolService)
Poller = ray.remote(PollerService)
Worker = ray.remote(StageWorker)


def _placement() -> dict[str, Any]:
    """Orchestrator and governor may be pinned to nodes offering a custom resource
    (``DRIVER_REVIEW_HEAD_RESOURCE``), e.g. the head node of a cluster."""
    import os

    resource = os.environ.get(env.HEAD_RESOURCE)
    return {"resources": {resource: 0.001}} if resource else {}


def orchestrator(
    config: PipelineConfig,
    instance: str,
    *,
    outer_loop: bool = True,
    data_dir: str | None = None,
    results_dir: str | None = None,
) -> Any:
    return Orchestrator.options(
        name=actor_name(instance, "orchestrator"), **_SERVICE, **_placement()
    ).remote(
        config, instance=instance, outer_loop=outer_loop, data_dir=data_dir, results_dir=results_dir
    )


def governor(config: PipelineConfig, instance: str, data_dir: str | None = None) -> Any:
    return Governor.options(
        name=actor_name(instance, "governor"), **_SERVICE, **_placement()
    ).remote(config.governor, instance=instance, data_dir=data_dir)


def cache(config: PipelineConfig, instance: str) -> Any:
    return Cache.options(name=actor_name(instance, "cache"), **_SERVICE).remote(
        config, instance=instance
    )


def poller(config: PipelineConfig, instance: str, interval_s: float | None = None) -> Any:
    return Poller.options(name=actor_name(instance, "poller"), **_SERVICE).remote(
        config, instance=instance, interval_s=interval_s
    )


def stage_pool(
    config: PipelineConfig, instance: str, stage: str, data_dir: str, *, autoscale: bool = True
) -> Any:
    return StagePool.options(name=actor_name(instance, "pool", stage), **_SERVICE).remote(
        config, stage=stage, instance=instance, data_dir=data_dir, autoscale=autoscale
    )


def new_worker(
    config: PipelineConfig,
    *,
    stage: str,
    instance: str,
    name: str,
    data_dir: str,
    node_id: str | None = None,
) -> Any:
    """A stage worker on ``node_id`` when given, else wherever Ray puts it.

    The affinity is hard: a worker asks for no resources, and Ray ignores ``SPREAD`` and
    soft affinity for such a request, picking a node at random (ray-project/ray#25360
    honours only hard affinity); on a two-node cluster all four workers of a sweep landed
    on one node now and then. A worker whose node is gone cannot be restarted there: it
    dies (``ActorUnschedulableError``) and its pool starts another on a live node."""
    strategy: Any = (
        NodeAffinitySchedulingStrategy(node_id, soft=False) if node_id is not None else "SPREAD"
    )
    return Worker.options(
        name=name,
        namespace=NAMESPACE,
        num_cpus=0,
        max_restarts=-1,
        max_concurrency=1000,
        scheduling_strategy=strategy,
    ).remote(config, stage=stage, instance=instance, name=name, data_dir=data_dir)

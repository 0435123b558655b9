"""Start and stop one instance: governor, orchestrator, cache, one pool per stage.

Shutdown order (as in Broadway): stop intake (the caller stops feeding) → drain the pools
(workers finish what they hold and flush their results) → stop the services. The pools
drain together, so a stop takes at most one drain timeout however many stages hold work;
what a stage hands on meanwhile stays queued in the orchestrator (and its snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import ray

from driver_review import stage_names
from driver_review.config import PipelineConfig
from driver_review.runtime import actors
from driver_review.runtime.handles import (
    CacheClient,
    GovernorClient,
    OrchestratorClient,
    PollerClient,
    StagePoolClient,
)
from driver_review.runtime.names import NAMESPACE, ActorRef
from driver_review.snapshot import SnapshotStore

log = logging.getLogger(__name__)


@dataclass
class System:
    instance: str
    config: PipelineConfig
    data_dir: str
    orchestrator: OrchestratorClient
    governor: GovernorClient
    cache: CacheClient
    pools: dict[str, StagePoolClient]
    poller: PollerClient

    @classmethod
    def attach(cls, config: PipelineConfig, instance: str, data_dir: str = "") -> System:
        """Clients by name of an instance started elsewhere (status, Serve app, jobs)."""
        return cls(
            instance,
            config,
            data_dir,
            orchestrator=OrchestratorClient(instance),
            governor=GovernorClient(instance),
            cache=CacheClient(instance),
            pools={s: StagePoolClient(instance, s) for s in config.stage_names},
            poller=PollerClient(instance),
        )

    def all_refs(self) -> list[ActorRef]:
        return [self.poller, *self.pools.values(), self.cache, self.orchestrator, self.governor]


def start_system(
    config: PipelineConfig,
    *,
    instance: str,
    data_dir: str,
    outer_loop: bool = True,
    autoscale: bool = True,
    poll: bool = False,
    poll_interval_s: float | None = None,
) -> System:
    """Create (or join, by name) every actor of ``instance`` and start the pools; with
    ``poll``, also the delta poller (the always-on service, whose ingress starts it with
    :func:`start_poller` once pings can arrive: see ``serve_app.service``)."""
    system = begin_system(
        config,
        instance=instance,
        data_dir=data_dir,
        outer_loop=outer_loop,
        autoscale=autoscale,
        poll=poll,
    ).wait()
    if poll:
        start_poller(config, instance, poll_interval_s)
    return system


@dataclass
class Starting:
    """An instance whose actors are being created: :meth:`wait` returns its
    :class:`System` once the orchestrator answers and every pool has its workers."""

    config: PipelineConfig
    instance: str
    data_dir: str
    orchestrator: Any
    pools: list[StagePoolClient]

    def wait(self) -> System:
        # On the handles just created, without retries: an actor that cannot start fails
        # the start at once, with Ray's error, rather than after a minute of lookups.
        OrchestratorClient(self.instance, handle=self.orchestrator, timeout_s=0).ping_sync()
        # Every pool began starting its workers as it was created, so starting them one
        # after another here waits about as long as the slowest one.
        for pool in self.pools:
            pool.start_sync()
        return System.attach(self.config, self.instance, self.data_dir)


def begin_system(
    config: PipelineConfig,
    *,
    instance: str,
    data_dir: str,
    outer_loop: bool = True,
    autoscale: bool = True,
    poll: bool = False,
) -> Starting:
    """Check what a start needs (credentials; with ``poll``, the snapshot's stages), then
    create every actor but the poller and return without waiting for any: the caller may
    start something else meanwhile (the service starts Serve), since each actor process
    spends a second or two importing before it answers. Refusals raise here, before any
    actor exists."""
    config.check_environment()  # a missing credential fails here, not in every actor
    if poll:
        check_snapshot_stages(config, instance, data_dir)
    # The governor starts from what earlier runs learnt of each endpoint (data dir).
    actors.governor(config, instance, data_dir or None)
    # Only the always-on service keeps snapshots; a sweep starts from nothing anyway.
    orchestrator = actors.orchestrator(
        config,
        instance,
        outer_loop=outer_loop,
        data_dir=data_dir if poll else None,
        results_dir=data_dir,
    )
    actors.cache(config, instance)
    pools = [
        StagePoolClient(
            instance,
            s,
            timeout_s=0,
            handle=actors.stage_pool(config, instance, s, data_dir, autoscale=autoscale),
        )
        for s in config.stage_names
    ]
    return Starting(config, instance, data_dir, orchestrator, pools)


def start_poller(
    config: PipelineConfig, instance: str, poll_interval_s: float | None = None
) -> None:
    """Create (or join) the delta poller and start it: its first listing brings in every
    change made so far, so the service starts it once its ingress takes pings — a change
    between that listing and a routed ingress would otherwise wait for the next poll."""
    PollerClient(
        instance, timeout_s=0, handle=actors.poller(config, instance, poll_interval_s)
    ).start_sync()


def check_snapshot_stages(config: PipelineConfig, instance: str, data_dir: str) -> None:
    """Refuse a start, before any actor exists, whose newest snapshot has drivers at a stage
    the pipeline no longer has (and no migration for it): one line naming the stage, how
    many drivers sit there and what to do. Checked here because the orchestrator is a
    detached actor that Ray restarts forever; it refuses such a snapshot too, but only once
    it exists. Reads the stage column alone."""
    store = SnapshotStore(data_dir, instance)
    loaded = store.load(columns=["stage"])
    if loaded is None:
        return
    stage_names.check(
        loaded.table.column("stage"),
        config.stage_names,
        config.window.migrate_stages,
        where=f"the snapshot of instance {instance!r}",
    )


async def stop_system(system: System, *, drain_timeout_s: float = 60.0) -> dict[str, Any]:
    """Drain the pools, then kill every actor of the instance. Returns the final stats."""
    final: dict[str, Any] = {"pools": {}}
    with contextlib.suppress(ValueError):  # no poller in a sweep
        ray.get_actor(system.poller.name, namespace=NAMESPACE)
        final["poller"] = await system.poller.stop()
    stages = list(system.pools)
    stopped = await asyncio.gather(
        *(system.pools[stage].stop(drain_timeout_s) for stage in stages),
        return_exceptions=True,
    )
    for stage, answer in zip(stages, stopped, strict=True):
        if isinstance(answer, BaseException):
            log.warning("stopping pool %s: %s", stage, answer)
        else:
            final["pools"][stage] = answer
    try:
        final["snapshot"] = await system.orchestrator.snapshot()
    except Exception as exc:
        log.warning("final snapshot: %s", exc)
    try:  # what was learnt of each endpoint, for the next run's warm start
        final["learnt_saved"] = await system.governor.flush()
    except Exception as exc:
        log.warning("saving learnt limits: %s", exc)
    stats = {
        "cache": system.cache.stats,
        "governor": system.governor.stats,
        "orchestrator": system.orchestrator.stats,
    }
    for name, read in stats.items():
        try:
            final[name] = await read()
        except Exception as exc:
            log.warning("reading %s stats: %s", name, exc)
    for ref in system.all_refs():
        with contextlib.suppress(ValueError):  # already gone
            ray.kill(ray.get_actor(ref.name, namespace=NAMESPACE), no_restart=True)
    return final

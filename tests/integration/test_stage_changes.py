"""A service restarted with a changed pipeline file, on a real local Ray: a snapshot whose
drivers sit at a stage the pipeline no longer has is refused in one line before any actor
exists, an orchestrator that meets it anyway refuses work without restarting, and the
migration option moves the drivers and starts."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import ray

from driver_review.config import PipelineConfig
from driver_review.errors import ConfigError
from driver_review.ledger import Change, Ledger, Status
from driver_review.runtime import actors
from driver_review.runtime.names import ActorRef, actor_name
from driver_review.runtime.system import start_system, stop_system
from driver_review.snapshot import SnapshotStore
from driver_review.stage_names import StagesRemoved
from tests.support.actors import actor_exists
from tests.support.configs import config_for

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

WITH_LEGAL = ["intake", "legal", "security", "compatibility"]
AT_LEGAL = [f"gone-legal-{k}" for k in range(7)]  # not in the catalog: nobody moves them
AT_SECURITY = [f"gone-sec-{k}" for k in range(3)]


def _config(url: str, **window: Any) -> PipelineConfig:
    return config_for(
        url,
        window=dict(bucket_s=1.0, lease_s=30.0, snapshot_s=0.5) | window,
        results={"rollover_s": 1.0},
    )


def _write_snapshot_with_legal(data_dir: str, instance: str) -> float:
    """What an orchestrator running a pipeline with a `legal` stage left behind."""
    ledger = Ledger()
    t = time.time() - 60
    for k, d in enumerate(AT_LEGAL):
        ledger.observe(Change(d, "1.0", WITH_LEGAL.index("legal"), Status.IN_REVIEW, t + k))
    for k, d in enumerate(AT_SECURITY):
        ledger.observe(Change(d, "1.0", WITH_LEGAL.index("security"), Status.IN_REVIEW, t + k))
    SnapshotStore(data_dir, instance).write(ledger.to_arrow(WITH_LEGAL), watermark=t)
    return t


def _manifests(data_dir: str, instance: str) -> int:
    return len(SnapshotStore(data_dir, instance)._manifests())


@pytest.mark.timeout(120)
def test_a_removed_stage_refuses_the_start_and_never_restarts(sim_factory, tmp_path) -> None:
    sim = sim_factory(drivers=10, seed=3)
    data_dir, instance = str(tmp_path), f"stages-{uuid.uuid4().hex[:6]}"
    _write_snapshot_with_legal(data_dir, instance)
    config = _config(sim.url)

    started = time.monotonic()
    with pytest.raises(StagesRemoved) as info:
        start_system(config, instance=instance, data_dir=data_dir, poll=True)
    line = str(info.value)
    print(f"refused in {time.monotonic() - started:.2f}s: {line}")
    assert "\n" not in line
    assert line.startswith(
        f"pipeline no longer has stage 'legal' but the snapshot of instance "
        f"{instance!r} has 7 drivers there; add it back, or migrate them "
        f"with --migrate-stage legal=STAGE"
    )
    # Refused before any actor existed: nothing for Ray to restart.
    for role in ("orchestrator", "governor", "cache", "poller"):
        assert not actor_exists(actor_name(instance, role)), role

    # An orchestrator that meets the snapshot anyway (created elsewhere, or restarted with
    # a changed pipeline) refuses work in the same words, stays up, and writes nothing.
    handle = actors.orchestrator(config, instance, data_dir=data_dir)
    orch = ActorRef(actor_name(instance, "orchestrator"))
    try:
        with pytest.raises(ConfigError, match="no longer has stage 'legal'"):
            ray.get(handle.ping.remote(), timeout=60)
        first = orch.call_sync("stats")
        assert first["refused"] == line
        with pytest.raises(ConfigError, match="no longer has stage 'legal'"):
            orch.call_sync("intake", [Change("d-1", "1.0", 0, Status.IN_REVIEW, time.time())])
        assert orch.call_sync("demand", "intake", 10, "w", 0.1) == []
        with pytest.raises(ConfigError, match="no longer has stage 'legal'"):
            orch.call_sync("quiescent")  # holding nothing is not having finished
        time.sleep(2.0)  # four snapshot periods
        later = orch.call_sync("stats")
        assert later["incarnation"] == first["incarnation"]  # no restart, let alone a loop
        assert later["snapshots_written"] == 0 and _manifests(data_dir, instance) == 1
        # Killed, Ray restarts it once; it comes back refusing, not crashing.
        ray.kill(handle, no_restart=False)
        deadline, again = time.monotonic() + 60, first
        while again["incarnation"] == first["incarnation"] and time.monotonic() < deadline:
            time.sleep(0.2)
            again = orch.call_sync("stats")
        assert again["incarnation"] != first["incarnation"] and again["refused"] == line
        time.sleep(1.0)
        assert orch.call_sync("stats")["incarnation"] == again["incarnation"]
        assert _manifests(data_dir, instance) == 1  # the snapshot is kept as it was
    finally:
        ray.kill(handle, no_restart=True)


@pytest.mark.timeout(180)
def test_the_migration_option_starts_and_moves_the_drivers(sim_factory, tmp_path) -> None:
    sim = sim_factory(drivers=10, seed=3)
    data_dir, instance = str(tmp_path), f"stages-{uuid.uuid4().hex[:6]}"
    _write_snapshot_with_legal(data_dir, instance)
    config = _config(sim.url, migrate_stages={"legal": "security"})
    system = start_system(
        config, instance=instance, data_dir=data_dir, poll=True, poll_interval_s=1.0
    )

    async def scenario() -> tuple[dict, dict, dict]:
        entries = {d: await system.orchestrator.call("driver", d) for d in AT_LEGAL + AT_SECURITY}
        deadline = time.monotonic() + 60
        stats = await system.orchestrator.call("stats")
        while stats["snapshots_written"] < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            stats = await system.orchestrator.call("stats")
        final = await stop_system(system)
        return entries, stats, final

    entries, stats, final = asyncio.run(scenario())
    assert stats["refused"] is None and stats["restored_from"] is not None
    for d in AT_LEGAL + AT_SECURITY:
        assert entries[d] is not None and entries[d]["stage"] == "security", entries[d]
    # What it writes names only the stages it has, with the migrated drivers at security.
    snap = SnapshotStore(data_dir, instance).load()
    assert snap is not None and final["snapshot"] is not None
    back = Ledger.from_arrow(snap.table, config.stage_names)
    names = snap.table.column("stage").combine_chunks().dictionary.to_pylist()
    assert names == config.stage_names
    at_security = [d for d in AT_LEGAL if back.target(back.row(d))[1] == 1]
    print(
        f"migrated {len(at_security)}/{len(AT_LEGAL)} drivers from legal to security; "
        f"{stats['ledger']['drivers']} drivers in the ledger"
    )
    assert at_security == AT_LEGAL

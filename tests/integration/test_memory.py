"""Memory stays bounded: 200,000 drivers queued at once live in the object store, not in
the orchestrator's heap."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from driver_review.backlog import Lane
from driver_review.config import load_config, parse_config
from driver_review.runtime.clients import make_catalog
from driver_review.runtime.system import start_system, stop_system
from driver_review.sim import SimSettings
from driver_review.sweep import INTAKE_CHUNK
from driver_review.wire import change_of

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

DRIVERS = 200_000
#: The stated bound on the orchestrator's own heap growth for 200k drivers: the columnar
#: ledger (~100 B a driver), its id index, and 8 bytes per queued item.
HEAP_BOUND_BYTES = 160 * 1024 * 1024
MIB = 1024 * 1024


@pytest.mark.timeout(600)
def test_orchestrator_heap_stays_bounded_with_200k_drivers_queued(sim_factory, tmp_path) -> None:
    sim = sim_factory(SimSettings(drivers=DRIVERS, seed=1))
    config = _config(sim.url)
    system = start_system(
        config, instance=f"mem-{uuid.uuid4().hex[:6]}", data_dir=str(tmp_path), autoscale=False
    )

    async def scenario() -> tuple[dict, dict, dict]:
        before = await system.orchestrator.call("stats")
        catalog, _ = make_catalog(config, system.instance)
        chunk, listed = [], 0
        async for summary in catalog.iter_drivers():
            chunk.append(change_of(config.stage_names, summary))
            listed += 1
            if len(chunk) == INTAKE_CHUNK:
                await system.orchestrator.call("intake", chunk, int(Lane.STALE))
                chunk = []
        if chunk:
            await system.orchestrator.call("intake", chunk, int(Lane.STALE))
        await catalog.aclose()
        full = await system.orchestrator.call("stats")
        await asyncio.sleep(10)  # the pools work on it meanwhile
        working = await system.orchestrator.call("stats")
        await stop_system(system)
        assert listed == DRIVERS
        return before, full, working

    before, full, working = asyncio.run(scenario())
    queued = sum(b["queued"] for b in full["backlog"].values())
    growth = full["memory"]["heap"] - before["memory"]["heap"]
    print(
        f"200k drivers: {queued} queued in {sum(b['segments'] for b in full['backlog'].values())}"
        f" object-store segments; orchestrator heap {before['memory']['heap'] / MIB:.0f} MiB"
        f" -> {full['memory']['heap'] / MIB:.0f} MiB (+{growth / MIB:.0f} MiB, "
        f"{growth / DRIVERS:.0f} B/driver; ledger columns {full['ledger_bytes'] / MIB:.0f} MiB);"
        f" while working {working['memory']['heap'] / MIB:.0f} MiB"
    )
    assert queued > 0.9 * DRIVERS * 0.7  # ~70% of the simulated drivers start in review
    assert growth < HEAP_BOUND_BYTES
    assert working["memory"]["heap"] - before["memory"]["heap"] < HEAP_BOUND_BYTES


def _config(url: str):
    data = load_config().model_dump()
    data["catalog"].update(url=url, page_size=1000)
    data["window"].update(high_water=DRIVERS + 10_000, batch_size=256)
    for stage in data["stages"]:
        stage["pool"].update(min_workers=1, max_workers=1)
    return parse_config(data, source="test")

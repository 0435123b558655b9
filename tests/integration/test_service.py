"""The always-on parts without Serve: the delta poller and the freshness loop."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import ray

from driver_review.ledger import Change, Status
from driver_review.runtime import actors
from driver_review.runtime.names import ActorRef, actor_name
from driver_review.runtime.system import start_system, stop_system
from driver_review.sim import SimSettings
from tests.support.configs import service_config

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


async def _until(predicate, timeout_s: float, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(every_s)


@pytest.mark.timeout(240)
def test_poller_alone_catches_every_change(sim_factory, tmp_path) -> None:
    """No pings at all: after one bootstrap listing, only changes-since keeps the pipeline
    current, and the catalog ends equal to its truth."""
    sim = sim_factory(SimSettings(drivers=150, seed=21))
    config = service_config(sim.url)
    system = start_system(
        config,
        instance=f"poll-{uuid.uuid4().hex[:6]}",
        data_dir=str(tmp_path),
        poll=True,
        poll_interval_s=1.0,
    )

    async def scenario() -> dict:
        await _until(lambda: system.poller.call("stats"), 30)
        for _ in range(20):  # bounded: 20 bursts of 10 changes while the pipeline runs
            for _ in range(10):
                sim.state.generate_change()
            await asyncio.sleep(0.2)

        async def converged() -> bool:
            done, total = sim.state.converged()
            return done == total

        ok = await _until(converged, 150)
        poller = await system.poller.call("stats")
        await stop_system(system)
        return {"ok": ok, "poller": poller}

    out = asyncio.run(scenario())
    done, total = sim.state.converged()
    stats = sim.state.stats.as_dict()
    print(
        f"poller: {out['poller']['polls']} polls, {out['poller']['changes_read']} changes read;"
        f" converged {done}/{total}; listings {stats['listing_scans']}"
    )
    assert out["ok"], f"only {done}/{total} drivers reached their true state"
    assert out["poller"]["bootstraps"] == 1
    assert stats["listing_scans"]["full"] == 1  # the bootstrap; everything after is deltas
    assert stats["listing_scans"]["changes"] >= 2


@pytest.mark.timeout(180)
def test_freshness_bound_holds(sim_factory, tmp_path) -> None:
    """With a 10 s freshness bound and 1 s windows, no driver's last review gets older than
    the bound plus one window, once every driver has been reviewed at all."""
    bound_s, window_s = 10.0, 1.0
    sim = sim_factory(SimSettings(drivers=120, seed=4))
    config = service_config(sim.url, freshness_s=bound_s)
    system = start_system(
        config,
        instance=f"fresh-{uuid.uuid4().hex[:6]}",
        data_dir=str(tmp_path),
        poll=True,
        poll_interval_s=window_s,
    )

    async def scenario() -> list[float]:
        async def all_reviewed_once() -> bool:  # drivers never reviewed start infinitely old
            stats = await system.orchestrator.call("stats")
            return stats["ledger"]["drivers"] > 0 and stats["oldest_review_age_s"] < bound_s

        assert await _until(all_reviewed_once, 60), "the outer loop never reached every driver"
        started = time.monotonic()
        ages = []
        while time.monotonic() - started < 3 * bound_s:  # bounded observation
            stats = await system.orchestrator.call("stats")
            ages.append(stats["oldest_review_age_s"])
            await asyncio.sleep(0.5)
        await stop_system(system)
        return ages

    ages = asyncio.run(scenario())
    print(
        f"oldest review age over {len(ages)} samples: max {max(ages):.2f}s "
        f"(bound {bound_s}s + window {window_s}s)"
    )
    assert max(ages) <= bound_s + window_s


@pytest.mark.timeout(120)
def test_a_poll_that_straddles_a_restart_does_not_move_the_watermark(tmp_path) -> None:
    """A poll reads the watermark from one orchestrator process and feeds it; if that
    process dies before a snapshot keeps what it was fed, the restarted one must not take
    the poll's advance, or the changes read would be lost."""
    config = service_config("http://127.0.0.1:9")  # the orchestrator alone calls no catalog
    instance = f"mark-{uuid.uuid4().hex[:6]}"
    handle = actors.orchestrator(config, instance, outer_loop=False, data_dir=str(tmp_path))
    orch = ActorRef(actor_name(instance, "orchestrator"))
    try:
        assert (
            orch.call_sync("advance_watermark", 100.0, orch.call_sync("watermark")[1]) == 100.0
        )  # bootstrap held
        mark, incarnation = orch.call_sync("watermark")
        orch.call_sync("intake", [Change("drv-1", "1.0.0.1", 0, Status.IN_REVIEW, 150.0)])
        ray.kill(handle, no_restart=False)  # before its next snapshot
        deadline = time.monotonic() + 60
        again_mark, again = mark, incarnation
        while again == incarnation and time.monotonic() < deadline:  # the kill is async
            time.sleep(0.1)
            again_mark, again = orch.call_sync("watermark")
        assert again != incarnation and again_mark == mark == 100.0
        assert orch.call_sync("advance_watermark", 150.0, incarnation) == 100.0
        assert orch.call_sync("stats")["stale_advances"] == 1
        assert orch.call_sync("advance_watermark", 150.0, again) == 150.0
    finally:
        ray.kill(handle, no_restart=True)

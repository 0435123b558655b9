"""A status call gives up on what does not answer within its timeout, and leaves nothing
behind that outlives it: asked of an instance that does not exist (a sweep has no
poller, a service not started yet has nothing), it returns in about the timeout. What
does exist answers at once from what it last saw, however busy its workers are."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from driver_review.config import load_config, parse_config
from driver_review.runtime.system import System, start_system, stop_system
from driver_review.sim import SimSettings
from driver_review.status import collect_status
from tests.support.actors import feed_catalog
from tests.support.wait import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.mark.timeout(60)
def test_status_of_missing_actors_returns_within_its_timeout() -> None:
    started = time.monotonic()
    doc = asyncio.run(
        collect_status(System.attach(load_config(), "no-such-instance"), timeout_s=1.0)
    )
    took_s = time.monotonic() - started
    print(f"status of a missing instance in {took_s:.1f}s: unavailable {doc['unavailable']}")
    assert not doc["ok"] and set(doc["unavailable"]) >= {"orchestrator", "governor", "cache"}
    # No pool answered, yet the document names the stages in their configured order
    # (the live page draws them from it).
    assert doc["pools"] == {} and doc["stages"] == load_config().stage_names
    assert took_s < 10.0  # the actor lookup's own timeout is 60 s


@pytest.mark.timeout(120)
def test_a_worker_blocked_by_a_synchronous_check_holds_up_neither_status_nor_its_pool(
    sim_factory, tmp_path
) -> None:
    """A synchronous check blocks its worker's event loop for 12 s (as a user's check doing
    blocking I/O would): the worker answers nothing meanwhile. Its pool answers status at
    once, so the stage is neither missing nor reported unavailable; its tick goes on,
    counting the silent worker busy, so with a backlog queued behind it the pool grows."""
    sim = sim_factory(SimSettings(drivers=8, seed=3))
    marker = tmp_path / "blocked"
    data = load_config().model_dump()
    data["catalog"]["url"] = sim.url
    data["checks"]["blocking"] = {
        "kind": "python",
        "target": "tests.integration.slow_checks:blocking",
        "options": {"delay_s": 12.0, "once": str(marker)},
    }
    for spec in data["stages"]:
        if spec["name"] == "intake":
            spec["checks"].append("blocking")
            spec["pool"].update(min_workers=1, max_workers=2, max_in_flight=1)
    config = parse_config(data, source="test")
    system = start_system(config, instance=f"t-{uuid.uuid4().hex[:6]}", data_dir=str(tmp_path))

    async def scenario() -> tuple[list[dict], int]:
        await feed_catalog(system)
        # The check makes this file just before it blocks the worker's loop.
        await asyncio.to_thread(
            wait_until, marker.exists, 30.0, "the blocking check to start", every_s=0.05
        )
        docs, unanswered = [], 0
        for _ in range(4):
            docs.append(await collect_status(system, timeout_s=1.0))
            try:  # the pool asking its workers now: held up by the blocked loop
                await asyncio.wait_for(system.pools["intake"].stats(), timeout=0.5)
            except TimeoutError:
                unanswered += 1
        while len(docs) < 12 and docs[-1]["pools"]["intake"]["workers"] < 2:
            await asyncio.sleep(0.5)
            docs.append(await collect_status(system, timeout_s=1.0))
        await stop_system(system, drain_timeout_s=1.0)
        return docs, unanswered

    docs, unanswered = asyncio.run(scenario())
    pools = [d["pools"].get("intake") or {} for d in docs]
    print(
        f"intake workers {[p.get('workers') for p in pools]}, figures aged "
        f"{[round(p['stats_age_s'], 1) for p in pools if p.get('stats_age_s') is not None]}; "
        f"unavailable {[d['unavailable'] for d in docs if d['unavailable']]}"
    )
    assert unanswered == 4, f"the blocked worker answered {4 - unanswered} times"
    for doc, pool in zip(docs, pools, strict=True):
        assert "pool/intake" not in doc["unavailable"], doc["unavailable"]
        assert pool["workers"] >= 1 and pool["stats_age_s"] is not None
    assert pools[-1]["workers"] == 2, "the pool did not grow behind its blocked worker"
    # The silent worker is named as such once the pool's tick has given up waiting on it.
    assert any(pool["not_answering"] == 1 for pool in pools), "no worker shown not answering"

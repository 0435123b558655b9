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
def test_a_worker_blocked_by_a_synchronous_check_does_not_hold_up_status(
    sim_factory, tmp_path
) -> None:
    """A synchronous check blocks its worker's event loop for 12 s (as a user's check doing
    blocking I/O would): the worker answers nothing meanwhile, but its pool answers status
    from its last look at it, so the stage is neither missing nor reported unavailable,
    and says how old its figures are."""
    sim = sim_factory(SimSettings(drivers=6, seed=3))
    data = load_config().model_dump()
    data["catalog"]["url"] = sim.url
    data["checks"]["blocking"] = {
        "kind": "python",
        "target": "tests.integration.slow_checks:blocking",
        "options": {"delay_s": 12.0, "times": 1},
    }
    for spec in data["stages"]:
        if spec["name"] == "intake":
            spec["checks"].append("blocking")
            spec["pool"].update(min_workers=1, max_workers=1, max_in_flight=1)
    config = parse_config(data, source="test")
    system = start_system(
        config, instance=f"t-{uuid.uuid4().hex[:6]}", data_dir=str(tmp_path), autoscale=False
    )

    async def scenario() -> tuple[list[dict], int]:
        await feed_catalog(system)
        await asyncio.sleep(2.5)  # the worker is on its first driver by now
        docs, unanswered = [], 0
        for _ in range(4):
            docs.append(await collect_status(system, timeout_s=1.0))
            try:  # the pool asking its worker now: held up by the blocked loop
                await asyncio.wait_for(system.pools["intake"].stats(), timeout=0.5)
            except TimeoutError:
                unanswered += 1
        await stop_system(system, drain_timeout_s=1.0)
        return docs, unanswered

    docs, unanswered = asyncio.run(scenario())
    ages = [(d["pools"].get("intake") or {}).get("stats_age_s") for d in docs]
    print(f"intake pool figures aged {ages}; unavailable {[d['unavailable'] for d in docs]}")
    assert unanswered == len(docs), f"the worker answered {len(docs) - unanswered} times"
    for doc in docs:
        assert "pool/intake" not in doc["unavailable"], doc["unavailable"]
        assert doc["pools"]["intake"]["workers"] == 1
    assert all(age is not None for age in ages)

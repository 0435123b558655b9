"""A restarted stage pool counts its worker names from 1 again while workers of the process
that died (owned by it, dying with it) may still hold those names: it skips them."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import ray

from driver_review.config import load_config
from driver_review.runtime.names import NAMESPACE, actor_name
from driver_review.runtime.system import start_system, stop_system

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@ray.remote(num_cpus=0)
class _Holder:
    """Holds a name, as a dying pool's worker does until Ray has reaped it."""

    def stats(self) -> dict:
        return {}


@pytest.mark.timeout(180)
def test_a_restarted_pool_skips_worker_names_still_taken(sim_factory, tmp_path) -> None:
    sim = sim_factory(drivers=5, seed=1)
    config = load_config().with_overrides(catalog={"url": sim.url})
    instance = f"names-{uuid.uuid4().hex[:6]}"
    holder = _Holder.options(
        name=actor_name(instance, "worker", "intake", "1"), namespace=NAMESPACE
    ).remote()
    ray.get(holder.stats.remote())
    system = start_system(config, instance=instance, data_dir=str(tmp_path), outer_loop=False)
    pool = system.pools["intake"]
    try:
        before = set(pool.call_sync("stats")["worker_stats"])
        assert before and actor_name(instance, "worker", "intake", "1") not in before
        # Ray restarts the pool: only its constructor starts it, and name 1 is still taken.
        ray.kill(ray.get_actor(pool.name, namespace=NAMESPACE), no_restart=False)
        deadline = time.monotonic() + 60
        workers: list[str] = []
        while time.monotonic() < deadline and not workers:
            time.sleep(0.5)
            try:
                workers = list(pool.call_sync("stats")["worker_stats"])
            except Exception:  # restarting
                continue
        assert workers, "the restarted pool started no worker"
    finally:
        asyncio.run(stop_system(system))
        ray.kill(holder)

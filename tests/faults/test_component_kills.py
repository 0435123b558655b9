"""Workers, cache and governor killed at random during a live run: nothing is lost.
And a catalog that fails a fifth of all calls: no wrong verdict, everything converges."""

from __future__ import annotations

import random
import time

import httpx
import pytest
import ray

from driver_review.config import load_config
from driver_review.results import read_results
from driver_review.runtime.names import NAMESPACE
from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from tests.support.live import converged, diverged, start_live
from tests.support.wait import poll_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def _victims(live, rng: random.Random) -> str:
    """A random live worker, or the cache, or the governor."""
    names = [live.system.cache.name, live.system.governor.name]
    for stage in live.config.stage_names:
        names += list(live.system.pools[stage].call_sync("stats")["worker_stats"])
    return rng.choice(names)


@pytest.mark.timeout(600)
def test_random_worker_cache_and_governor_kills_lose_nothing(
    sim_factory, tmp_path, serve_cleanup
) -> None:
    live = start_live(sim_factory, str(tmp_path), drivers=400, update_rate=25.0, seed=12)
    rng = random.Random(12)
    killed: list[str] = []
    poll_until(lambda: live.stats()["webhooks"].get("delivered", 0) > 0, 60)
    for _ in range(12):  # bounded: twelve kills, 1-3 s apart
        time.sleep(rng.uniform(1.0, 3.0))
        name = _victims(live, rng)
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=False)
            killed.append(name.split("/")[1])
        except ValueError:  # a worker the pool just retired
            continue
    httpx.post(f"{live.sim.url}/_sim/pause", timeout=10)
    ok = poll_until(lambda: converged(live.sim), 240)
    stats = live.stats()
    wrong = [] if ok else diverged(live.sim, live.system.orchestrator)
    live.stop()
    done, total = live.sim.state.converged()
    dup = stats["duplicate_decisions"] / max(stats["decisions"], 1)
    print(
        f"killed {len(killed)}: {sorted(set(killed))} ({killed.count('worker')} workers); "
        f"converged {done}/{total}; duplicates {dup:.2%} of {stats['decisions']}"
    )
    assert ok, f"only {done}/{total} drivers reached their true state: {wrong}"
    assert {"cache", "governor", "worker"} & set(killed)
    assert dup < 0.05


@pytest.mark.timeout(600)
def test_a_catalog_failing_a_fifth_of_calls_gives_no_wrong_verdict(sim_factory, tmp_path) -> None:
    sim = sim_factory(SimSettings(drivers=200, seed=31, fault_rate=0.2, fault_timeout_s=2.0))
    config = load_config().with_overrides(
        catalog={"url": sim.url, "timeout_s": 1.0, "max_attempts": 6},
        window={"lease_s": 30.0, "batch_size": 16},
        results={"rollover_s": 1.0},
    )
    summary = run_sweep(config, SweepOptions(data_dir=str(tmp_path), timeout_s=500))
    stats = sim.state.stats.as_dict()
    done, total = sim.state.converged()
    truth = sim.state.truth()
    rows = read_results(str(tmp_path)).to_pylist()
    # A rejection must name the check the truth names, at the stage the truth names.
    wrong = [
        r
        for r in rows
        if r["verdict"] == "rejected"
        and (
            truth[r["driver_id"]]["version"] == r["version"]
            and (truth[r["driver_id"]]["stage"], truth[r["driver_id"]]["check"])
            != (r["stage"], next(iter(dict(r["reasons"]))))
        )
    ]
    errors = sum(1 for r in rows if r["verdict"] == "error")
    print(
        f"faults {stats['faults']}; converged {done}/{total}; {errors} error rows retried; "
        f"decisions {summary['decisions']}; wall {summary['wall_s']}s"
    )
    assert not summary["timed_out"]
    assert done == total
    assert wrong == []
    assert sum(stats["faults"].values()) > 100

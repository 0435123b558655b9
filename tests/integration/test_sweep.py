"""The batch sweep end to end: real local Ray, the simulated catalog on loopback."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest
import ray

from driver_review.results import read_results
from driver_review.runtime.names import NAMESPACE
from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from tests.support.configs import sweep_config
from tests.support.truth import off_truth

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.mark.timeout(600)
def test_sweep_of_2000_drivers_at_an_undisclosed_rate_limit(sim_factory, tmp_path) -> None:
    sim = sim_factory(SimSettings(drivers=2000, seed=7, rate_limit=200))
    data_dir = str(tmp_path / "data")
    summary = run_sweep(sweep_config(sim.url), SweepOptions(data_dir=data_dir, timeout_s=500))
    print(
        "sweep summary:",
        {k: summary[k] for k in ("wall_s", "achieved_rps", "rate_limited_share", "decisions")},
    )
    assert not summary["timed_out"]

    total, wrong = off_truth(sim.url)
    assert total == 2000 and wrong == [], f"{len(wrong)} drivers differ from truth: {wrong[:5]}"

    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()
    requests = sum(sum(by.values()) for by in stats["requests"].values())
    assert stats["rate_limited"] / requests <= 0.02, stats["rate_limited"]
    assert stats["max_fetches_per_version"] <= 1

    results = read_results(data_dir)
    decided = (
        results.filter(results.column("verdict").to_numpy(zero_copy_only=False) != "confirmed")
        .select(["driver_id", "version", "stage", "verdict"])
        .to_pylist()
    )
    keys = [
        (r["driver_id"], r["version"], r["stage"])
        for r in decided
        if r["verdict"] in ("approved", "rejected")
    ]
    assert len(keys) == len(set(keys)), "more than one decision row per (driver, version, stage)"
    assert len(keys) == stats["decisions"] - stats["duplicate_decisions"]


@pytest.mark.timeout(300)
def test_sweep_trusts_no_quiescence_from_a_restarted_orchestrator(sim_factory, tmp_path) -> None:
    """The orchestrator killed once mid-sweep (Ray restarts it, empty): the sweep sees the
    new incarnation, feeds it the catalog again, and ends only at the catalog's truth."""
    sim = sim_factory(SimSettings(drivers=150, seed=8, rate_limit=40))
    instance = f"sweep-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    sweep = threading.Thread(
        target=lambda: out.update(
            run_sweep(
                sweep_config(sim.url),
                SweepOptions(data_dir=str(tmp_path), instance=instance, timeout_s=240),
            )
        )
    )
    sweep.start()
    deadline = time.monotonic() + 120
    while sim.state.stats.as_dict()["decisions"] < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sweep.is_alive(), "the sweep ended before the kill"
    ray.kill(ray.get_actor(f"{instance}/orchestrator", namespace=NAMESPACE), no_restart=False)
    sweep.join(timeout=280)
    total, wrong = off_truth(sim.url)
    assert wrong == [], f"{len(wrong)} of {total} drivers differ from truth: {wrong[:5]}"
    assert out["ok"] and out["unresolved"] == 0 and out["reason"] is None
    assert out["orchestrator_restarts"] == 1 and out["listings"] >= 3

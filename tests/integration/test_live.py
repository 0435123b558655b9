"""The live service end to end: real Serve, the simulator sending real signed pings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import ray

from tests.support.live import converged, diverged, start_live
from tests.support.wait import poll_until, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.mark.timeout(400)
def test_dropped_pings_are_caught_by_the_poller(sim_factory, tmp_path, serve_cleanup) -> None:
    live = start_live(
        sim_factory, str(tmp_path), drivers=150, update_rate=8.0, seed=5, webhook_drop_rate=0.3
    )
    time.sleep(10)  # bounded: ten seconds of updates, a third of their pings lost
    httpx.post(f"{live.sim.url}/_sim/pause", timeout=10)
    ok = poll_until(lambda: converged(live.sim), 180)
    stats = live.stats()
    wrong = [] if ok else diverged(live.sim, live.system.orchestrator)
    live.stop()
    done, total = live.sim.state.converged()
    print(
        f"pings {stats['webhooks']}; {stats['changes_generated']} changes; converged {done}/{total}"
    )
    assert stats["webhooks"]["dropped"] > 10
    assert ok, f"only {done}/{total} drivers reached their true state: {wrong}"


@pytest.mark.timeout(400)
def test_a_burst_beyond_intake_is_refused_retried_and_reviewed(
    sim_factory, tmp_path, serve_cleanup
) -> None:
    live = start_live(
        sim_factory,
        str(tmp_path),
        drivers=100,
        update_rate=0.0,
        seed=6,
        burst_every_s=4.0,
        burst_size=100,
        window={"high_water": 30},
    )
    time.sleep(8)  # bounded: a few bursts of 100 pings against room for 30
    httpx.post(f"{live.sim.url}/_sim/pause", timeout=10)
    ok = poll_until(lambda: converged(live.sim), 240)
    stats = live.stats()
    status = live.system.orchestrator.call_sync("stats")
    wrong = [] if ok else diverged(live.sim, live.system.orchestrator)
    live.stop()
    done, total = live.sim.state.converged()
    print(
        f"pings {stats['webhooks']}; intake refused {status['counters']['refused']} events; "
        f"converged {done}/{total}; orchestrator heap {status['memory'].get('heap', 0) >> 20}"
        f" MiB"
    )
    assert status["counters"]["refused"] > 0 or stats["webhooks"]["rate_limited"] > 0
    assert ok, f"only {done}/{total} drivers reached their true state: {wrong}"


@pytest.mark.timeout(300)
def test_status_from_a_separate_process(sim_factory, tmp_path, serve_cleanup) -> None:
    live = start_live(sim_factory, str(tmp_path), drivers=50, update_rate=2.0, seed=7)
    # The whole first listing, not a part of it: status is read once, from elsewhere.
    wait_until(
        lambda: live.system.orchestrator.call_sync("stats")["ledger"]["drivers"] >= 50,
        60,
        "all 50 drivers of the first listing in the ledger",
    )
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    cli = [sys.executable, "-m", "driver_review", "status", "--instance", live.system.instance]
    as_json = subprocess.run([*cli, "--json"], env=env, capture_output=True, text=True, timeout=120)
    table = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    live.stop()
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    status = json.loads(as_json.stdout.strip().splitlines()[-1])
    assert status["instance"] == live.system.instance
    assert status["ledger"]["drivers"] >= 50
    assert set(status["pools"]) == {"intake", "security", "compatibility"}
    assert table.returncode == 0 and "intake" in table.stdout and "governor" in table.stdout

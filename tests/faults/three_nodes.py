"""A three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``); the node that
holds the orchestrator, and workers, is removed mid-run. Run as a script by
test_node_loss.py (a process can join only one cluster, and pytest's is the session's).
Prints one JSON line with what it measured."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time

import httpx
import ray
from ray.cluster_utils import Cluster

from driver_review.config import load_config, parse_config
from driver_review.runtime.names import NAMESPACE
from driver_review.sim import SimServer, SimSettings

# Orchestrator and governor go where this resource is: both worker nodes have it, the
# head does not, so removing one of them moves the orchestrator to the other.
os.environ["DRIVER_REVIEW_HEAD_RESOURCE"] = "orchestration"
# Three nodes on one loaded machine can take longer than Ray's default to start agents.
os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")


def main() -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = [cluster.add_node(num_cpus=1, resources={"orchestration": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    from driver_review.runtime.system import start_system, stop_system

    data_dir = tempfile.mkdtemp(prefix="three-nodes-")
    with SimServer(SimSettings(drivers=300, seed=17, update_rate=15.0)).start() as sim:
        data = load_config().model_dump()
        data["catalog"]["url"] = sim.url
        data["window"].update(
            bucket_s=1.0, lease_s=10.0, batch_size=16, snapshot_s=1.0, skew_overlap_s=2.0
        )
        for stage in data["stages"]:
            stage["pool"].update(min_workers=2)
        config = parse_config(data, source="three-nodes")
        system = start_system(
            config, instance="three", data_dir=data_dir, poll=True, poll_interval_s=1.0
        )
        time.sleep(8)  # mid-run: bootstrap done, changes flowing
        orch = system.orchestrator.call_sync("stats")
        orch_node = orch["node_id"]
        victim = next(n for n in nodes if n.node_id == orch_node)
        workers_there = _workers_on(system, orch_node)
        removed_at = time.monotonic()
        cluster.remove_node(victim, allow_graceful=False)
        back_by = removed_at + 120
        again = orch
        while again["started_at"] == orch["started_at"]:  # back on the other node
            if time.monotonic() > back_by:
                raise SystemExit("the orchestrator did not come back within 120 s")
            time.sleep(0.1)
            with contextlib.suppress(Exception):  # still restarting
                again = system.orchestrator.call_sync("stats")
        resumed_s = time.monotonic() - removed_at
        new_node = again["node_id"]
        time.sleep(5)
        httpx.post(f"{sim.url}/_sim/pause", timeout=10)
        deadline = time.monotonic() + 240
        done, total = sim.state.converged()
        while done < total and time.monotonic() < deadline:
            time.sleep(1)
            done, total = sim.state.converged()
        asyncio.run(stop_system(system))
        stats = sim.state.stats.as_dict()
    ray.shutdown()
    cluster.shutdown()
    return {
        "converged": done,
        "drivers": total,
        "orchestrator_node_before": orch_node,
        "orchestrator_node_after": new_node,
        "workers_on_removed_node": workers_there,
        "resumed_s": round(resumed_s, 2),
        "full_listings": stats["listing_scans"]["full"],
        "duplicates": stats["duplicate_decisions"],
        "decisions": stats["decisions"],
    }


def _workers_on(system, node_id: str) -> int:
    """Stage workers alive on a node, as their pools report them."""
    return sum(
        1
        for pool in system.pools.values()
        for stats in pool.call_sync("stats")["worker_stats"].values()
        if stats["node_id"] == node_id
    )


if __name__ == "__main__":
    print(json.dumps(main()))
    sys.stdout.flush()

"""One driver-review sweep on a Ray cluster of N nodes on this machine, in a process of
its own: ``python -m jobs.bench.two_node --catalog-url URL --nodes N``.

The ceiling scenario's scale-out part. The benchmark's own process is already connected
to its local Ray, so the cluster is made here, in a child process, with Ray's
``ray.cluster_utils.Cluster`` (a head and N-1 more nodes, each a real raylet on
loopback, as ``ray start --address`` would add), and torn down before it exits. The
simulator stays in the benchmark's process, so its call log times the sweep. The last
line of stdout is the sweep's JSON summary.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

CPUS_PER_NODE = 2
OBJECT_STORE_BYTES = 256 * 1024 * 1024
TIMEOUT_S = 600.0


def run_in_subprocess(url: str, nodes: int, timeout_s: float = TIMEOUT_S + 120) -> dict[str, Any]:
    """The sweep's figures from a child process (raises with its stderr when it fails)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS",))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.bench.two_node", "--catalog-url", url, "--nodes", str(nodes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{nodes}-node sweep exited {proc.returncode}: {' '.join(proc.stderr.split())[-300:]}"
        )
    summary = json.loads(lines[-1])
    detail: dict[str, Any] = {"nodes": nodes, "peak_workers": summary["peak_workers"]}
    if not summary["ok"]:
        detail["unfinished"] = int(summary["unresolved"] or 1)
        detail["reason"] = summary["reason"]
    return detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.two_node")
    parser.add_argument("--catalog-url", required=True)
    parser.add_argument("--nodes", type=int, choices=(1, 2, 3, 4), default=2)
    args = parser.parse_args(argv)

    import ray
    from ray.cluster_utils import Cluster

    from driver_review.runtime.names import NAMESPACE
    from driver_review.sweep import Progress, SweepOptions, run_sweep
    from jobs.bench.common import pipeline_config

    node = {"num_cpus": CPUS_PER_NODE, "object_store_memory": OBJECT_STORE_BYTES}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        for _ in range(args.nodes - 1):
            cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
        with tempfile.TemporaryDirectory(prefix="driver-review-two-node-") as data_dir:
            summary = run_sweep(
                pipeline_config(args.catalog_url),
                SweepOptions(data_dir=data_dir, timeout_s=TIMEOUT_S),
                Progress(out=io.StringIO()),
            )
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

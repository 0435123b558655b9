"""Removing the node that holds the orchestrator and workers mid-run loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_node_with_orchestrator_and_workers_removed_mid_run() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.faults.three_nodes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=560,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print("three nodes:", result)
    assert result["converged"] == result["drivers"]
    assert result["orchestrator_node_after"] not in ("", result["orchestrator_node_before"])
    assert result["workers_on_removed_node"] >= 1
    assert result["full_listings"] == 1

"""The benchmark's quick run, end to end, as a user runs it: ``python -m jobs.bench --quick
--out DIR`` in a subprocess (its own local Ray, simulators on loopback).

What is checked is the shape of what it reports, not the figures themselves (a shared
2-core CI machine makes those noisy): every scenario is there with numbers and a
``targets`` section, and a figure is missing only where a peer did not finish, which it
must then say.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.bench import SCENARIOS

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 840.0


def _env() -> dict[str, str]:
    """This environment without what would point the run at another Ray cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "PYTEST_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, value)]


def _excused(path: str, doc: dict) -> bool:
    """A missing figure is allowed only in a peer's grid run that says why it does not
    count (``error``), and in a scenario part that says it was skipped."""
    peers = doc["scenarios"]["peers"]["peers"]
    for name, peer in peers.items():
        for i, point in enumerate(peer.get("grid", [])):
            if point.get("error") and path.startswith(f".scenarios.peers.peers.{name}.grid[{i}]."):
                return True
    return ".skipped" in path


@pytest.mark.timeout(900)
def test_quick_benchmark_reports_every_scenario_with_numbers(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "jobs.bench", "--quick", "--out", str(out)],
            cwd=REPO,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"the quick benchmark ran over {RUN_TIMEOUT_S:.0f}s: {str(exc.stderr or '')[-3000:]}"
        )
    print(proc.stdout)
    context = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    )
    assert proc.returncode == 0, context

    doc = json.loads((out / "bench.json").read_text())
    assert list(doc["scenarios"]) == list(SCENARIOS), context
    machine = doc["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["ray"]
    assert len(machine["load_average_start"]) == 3 and len(machine["load_average_end"]) == 3
    assert doc["bench"]["quick"] is True and doc["settings"]["ledger_sizes"] == [50_000, 200_000]

    for name, result in doc["scenarios"].items():
        assert "error" not in result, f"{name}: {result.get('error')}"
        assert result["targets"], f"{name} has no targets"
        for key, t in result["targets"].items():
            assert isinstance(t["met"], bool) and t["target"], (name, key, t)

    missing = [
        path
        for path, v in _leaves(doc["scenarios"], ".scenarios")
        if v is None or (isinstance(v, float) and math.isnan(v))
    ]
    unexcused = [p for p in missing if not _excused(p, doc)]
    assert not unexcused, f"figures without a value: {unexcused[:20]}"
    # Every peer reaches the truth at some grid setting; one that does not is an error of
    # the run (exit 1 above), never a result.
    for name, peer in doc["scenarios"]["peers"]["peers"].items():
        assert (
            "error" not in peer and peer["best"]["converged_drivers"] == peer["best"]["drivers"]
        ), (name, peer.get("error"))

    # A few figures that must be there as numbers whatever the machine.
    sc = doc["scenarios"]
    assert sc["utilization"]["runs"]["no_headers"]["utilization_ratio"] > 0
    assert sc["cache"]["changed_versions"] >= 1
    assert sc["latency"]["intake_decision"]["n"] > 0
    assert {"plain", "serve_noop", "ingress", "ingress_httpx"} <= set(
        sc["ingress"]["accepted_per_s"]
    )
    assert sc["ingress"]["targets"]["held_to_accepted_ratio"]["met"], sc["ingress"]["targets"]
    assert set(sc["ledger"]["sizes"]) == {"50000", "200000"}
    assert sc["isolation"]["throughput_ratio"]["intake"] > 0

    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "bench.png").stat().st_size > 10_000
    else:
        assert "matplotlib is not installed" in proc.stdout

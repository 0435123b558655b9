"""``driver-review demo`` (what ``make demo`` runs), end to end as a user runs it, at a small
size: its own local Ray, the simulated catalog on loopback, the service with its Serve
ingress, the live view, the catch-up and the check against the simulator's truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 420.0  # start-up, 5 s of updates, up to the demo's own 120-s catch-up, stop


@pytest.mark.timeout(480)
def test_demo_runs_and_ends_at_the_catalogs_truth(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_ADDRESS", "PYTEST_", "DRIVER_REVIEW_WEBHOOK_SECRET"))
    }
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    data_dir = tmp_path / "demo"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "driver_review",
                "demo",
                "--duration",
                "5",
                "--drivers",
                "150",
                "--data-dir",
                str(data_dir),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the demo ran over {RUN_TIMEOUT_S:.0f}s: {str(exc.stdout or '')[-3000:]}")
    print(proc.stdout[-2000:])
    context = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, context
    truth = re.search(
        r"final state equals the simulator's truth for (\d+)/(\d+) drivers", proc.stdout
    )
    assert truth and truth[1] == truth[2] and int(truth[2]) >= 150, context
    assert "the governor must find the rate" in proc.stdout, context  # the tour's 429
    assert re.search(r"live pipeline page: http://127\.0\.0\.1:\d+/ui\s", proc.stdout), context
    rows = re.search(r"results: (\d+) rows of Parquet", proc.stdout)
    assert rows and int(rows[1]) > 0, context
    assert any((data_dir / "reviews").rglob("*.parquet")), context
    # The secret is generated for the run and never printed.
    assert "whsec_" not in proc.stdout + proc.stderr, context

"""``driver-review demo`` (what ``make demo`` runs), end to end as a user runs it, at a small
size: its own local Ray, the simulated catalog on loopback, the service with its Serve
ingress, the live view, the catch-up and the check against the simulator's truth, in a
data dir that holds an earlier demo's decisions too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver_review.results import ResultWriter
from tests.support.results import result_row

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 420.0  # start-up, 5 s of updates, up to the demo's own 120-s catch-up, stop


EARLIER_ROWS = 3


@pytest.mark.timeout(480)
def test_demo_runs_and_ends_at_the_catalogs_truth(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_ADDRESS", "PYTEST_", "DRIVER_REVIEW_WEBHOOK_SECRET"))
    }
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    data_dir = tmp_path / "demo"
    # An earlier demo's decisions in the same data dir: the summary tells them apart.
    a_day_ago = time.time() - 86_400
    earlier = ResultWriter(str(data_dir), name="earlier", rollover_rows=10, rollover_s=60)
    earlier.add(
        [result_row(f"drv-earlier-{i}", a_day_ago, worker="earlier") for i in range(EARLIER_ROWS)]
    )
    earlier.flush()
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
    rows = re.search(
        r"results: (\d+) rows of Parquet from this run \(beside (\d+) from earlier runs\)",
        proc.stdout,
    )
    assert rows and int(rows[1]) > 0 and int(rows[2]) == EARLIER_ROWS, context
    # Its output is not a terminal: each progress line names every stage, in order.
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert progress and all(
        re.search(r"\| intake \d+ queued, .*; security \d+ queued, .*; compatibility \d+", line)
        for line in progress
    ), context
    assert progress[-1].startswith("[done"), context
    assert any((data_dir / "reviews").rglob("*.parquet")), context
    # The secret is generated for the run and never printed.
    assert "whsec_" not in proc.stdout + proc.stderr, context

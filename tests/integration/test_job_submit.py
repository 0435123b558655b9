"""The sweep as a Ray job: a real ``ray start --head`` cluster of its own on this machine,
the real job CLI (``ray job submit -- python -m jobs.sweep …``), the simulated catalog in
this process on loopback.

Independent of the session's ``ray_session``: a different cluster, reached only through
subprocesses with an explicit environment.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import httpx
import pytest
from cluster import RAY, REPO, ray_head  # ./cluster.py; pytest puts this dir on sys.path

from driver_review.results import read_results
from driver_review.sim import SimSettings

pytestmark = [pytest.mark.ray]

DRIVERS = 300
JOB_TIMEOUT_S = 150.0


def _last_json(lines: list[str]) -> tuple[int, dict]:
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith("{"):
            try:
                return i, json.loads(line)
            except ValueError:
                continue
    raise AssertionError("no JSON line in the job's output")


def _text(out: str | bytes | None) -> str:
    # subprocess.TimeoutExpired carries bytes even when run with text=True
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _state_vs_truth(url: str) -> tuple[int, list[str]]:
    truth = httpx.get(f"{url}/_sim/truth", timeout=30).json()["drivers"]
    state = httpx.get(f"{url}/_sim/state", timeout=30).json()["drivers"]
    wrong = [
        d for d, t in truth.items()
        if (state[d]["status"], state[d]["stage"]) != (t["status"], t["stage"])
    ]
    return len(truth), wrong


@pytest.mark.timeout(300)
def test_sweep_runs_as_a_ray_job_on_a_started_cluster(sim_factory, tmp_path) -> None:
    sim = sim_factory(SimSettings(drivers=DRIVERS, seed=3, rate_limit=100))
    data_dir = tmp_path / "data"
    submission_id = f"sweep-test-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    with ray_head(num_cpus=2) as cluster:
        t_ready = time.monotonic()
        cmd = [
            RAY, "job", "submit", "--address", cluster.dashboard_url,
            "--submission-id", submission_id, "--",
            "python", "-m", "jobs.sweep", "--catalog-url", sim.url,
            "--data-dir", str(data_dir), "--json", "--timeout-s", str(JOB_TIMEOUT_S - 30),
        ]
        try:
            submit = subprocess.run(cmd, cwd=REPO, env=cluster.client_env(), text=True,
                                    capture_output=True, timeout=JOB_TIMEOUT_S,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"ray job submit still running after {JOB_TIMEOUT_S}s:\n"
                        f"{_text(exc.stdout)[-3000:]}\n{_text(exc.stderr)[-3000:]}\n"
                        f"head log:\n{cluster.log_tail()}")
        t_done = time.monotonic()
        job = cluster.get(f"/api/jobs/{submission_id}").json()
        logs = cluster.get(f"/api/jobs/{submission_id}/logs").json()["logs"]
        context = (f"ray job submit exited {submit.returncode}\nstdout:\n{submit.stdout[-3000:]}"
                   f"\nstderr:\n{submit.stderr[-3000:]}\njob: {job}\nlogs:\n{logs[-4000:]}")
        assert job["status"] == "SUCCEEDED", context
        assert submit.returncode == 0, context

    # The job's own output: human summary, then the JSON summary as the last line.
    lines = logs.splitlines()
    at, summary = _last_json(lines)
    print(f"\njob submit: cluster ready in {t_ready - t0:.1f}s, job in {t_done - t_ready:.1f}s "
          f"(sweep {summary['wall_s']:.1f}s, {summary['external_calls_total']} calls, "
          f"429s {summary['rate_limited_share']:.1%}), teardown {time.monotonic() - t_done:.1f}s")
    assert all(not line.strip() for line in lines[at + 1:]), lines[at + 1:]
    # Right before it, the human summary: "sweep <instance>: N drivers in …" and its indented
    # lines (progress lines, "sweep: …", go to stderr earlier on).
    head = max((i for i in range(at) if lines[i].startswith("sweep ")), default=None)
    assert head is not None, lines[-20:]
    human = lines[head:at]
    assert human[0].startswith(f"sweep {summary['instance']}: {DRIVERS} drivers in "), human
    assert len(human) > 1 and all(line.startswith("  ") for line in human[1:]), human
    assert [line.split(":")[0].strip() for line in human[1:3]] == ["decisions", "final"], human
    # The same summary also came back through the CLI's log tail.
    assert json.dumps(summary, sort_keys=True) in submit.stdout + submit.stderr

    assert summary["drivers"] == DRIVERS
    assert not summary["timed_out"]
    assert summary["unresolved"] == 0
    assert summary["decisions"] and sum(summary["decisions"].values()) > 0, summary["decisions"]
    assert summary["data_dir"] == str(data_dir)
    assert summary["instance"].startswith("sweep-")
    assert sum(summary["final_states"].values()) == DRIVERS, summary["final_states"]

    total, wrong = _state_vs_truth(sim.url)
    assert total == DRIVERS and wrong == [], f"{len(wrong)} drivers differ from truth: {wrong[:5]}"
    assert read_results(str(data_dir)).num_rows > 0

"""Running on a real Ray cluster: the deployment files, and a two-node cluster on this
machine.

- **Cluster launcher** (``cluster.yaml``): valid for Ray's own validator (the JSON schema
  shipped in the ray package), with the head resource, spilling and the service wired.
- **KubeRay** (``deploy/kuberay/``): the fields KubeRay needs, the Serve config embedded
  in the RayService builds with :class:`serve_app.app.IngressArgs`, the RayJob runs the
  sweep with flags the CLI accepts.
- **Two nodes on one machine**: ``ray start --head`` with the ``driver_review_head``
  resource plus ``ray start --address`` (see ``cluster.py``), ``driver-review serve`` and
  a sweep submitted with ``ray job submit`` (its output: the human summary, then the JSON
  one as the last line; the catalog ends at its truth): stage workers land on both nodes,
  the orchestrator and governor on the head; SIGINT stops the service in order.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from driver_review.cli import build_parser
from driver_review.config import load_config
from driver_review.results import read_results
from driver_review.sim import SimSettings
from serve_app.app import IngressArgs
from tests.support.cluster import RAY, REPO, VENV_BIN, Cluster, ray_head, ray_worker
from tests.support.net import free_ports
from tests.support.wait import wait_until

HEAD_RESOURCE = "driver_review_head"
HEAD_ENV = "DRIVER_REVIEW_HEAD_RESOURCE"
SECRET_ENV = "DRIVER_REVIEW_WEBHOOK_SECRET"
KUBERAY = REPO / "deploy" / "kuberay"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


_REDIRECTION = re.compile(r"(?<=\s)\d*(?:>>|>&|<&|&>|>|<)\s*[^\s;&|]+")


def _shell_words(command: str) -> list[list[str]]:
    """A shell command line as its simple commands (split on ``; && || & |``), each as a
    list of words, redirections (``> f``, ``2>&1``, ``< f``) left out. Enough to read the
    one-liners of a launcher config the way the shell will."""
    lexer = shlex.shlex(_REDIRECTION.sub(" ", command), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in {";", "&&", "||", "&", "|"}:
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _after(words: list[str], *prefix: str) -> list[str] | None:
    """The words after ``prefix`` when the command starts with it (skipping nohup/env)."""
    while words and (words[0] in {"nohup", "exec"} or "=" in words[0]):
        words = words[1:]
    n = len(prefix)
    return words[n:] if tuple(words[:n]) == prefix else None


# -- cluster launcher ------------------------------------------------------------------------


def _launcher_config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def test_launcher_config_passes_rays_own_validation() -> None:
    """What ``ray up`` does before it talks to the cloud: fill in the provider's defaults
    (``prepare_config``) and validate against ``ray/autoscaler/ray-schema.json``
    (``validate_config``, with jsonschema, which ray itself depends on)."""
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _launcher_config()
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(raw, schema)  # the file as written, before any defaults
    validate_config(prepare_config(raw))


def test_launcher_config_pins_the_head_and_spills() -> None:
    config = _launcher_config()
    head_type = config["head_node_type"]
    types = config["available_node_types"]
    # The launcher hands a node type's `resources` to `ray start` (RAY_OVERRIDE_RESOURCES).
    assert types[head_type]["resources"].get(HEAD_RESOURCE) == 1
    workers = [t for name, t in types.items() if name != head_type]
    assert workers and all(t.get("max_workers", 0) > t.get("min_workers", 0) for t in workers)
    assert all(HEAD_RESOURCE not in t.get("resources", {}) for t in workers)

    head = [w for line in config["head_start_ray_commands"] for w in _shell_words(line)]
    ray_start = [_after(c, "ray", "start") for c in head]
    ray_start = [a for a in ray_start if a is not None]
    assert len(ray_start) == 1 and "--head" in ray_start[0]
    spill = [a for a in ray_start[0] if a.startswith("--object-spilling-directory=")]
    assert len(spill) == 1 and spill[0].split("=", 1)[1].startswith("/"), ray_start[0]
    exports = {w for c in head if c and c[0] == "export" for w in c[1:]}
    assert f"{HEAD_ENV}={HEAD_RESOURCE}" in exports

    # The service on the head, with flags the CLI accepts and results on S3.
    serve = [a for a in (_after(c, "driver-review", "serve") for c in head) if a is not None]
    assert len(serve) == 1, head
    args = build_parser().parse_args(["serve", *serve[0]])
    assert args.data_dir.startswith("s3://") and args.host == "0.0.0.0"

    worker = [w for line in config["worker_start_ray_commands"] for w in _shell_words(line)]
    assert any(_after(c, "ray", "start") is not None for c in worker)
    setup = " ".join(config["setup_commands"])
    assert "pip install" in setup and "driver-review" in setup


# -- KubeRay -----------------------------------------------------------------------------------


def _check_cluster_spec(spec: dict[str, Any], where: str) -> None:
    head = spec["headGroupSpec"]
    groups = [("head", head), *((g["groupName"], g) for g in spec["workerGroupSpecs"])]
    for name, group in groups:
        params = group["rayStartParams"]
        # KubeRay's CRD types rayStartParams as map[string]string: an unquoted number fails.
        assert all(isinstance(v, str) for v in params.values()), (where, name, params)
        containers = group["template"]["spec"]["containers"]
        assert containers and all(c.get("image") and c.get("name") for c in containers), name
    # KubeRay pastes the value into the `ray start` line that bash runs, hence its
    # documented format, a JSON object in a double-quoted shell word: read it as bash will.
    (head_resources,) = shlex.split(head["rayStartParams"]["resources"])
    assert json.loads(head_resources) == {HEAD_RESOURCE: 1}
    head_env = {e["name"]: e for e in head["template"]["spec"]["containers"][0].get("env", [])}
    assert head_env[HEAD_ENV]["value"] == HEAD_RESOURCE, where
    assert spec["workerGroupSpecs"], where
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"]
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group
        assert "resources" not in group["rayStartParams"]  # the head resource is the head's


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_kuberay_rayservice() -> None:
    docs = _docs(KUBERAY / "rayservice.yaml")
    service = _one(docs, "RayService")
    assert service["apiVersion"] == "ray.io/v1" and service["metadata"]["name"]
    spec = service["spec"]
    _check_cluster_spec(spec["rayClusterConfig"], "RayService")

    serve_config = yaml.safe_load(spec["serveConfigV2"])
    apps = serve_config["applications"]
    assert [a["import_path"] for a in apps] == ["serve_app.app:build_app"]
    args = IngressArgs.model_validate(apps[0].get("args") or {})

    # The webhook secret comes from a Secret, on every node that may build or host the app.
    cluster = spec["rayClusterConfig"]
    pods = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in pods:
        env = _env(group["template"]["spec"]["containers"][0])
        ref = env[args.webhook_secret_env]["valueFrom"]["secretKeyRef"]
        assert ref["name"] and ref["key"]
        assert "RAY_ADDRESS" not in env  # inside the cluster Ray finds its own head

    # The pipeline's actors (orchestrator, pools, poller) are started on the head by the
    # script in the ConfigMap, for the instance the ingress serves.
    head = cluster["headGroupSpec"]["template"]["spec"]
    scripts = _one(docs, "ConfigMap")
    head_env = _env(head["containers"][0])
    assert head_env["DRIVER_REVIEW_INSTANCE"]["value"] == args.instance
    assert head_env["DRIVER_REVIEW_DATA_DIR"]["value"].startswith("s3://")
    assert head_env["DRIVER_REVIEW_CATALOG_URL"]["value"].startswith("http")
    mounted = {v["configMap"]["name"] for v in head.get("volumes", []) if "configMap" in v}
    assert scripts["metadata"]["name"] in mounted
    starter = scripts["data"]["start_instance.py"]
    compile(starter, "start_instance.py", "exec")
    for line in starter.splitlines():  # every name it imports exists
        if line.startswith("from driver_review"):
            module, names = line[5:].split(" import ")
            mod = __import__(module, fromlist=["_"])
            assert all(hasattr(mod, n.strip()) for n in names.split(",")), line


def test_kuberay_rayjob_runs_the_sweep() -> None:
    job = _one(_docs(KUBERAY / "rayjob-sweep.yaml"), "RayJob")
    assert job["apiVersion"] == "ray.io/v1" and job["metadata"]["name"]
    spec = job["spec"]
    _check_cluster_spec(spec["rayClusterSpec"], "RayJob")
    words = shlex.split(spec["entrypoint"])
    assert words[:3] == ["python", "-m", "jobs.sweep"], words
    args = build_parser().parse_args(["sweep", *words[3:]])
    assert args.json and args.data_dir.startswith("s3://")
    assert args.catalog_url.startswith("http")


def test_serve_config_file_args_validate() -> None:
    config = yaml.safe_load((REPO / "serve_app" / "serve_config.yaml").read_text())
    for app in config["applications"]:
        assert app["import_path"] == "serve_app.app:build_app"
        IngressArgs.model_validate(app.get("args") or {})


# -- two nodes on this machine ---------------------------------------------------------------

# Bounds for a loaded 2-core machine, where starting one Ray worker process can take
# seconds: beside other Ray test runs (load average 20-90) the test took 6-10 minutes.
SERVICE_DRIVERS = 120
SWEEP_DRIVERS = 120
READY_TIMEOUT_S = 180.0
JOB_TIMEOUT_S = 360.0
CONVERGE_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 90.0


def _pipeline_file(path: Path, min_workers: dict[str, int]) -> Path:
    """The shipped pipeline with ``min_workers`` per stage, so that each pool has something
    to spread over two nodes, and short windows for a quick test."""
    data = load_config().model_dump()
    for stage in data["stages"]:
        stage["pool"].update(min_workers=min_workers[stage["name"]], max_workers=3)
    data["window"].update(bucket_s=1.0, lease_s=30.0, snapshot_s=5.0, skew_overlap_s=2.0)
    data["catalog"]["timeout_s"] = 5.0
    data["results"]["rollover_s"] = 2.0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _converged(sim) -> bool:
    done, total = sim.state.converged()
    return done == total


def _healthy(url: str, proc: subprocess.Popen, log: Path) -> bool:
    if proc.poll() is not None:
        pytest.fail(
            f"driver-review serve exited with {proc.returncode}:\n"
            f"{log.read_text(errors='replace')[-4000:]}"
        )
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _actors(cluster: Cluster, instance: str, *, alive: bool = True) -> list[dict[str, Any]]:
    rows = [a for a in cluster.state("actors") if (a.get("name") or "").startswith(f"{instance}/")]
    return [a for a in rows if a["state"] == "ALIVE"] if alive else rows


def _nodes(cluster: Cluster) -> list[tuple[str, str, bool]]:
    return [(n["node_id"], n["state"], n["is_head_node"]) for n in cluster.state("nodes")]


def _placement(actors: list[dict[str, Any]]) -> dict[str, str]:
    return {a["name"]: a["node_id"] for a in actors}


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _submit_sweep(
    cluster: Cluster, sim_url: str, config: Path, data_dir: Path, submission_id: str
) -> tuple[subprocess.CompletedProcess, dict, str]:
    cmd = [
        RAY,
        "job",
        "submit",
        "--address",
        cluster.dashboard_url,
        "--submission-id",
        submission_id,
        "--",
        "python",
        "-m",
        "jobs.sweep",
        "--catalog-url",
        sim_url,
        "--config",
        str(config),
        "--data-dir",
        str(data_dir),
        "--json",
        "--timeout-s",
        str(JOB_TIMEOUT_S - 60),
    ]
    try:
        submit = subprocess.run(
            cmd,
            cwd=REPO,
            env=cluster.client_env(),
            text=True,
            capture_output=True,
            timeout=JOB_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"ray job submit still running after {JOB_TIMEOUT_S}s:\n"
            f"{_text(exc.stdout)[-3000:]}\n{_text(exc.stderr)[-3000:]}"
        )
    job = cluster.get(f"/api/jobs/{submission_id}").json()
    logs = cluster.get(f"/api/jobs/{submission_id}/logs").json()["logs"]
    return submit, job, logs


def _stop_service(proc: subprocess.Popen) -> None:
    """SIGINT is the documented stop; anything left after the grace period is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _sweep_phase(
    cluster: Cluster, head_id: str, worker_id: str, sim_url: str, config: Path, data_dir: Path
) -> dict[str, Any]:
    """A sweep as a Ray job: it succeeds, with its orchestrator pinned to the head (the job
    inherits the head's DRIVER_REVIEW_HEAD_RESOURCE) and its workers on both nodes."""
    submit, job, logs = _submit_sweep(
        cluster, sim_url, config, data_dir, f"sweep-{uuid.uuid4().hex[:8]}"
    )
    assert job["status"] == "SUCCEEDED" and submit.returncode == 0, (
        f"{job}\nstdout:\n{submit.stdout[-2000:]}\nstderr:\n{submit.stderr[-2000:]}"
        f"\nlogs:\n{logs[-3000:]}"
    )
    # The job's own output: the human summary, then the JSON summary as the last line.
    lines = logs.splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith("{"))
    summary = json.loads(lines[at])
    assert all(not line.strip() for line in lines[at + 1 :]), lines[at + 1 :]
    head = max((i for i in range(at) if lines[i].startswith("sweep ")), default=None)
    assert head is not None, lines[-20:]
    human = lines[head:at]
    assert human[0].startswith(f"sweep {summary['instance']}: {SWEEP_DRIVERS} drivers in "), human
    assert len(human) > 1 and all(line.startswith("  ") for line in human[1:]), human
    assert [line.split(":")[0].strip() for line in human[1:3]] == ["decisions", "final"], human
    # The same summary also came back through the CLI's log tail.
    assert json.dumps(summary, sort_keys=True) in submit.stdout + submit.stderr

    assert summary["drivers"] == SWEEP_DRIVERS and not summary["timed_out"]
    assert summary["unresolved"] == 0 and summary["data_dir"] == str(data_dir)
    assert summary["instance"].startswith("sweep-")
    assert sum(summary["final_states"].values()) == SWEEP_DRIVERS
    truth = httpx.get(f"{sim_url}/_sim/truth", timeout=30).json()["drivers"]
    state = httpx.get(f"{sim_url}/_sim/state", timeout=30).json()["drivers"]
    wrong = [
        d
        for d, t in truth.items()
        if (state[d]["status"], state[d]["stage"]) != (t["status"], t["stage"])
    ]
    assert wrong == [], f"{len(wrong)} drivers differ from truth: {wrong[:5]}"
    assert read_results(str(data_dir)).num_rows > 0
    # Stopped by now, but the GCS keeps dead actors with the node they ran on.
    sweep = {a["name"]: a for a in _actors(cluster, summary["instance"], alive=False)}
    orchestrator = sweep[f"{summary['instance']}/orchestrator"]
    assert orchestrator["node_id"] == head_id
    assert orchestrator["required_resources"].get(HEAD_RESOURCE, 0) > 0
    workers = {n: a["node_id"] for n, a in sweep.items() if a["class_name"] == "StageWorker"}
    assert set(workers.values()) == {head_id, worker_id}, workers
    return summary


def _check_service_placement(
    cluster: Cluster, instance: str, head_id: str, worker_id: str, context
) -> dict[str, str]:
    """Stage workers spread over both nodes; orchestrator and governor on the head, because
    they ask for a sliver of its custom resource (and nothing else does)."""

    def started() -> list[dict[str, Any]] | None:
        actors = _actors(cluster, instance)
        workers = [a for a in actors if a["class_name"] == "StageWorker"]
        return actors if len(workers) >= 6 else None

    actors = wait_until(
        started, READY_TIMEOUT_S, "six stage workers alive", every_s=1.0, context=context
    )
    by_name = {a["name"]: a for a in actors}
    workers = {n: a["node_id"] for n, a in by_name.items() if a["class_name"] == "StageWorker"}
    # Each pool puts its next worker on the live node holding fewest of its workers.
    assert set(workers.values()) == {head_id, worker_id}, (
        f"head {head_id}, worker {worker_id}, stage workers {workers}, "
        f"nodes {_nodes(cluster)}\n{context()}"
    )
    for role in ("orchestrator", "governor"):
        actor = by_name[f"{instance}/{role}"]
        assert actor["node_id"] == head_id, (role, actor["node_id"])
        assert actor["required_resources"].get(HEAD_RESOURCE, 0) > 0, actor
    assert all(HEAD_RESOURCE not in by_name[n]["required_resources"] for n in workers)
    return workers


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_nodes_sweep_job_and_service(sim_factory, tmp_path) -> None:
    """One after the other (their worker processes would otherwise all start at once on a
    loaded machine): a sweep as a Ray job, then the always-on service, stopped by SIGINT."""
    t0 = time.monotonic()
    # Six workers for the service, four for the sweep: each pool spreads its own over both.
    config = _pipeline_file(
        tmp_path / "service.yaml", {"intake": 2, "security": 2, "compatibility": 2}
    )
    sweep_config = _pipeline_file(
        tmp_path / "sweep.yaml", {"intake": 2, "security": 1, "compatibility": 1}
    )
    instance = "main"
    service_log = tmp_path / "serve.log"
    times: dict[str, float] = {}

    with (
        ray_head(
            num_cpus=2,
            resources={HEAD_RESOURCE: 1},
            ready_timeout_s=READY_TIMEOUT_S,
            object_spilling_directory=str(tmp_path / "spill"),
            # As cluster.yaml does: every job on the head inherits the variable.
            env={HEAD_ENV: HEAD_RESOURCE},
        ) as cluster,
        ray_worker(cluster, num_cpus=2, ready_timeout_s=READY_TIMEOUT_S) as worker,
    ):
        head_id = cluster.head_node_id()
        assert {n["node_id"] for n in cluster.alive_nodes()} == {head_id, worker.node_id}
        times["cluster"] = time.monotonic() - t0

        sweep_sim = sim_factory(SimSettings(drivers=SWEEP_DRIVERS, seed=12))
        t_job = time.monotonic()
        summary = _sweep_phase(
            cluster, head_id, worker.node_id, sweep_sim.url, sweep_config, tmp_path / "sweep"
        )
        times["job"] = time.monotonic() - t_job

        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        port, admin_port = free_ports(2, host="")
        url = f"http://127.0.0.1:{port}"
        service_sim = sim_factory(
            SimSettings(
                drivers=SERVICE_DRIVERS,
                seed=11,
                update_rate=2.0,
                webhook_url=f"{url}/webhooks/drivers",
                webhook_secret=secret,
            )
        )
        env = cluster.client_env(
            RAY_ADDRESS=cluster.gcs_address, **{SECRET_ENV: secret, HEAD_ENV: HEAD_RESOURCE}
        )
        t_service = time.monotonic()
        with open(service_log, "wb") as log:
            service = subprocess.Popen(
                [
                    str(VENV_BIN / "driver-review"),
                    "serve",
                    "--catalog-url",
                    service_sim.url,
                    "--config",
                    str(config),
                    "--data-dir",
                    str(tmp_path / "service"),
                    "--port",
                    str(port),
                    "--admin-port",
                    str(admin_port),
                    "--instance",
                    instance,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

        def context() -> str:
            return (
                f"service log:\n{service_log.read_text(errors='replace')[-3000:]}\n"
                f"head log:\n{cluster.log_tail(1500)}\nworker log:\n"
                f"{worker.log_tail(1500)}"
            )

        try:
            wait_until(
                lambda: _healthy(url, service, service_log),
                READY_TIMEOUT_S,
                "service healthy",
                context=context,
            )
            times["service"] = time.monotonic() - t_service
            workers = _check_service_placement(cluster, instance, head_id, worker.node_id, context)
            # Pings reach the ingress through the Serve proxy and are taken (202).
            wait_until(
                lambda: (
                    httpx.get(f"{service_sim.url}/_sim/stats", timeout=10).json()["webhooks"][
                        "delivered"
                    ]
                    > 0
                ),
                120,
                "a webhook delivered",
                context=context,
            )
            # Hold the catalog still and let the service catch up with every change.
            httpx.post(f"{service_sim.url}/_sim/pause", timeout=10)
            wait_until(
                lambda: _converged(service_sim),
                CONVERGE_TIMEOUT_S,
                "service converged to the catalog's truth",
                every_s=1.0,
                context=lambda: f"{service_sim.state.converged()}\n{context()}",
            )
            times["converged"] = time.monotonic() - t_service
        finally:
            t_stop = time.monotonic()
            _stop_service(service)
            times["stop"] = time.monotonic() - t_stop

        out = service_log.read_text(errors="replace")
        assert service.returncode == 0, out[-3000:]
        assert "stopping: intake, drain, services" in out and "stopped." in out, out[-3000:]
        # Intake stopped (the Serve app is gone: the proxy, still up, finds no route),
        # the pools drained, the services stopped: nothing of the instance is left.
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 404
        left = _actors(cluster, instance)
        assert left == [], _placement(left)
        t_down = time.monotonic()
    times["teardown"] = time.monotonic() - t_down
    on_head = sum(node == head_id for node in workers.values())
    print(
        f"\ntwo nodes: cluster up {times['cluster']:.1f}s, sweep job {times['job']:.1f}s "
        f"(sweep {summary['wall_s']:.1f}s), service healthy after {times['service']:.1f}s "
        f"and converged after {times['converged']:.1f}s, SIGINT stop {times['stop']:.1f}s, "
        f"teardown {times['teardown']:.1f}s; service workers {on_head} on the head, "
        f"{len(workers) - on_head} on the other node; total {time.monotonic() - t0:.0f}s"
    )

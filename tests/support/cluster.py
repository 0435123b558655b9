"""A separate Ray cluster of real ``ray start … --block`` nodes for tests that need one of
their own, e.g. to submit jobs through the dashboard's job API or to see actors spread
over two nodes.

``ray_head()`` starts a head node; ``ray_worker(cluster)`` adds a second node on the same
machine (``ray start --address <head>``), as ``ray.cluster_utils.Cluster.add_node`` does
in-process. Every port a node would otherwise take by default (GCS, dashboard, dashboard
agent, client server, metrics, runtime-env agent, node and object managers, worker
range, ...) is a free one picked here. The head keeps its own ``--temp-dir`` (so its
``ray_current_cluster`` file never makes another process's ``ray.init()`` join it); a
worker node shares it, as Ray does by default (it reads the head's temp dir from the GCS;
socket and log file names get a per-node suffix, so two nodes never collide in it). Each
node runs in a session of its own and is torn down by signalling that process group only:
no ``ray stop``, so no other Ray on the machine is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.net import free_ports, port_free

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
HOST = "127.0.0.1"
WORKER_PORTS = 200
# `ray start` gives a node's raylet a fixed 30 s to register with the GCS and exits when
# it does not; on a machine loaded far beyond its cores that happens now and then, so a
# node that exits while starting is started again (with fresh ports), once. (The
# dashboard's own start deadline, 60 s by default, can be set: see _start_head.)
START_ATTEMPTS = 2
# Outside Ray's default worker range (10002-19999) and below the ephemeral range.
_WORKER_RANGE = (20000, 32000)


def free_port_range(size: int, lo: int, hi: int, *, exclude: set[int]) -> tuple[int, int]:
    """A run of ``size`` ports in ``[lo, hi)``, all free now and none in ``exclude``."""
    rng = random.Random()
    for _ in range(50):
        start = rng.randrange(lo, hi - size)
        ports = range(start, start + size)
        if not exclude.intersection(ports) and all(port_free(p) for p in ports):
            return start, start + size - 1
    raise RuntimeError(f"no {size} free ports in [{lo}, {hi})")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would point Ray somewhere else,
    with the venv first on PATH (a job's ``python`` is then the venv's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_", "RAYLET_", "PYTEST_")) and k != "PYTHONPATH"
    }
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.update(extra)
    return env


@dataclass
class Cluster:
    gcs_address: str
    dashboard_url: str
    temp_dir: str
    log_path: Path
    proc: subprocess.Popen
    token: str
    #: Ports the nodes of this cluster were given, so a node added later avoids them.
    ports: set[int] = field(default_factory=set)

    def get(self, path: str, timeout_s: float = 30.0, **params: Any) -> httpx.Response:
        """``GET`` on the dashboard (``/api/jobs/<id>``, ``/api/jobs/<id>/logs`` ...)."""
        return httpx.get(
            f"{self.dashboard_url}{path}",
            timeout=timeout_s,
            params=params,
            headers={"Authorization": f"Bearer {self.token}"},
        )

    def state(
        self, kind: str, *filters: tuple[str, str], timeout_s: float = 30.0, retry_s: float = 60.0
    ) -> list[dict[str, Any]]:
        """Rows of Ray's state API (what ``ray list <kind> --detail`` shows), e.g.
        ``state("actors", ("class_name", "StageWorker"))``; filters are equalities.

        A loaded head's dashboard now and then drops a connection or answers 5xx while
        its state module (re)starts: that is retried for ``retry_s``; a 4xx is not."""
        params: dict[str, Any] = {"limit": 10_000, "detail": "true", "timeout": int(timeout_s)}
        if filters:
            params.update(
                filter_keys=[k for k, _ in filters],
                filter_predicates=["="] * len(filters),
                filter_values=[v for _, v in filters],
            )
        deadline = time.monotonic() + retry_s
        while True:
            try:
                r = self.get(f"/api/v0/{kind}", timeout_s=timeout_s + 5, **params)
            except httpx.TransportError as exc:
                last: object = exc
            else:
                if r.status_code < 500:
                    r.raise_for_status()
                    body = r.json()
                    if not body.get("result"):
                        raise RuntimeError(f"state API /api/v0/{kind}: {body.get('msg')}")
                    return body["data"]["result"]["result"]
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"state API /api/v0/{kind}: {last!r}\n{self.log_tail()}")
            time.sleep(1.0)

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.state("nodes") if n["state"] == "ALIVE"]

    def head_node_id(self, timeout_s: float = 60.0) -> str:
        """The head's node id; the dashboard answers a few seconds before the head's
        raylet has registered with the GCS, so wait for it (bounded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            heads = [n["node_id"] for n in self.alive_nodes() if n["is_head_node"]]
            if heads:
                return heads[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ALIVE head node after {timeout_s}s\n{self.log_tail()}")
            time.sleep(0.5)

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment for a Ray client of this cluster (``ray job submit`` ...)."""
        return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, **extra)

    def log_tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


class StartupExited(RuntimeError):
    """``ray start`` exited before its node was up."""


def _exited(proc: subprocess.Popen, log_path: Path) -> StartupExited:
    return StartupExited(
        f"ray start exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-4000:]}"
    )


def _wait_ready(
    url: str, token: str, proc: subprocess.Popen, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _exited(proc, log_path)
        try:
            r = httpx.get(
                f"{url}/api/version", timeout=2, headers={"Authorization": f"Bearer {token}"}
            )
            if r.status_code == 200:
                return
            last = r.status_code
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(
        f"dashboard at {url} not ready after {timeout_s}s (last: {last!r}):\n"
        f"{log_path.read_text(errors='replace')[-4000:]}"
    )


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: fall back to "does the group exist at all"
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _wait_group(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Stop the head and everything it started, touching nothing outside its group.

    SIGTERM to ``ray start --block`` first: it drains the node and stops its children in
    order (a SIGTERM to the whole group at once kills the GCS under it and leaves it
    waiting 30s for a drain that can no longer happen). Then SIGTERM, and finally SIGKILL,
    to whatever is left in the group (it runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if _wait_group(proc.pid, 0.0):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        _wait_group(proc.pid, wait_s)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@dataclass
class WorkerNode:
    node_id: str
    log_path: Path
    proc: subprocess.Popen

    def log_tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def _node_args(
    *, num_cpus: int, object_store_memory: int, resources: dict[str, float] | None
) -> list[str]:
    args = [f"--num-cpus={num_cpus}", f"--object-store-memory={object_store_memory}"]
    if resources:
        args.append(f"--resources={json.dumps(resources)}")
    return args


@contextlib.contextmanager
def ray_head(
    *,
    num_cpus: int = 2,
    ready_timeout_s: float = 90.0,
    object_store_memory: int = 256 * 1024 * 1024,
    resources: dict[str, float] | None = None,
    object_spilling_directory: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """Start a head node with the dashboard on loopback; yield it; tear it down.

    ``resources``: custom resources of the head (``--resources``);
    ``object_spilling_directory``: where every node spills (worker nodes take the head's);
    ``env``: extra variables for the node's processes, which every job's entrypoint
    inherits."""
    # Unix socket paths are limited to ~107 bytes and Ray nests session_<date>_<pid>/sockets/
    # under the temp dir, so keep it short (pytest's tmp_path is too long).
    temp_dir = tempfile.mkdtemp(prefix="drray-", dir="/tmp")
    # Ray turns token auth on whenever ~/.ray/auth_token exists (any earlier ray.init() on
    # the machine writes one), and its job CLI only sends a token when RAY_AUTH_MODE=token.
    # So be explicit: token auth with a token of this cluster's own, given to the head and
    # to every client through the environment (never read from or written to ~/.ray).
    token = secrets.token_hex(32)
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            cluster = _start_head(
                temp_dir,
                token,
                attempt,
                num_cpus=num_cpus,
                object_store_memory=object_store_memory,
                resources=resources,
                env=env,
                object_spilling_directory=object_spilling_directory,
                dashboard_timeout_s=ready_timeout_s,
            )
            try:
                _wait_ready(
                    cluster.dashboard_url, token, cluster.proc, cluster.log_path, ready_timeout_s
                )
                # The dashboard answers before the head's raylet has registered: wait for
                # that too, since that is where a loaded machine makes `ray start` give up.
                _wait_node(cluster, cluster.proc, cluster.log_path, ready_timeout_s, head=True)
            except StartupExited as exc:
                _stop(cluster.proc)
                if attempt == START_ATTEMPTS:
                    raise
                print(f"head node exited while starting; starting it again: {exc}", file=sys.stderr)
                continue
            except BaseException:
                _stop(cluster.proc)
                raise
            break
        try:
            yield cluster
        finally:
            _stop(cluster.proc)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _start_head(
    temp_dir: str,
    token: str,
    attempt: int,
    *,
    num_cpus: int,
    object_store_memory: int,
    resources: dict[str, float] | None,
    object_spilling_directory: str | None,
    env: dict[str, str] | None,
    dashboard_timeout_s: float,
) -> Cluster:
    log_path = Path(temp_dir) / ("ray-start.log" if attempt == 1 else f"ray-start-{attempt}.log")
    (gcs, dash, agent_http, agent_grpc, client, metrics, runtime_env, node_mgr, obj_mgr) = (
        free_ports(9, host="")
    )
    taken = {gcs, dash, agent_http, agent_grpc, client, metrics, runtime_env, node_mgr, obj_mgr}
    wlo, whi = free_port_range(WORKER_PORTS, *_WORKER_RANGE, exclude=taken)
    cmd = [
        RAY,
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        f"--node-ip-address={HOST}",
        f"--port={gcs}",
        "--include-dashboard=true",
        f"--dashboard-host={HOST}",
        f"--dashboard-port={dash}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--ray-client-server-port={client}",
        f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--node-manager-port={node_mgr}",
        f"--object-manager-port={obj_mgr}",
        f"--min-worker-port={wlo}",
        f"--max-worker-port={whi}",
        *_node_args(
            num_cpus=num_cpus, object_store_memory=object_store_memory, resources=resources
        ),
        f"--temp-dir={temp_dir}",
    ]
    if object_spilling_directory:
        cmd.append(f"--object-spilling-directory={object_spilling_directory}")
    # cwd: a job submitted without --working-dir runs its entrypoint in the head's cwd, so
    # ``python -m jobs.sweep`` finds the repo's ``jobs`` package as it would for a user who
    # ran ``ray start --head`` in a checkout.
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(
                RAY_AUTH_MODE="token",
                RAY_AUTH_TOKEN=token,
                RAY_DASHBOARD_STARTUP_TIMEOUT_S=str(int(dashboard_timeout_s)),
                **(env or {}),
            ),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Cluster(
        f"{HOST}:{gcs}",
        f"http://{HOST}:{dash}",
        temp_dir,
        log_path,
        proc,
        token,
        ports=taken | set(range(wlo, whi + 1)),
    )


def _wait_node(
    cluster: Cluster,
    proc: subprocess.Popen,
    log_path: Path,
    timeout_s: float,
    *,
    head: bool = False,
    known: frozenset[str] = frozenset(),
) -> str:
    """The id of the ALIVE head (``head``) or of the first ALIVE node not in ``known``,
    once there is one; raises :class:`StartupExited` as soon as ``proc`` (its
    ``ray start``) has exited."""
    deadline = time.monotonic() + timeout_s
    last: object = "not listed yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _exited(proc, log_path)
        try:
            for node in cluster.state("nodes", retry_s=0):
                if node["state"] == "ALIVE" and (
                    node["is_head_node"] if head else node["node_id"] not in known
                ):
                    return node["node_id"]
        except (httpx.HTTPError, RuntimeError) as exc:  # the state API is starting too
            last = exc
        time.sleep(0.5)
    raise TimeoutError(
        f"node not ALIVE after {timeout_s}s (last: {last!r}):\n"
        f"{log_path.read_text(errors='replace')[-4000:]}"
    )


@contextlib.contextmanager
def ray_worker(
    cluster: Cluster,
    *,
    num_cpus: int = 2,
    ready_timeout_s: float = 90.0,
    object_store_memory: int = 256 * 1024 * 1024,
    resources: dict[str, float] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[WorkerNode]:
    """Add a node to ``cluster`` on this machine (``ray start --address <gcs> --block``);
    yield it once the GCS lists it ALIVE; tear it down (before the head)."""
    cluster.head_node_id()  # the head is listed first, so it is never taken for the new node
    for attempt in range(1, START_ATTEMPTS + 1):
        known = frozenset(node["node_id"] for node in cluster.alive_nodes())
        proc, log_path = _start_worker(
            cluster,
            num_cpus=num_cpus,
            resources=resources,
            object_store_memory=object_store_memory,
            env=env,
        )
        try:
            node_id = _wait_node(cluster, proc, log_path, ready_timeout_s, known=known)
        except StartupExited as exc:
            _stop(proc)
            if attempt == START_ATTEMPTS:
                raise
            print(f"worker node exited while starting; starting it again: {exc}", file=sys.stderr)
            continue
        except BaseException:
            _stop(proc)
            raise
        break
    try:
        yield WorkerNode(node_id, log_path, proc)
    finally:
        _stop(proc)


def _start_worker(
    cluster: Cluster,
    *,
    num_cpus: int,
    object_store_memory: int,
    resources: dict[str, float] | None,
    env: dict[str, str] | None,
) -> tuple[subprocess.Popen, Path]:
    n = len(list(Path(cluster.temp_dir).glob("ray-worker-*.log")))
    log_path = Path(cluster.temp_dir) / f"ray-worker-{n}.log"
    node_mgr, obj_mgr, metrics, agent_http, agent_grpc, runtime_env = free_ports(6, host="")
    taken = {node_mgr, obj_mgr, metrics, agent_http, agent_grpc, runtime_env}
    wlo, whi = free_port_range(WORKER_PORTS, *_WORKER_RANGE, exclude=taken | cluster.ports)
    cmd = [
        RAY,
        "start",
        f"--address={cluster.gcs_address}",
        "--block",
        "--disable-usage-stats",
        f"--node-ip-address={HOST}",
        f"--node-manager-port={node_mgr}",
        f"--object-manager-port={obj_mgr}",
        f"--metrics-export-port={metrics}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--min-worker-port={wlo}",
        f"--max-worker-port={whi}",
        *_node_args(
            num_cpus=num_cpus, object_store_memory=object_store_memory, resources=resources
        ),
        # One log monitor per machine: the head's already tails the shared session dir
        # (ray.cluster_utils does the same); a second would send every line twice.
        "--include-log-monitor=false",
    ]
    cluster.ports |= taken | set(range(wlo, whi + 1))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=cluster.token, **(env or {})),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc, log_path

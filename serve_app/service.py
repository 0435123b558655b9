"""``driver-review serve`` and ``driver-review status``.

The service is the pipeline plus its two ways of hearing about changes: the Serve webhook
ingress (fast) and the delta poller (certain), with the outer loop inside the orchestrator,
and the private admin endpoint (status, drivers) on its own host and port.
Shutdown order: stop intake (delete the Serve app, stop the poller) → drain the pools
(workers finish what they hold and flush results) → stop the services → the admin.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any, TextIO

from driver_review import env
from driver_review.config import PipelineConfig
from driver_review.errors import ConfigError
from serve_app import defaults

SECRET_ENV = env.WEBHOOK_SECRET
ADMIN_HOST, ADMIN_PORT = defaults.ADMIN_HOST, defaults.ADMIN_PORT
STOP_POLL_S = 0.5  # how often the main thread wakes to run a pending SIGINT/SIGTERM handler
#: ``--proxy`` when not given (serve_app/proxies.py: auto, haproxy, default).
DEFAULT_PROXY = "default"
ROUTED_TIMEOUT_S = 60.0  # how long a started ingress may take to be served by its proxy
ROUTED_POLL_S = 0.1

log = logging.getLogger(__name__)


def serve_app_name(instance: str) -> str:
    return f"driver-review-{instance}"


def start_service(
    config: PipelineConfig,
    *,
    config_path: str | None,
    instance: str,
    data_dir: str,
    host: str,
    port: int,
    poll_interval_s: float | None = None,
    admin_host: str = ADMIN_HOST,
    admin_port: int = ADMIN_PORT,
    proxy: str = DEFAULT_PROXY,
) -> Any:
    """Start (or join) the instance's actors, the poller, the Serve ingress behind
    ``proxy`` (see :mod:`serve_app.proxies`) and the admin endpoint (``admin_port`` 0: any
    free port; see :func:`admin_url`). Returns the
    :class:`~driver_review.runtime.system.System`. Requires a connected Ray."""
    from driver_review.runtime.system import begin_system, start_poller
    from serve_app.admin import admin_token
    from serve_app.admin_server import start_admin
    from serve_app.proxies import resolve_proxy

    if not os.environ.get(SECRET_ENV, "").strip():
        raise ConfigError(f"{SECRET_ENV} is not set: the webhook secret (whsec_…) is required")
    token = admin_token(admin_host)  # refuses an exposed admin without a token, up front
    mode = resolve_proxy(proxy)  # a missing HAProxy fails (or falls back) before anything
    # The pipeline's actors and the admin start while Serve does: each is a process
    # importing for a second or two, and Serve's controller, proxy and replica are three
    # more: one after another they took 29-34 s on this 2-core machine, overlapped 21 s.
    starting = begin_system(config, instance=instance, data_dir=data_dir, poll=True)
    admin_listening = start_admin(
        config,
        instance=instance,
        host=admin_host,
        port=admin_port,
        ingress_app=serve_app_name(instance),
        token=token,
        results_dir=data_dir,
    )
    start_ingress(instance, config_path, host=host, port=port, proxy=mode)
    system = starting.wait()
    # Only now: a ping refused while the route was not yet served (Serve's proxy answers
    # 404 until it learns the route) is then covered by the poller's first listing.
    start_poller(config, instance, poll_interval_s)
    admin_listening()
    return system


def start_ingress(
    instance: str, config_path: str | None, *, host: str, port: int, proxy: str
) -> str | None:
    """Start Serve (``haproxy`` or ``default`` proxy) and the webhook ingress of
    ``instance``; returns the proxy started, None when Serve was already running."""
    from ray import serve

    from serve_app.app import IngressArgs, build_app
    from serve_app.proxies import serve_http_address, serve_running, start_serve

    haproxy = proxy == "haproxy" and not serve_running()
    # Built first: it checks the secret and the pipeline file before Serve starts.
    app = build_app(IngressArgs(instance=instance, config=config_path, haproxy=haproxy))
    started = start_serve(host, port, proxy)
    serve.run(app, name=serve_app_name(instance), route_prefix="/", blocking=False)
    # A Serve that already ran keeps its own address: wait (and say) where pings go.
    serving_host, serving_port = serve_http_address()
    if started is None:
        log.info(
            "Serve already runs here: the webhook ingress joins its proxy on %s:%d%s",
            serving_host,
            serving_port,
            "" if (serving_host, serving_port) == (host, port) else f" (not {host}:{port})",
        )
    wait_routed(serving_host, serving_port)
    return started


def wait_routed(host: str, port: int, timeout_s: float = ROUTED_TIMEOUT_S) -> None:
    """Wait until this node's proxy routes to the ingress: ``serve.run`` returns once the
    application runs, but each proxy learns its routes a moment later and answers 404
    until then. Raises TimeoutError naming the address after ``timeout_s``."""
    import time

    import httpx

    local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    url = f"http://{f'[{local}]' if ':' in local else local}:{port}/healthz"
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:  # bounded: timeout_s
        try:
            status = httpx.get(url, timeout=2.0, trust_env=False).status_code
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        else:
            if status == 200:
                return
            last = f"HTTP {status}"
        time.sleep(ROUTED_POLL_S)
    raise TimeoutError(
        f"the webhook ingress at {url} was not routed after {timeout_s:.0f} s ({last})"
    )


def admin_url(instance: str) -> str:
    """Base URL of the admin endpoint of a running ``instance`` (status, drivers)."""
    from serve_app.admin_server import admin_url as url

    return url(instance)


def ui_address(instance: str) -> str:
    """Where the live page of ``instance`` is, and how it gets the admin token if one is
    set: the token goes in the URL fragment, which the browser never sends anywhere."""
    from serve_app.admin import ADMIN_TOKEN_ENV

    url = f"{admin_url(instance)}/ui"
    if os.environ.get(ADMIN_TOKEN_ENV, "").strip():
        return f"{url}#token=<the value of {ADMIN_TOKEN_ENV}>"
    return url


def stop_service(system: Any) -> dict[str, Any]:
    from ray import serve

    from driver_review.runtime.system import stop_system
    from serve_app.admin_server import stop_admin

    serve.delete(serve_app_name(system.instance))  # intake stops first: no new pings
    try:
        return asyncio.run(stop_system(system))
    finally:
        stop_admin(system.instance)


class StopSignal:
    """SIGINT and SIGTERM, caught from construction on: one that comes while the service is
    still starting is remembered (the stop follows the start) instead of interrupting the
    start halfway as a KeyboardInterrupt."""

    def __init__(self) -> None:
        self.received: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, _frame: object) -> None:
        # No lock here (not even a threading.Event's): the handler runs between two
        # bytecodes of the main thread, which may hold that very lock, and would deadlock.
        self.received.append(signum)

    def wait(self) -> int:
        """Block the main thread until a stop signal; returns the first one's number.

        It waits in short turns: Python runs signal handlers in the main thread only, and
        a signal the kernel hands to another thread (Ray has many) does not wake a main
        thread blocked without a timeout, so the handler would never run.
        """
        while not self.received:
            time.sleep(STOP_POLL_S)
        return self.received[0]


def wait_for_stop_signal() -> int:
    """Block the main thread until SIGINT or SIGTERM; returns the signal's number."""
    return StopSignal().wait()


def run_service(
    config: PipelineConfig,
    *,
    config_path: str | None,
    instance: str,
    data_dir: str,
    host: str,
    port: int,
    admin_host: str = ADMIN_HOST,
    admin_port: int = ADMIN_PORT,
    out: TextIO = sys.stdout,
    proxy: str = DEFAULT_PROXY,
) -> int:
    from driver_review.runtime.names import connect
    from serve_app.proxies import resolve_proxy

    mode = resolve_proxy(proxy)  # before Ray starts: a missing HAProxy is one line
    stop = StopSignal()  # a Ctrl-C while starting stops the service once it has started
    connect(quiet=False)
    system = start_service(
        config,
        config_path=config_path,
        instance=instance,
        data_dir=data_dir,
        host=host,
        port=port,
        admin_host=admin_host,
        admin_port=admin_port,
        proxy=mode,
    )
    front = "HAProxy" if mode == "haproxy" else "Serve's proxy"
    print(
        f"driver-review serving instance {instance!r}: webhooks at "
        f"http://{host}:{port}/webhooks/drivers ({front}), admin (status, drivers) at "
        f"{admin_url(instance)}/status",
        file=out,
        flush=True,
    )
    print(f"live page: {ui_address(instance)}", file=out, flush=True)
    print("Ctrl-C stops: intake first, then drain, then the services.", file=out, flush=True)
    stop.wait()
    print("stopping: intake, drain, services ...", file=out, flush=True)
    stop_service(system)
    print("stopped.", file=out, flush=True)
    return 0

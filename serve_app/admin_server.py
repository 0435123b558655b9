"""Runs the admin app (:mod:`serve_app.admin`) as a named Ray actor, ``<instance>/admin``.

Why an actor and not Serve: Serve has one HTTP proxy host and port for every app, and
the admin surface must listen apart from the public webhook port. Why an actor and not a
thread of ``driver-review serve``: it is found by name like every other part, Ray
restarts it if it dies, and it shows in the dashboard by role. It is pinned to the node
where ``driver-review serve`` runs, so 127.0.0.1 there is the operator's loopback, and it
is owned by that process (not detached): the admin goes when the service goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

import ray
import uvicorn
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from driver_review.config import PipelineConfig
from driver_review.errors import ConfigError
from driver_review.runtime.handles import AdminClient
from driver_review.runtime.names import NAMESPACE, actor_name
from driver_review.runtime.system import System
from serve_app.admin import AdminArgs, admin_token, build_admin_api
from serve_app.webhook import RedactedSecret

STOP_TIMEOUT_S = 5.0

# The handles this process started: a non-detached actor, named or not, is destroyed once
# no handle to it is left, so the starting process keeps one until stop_admin.
_started: dict[str, Any] = {}


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port), or one line saying why not."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        raise ConfigError(
            f"admin endpoint: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    sock.setblocking(False)
    return sock


class AdminServer:
    """Plain class; made an actor in :func:`start_admin`."""

    def __init__(
        self,
        config: PipelineConfig,
        args: AdminArgs,
        host: str,
        port: int,
        token: RedactedSecret | None,
    ) -> None:
        if token is None:
            admin_token(host, {})  # refuses a non-loopback host without a token
        self.sock = bind(host, port)
        api = build_admin_api(System.attach(config, args.instance), args, token)
        self.server = uvicorn.Server(
            uvicorn.Config(api, log_config=None, access_log=False, lifespan="off")
        )
        # The constructor runs on the actor's event loop: serve there, in the background.
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self.server.serve(sockets=[self.sock]))
        # The page's history, sampled from when the server listens (never holding up its
        # start: a status may wait on actors and Serve that are still starting).
        self._sampler = loop.create_task(self._sample_once_started(api.state.sample_forever))

    async def _sample_once_started(self, sample_forever: Any) -> None:
        while not self.server.started and not self._task.done():
            await asyncio.sleep(0.05)
        await sample_forever()

    async def address(self) -> tuple[str, int]:
        """Where it listens, once it does."""
        while not self.server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("admin server stopped")
            await asyncio.sleep(0.02)
        host, port = self.sock.getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        self._sampler.cancel()
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, STOP_TIMEOUT_S)


def start_admin(
    config: PipelineConfig,
    *,
    instance: str,
    host: str,
    port: int,
    ingress_app: str | None,
    token: RedactedSecret | None,
    results_dir: str | None = None,
) -> Callable[[], str]:
    """Create the admin actor of ``instance`` on this node and return at once: the
    function returned waits until it listens and gives its base URL."""
    if port:  # fail here, in one line, rather than in an actor's creation task
        bind(host, port).close()
    args = AdminArgs(instance=instance, ingress_app=ingress_app, results_dir=results_dir)
    here = ray.get_runtime_context().get_node_id()
    handle = (
        ray.remote(AdminServer)
        .options(
            name=actor_name(instance, "admin"),
            namespace=NAMESPACE,
            num_cpus=0,
            max_restarts=-1,
            max_concurrency=100,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
        )
        .remote(config, args, host, port, token)
    )
    _started[instance] = handle

    def listening() -> str:
        # Without retries, as on any actor just created: one that cannot listen fails at once.
        bound_host, bound_port = AdminClient(instance, handle=handle, timeout_s=0).address_sync()
        return _url(bound_host, bound_port)

    return listening


def admin_url(instance: str) -> str:
    """The base URL of the running admin endpoint of ``instance``."""
    host, port = AdminClient(instance).address_sync()
    return _url(host, port)


def stop_admin(instance: str) -> None:
    # The handle this process holds is let go only at the end: it may be the last one, and
    # Ray destroys an actor nobody holds, so dropping it first left the stop to look the
    # admin up by name for the whole STOP_TIMEOUT_S (every service stop took 5 s more).
    admin = AdminClient(instance, timeout_s=STOP_TIMEOUT_S, handle=_started.get(instance))
    with contextlib.suppress(Exception):
        admin.stop_sync()
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(admin.name, namespace=NAMESPACE), no_restart=True)
    _started.pop(instance, None)


def _url(host: Any, port: int) -> str:
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{shown}:{port}"

"""Start and stop the simulated catalog: in a background thread (tests, demo, benchmark)
or in the foreground until Ctrl-C (``driver-review sim``).

Shutdown order: hanging "timeout" faults are released, the server stops accepting,
in-flight requests get ``GRACEFUL_SHUTDOWN_S``, then the lifespan stops the change
generator and after it the webhook sender; the thread is joined.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import TextIO

import uvicorn

from driver_review.sim.app import create_app, create_checks_app
from driver_review.sim.auth import TokenIssuer, build_gates
from driver_review.sim.edge import Edge
from driver_review.sim.faults import TransportH11Protocol
from driver_review.sim.settings import SimSettings
from driver_review.sim.state import CatalogState

__all__ = ["SimServer", "SimSettings", "serve_forever"]

GRACEFUL_SHUTDOWN_S = 1
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class SimServer:
    """One simulated catalog on ``settings.host``; ``url`` is known once ``start`` returns,
    and ``checks_url`` too when ``settings.checks_port`` asks for a checks port."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.state = CatalogState(
            drivers=settings.drivers, seed=settings.seed, package_size=settings.package_size
        )
        self.url = ""
        self.checks_url = ""
        self.issuer: TokenIssuer | None = None
        self._servers: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []
        self._apps: list[Edge] = []
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return bool(self._servers) and all(t.is_alive() for _, t, _ in self._servers)

    def start(self) -> SimServer:
        with self._lock:
            if self._servers:
                return self
            gate, checks_gate, self.issuer = build_gates(self.settings)
            self._apps = [create_app(self.settings, self.state, gate=gate, issuer=self.issuer)]
            ports = [self.settings.port]
            if self.settings.checks_port is not None:
                self._apps.append(create_checks_app(self.settings, self.state, gate=checks_gate))
                ports.append(self.settings.checks_port)
            urls = [self._serve(app, port) for app, port in zip(self._apps, ports, strict=True)]
            self.url = urls[0]
            self.checks_url = urls[1] if len(urls) > 1 else ""
            started = list(self._servers)
        deadline = time.monotonic() + START_TIMEOUT_S
        for server, thread, _ in started:
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"simulated catalog did not start on {self.url}")
                time.sleep(0.005)
        return self

    def _serve(self, app: Edge, port: int) -> str:
        """Start one uvicorn server for ``app`` in a thread (lock held); its URL."""
        try:
            sock = _bind(self.settings.host, port)
        except OSError:
            for server, _, _ in self._servers:  # the catalog port, when the checks one fails
                server.should_exit = True
            raise
        host, port = sock.getsockname()[:2]
        config = uvicorn.Config(
            app,
            http=TransportH11Protocol,
            loop="asyncio",
            # The checks port's app has no lifespan of its own (the generator and the
            # sender belong to the catalog's).
            lifespan="on" if not self._servers else "off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=f"sim-{port}", daemon=True
        )
        self._servers.append((server, thread, sock))
        thread.start()
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def stop(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, []
        for app in self._apps:
            app.release_hung()
        for server, _, _ in servers:
            server.should_exit = True
        for _, thread, sock in servers:
            thread.join(STOP_TIMEOUT_S)
            sock.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted connections only
    # when the listening socket says so, and without it every response stalls ~40 ms
    # (Nagle's algorithm against delayed ACKs).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def serve_forever(settings: SimSettings, *, out: TextIO = sys.stdout) -> None:
    """Serve until SIGINT/SIGTERM, then stop cleanly. Call from the main thread."""
    received: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # No lock (not even a threading.Event's): the handler runs between two bytecodes
        # of the main thread, which may be holding it.
        received.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with SimServer(settings) as server:
            url = server.url
            print(
                f"simulated catalog: {len(server.state)} drivers (seed {settings.seed}) at {url}"
                f"  (truth: {url}/_sim/truth, stats: {url}/_sim/stats; Ctrl-C stops)",
                file=out,
                flush=True,
            )
            if server.checks_url:
                print(f"checks API: {server.checks_url}/v1/checks/{{check}}", file=out, flush=True)
            while server.running and not received:
                time.sleep(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

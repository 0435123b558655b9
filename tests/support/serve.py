"""Ray Serve around a test: started on a loopback port, and shut down after (every app and
the proxy with it), so one test's deployments never answer in the next. Fixtures call
these; the functions import Serve lazily, so unit tests never load it."""

from __future__ import annotations

from tests.support.net import LOOPBACK, free_port


def start_serve(port: int | None = None) -> str:
    """Start Serve's proxy on 127.0.0.1 (``port``, or a free one); its base URL."""
    from ray import serve

    port = free_port() if port is None else port
    serve.start(http_options={"host": LOOPBACK, "port": port})
    return f"http://{LOOPBACK}:{port}"


def shutdown_serve() -> None:
    """Delete every Serve app and stop the proxy (a no-op when Serve never started)."""
    from ray import serve

    serve.shutdown()

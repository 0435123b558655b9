"""``wait_routed``: the service starts its poller only once its proxy routes pings to the
ingress (Serve's proxy answers 404 for a moment after ``serve.run``)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from serve_app.service import wait_routed


class _Proxy(http.server.BaseHTTPRequestHandler):
    """404 for the first ``misses`` requests (a route not learnt yet), then 200."""

    misses = 0
    seen = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.seen += 1
        status = 404 if cls.seen <= cls.misses else 200
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[type[_Proxy], int]]:
    handler = type("Handler", (_Proxy,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_waits_through_404_until_the_route_is_served(proxy) -> None:
    handler, port = proxy
    handler.misses = 3
    wait_routed("0.0.0.0", port, timeout_s=10.0)  # 0.0.0.0 is asked on loopback
    assert handler.seen == 4


def test_a_route_never_served_times_out_naming_the_address(proxy) -> None:
    handler, port = proxy
    handler.misses = 10**6
    with pytest.raises(TimeoutError, match=rf"127\.0\.0\.1:{port}/healthz.*HTTP 404"):
        wait_routed("127.0.0.1", port, timeout_s=0.5)

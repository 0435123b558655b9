"""Injected faults: the ways a real catalog fails, played at the ASGI level.

Kinds (counted under these names in ``/_sim/stats`` ``faults``):

- ``500`` / ``502`` / ``503``: an error status with a JSON or a plain-text body;
- ``reset``: the connection is closed with a TCP RST before any response byte;
- ``timeout``: nothing is sent for ``fault_timeout_s`` (or until the client gives up, or
  the server stops), then the connection is dropped;
- ``truncated``: a 200 whose ``Content-Length`` promises more than is sent, then close;
- ``malformed``: a 200 whose JSON is cut off or has the wrong shape;
- ``lost_response`` (PUT only): the request *is* processed, then the connection is cut
  before the answer; a retry is then a counted duplicate.

Every kind but ``lost_response`` happens before the request is processed, so no state
changes. Dropping a connection needs the transport, which ASGI does not expose; uvicorn
is therefore run with :class:`TransportH11Protocol`, which puts it in the scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TRANSPORT_KEY = "driver_review.sim.transport"

#: Relative weights of the fault kinds; ``lost_response`` only applies to PUT.
WEIGHTS: dict[str, float] = {
    "500": 0.15,
    "502": 0.10,
    "503": 0.15,
    "reset": 0.15,
    "timeout": 0.10,
    "truncated": 0.12,
    "malformed": 0.13,
    "lost_response": 0.10,
}
KINDS = tuple(WEIGHTS)


class TransportH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with the connection's transport in ``scope["extensions"]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inner = self.app

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            scope.setdefault("extensions", {})[TRANSPORT_KEY] = self.transport
            await inner(scope, receive, send)

        self.app = app


class FaultInjector:
    def __init__(self, rate: float, *, seed: int, timeout_s: float) -> None:
        self.rate = rate
        self.timeout_s = timeout_s
        self._rng = random.Random(f"{seed}/faults")
        self._release = asyncio.Event()

    def pick(self, method: str) -> str | None:
        """The fault for this request, or ``None`` (most of the time)."""
        if self.rate <= 0 or self._rng.random() >= self.rate:
            return None
        kinds = [k for k in KINDS if method == "PUT" or k != "lost_response"]
        return self._rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]

    async def play(
        self, kind: str, scope: Scope, receive: Receive, send: Send, app: ASGIApp
    ) -> str:
        """Act out ``kind``; returns the status to count (a number, or the kind's name)."""
        if kind in ("500", "502", "503"):
            await self._error(int(kind), send)
            return kind
        if kind == "malformed":
            await _send_whole(send, 200, self._malformed_body(scope), "application/json")
            return "200"
        if kind == "truncated":
            body = b'{"id": "drv-000000", "version": "1.0.0.1", "stage": "intake", "sta'
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body) * 3).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body, "more_body": True})
            await _close(scope, receive, graceful=True)
            return "truncated"
        if kind == "timeout":
            await self._hang(receive)
            await _close(scope, receive, graceful=False)
            return "timeout"
        if kind == "lost_response":

            async def swallow(message: Message) -> None:
                return None

            await app(scope, receive, swallow)
            await _close(scope, receive, graceful=False)
            return "lost_response"
        await _close(scope, receive, graceful=False)  # reset
        return "reset"

    def release_hung(self) -> None:
        """End every hanging "timeout" now (the server is stopping); call on the loop."""
        self._release.set()

    async def _hang(self, receive: Receive) -> None:
        waiters = [
            asyncio.ensure_future(_until_disconnect(receive)),
            asyncio.ensure_future(self._release.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=self.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _error(self, status: int, send: Send) -> None:
        text = {500: "internal error", 502: "bad gateway", 503: "service unavailable"}[status]
        if self._rng.random() < 0.5:
            body = json.dumps({"detail": f"simulated {text}"}).encode()
            await _send_whole(send, status, body, "application/json")
        else:
            html = f"<html><body><h1>{status} {text}</h1></body></html>".encode()
            await _send_whole(send, status, html, "text/html")

    def _malformed_body(self, scope: Scope) -> bytes:
        path: str = scope.get("path", "")
        wrong: dict[str, object]
        if path.startswith("/v1/checks/"):
            wrong = {"passed": "maybe"}
        elif path.endswith("/package"):
            wrong = {"package": None}
        elif "/reviews/" in path:
            wrong = {"status": 42}
        elif path in ("/v1/drivers", "/v1/drivers/changes"):
            wrong = {"items": "soon"}
        else:
            wrong = {"id": None, "version": ["1"]}
        if self._rng.random() < 0.5:
            return json.dumps(wrong).encode()
        whole = json.dumps({"items": [{"id": "drv-000001", "version": "1.2.3.4"}]}).encode()
        return whole[: len(whole) // 2]


async def _send_whole(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _close(scope: Scope, receive: Receive, *, graceful: bool) -> None:
    """Close the connection (flushing what was sent, or with an RST) and wait until the
    server has noticed, so it does not try to answer on our behalf."""
    transport = scope.get("extensions", {}).get(TRANSPORT_KEY)
    if transport is None:
        raise RuntimeError("fault injection needs the server's TransportH11Protocol")
    if graceful:
        transport.close()
    else:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: the close sends an RST, as a crashed peer or a middlebox would.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_until_disconnect(receive), 5.0)

"""The transport under the catalog and check clients
(:class:`~driver_review.catalog.transport.AiohttpTransport`), against a real server on
loopback that answers each request as the test scripts it: what httpx's own transport
would have given the caller (the request as sent, the response, the errors, the trace
events), and connections kept or dropped as they should be."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from driver_review.catalog.transport import AiohttpTransport

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A loopback HTTP/1.1 server: each request's raw bytes are kept, and ``answer``
    writes the reply (or misbehaves); connections are counted."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                raw = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(raw)
                await self.answer(raw, writer)
                await writer.drain()
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def reply(status: str, body: bytes, *headers: str) -> Answer:
    async def answer(_raw: bytes, writer: asyncio.StreamWriter) -> None:
        lines = [f"HTTP/1.1 {status}", f"content-length: {len(body)}", *headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    return answer


def _client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AiohttpTransport(max_connections=4), **kwargs)


def test_the_request_goes_as_httpx_built_it_and_the_response_comes_back_whole() -> None:
    async def run() -> tuple[httpx.Response, bytes]:
        answer = reply("201 Made Here", b'{"ok": true}', "x-tag: a", "x-tag: b", "etag: W/1")
        async with Server(answer) as server:
            url = server.url.replace("http://", "http://user:p%40ss@") + "/v1/a%2Fb"
            async with _client() as client:
                resp = await client.put(url, params={"q": "x y"}, json={"k": "é"})
            return resp, server.requests[0]

    resp, raw = asyncio.run(run())
    head, _, body = raw.partition(b"\r\n\r\n")
    request_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    # The path as httpx encoded it (%2F not unquoted), the credentials as a header only.
    assert request_line == "PUT /v1/a%2Fb?q=x+y HTTP/1.1"
    assert headers["authorization"] == "basic " + base64.b64encode(b"user:p@ss").decode().lower()
    assert headers["content-type"] == "application/json"
    assert body == '{"k":"é"}'.encode()
    assert resp.status_code == 201 and resp.reason_phrase == "Made Here"
    assert resp.headers.get_list("x-tag") == ["a", "b"] and resp.headers["etag"] == "W/1"
    assert resp.json() == {"ok": True}


def test_a_kept_connection_is_reused_and_the_trace_sees_only_a_new_one_open() -> None:
    events: list[str] = []

    async def trace(event: str, _info: Any) -> None:
        events.append(event)

    async def run() -> int:
        async with Server(reply("200 OK", b"hi")) as server:
            async with _client() as client:
                for _ in range(3):
                    resp = await client.get(server.url, extensions={"trace": trace})
                    assert resp.text == "hi"
            return server.connections

    assert asyncio.run(run()) == 1
    assert events == [
        "connection.connect_tcp.started",
        "http11.send_request_headers.started",
        "http11.send_request_headers.started",
        "http11.send_request_headers.started",
    ]


def test_the_trace_holds_the_headers_until_it_returns() -> None:
    """:func:`~driver_review.limiter.on_time` waits inside the trace for a fresh permit:
    nothing may reach the server before it returns."""
    seen_by_server: list[int] = []

    async def run() -> None:
        async with Server(reply("200 OK", b"")) as server:

            async def trace(event: str, _info: Any) -> None:
                if event.endswith("send_request_headers.started"):
                    await asyncio.sleep(0.05)
                    seen_by_server.append(len(server.requests))

            async with _client() as client:
                await client.get(server.url, extensions={"trace": trace})

    asyncio.run(run())
    assert seen_by_server == [0]


def test_a_body_closed_before_its_end_drops_its_connection() -> None:
    """A byte cap stops reading: the rest of that body must not be read as the next
    response, so its connection is closed; a body read to its end keeps its connection."""

    async def run() -> tuple[int, bytes]:
        async with Server(reply("200 OK", b"x" * 200_000)) as server:
            async with _client() as client:
                async with client.stream("GET", server.url) as resp:
                    async for _chunk in resp.aiter_bytes():
                        break
                whole = await client.get(server.url)
                again = await client.get(server.url)
                assert whole.content == again.content
            return server.connections, whole.content[:1]

    assert asyncio.run(run()) == (2, b"x")


async def _close(_raw: bytes, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def _garbage(_raw: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    writer.close()


async def _truncated(_raw: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"y" * 10)
    writer.close()


async def _silent(_raw: bytes, _writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(5)


async def _huge_header(_raw: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nx-big: " + b"z" * 12_000 + b"\r\ncontent-length: 0\r\n\r\n")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (_close, httpx.RemoteProtocolError),  # closed without a response
        (_garbage, httpx.RemoteProtocolError),  # not HTTP
        (_truncated, httpx.RemoteProtocolError),  # closed before the whole body
        (_silent, httpx.ReadTimeout),  # nothing within the read timeout
    ],
    ids=["closed", "garbage", "truncated", "silent"],
)
def test_a_failure_is_the_httpx_error_it_stands_for(answer: Answer, error: type) -> None:
    async def run() -> BaseException:
        timeout = httpx.Timeout(5.0, read=0.3)
        async with Server(answer) as server, _client(timeout=timeout) as client:
            with pytest.raises(httpx.HTTPError) as caught:
                await client.get(server.url)
            return caught.value

    exc = asyncio.run(run())
    assert type(exc) is error, repr(exc)
    assert exc.request.url.host == "127.0.0.1"


def test_a_refused_connection_is_a_connect_error() -> None:
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        async with _client() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")

    asyncio.run(run())


def test_headers_as_long_as_httpx_allows_are_read() -> None:
    async def run() -> str:
        async with Server(_huge_header) as server, _client() as client:
            return (await client.get(server.url)).headers["x-big"]

    assert asyncio.run(run()) == "z" * 12_000


def test_a_pool_of_n_connections_has_at_most_n_open() -> None:
    async def slow(_raw: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    async def run() -> int:
        async with Server(slow) as server:
            async with _client() as client:  # 4 connections
                await asyncio.gather(*(client.get(server.url) for _ in range(12)))
            return server.connections

    assert asyncio.run(run()) == 4


def test_a_pool_needs_a_connection() -> None:
    with pytest.raises(ValueError, match="max_connections must be at least 1, got 0"):
        AiohttpTransport(max_connections=0)

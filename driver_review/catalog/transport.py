"""The HTTP transport under every catalog and check client: httpx's API on aiohttp's
connection pool.

httpx's own pool (httpcore) looks at every connection it holds each time a request starts
and each time one ends, and asks each idle one whether the server closed it, through
anyio's socket attributes: a ``getpeername`` call and a dict built per connection. At 32
requests in flight on a 64-connection pool that is 2.7 ms of CPU per request; the same
requests through aiohttp's pool (C parser, a free-list of idle connections) cost 0.35 ms
on this machine (one client, 4,000 GETs to the simulator). Only the pool is aiohttp's;
the rest (auth, redirects, cookies, decoding, the byte caps of
:class:`~driver_review.catalog.http.HttpCatalog`) is still httpx's.

What maps where:

- timeouts: httpx's ``connect`` bounds opening a connection (``sock_connect``), ``pool``
  waiting for one and opening it (``connect``), ``read`` each read (``sock_read``);
  ``write`` has no counterpart (the callers bound the whole exchange);
- errors: each aiohttp failure becomes the httpx error a caller of httpx's own transport
  would have seen (a refused connection ``ConnectError``, a connection closed before the
  whole response ``RemoteProtocolError``, a read that timed out ``ReadTimeout``, ...);
- the ``trace`` extension: a request that opens a connection calls it with
  ``connection.connect_tcp.started`` first; every request then calls it with
  ``http11.send_request_headers.started`` just before its headers leave, as httpcore
  does (:func:`~driver_review.limiter.on_time` holds a late request there);
- the URL goes as httpx encoded it, its credentials as the header httpx made of them;
- cookies are httpx's alone, responses are decoded by httpx (aiohttp passes the body
  through), redirects are httpx's to follow;
- headers up to 16 KiB a line, as httpx's parser allows (aiohttp's default is 8 KiB).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import yarl
from aiohttp import http_exceptions

MAX_HEADER_BYTES = 16 * 1024
KEEPALIVE_S = 5.0  # httpx's keep-alive expiry


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session per event loop, opened on the first request (a session belongs
    to the loop it was made in); ``max_connections`` bounds the connections it holds."""

    def __init__(self, *, max_connections: int = 100, keepalive_s: float = KEEPALIVE_S) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None and self._loop is loop and not self._session.closed:
            return self._session
        traces = aiohttp.TraceConfig()
        traces.on_connection_create_start.append(_connecting)
        traces.on_connection_create_end.append(_sending)
        traces.on_connection_reuseconn.append(_sending)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, keepalive_timeout=self.keepalive_s
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trace_configs=[traces],
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
        )
        self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._open()
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()
        with _as_httpx(request):
            response = await session.request(
                request.method,
                _target(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,
                compress=None,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
                trace_request_ctx=SimpleNamespace(trace=request.extensions.get("trace")),
            )
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("latin-1", "replace")
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def _target(url: httpx.URL) -> yarl.URL:
    """The URL to send to, as httpx encoded it (aiohttp must not quote it again), and
    without credentials: httpx turned those into an ``Authorization`` header already."""
    if url.userinfo:
        url = url.copy_with(username=None, password=None)
    return yarl.URL(str(url), encoded=True)


class _Body(httpx.AsyncByteStream):
    """A response body as it arrives; closed early (a byte cap), its connection is
    dropped, not reused."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


async def _connecting(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    trace = ctx.trace_request_ctx.trace
    if trace is not None:
        await trace("connection.connect_tcp.started", {})


async def _sending(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
    trace = ctx.trace_request_ctx.trace
    if trace is not None:
        await trace("http11.send_request_headers.started", {})


@contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    """Re-raises an aiohttp failure as the httpx error it stands for, the aiohttp one its
    cause."""
    try:
        yield
    except httpx.HTTPError:
        raise
    except Exception as exc:
        mapped = _httpx_class(exc)
        if mapped is None:
            raise
        raise mapped(str(exc) or type(exc).__name__, request=request) from exc


def _httpx_class(exc: BaseException) -> type[httpx.TransportError] | None:
    """The httpx error for an aiohttp one (the most specific class first), or None for
    an error that is not the transport's (it propagates as it is)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return httpx.ReadTimeout
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return httpx.ProxyError
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientResponseError
        | http_exceptions.HttpProcessingError,
    ):
        return httpx.RemoteProtocolError
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol
    if isinstance(exc, aiohttp.ClientError | OSError):
        return httpx.ReadError
    return None

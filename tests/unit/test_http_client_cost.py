"""What an HTTP call costs beyond the request itself, as the package is installed.

httpcore asks which async library runs it by importing ``sniffio`` each time it makes a
lock, an event or a semaphore: several times per request. When sniffio is missing, that
import fails, and Python does not remember a failed import, so every request searched
``sys.path`` again. In a Ray worker, whose path is long, that took about a quarter of a
stage worker's CPU. The package depends on sniffio so that no request searches anything.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import sys

import httpx

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class _Recorder(importlib.abc.MetaPathFinder):
    """Sees every module lookup that reaches the import system (not ``sys.modules`` hits)."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        self.looked_up.append(fullname)
        return None  # the real finders answer


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionResetError):
        pass
    writer.close()


async def _requests(n: int, recorder: _Recorder | None) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        # Several connections, as a worker's concurrent calls open.
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=4)) as client:
            await client.get(url)  # whatever is imported lazily once is imported now
            if recorder is not None:
                sys.meta_path.insert(0, recorder)
            try:
                for _ in range(n // 4):
                    answers = await asyncio.gather(*(client.get(url) for _ in range(4)))
                    assert all(a.status_code == 200 for a in answers)
            finally:
                if recorder is not None:
                    sys.meta_path.remove(recorder)
    finally:
        server.close()
        await server.wait_closed()


def test_http_requests_search_for_no_module() -> None:
    asyncio.run(_requests(4, None))  # a first client's lazy imports happen here
    recorder = _Recorder()
    asyncio.run(_requests(40, recorder))
    assert recorder.looked_up == [], (
        f"{len(recorder.looked_up)} module lookups in 40 requests: "
        f"{sorted(set(recorder.looked_up))}"
    )

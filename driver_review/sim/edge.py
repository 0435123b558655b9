"""What stands between a client and the catalog's routes, in order: rate limit, latency,
faults. Only ``/v1`` is affected; the ``/_sim`` oracle and the OpenAPI document are not
limited, delayed or faulted, and not counted.

An outer ASGI wrapper rather than FastAPI middleware because some faults must act on the
raw connection (see :mod:`driver_review.sim.faults`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time

from starlette.routing import Match

from driver_review.sim.faults import ASGIApp, FaultInjector, Message, Receive, Scope, Send
from driver_review.sim.ratelimit import TokenBucket, ratelimit_headers, retry_after
from driver_review.sim.settings import SimSettings
from driver_review.sim.stats import SimStats


class Edge:
    def __init__(self, app: ASGIApp, settings: SimSettings, stats: SimStats) -> None:
        self.app = app
        self.settings = settings
        self.stats = stats
        self.bucket = (
            TokenBucket(settings.rate_limit, settings.burst) if settings.rate_limit else None
        )
        self.faults = FaultInjector(
            settings.fault_rate, seed=settings.seed, timeout_s=settings.fault_timeout_s
        )
        self._latency_rng = random.Random(f"{settings.seed}/latency")
        self._loop: asyncio.AbstractEventLoop | None = None

    def release_hung(self) -> None:
        """Thread-safe: end hanging "timeout" faults so that the server can stop promptly."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.faults.release_hung)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._loop = asyncio.get_running_loop()
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        route = self._route(scope)
        extra: list[tuple[bytes, bytes]] = []
        admission = self.bucket.try_acquire() if self.bucket else None
        if self.bucket and admission and self.settings.ratelimit_headers:
            extra = [
                (k.encode(), v.encode())
                for k, v in ratelimit_headers(self.bucket, admission).items()
            ]
        await self._delay()
        if admission is not None and not admission.admitted:
            await self._too_many(send, admission.wait_s, extra)
            self.stats.count_request(route, "429")
            return
        kind = self.faults.pick(scope["method"])
        if kind is not None:
            self.stats.faults[kind] += 1
            status = await self.faults.play(kind, scope, receive, send, self.app)
            self.stats.count_request(route, status)
            return
        status_seen = "aborted"

        async def send_with_headers(message: Message) -> None:
            nonlocal status_seen
            if message["type"] == "http.response.start":
                status_seen = str(message["status"])
                if extra:
                    message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            self.stats.count_request(route, status_seen)

    def _route(self, scope: Scope) -> str:
        """``"GET /v1/drivers/{id}"``: the route template, so stats do not grow per id."""
        method = scope["method"]
        router = getattr(self.app, "router", None)
        for candidate in getattr(router, "routes", ()):
            match, _ = candidate.matches(scope)
            if match == Match.FULL:
                return f"{method} {candidate.path}"
        return f"{method} (no route)"

    async def _delay(self) -> None:
        mean_ms = self.settings.latency_ms
        if mean_ms <= 0:
            return
        delay_ms = max(0.0, self._latency_rng.gauss(mean_ms, self.settings.jitter_ms))
        await asyncio.sleep(delay_ms / 1000)

    async def _too_many(self, send: Send, wait_s: float, extra: list[tuple[bytes, bytes]]) -> None:
        value = retry_after(wait_s, self.settings.retry_after_format, now=time.time())
        body = json.dumps(
            {"detail": f"rate limit exceeded ({self.settings.rate_limit:g} requests/s)"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", value.encode()),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

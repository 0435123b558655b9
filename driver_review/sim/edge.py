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
from dataclasses import dataclass

from starlette.routing import Match

from driver_review.sim.auth import AuthGate, refuse
from driver_review.sim.faults import ASGIApp, FaultInjector, Message, Receive, Scope, Send
from driver_review.sim.limiters import Shape, make_shape
from driver_review.sim.ratelimit import (
    QuotaWindow,
    TokenBucket,
    merge_headers,
    ratelimit_headers,
    retry_after,
)
from driver_review.sim.settings import SimSettings
from driver_review.sim.stats import SimStats


@dataclass
class Limits:
    """One port's limits: a token bucket (its RateLimit headers sent when ``headers``) and
    a quota window (whose headers are always sent: a quota is announced, not discovered)."""

    bucket: TokenBucket | None
    quota: QuotaWindow | None = None
    headers: bool = False
    label: str = ""  # prefix of this port's routes in stats ("checks " on the checks port)
    # Another shape instead of the bucket (``--limiter``); it may hold a request (nginx's
    # delay) and, like the real nginx and HAProxy, ``leaky*``/``haproxy`` send no Retry-After.
    shape: Shape | None = None
    retry_after: bool = True


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        settings: SimSettings,
        stats: SimStats,
        *,
        gate: AuthGate | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.stats = stats
        self.gate = gate
        self.limits = limits or _catalog_limits(settings)
        self.bucket = self.limits.bucket
        self.faults = FaultInjector(
            settings.fault_rate, seed=settings.seed, timeout_s=settings.fault_timeout_s
        )
        self._latency_rng = random.Random(f"{settings.seed}/latency")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held_s = 0.0

    def release_hung(self) -> None:
        """Thread-safe: end hanging "timeout" faults so that the server can stop promptly."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.faults.release_hung)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._loop is None:
            # (the checks port runs without a lifespan: its first request tells the loop)
            self._loop = asyncio.get_running_loop()
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        route = self.limits.label + self._route(scope)
        if self.gate is not None and not self.gate.allows(scope):
            # Before the limits: a refused request spends none of a paying client's quota.
            await refuse(send)
            self.stats.count_request(route, "401")
            return
        admitted, wait_s, extra = self._admit()
        await self._delay()
        if admitted and self._held_s > 0:
            await asyncio.sleep(self._held_s)
        if not admitted:
            await self._too_many(send, wait_s, extra)
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

    def _admit(self) -> tuple[bool, float, list[tuple[bytes, bytes]]]:
        """``(admitted, wait_s, RateLimit headers)``; a request the bucket refuses spends
        no quota."""
        limits, parts = self.limits, []
        admitted, wait_s = True, 0.0
        self._held_s = 0.0  # read right after, before any await
        if limits.shape is not None:
            v = limits.shape.admit(time.monotonic())
            admitted, wait_s, self._held_s = v.admitted, v.wait_s, v.delay_s
        if limits.bucket is not None:
            a = limits.bucket.try_acquire()
            admitted, wait_s = a.admitted, a.wait_s
            if limits.headers:
                parts.append(ratelimit_headers(limits.bucket, a))
        if limits.quota is not None:
            q = limits.quota.try_acquire(consume=admitted)
            if admitted and not q.admitted:
                admitted, wait_s = False, q.reset_s
            parts.append(limits.quota.headers(q))
        extra = [(k.encode(), v.encode()) for k, v in merge_headers(*parts).items()]
        return admitted, wait_s, extra

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
        body = json.dumps({"detail": "rate limit exceeded"}).encode()
        told = [(b"retry-after", value.encode())] if self.limits.retry_after else []
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *told,
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _catalog_limits(settings: SimSettings) -> Limits:
    rate = settings.rate_limit
    if rate is None:
        return Limits(None)
    if settings.limiter == "token":
        return Limits(TokenBucket(rate, settings.burst), headers=settings.ratelimit_headers)
    shape = make_shape(
        settings.limiter, rate, burst=settings.rate_burst, window_s=settings.rate_window_s or 1.0
    )
    return Limits(
        None, shape=shape, retry_after=not settings.limiter.startswith(("leaky", "haproxy"))
    )

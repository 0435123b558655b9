"""The rate governor as one named actor holding a :class:`~driver_review.governor.RateGovernor`
per endpoint key, and the client-side :class:`RemoteLimiter` that leases from it.

Workers lease permits a few at a time (``GovernorConfig.lease_size``) so pacing is not a
round trip per call; successes are counted locally and travel with the next lease, and
only 429s and rate-limit headers are sent at once, since those change the schedule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import httpx

from driver_review.config import GovernorConfig
from driver_review.governor import Grant, RateGovernor
from driver_review.limiter import PermitBucket
from driver_review.retry import parse_retry_after
from driver_review.runtime import metrics
from driver_review.runtime.names import ActorRef


class GovernorService:
    def __init__(self, config: GovernorConfig, *, instance: str) -> None:
        self.config = config
        self.instance = instance
        self._governors: dict[str, RateGovernor] = {}

    def _get(self, key: str) -> RateGovernor:
        gov = self._governors.get(key)
        if gov is None:
            gov = self._governors[key] = RateGovernor(self.config, key=key)
        return gov

    async def lease(self, key: str, n: int, successes: int = 0) -> Grant:
        gov = self._get(key)
        now = time.monotonic()
        for _ in range(successes):
            gov.observe(200, {}, now)
        grant = gov.lease(n, now)
        tags = {"instance": self.instance, "key": key}
        metrics.governor_rate().set(gov.rate, tags)
        metrics.governor_limit().set(gov.stats(now)["limit_estimate"] or 0.0, tags)
        return grant

    async def give_back(self, key: str, grant: Grant, unused: int) -> None:
        self._get(key).give_back(grant, unused, time.monotonic())

    async def observe(self, key: str, status: int, headers: dict[str, str]) -> int:
        return self._get(key).observe(status, headers, time.monotonic())

    async def stats(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        return {key: gov.stats(now) for key, gov in self._governors.items()}


class RemoteLimiter:
    """:class:`~driver_review.catalog.base.Limiter` over the governor actor."""

    def __init__(self, governor: ActorRef, key: str, *, batch: int) -> None:
        self.governor = governor
        self.key = key
        self._bucket = PermitBucket(self._lease, batch=batch, give_back=self._give_back)
        self._successes = 0
        self.waiting = 0
        #: The endpoint's rate as of the last lease (None before one): workers size their
        #: demand by it.
        self.rate: float | None = None
        self._paused_until = 0.0  # monotonic, as of the last lease or Retry-After seen
        self._pending: set[asyncio.Task] = set()

    async def _lease(self, n: int) -> Grant:
        successes, self._successes = self._successes, 0
        grant: Grant = await self.governor.call("lease", self.key, n, successes)
        self._bucket.note_epoch(grant.epoch)
        self.rate = grant.rate
        self._paused_until = time.monotonic() + grant.paused_for_s
        return grant

    def paused_for_s(self) -> float:
        """How much longer the endpoint is paused, as this process last heard."""
        return max(0.0, self._paused_until - time.monotonic())

    async def _give_back(self, grant: Grant, unused: int) -> None:
        await self.governor.call("give_back", self.key, grant, unused)

    async def acquire(self) -> None:
        self.waiting += 1
        try:
            await self._bucket.acquire()
        finally:
            self.waiting -= 1

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        pause_s = None
        if status in (429, 503):
            pause_s = parse_retry_after(httpx.Headers(headers).get("retry-after"), time.time())
        has_policy = (
            status == 429 or pause_s is not None
            or any(k.lower().startswith("ratelimit") for k in headers)
        )
        if not has_policy:
            self._successes += 1
            return
        if pause_s is not None:
            # Known here at once, before the governor's answer: demand stops for it.
            self._paused_until = max(self._paused_until, time.monotonic() + pause_s)
        if status == 429 or pause_s is not None:
            self._bucket.drop()  # a pause or a slower schedule is coming: don't spend these
        task = asyncio.get_running_loop().create_task(
            self.governor.call("observe", self.key, status, dict(headers))
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        await self._bucket.aclose()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"waiting": self.waiting, "rate": self.rate, "paused_for_s": self.paused_for_s(),
                **self._bucket.stats()}

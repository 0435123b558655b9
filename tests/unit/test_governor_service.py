"""The governor actor's class without Ray: successes are reported with their ages (the
meter sees them when they happened), and those before a 429 travel with it."""

from __future__ import annotations

import asyncio

from driver_review.config import GovernorConfig
from driver_review.runtime.governor_actor import GovernorService

KEY = "http://127.0.0.1:9"


def test_successes_count_whether_reported_as_ages_or_a_count() -> None:
    async def run() -> dict:
        service = GovernorService(GovernorConfig(), instance="t")
        await service.lease(KEY, 1, 3)
        await service.lease(KEY, 1, [0.5, 0.2, 99.0])  # a stalled report: clamped, counted
        await service.observe(KEY, 503, {"Retry-After": "1"}, [0.1, 0.0])
        return (await service.stats())[KEY]

    stats = asyncio.run(run())
    assert stats["ok"] == 8 and stats["503s"] == 1 and stats["paused_for_s"] > 0


def test_the_successes_before_a_429_reach_the_governor_with_it() -> None:
    """The caller's unreported successes travel with the 429 (not at its next lease), so
    the meter the 429 is judged by holds what the server served just before it."""

    async def run() -> dict:
        service = GovernorService(GovernorConfig(), instance="t")
        await service.lease(KEY, 1)
        await service.observe(KEY, 429, {}, [1.0 - i / 40 for i in range(40)])
        return (await service.stats())[KEY]  # before any further lease

    at_429 = asyncio.run(run())
    assert at_429["ok"] == 40 and at_429["429s"] == 1

"""A check that takes a known time: scenario 7 makes one stage slow with it.

Named in a pipeline file as ``{kind: python, target: "driver_review.bench.slow_check:slow",
options: {delay_s: 1.0}}``; importable wherever the package is installed (Ray workers too).
"""

from __future__ import annotations

import asyncio

from driver_review.catalog.models import DriverRecord
from driver_review.checks import CheckContext, Outcome


async def slow(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    await asyncio.sleep(float(ctx.options.get("delay_s", 1.0)))
    return Outcome.ok()

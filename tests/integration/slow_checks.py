"""Checks that take a known time, to make one stage slow on purpose.

Loaded by Ray workers as ``tests.integration.slow_checks:…`` (Ray puts the driver's
working directory, the repository root under pytest, on the workers' path).
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib

from driver_review.catalog.models import DriverRecord
from driver_review.checks import CheckContext, Outcome


async def slow(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    await asyncio.sleep(float(ctx.options.get("delay_s", 1.0)))
    return Outcome.ok()


async def slow_some(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    """``slow`` for the drivers whose id hashes to ``parity`` (mod 2), at once for the rest:
    two stages given opposite parities both hold work (neither starves the other)."""
    if zlib.crc32(driver.id.encode()) % 2 == int(ctx.options.get("parity", 0)):
        await asyncio.sleep(float(ctx.options.get("delay_s", 1.0)))
    return Outcome.ok()


def blocking(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    """A synchronous check that blocks its worker's event loop for ``delay_s`` (a user's
    check doing blocking I/O): the worker answers nothing meanwhile. With ``once`` (a
    file path), only the call that creates that file blocks, in whichever process."""
    once = ctx.options.get("once")
    if once is not None:
        try:
            os.close(os.open(str(once), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return Outcome.ok()
    time.sleep(float(ctx.options.get("delay_s", 1.0)))
    return Outcome.ok()

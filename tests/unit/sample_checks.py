"""Example user checks for the ``python`` check kind, referenced by test_checks.py as
``sample_checks:<name>`` (the test puts this directory on ``sys.path``)."""

from __future__ import annotations

from driver_review.catalog.models import DriverRecord
from driver_review.checks import CheckContext, Outcome


async def vendor_allowed(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    """Async, returns an Outcome, reads its options."""
    allowed = str(ctx.options.get("vendors", "")).split(",")
    if driver.vendor_id in allowed:
        return Outcome.ok(vendor_id=driver.vendor_id)
    return Outcome.fail(f"vendor {driver.vendor_id} is not allowed")


def has_os(driver: DriverRecord, ctx: CheckContext) -> bool:
    """Sync, returns a bool."""
    return driver.os is not None


class MaxHardwareIds:
    """A callable object whose ``__call__`` is async."""

    async def __call__(self, driver: DriverRecord, ctx: CheckContext) -> bool:
        return len(driver.hardware_ids) <= int(ctx.options.get("max", 8))


max_hardware_ids = MaxHardwareIds()


def returns_number(driver: DriverRecord, ctx: CheckContext) -> int:
    return 1


def takes_one_arg(driver: DriverRecord) -> bool:
    return True


NOT_CALLABLE = 42

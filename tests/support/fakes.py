"""Fakes for pure tests: a valid driver record to vary, the two catalog methods the checks
call, answered from dicts (an answer may be an exception to raise), and a clock with the
sleep that advances it."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime
from typing import Any

from driver_review.catalog.models import CheckResponse, DriverRecord
from driver_review.errors import NotFound

PACKAGE = b"driver package bytes " * 1000


def make_driver(**changes: Any) -> DriverRecord:
    base: dict[str, Any] = {
        "id": "drv-1",
        "vendor_id": "8086",
        "vendor": "Intel",
        "name": "Ethernet Controller",
        "version": "2.1.10",
        "previous_version": "2.1.9",
        "stage": "intake",
        "status": "in_review",
        "hardware_ids": ["PCI\\VEN_8086&DEV_1533"],
        "package": {"size": len(PACKAGE), "sha256": hashlib.sha256(PACKAGE).hexdigest()},
        "updated_at": datetime(2025, 1, 1, tzinfo=UTC),
    }
    return DriverRecord.model_validate(base | changes)


class FakeCatalog:
    """The two catalog methods checks use, backed by dicts; answers can be exceptions."""

    def __init__(self) -> None:
        self.packages: dict[str, bytes | Exception] = {"drv-1": PACKAGE}
        self.answers: dict[str, dict[str, Any] | Exception] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.delay_s = 0.0

    async def get_package(self, driver_id: str) -> bytes:
        found = self.packages.get(driver_id) or NotFound(f"no package for {driver_id}")
        if isinstance(found, Exception):
            raise found
        return found

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        self.calls.append((check, driver_id, version))
        await asyncio.sleep(self.delay_s)
        answer = self.answers.get(check, {"passed": True})
        if isinstance(answer, Exception):
            raise answer
        body = {"check": check, "driver_id": driver_id, "version": version} | answer
        return CheckResponse.model_validate(body)


class FakeTime:
    """A clock and an ``asyncio.sleep`` stand-in that advances it, recording each sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay_s: float) -> None:
        self.slept.append(delay_s)
        self.now += delay_s

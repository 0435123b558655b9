"""The simulator's three ping shapes: summary (default), fat (whole record), thin (id)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from driver_review.catalog.models import DriverRecord, PackageInfo
from driver_review.sim import SimSettings
from driver_review.sim.webhooks import ping_body


def test_thin_fat_and_summary_pings_carry_what_their_name_says() -> None:
    rec = DriverRecord(
        id="drv-1",
        vendor_id="10de",
        vendor="NVIDIA",
        name="gfx",
        version="2.0",
        stage="intake",
        status="in_review",
        hardware_ids=["PCI\\VEN_10DE"],
        package=PackageInfo(size=1, sha256="0" * 64),
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    thin = json.loads(ping_body(rec, thin=True))
    assert thin["type"] == "driver.updated" and thin["data"] == {"id": "drv-1"}
    summary = json.loads(ping_body(rec))["data"]
    assert summary["version"] == "2.0" and "record" not in summary
    fat = json.loads(ping_body(rec, fat=True))["data"]
    assert fat["record"]["id"] == "drv-1"


def test_fat_and_thin_pings_together_are_refused() -> None:
    with pytest.raises(Exception, match="choose one"):
        SimSettings(fat_pings=True, thin_pings=True)

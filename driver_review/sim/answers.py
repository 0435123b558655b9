"""Answers of the catalog's external checks (``POST /v1/checks/{check}``).

Each is a function of the version's seeded spec; only ``crash_telemetry`` numbers drift
from call to call, and never across the threshold: the base rate is at most 0.016 or at
least 0.026, and the drift stays within ±10%.
"""

from __future__ import annotations

import random
from typing import Any

from driver_review.catalog.models import CheckResponse
from driver_review.sim import data

SCANNER = "simscan 4.2"
_SIGNATURES = ("DriverHijack.A", "Rootkit.B", "Keylogger.C", "Backdoor.D")


def answer(
    check: str,
    driver_id: str,
    spec: data.VersionSpec,
    *,
    calls: int,
    drift: random.Random,
    package_size: int,
) -> CheckResponse:
    """The answer about ``spec``'s version; ``calls`` counts telemetry calls so far."""
    passed, reason, details = _verdict(check, spec, calls, drift, package_size)
    return CheckResponse(
        check=check, driver_id=driver_id, version=spec.version,
        passed=passed, reason=reason, details=details,
    )  # fmt: skip


def _verdict(
    check: str, spec: data.VersionSpec, calls: int, drift: random.Random, package_size: int
) -> tuple[bool, str, dict[str, Any]]:
    fails = spec.fate == check
    if check == "malware_scan":
        if fails:
            sig = "Trojan:Win64/" + _SIGNATURES[sum(map(ord, spec.version)) % len(_SIGNATURES)]
            return False, f"malware detected: {sig}", {"engine": SCANNER, "signature": sig}
        return True, "", {"engine": SCANNER, "scanned_bytes": package_size}
    if check == "crash_telemetry":
        rate = spec.crash_rate * drift.uniform(0.9, 1.1)
        installs = spec.installs + calls * drift.randint(0, 40)
        details: dict[str, Any] = {"crash_rate": round(rate, 6), "installs": installs}
        if rate >= data.CRASH_RATE_THRESHOLD:
            return False, f"crash rate {rate:.4f} >= {data.CRASH_RATE_THRESHOLD}", details
        return True, "", details
    if check == "hwid_conflicts":
        if fails:
            hwid = spec.hardware_ids[0] if spec.hardware_ids else "PCI\\VEN_0000&DEV_0000"
            other = spec.conflict_with or data.driver_id(0)
            conflict = {"hardware_id": hwid, "driver_id": other}
            return False, f"{hwid} is already claimed by {other}", {"conflicts": [conflict]}
        return True, "", {"conflicts": []}
    raise ValueError(f"not an external check: {check!r}")

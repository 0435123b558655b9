"""The checks of the default pipeline (see the Domain table in DESIGN.md).

``intake`` rules look only at the record; ``security`` hashes the package off the event
loop and asks the catalog's malware scan; ``compatibility`` asks the catalog's external
decision APIs, whose answers change over time and so are never cached here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from driver_review.catalog.models import DriverRecord
from driver_review.checks.base import Check, CheckContext, Outcome
from driver_review.errors import MalformedResponse

_HWID = re.compile(
    r"PCI\\VEN_[0-9A-F]{4}&DEV_[0-9A-F]{4}(?:&SUBSYS_[0-9A-F]{8})?(?:&REV_[0-9A-F]{2})?",
    re.IGNORECASE,
)
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")


async def metadata_complete(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    missing = [
        f for f in ("name", "vendor", "vendor_id", "version") if not getattr(driver, f).strip()
    ]
    if not any(h.strip() for h in driver.hardware_ids):
        missing.append("hardware_ids")
    if missing:
        return Outcome.fail(f"missing or blank: {', '.join(missing)}", missing=missing)
    return Outcome.ok()


async def hardware_ids_valid(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    bad = [h for h in driver.hardware_ids if not _HWID.fullmatch(h)]
    if bad:
        # Name the first few only: the reason ends up in a Parquet column and a PUT body.
        shown = ", ".join(repr(h) for h in bad[:3])
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        return Outcome.fail(f"invalid hardware id {shown}{more}", invalid=bad)
    return Outcome.ok()


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"10.2.0.7"`` → ``(10, 2, 0, 7)``; anything else → ``None``."""
    return tuple(int(p) for p in text.split(".")) if _VERSION.fullmatch(text) else None


async def version_increases(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    current = parse_version(driver.version)
    if current is None:
        return Outcome.fail(f"version {driver.version!r} is not dot-separated integers")
    if driver.previous_version is None:
        return Outcome.ok()
    previous = parse_version(driver.previous_version)
    if previous is None:
        return Outcome.fail(
            f"previous version {driver.previous_version!r} is not dot-separated integers"
        )
    if current <= previous:
        return Outcome.fail(
            f"version {driver.version} does not increase on {driver.previous_version}"
        )
    return Outcome.ok()


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def package_digest(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    data = await ctx.catalog.get_package(driver.id)
    expected = driver.package
    if len(data) != expected.size:
        return Outcome.fail(
            f"package is {len(data)} bytes, record says {expected.size}",
            size=len(data),
            expected_size=expected.size,
        )
    # Hashing megabytes would stall every other check sharing this loop.
    actual = await ctx.run_cpu(_sha256_hex, data)
    if actual != expected.sha256:
        return Outcome.fail(
            f"package sha256 {actual[:12]}… does not match record {expected.sha256[:12]}…",
            sha256=actual,
            expected_sha256=expected.sha256,
        )
    return Outcome.ok(sha256=actual)


def external(check: str) -> Check:
    """A check answered by the catalog's ``POST /v1/checks/{check}``.

    Option ``check`` renames the remote check, for a vendor whose name differs.
    """

    async def run(driver: DriverRecord, ctx: CheckContext) -> Outcome:
        remote = str(ctx.options.get("check", check))
        answer = await ctx.catalog.run_check(remote, driver.id, driver.version)
        # A verdict about another version is no verdict about this one.
        if answer.driver_id != driver.id or answer.version != driver.version:
            raise MalformedResponse(
                f"check {remote}: answer is for {answer.driver_id}@{answer.version}, "
                f"asked for {driver.id}@{driver.version}",
                route=f"/v1/checks/{remote}",
            )
        return Outcome(answer.passed, answer.reason, dict(answer.details))

    run.__name__ = run.__qualname__ = check
    return run


@dataclass(frozen=True, slots=True)
class Builtin:
    """A shipped check and the option names it understands (others are a config error)."""

    run: Check
    options: frozenset[str] = frozenset()


BUILTINS: Mapping[str, Builtin] = {
    "metadata_complete": Builtin(metadata_complete),
    "hardware_ids_valid": Builtin(hardware_ids_valid),
    "version_increases": Builtin(version_increases),
    "package_digest": Builtin(package_digest),
    "malware_scan": Builtin(external("malware_scan"), frozenset({"check"})),
    "crash_telemetry": Builtin(external("crash_telemetry"), frozenset({"check"})),
    "hwid_conflicts": Builtin(external("hwid_conflicts"), frozenset({"check"})),
}

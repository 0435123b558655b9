"""Deterministic catalog data for the simulator: drivers, versions and their seeded fates.

Everything here is a pure function of ``(seed, driver index or id, generation)``, so two
simulators with the same seed hold the same catalog and the same ground truth.

A version's **fate** is the first check of the default pipeline it is seeded to fail
(``None``: it passes everything). The data is shaped so that the local checks really see
the failure, and only that one:

- ``metadata_complete``: ``name`` or ``vendor`` is ``""``, or ``hardware_ids`` is ``[]``;
- ``hardware_ids_valid``: one id is malformed; a valid id is exactly
  ``PCI\\VEN_XXXX&DEV_XXXX`` (4 upper-case hex digits each);
- ``version_increases``: ``version`` < ``previous_version`` as integer tuples (a brand-new
  driver has ``previous_version = None``, which passes);
- ``package_digest``: ``package.sha256`` is not the sha256 of the served bytes;
- the external checks (``malware_scan``, ``crash_telemetry``, ``hwid_conflicts``) answer
  from the fate (see :mod:`driver_review.sim.state`).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from driver_review.catalog.models import Status

#: The default pipeline (mirrors ``driver_review/default_pipeline.yaml``; a unit test keeps
#: them equal). The simulator needs it to compute the truth.
PIPELINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("intake", ("metadata_complete", "hardware_ids_valid", "version_increases")),
    ("security", ("package_digest", "malware_scan")),
    ("compatibility", ("crash_telemetry", "hwid_conflicts")),
)
STAGES: tuple[str, ...] = tuple(stage for stage, _ in PIPELINE)
STAGE_OF_CHECK: dict[str, str] = {c: stage for stage, checks in PIPELINE for c in checks}
EXTERNAL_CHECKS: frozenset[str] = frozenset({"malware_scan", "crash_telemetry", "hwid_conflicts"})

#: Share of versions that fail each check they reach ("a few %" per check).
FAIL_SHARE = 0.03
#: Crash rate at or above which ``crash_telemetry`` fails.
CRASH_RATE_THRESHOLD = 0.02

OS_CHOICES = ("Windows 10 x64", "Windows 11 x64", "Windows 11 ARM64", "Windows Server 2022")
_DAY_US = 86_400_000_000


@dataclass(frozen=True)
class PciVendor:
    id: str  # 4 hex digits, lower case as in pci.ids
    name: str
    devices: tuple[tuple[str, str], ...]  # (device id, device name)


@cache
def pci_vendors() -> tuple[PciVendor, ...]:
    """The vendors of the shipped ``pci.ids`` excerpt.

    Always the shipped excerpt, never the system's file, so that a seed means the same
    catalog on every machine.
    """
    text = resources.files("driver_review.sim").joinpath("pci.ids").read_text("utf-8")
    return parse_pci_ids(text)


def parse_pci_ids(text: str) -> tuple[PciVendor, ...]:
    vendors: list[PciVendor] = []
    current: tuple[str, str] | None = None
    devices: list[tuple[str, str]] = []

    def flush() -> None:
        if current is not None and devices:
            vendors.append(PciVendor(current[0], current[1], tuple(devices)))

    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if m := re.fullmatch(r"([0-9a-f]{4})  (.+)", line):
            flush()
            current, devices = (m.group(1), m.group(2).strip()), []
        elif (m := re.fullmatch(r"\t([0-9a-f]{4})  (.+)", line)) and current is not None:
            devices.append((m.group(1), m.group(2).strip()))
    flush()
    return tuple(vendors)


# --- identities -----------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """What stays the same across a driver's versions."""

    id: str
    vendor_id: str  # 4 upper-case hex digits
    vendor: str
    name: str
    hardware_ids: tuple[str, ...]
    os: str


def driver_id(index: int) -> str:
    return f"drv-{index:06d}"


def hardware_id(vendor_id: str, device_id: str) -> str:
    return f"PCI\\VEN_{vendor_id.upper()}&DEV_{device_id.upper()}"


_SUFFIXES = frozenset(
    {
        "corporation", "corp", "company", "inc", "co", "ltd", "llc", "technology",
        "technologies", "semiconductor", "electronics", "communications", "group",
        "subsidiaries", "and",
    }
)  # fmt: skip


def short_vendor(name: str) -> str:
    """``"Advanced Micro Devices, Inc. [AMD/ATI]"`` → ``"AMD"``; ``"Intel Corporation"`` →
    ``"Intel"``: the way vendors name their own drivers."""
    if m := re.search(r"\[([^\]]+)\]", name):
        return m.group(1).split("/")[0].strip()
    head = name.split(",")[0].split(" / ")[0]
    words = [w for w in head.split() if w.strip(".,").lower() not in _SUFFIXES]
    return " ".join(words) or name


_KINDS = tuple(
    (kind, re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + ")", re.IGNORECASE))
    for kind, words in (
        ("Display", ("geforce", "quadro", "radeon", "graphics", "gpu", "display", "vga", "tesla")),
        ("Audio", ("audio",)),
        ("Wireless", ("wireless", "wi-fi", "wifi", "wlan", "802.11")),
        ("Network", ("ethernet", "network", "connectx", "netxtreme", "nic", "lan")),
        ("Storage", ("sas", "sata", "raid", "nvme", "ahci", "ssd", "scsi", "fibre", "storage")),
        ("USB", ("usb", "xhci", "ehci")),
    )
)


def product_name(device_name: str) -> str:
    """The marketing name when pci.ids has one in brackets, else the device name."""
    if m := re.search(r"\[([^\]]+)\]", device_name):
        return m.group(1).strip()
    return device_name


def driver_kind(device_name: str) -> str:
    for kind, pattern in _KINDS:
        if pattern.search(device_name):
            return kind
    return "Device"


@cache
def driver_name(vendor_name: str, device_name: str) -> str:
    """``"NVIDIA GeForce GTX 1070 Ti Display Driver"``."""
    kind = driver_kind(device_name)
    return f"{short_vendor(vendor_name)} {product_name(device_name)} {kind} Driver"


def make_identity(seed: int, index: int) -> Identity:
    rng = random.Random(f"{seed}/identity/{index}")
    vendor = rng.choice(pci_vendors())
    main = rng.choice(vendor.devices)
    extra = rng.sample(vendor.devices, k=min(len(vendor.devices), rng.choice((0, 0, 1, 2))))
    devices = [main, *(d for d in extra if d != main)]
    name = driver_name(vendor.name, main[1])
    return Identity(
        id=driver_id(index),
        vendor_id=vendor.id.upper(),
        vendor=vendor.name,
        name=name,
        hardware_ids=tuple(hardware_id(vendor.id, d) for d, _ in devices),
        os=rng.choice(OS_CHOICES),
    )


# --- versions -------------------------------------------------------------------------

Version = tuple[int, int, int, int]


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def format_version(v: Version) -> str:
    return ".".join(str(part) for part in v)


def random_version(rng: random.Random) -> Version:
    return (rng.randint(1, 31), rng.randint(0, 9), rng.randint(0, 999), rng.randint(1000, 9999))


def version_above(v: Version, rng: random.Random) -> Version:
    a, b, c, d = v
    d += rng.randint(1, 500)
    if d > 9999:
        c, d = c + 1, d - 9999
    return (a, b, c, d)


def version_below(v: Version, rng: random.Random) -> Version | None:
    """A version strictly lower than ``v``; ``None`` when ``v`` is all zeros."""
    a, b, c, d = v
    if d > 0:
        return (a, b, c, d - rng.randint(1, min(d, 500)))
    if c > 0:
        return (a, b, c - 1, rng.randint(0, 9999))
    if b > 0:
        return (a, b - 1, rng.randint(0, 999), rng.randint(0, 9999))
    if a > 0:
        return (a - 1, rng.randint(0, 9), rng.randint(0, 999), rng.randint(0, 9999))
    return None


def draw_fate(rng: random.Random, entry_stage: str) -> str | None:
    """The first check, from ``entry_stage`` on, that this version fails (or ``None``)."""
    start = STAGES.index(entry_stage)
    for _stage, checks in PIPELINE[start:]:
        for check in checks:
            if rng.random() < FAIL_SHARE:
                return check
    return None


#: ``make_version(fate=DRAW)``: draw the fate from the seed.
DRAW = "<draw>"
#: ``make_version(previous=INVENT)``: invent a previous version (the initial catalog).
INVENT = "<invent>"


@dataclass(frozen=True)
class VersionSpec:
    """One version of a driver as the catalog serves it, with its seeded answers."""

    version: str
    previous_version: str | None
    entry_stage: str
    fate: str | None
    name: str
    vendor: str
    hardware_ids: tuple[str, ...]
    crash_rate: float  # base value; the served one drifts around it, same side of 0.02
    installs: int
    conflict_with: str | None  # the driver id claiming the same hardware id (hwid_conflicts)


def make_version(
    identity: Identity,
    seed: int,
    generation: int,
    *,
    entry_stage: str,
    previous: str | None,
    fate: str | None = DRAW,
    drivers_hint: int = 1,
) -> VersionSpec:
    """Version number ``generation`` of a driver (0 = the one the catalog starts with).

    ``previous`` is the version this one replaces (``None`` for a brand-new driver; for
    the initial catalog pass :data:`INVENT` to have one invented). ``fate`` is drawn by
    default (:data:`DRAW`); any other value forces it.
    """
    rng = random.Random(f"{seed}/version/{identity.id}/{generation}")
    chosen = draw_fate(rng, entry_stage) if fate == DRAW else fate
    if previous == INVENT:
        current = random_version(rng)
        prev_v = version_above(current, rng) if chosen == "version_increases" else None
        prev_v = prev_v or version_below(current, rng) or (0, 0, 0, 0)
        version, prev_text = current, format_version(prev_v)
    elif previous is None:
        if chosen == "version_increases":
            chosen = None  # a first release has nothing to be lower than
        version, prev_text = random_version(rng), None
    else:
        parts = (*parse_version(previous), 0, 0, 0, 0)
        base4: Version = (parts[0], parts[1], parts[2], parts[3])
        below = version_below(base4, rng) if chosen == "version_increases" else None
        if chosen == "version_increases" and below is None:
            chosen = None
        version, prev_text = below or version_above(base4, rng), previous

    name, vendor, hwids = identity.name, identity.vendor, identity.hardware_ids
    if chosen == "metadata_complete":
        which = rng.choice(("name", "vendor", "hardware_ids"))
        name = "" if which == "name" else name
        vendor = "" if which == "vendor" else vendor
        hwids = () if which == "hardware_ids" else hwids
    elif chosen == "hardware_ids_valid":
        bad = rng.choice(
            (
                "PCI\\VEN_ZZZZ&DEV_1",
                f"PCI\\VEN_{identity.vendor_id}&DEV_{rng.randint(0, 0xFF):02X}",
                f"PCI\\VEN_{identity.vendor_id}",
                f"PCI\\VEN_{identity.vendor_id}&DEV_G{rng.randint(0, 0xFFF):03X}",
            )
        )
        slot = rng.randrange(len(hwids))
        hwids = (*hwids[:slot], bad, *hwids[slot + 1 :])

    failing_crash = chosen == "crash_telemetry"
    crash = rng.uniform(0.026, 0.09) if failing_crash else rng.uniform(0.0005, 0.016)
    conflict = None
    if chosen == "hwid_conflicts":
        conflict = driver_id(rng.randrange(max(drivers_hint, 1)))
        if conflict == identity.id:
            conflict = driver_id(max(drivers_hint, 1))
    return VersionSpec(
        version=format_version(version),
        previous_version=prev_text,
        entry_stage=entry_stage,
        fate=chosen,
        name=name,
        vendor=vendor,
        hardware_ids=hwids,
        crash_rate=crash,
        installs=rng.randint(200, 250_000),
        conflict_with=conflict,
    )


@dataclass(frozen=True)
class InitialPlacement:
    """Where a driver of the initial catalog sits: its status, stage and version spec."""

    status: Status
    stage: str | None
    spec: VersionSpec
    age_us: int  # how long before the catalog's start it was last updated
    released_before_us: int  # released this long before that update


def initial_placement(identity: Identity, seed: int, drivers: int) -> InitialPlacement:
    """Most drivers wait at intake; some sit at later stages; some are already decided."""
    rng = random.Random(f"{seed}/placement/{identity.id}")
    u = rng.random()
    status: Status
    stage: str | None
    age_us = rng.randrange(1, 30 * _DAY_US)
    released_before_us = rng.randrange(0, 60 * _DAY_US)
    if u < 0.70:
        status, stage, entry, fate = "in_review", "intake", "intake", DRAW
    elif u < 0.80:
        status, stage, entry, fate = "in_review", "security", "security", DRAW
    elif u < 0.87:
        status, stage, entry, fate = "in_review", "compatibility", "compatibility", DRAW
    elif u < 0.97:
        status, stage, entry, fate = "published", None, "intake", None
    else:
        entry = rng.choice(STAGES)
        stage = entry
        status, fate = "rejected", rng.choice(dict(PIPELINE)[entry])
    spec = make_version(
        identity, seed, 0, entry_stage=entry, previous=INVENT, fate=fate, drivers_hint=drivers
    )
    if status == "rejected" and spec.fate is None:
        # The forced fate could not be realised (rare); then the version simply passed.
        status, stage = "published", None
    return InitialPlacement(status, stage, spec, age_us, released_before_us)


def expected(spec: VersionSpec) -> dict[str, str | None]:
    """The truth about a version: rejected at the stage of its first failing check, in
    pipeline order from the stage it entered at; published if none fails."""
    if spec.fate is None:
        return {"version": spec.version, "status": "published", "stage": None, "check": None}
    stage = STAGE_OF_CHECK[spec.fate]
    return {"version": spec.version, "status": "rejected", "stage": stage, "check": spec.fate}


def package_bytes(seed: int, driver_id: str, version: str, size: int) -> bytes:
    """The package of one version: pseudo-random, reproducible, made on demand."""
    return hashlib.shake_256(f"{seed}/package/{driver_id}/{version}".encode()).digest(size)


def package_sha256(seed: int, driver_id: str, version: str, size: int, *, tampered: bool) -> str:
    """What the record claims; for a tampered package, the digest of other bytes."""
    salt = "/tampered" if tampered else ""
    data = package_bytes(seed, driver_id + salt, version, size)
    return hashlib.sha256(data).hexdigest()

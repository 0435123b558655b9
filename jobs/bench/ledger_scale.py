"""Scenario 6, ledger scale: millions of drivers in one orchestrator, no Ray needed.

For each size, the product's columnar ledger and a dict-of-objects baseline are measured
in fresh interpreters (:mod:`.ledger_probe`): bytes per driver, time to select one
staleness slice (and the orchestrator's whole per-second tick), and snapshot write and
load times (``SnapshotStore`` on a local directory against a pickle).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from typing import Any

from jobs.bench.common import Context, ratio, say, target

PROBE_TIMEOUT_S = 900.0
KINDS = ("ledger", "dict")


def _probe(kind: str, drivers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as directory:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "jobs.bench.ledger_probe",
                "--kind",
                kind,
                "--drivers",
                str(drivers),
                "--dir",
                directory,
            ],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ledger probe {kind} {drivers}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(ctx: Context) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    for n in ctx.sizes.ledger_sizes:
        got = {kind: _probe(kind, n) for kind in KINDS}
        led, base = got["ledger"], got["dict"]
        led_snap = led["snapshot_write_s"] + led["snapshot_load_s"]
        base_snap = base["snapshot_write_s"] + base["snapshot_load_s"]
        compared = {
            "bytes_per_driver_ratio": ratio(led["bytes_per_driver"], base["bytes_per_driver"]),
            "stale_select_ratio": ratio(led["stale_select_s"], base["stale_select_s"]),
            "snapshot_write_ratio": ratio(led["snapshot_write_s"], base["snapshot_write_s"]),
            "snapshot_load_ratio": ratio(led["snapshot_load_s"], base["snapshot_load_s"]),
            "snapshot_bytes_ratio": ratio(led["snapshot_bytes"], base["snapshot_bytes"]),
        }
        sizes[str(n)] = {"ledger": led, "dict": base, "ledger_to_dict": compared}
        say(
            f"  ledger {n:,}: {led['bytes_per_driver']:.0f} B/driver (dict "
            f"{base['bytes_per_driver']:.0f}), slice {led['stale_select_s'] * 1e3:.2f} ms "
            f"(dict {base['stale_select_s'] * 1e3:.0f} ms), snapshot write+load "
            f"{led_snap:.2f}s (pickle {base_snap:.2f}s)"
        )
        targets[f"{n}.bytes_per_driver_ratio"] = target(
            compared["bytes_per_driver_ratio"], "<=", 0.75, "our own target"
        )
        targets[f"{n}.stale_select_ratio"] = target(
            compared["stale_select_ratio"], "<=", 0.1, "our own target"
        )
        targets[f"{n}.snapshot_write_and_load_ratio"] = target(
            ratio(led_snap, base_snap), "<=", 0.5, "our own target"
        )
        targets[f"{n}.tick_s"] = target(
            led["tick_s"], "<=", 0.1, "the orchestrator's per-second tick uses under 10%"
        )
    return {
        "what": "the columnar ledger in one OrchestratorCore against a dict of slotted "
        "dataclasses: bytes per driver (tracemalloc), staleness slice, snapshot",
        "settings": {
            "sizes": list(ctx.sizes.ledger_sizes),
            "baseline": "dict[str, slots dataclass], sorted() to select, pickle",
            "bytes": "live bytes seen by tracemalloc (no allocator overhead)",
            "ledger_built_by": "Ledger.from_arrow (the restore path): exact "
            "capacity; a ledger grown by intake may hold up to "
            "2x the column bytes",
        },
        "sizes": sizes,
        "targets": targets,
    }

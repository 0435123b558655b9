"""One measurement of scenario 6 in a fresh interpreter (so one size's garbage never
weighs on the next): ``python -m jobs.bench.ledger_probe --kind ledger|dict
--drivers N --dir D`` prints one JSON line.

``ledger``: the product's :class:`~driver_review.ledger.Ledger` inside an
:class:`~driver_review.orchestrator.OrchestratorCore`; the staleness slice is
``Ledger.stale_rows`` (and the orchestrator's whole per-second ``tick`` around it); the
snapshot is :class:`~driver_review.snapshot.SnapshotStore` on a local directory.

``dict``: the obvious alternative — a dict of small slotted dataclasses with the same
fields; stale entries selected by filtering and sorting; the snapshot is a pickle.

Both hold the same seeded data: every driver published, last reviewed at a random time
within the last two days (so about three quarters are older than the revisit age).
Bytes per driver are the live bytes ``tracemalloc`` sees (Python objects and numpy
buffers; allocator overhead not included), measured while building.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from driver_review.config import load_config
from driver_review.ledger import NO_STAGE, Ledger, Status, Verdict, Work
from driver_review.orchestrator import REVISIT_MIN_AGE_SHARE, OrchestratorCore
from driver_review.snapshot import SnapshotStore

DAY_S = 86_400.0
REPEATS = 5


@dataclass(slots=True)
class Entry:
    version: str
    stage: int
    status: int
    changed_at: float
    decided_version: str
    decided_stage: int
    verdict: int
    reviewed_at: float
    work: int
    errors: int
    retry_at: float
    restored: int


def _columns(n: int, now: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "version": np.char.add(b"10.2.0.", np.char.mod(b"%d", rng.integers(0, 5000, n))),
        "changed_at": now - rng.uniform(0, 30 * DAY_S, n),
        "reviewed_at": now - rng.uniform(0, 2 * DAY_S, n),
    }


def _ids(n: int) -> list[str]:
    return [f"drv-{i:07d}" for i in range(n)]


def _median_s(fn: Any) -> float:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def probe_ledger(n: int, directory: str, now: float) -> dict[str, Any]:
    cols = _columns(n, now)
    ids = pa.array(_ids(n), pa.string())
    table = pa.table(
        {
            "driver_id": ids,
            "version": pa.array(cols["version"], pa.binary()),
            "stage": pa.array(np.full(n, NO_STAGE, np.int16)),
            "status": pa.array(np.full(n, Status.PUBLISHED, np.int8)),
            "changed_at": cols["changed_at"],
            "decided_version": pa.array(cols["version"], pa.binary()),
            "decided_stage": pa.array(np.full(n, 2, np.int16)),
            "verdict": pa.array(np.full(n, Verdict.APPROVED, np.int8)),
            "reviewed_at": cols["reviewed_at"],
            "work": pa.array(np.full(n, Work.IDLE, np.int8)),
        }
    )
    del cols, ids
    tracemalloc.start()
    ledger = Ledger.from_arrow(table)
    live_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del table
    core = OrchestratorCore(load_config(), ledger=ledger, clock=lambda: now)
    limit = core.stale_slice_size()
    min_age_s = core.window.freshness_s * REVISIT_MIN_AGE_SHARE
    select_s = _median_s(lambda: ledger.stale_rows(now, min_age_s, limit))
    tick_s = _median_s(lambda: core.tick())  # each tick queues the next slice, like the actor
    store = SnapshotStore(directory, "bench")
    t = time.perf_counter()
    path = store.write(ledger.to_arrow(), now)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    loaded = Ledger.from_arrow(store.load().table)  # type: ignore[union-attr]
    load_s = time.perf_counter() - t
    assert len(loaded) == n
    return {
        "bytes_per_driver": live_bytes / n,
        "slice": limit,
        "stale_select_s": select_s,
        "tick_s": tick_s,
        "snapshot_write_s": write_s,
        "snapshot_load_s": load_s,
        "snapshot_bytes": os.path.getsize(path),
    }


def probe_dict(n: int, directory: str, now: float) -> dict[str, Any]:
    cols = _columns(n, now)
    tracemalloc.start()  # before the lists: their floats become the entries' own
    versions, changed, reviewed = (
        c.tolist() for c in (cols["version"], cols["changed_at"], cols["reviewed_at"])
    )
    ids = _ids(n)
    table = {}
    for i, driver_id in enumerate(ids):
        v = versions[i].decode()
        table[driver_id] = Entry(
            v,
            NO_STAGE,
            int(Status.PUBLISHED),
            float(changed[i]),
            v,
            2,
            int(Verdict.APPROVED),
            float(reviewed[i]),
            0,
            0,
            0.0,
            0,
        )
    del ids, versions, changed, reviewed
    live_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del cols
    freshness_s = load_config().window.freshness_s
    limit = math.ceil(n / (freshness_s * 0.75))
    cutoff = now - freshness_s * REVISIT_MIN_AGE_SHARE

    def select() -> list[str]:
        stale = sorted(
            (e.reviewed_at, k) for k, e in table.items() if e.reviewed_at < cutoff and e.work == 0
        )
        return [k for _, k in stale[:limit]]

    select_s = _median_s(select)
    path = os.path.join(directory, "ledger.pickle")
    t = time.perf_counter()
    with open(path, "wb") as f:
        pickle.dump(table, f, protocol=pickle.HIGHEST_PROTOCOL)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    load_s = time.perf_counter() - t
    assert len(loaded) == n
    return {
        "bytes_per_driver": live_bytes / n,
        "slice": limit,
        "stale_select_s": select_s,
        "snapshot_write_s": write_s,
        "snapshot_load_s": load_s,
        "snapshot_bytes": os.path.getsize(path),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="one ledger-scale measurement")
    parser.add_argument("--kind", choices=("ledger", "dict"), required=True)
    parser.add_argument("--drivers", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    probe = probe_ledger if args.kind == "ledger" else probe_dict
    print(json.dumps(probe(args.drivers, args.dir, time.time())), flush=True)


if __name__ == "__main__":
    main()

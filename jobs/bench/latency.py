"""Scenario 4's figures, from the Parquet results of the live service.

- **intake**: for every fresh-lane intake row queued inside the measuring window,
  ``reviewed_at - queued_at`` — from the moment intake held the ping (it is answered 202
  right after) to the intake decision;
- **end to end**: per (driver, version) of those rows, from that same moment to the
  version's final decision (rejected anywhere, or approved by the last stage);
- **overhead**: the same minus the time spent in external calls, counted as the longest
  check of each stage (checks of a stage run concurrently). What remains is queueing,
  actor calls, the driver fetch and the decision PUT.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from driver_review.config import load_config
from driver_review.results import read_results
from jobs.bench.common import target

FINAL = ("approved", "rejected")


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50_s": None, "p99_s": None, "max_s": None}
    a = np.array(values)
    return {
        "n": len(values),
        "p50_s": float(np.percentile(a, 50)),
        "p99_s": float(np.percentile(a, 99)),
        "max_s": float(a.max()),
    }


def _longest_check_s(checks: list[dict] | None) -> float:
    return max((c["duration_s"] or 0.0 for c in checks or []), default=0.0)


def latency_figures(
    data_dir: str,
    window: tuple[float, float],
    *,
    ping_rate: float,
    latency_ms: float,
    webhooks: dict[str, int],
) -> dict[str, Any]:
    rows = read_results(data_dir).to_pylist()
    t0, t1 = window
    last_stage = load_config().stage_names[-1]
    by_version: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_version[(r["driver_id"], r["version"])].append(r)
    intake_s, intake_overhead_s, e2e_s, e2e_overhead_s = [], [], [], []
    for r in rows:
        queued = r["queued_at"].timestamp()
        if not (
            r["stage"] == "intake"
            and r["lane"] == "fresh"
            and t0 <= queued <= t1
            and r["verdict"] in FINAL
        ):
            continue
        waited = r["reviewed_at"].timestamp() - queued
        intake_s.append(waited)
        intake_overhead_s.append(waited - _longest_check_s(r["checks"]))
        decided = sorted(
            (x for x in by_version[(r["driver_id"], r["version"])] if x["verdict"] in FINAL),
            key=lambda x: x["reviewed_at"],
        )
        final = decided[-1] if decided else None
        if final is None or not (final["verdict"] == "rejected" or final["stage"] == last_stage):
            continue
        total = final["reviewed_at"].timestamp() - queued
        e2e_s.append(total)
        e2e_overhead_s.append(total - sum(_longest_check_s(x["checks"]) for x in decided))
    intake = _percentiles(intake_s)
    e2e = _percentiles(e2e_s)
    return {
        "what": "pings at a steady rate into the live service: acceptance to decision from "
        "the Parquet results, and that minus the time in external calls",
        "settings": {
            "ping_rate_per_s": ping_rate,
            "window_s": t1 - t0,
            "catalog_latency_ms": latency_ms,
            "webhooks": webhooks,
        },
        "intake_decision": intake,
        "intake_overhead": _percentiles(intake_overhead_s),
        "final_decision": e2e,
        "final_overhead": _percentiles(e2e_overhead_s),
        "note": "overhead still holds the record fetch and the decision PUT of each stage "
        f"(~{latency_ms:g} ms each at the simulated catalog)",
        "targets": {
            "intake_decision.p50_s": target(intake["p50_s"], "<=", 0.25, "our own target"),
            "intake_decision.p99_s": target(intake["p99_s"], "<=", 1.0, "our own target"),
            "final_decision.p99_s": target(e2e["p99_s"], "<=", 2.0, "our own target"),
            "measured_pings": target(
                float(intake["n"] or 0),
                ">=",
                float(round(0.5 * ping_rate * (t1 - t0))),  # whole pings
                "at least half the changes of the window measured",
            ),
        },
    }

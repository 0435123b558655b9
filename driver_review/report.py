"""``driver-review report``: what the Parquet results say, without Ray."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow.compute as pc

from driver_review import quarantine
from driver_review.identifiers import redact_location
from driver_review.results import read_results


def build_report(data_dir: str, *, since: datetime | None = None) -> dict[str, Any]:
    """The results under ``data_dir``; with ``since`` (timezone-aware), only the decisions
    made from then on (one run's, in a data dir that holds earlier runs too), beside
    ``rows_in_dir``, every decision the data dir holds."""
    table = read_results(data_dir)
    rows_in_dir = table.num_rows
    if since is not None:
        table = table.filter(pc.greater_equal(table.column("reviewed_at"), since))
    rows = table.num_rows
    verdicts = Counter(table.column("verdict").to_pylist())
    by_stage: dict[str, dict[str, int]] = {}
    for stage, verdict in zip(
        table.column("stage").to_pylist(), table.column("verdict").to_pylist(), strict=True
    ):
        by_stage.setdefault(stage, {}).setdefault(verdict, 0)
        by_stage[stage][verdict] += 1
    reasons: Counter[str] = Counter()
    for entry in table.column("reasons").to_pylist():
        for check, _ in entry or []:
            reasons[check] += 1
    fresh = table.filter(pc.equal(table.column("lane"), "fresh"))
    waited_s = (
        pc.subtract(
            fresh.column("reviewed_at").cast("int64"), fresh.column("queued_at").cast("int64")
        ).to_numpy()
        / 1e6
        if fresh.num_rows
        else np.zeros(0)
    )
    first = pc.min(table.column("reviewed_at")).as_py() if rows else None
    last = pc.max(table.column("reviewed_at")).as_py() if rows else None
    return {
        "data_dir": redact_location(data_dir),  # an s3:// URI may hold keys
        "rows": rows,
        "rows_in_dir": rows_in_dir,
        "drivers": len(pc.unique(table.column("driver_id"))) if rows else 0,
        "verdicts": dict(verdicts),
        "by_stage": by_stage,
        "top_reasons": dict(reasons.most_common(10)),
        "intake_to_decision_s": latency_summary(waited_s),
        "first_reviewed_at": first.isoformat() if first else None,
        "last_reviewed_at": last.isoformat() if last else None,
        "quarantined": quarantine_summary(data_dir),
    }


def quarantine_summary(data_dir: str) -> dict[str, Any]:
    """What ``<data-dir>/quarantine/`` holds: rows set aside, by kind and source, and the
    newest few (ids as shown safely when they were set aside)."""
    table = quarantine.read(data_dir)
    rows = table.to_pylist()
    rows.sort(key=lambda r: r["seen_at"], reverse=True)
    return {
        "rows": len(rows),
        "by_kind": dict(Counter(r["kind"] for r in rows)),
        "by_source": dict(Counter(r["source"] for r in rows)),
        "latest": [
            {
                "driver_id": r["driver_id"],
                "kind": r["kind"],
                "reason": r["reason"],
                "source": r["source"],
                "seen_at": r["seen_at"].isoformat(),
            }
            for r in rows[:10]
        ],
    }


def latency_summary(seconds: np.ndarray) -> dict[str, float] | None:
    if len(seconds) == 0:
        return None
    p50, p99 = np.percentile(seconds, [50, 99])
    return {
        "n": len(seconds),
        "p50": round(float(p50), 4),
        "p99": round(float(p99), 4),
        "max": round(float(seconds.max()), 4),
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"{report['rows']} decisions on {report['drivers']} drivers in "
        f"{report['data_dir']}/reviews/"
    ]
    if report["rows"]:
        lines.append(f"  from {report['first_reviewed_at']} to {report['last_reviewed_at']}")
    for stage, verdicts in sorted(report["by_stage"].items()):
        lines.append(f"  {stage:<14} " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())))
    if report["intake_to_decision_s"]:
        lat = report["intake_to_decision_s"]
        lines.append(
            f"  intake to decision (fresh lane): p50 {lat['p50']:.3f}s, "
            f"p99 {lat['p99']:.3f}s over {lat['n']} decisions"
        )
    if report["top_reasons"]:
        lines.append(
            "  checks behind rejections/errors: "
            + ", ".join(f"{c} {n}" for c, n in report["top_reasons"].items())
        )
    q = report.get("quarantined") or {}
    if q.get("rows"):
        lines.append(
            f"  quarantined: {q['rows']} rows in {report['data_dir']}/quarantine/ ("
            + ", ".join(f"{k} {n}" for k, n in sorted(q["by_kind"].items()))
            + ")"
        )
        for r in q["latest"][:5]:
            lines.append(f"    {r['driver_id']} {r['kind']} from {r['source']}: {r['reason']}")
    return lines

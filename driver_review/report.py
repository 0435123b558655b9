"""``driver-review report``: what the Parquet results say, without Ray."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow.compute as pc

from driver_review.results import read_results


def build_report(data_dir: str) -> dict[str, Any]:
    table = read_results(data_dir)
    rows = table.num_rows
    verdicts = Counter(table.column("verdict").to_pylist())
    by_stage: dict[str, dict[str, int]] = {}
    for stage, verdict in zip(table.column("stage").to_pylist(),
                              table.column("verdict").to_pylist(), strict=True):
        by_stage.setdefault(stage, {}).setdefault(verdict, 0)
        by_stage[stage][verdict] += 1
    reasons: Counter[str] = Counter()
    for entry in table.column("reasons").to_pylist():
        for check, _ in entry or []:
            reasons[check] += 1
    first = pc.min(table.column("reviewed_at")).as_py() if rows else None
    last = pc.max(table.column("reviewed_at")).as_py() if rows else None
    return {
        "data_dir": data_dir,
        "rows": rows,
        "drivers": len(pc.unique(table.column("driver_id"))) if rows else 0,
        "verdicts": dict(verdicts),
        "by_stage": by_stage,
        "top_reasons": dict(reasons.most_common(10)),
        "first_reviewed_at": first.isoformat() if first else None,
        "last_reviewed_at": last.isoformat() if last else None,
    }


def format_report(report: dict[str, Any]) -> list[str]:
    lines = [f"{report['rows']} decisions on {report['drivers']} drivers in "
             f"{report['data_dir']}/reviews/"]
    if report["rows"]:
        lines.append(f"  from {report['first_reviewed_at']} to {report['last_reviewed_at']}")
    for stage, verdicts in sorted(report["by_stage"].items()):
        lines.append(f"  {stage:<14} " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())))
    if report["top_reasons"]:
        lines.append("  checks behind rejections/errors: " +
                     ", ".join(f"{c} {n}" for c, n in report["top_reasons"].items()))
    return lines

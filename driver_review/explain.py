"""``driver-review explain DRIVER_ID``: everything known about one driver.

Every decision the Parquet results hold for it (each version, each stage, each check's
outcome, reason and timing, the lane and the worker), the rows of it set aside as bad
input, and — when a service runs — the orchestrator's ledger entry. The admin endpoint's
``GET /drivers/{id}/explain`` and the UI's driver page answer the same document.

Reading filters the dataset by ``driver_id`` (pushed down to the Parquet reader), so it
reads one column of every file and the matching rows only; it is an operator's question,
asked now and then, never on a hot path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from driver_review import quarantine
from driver_review.identifiers import redact_location, shown
from driver_review.results import REVIEWS_DIR, SCHEMA, resolve


def _rows(data_dir: str, subdir: str, schema: pa.Schema, driver_id: str) -> list[dict]:
    fs, root = resolve(data_dir)
    path = f"{root.rstrip('/')}/{subdir}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return []
    dataset = ds.dataset(
        path,
        filesystem=fs,
        format="parquet",
        schema=schema,
        exclude_invalid_files=False,
        ignore_prefixes=[".tmp-", "."],
    )
    return dataset.to_table(filter=ds.field("driver_id") == driver_id).to_pylist()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def explain(
    data_dir: str | None, driver_id: str, ledger: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The explanation document of ``driver_id`` (a valid id: callers check it first).
    ``data_dir`` None: no results to read (only the ledger)."""
    decisions = _rows(data_dir, REVIEWS_DIR, SCHEMA, driver_id) if data_dir else []
    decisions.sort(key=lambda r: r["reviewed_at"])
    versions: dict[str, list[dict[str, Any]]] = {}
    for row in decisions:
        waited = row["reviewed_at"] - row["queued_at"] if row["queued_at"] else None
        versions.setdefault(row["version"], []).append(
            {
                "stage": row["stage"],
                "verdict": row["verdict"],
                "reviewed_at": _iso(row["reviewed_at"]),
                "queued_at": _iso(row["queued_at"]),
                "waited_s": round(waited.total_seconds(), 4) if waited is not None else None,
                "duration_s": row["duration_s"],
                "lane": row["lane"],
                "worker": row["worker"],
                "reasons": dict(row["reasons"] or []),
                "checks": row["checks"] or [],
            }
        )
    # Set-aside rows carry the id as shown in logs (a repr), never the raw value.
    bad = (
        _rows(data_dir, quarantine.QUARANTINE_DIR, quarantine.SCHEMA, shown(driver_id))
        if data_dir
        else []
    )
    bad.sort(key=lambda r: r["seen_at"])
    return {
        "driver_id": driver_id,
        "data_dir": redact_location(data_dir) if data_dir else None,
        "decisions": len(decisions),
        "versions": [{"version": v, "decisions": d} for v, d in versions.items()],
        "quarantined": [
            {
                "kind": r["kind"],
                "reason": r["reason"],
                "source": r["source"],
                "seen_at": _iso(r["seen_at"]),
            }
            for r in bad
        ],
        "ledger": ledger,
    }


def known(doc: dict[str, Any]) -> bool:
    """Whether anything at all is known of the driver."""
    return bool(doc["decisions"] or doc["quarantined"] or doc["ledger"])


def _when(epoch_s: Any) -> str:
    if not epoch_s or epoch_s <= 0:
        return "never"
    return datetime.fromtimestamp(float(epoch_s)).astimezone().isoformat(timespec="seconds")


def format_explanation(doc: dict[str, Any], service_note: str | None = None) -> list[str]:
    lines = [
        f"driver {doc['driver_id']}: {doc['decisions']} decisions on "
        f"{len(doc['versions'])} versions"
        + (f" in {doc['data_dir']}/{REVIEWS_DIR}/" if doc["data_dir"] else "")
    ]
    entry = doc.get("ledger")
    if entry:
        lines.append(
            f"  ledger: version {entry['version']} at {entry['stage'] or 'no stage'}, "
            f"{entry['status']}, "
            f"work {entry['work']}; last decided {entry['decided_stage']} "
            f"{entry['decided_version'] or '-'} {entry['verdict']} at "
            f"{_when(entry.get('reviewed_at'))}; errors {entry['errors']}"
        )
    elif service_note:
        lines.append(f"  ledger: {service_note}")
    for version in doc["versions"]:
        lines.append(f"  version {version['version']}")
        for d in version["decisions"]:
            waited = f"  waited {d['waited_s']:.3f}s" if d["waited_s"] is not None else ""
            lines.append(
                f"    {d['reviewed_at']}  {d['stage']:<14} {d['verdict']:<9} "
                f"lane {d['lane']:<5}  took {d['duration_s']:.3f}s{waited}  "
                f"by {d['worker']}"
            )
            for check in d["checks"]:
                reason = f"  {check['reason']}" if check.get("reason") else ""
                lines.append(
                    f"      {check['name']:<22} {check['outcome']:<7} "
                    f"{(check.get('duration_s') or 0):7.3f}s{reason}"
                )
    for row in doc["quarantined"]:
        lines.append(
            f"  quarantined {row['seen_at']} from {row['source']}: {row['kind']}: {row['reason']}"
        )
    return lines

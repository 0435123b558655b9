"""Bad rows set aside one at a time: what a row is refused for, and the table that keeps
each refused row once.

A listing or changes row, a record fetched by id, a decision's answer or a ping that
cannot be taken is turned into a :class:`BadRow` here, never into an exception: one bad
row must not stop a page, a poll, a sweep or a report. The reasons are one line and show
values with :func:`~driver_review.identifiers.shown` (no raw control characters).

:class:`QuarantineTable` (held by the orchestrator) keys bad rows by driver id, so the
same unchanged row re-read by the next poll is neither counted nor logged again, while a
changed row is looked at again; a good row for the same driver releases it.

Pure logic: no Ray, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from driver_review.catalog.models import DriverSummary
from driver_review.errors import first_error
from driver_review.identifiers import (
    id_problem,
    shown,
    time_problem,
    version_problem,
)
from driver_review.ledger import Change
from driver_review.results import ResultWriter, read_dataset
from driver_review.wire import change_of

log = logging.getLogger(__name__)

#: Kinds a bad row is counted under (metric tag, ``sweep --json``, report).
KINDS = (
    "unknown_stage",
    "bad_version",
    "bad_id",
    "bad_time",
    "bad_status",
    "wrong_type",
    "missing_field",
    "bad_row",
)
#: Why a driver said to be in review at no stage is refused: it could be reviewed nowhere.
IN_REVIEW_WITHOUT_STAGE = "in review at no stage (a driver in review names its stage)"
#: Bad rows waiting to be exported (metric, Parquet) between two orchestrator ticks.
MAX_UNEXPORTED = 10_000
QUARANTINE_DIR = "quarantine"
#: ``<data-dir>/quarantine/``: one row per distinct bad row, as first seen.
SCHEMA = pa.schema(
    [
        ("driver_id", pa.string()),  # shown safely (repr, escaped, at most SHOWN_CHARS)
        ("kind", pa.string()),
        ("reason", pa.string()),
        ("source", pa.string()),
        ("fingerprint", pa.string()),
        ("seen_at", pa.timestamp("us", tz="UTC")),
    ]
)
#: Bad rows the orchestrator remembers; the oldest is forgotten first (and, if it comes
#: back unchanged, counted again: the only cost of the bound).
MAX_QUARANTINED = 10_000
_FIELD_KINDS = {
    "id": "bad_id",
    "version": "bad_version",
    "updated_at": "bad_time",
    "status": "bad_status",
    "stage": "unknown_stage",
}


@dataclass(frozen=True, slots=True)
class BadRow:
    """One row refused alone. ``driver_id`` is set only when the id itself is usable
    (then the record can be fetched by id, and the row released by a good one)."""

    key: str  # what the quarantine table keys it by: the usable id, else '#<fingerprint>'
    driver_id: str | None
    shown_id: str  # safe to log and store
    kind: str
    reason: str  # one line
    source: str  # listing | changes | record | report | intake | ping
    fingerprint: str  # of the row's content: an unchanged row is not counted twice
    seen_at: float


def fingerprint(raw: Any) -> str:
    """A short digest of a row's content (a parsed JSON value or a wire model)."""
    if hasattr(raw, "model_dump"):
        raw = raw.model_dump(mode="json")
    text = json.dumps(raw, sort_keys=True, default=repr, ensure_ascii=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def bad_row(
    raw: Any, kind: str, reason: str, *, source: str, seen_at: float, raw_id: Any = None
) -> BadRow:
    """A :class:`BadRow` for ``raw`` (its id taken from ``raw_id`` or ``raw["id"]``)."""
    if raw_id is None:
        raw_id = raw.get("id") if isinstance(raw, dict) else getattr(raw, "id", None)
    fp = fingerprint(raw)
    usable = raw_id if id_problem(raw_id) is None else None
    # An unusable id ('..', 17) may be shared by many drivers' rows: keyed by content.
    key = usable if usable is not None else f"#{fp}"
    return BadRow(
        key=key,
        driver_id=usable,
        shown_id=shown(raw_id) if raw_id is not None else "(no id)",
        kind=kind,
        reason=" ".join(reason.split()),
        source=source,
        fingerprint=fp,
        seen_at=seen_at,
    )


def summary_problem(
    raw: Any, *, now: float, stages: Collection[str] | None = None
) -> tuple[str, str] | None:
    """``(kind, reason)`` why a raw listing/changes row cannot be taken, or None."""
    if not isinstance(raw, dict):
        return "bad_row", f"row is {type(raw).__name__}, not an object"
    try:
        summary = DriverSummary.model_validate(raw)
    except ValidationError as exc:
        return _classify(exc)
    return model_problem(summary, now=now, stages=stages)


def model_problem(
    obj: Any, *, now: float, stages: Collection[str] | None = None
) -> tuple[str, str] | None:
    """``(kind, reason)`` why a parsed summary, record or answer cannot be taken, or None:
    its id, version, time (and, given the pipeline's ``stages``, its stage)."""
    problem = id_problem(getattr(obj, "id", getattr(obj, "driver_id", None)))
    if problem:
        return "bad_id", problem
    problem = version_problem(obj.version)
    if problem:
        return "bad_version", problem
    updated_at = getattr(obj, "updated_at", None)
    if updated_at is not None:
        problem = time_problem(updated_at.timestamp(), now)
        if problem:
            return "bad_time", f"updated_at: {problem}"
    if stages is not None and obj.stage is not None and obj.stage not in stages:
        return "unknown_stage", (
            f"unknown stage {shown(obj.stage)} (the pipeline has {', '.join(stages)})"
        )
    if obj.stage is None and getattr(obj, "status", None) == "in_review":
        return "unknown_stage", IN_REVIEW_WITHOUT_STAGE
    return None


def _classify(exc: ValidationError) -> tuple[str, str]:
    first = first_error(exc, top="row")
    field = str(first.loc[0]) if first.loc else ""
    reason = str(first)
    if first.type == "missing":
        return "missing_field", reason
    if first.type.endswith("_type"):
        return "wrong_type", reason
    return _FIELD_KINDS.get(field, "bad_row"), reason


def to_change(stage_names: Sequence[str], obj: Any, *, now: float, source: str) -> Change | BadRow:
    """A :class:`Change` from anything shaped like a summary (a ``DriverSummary``, a
    ``DriverRecord``, a decision's answer), or the :class:`BadRow` saying why not."""
    problem = model_problem(obj, now=now, stages=stage_names)
    if problem is not None:
        return bad_row(
            obj,
            *problem,
            source=source,
            seen_at=now,
            raw_id=getattr(obj, "id", getattr(obj, "driver_id", None)),
        )
    return change_of(stage_names, obj)


def taken(stage_names: Sequence[str], item: Any, *, now: float, source: str) -> Change | BadRow:
    """What a consumer of ``iter_drivers``/``changes_since`` takes from one item: a bad
    row as it is, anything else converted (and judged) by :func:`to_change`."""
    if isinstance(item, BadRow):
        return item
    return to_change(stage_names, item, now=now, source=source)


class QuarantineTable:
    """Bad rows by key, bounded; counts and logs each distinct row once."""

    def __init__(self, max_entries: int = MAX_QUARANTINED) -> None:
        self.max_entries = max_entries
        self._rows: OrderedDict[str, BadRow] = OrderedDict()
        self.by_kind: Counter[str] = Counter()
        self.released = 0
        self.forgotten = 0
        self._unexported: list[BadRow] = []

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def get(self, key: str) -> BadRow | None:
        return self._rows.get(key)

    def add(self, rows: Iterable[BadRow]) -> list[BadRow]:
        """Hold ``rows``; returns those not held before unchanged (counted and logged)."""
        new: list[BadRow] = []
        for row in rows:
            held = self._rows.get(row.key)
            if held is not None and held.fingerprint == row.fingerprint:
                self._rows.move_to_end(row.key)
                continue
            self._rows[row.key] = row
            self._rows.move_to_end(row.key)
            self.by_kind[row.kind] += 1
            new.append(row)
            if len(self._unexported) < MAX_UNEXPORTED:
                self._unexported.append(row)
            log.warning(
                "quarantined %s row %s (%s): %s", row.source, row.shown_id, row.kind, row.reason
            )
        while len(self._rows) > self.max_entries:
            self._rows.popitem(last=False)
            self.forgotten += 1
        return new

    def release(self, key: str) -> BadRow | None:
        """A good row came for ``key``: it leaves quarantine."""
        row = self._rows.pop(key, None)
        if row is not None:
            self.released += 1
        return row

    def stats(self) -> dict[str, Any]:
        return {
            "total": sum(self.by_kind.values()),
            "by_kind": dict(self.by_kind),
            "held": len(self._rows),
            "released": self.released,
            "forgotten": self.forgotten,
        }

    def take_unexported(self) -> list[BadRow]:
        """Rows counted since the last call: for the metric and the Parquet dataset."""
        rows, self._unexported = self._unexported, []
        return rows


def to_table(rows: Sequence[BadRow]) -> pa.Table:
    return pa.table(
        {
            "driver_id": [r.shown_id for r in rows],
            "kind": [r.kind for r in rows],
            "reason": [r.reason for r in rows],
            "source": [r.source for r in rows],
            "fingerprint": [r.fingerprint for r in rows],
            "seen_at": pa.array([int(r.seen_at * 1_000_000) for r in rows], pa.int64()).cast(
                SCHEMA.field("seen_at").type
            ),
        },
        schema=SCHEMA,
    )


def writer(data_dir: str, *, name: str, rollover_rows: int, rollover_s: float) -> ResultWriter:
    """A rolling writer of quarantined rows to ``<data-dir>/quarantine/``."""
    return ResultWriter(
        data_dir,
        name=name,
        rollover_rows=rollover_rows,
        rollover_s=rollover_s,
        subdir=QUARANTINE_DIR,
        to_table=to_table,
    )


def read(data_dir: str) -> pa.Table:
    return read_dataset(data_dir, QUARANTINE_DIR, SCHEMA)

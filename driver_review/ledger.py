"""The per-driver ledger: what the catalog last told us about each driver and what we last
decided, in columnar form.

One row per driver, numpy columns grown by doubling, and a ``dict`` from driver id to row.
That is ~100 bytes per driver instead of the ~1 KiB of a dict of Python objects, and a
snapshot is a zero-copy conversion of the columns to one Arrow table (see
:mod:`driver_review.snapshot`). Every method takes and returns whole batches, so the
orchestrator never loops in Python over the ledger on a hot path except to index rows.

Pure logic: no Ray, no I/O, no clock of its own (times are passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import pyarrow as pa

from driver_review import stage_names
from driver_review.identifiers import MAX_VERSION_BYTES, shown

#: Width of the version columns. A longer version is refused (``observe`` raises), never
#: cut: numpy would silently truncate it and the driver would loop at a version that
#: does not exist.
VERSION_BYTES = MAX_VERSION_BYTES


class Status(IntEnum):
    """The catalog's status of a driver's newest known version."""

    IN_REVIEW = 0
    PUBLISHED = 1
    REJECTED = 2


class Verdict(IntEnum):
    NONE = 0
    APPROVED = 1
    REJECTED = 2
    ERROR = 3
    CONFIRMED = 4  # re-review of a final version: the catalog still says what we recorded


class Work(IntEnum):
    """Where the driver's work item is."""

    IDLE = 0  # nothing to do, or waiting for ``retry_at``
    QUEUED = 1  # in a stage backlog
    LEASED = 2  # handed to a worker under a lease


NO_STAGE = stage_names.NO_STAGE  # -1

_COLUMNS: dict[str, np.dtype] = {
    "version": np.dtype(f"S{VERSION_BYTES}"),  # newest version the catalog told us of
    "stage": np.dtype(np.int16),  # its stage index, NO_STAGE when published
    "status": np.dtype(np.int8),  # Status
    "changed_at": np.dtype(np.float64),  # catalog updated_at of that state (epoch s)
    "decided_version": np.dtype(f"S{VERSION_BYTES}"),
    "decided_stage": np.dtype(np.int16),
    "verdict": np.dtype(np.int8),  # Verdict of the last decision
    "reviewed_at": np.dtype(np.float64),  # when we last decided anything (epoch s, 0 = never)
    "work": np.dtype(np.int8),  # Work
    "errors": np.dtype(np.int16),  # consecutive error verdicts, for retry backoff
    "retry_at": np.dtype(np.float64),  # an errored driver is not re-queued before this
    # Pending when a snapshot was restored: it may have been decided after that snapshot,
    # so its reviewer asks the catalog first (a conditional GET) instead of trusting cache.
    "restored": np.dtype(np.int8),
}


def _fits(version: str) -> None:
    if len(version.encode()) > VERSION_BYTES:
        raise ValueError(f"version {shown(version)} is longer than {VERSION_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class Change:
    """A change event: the catalog's state of one driver at ``changed_at``."""

    driver_id: str
    version: str
    stage: int  # stage index, NO_STAGE when published
    status: Status
    changed_at: float


class Ledger:
    def __init__(self, capacity: int = 1024) -> None:
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._cols = {name: np.zeros(capacity, dtype) for name, dtype in _COLUMNS.items()}
        self._cols["stage"][:] = NO_STAGE
        self._cols["decided_stage"][:] = NO_STAGE

    # -- shape ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, driver_id: object) -> bool:
        return driver_id in self._index

    @property
    def nbytes(self) -> int:
        """Bytes held by the columns (not counting the id index)."""
        return sum(col.nbytes for col in self._cols.values())

    def col(self, name: str) -> np.ndarray:
        """A read-only view of one column over the live rows."""
        view = self._cols[name][: len(self._ids)]
        view.flags.writeable = False
        return view

    def row(self, driver_id: str) -> int:
        return self._index[driver_id]

    def rows(self, driver_ids: Iterable[str]) -> np.ndarray:
        index = self._index
        return np.fromiter((index[d] for d in driver_ids), dtype=np.int64)

    def ids(self, rows: np.ndarray | Sequence[int]) -> list[str]:
        ids = self._ids
        return [ids[int(r)] for r in rows]

    def _grow(self, need: int) -> None:
        cap = len(self._cols["work"])
        if need <= cap:
            return
        new_cap = max(need, cap * 2)
        for name, col in self._cols.items():
            grown = np.zeros(new_cap, col.dtype)
            grown[:cap] = col
            if name in ("stage", "decided_stage"):
                grown[cap:] = NO_STAGE
            self._cols[name] = grown

    def _row_for(self, driver_id: str) -> int:
        row = self._index.get(driver_id)
        if row is None:
            row = len(self._ids)
            self._grow(row + 1)
            self._index[driver_id] = row
            self._ids.append(driver_id)
        return row

    # -- updates ----------------------------------------------------------------------
    def observe(self, change: Change) -> bool:
        """Record a change; True when it is news (newer than what the ledger holds).

        Older or equal news is ignored, which is what makes re-polling after a restart and
        duplicated pings harmless. A version wider than the column raises ``ValueError``
        before anything is stored.
        """
        _fits(change.version)
        row = self._row_for(change.driver_id)
        c = self._cols
        known = c["changed_at"][row]
        if known and change.changed_at <= known:
            return False
        c["version"][row] = change.version.encode()
        c["stage"][row] = change.stage
        c["status"][row] = change.status
        c["changed_at"][row] = change.changed_at
        c["errors"][row] = 0
        c["retry_at"][row] = 0.0
        return True

    def needs_review(self, row: int) -> bool:
        """Whether the newest known state is in review at a stage not yet decided."""
        c = self._cols
        if c["status"][row] != Status.IN_REVIEW:
            return False
        return not (
            c["decided_version"][row] == c["version"][row]
            and c["decided_stage"][row] == c["stage"][row]
            and c["verdict"][row] in (Verdict.APPROVED, Verdict.REJECTED)
        )

    def mark_restored(self, rows: np.ndarray | Sequence[int]) -> None:
        self._cols["restored"][np.asarray(rows, dtype=np.int64)] = 1

    def set_work(self, rows: np.ndarray | Sequence[int], work: Work) -> None:
        self._cols["work"][np.asarray(rows, dtype=np.int64)] = work

    def work_of(self, row: int) -> Work:
        return Work(int(self._cols["work"][row]))

    def errors_of(self, row: int) -> int:
        return int(self._cols["errors"][row])

    def target(self, row: int) -> tuple[str, int, Status]:
        c = self._cols
        return c["version"][row].decode(), int(c["stage"][row]), Status(int(c["status"][row]))

    def decide(
        self,
        row: int,
        *,
        version: str,
        stage: int,
        verdict: Verdict,
        reviewed_at: float,
        retry_backoff_s: float = 0.0,
    ) -> None:
        """Record a decision; an error arms ``retry_at`` with a growing backoff."""
        _fits(version)
        c = self._cols
        c["reviewed_at"][row] = reviewed_at
        if verdict == Verdict.CONFIRMED:  # a re-review of a final state changes nothing else
            return
        if verdict == Verdict.ERROR:
            errors = min(int(c["errors"][row]) + 1, 30)
            c["errors"][row] = errors
            c["retry_at"][row] = reviewed_at + retry_backoff_s * (2 ** min(errors - 1, 8))
            return
        c["errors"][row] = 0
        c["retry_at"][row] = 0.0
        c["restored"][row] = 0
        c["decided_version"][row] = version.encode()
        c["decided_stage"][row] = stage
        c["verdict"][row] = verdict

    def is_decided(self, row: int, version: str, stage: int) -> bool:
        c = self._cols
        return (
            c["decided_version"][row] == version.encode()
            and c["decided_stage"][row] == stage
            and c["verdict"][row] in (Verdict.APPROVED, Verdict.REJECTED)
        )

    def entry(self, driver_id: str) -> dict[str, object] | None:
        """One driver's row as plain values (for status pages), or None."""
        row = self._index.get(driver_id)
        if row is None:
            return None
        c = self._cols
        return {
            "driver_id": driver_id,
            "version": c["version"][row].decode(),
            "stage": int(c["stage"][row]),
            "status": Status(int(c["status"][row])).name.lower(),
            "changed_at": float(c["changed_at"][row]),
            "decided_version": c["decided_version"][row].decode(),
            "decided_stage": int(c["decided_stage"][row]),
            "verdict": Verdict(int(c["verdict"][row])).name.lower(),
            "reviewed_at": float(c["reviewed_at"][row]),
            "work": Work(int(c["work"][row])).name.lower(),
            "errors": int(c["errors"][row]),
        }

    # -- selections (vectorised) ----------------------------------------------------------
    def stale_rows(self, now: float, min_age_s: float, limit: int) -> np.ndarray:
        """Idle rows last reviewed more than ``min_age_s`` ago, oldest first, at most
        ``limit``: one slice of the outer loop."""
        n = len(self._ids)
        reviewed = self._cols["reviewed_at"][:n]
        mask = (reviewed < now - min_age_s) & (self._cols["work"][:n] == Work.IDLE)
        candidates = np.flatnonzero(mask)
        if len(candidates) > limit:
            part = np.argpartition(reviewed[candidates], limit - 1)[:limit]
            candidates = candidates[part]
        return candidates[np.argsort(reviewed[candidates], kind="stable")]

    def due_retries(self, now: float, limit: int) -> np.ndarray:
        """Idle, errored rows whose backoff has passed."""
        n = len(self._ids)
        c = self._cols
        mask = (c["errors"][:n] > 0) & (c["retry_at"][:n] <= now) & (c["work"][:n] == Work.IDLE)
        return np.flatnonzero(mask)[:limit]

    def pending_rows(self) -> np.ndarray:
        """Rows with work not yet decided: queued, leased, or in review and undecided."""
        n = len(self._ids)
        c = self._cols
        active = c["work"][:n] != Work.IDLE
        undecided = (c["status"][:n] == Status.IN_REVIEW) & ~(
            (c["decided_version"][:n] == c["version"][:n])
            & (c["decided_stage"][:n] == c["stage"][:n])
            & np.isin(c["verdict"][:n], (Verdict.APPROVED, Verdict.REJECTED))
        )
        return np.flatnonzero(active | undecided)

    def oldest_review_age(self, now: float) -> float:
        n = len(self._ids)
        if n == 0:
            return 0.0
        return float(now - self._cols["reviewed_at"][:n].min())

    def counts(self) -> dict[str, int]:
        n = len(self._ids)
        c = self._cols
        return {
            "drivers": n,
            "queued": int(np.count_nonzero(c["work"][:n] == Work.QUEUED)),
            "leased": int(np.count_nonzero(c["work"][:n] == Work.LEASED)),
            "in_review": int(np.count_nonzero(c["status"][:n] == Status.IN_REVIEW)),
            "published": int(np.count_nonzero(c["status"][:n] == Status.PUBLISHED)),
            "rejected": int(np.count_nonzero(c["status"][:n] == Status.REJECTED)),
            "erroring": int(np.count_nonzero(c["errors"][:n] > 0)),
        }

    # -- Arrow ------------------------------------------------------------------------
    def to_arrow(self, stages: Sequence[str] | None = None) -> pa.Table:
        """The ledger as a table that owns its data: a copy, taken at once.

        With the pipeline's ``stages``, the stage columns hold names (dictionary-encoded),
        so a load under a changed pipeline maps them by name (:mod:`.stage_names`);
        without, positions.

        ``pa.array`` over a numeric numpy column shares its buffer, and the snapshot is
        written off the event loop while reviews keep updating the columns in place: a
        shared buffer would write a torn row (one driver's new time and stage beside its
        old version)."""
        n = len(self._ids)
        arrays = {"driver_id": pa.array(self._ids, pa.string())}
        for name in _COLUMNS:
            col = self._cols[name][:n]
            if col.dtype.kind == "S":
                arrays[name] = pa.array(col, pa.binary(VERSION_BYTES)).cast(pa.binary())
            elif name in _STAGE_COLUMNS and stages is not None:
                arrays[name] = stage_names.encode(col.copy(), stages)
            else:
                arrays[name] = pa.array(col.copy())
        return pa.table(arrays)

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table,
        stages: Sequence[str] | None = None,
        *,
        migrate: Mapping[str, str] | None = None,
        where: str = "the snapshot",
    ) -> Ledger:
        """A ledger from :meth:`to_arrow`'s table. With the pipeline's ``stages``, stage
        names map onto their current positions; drivers at a stage the pipeline lacks
        raise :class:`~driver_review.stage_names.StagesRemoved` unless ``migrate`` names
        where they go. A decision taken at a removed stage is forgotten (no current stage
        was decided), and so is the last decision of a migrated driver: it is reviewed
        again at its new stage."""
        n = table.num_rows
        ledger = cls(capacity=max(1024, n))
        ids = table.column("driver_id").to_pylist()
        ledger._ids = ids
        ledger._index = {d: i for i, d in enumerate(ids)}
        forget = np.zeros(n, bool)
        for name, dtype in _COLUMNS.items():
            if name not in table.column_names:  # a snapshot older than this column
                continue
            col = table.column(name)
            if name in _STAGE_COLUMNS:
                values, forget_here = _stages_of(col, name, stages, migrate, where)
                forget |= forget_here
            elif dtype.kind == "S":
                values = np.array(col.to_pylist(), dtype=dtype) if n else np.zeros(0, dtype)
            else:
                values = col.to_numpy().astype(dtype, copy=False)
            ledger._cols[name][:n] = values
        rows = np.flatnonzero(forget)
        ledger._cols["decided_stage"][rows] = NO_STAGE
        ledger._cols["verdict"][rows] = Verdict.NONE
        return ledger


_STAGE_COLUMNS = ("stage", "decided_stage")


def _stages_of(
    col: pa.ChunkedArray,
    name: str,
    stages: Sequence[str] | None,
    migrate: Mapping[str, str] | None,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """One stage column as current positions, and the rows whose decision is forgotten."""
    if stages is None:  # positions in, positions out (tables that never left the process)
        if stage_names.is_named(col):
            raise ValueError(f"{name} holds stage names: loading needs the pipeline's stages")
        return col.to_numpy().astype(np.int16, copy=False), np.zeros(len(col), bool)
    if name == "stage":
        positions, missing = stage_names.decode(col, stages, migrate)
        if missing:
            raise stage_names.StagesRemoved(missing, where=where, stages=stages)
        migrated = np.zeros(len(col), bool)
        if migrate and stage_names.is_named(col):
            plain, _ = stage_names.decode(col, stages)
            migrated = plain == stage_names.UNKNOWN
        return positions, migrated
    positions, _ = stage_names.decode(col, stages)  # a decision does not migrate
    gone = positions == stage_names.UNKNOWN
    positions[gone] = NO_STAGE
    return positions, gone

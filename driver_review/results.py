"""Decision rows as a Parquet dataset under ``<data-dir>/reviews/``.

Each writer buffers rows and rolls a file over by row count or age, so a busy worker
writes a few large files instead of many tiny ones. Files are written under a temporary
name and renamed where the filesystem can (a local directory); on object stores a single
PUT is already all-or-nothing. ``<data-dir>`` is a local path or any ``pyarrow.fs`` URI.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

REVIEWS_DIR = "reviews"

CHECK_TYPE = pa.struct(
    [
        ("name", pa.string()),
        ("outcome", pa.string()),  # passed | failed | error
        ("reason", pa.string()),
        ("duration_s", pa.float64()),
    ]
)

SCHEMA = pa.schema(
    [
        ("driver_id", pa.string()),
        ("version", pa.string()),
        ("stage", pa.string()),
        ("verdict", pa.string()),  # approved | rejected | error | confirmed
        ("reasons", pa.map_(pa.string(), pa.string())),
        ("checks", pa.list_(CHECK_TYPE)),
        ("reviewed_at", pa.timestamp("us", tz="UTC")),
        # When the work item entered the backlog: reviewed_at - queued_at is the time from
        # intake (a ping's acceptance, a poll, a follow-up) to the decision.
        ("queued_at", pa.timestamp("us", tz="UTC")),
        ("duration_s", pa.float64()),
        ("lane", pa.string()),
        ("worker", pa.string()),
    ]
)


@dataclass(frozen=True, slots=True)
class ResultRow:
    driver_id: str
    version: str
    stage: str
    verdict: str
    reasons: dict[str, str]
    checks: list[dict]
    reviewed_at: float  # epoch seconds
    queued_at: float  # epoch seconds
    duration_s: float
    lane: str
    worker: str


def resolve(data_dir: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a local directory or a ``pyarrow.fs`` URI."""
    if "://" in data_dir:
        return pafs.FileSystem.from_uri(data_dir)
    return pafs.LocalFileSystem(), str(pafs.LocalFileSystem().normalize_path(data_dir))


def _table(rows: Sequence[ResultRow]) -> pa.Table:
    cols = {
        "driver_id": [r.driver_id for r in rows],
        "version": [r.version for r in rows],
        "stage": [r.stage for r in rows],
        "verdict": [r.verdict for r in rows],
        "reasons": [list(r.reasons.items()) for r in rows],
        "checks": [r.checks for r in rows],
        "reviewed_at": [int(r.reviewed_at * 1_000_000) for r in rows],
        "queued_at": [int(r.queued_at * 1_000_000) for r in rows],
        "duration_s": [r.duration_s for r in rows],
        "lane": [r.lane for r in rows],
        "worker": [r.worker for r in rows],
    }
    return pa.table(
        [
            pa.array(cols[f.name], pa.int64() if pa.types.is_timestamp(f.type) else f.type).cast(
                f.type
            )
            for f in SCHEMA
        ],
        schema=SCHEMA,
    )


class ResultWriter:
    def __init__(
        self,
        data_dir: str,
        *,
        name: str,
        rollover_rows: int,
        rollover_s: float,
        clock: Callable[[], float] = time.monotonic,
        subdir: str = REVIEWS_DIR,
        to_table: Callable[[Sequence[Any]], pa.Table] = _table,
    ) -> None:
        # ``subdir``/``to_table``: the same rolling, atomic writer serves other datasets
        # beside the reviews (the quarantine's, see :mod:`driver_review.quarantine`).
        self.fs, root = resolve(data_dir)
        self.dir = f"{root.rstrip('/')}/{subdir}"
        self._to_table = to_table
        self.fs.create_dir(self.dir, recursive=True)
        self.name = name.replace("/", "-").replace(":", "-")
        self.rollover_rows = rollover_rows
        self.rollover_s = rollover_s
        self.clock = clock
        self._rows: list[Any] = []
        self._opened_at = clock()
        self.files = 0
        self.rows_written = 0
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    def add(self, rows: Sequence[Any]) -> None:
        if not self._rows:
            self._opened_at = self.clock()
        self._rows.extend(rows)
        if len(self._rows) >= self.rollover_rows:
            self.flush()

    def due(self) -> bool:
        return bool(self._rows) and self.clock() - self._opened_at >= self.rollover_s

    def flush(self) -> str | None:
        if not self._rows:
            return None
        rows, self._rows = self._rows, []
        path = f"{self.dir}/part-{self.name}-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
        table = self._to_table(rows)
        if self._local:
            tmp = f"{self.dir}/.tmp-{uuid.uuid4().hex}"
            pq.write_table(table, tmp, filesystem=self.fs)
            self.fs.move(tmp, path)
        else:
            pq.write_table(table, path, filesystem=self.fs)
        self.files += 1
        self.rows_written += len(rows)
        return path

    @property
    def buffered(self) -> int:
        return len(self._rows)


def read_results(data_dir: str) -> pa.Table:
    """Every decision row written so far (empty table with the schema when none)."""
    return read_dataset(data_dir, REVIEWS_DIR, SCHEMA)


def read_dataset(data_dir: str, subdir: str, schema: pa.Schema) -> pa.Table:
    """Every row of one dataset under ``<data-dir>/<subdir>/`` (empty when none)."""
    fs, root = resolve(data_dir)
    path = f"{root.rstrip('/')}/{subdir}"
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return schema.empty_table()
    # Imported here: pyarrow.dataset brings pandas (half a second), and every actor
    # imports this module to write results, while only readers need it.
    import pyarrow.dataset as ds

    dataset = ds.dataset(
        path,
        filesystem=fs,
        format="parquet",
        schema=schema,
        exclude_invalid_files=False,
        ignore_prefixes=[".tmp-", "."],
    )
    return dataset.to_table()

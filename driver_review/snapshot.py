"""Ledger snapshots with the watermark, written atomically through ``pyarrow.fs``.

Layout under ``<data-dir>/snapshots/<instance>/``::

    ledger-<seq>.parquet       the ledger table; the watermark also in its metadata
    MANIFEST-<seq>.json        {file, rows, bytes, sha256, watermark, written_at}

A snapshot exists only once its manifest does, and the manifest is written after the data
file: a crash between the two leaves an orphan file that nobody reads. Each file is
written whole — under a temporary name and renamed on a local disk; on object stores a
single PUT is already all-or-nothing. On load the newest manifest whose file has the
recorded size and sha256 wins; a corrupt or half-written one is skipped with a warning
and the one before it used. The newest ``keep`` snapshots are kept.

The invariant that makes "nothing lost" true: the ledger in a snapshot holds every change
with a catalog time at or before its watermark (the poller moves the watermark only after
intake held what it read, and the table and the watermark are taken in one step).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from driver_review.errors import ConfigError
from driver_review.identifiers import instance_problem
from driver_review.results import resolve

log = logging.getLogger(__name__)

SNAPSHOTS_DIR = "snapshots"
KEEP = 3
_WATERMARK_KEY = b"driver_review.watermark"


@dataclass(frozen=True)
class Snapshot:
    table: pa.Table
    watermark: float
    seq: int
    path: str


class SnapshotStore:
    def __init__(self, data_dir: str, instance: str, *, keep: int = KEEP) -> None:
        problem = instance_problem(instance)
        if problem:  # "." or ".." would put snapshots outside their folder
            raise ConfigError(f"snapshots: {problem}")
        self.fs, root = resolve(data_dir)
        self.dir = f"{root.rstrip('/')}/{SNAPSHOTS_DIR}/{instance}"
        self.keep = keep
        self._local = isinstance(self.fs, pafs.LocalFileSystem)
        self.fs.create_dir(self.dir, recursive=True)
        self.skipped_corrupt = 0

    # -- writing -----------------------------------------------------------------------
    def write(self, table: pa.Table, watermark: float) -> str:
        seq = time.time_ns()
        meta = dict(table.schema.metadata or {})
        meta[_WATERMARK_KEY] = repr(watermark).encode()
        sink = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(meta), sink, compression="zstd")
        data = sink.getvalue()
        name = f"ledger-{seq}.parquet"
        self._put(f"{self.dir}/{name}", data)
        manifest = {
            "file": name,
            "rows": table.num_rows,
            "bytes": data.size,
            "sha256": hashlib.sha256(data).hexdigest(),
            "watermark": watermark,
            "written_at": time.time(),
        }
        self._put(f"{self.dir}/MANIFEST-{seq}.json", json.dumps(manifest).encode())
        self._prune()
        return f"{self.dir}/{name}"

    def _put(self, path: str, data: bytes | pa.Buffer) -> None:
        target = f"{self.dir}/.tmp-{uuid.uuid4().hex}" if self._local else path
        with self.fs.open_output_stream(target) as out:
            out.write(data)
        if self._local:
            self.fs.move(target, path)

    def _manifests(self) -> list[int]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        seqs = []
        for info in infos:
            name = info.base_name
            if name.startswith("MANIFEST-") and name.endswith(".json"):
                try:
                    seqs.append(int(name[len("MANIFEST-") : -len(".json")]))
                except ValueError:
                    continue
        return sorted(seqs, reverse=True)

    def _prune(self) -> None:
        for seq in self._manifests()[self.keep :]:
            for name in (f"MANIFEST-{seq}.json", f"ledger-{seq}.parquet"):
                with contextlib.suppress(OSError):  # already gone: nothing to prune
                    self.fs.delete_file(f"{self.dir}/{name}")

    # -- reading -----------------------------------------------------------------------
    def load(self, columns: list[str] | None = None) -> Snapshot | None:
        """The newest complete snapshot, or None when there is none; with ``columns``,
        only those columns of its table are decoded (the file is still verified whole)."""
        for seq in self._manifests():
            try:
                return self._read(seq, columns)
            except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
                self.skipped_corrupt += 1
                log.warning(
                    "snapshot %s in %s is unusable (%s); trying the one before", seq, self.dir, exc
                )
        return None

    def _read(self, seq: int, columns: list[str] | None = None) -> Snapshot:
        with self.fs.open_input_stream(f"{self.dir}/MANIFEST-{seq}.json") as f:
            manifest = json.loads(f.read())
        path = f"{self.dir}/{manifest['file']}"
        with self.fs.open_input_stream(path) as f:
            data = f.read()
        if len(data) != manifest["bytes"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            raise ValueError(f"{manifest['file']}: size or sha256 differs from its manifest")
        table = pq.read_table(pa.BufferReader(data), columns=columns)
        watermark = float((table.schema.metadata or {})[_WATERMARK_KEY])
        if watermark != manifest["watermark"]:
            raise ValueError(f"{manifest['file']}: watermark differs from its manifest")
        return Snapshot(table, watermark, seq, path)

from __future__ import annotations

import logging

import numpy as np

from driver_review.ledger import Change, Ledger, Status, Verdict
from driver_review.snapshot import SnapshotStore


def _ledger(n: int) -> Ledger:
    ledger = Ledger()
    for i in range(n):
        ledger.observe(Change(f"drv-{i}", f"1.{i}", 0, Status.IN_REVIEW, float(i + 1)))
    ledger.decide(0, version="1.0", stage=0, verdict=Verdict.APPROVED, reviewed_at=9.0)
    return ledger


def test_round_trip_keeps_ledger_and_watermark(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path), "main")
    ledger = _ledger(50)
    store.write(ledger.to_arrow(), watermark=1234.5)
    snap = store.load()
    assert snap is not None and snap.watermark == 1234.5
    back = Ledger.from_arrow(snap.table)
    np.testing.assert_array_equal(back.col("version"), ledger.col("version"))
    assert back.is_decided(back.row("drv-0"), "1.0", 0)


def test_no_snapshot_loads_none(tmp_path) -> None:
    assert SnapshotStore(str(tmp_path), "main").load() is None


def test_corrupt_newest_falls_back_to_previous_with_a_warning(tmp_path, caplog) -> None:
    store = SnapshotStore(str(tmp_path), "main")
    store.write(_ledger(10).to_arrow(), watermark=10.0)
    newest = store.write(_ledger(20).to_arrow(), watermark=20.0)
    with open(newest, "r+b") as f:  # flip bytes in the middle: a torn or rotted file
        f.seek(100)
        f.write(b"\x00" * 32)
    with caplog.at_level(logging.WARNING):
        snap = store.load()
    assert snap is not None and snap.watermark == 10.0 and snap.table.num_rows == 10
    assert store.skipped_corrupt == 1
    assert "unusable" in caplog.text


def test_data_file_without_manifest_is_ignored(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path), "main")
    store.write(_ledger(5).to_arrow(), watermark=5.0)
    # A crash after the data file and before its manifest leaves an orphan.
    (tmp_path / "snapshots" / "main" / "ledger-99999999999999999999.parquet").write_bytes(b"x")
    snap = store.load()
    assert snap is not None and snap.watermark == 5.0


def test_only_the_newest_few_are_kept(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path), "main", keep=2)
    for k in range(5):
        store.write(_ledger(3).to_arrow(), watermark=float(k))
    names = sorted(p.name for p in (tmp_path / "snapshots" / "main").iterdir())
    assert len([n for n in names if n.startswith("MANIFEST-")]) == 2
    assert store.load().watermark == 4.0

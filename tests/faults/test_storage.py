"""``<data-dir>`` on object storage: results, snapshots and recovery through ``s3://``.

A real S3-compatible server (moto in server mode) runs on loopback for the module; every
test writes under a bucket of its own. Ray workers get nothing but the URI.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import numpy as np
import pyarrow.fs as pafs
import pytest
import ray

from driver_review.ledger import Change, Ledger, Status, Verdict
from driver_review.results import ResultRow, ResultWriter, read_results, resolve
from driver_review.runtime.names import NAMESPACE
from driver_review.sim import SimSettings
from driver_review.snapshot import SnapshotStore
from driver_review.sweep import SweepOptions, run_sweep
from driver_review.warmstart import LearntStore
from tests.faults.s3 import S3Server, moto_server
from tests.support.configs import fast_config
from tests.support.live import converged, diverged, start_live
from tests.support.results import result_row
from tests.support.wait import poll_until


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with moto_server() as server:
        yield server


@pytest.fixture
def s3_dir(s3: S3Server) -> tuple[str, str]:
    """``(uri, bucket/prefix)`` of an empty data dir in a bucket of this test's own."""
    bucket = s3.create_bucket()
    return s3.uri(bucket, "data"), f"{bucket}/data"


def _row(i: int, failed: str | None = None) -> ResultRow:
    return result_row(f"drv-{i}", 1_700_000_000.5 + i, failed=failed)


def _ledger(n: int) -> Ledger:
    ledger = Ledger()
    for i in range(n):
        ledger.observe(Change(f"drv-{i}", f"1.{i}", 0, Status.IN_REVIEW, float(i + 1)))
    ledger.decide(0, version="1.0", stage=0, verdict=Verdict.APPROVED, reviewed_at=9.0)
    return ledger


# -- the storage layer on s3, without Ray ------------------------------------------------


@pytest.mark.timeout(60)
def test_uri_resolves_to_an_s3_filesystem_with_the_bucket_path(s3_dir) -> None:
    uri, path = s3_dir
    fs, root = resolve(uri)
    assert isinstance(fs, pafs.S3FileSystem)
    assert root == path


@pytest.mark.timeout(60)
def test_results_round_trip_on_s3(s3_dir) -> None:
    uri, path = s3_dir
    assert read_results(uri).num_rows == 0  # nothing written yet: the schema, no rows
    writer = ResultWriter(uri, name="main/worker/intake/1", rollover_rows=4, rollover_s=60)
    started = time.perf_counter()
    writer.add([_row(i) for i in range(4)])  # reaching 4 rows rolls a file over
    writer.add([_row(i) for i in range(4, 8)])
    writer.add([_row(i) for i in range(8, 10)] + [_row(10, failed="hardware_ids_valid")])
    assert writer.files == 2 and writer.buffered == 3
    writer.flush()
    write_s = time.perf_counter() - started
    assert writer.files == 3 and writer.rows_written == 11
    started = time.perf_counter()
    table = read_results(uri)
    read_s = time.perf_counter() - started
    print(
        f"s3 results: 11 rows in {writer.files} files, write {write_s * 1000:.0f} ms, "
        f"read {read_s * 1000:.0f} ms"
    )
    assert table.num_rows == 11
    assert sorted(table.column("driver_id").to_pylist()) == sorted(f"drv-{i}" for i in range(11))
    rejected = table.filter(np.asarray(table.column("verdict").to_pylist()) == "rejected")
    assert rejected.column("reasons").to_pylist() == [[("hardware_ids_valid", "bad id")]]
    assert table.schema.field("reviewed_at").type.tz == "UTC"
    fs, _ = resolve(uri)
    names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{path}/reviews"))]
    assert len(names) == 3 and all(n.startswith("part-main-worker-intake-1-") for n in names)


@pytest.mark.timeout(60)
def test_learnt_limits_round_trip_on_s3(s3_dir) -> None:
    uri, path = s3_dir
    store = LearntStore(uri)
    assert store.load() == {}
    entry = {
        "safe_rate": 58.0,
        "limit_estimate": 60.0,
        "header_rate": None,
        "window_s": 61.5,
        "strict_spacing": True,
        "learnt_at": 9.0,
    }
    store.save({"https://api.vendor.example:443": entry})
    LearntStore(uri).save({"checks": {**entry, "safe_rate": 9.0}})
    assert LearntStore(uri).load() == {
        "https://api.vendor.example:443": entry,
        "checks": {**entry, "safe_rate": 9.0},
    }
    fs, _ = resolve(uri)
    names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{path}/governor"))]
    assert names == ["endpoints.json"]


@pytest.mark.timeout(60)
def test_snapshots_round_trip_on_s3(s3_dir) -> None:
    uri, path = s3_dir
    store = SnapshotStore(uri, "main")
    assert store.load() is None
    ledger = _ledger(200)
    started = time.perf_counter()
    written = store.write(ledger.to_arrow(), watermark=1234.5)
    write_s = time.perf_counter() - started
    assert written.startswith(f"{path}/snapshots/main/ledger-")
    started = time.perf_counter()
    snap = SnapshotStore(uri, "main").load()  # a fresh store, as after a restart
    load_s = time.perf_counter() - started
    print(f"s3 snapshot of 200 drivers: write {write_s * 1000:.0f} ms, load {load_s * 1000:.0f} ms")
    assert snap is not None and snap.watermark == 1234.5 and snap.path == written
    back = Ledger.from_arrow(snap.table)
    np.testing.assert_array_equal(back.col("version"), ledger.col("version"))
    assert back.is_decided(back.row("drv-0"), "1.0", 0)


@pytest.mark.timeout(60)
def test_corrupt_newest_snapshot_on_s3_falls_back_to_the_one_before(s3_dir) -> None:
    uri, _ = s3_dir
    store = SnapshotStore(uri, "main")
    store.write(_ledger(10).to_arrow(), watermark=10.0)
    newest = store.write(_ledger(20).to_arrow(), watermark=20.0)
    fs, _ = resolve(uri)
    with fs.open_input_stream(newest) as f:
        data = bytearray(f.read())
    data[100:132] = b"\x00" * 32  # a rotted object: same size, other bytes
    with fs.open_output_stream(newest) as out:
        out.write(bytes(data))
    # ... and a data object whose manifest never made it (crash between the two PUTs)
    with fs.open_output_stream(f"{store.dir}/ledger-99999999999999999999.parquet") as out:
        out.write(b"x")
    reader = SnapshotStore(uri, "main")
    snap = reader.load()
    assert snap is not None and snap.watermark == 10.0 and snap.table.num_rows == 10
    assert reader.skipped_corrupt == 1


@pytest.mark.timeout(60)
def test_only_the_newest_snapshots_are_kept_on_s3(s3_dir) -> None:
    uri, _ = s3_dir
    store = SnapshotStore(uri, "main", keep=2)
    for k in range(5):
        store.write(_ledger(3).to_arrow(), watermark=float(k))
    names = [i.base_name for i in store.fs.get_file_info(pafs.FileSelector(store.dir))]
    assert len([n for n in names if n.startswith("MANIFEST-")]) == 2
    assert len([n for n in names if n.startswith("ledger-")]) == 2
    assert store.load().watermark == 4.0


# -- the pipeline on s3, on the session's Ray --------------------------------------------


@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.timeout(300)
def test_sweep_writes_one_row_per_decision_to_s3(sim_factory, s3_dir) -> None:
    uri, path = s3_dir
    sim = sim_factory(SimSettings(drivers=150, seed=11))
    summary = run_sweep(fast_config(sim.url), SweepOptions(data_dir=uri, timeout_s=240))
    assert not summary["timed_out"]
    results = read_results(uri)
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()
    done, total = sim.state.converged()
    print(
        f"sweep to s3: {summary['drivers']} drivers in {summary['wall_s']:.1f}s, "
        f"decisions {summary['decisions']}, {results.num_rows} rows under {path}/reviews, "
        f"converged {done}/{total}"
    )
    assert summary["drivers"] == 150 and done == total
    assert results.num_rows == sum(summary["decisions"].values())
    rows = results.select(["driver_id", "version", "stage", "verdict"]).to_pylist()
    keys = [
        (r["driver_id"], r["version"], r["stage"])
        for r in rows
        if r["verdict"] in ("approved", "rejected")
    ]
    assert len(keys) == len(set(keys)), "more than one decision row per (driver, version, stage)"
    assert len(keys) == stats["decisions"] - stats["duplicate_decisions"]


@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.timeout(420)
def test_orchestrator_recovers_from_a_snapshot_on_s3(sim_factory, s3_dir, serve_cleanup) -> None:
    uri, path = s3_dir
    live = start_live(sim_factory, uri, drivers=300, update_rate=20.0, seed=12)
    name = live.system.orchestrator.name
    instance = live.system.instance
    assert poll_until(lambda: live.stats()["webhooks"].get("delivered", 0) > 0, 60)
    # The bootstrap snapshot is written as soon as the listing is held.
    assert poll_until(
        lambda: live.system.orchestrator.call_sync("stats")["snapshots_written"] >= 2, 60
    )
    resume_s: list[float] = []
    restored: list[str] = []
    for _ in range(3):
        time.sleep(2.0)
        before = live.system.orchestrator.call_sync("stats")["started_at"]
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=False)
        killed = time.monotonic()

        def back(before: float = before) -> bool:
            try:
                return live.system.orchestrator.call_sync("stats")["started_at"] != before
            except Exception:
                return False

        assert poll_until(back, 60, every_s=0.05), "the orchestrator did not come back"
        resume_s.append(time.monotonic() - killed)
        restored.append(live.system.orchestrator.call_sync("stats")["restored_from"])
    httpx.post(f"{live.sim.url}/_sim/pause", timeout=60)
    ok = poll_until(lambda: converged(live.sim), 240)
    stats = live.stats()
    wrong = [] if ok else diverged(live.sim, live.system.orchestrator)
    live.stop()
    done, total = live.sim.state.converged()
    snap = SnapshotStore(uri, instance).load()
    results = read_results(uri)
    print(
        f"s3 recovery: 3 kills, kill-to-resume {[round(s, 2) for s in resume_s]}s; "
        f"restored from {restored[-1]}; converged {done}/{total}; "
        f"{stats['changes_generated']} changes, decisions {stats['decisions']} "
        f"({stats['duplicate_decisions']} duplicates); listings {stats['listing_scans']}; "
        f"{results.num_rows} result rows on s3"
    )
    assert ok, f"only {done}/{total} drivers reached their true state: {wrong}"
    prefix = f"{path}/snapshots/{instance}/ledger-"
    assert all(r is not None and r.startswith(prefix) for r in restored), restored
    assert stats["listing_scans"]["full"] == 1  # restarts poll changes since, never re-list
    assert snap is not None and snap.path.startswith(prefix)
    assert results.num_rows > 0

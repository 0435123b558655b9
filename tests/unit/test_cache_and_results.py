from __future__ import annotations

from datetime import UTC, datetime

import pyarrow.parquet as pq

from driver_review.cache import CacheCore, Entry
from driver_review.report import build_report
from driver_review.results import ResultRow, ResultWriter, read_results
from tests.support.results import result_row


def test_cache_hits_only_the_same_version_and_counts_each_outcome() -> None:
    cache = CacheCore(max_entries=10, max_bytes=10_000)
    assert cache.lookup("a", "1") is None
    cache.store("a", Entry("1", '"e1"', "rec-a1", 100))
    assert cache.lookup("a", "1").value == "rec-a1"
    assert cache.lookup("a", "2") is None  # another version: stale, must revalidate
    assert cache.etag_of("a") == '"e1"'
    s = cache.stats()
    assert (s["hits"], s["misses"], s["stale"]) == (1, 1, 1)


def test_cache_evicts_least_recently_used_by_entries_and_bytes() -> None:
    cache = CacheCore(max_entries=3, max_bytes=250)
    for key in "abc":
        cache.store(key, Entry("1", None, key, 80))
    cache.lookup("a", None)  # a is now the most recent
    cache.store("d", Entry("1", None, "d", 80))  # over 250 bytes and 3 entries
    assert cache.peek("b") is None and cache.peek("a") is not None
    assert len(cache) == 3 and cache.bytes == 240
    cache.store("e", Entry("1", None, "e", 200))
    assert cache.bytes <= 250 and cache.peek("e") is not None
    assert cache.stats()["evictions"] >= 3


def _row(i: int, at: float = 1_700_000_000.5, waited_s: float = 0.5) -> ResultRow:
    return result_row(f"drv-{i}", at, failed="hardware_ids_valid", waited_s=waited_s)


def test_writer_rolls_over_by_rows_and_by_age(tmp_path) -> None:
    now = [0.0]
    w = ResultWriter(
        str(tmp_path),
        name="main/worker/intake/1",
        rollover_rows=3,
        rollover_s=10,
        clock=lambda: now[0],
    )
    w.add([_row(i) for i in range(2)])
    assert w.files == 0 and w.buffered == 2
    w.add([_row(i) for i in range(2, 6)])  # reaching 3 rows rolls the file over
    assert w.files == 1 and w.buffered == 0
    w.add([_row(6)])
    assert not w.due()
    now[0] = 11
    assert w.due()
    w.flush()
    table = read_results(str(tmp_path))
    assert table.num_rows == 7
    assert set(table.column_names) >= {
        "driver_id",
        "version",
        "stage",
        "verdict",
        "reasons",
        "reviewed_at",
    }
    files = list((tmp_path / "reviews").iterdir())
    assert len(files) == 2 and not any(f.name.startswith(".tmp") for f in files)
    first = pq.read_table(files[0])
    assert first.schema.field("reviewed_at").type.tz == "UTC"


def test_reading_an_empty_data_dir_gives_the_schema(tmp_path) -> None:
    assert read_results(str(tmp_path / "nothing")).num_rows == 0


def test_a_report_since_a_moment_counts_only_the_decisions_made_from_then_on(tmp_path) -> None:
    w = ResultWriter(str(tmp_path), name="w", rollover_rows=100, rollover_s=10)
    earlier = [_row(i) for i in range(3)]  # reviewed at 1_700_000_000.5
    later = [_row(i, at=1_700_000_100.0, waited_s=2.0) for i in range(3, 5)]
    w.add(earlier + later)
    w.flush()
    since = datetime.fromtimestamp(1_700_000_050, UTC)
    everything, recent = build_report(str(tmp_path)), build_report(str(tmp_path), since=since)
    assert everything["rows"] == 5 and recent["rows"] == 2 and recent["drivers"] == 2
    assert everything["rows_in_dir"] == recent["rows_in_dir"] == 5
    assert recent["intake_to_decision_s"]["p50"] == 2.0  # the later rows' wait alone
    assert build_report(str(tmp_path), since=datetime.now(UTC))["rows"] == 0

"""The live page's history (rates from status counters) and ``explain`` over Parquet
written by the real result writer; no Ray."""

from __future__ import annotations

import pytest

from driver_review.errors import ConfigError
from driver_review.explain import explain, format_explanation, known
from driver_review.explain_cli import run_explain
from driver_review.results import ResultWriter
from serve_app.history import StatusHistory
from tests.support.results import result_row


def _doc(at: float, decided: dict[str, int], ok: int = 0, r429: int = 0, fresh: int = 0) -> dict:
    return {
        "at": at,
        "backlog": {"intake": {"fresh": fresh, "stale": 1, "queued": fresh + 1}},
        "pools": {"intake": {"workers": 2}},
        "leased": 3,
        "counters": {"verdicts_by_stage": {s: {"approved": n} for s, n in decided.items()}},
        "governor": {
            "http://cat:80": {
                "rate": 10.0,
                "limit_estimate": 12.0,
                "ok": ok,
                "429s": r429,
                "503s": 0,
                "paused_for_s": 0.0,
            }
        },
    }


def test_rates_are_counter_differences_over_time() -> None:
    h = StatusHistory(window_s=60)
    first = h.add(_doc(100.0, {"intake": 10}, ok=50))
    assert first is not None and first["decisions_per_s"] == {"intake": 0.0}
    point = h.add(_doc(102.0, {"intake": 16, "security": 4}, ok=70, r429=2, fresh=5))
    assert point is not None
    assert point["decisions_per_s"] == {"intake": 3.0, "security": 2.0}
    endpoint = point["endpoints"]["http://cat:80"]
    assert endpoint["answers_per_s"] == 11.0 and endpoint["r429_per_s"] == 1.0
    assert endpoint["limit"] == 12.0 and point["backlog"] == {"intake": [5, 1]}


def test_a_counter_that_restarted_counts_from_zero_and_a_cached_doc_once() -> None:
    h = StatusHistory(window_s=60)
    h.add(_doc(100.0, {"intake": 500}))
    assert h.add(_doc(100.0, {"intake": 500})) is None  # the same cached document
    assert h.add(_doc(99.0, {"intake": 500})) is None  # older
    point = h.add(_doc(101.0, {"intake": 4}))  # the orchestrator restarted
    assert point is not None and point["decisions_per_s"] == {"intake": 4.0}
    assert len(h.points) == 2


def test_history_is_bounded_by_age_and_count() -> None:
    h = StatusHistory(window_s=10, max_points=5)
    for i in range(20):
        h.add(_doc(100.0 + i, {"intake": i}))
    assert len(h.points) == 5
    assert [p["t"] for p in h.since(116.5)] == [117.0, 118.0, 119.0]
    h2 = StatusHistory(window_s=10)
    for i in range(30):
        h2.add(_doc(100.0 + i, {"intake": i}))
    assert h2.points[0]["t"] >= 119.0 - 10
    with pytest.raises(ValueError):
        StatusHistory(window_s=0)


def test_explain_groups_a_drivers_decisions_by_version(tmp_path) -> None:
    writer = ResultWriter(str(tmp_path), name="t", rollover_rows=2, rollover_s=60)
    writer.add(
        [
            result_row("drv-1", 1000.0),
            result_row("drv-2", 1000.5, version="3.0"),
            result_row(
                "drv-1", 1001.0, stage="security", failed="package_digest", reason="sha256 mismatch"
            ),
            result_row("drv-1", 1002.0, version="1.1"),
        ]
    )
    writer.flush()
    doc = explain(str(tmp_path), "drv-1")
    assert known(doc) and doc["decisions"] == 3
    assert [v["version"] for v in doc["versions"]] == ["1.0", "1.1"]
    rejected = doc["versions"][0]["decisions"][1]
    assert rejected["stage"] == "security" and rejected["verdict"] == "rejected"
    assert rejected["reasons"] == {"package_digest": "sha256 mismatch"}
    assert rejected["waited_s"] == 0.5
    text = "\n".join(format_explanation(doc, "not asked"))
    assert "package_digest" in text and "sha256 mismatch" in text and "ledger: not asked" in text
    assert not known(explain(str(tmp_path), "drv-3"))
    assert not known(explain(str(tmp_path / "nothing-here"), "drv-1"))


def test_explain_command_refuses_a_bad_id_and_an_unknown_one(tmp_path, capsys) -> None:
    with pytest.raises(ConfigError, match="DRIVER_ID"):
        run_explain("a/b", data_dir=str(tmp_path), admin_url=None, as_json=False)
    assert run_explain("drv-9", data_dir=str(tmp_path), admin_url=None, as_json=False) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'drv-9'" in err

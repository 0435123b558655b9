"""The README's benchmark table is the rendering of the committed ``docs/bench.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.bench.table import END, START, main, render, replace_section

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_the_rendering_of_the_committed_bench_json() -> None:
    doc = json.loads((ROOT / "docs" / "bench.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert replace_section(readme, render(doc)) == readme, (
        "README's benchmark table differs from docs/bench.json: run "
        "python -m jobs.bench.table docs/bench.json --readme README.md"
    )


def test_rows_say_value_target_and_met_and_a_failed_scenario_shows_its_error() -> None:
    doc = {
        "bench": {"quick": False, "started_at": "2026-12-01T02:00:00+00:00", "elapsed_s": 1234.5},
        "machine": {"cores": 2, "python": "3.11", "ray": "2.60", "load_average_start": [0.8]},
        "summary": {"targets_met": 1, "targets_missed": 1, "errors": []},
        "scenarios": {
            "utilization": {
                "targets": {
                    "x.rate_limited_share": {"value": 0.0123, "target": "<= 0.01", "met": False},
                    "x.utilization_ratio": {
                        "value": 0.9612,
                        "target": ">= 0.95",
                        "met": True,
                        "note": "a | pipe",
                    },
                }
            },
            "ingress": {"error": "RuntimeError: no port"},
        },
    }
    table = render(doc)
    assert "a full run of every scenario started 2026-12-01T02:00 UTC, 1,234 s, on 2 cores" in table
    assert "| utilization | `x.rate_limited_share` | 1.23% | ≤ 1% | **no** |" in table
    assert "| | `x.utilization_ratio` (a \\| pipe) | 0.961 | ≥ 0.95 | yes |" in table.replace(
        "|  |", "| |"
    )
    assert "| ingress | (did not run) | RuntimeError: no port | | no |" in table


def test_the_readme_is_rewritten_between_its_markers_only(tmp_path, capsys) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"scenarios": {}}))
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{START}\nold table\n{END}\nafter\n")
    assert main([str(bench), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"before\n{START}\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text and "| scenario | figure |" in text
    readme.write_text("no markers\n")
    assert main([str(bench), "--readme", str(readme)]) == 2
    assert "markers" in capsys.readouterr().err
    with pytest.raises(ValueError):
        replace_section("x", "table")

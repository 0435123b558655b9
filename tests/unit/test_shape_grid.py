"""The multi-seed grid of cold discovery (tests/support/shape_grid.py): its cases, its
summary, and its command line."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.shape_grid import Outcome, cases, main, run_case, summarize


def test_cases_cover_every_shape_limit_and_seed() -> None:
    todo = cases(seeds=3, jitter_s=0.001, processes=3, duration_s=10.0)
    assert len(todo) == 8 * 3 * 3
    assert {c.seed for c in todo} == {0, 1, 2}
    # Each seed starts at its own phase against a window's edge.
    assert {(c.seed, c.phase_s) for c in todo} == {(0, 0.0), (1, 1 / 3), (2, 2 / 3)}
    assert {(c.shape, c.retry_after) for c in todo if c.shape in ("token", "haproxy")} == {
        ("token", True),
        ("haproxy", False),
    }


def test_summary_groups_by_shape_and_limit_and_counts_the_target() -> None:
    outcomes = [
        Outcome("fixed", 60.0, 0.96, 0.005),  # met
        Outcome("fixed", 60.0, 0.90, 0.002),  # too slow
        Outcome("leaky", 10.0, 0.99, 0.02),  # too many 429s
    ]
    lines = summarize(outcomes)
    assert lines[0].split() == [
        "fixed", "60/s", "mean", "0.930", "lowest", "0.900", "429s", "0.35%", "met", "1/2",
    ]  # fmt: skip
    assert "met 0/1" in lines[1]
    assert lines[-1] == "all: mean 0.9500, met 1/3"


def test_a_case_runs_on_the_fake_clock_and_reports_its_figures() -> None:
    (case,) = cases(
        seeds=1, jitter_s=0.001, processes=3, duration_s=20.0, shapes=[("token", True)], rates=[60]
    )
    outcome = run_case(case)
    assert outcome.shape == "token" and outcome.rate == 60
    assert 0.5 < outcome.utilization <= 1.05 and 0 < outcome.share_429 < 0.05
    # A token bucket has no edge: started half a second later, the run and its figures
    # (taken from its start, over as long) are the same.
    later = run_case(dataclasses.replace(case, phase_s=0.5))
    assert later.utilization == pytest.approx(outcome.utilization, abs=0.005)


def test_an_unknown_shape_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--shapes", "token,bucket"])
    assert "unknown shape 'bucket'" in capsys.readouterr().err

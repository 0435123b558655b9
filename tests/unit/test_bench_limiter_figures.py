"""The limiter scenario's figures from a limiter's log: pure, no servers."""

from __future__ import annotations

import pytest

from jobs.bench import limiter_shapes
from jobs.bench.limiter_shapes import RATE_PER_S, _figures, _note, _per_second

SWEEP = {"timed_out": False, "wall_s": 70.0}
COLD_S = 20.0


def _log(cold_rate: float, rate: float, seconds: float) -> list[tuple[float, str]]:
    """A listing, then calls at ``cold_rate`` for COLD_S and at ``rate`` after."""
    entries = [(0.0, "200")]
    t = 0.5
    while t < 0.5 + seconds:
        entries.append((t, "200"))
        t += 1.0 / (cold_rate if t < 0.5 + COLD_S else rate)
    return entries


def test_a_cold_start_shows_in_the_series_and_apart_from_what_was_held_after() -> None:
    entries = _log(RATE_PER_S / 2, RATE_PER_S, 60.0)
    entries.append((3.0, "429"))
    out = _figures("x", entries, {}, SWEEP, (10, 10), COLD_S)
    series = out["useful_calls_per_second_series"]
    assert len(series) == 60
    assert all(29 <= n <= 31 for n in series[: int(COLD_S)])
    assert all(59 <= n <= 61 for n in series[int(COLD_S) + 1 : -1])
    assert out["utilization_after_cold_ratio"] == pytest.approx(1.0, abs=0.01)
    # the whole sweep: 20 s at half the limit and 40 s at it
    assert out["utilization_ratio"] == pytest.approx((10 + 40) / 60, abs=0.01)
    assert out["rate_limited_calls"] == 1
    note = _note({**out, "paced_client": {"utilization_ratio": 0.98}})
    assert note == "after the first 20 s 1; a paced client that knows the limit: 0.98 at <= 1% 429s"


def test_a_sweep_shorter_than_its_cold_start_has_no_figure_after_it() -> None:
    out = _figures("x", _log(RATE_PER_S, RATE_PER_S, COLD_S / 2), {}, SWEEP, (1, 1), COLD_S)
    assert out["utilization_after_cold_ratio"] is None
    note = _note({**out, "paced_client": {"error": "boom"}})
    assert note == "the paced client failed"


def test_per_second_counts_from_the_first_time() -> None:
    assert _per_second([]) == []
    assert _per_second([10.0, 10.2, 11.9, 13.0]) == [2, 1, 0, 1]


def test_each_run_mode_has_a_figure_after_its_cold_start() -> None:
    """A quick sweep lasts SWEEP_S at the limit at the least: its cold window must end
    well inside it, or the quick benchmark reports a figure without a value."""
    for quick in (False, True):
        assert limiter_shapes.COLD_S[quick] <= limiter_shapes.SWEEP_S[quick] / 3


def test_each_run_records_what_the_governor_did_per_endpoint() -> None:
    """Whether a sweep lost its share to a step back, an echo pause or a window found
    still shut shows in its counters, kept beside its figures (rounded, named fields)."""
    stats = {
        "catalog": {
            "state": "aimd",
            "rate": 58.123456,
            "limit_estimate": 59.31,
            "window_s": None,
            "ok": 2990,
            "429s": 12,
            "decreases": 5,
            "echo_pauses": 1,
            "shut_pauses": 0,
            "strict_spacing": True,
            "decided": {"slow start": 1, "same count": 4},
            "decisions": [{"ago_s": 12.3456, "why": "same count", "pace": 61.789, "served": 59}],
            "grants": 900,  # not kept
        },
        "broken": "not a dict",
    }
    out = _figures(
        "x", _log(RATE_PER_S, RATE_PER_S, 30.0), {}, {**SWEEP, "governor": stats}, (1, 1), COLD_S
    )
    kept = {k: v for k, v in stats["catalog"].items() if k not in ("window_s", "grants")}
    # no window found: left out, as the benchmark records no figure without a value
    decisions = [{"ago_s": 12.35, "why": "same count", "pace": 61.79, "served": 59}]
    assert out["governor"] == {"catalog": {**kept, "rate": 58.12, "decisions": decisions}}
    assert (
        _figures("x", _log(RATE_PER_S, RATE_PER_S, 5.0), {}, SWEEP, (1, 1), COLD_S)["governor"]
        == {}
    )

"""What an operator reads of an endpoint's last decisions (``decisions`` in its stats,
``/status`` and ``driver-review status --json``): the pace each 429 came at, what the
meter read before it, what it concluded, and the rate it set, on the fake clock."""

from __future__ import annotations

from collections import Counter

import pytest

from driver_review.discovery import SETTLE
from driver_review.governor import RECENT_DECISIONS
from driver_review.status import _governor
from tests.support.rate_sim import Run, ShapeServer, simulate


def _run(shape: str, duration_s: float, *, retry_after: bool) -> Run:
    return simulate(
        ShapeServer(shape, 60.0, retry_after=retry_after),
        duration_s=duration_s,
        latency_s=0.01,
        jitter_s=0.001,
        processes=3,
    )


def test_each_decision_shows_what_it_read_and_the_reading_in_force_after_late_reports() -> None:
    """A sliding window of 60/s: slow start, then a 429 read as the floor at once and,
    once the late reports were in, as a count to verify (here, and usually). Each entry
    is counted under the reading in force, and names the one it replaced."""
    stats = _run("sliding", 60.0, retry_after=True).gov.stats()
    decisions = stats["decisions"]
    for d in decisions:
        print(f"  {d}")
    assert 2 <= len(decisions) == stats["decreases"] <= RECENT_DECISIONS
    assert Counter(d["why"] for d in decisions) == stats["decided"]
    assert decisions[0]["why"] == "slow start" and decisions[0]["costly"]
    ages = [d["ago_s"] for d in decisions]
    assert ages == sorted(ages, reverse=True) and ages[-1] >= 0
    for d in decisions:
        assert d["rate"] == pytest.approx(SETTLE * d["estimate"])
        assert d["ceiling"] >= d["estimate"] > 0 and d["pace"] > 0
    revised = [d for d in decisions if "first" in d]
    assert revised and all(d["first"] != d["why"] for d in revised)
    # Status keeps them beside the counts.
    (shown,) = _governor({stats["key"]: dict(stats)}).values()
    assert shown["decisions"] == decisions and shown["decided"] == stats["decided"]


def test_only_the_last_decisions_are_kept() -> None:
    """nginx without burst steps back a little at each 429 that costs a request: over two
    minutes, more decisions than are kept. The newest are, in order."""
    stats = _run("leaky", 120.0, retry_after=False).gov.stats()
    decisions = stats["decisions"]
    assert stats["decreases"] > RECENT_DECISIONS == len(decisions)
    assert sum(stats["decided"].values()) == stats["decreases"]
    assert decisions[0]["why"] != "cheap slow start"  # the oldest was let go
    assert all(not d["costly"] for d in decisions)
    ages = [d["ago_s"] for d in decisions]
    assert ages == sorted(ages, reverse=True)

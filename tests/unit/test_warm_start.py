"""Warm start: a governor starts from what an earlier run learnt of its endpoint, trusts it
only for a while, and verifies it as it goes; the store that keeps it under the data dir."""

from __future__ import annotations

import json

import pytest

from driver_review.config import GovernorConfig
from driver_review.governor import RateGovernor
from driver_review.warmstart import LearntStore
from tests.support.rate_sim import WALL0, TokenBucketServer, simulate

LIMIT = 60.0


def _learnt_after_a_cold_run() -> dict:
    cold = simulate(TokenBucketServer(LIMIT, 10), duration_s=60.0)
    learnt = cold.gov.learnt()
    assert learnt is not None
    return learnt


def _warm(learnt: dict, *, age_s: float = 60.0, config: GovernorConfig | None = None):
    gov = RateGovernor(config or GovernorConfig(), wall_clock=lambda: WALL0)
    used = gov.warm_start({**learnt, "learnt_at": WALL0 - age_s}, 0.0)
    return gov, used


def test_a_cold_governor_has_learnt_nothing_and_a_run_learns_a_safe_rate_under_the_limit() -> None:
    assert RateGovernor(GovernorConfig()).learnt() is None
    learnt = _learnt_after_a_cold_run()
    assert 0.85 * LIMIT <= learnt["safe_rate"] <= LIMIT, learnt
    assert learnt["limit_estimate"] >= learnt["safe_rate"]


def test_a_warm_start_runs_at_the_limit_from_the_first_seconds_without_429s() -> None:
    learnt = _learnt_after_a_cold_run()
    gov, used = _warm(learnt)
    assert used and gov.state(0.0) == "aimd"
    warm = simulate(TokenBucketServer(LIMIT, 10), duration_s=15.0, governor=gov)
    cold = simulate(TokenBucketServer(LIMIT, 10), duration_s=15.0)
    warm_rate = warm.served_rate(0.5, 5.0) / LIMIT
    cold_rate = cold.served_rate(0.5, 5.0) / LIMIT
    assert warm_rate >= 0.9, (warm_rate, cold_rate)
    assert warm_rate > cold_rate + 0.2
    assert warm.share_429(0.0, 15.0) == 0.0
    assert gov.stats()["warm_start"]["age_s"] == pytest.approx(60.0)


def test_a_stale_or_disabled_warm_start_is_ignored() -> None:
    learnt = _learnt_after_a_cold_run()
    gov, used = _warm(learnt, age_s=3601.0)
    assert not used and gov.state(0.0) == "slow_start" and gov.rate == 5.0
    gov, used = _warm(learnt, age_s=10.0, config=GovernorConfig(warm_start_s=0))
    assert not used
    gov, used = _warm(learnt, age_s=-30.0)  # learnt "in the future": a clock gone wrong
    assert not used


def test_a_limit_that_dropped_since_is_found_afresh_after_one_refusal() -> None:
    learnt = _learnt_after_a_cold_run()
    gov, _ = _warm(learnt)
    run = simulate(TokenBucketServer(LIMIT / 2, 5), duration_s=40.0, governor=gov)
    assert run.gov.rate <= LIMIT / 2
    assert run.served_rate(20.0, 40.0) >= 0.85 * LIMIT / 2
    assert run.share_429(20.0, 40.0) <= 0.02
    assert (run.gov.learnt() or {})["safe_rate"] <= LIMIT / 2


def test_nonsense_in_a_learnt_entry_starts_cold() -> None:
    for entry in (
        {"safe_rate": None, "limit_estimate": None},
        {"safe_rate": -3.0, "limit_estimate": "fast"},
        {"safe_rate": float("nan"), "limit_estimate": 0.0},
    ):
        gov, used = _warm({**entry, "header_rate": None})
        assert not used and gov.state(0.0) == "slow_start"


def test_a_warm_start_keeps_spacing_strict_where_429s_came_without_retry_after() -> None:
    learnt = _learnt_after_a_cold_run()  # the fake token bucket says Retry-After
    assert learnt["strict_spacing"] is False
    for said in (True, False, None):
        gov, used = _warm({**learnt, "strict_spacing": said})
        assert used and gov.lease(1, 0.0).strict_spacing is (said is True)


def test_a_warm_start_keeps_the_long_window_an_earlier_run_found() -> None:
    """A quota per minute: a warm run reads its 429s over the window from the start (see
    test_governor_windows), up to the ten minutes of counts a governor keeps."""
    entry = {"safe_rate": 9.0, "limit_estimate": 9.5, "header_rate": None}
    for said, kept in ((60.5, 60.5), (None, None), (-1.0, None), (86_400.0, 600.0)):
        gov, used = _warm({**entry, "window_s": said})
        assert used and gov.stats()["window_s"] == kept
        assert (gov.learnt() or {})["window_s"] == kept


def test_a_header_rate_alone_starts_just_under_it() -> None:
    gov, used = _warm({"safe_rate": None, "limit_estimate": None, "header_rate": 40.0})
    assert used and gov.rate == pytest.approx(0.98 * 40.0)


def test_the_store_round_trips_merges_newest_first_and_survives_garbage(tmp_path) -> None:
    store = LearntStore(str(tmp_path))
    assert store.load() == {}
    a = {
        "safe_rate": 50.0,
        "limit_estimate": 52.0,
        "header_rate": None,
        "window_s": 64.5,
        "strict_spacing": True,
        "learnt_at": 100.0,
    }
    # Written before strict_spacing and window_s were kept: read as not known.
    b = {"safe_rate": 9.0, "limit_estimate": 10.0, "header_rate": None, "learnt_at": 100.0}
    store.save({"http://127.0.0.1:1": a, "checks": b})
    LearntStore(str(tmp_path)).save(
        {"http://127.0.0.1:1": {**a, "safe_rate": 40.0, "learnt_at": 50.0}}
    )
    # older entry lost
    unknown = {"strict_spacing": None, "window_s": None}
    assert store.load() == {"http://127.0.0.1:1": a, "checks": {**b, **unknown}}
    path = tmp_path / "governor" / "endpoints.json"
    doc = json.loads(path.read_text())
    doc["endpoints"]["bad"] = {"safe_rate": "x", "learnt_at": 1.0}
    doc["endpoints"]["flag"] = {"safe_rate": 1.0, "strict_spacing": 1, "learnt_at": 1.0}
    path.write_text(json.dumps(doc))
    assert set(store.load()) == {"http://127.0.0.1:1", "checks"}
    path.write_text("{not json")
    assert store.load() == {}
    path.write_text(json.dumps({"version": 99, "endpoints": {}}))
    assert store.load() == {}
    assert [p.name for p in path.parent.iterdir()] == ["endpoints.json"]  # no temp left

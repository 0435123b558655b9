"""The sweep's summary and its one-line failure: pure logic, no Ray."""

from __future__ import annotations

from driver_review.sweep import failure_line, summarize


def _summary(**kw):
    base = dict(
        listed=10,
        final_states={"published": 7, "rejected": 1, "in_review": 2},
        decisions={"approved": 9},
        wall_s=2.0,
        listing_calls={"list": {"200": 1}},
        instance="sweep-x",
        data_dir="/d",
    )
    return summarize({}, **(base | kw))


def test_a_finished_sweep_is_ok_and_has_no_failure_line() -> None:
    summary = _summary()
    assert summary["ok"] and summary["reason"] is None and summary["unresolved"] == 0
    assert not summary["timed_out"]
    assert failure_line(summary) == ""


def test_unresolved_is_reported_as_counted_never_forced_to_zero() -> None:
    summary = _summary(reason="timed out after 600 s", unresolved=37)
    assert not summary["ok"] and summary["timed_out"] and summary["unresolved"] == 37
    assert failure_line(summary) == (
        "sweep did not finish: timed out after 600 s with 37 drivers unresolved"
    )


def test_a_reason_other_than_time_is_not_a_timeout() -> None:
    summary = _summary(
        reason="orchestrator unreachable for 60 s (ActorDiedError)", unresolved=5, restarts=2
    )
    assert not summary["ok"] and not summary["timed_out"]
    assert summary["orchestrator_restarts"] == 2
    assert "\n" not in failure_line(summary)
    assert summary["final_states"] == {"published": 7, "rejected": 1, "in_review": 2}


def test_the_unresolved_count_skips_bad_rows_and_uses_the_configured_adapter() -> None:
    """Counting what is left lists the catalog through the pipeline's own adapter, and a
    row set aside is not 'in review' (it once raised AttributeError on a BadRow)."""
    import asyncio

    from driver_review.config import load_config
    from driver_review.sweep import Progress, _Run

    config = load_config().with_overrides(
        catalog={"adapter": "tests.unit.test_sweep_summary:listing_with_a_bad_row"}
    )
    run = _Run(config, system=None, catalog=None, progress=Progress(), timeout_s=1.0)
    assert asyncio.run(run.count_unresolved(held=None)) == 1
    assert run.listing.bad == 1 and run.listing.listed == 3


class listing_with_a_bad_row:
    """A catalog adapter whose listing has one driver in review, one published, one bad."""

    def __init__(self, config, *, limiter, on_response, stages) -> None:
        pass

    async def iter_drivers(self):
        from datetime import UTC, datetime

        from driver_review.catalog.models import DriverSummary
        from driver_review.quarantine import bad_row

        at = datetime(2026, 1, 1, tzinfo=UTC)
        yield DriverSummary(id="a", version="1", stage="intake", status="in_review", updated_at=at)
        yield DriverSummary(id="b", version="1", stage=None, status="published", updated_at=at)
        yield bad_row(
            {"id": ".."}, "bad_id", "id '..' is a path segment", source="listing", seen_at=0.0
        )

    async def aclose(self) -> None:
        pass

    changes_since = get_driver = get_package = run_check = put_decision = stats = aclose

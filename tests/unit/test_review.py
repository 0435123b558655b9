"""The review of a batch, without Ray: every outcome of ``driver_review.review`` on an
in-memory catalog and real checks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from driver_review.catalog.models import DecisionRequest, DecisionResponse, DriverRecord
from driver_review.checks import build_stage_checks, context_factory
from driver_review.config import load_config
from driver_review.errors import Conflict, ServerError
from driver_review.ledger import Verdict
from driver_review.quarantine import BadRow
from driver_review.review import Fetched, Reviewed, Reviewer, review_batch
from tests.support.fakes import FakeCatalog, make_driver

CONFIG = load_config()
STAGES = CONFIG.stage_names
NOW = 1_760_000_000.0  # after every time the records and answers carry


class Decisions(FakeCatalog):
    """The checks' catalog, and the decision PUT: answers where the driver is now."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[tuple[str, str, str, str]] = []
        self.put_error: Exception | None = None
        self.answer_stage: str | None = "security"

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        self.puts.append((driver_id, version, stage, decision.verdict))
        if self.put_error is not None:
            raise self.put_error
        return DecisionResponse(
            driver_id=driver_id,
            version=version,
            stage=self.answer_stage,
            status="in_review",
            updated_at=datetime(2025, 1, 2, tzinfo=UTC),
        )


def _item(
    version: str = "2.1.10", *, stage: str = "intake", lane: int = 0, revalidate: bool = False
) -> dict[str, Any]:
    return {
        "driver_id": "drv-1",
        "version": version,
        "stage": stage,
        "lane": lane,
        "revalidate": revalidate,
        "enqueued_at": NOW - 10,
    }


def _review(
    item: dict[str, Any],
    got: Fetched,
    catalog: Decisions | None = None,
    refreshed: DriverRecord | None = None,
) -> tuple[Reviewed, Decisions]:
    catalog = catalog or Decisions()

    async def refresh(driver_id: str) -> DriverRecord | None:
        return refreshed

    reviewer = Reviewer(
        stage_names=STAGES,
        checks=build_stage_checks(CONFIG)[item["stage"]],
        contexts=context_factory(catalog),
        catalog=catalog,
        refresh=refresh,
        worker="w1",
        clock=lambda: NOW,
    )
    (out,) = asyncio.run(review_batch(reviewer, [item], [got]))
    return out, catalog


def test_a_passing_driver_is_approved_put_and_advanced_by_the_answer() -> None:
    out, catalog = _review(_item(), Fetched(make_driver()))
    assert out.outcome == out.decided == "approved"
    assert catalog.puts == [("drv-1", "2.1.10", "intake", "approved")]
    assert out.result.verdict == Verdict.APPROVED
    assert out.result.after is not None and out.result.after.stage == STAGES.index("security")
    assert out.row is not None and out.row.verdict == "approved" and out.row.worker == "w1"
    assert {c["name"] for c in out.row.checks} == set(CONFIG.stage("intake").checks)
    assert out.row.duration_s == 0.0 and out.row.lane == "fresh"


def test_a_failing_check_rejects_with_its_reason() -> None:
    out, catalog = _review(_item(), Fetched(make_driver(hardware_ids=["not an id"])))
    assert out.outcome == "rejected" and catalog.puts[0][3] == "rejected"
    assert out.row is not None and "hardware_ids_valid" in out.row.reasons


def test_an_unfetchable_record_is_an_error_row_and_a_vanished_driver_is_nothing() -> None:
    out, catalog = _review(_item(), Fetched(None, "TransportError: refused"))
    assert out.outcome == "error" and out.result.verdict == Verdict.ERROR
    assert out.row is not None and out.row.reasons == {"fetch": "TransportError: refused"}
    gone, _ = _review(_item(), Fetched(None, "NotFound"))
    assert gone.outcome == "gone" and gone.row is None and gone.result.verdict == Verdict.NONE
    assert catalog.puts == []


def test_a_newer_version_in_the_catalog_decides_nothing_and_says_where_it_is() -> None:
    out, catalog = _review(_item("2.1.9"), Fetched(make_driver()))
    assert out.outcome == "moved_on" and out.row is None and catalog.puts == []
    assert out.result.after is not None and out.result.after.version == "2.1.10"


def test_a_stale_re_review_of_a_published_driver_confirms_it() -> None:
    record = make_driver(status="published", stage=None)
    out, catalog = _review(_item(lane=1), Fetched(record))
    assert out.outcome == "confirmed" and out.result.verdict == Verdict.CONFIRMED
    assert out.row is not None and out.row.lane == "stale" and catalog.puts == []


def test_a_restored_item_already_decided_in_the_catalog_is_not_decided_again() -> None:
    record = make_driver(stage="security")
    out, catalog = _review(_item(revalidate=True), Fetched(record))
    assert out.outcome == "already_decided" and catalog.puts == []
    assert out.result.after is not None and out.result.after.stage == STAGES.index("security")


def test_a_409_re_reads_the_driver_and_decides_nothing() -> None:
    catalog = Decisions()
    catalog.put_error = Conflict("decided elsewhere")
    out, _ = _review(
        _item(), Fetched(make_driver()), catalog, refreshed=make_driver(version="2.1.11")
    )
    assert out.outcome == "conflict" and out.row is None and out.decided is None
    assert out.result.after is not None and out.result.after.version == "2.1.11"


@pytest.mark.parametrize("error", [ServerError("503 from the catalog")])
def test_a_failed_put_is_an_error_row_keeping_the_checks(error: Exception) -> None:
    catalog = Decisions()
    catalog.put_error = error
    out, _ = _review(_item(), Fetched(make_driver()), catalog)
    assert out.outcome == "error" and out.decided is None
    assert out.row is not None and "503 from the catalog" in out.row.reasons["decision"]
    assert len(out.row.checks) == len(CONFIG.stage("intake").checks)


def test_a_record_that_cannot_be_taken_is_set_aside_undecided() -> None:
    out, catalog = _review(_item(), Fetched(make_driver(stage="no_such_stage")))
    assert out.outcome == "quarantined" and catalog.puts == [] and out.row is None
    assert isinstance(out.result.bad, BadRow)


def test_a_bad_answer_to_the_put_keeps_the_decision_and_reports_the_row_as_bad() -> None:
    catalog = Decisions()
    catalog.answer_stage = "no_such_stage"
    out, _ = _review(_item(), Fetched(make_driver()), catalog)
    assert out.outcome == "approved" and isinstance(out.result.bad, BadRow)
    assert out.result.after is None


def test_a_batch_is_reviewed_concurrently_in_order() -> None:
    catalog = Decisions()
    catalog.delay_s = 0.05  # each external check call takes this long

    async def refresh(driver_id: str) -> DriverRecord | None:
        return None

    reviewer = Reviewer(
        stage_names=STAGES,
        checks=build_stage_checks(CONFIG)["compatibility"],
        contexts=context_factory(catalog),
        catalog=catalog,
        refresh=refresh,
    )
    items = [_item(stage="compatibility") | {"driver_id": f"drv-{i}"} for i in range(20)]
    fetched = [Fetched(make_driver(id=f"drv-{i}", stage="compatibility")) for i in range(20)]
    loop = asyncio.new_event_loop()
    try:
        started = loop.time()
        out = loop.run_until_complete(review_batch(reviewer, items, fetched))
        elapsed = loop.time() - started
    finally:
        loop.close()
    assert [o.result.driver_id for o in out] == [f"drv-{i}" for i in range(20)]
    assert elapsed < 20 * 0.05 / 2  # not one after the other

"""Wire <-> domain conversions (driver_review.wire), and that the ledger, the orchestrator,
the review, the quarantine and the webhook parser all convert through them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from driver_review.backlog import Lane
from driver_review.catalog.models import DecisionResponse, DriverSummary
from driver_review.ledger import NO_STAGE, Ledger, Status, Verdict
from driver_review.quarantine import to_change
from driver_review.wire import (
    change_of,
    lane_of,
    stage_index,
    stage_name,
    status_of,
    text_of,
    verdict_of,
)

STAGES = ("intake", "security", "compatibility")
WHEN = datetime(2025, 1, 1, tzinfo=UTC)


def test_stage_name_and_index_round_trip() -> None:
    for i, name in enumerate(STAGES):
        assert stage_index(STAGES, name) == i and stage_name(STAGES, i) == name
    assert stage_index(STAGES, None) == NO_STAGE and stage_name(STAGES, NO_STAGE) is None


def test_an_unknown_stage_is_one_line_naming_it_and_the_pipeline() -> None:
    with pytest.raises(ValueError) as info:
        stage_index(STAGES, "legal\n\x1b[31m")
    assert str(info.value) == (
        "unknown stage 'legal\\n\\x1b[31m' (the pipeline has intake, security, compatibility)"
    )
    with pytest.raises(ValueError, match="stage index 3 out of range"):
        stage_name(STAGES, 3)


@pytest.mark.parametrize(
    ("kind", "parse"), [(Status, status_of), (Verdict, verdict_of), (Lane, lane_of)]
)
def test_every_enum_member_round_trips_through_its_wire_text(kind, parse) -> None:
    for member in kind:
        text = text_of(member, kind)
        assert text == member.name.lower() and parse(text) is member
        assert text_of(int(member), kind) == text  # what a ledger column holds


@pytest.mark.parametrize("text", ["IN_REVIEW", "In_Review", "", "published ", "nope"])
def test_only_the_exact_wire_text_is_a_status(text: str) -> None:
    with pytest.raises(ValueError, match=r"^unknown status .* \(known: in_review, published, "):
        status_of(text)


def test_text_of_refuses_a_value_outside_the_enum() -> None:
    with pytest.raises(ValueError, match=r"^9 is not a verdict$"):
        text_of(9, Verdict)


def test_the_ledgers_entry_speaks_the_same_wire_text() -> None:
    ledger = Ledger()
    summary = DriverSummary(
        id="drv-1", version="1.0", stage="security", status="in_review", updated_at=WHEN
    )
    ledger.observe(change_of(STAGES, summary))
    entry = ledger.entry("drv-1")
    assert entry is not None
    assert status_of(str(entry["status"])) is Status.IN_REVIEW
    assert verdict_of(str(entry["verdict"])) is Verdict.NONE


def test_change_of_takes_any_summary_shape() -> None:
    summary = DriverSummary(
        id="drv-1", version="1.0", stage="security", status="in_review", updated_at=WHEN
    )
    ch = change_of(STAGES, summary)
    assert (ch.driver_id, ch.version, ch.stage, ch.status, ch.changed_at) == (
        "drv-1",
        "1.0",
        1,
        Status.IN_REVIEW,
        WHEN.timestamp(),
    )
    answer = DecisionResponse(
        driver_id="drv-2", version="2.0", stage=None, status="published", updated_at=WHEN
    )
    ch = change_of(STAGES, answer)
    assert (ch.driver_id, ch.stage, ch.status) == ("drv-2", NO_STAGE, Status.PUBLISHED)
    # The quarantine's judged conversion gives the same change for a good row.
    assert to_change(STAGES, answer, now=WHEN.timestamp() + 1, source="report") == ch

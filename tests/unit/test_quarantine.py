"""Quarantine accounting without Ray: the table, the orchestrator core's intake and
reports, the ledger's refusal to truncate, and the simulator's bad-row rendering."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from driver_review.catalog.models import DriverSummary, Page
from driver_review.config import load_config
from driver_review.identifiers import MAX_VERSION_BYTES
from driver_review.ledger import Change, Ledger, Status, Verdict
from driver_review.orchestrator import ItemResult, OrchestratorCore
from driver_review.quarantine import QuarantineTable, bad_row, read, to_change, writer
from driver_review.sim.badrows import KINDS, BadRows

NOW = 1_750_000_000.0
STAGES = ["intake", "security", "compatibility"]


def core() -> OrchestratorCore:
    cfg = load_config().with_overrides(window={"batch_size": 4, "high_water": 100})
    return OrchestratorCore(cfg, clock=lambda: NOW)


def change(i: int, version: str = "1.0", stage: int = 0, t: float = NOW - 10) -> Change:
    return Change(f"drv-{i}", version, stage, Status.IN_REVIEW, t)


def summary(i: int, **over) -> DriverSummary:
    fields = {
        "id": f"drv-{i}",
        "version": "1.0",
        "stage": "intake",
        "status": "in_review",
        "updated_at": datetime.fromtimestamp(NOW - 10, UTC),
    } | over
    return DriverSummary.model_construct(**fields)


def test_the_same_unchanged_row_is_counted_once_and_a_changed_one_again() -> None:
    table = QuarantineTable()
    raw = {"id": "drv-1", "stage": "legal_review"}
    first = bad_row(raw, "unknown_stage", "x", source="changes", seen_at=NOW)
    assert table.add([first]) == [first]
    assert table.add([bad_row(raw, "unknown_stage", "x", source="changes", seen_at=NOW + 60)]) == []
    changed = bad_row(raw | {"version": "2"}, "unknown_stage", "x", source="changes", seen_at=NOW)
    assert table.add([changed]) == [changed]
    assert table.stats()["total"] == 2 and table.stats()["held"] == 1
    assert [r.seen_at for r in table.take_unexported()] == [NOW, NOW]
    assert table.take_unexported() == []


def test_the_table_is_bounded_and_forgets_the_oldest() -> None:
    table = QuarantineTable(max_entries=3)
    table.add(
        [bad_row({"id": f"d{i}"}, "bad_time", "x", source="changes", seen_at=NOW) for i in range(5)]
    )
    assert len(table) == 3 and "d0" not in table and "d4" in table
    assert table.stats()["forgotten"] == 2


def test_an_id_that_cannot_be_an_id_is_keyed_by_fingerprint_and_shown_safely() -> None:
    row = bad_row(
        {"id": "x" * 10_000 + "\n"}, "bad_id", "id\ntoo long", source="listing", seen_at=NOW
    )
    assert row.key.startswith("#") and row.driver_id is None
    assert "\n" not in row.shown_id and len(row.shown_id) < 120 and "\n" not in row.reason


def test_unknown_stage_in_a_summary_is_a_bad_row_not_a_crash() -> None:
    got = to_change(STAGES, summary(1, stage="legal_review"), now=NOW, source="changes")
    assert not isinstance(got, Change) and got.kind == "unknown_stage"
    assert "legal_review" in got.reason
    good = to_change(STAGES, summary(1, stage="security"), now=NOW, source="changes")
    assert good == Change("drv-1", "1.0", 1, Status.IN_REVIEW, NOW - 10)


def test_the_ledger_refuses_a_version_wider_than_its_column() -> None:
    ledger = Ledger()
    with pytest.raises(ValueError, match=f"longer than {MAX_VERSION_BYTES} bytes"):
        ledger.observe(change(1, version="1" * (MAX_VERSION_BYTES + 1)))
    assert len(ledger) == 0
    ledger.observe(change(1, version="9" * MAX_VERSION_BYTES))
    assert ledger.target(0)[0] == "9" * MAX_VERSION_BYTES  # full width, nothing cut


@pytest.mark.parametrize(
    ("bad", "kind"),
    [
        (change(2, version="1" * 40), "bad_version"),
        (change(2, version=".."), "bad_version"),
        (Change("..", "1.0", 0, Status.IN_REVIEW, NOW), "bad_id"),
        (change(2, stage=7), "unknown_stage"),
        (change(2, t=NOW + 3600), "bad_time"),
        (change(2, t=-1.0), "bad_time"),
    ],
)
def test_intake_refuses_a_bad_change_alone_and_counts_it_once(bad: Change, kind: str) -> None:
    c = core()
    assert c.intake([change(1), bad, change(3)]) == 2
    c.intake([bad])  # re-read by the next poll: not counted again
    q = c.stats()["quarantined"]
    assert q["total"] == 1 and q["by_kind"] == {kind: 1}


def test_a_bad_report_after_is_refused_and_the_driver_parked_until_a_good_change() -> None:
    c = core()
    c.intake([change(1)])
    (lease,) = c.demand("intake", 10)
    long_after = Change("drv-1", "2." * 20, 1, Status.IN_REVIEW, NOW - 5)
    c.report(
        lease.lease_id, [ItemResult("drv-1", "1.0", "intake", Verdict.APPROVED, after=long_after)]
    )
    assert c.ledger.target(0)[0] == "1.0"  # nothing truncated into the ledger
    assert c.stats()["quarantined"]["by_kind"] == {"bad_version": 1}
    assert c.queued() == 0 and c.quiescent()  # parked: neither queued nor holding us up
    c.tick(stale_slice=100)
    assert c.queued() == 0
    # The catalog's row changes and is good now: it leaves quarantine and is reviewed.
    assert c.intake([Change("drv-1", "2.0", 1, Status.IN_REVIEW, NOW - 1)]) == 1
    assert c.stats()["quarantined"]["held"] == 0 and c.stats()["quarantined"]["parked"] == 0
    assert not c.quiescent()


def test_a_worker_s_bad_record_parks_the_driver_instead_of_looping() -> None:
    c = core()
    c.intake([change(1)])
    (lease,) = c.demand("intake", 10)
    bad = to_change(
        STAGES, summary(1, stage="legal_review", version="2.0"), now=NOW, source="record"
    )
    assert not isinstance(bad, Change)
    c.report(lease.lease_id, [ItemResult("drv-1", "1.0", "intake", Verdict.NONE, bad=bad)])
    assert c.queued() == 0 and c.demand("intake", 10) == [] and c.quiescent()
    assert c.stats()["quarantined"]["parked"] == 1


def test_quarantined_rows_are_written_and_read_back(tmp_path) -> None:
    out = writer(str(tmp_path), name="t", rollover_rows=100, rollover_s=30)
    out.add(
        [
            bad_row(
                {"id": "drv-\x1b1"},
                "bad_id",
                "id 'drv-\\x1b1' contains control",
                source="listing",
                seen_at=NOW,
            )
        ]
    )
    out.flush()
    (got,) = read(str(tmp_path)).to_pylist()
    assert got["driver_id"] == "'drv-\\x1b1'" and got["kind"] == "bad_id"
    assert got["seen_at"].timestamp() == NOW


def _page(n: int, t: int = 0) -> Page:
    return Page(
        items=[
            DriverSummary(
                id=f"drv-{i:05d}",
                version="1.0",
                stage="intake",
                status="in_review",
                updated_at=datetime.fromtimestamp(NOW + t + i, UTC),
            )
            for i in range(n)
        ]
    )


def test_the_simulator_renders_a_share_of_rows_bad_in_every_way_deterministically() -> None:
    page = _page(2000)
    one, two = BadRows(0.1, seed=7), BadRows(0.1, seed=7)
    assert one.render(page) == two.render(page)
    rendered = one.stats()["rendered"]
    assert set(rendered) == set(KINDS)
    assert 150 <= sum(rendered.values()) <= 250
    assert BadRows(0.1, seed=8).render(page) != one.render(page)
    assert BadRows(0.0, seed=7).render(page)["items"] == [
        s.model_dump(mode="json") for s in page.items
    ]

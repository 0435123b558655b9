"""The orchestrator's logic without Ray: window, coalescing, skip, lanes, demand, leases."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from driver_review.backlog import Lane
from driver_review.config import load_config
from driver_review.errors import IntakeFull
from driver_review.ledger import NO_STAGE, Change, Ledger, Status, Verdict, Work
from driver_review.orchestrator import ItemResult, OrchestratorCore

INTAKE, SECURITY, COMPAT = 0, 1, 2


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_core(clock: Clock, **window) -> OrchestratorCore:
    cfg = load_config()
    cfg = cfg.with_overrides(window={"batch_size": 4, "lease_s": 30, "high_water": 100, **window})
    return OrchestratorCore(cfg, clock=clock)


def change(
    i: int,
    version: str = "1.0.0.1",
    stage: int = INTAKE,
    t: float = 1.0,
    status: Status = Status.IN_REVIEW,
) -> Change:
    return Change(f"drv-{i:04d}", version, stage, status, t)


def items(leases) -> list[tuple[str, str, str]]:
    out = []
    for lease in leases:
        batch: pa.RecordBatch = lease.batch[0]
        out += list(
            zip(
                batch["driver_id"].to_pylist(),
                batch["version"].to_pylist(),
                batch["stage"].to_pylist(),
                strict=True,
            )
        )
    return out


def test_demand_never_exceeds_what_was_asked(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(10)])
    got = core.demand("intake", 3)
    assert sum(lease.count for lease in got) == 3
    assert len(items(got)) == 3
    rest = core.demand("intake", 100)
    assert sum(lease.count for lease in rest) == 7
    assert core.demand("intake", 100) == []


def test_coalescing_reviews_only_the_newest_version(clock: Clock) -> None:
    core = make_core(clock)
    for k in range(10):
        core.intake([change(1, version=f"1.0.0.{k}", t=1.0 + k)])
    got = items(core.demand("intake", 10))
    assert got == [("drv-0001", "1.0.0.9", "intake")]
    assert core.stats()["window"]["coalesced"] == 9


def test_older_or_repeated_change_is_not_news(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(1, version="2.0.0.0", t=5.0)])
    assert core.intake([change(1, version="1.0.0.0", t=4.0)]) == 0
    assert core.intake([change(1, version="2.0.0.0", t=5.0)]) == 0
    assert items(core.demand("intake", 10)) == [("drv-0001", "2.0.0.0", "intake")]


def test_already_decided_version_and_stage_is_skipped(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(1, t=1.0)])
    (lease,) = core.demand("intake", 10)
    core.report(lease.lease_id, [ItemResult("drv-0001", "1.0.0.1", "intake", Verdict.REJECTED)])
    # The same version at the same stage arriving again (a late ping) queues nothing.
    assert core.intake([change(1, t=2.0)]) == 0
    assert core.quiescent()


def test_approval_follows_the_driver_to_its_next_stage(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(1, t=1.0)])
    (lease,) = core.demand("intake", 10)
    after = change(1, stage=SECURITY, t=2.0)
    done = ItemResult("drv-0001", "1.0.0.1", "intake", Verdict.APPROVED, after)
    core.report(lease.lease_id, [done])
    assert items(core.demand("security", 10)) == [("drv-0001", "1.0.0.1", "security")]
    assert not core.quiescent()


def test_fresh_lane_goes_before_stale(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(4)], lane=Lane.STALE)
    core.intake([change(i) for i in range(10, 12)], lane=Lane.FRESH)
    got = [d for d, _, _ in items(core.demand("intake", 3))]
    assert got == ["drv-0010", "drv-0011", "drv-0000"]


def test_high_water_refuses_whole_batch_and_keeps_nothing(clock: Clock) -> None:
    core = make_core(clock, high_water=5)
    core.intake([change(i) for i in range(5)])
    with pytest.raises(IntakeFull) as info:
        core.intake([change(i) for i in range(5, 8)])
    assert info.value.retry_after_s > 0
    assert len(core.ledger) == 5  # nothing of the refused call was taken
    core.demand("intake", 5)
    assert core.intake([change(i) for i in range(5, 8)]) == 3


def test_expired_lease_goes_back_to_the_head(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(6)])
    first = core.demand("intake", 4)
    clock.now += 31
    assert core.expire_leases() == 1
    again = items(core.demand("intake", 4))
    assert [d for d, _, _ in again] == [d for d, _, _ in items(first)]
    # A late report from the dead lease is still applied when it is news.
    core.report(first[0].lease_id, [ItemResult("drv-0000", "1.0.0.1", "intake", Verdict.REJECTED)])
    assert core.counters.late_reports == 1
    assert core.ledger.is_decided(core.ledger.row("drv-0000"), "1.0.0.1", INTAKE)


def test_a_late_approval_of_an_errored_retry_follows_the_driver_on(clock: Clock) -> None:
    # The first lease expires; the retry errors and waits for its backoff; then the first
    # reviewer's approval arrives. It clears the retry, so it must move the driver on.
    core = make_core(clock)
    core.intake([change(1)])
    (first,) = core.demand("intake", 10)
    clock.now += 31
    core.expire_leases()
    (second,) = core.demand("intake", 10)
    core.report(second.lease_id, [ItemResult("drv-0001", "1.0.0.1", "intake", Verdict.ERROR)])
    after = change(1, stage=SECURITY, t=2.0)
    core.report(
        first.lease_id, [ItemResult("drv-0001", "1.0.0.1", "intake", Verdict.APPROVED, after)]
    )
    assert items(core.demand("security", 10)) == [("drv-0001", "1.0.0.1", "security")]


def test_a_lease_from_before_a_restart_names_no_new_lease(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(8)])
    old = core.demand("intake", 4)
    again = OrchestratorCore(
        core.config, clock=clock, ledger=Ledger.from_arrow(core.ledger.to_arrow())
    )
    new = again.demand("intake", 4)
    assert {lease.lease_id for lease in old}.isdisjoint(lease.lease_id for lease in new)
    # The old reviewer's keep-alive and report touch none of the new leases.
    assert not again.extend(old[0].lease_id)
    again.report(old[0].lease_id, [])
    assert again.counters.late_reports == 1
    assert again.stats()["leases"] == len(new)


def test_items_decided_meanwhile_are_dropped_at_handout(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(3)])
    core.backlogs["intake"].flush(clock.now)
    # A change moves drv-0001 on to a new version that is already published.
    core.intake([change(1, version="9.0.0.0", stage=NO_STAGE, status=Status.PUBLISHED, t=9.0)])
    got = [d for d, _, _ in items(core.demand("intake", 10))]
    assert got == ["drv-0000", "drv-0002"]
    assert core.ledger.work_of(core.ledger.row("drv-0001")) == Work.IDLE


def test_errors_retry_after_backoff(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(1)])
    (lease,) = core.demand("intake", 10)
    core.report(lease.lease_id, [ItemResult("drv-0001", "1.0.0.1", "intake", Verdict.ERROR)])
    assert core.demand("intake", 10) == []
    clock.now += 100
    core.tick(stale_slice=0)
    assert items(core.demand("intake", 10)) == [("drv-0001", "1.0.0.1", "intake")]


def test_stale_slices_are_spread_and_oldest_first(clock: Clock) -> None:
    core = make_core(clock, freshness_s=100, high_water=10_000)
    core.intake([change(i, stage=NO_STAGE, status=Status.PUBLISHED) for i in range(1000)])
    assert core.queued() == 0
    # 1000 drivers visited once per 50 s of a 100 s bound, one slice a second
    assert core.stale_slice_size(tick_s=1.0) == 20
    clock.now += 200
    assert core.tick()["stale"] == 20
    assert core.backlogs["compatibility"].depth(Lane.STALE) == 20
    leases = core.demand("compatibility", 100)
    first = items(leases)
    assert len(first) == 20
    for lease in leases:
        core.report(
            lease.lease_id, [ItemResult(d, v, s, Verdict.CONFIRMED) for d, v, s in items([lease])]
        )
    clock.now += 1
    assert core.tick()["stale"] == 20
    second = {d for d, _, _ in items(core.demand("compatibility", 100))}
    assert second.isdisjoint(d for d, _, _ in first)  # just confirmed: not again so soon


def test_a_queued_resweep_that_a_change_moves_goes_to_its_new_stage(clock: Clock) -> None:
    # A published driver is queued for a re-sweep at its last stage; a new version then
    # puts it in review at intake. The compatibility workers must not get it (they would
    # decide intake with compatibility's checks): intake gets it, as an intake item.
    core = make_core(clock, freshness_s=100)
    core.intake([change(0, stage=NO_STAGE, status=Status.PUBLISHED)])
    clock.now += 200
    assert core.tick()["stale"] == 1
    core.intake([change(0, version="2.0.0.0", stage=INTAKE, t=9.0)])
    assert items(core.demand("compatibility", 10)) == []
    assert items(core.demand("intake", 10)) == [("drv-0000", "2.0.0.0", "intake")]


def test_restart_from_ledger_requeues_what_was_pending(clock: Clock) -> None:
    core = make_core(clock)
    core.intake([change(i) for i in range(5)])
    core.demand("intake", 2)  # leased, never reported: the process dies
    snapshot = core.ledger.to_arrow()
    again = OrchestratorCore(core.config, clock=clock, ledger=Ledger.from_arrow(snapshot))
    leases = again.demand("intake", 10)
    got = sorted(d for d, _, _ in items(leases))
    assert got == [f"drv-{i:04d}" for i in range(5)]
    # Restored work may have been decided after the snapshot: its reviewer asks first.
    assert all(all(lease.batch[0]["revalidate"].to_pylist()) for lease in leases)


def test_ledger_arrow_round_trip() -> None:
    ledger = Ledger(capacity=2)
    for i in range(5):
        ledger.observe(change(i, version=f"{i}.0", t=float(i + 1)))
    ledger.decide(3, version="3.0", stage=INTAKE, verdict=Verdict.APPROVED, reviewed_at=7.0)
    back = Ledger.from_arrow(ledger.to_arrow())
    assert len(back) == 5
    for name in ("version", "stage", "status", "changed_at", "verdict", "reviewed_at"):
        np.testing.assert_array_equal(back.col(name), ledger.col(name))
    assert back.is_decided(back.row("drv-0003"), "3.0", INTAKE)


def test_a_ledger_table_is_a_copy_not_a_view() -> None:
    # The snapshot is written while reviews go on: later changes must not reach it.
    ledger = Ledger(capacity=8)
    ledger.observe(change(1, version="1.0", t=1.0))
    table = ledger.to_arrow()
    ledger.observe(change(1, version="2.0", stage=SECURITY, t=2.0))
    ledger.decide(0, version="2.0", stage=SECURITY, verdict=Verdict.APPROVED, reviewed_at=3.0)
    row = table.to_pylist()[0]
    assert (row["version"].rstrip(b"\0"), row["stage"], row["changed_at"], row["reviewed_at"]) == (
        b"1.0",
        INTAKE,
        1.0,
        0.0,
    )


def test_unknown_stage_is_a_clear_error(clock: Clock) -> None:
    core = make_core(clock)
    with pytest.raises(ValueError, match="unknown stage 'nope'"):
        core.stage_index("nope")


def test_an_invalid_change_is_refused_alone(clock: Clock) -> None:
    core = make_core(clock)
    long_version = "1." * 40
    queued = core.intake([change(1), change(2, version=long_version), change(3, stage=7)])
    assert queued == 1
    assert core.counters.invalid == 2
    assert "drv-0002" not in core.ledger


def test_a_driver_in_review_at_no_stage_is_refused_and_demand_still_returns(
    clock: Clock,
) -> None:
    """In review at no stage: no stage would ever keep it. It used to be queued at the last
    stage (a negative index), dropped there at hand-out and queued there again, inside one
    ``demand`` call that never returned (a fuzzed ping found it)."""
    core = make_core(clock)
    queued = core.intake([change(1), change(2, stage=NO_STAGE)])
    assert queued == 1 and core.counters.invalid == 1
    assert "drv-0002" not in core.ledger
    for stage in core.stages:
        core.demand(stage, 10)  # returns (bounded by the backlog's own guard besides)
    # A published driver at no stage is fine, as ever.
    assert core.intake([change(3, stage=NO_STAGE, status=Status.PUBLISHED)]) == 0
    assert core.counters.invalid == 1

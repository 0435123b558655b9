"""Snapshots name stages: a changed pipeline file maps them by name, refuses a removed stage
in one line, or migrates its drivers when told to."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from driver_review import stage_names
from driver_review.config import load_config
from driver_review.errors import ConfigError
from driver_review.ledger import NO_STAGE, Change, Ledger, Status, Verdict
from driver_review.orchestrator import OrchestratorCore
from driver_review.snapshot import SnapshotStore
from driver_review.stage_names import StagesRemoved

OLD = ["intake", "security", "compatibility"]


def _name(stages: list[str], index: int) -> str | None:
    return None if index == NO_STAGE else stages[index]


def _ledger(stages: list[str], per_stage: int = 4) -> Ledger:
    """Drivers at every stage (in review, some decided at the stage before), plus published
    and rejected ones."""
    ledger = Ledger()
    t = 1.0
    for s, name in enumerate(stages):
        for k in range(per_stage):
            d = f"{name}-{k}"
            ledger.observe(Change(d, "1.0", s, Status.IN_REVIEW, t))
            if s > 0 and k % 2 == 0:  # approved at the stage before: that is why it is here
                ledger.decide(
                    ledger.row(d),
                    version="1.0",
                    stage=s - 1,
                    verdict=Verdict.APPROVED,
                    reviewed_at=t,
                )
            t += 1
    ledger.observe(Change("published-0", "2.0", NO_STAGE, Status.PUBLISHED, t))
    ledger.observe(Change("rejected-0", "3.0", 1, Status.REJECTED, t + 1))
    ledger.decide(
        ledger.row("rejected-0"),
        version="3.0",
        stage=1,
        verdict=Verdict.REJECTED,
        reviewed_at=t + 1,
    )
    return ledger


def _by_name(ledger: Ledger, stages: list[str]) -> dict[str, tuple]:
    out = {}
    for d in ledger.ids(range(len(ledger))):
        e = ledger.entry(d)
        assert e is not None
        out[d] = (
            e["version"],
            _name(stages, e["stage"]),
            e["status"],
            _name(stages, e["decided_stage"]),
            e["verdict"],
        )
    return out


def _through_parquet(tmp_path, ledger: Ledger, stages: list[str]):
    store = SnapshotStore(str(tmp_path), "main")
    store.write(ledger.to_arrow(stages), watermark=99.0)
    snap = store.load()
    assert snap is not None
    return snap.table


@pytest.mark.parametrize(
    "new",
    [
        ["intake", "compatibility", "security"],  # reordered
        ["intake", "legal", "security", "compatibility"],  # a stage added in the middle
        ["compatibility", "security", "intake", "signing"],  # reversed, and one added at the end
    ],
)
def test_reordered_and_added_stages_keep_every_driver_where_it_was(tmp_path, new) -> None:
    ledger = _ledger(OLD)
    table = _through_parquet(tmp_path, ledger, OLD)
    back = Ledger.from_arrow(table, new)
    assert _by_name(back, new) == _by_name(ledger, OLD)  # every entry, by name
    assert back.target(back.row("security-0"))[1] == new.index("security")
    # Decisions still count at the stage they were taken at, so nothing is re-reviewed.
    row = back.row("compatibility-0")
    assert back.is_decided(row, "1.0", new.index("security"))
    assert not back.needs_review(back.row("rejected-0"))


def test_a_removed_stage_is_refused_in_one_line_naming_it_and_its_drivers(tmp_path) -> None:
    with_legal = ["intake", "legal", "security", "compatibility"]
    table = _through_parquet(tmp_path, _ledger(with_legal, per_stage=3), with_legal)
    with pytest.raises(StagesRemoved) as info:
        Ledger.from_arrow(table, OLD, where="the snapshot of instance 'main'")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "pipeline no longer has stage 'legal' but the snapshot of instance 'main' has "
        "4 drivers there; add it back, or migrate them with --migrate-stage legal=STAGE"
    )
    assert "window.migrate_stages" in message and "intake, security, compatibility" in message
    assert info.value.removed == {"legal": 4}  # three in review and one rejected there
    # It crosses a process boundary (a Ray actor's error) with its counts.
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, StagesRemoved) and again.removed == {"legal": 4}
    assert str(again) == message
    # The pre-start check reads the stage column alone and says the same.
    with pytest.raises(StagesRemoved, match="4 drivers there"):
        stage_names.check(table.column("stage"), OLD, where="the snapshot of instance 'main'")


def test_two_removed_stages_are_named_in_the_same_line() -> None:
    four = ["intake", "legal", "export", "security"]
    table = _ledger(four, per_stage=2).to_arrow(four)
    with pytest.raises(StagesRemoved) as info:
        Ledger.from_arrow(table, ["intake", "security"])
    assert info.value.removed == {"legal": 3, "export": 2}
    assert "stages 'export' (2 drivers), 'legal' (3 drivers)" in str(info.value)


def test_migration_moves_the_drivers_and_forgets_decisions_at_the_removed_stage() -> None:
    with_legal = ["intake", "security", "legal", "compatibility"]
    ledger = _ledger(with_legal, per_stage=4)
    table = ledger.to_arrow(with_legal)
    back = Ledger.from_arrow(table, OLD, migrate={"legal": "security"})
    before, after = _by_name(ledger, with_legal), _by_name(back, OLD)
    for d, (version, stage, status, decided, _verdict) in before.items():
        if stage == "legal":  # moved, and reviewed again there: its last decision is gone
            assert after[d] == (version, "security", status, None, "none"), d
        elif decided == "legal":  # decided at the removed stage: no current stage decided
            assert after[d] == (version, stage, status, None, "none"), d
        else:
            assert after[d] == before[d], d
    moved = [back.row(f"legal-{k}") for k in range(4)]
    assert all(back.needs_review(r) for r in moved)
    # The orchestrator restored from it queues them at security, asking the catalog first.
    config = load_config()
    core = OrchestratorCore(config, ledger=back, clock=lambda: 1000.0)
    leases = core.demand("security", 100)
    handed = {d for lease in leases for d in lease.batch[0].column("driver_id").to_pylist()}
    assert {f"legal-{k}" for k in range(4)} <= handed
    assert all(int(back.col("restored")[r]) == 1 for r in moved)


def test_a_snapshot_without_names_loads_as_positions_of_the_current_pipeline(tmp_path) -> None:
    ledger = _ledger(OLD)
    table = _through_parquet(tmp_path, ledger, None)  # type: ignore[arg-type]  # the old format
    assert not stage_names.is_named(table.column("stage"))
    back = Ledger.from_arrow(table, OLD)
    assert _by_name(back, OLD) == _by_name(ledger, OLD)
    np.testing.assert_array_equal(back.col("stage"), ledger.col("stage"))
    # A pipeline one stage shorter cannot hold the drivers at position 2: refused, not an
    # IndexError later.
    with pytest.raises(StagesRemoved, match="position 2"):
        Ledger.from_arrow(table, OLD[:2])


def test_named_stages_need_the_pipeline_to_load() -> None:
    table = _ledger(OLD).to_arrow(OLD)
    with pytest.raises(ValueError, match="needs the pipeline's stages"):
        Ledger.from_arrow(table)


def test_migrations_are_checked_against_the_pipeline() -> None:
    config = load_config()
    ok = config.with_overrides(window={"migrate_stages": {"legal": "security"}})
    assert ok.window.migrate_stages == {"legal": "security"}
    with pytest.raises(ConfigError, match="'nope' is not a stage of the pipeline"):
        config.with_overrides(window={"migrate_stages": {"legal": "nope"}})
    with pytest.raises(ConfigError, match="'security' is still in the pipeline"):
        config.with_overrides(window={"migrate_stages": {"security": "intake"}})
    assert stage_names.parse_migration(" legal = security ") == ("legal", "security")
    for bad in ("legal", "=security", "legal="):
        with pytest.raises(ConfigError, match="expected OLD=NEW"):
            stage_names.parse_migration(bad)

"""The simulator's pure logic: seeded data and truth, decisions, changes, paging, the token
bucket and header formats. No server, no event loop."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import re
from collections import Counter
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import pytest

from driver_review.catalog.models import DecisionRequest, DriverRecord
from driver_review.checks.builtin import hardware_ids_valid, metadata_complete, version_increases
from driver_review.config import load_config
from driver_review.retry import parse_retry_after
from driver_review.sim import data
from driver_review.sim.changelog import ChangeLog
from driver_review.sim.ratelimit import TokenBucket, ratelimit_headers, retry_after
from driver_review.sim.state import CatalogState
from driver_review.sim.webhooks import RETRY_AFTER_MAX_S
from driver_review.sim.wire import ConflictError, NotFoundError, etag_matches

APPROVE = DecisionRequest(verdict="approved")
REJECT = DecisionRequest(verdict="rejected")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def us(self) -> int:
        return int(self.now * 1_000_000)

    def s(self) -> float:
        return self.now


def make_state(drivers: int = 400, seed: int = 0) -> CatalogState:
    return CatalogState(drivers=drivers, seed=seed, package_size=256, clock_us=FakeClock().us)


def at_stage(state: CatalogState, stage: str) -> str:
    return next(
        d for d, s in state.current().items() if s["status"] == "in_review" and s["stage"] == stage
    )


# --- seeded data and truth -------------------------------------------------------------


def test_pipeline_matches_the_shipped_default_config() -> None:
    config = load_config()
    assert [(s.name, tuple(s.checks)) for s in config.stages] == list(data.PIPELINE)


def test_same_seed_same_catalog_and_truth_other_seed_differs() -> None:
    a, b, c = make_state(seed=11), make_state(seed=11), make_state(seed=12)
    assert a.truth() == b.truth()
    assert a.record("drv-000007").model_dump() == b.record("drv-000007").model_dump()
    assert a.truth() != c.truth()
    for _ in range(20):
        assert a.generate_change().model_dump(exclude={"updated_at", "released_at"}) == (
            b.generate_change().model_dump(exclude={"updated_at", "released_at"})
        )
    assert a.truth() == b.truth()


def test_every_check_fails_for_a_few_percent_and_stages_are_spread() -> None:
    state = make_state(drivers=3000, seed=3)
    fails = Counter(t["check"] for t in state.truth().values())
    for check in data.STAGE_OF_CHECK:
        assert 0 < fails[check] / 3000 < 0.06, (check, fails[check])
    where = Counter((s["status"], s["stage"]) for s in state.current().values())
    assert where[("in_review", "intake")] > 0.6 * 3000
    for stage in ("security", "compatibility"):
        assert where[("in_review", stage)] > 0.03 * 3000
    assert where[("published", None)] > 0.05 * 3000


def test_local_checks_see_exactly_the_seeded_intake_failures() -> None:
    """The shipped intake checks, run on every record, fail where truth says and only there."""
    state = make_state(drivers=1500, seed=5)
    truth = state.truth()
    intake = [c.__name__ for c in (metadata_complete, hardware_ids_valid, version_increases)]

    async def first_failure(record: DriverRecord) -> str | None:
        for check in (metadata_complete, hardware_ids_valid, version_increases):
            if not (await check(record, None)).passed:  # type: ignore[arg-type]
                return check.__name__
        return None

    async def run_all() -> dict[str, str | None]:
        return {d: await first_failure(state.record(d)) for d in truth}

    seen = asyncio.run(run_all())
    for driver_id, t in truth.items():
        expected = t["check"] if t["check"] in intake else None
        assert seen[driver_id] == expected, (driver_id, t, state.record(driver_id))


def test_package_digest_matches_except_for_seeded_tampering() -> None:
    state = make_state(drivers=800, seed=2)
    for driver_id, t in state.truth().items():
        _, blob = state.package(driver_id)
        record = state.record(driver_id)
        assert len(blob) == record.package.size == 256
        matches = hashlib.sha256(blob).hexdigest() == record.package.sha256
        assert matches == (t["check"] != "package_digest"), driver_id


def test_names_and_hardware_ids_look_real() -> None:
    record = make_state(drivers=50).record("drv-000003")
    assert re.fullmatch(r"drv-\d{6}", record.id)
    assert record.name.endswith("Driver") and record.vendor
    assert all(
        re.fullmatch(r"PCI\\VEN_[0-9A-F]{4}&DEV_[0-9A-F]{4}", h) for h in record.hardware_ids
    )
    assert data.parse_version(record.version) > data.parse_version(record.previous_version or "0")
    assert data.short_vendor("Advanced Micro Devices, Inc. [AMD/ATI]") == "AMD"
    assert data.short_vendor("Intel Corporation") == "Intel"


# --- decisions -------------------------------------------------------------------------


def test_approvals_advance_through_the_pipeline_and_bump_updated_at() -> None:
    state = make_state()
    driver_id = at_stage(state, "intake")
    version = state.record(driver_id).version
    seen = [state.record(driver_id).updated_at]
    for stage, expected in (
        ("intake", ("in_review", "security")),
        ("security", ("in_review", "compatibility")),
        ("compatibility", ("published", None)),
    ):
        answer = state.decide(driver_id, version, stage, APPROVE)
        assert (answer.status, answer.stage, answer.duplicate) == (*expected, False)
        record = state.record(driver_id)
        assert (record.status, record.stage) == expected
        assert record.updated_at > seen[-1] and answer.updated_at == record.updated_at
        seen.append(record.updated_at)
    changed = state.changes_page(seen[-2]).items
    assert [s.id for s in changed] == [driver_id]
    assert [(d.stage, d.verdict) for d in state.decisions] == [
        ("intake", "approved"),
        ("security", "approved"),
        ("compatibility", "approved"),
    ]


def test_reject_stays_at_its_stage_and_repeats_are_counted_duplicates() -> None:
    state = make_state()
    driver_id = at_stage(state, "security")
    version = state.record(driver_id).version
    first = state.decide(driver_id, version, "security", REJECT)
    assert (first.status, first.stage, first.duplicate) == ("rejected", "security", False)
    before = state.record(driver_id)
    again = state.decide(driver_id, version, "security", APPROVE)
    assert (again.status, again.stage, again.duplicate) == ("rejected", "security", True)
    assert state.record(driver_id) == before  # nothing changed, not even updated_at
    # A stage before the one the version entered at was never decided for it.
    with pytest.raises(ConflictError):
        state.decide(driver_id, version, "intake", APPROVE)
    # What the catalog had decided before the simulation started counts as decided.
    published = next(d for d, s in state.current().items() if s["status"] == "published")
    assert state.decide(published, state.record(published).version, "intake", APPROVE).duplicate
    assert (state.stats.decisions, state.stats.duplicate_decisions) == (3, 2)


def test_conflicts_and_unknowns() -> None:
    state = make_state()
    driver_id = at_stage(state, "intake")
    version = state.record(driver_id).version
    with pytest.raises(ConflictError, match="not current"):
        state.decide(driver_id, "0.0.0.1", "intake", APPROVE)
    with pytest.raises(ConflictError, match="not in review at 'security'"):
        state.decide(driver_id, version, "security", APPROVE)
    with pytest.raises(NotFoundError, match="stage 'nope'"):
        state.decide(driver_id, version, "nope", APPROVE)
    with pytest.raises(NotFoundError, match="drv-999999"):
        state.decide("drv-999999", version, "intake", APPROVE)
    with pytest.raises(NotFoundError, match="metadata_complete"):
        state.run_check("metadata_complete", driver_id, version)
    with pytest.raises(ConflictError):
        state.run_check("malware_scan", driver_id, "0.0.0.1")
    assert state.stats.conflicts == 2


def test_a_new_version_moves_truth_and_outdates_decisions_on_the_old_one() -> None:
    state = make_state(drivers=30, seed=9)
    before = {d: s["version"] for d, s in state.current().items()}
    changed = state.generate_change()
    if changed.id in before:
        assert changed.previous_version == before[changed.id] != changed.version
        with pytest.raises(ConflictError):
            state.decide(changed.id, before[changed.id], "intake", APPROVE)
    assert (changed.status, changed.stage) == ("in_review", "intake")
    assert state.truth()[changed.id]["version"] == changed.version
    assert state.stats.changes_generated == 1


def test_a_driver_never_gets_a_version_it_had_before() -> None:
    # A version names one package: even a release going backwards gets a number of its
    # own, or (driver, version, stage) would not identify one review. (Seed 1 repeats ten
    # versions in these 20,000 changes when repeats are not drawn again.)
    state = make_state(drivers=5, seed=1)
    seen = {d: {s["version"]} for d, s in state.current().items()}
    repeats = 0
    for _ in range(20_000):
        changed = state.generate_change()
        versions = seen.setdefault(changed.id, set())
        repeats += changed.version in versions
        versions.add(changed.version)
    assert repeats == 0


def test_crash_telemetry_drifts_but_keeps_its_side() -> None:
    state = make_state(drivers=2000, seed=4)
    truth = state.truth()
    failing = next(d for d, t in truth.items() if t["check"] == "crash_telemetry")
    passing = next(d for d, t in truth.items() if t["check"] is None)
    for driver_id, passed in ((failing, False), (passing, True)):
        version = state.record(driver_id).version
        answers = [state.run_check("crash_telemetry", driver_id, version) for _ in range(5)]
        assert {a.passed for a in answers} == {passed}
        rates = [a.details["crash_rate"] for a in answers]
        assert len(set(rates)) > 1
        assert all((r < data.CRASH_RATE_THRESHOLD) == passed for r in rates)


def test_converged_counts_drivers_at_their_truth() -> None:
    state = make_state(drivers=100, seed=1)
    done, total = state.converged()
    truth = state.truth()
    target = next(
        d for d, t in truth.items()
        if t["status"] == "published" and state.current()[d]["stage"] == "compatibility"
    )  # fmt: skip
    state.decide(target, truth[target]["version"] or "", "compatibility", APPROVE)
    assert state.converged() == (done + 1, total)


# --- listings --------------------------------------------------------------------------


def test_full_listing_pages_are_complete_and_ordered() -> None:
    state = make_state(drivers=257)
    ids: list[str] = []
    cursor = None
    while True:
        page = state.list_page(cursor, limit=50)
        ids += [s.id for s in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert ids == sorted(set(ids)) and len(ids) == 257
    assert state.stats.listing_scans["full"] == 1 and state.stats.listing_pages["full"] == 6


def test_changes_paging_is_complete_while_changes_and_decisions_arrive() -> None:
    clock = FakeClock()
    state = CatalogState(drivers=300, seed=8, package_size=64, clock_us=clock.us)
    rng = random.Random(0)
    seen: dict[str, tuple[datetime, str]] = {}
    order: list[tuple[datetime, str]] = []
    cursor = None
    for _ in itertools.count():
        page = state.changes_page(EPOCH, cursor, limit=25)
        assert len({s.id for s in page.items}) == len(page.items)
        for s in page.items:
            seen[s.id] = (s.updated_at, s.version)
            order.append((s.updated_at, s.id))
        cursor = page.next_cursor
        if cursor is None:
            break
        for _ in range(5):  # the catalog moves on between pages
            clock.now += 0.001
            if rng.random() < 0.5:
                state.generate_change()
            else:
                d = at_stage(state, "intake")
                state.decide(d, state.record(d).version, "intake", APPROVE)
    assert order == sorted(order) and len(set(order)) == len(order)
    final = {d: state.record(d) for d in state.current()}
    assert set(seen) == set(final)
    assert all(seen[d] == (r.updated_at, r.version) for d, r in final.items())


def test_changelog_compaction_keeps_scans_exact() -> None:
    log = ChangeLog()
    latest: dict[str, int] = {}
    for ts in range(1, 5000):
        driver_id = f"d{ts % 7}"
        log.append(ts, driver_id)
        latest[driver_id] = ts
        log.maybe_compact(lambda: ((t, d) for d, t in latest.items()), len(latest))
    assert len(log) < 2 * 7 + 1100
    ids, more = log.scan(0, None, lambda ts, d: latest[d] == ts, limit=100)
    assert ids == sorted(latest, key=latest.__getitem__) and not more
    assert log.scan(latest["d3"], "d3", lambda ts, d: latest[d] == ts, limit=100)[0] == [
        d for d in ids if latest[d] > latest["d3"]
    ]


def test_etag_comparison() -> None:
    assert etag_matches('"abc"', '"abc"')
    assert etag_matches('W/"abc"', '"abc"')
    assert etag_matches('"x", "abc"', '"abc"')
    assert etag_matches("*", '"abc"')
    assert not etag_matches('"abd"', '"abc"')


# --- rate limit ------------------------------------------------------------------------


def test_token_bucket_admits_burst_then_refills() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, clock=clock.s)
    assert [bucket.try_acquire().admitted for _ in range(4)] == [True, True, True, False]
    refused = bucket.try_acquire()
    assert refused.remaining == 0 and refused.wait_s == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.try_acquire().admitted
    clock.now += 10
    assert bucket.try_acquire().remaining == 2  # capped at capacity, minus this one


def test_retry_after_and_ratelimit_header_formats() -> None:
    assert retry_after(0.01, "seconds") == "1"
    assert retry_after(2.2, "seconds") == "3"
    now = 1_700_000_000.4
    when = parsedate_to_datetime(retry_after(1.2, "http-date", now=now))
    assert when.timestamp() == 1_700_000_003.0  # ceil(now + ceil(1.2))
    bucket = TokenBucket(10.0, 2, clock=FakeClock().s)
    headers = ratelimit_headers(bucket, bucket.try_acquire())
    assert headers["RateLimit-Policy"] == '"default";q=10;w=1'
    assert re.fullmatch(r'"default";r=1;t=\d+', headers["RateLimit"])
    assert TokenBucket(10.0, 50).policy() == (50, 5)


def test_the_webhook_senders_retry_after_is_the_shared_parser_capped_at_a_minute() -> None:
    def sender(value: str | None, now: float = 1_700_000_000.0) -> float | None:
        return parse_retry_after(value, now, max_s=RETRY_AFTER_MAX_S)

    assert sender("3") == 3.0
    assert sender("Tue, 14 Nov 2023 22:13:22 GMT") == 2.0
    assert sender("soon") is None and sender(None) is None
    assert sender("99999") == 60.0

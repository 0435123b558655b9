"""The mutable catalog of the simulator: drivers, decisions, generated changes and the
ground truth. Pure Python (no I/O, no event loop), so it is unit-tested directly.

Ordering invariants the REST contract relies on:

- ``updated_at`` is strictly increasing across the whole catalog (one microsecond clock,
  bumped on every change), so "changed after T" is exact and a cursor that carries the
  ``(updated_at, id)`` of the last row stays valid while changes keep arriving;
- the change log (:mod:`~driver_review.sim.changelog`) is append-only, so paging never
  misses a driver: one that changes while a client pages appears again, later, with its
  new state.
"""

from __future__ import annotations

import hashlib
import random
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from driver_review.catalog.models import (
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
    PackageInfo,
    Page,
    Status,
)
from driver_review.sim import answers, data
from driver_review.sim.changelog import ChangeLog
from driver_review.sim.stats import SimStats
from driver_review.sim.wire import (
    MAX_PAGE,
    BadRequestError,
    ConflictError,
    NotFoundError,
    decode_cursor,
    encode_cursor,
    etag_matches,
    to_datetime,
    to_us,
    wall_clock_us,
)

#: Share of generated changes that are a brand-new driver rather than a new version.
NEW_DRIVER_SHARE = 0.05


@dataclass
class _Driver:
    identity: data.Identity
    spec: data.VersionSpec
    generation: int
    status: Status
    stage: str | None
    updated_us: int
    released_us: int
    telemetry_calls: int = 0
    # Versions this driver had before the current one (a version names one package: it is
    # never issued twice, even when a release goes backwards).
    earlier: set[str] | None = None
    # (JSON body, strong ETag, record) of the current state; dropped on every change.
    cached: tuple[bytes, str, DriverRecord] | None = None


@dataclass(frozen=True)
class Decision:
    driver_id: str
    version: str
    stage: str
    verdict: str
    at: datetime
    duplicate: bool
    reviewer: str


class CatalogState:
    """The whole catalog. Every public method is thread-safe (one lock)."""

    def __init__(
        self,
        *,
        drivers: int = 1000,
        seed: int = 0,
        package_size: int = 16384,
        clock_us: Callable[[], int] = wall_clock_us,
        stats: SimStats | None = None,
    ) -> None:
        self.seed = seed
        self.package_size = package_size
        self.stats = stats if stats is not None else SimStats()
        self.decisions: list[Decision] = []
        self._clock_us = clock_us
        self._lock = threading.RLock()
        self._drivers: dict[str, _Driver] = {}
        self._ids: list[str] = []  # sorted: the full listing's order
        self._log = ChangeLog()
        # (driver, version, stage) -> verdict, including what the catalog had decided
        # before the simulation started (stages a version passed before it came to us).
        self._decided: dict[tuple[str, str, str], str] = {}
        self._change_rng = random.Random(f"{seed}/changes")
        self._drift_rng = random.Random(f"{seed}/drift")
        self._next_index = drivers
        self._last_us = 0
        self._populate(drivers, clock_us())

    # --- construction -----------------------------------------------------------------

    def _populate(self, count: int, start_us: int) -> None:
        rows = []
        for index in range(count):
            identity = data.make_identity(self.seed, index)
            placed = data.initial_placement(identity, self.seed, count)
            rows.append((start_us - placed.age_us, identity, placed))
        rows.sort(key=lambda row: (row[0], row[1].id))
        for ts, identity, placed in rows:
            ts = max(ts, self._last_us + 1)
            self._last_us = ts
            spec = placed.spec
            d = _Driver(
                identity, spec, 0, placed.status, placed.stage, ts, ts - placed.released_before_us
            )
            self._drivers[identity.id] = d
            self._log.append(ts, identity.id)
            self._seed_history(d)
        self._ids = sorted(self._drivers)

    def _seed_history(self, d: _Driver) -> None:
        start = data.STAGES.index(d.spec.entry_stage)
        if d.status == "published":
            end = len(data.STAGES)
        else:
            assert d.stage is not None
            end = data.STAGES.index(d.stage)
        for stage in data.STAGES[start:end]:
            self._decided[(d.identity.id, d.spec.version, stage)] = "approved"
        if d.status == "rejected" and d.stage is not None:
            self._decided[(d.identity.id, d.spec.version, d.stage)] = "rejected"

    # --- clock and log ----------------------------------------------------------------

    def _tick(self) -> int:
        self._last_us = max(self._clock_us(), self._last_us + 1)
        return self._last_us

    def _touch(self, d: _Driver) -> None:
        d.updated_us = self._tick()
        d.cached = None
        self._log.append(d.updated_us, d.identity.id)
        self._log.maybe_compact(
            lambda: ((x.updated_us, x.identity.id) for x in self._drivers.values()),
            len(self._drivers),
        )

    def _get(self, driver_id: str) -> _Driver:
        d = self._drivers.get(driver_id)
        if d is None:
            raise NotFoundError(f"driver {driver_id!r} does not exist")
        return d

    def _current_version(self, d: _Driver, version: str) -> None:
        if version != d.spec.version:
            raise ConflictError(
                f"version {version!r} of driver {d.identity.id!r} is not current "
                f"(current: {d.spec.version!r})"
            )

    # --- reads ------------------------------------------------------------------------

    def _summary(self, d: _Driver) -> DriverSummary:
        return DriverSummary(
            id=d.identity.id,
            version=d.spec.version,
            stage=d.stage,
            status=d.status,
            updated_at=to_datetime(d.updated_us),
        )

    def _cached(self, d: _Driver) -> tuple[bytes, str, DriverRecord]:
        if d.cached is None:
            spec = d.spec
            sha = data.package_sha256(
                self.seed,
                d.identity.id,
                spec.version,
                self.package_size,
                tampered=spec.fate == "package_digest",
            )
            record = DriverRecord(
                id=d.identity.id,
                vendor_id=d.identity.vendor_id,
                vendor=spec.vendor,
                name=spec.name,
                version=spec.version,
                previous_version=spec.previous_version,
                stage=d.stage,
                status=d.status,
                hardware_ids=list(spec.hardware_ids),
                package=PackageInfo(size=self.package_size, sha256=sha),
                os=d.identity.os,
                released_at=to_datetime(d.released_us),
                updated_at=to_datetime(d.updated_us),
            )
            body = record.model_dump_json().encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            d.cached = (body, etag, record)
        return d.cached

    def record(self, driver_id: str) -> DriverRecord:
        with self._lock:
            return self._cached(self._get(driver_id))[2]

    def fetch_record(self, driver_id: str, if_none_match: str | None) -> tuple[bytes | None, str]:
        """``(JSON body, etag)``, or ``(None, etag)`` when ``if_none_match`` still matches."""
        with self._lock:
            d = self._get(driver_id)
            body, etag, _ = self._cached(d)
            if if_none_match is not None and etag_matches(if_none_match, etag):
                self.stats.driver_not_modified += 1
                return None, etag
            self.stats.count_fetch(driver_id, d.spec.version)
            return body, etag

    def list_page(self, cursor: str | None = None, limit: int = 500) -> Page:
        limit = max(1, min(limit, MAX_PAGE))
        with self._lock:
            start = 0
            if cursor is not None:
                (after,) = decode_cursor(cursor, "ids", 2)
                start = bisect_right(self._ids, after)
            ids = self._ids[start : start + limit]
            more = start + limit < len(self._ids)
            self.stats.count_listing("full", first_page=cursor is None)
            return Page(
                items=[self._summary(self._drivers[i]) for i in ids],
                next_cursor=encode_cursor("ids", ids[-1]) if ids and more else None,
            )

    def changes_page(self, since: datetime, cursor: str | None = None, limit: int = 500) -> Page:
        """Drivers with ``updated_at > since`` in ``(updated_at, id)`` order."""
        limit = max(1, min(limit, MAX_PAGE))
        with self._lock:
            # Resume after (after_ts, after_id); an id of None skips every row at after_ts,
            # which is what "updated_at > since" means.
            after_ts: int = to_us(since)
            after_id: str | None = None
            if cursor is not None:
                ts_text, cursor_id = decode_cursor(cursor, "chg", 3)
                if not ts_text.isdigit():
                    raise BadRequestError(f"cursor: {cursor!r} is not a cursor this listing issued")
                if int(ts_text) > after_ts:
                    after_ts, after_id = int(ts_text), cursor_id
            ids, more = self._log.scan(
                after_ts, after_id, lambda ts, did: self._drivers[did].updated_us == ts, limit
            )
            items = [self._summary(self._drivers[did]) for did in ids]
            self.stats.count_listing("changes", first_page=cursor is None)
            next_cursor = None
            if more and items:
                next_cursor = encode_cursor("chg", to_us(items[-1].updated_at), items[-1].id)
            return Page(items=items, next_cursor=next_cursor)

    def package(self, driver_id: str, version: str | None = None) -> tuple[str, bytes]:
        """``(version, bytes)`` of the driver's current package."""
        with self._lock:
            d = self._get(driver_id)
            if version is not None:
                self._current_version(d, version)
            blob = data.package_bytes(self.seed, driver_id, d.spec.version, self.package_size)
            self.stats.packages_served += 1
            self.stats.package_bytes += len(blob)
            return d.spec.version, blob

    def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        if check not in data.EXTERNAL_CHECKS:
            known = ", ".join(sorted(data.EXTERNAL_CHECKS))
            raise NotFoundError(f"check {check!r} is not served here (known: {known})")
        with self._lock:
            d = self._get(driver_id)
            self._current_version(d, version)
            self.stats.checks[check] += 1
            d.telemetry_calls += check == "crash_telemetry"
            return answers.answer(
                check, driver_id, d.spec, calls=d.telemetry_calls, drift=self._drift_rng,
                package_size=self.package_size,
            )  # fmt: skip

    # --- writes -----------------------------------------------------------------------

    def decide(
        self, driver_id: str, version: str, stage: str, request: DecisionRequest
    ) -> DecisionResponse:
        if stage not in data.STAGES:
            raise NotFoundError(
                f"stage {stage!r} does not exist (stages: {', '.join(data.STAGES)})"
            )
        with self._lock:
            d = self._get(driver_id)
            try:
                self._current_version(d, version)
            except ConflictError:
                self.stats.conflicts += 1
                raise
            key = (driver_id, version, stage)
            duplicate = key in self._decided
            if not duplicate and (d.status != "in_review" or d.stage != stage):
                self.stats.conflicts += 1
                where = f"at stage {d.stage!r}" if d.stage else "past every stage"
                raise ConflictError(
                    f"driver {driver_id!r} version {version!r} is {d.status} {where}, "
                    f"not in review at {stage!r}"
                )
            self.stats.decisions += 1
            self.stats.decisions_by_verdict[request.verdict] += 1
            at = datetime.now(UTC)
            entry = (driver_id, version, stage, request.verdict, at, duplicate, request.reviewer)
            self.decisions.append(Decision(*entry))
            if duplicate:
                self.stats.duplicate_decisions += 1
            else:
                self._decided[key] = request.verdict
                if request.verdict == "rejected":
                    d.status = "rejected"
                else:
                    nxt = data.STAGES.index(stage) + 1
                    d.stage = data.STAGES[nxt] if nxt < len(data.STAGES) else None
                    d.status = "in_review" if d.stage else "published"
                self._touch(d)
            return DecisionResponse(
                driver_id=driver_id,
                version=version,
                stage=d.stage,
                status=d.status,
                updated_at=to_datetime(d.updated_us),
                duplicate=duplicate,
            )

    def generate_change(self) -> DriverRecord:
        """One change from the seeded sequence: mostly a new version of an existing
        driver (it enters at intake, in review, with a fresh fate), sometimes a new driver."""
        with self._lock:
            rng = self._change_rng
            now = self._clock_us()
            if rng.random() < NEW_DRIVER_SHARE or not self._ids:
                index, self._next_index = self._next_index, self._next_index + 1
                identity = data.make_identity(self.seed, index)
                spec = data.make_version(
                    identity,
                    self.seed,
                    0,
                    entry_stage="intake",
                    previous=None,
                    drivers_hint=len(self._drivers),
                )
                d = _Driver(identity, spec, 0, "in_review", "intake", 0, now)
                self._drivers[identity.id] = d
                pos = bisect_left(self._ids, identity.id)
                self._ids.insert(pos, identity.id)
                self.stats.new_drivers_generated += 1
            else:
                d = self._drivers[self._ids[rng.randrange(len(self._ids))]]
                if d.earlier is None:
                    d.earlier = set()
                previous = d.spec.version
                d.earlier.add(previous)
                while True:  # a draw that repeats an earlier version is drawn again
                    d.generation += 1
                    d.spec = data.make_version(
                        d.identity,
                        self.seed,
                        d.generation,
                        entry_stage="intake",
                        previous=previous,
                        drivers_hint=len(self._drivers),
                    )
                    if d.spec.version not in d.earlier:
                        break
                d.status, d.stage, d.released_us = "in_review", "intake", now
                d.telemetry_calls = 0
            self._touch(d)
            self.stats.changes_generated += 1
            return self._cached(d)[2]

    # --- oracle -----------------------------------------------------------------------

    def truth(self) -> dict[str, dict[str, str | None]]:
        """Expected final state of every driver's current version."""
        with self._lock:
            return {did: data.expected(self._drivers[did].spec) for did in self._ids}

    def current(self) -> dict[str, dict[str, str | None]]:
        with self._lock:
            return {
                did: {"version": d.spec.version, "status": d.status, "stage": d.stage}
                for did, d in ((i, self._drivers[i]) for i in self._ids)
            }

    def converged(self) -> tuple[int, int]:
        """``(drivers whose current state equals the truth, drivers)``."""
        with self._lock:
            truth, now = self.truth(), self.current()
        keys = ("version", "status", "stage")
        same = sum(all(now[did][k] == t[k] for k in keys) for did, t in truth.items())
        return same, len(truth)

    def __len__(self) -> int:
        return len(self._drivers)

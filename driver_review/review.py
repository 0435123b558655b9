"""The review of one batch: records, checks and the catalog in, one outcome per item out.

No Ray and no actor here: the stage worker (``runtime/worker.py``) leases a batch, fetches
its records through the shared cache, calls :func:`review_batch`, and wires the outcomes
to the orchestrator, the results writer and the metrics. Everything this module does to
the outside goes through what it is handed (the checks' context, the catalog's
``put_decision``, ``refresh``), so every outcome is unit-tested on fakes.

An item ends in exactly one of these outcomes (``Reviewed.outcome``, the worker's counter):

=================  ==============================================================
``approved``       checks passed; the decision PUT was accepted
``rejected``       a check failed; the decision PUT was accepted
``error``          a check errored, the record could not be fetched, or the PUT
                   failed: a result row says why, the orchestrator retries later
``confirmed``      a staleness re-review found the driver no longer in review
``moved_on``       the catalog has a newer version: nothing decided, its state learnt
``already_decided`` a restored item whose stage the catalog already shows decided
``conflict``       the PUT met a 409 (decided or moved elsewhere): the state re-read
``quarantined``    the record cannot be taken (bad row): set aside, nothing decided
``gone``           the driver left the catalog (404 on fetch): nothing to review
=================  ==============================================================
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from driver_review.backlog import Lane
from driver_review.catalog.models import DecisionRequest, DecisionResponse, DriverRecord
from driver_review.checks import run_stage
from driver_review.checks.base import ContextFactory, NamedCheck
from driver_review.errors import CatalogError, Conflict, NotFound
from driver_review.ledger import Change, Verdict
from driver_review.orchestrator import ItemResult
from driver_review.quarantine import BadRow, to_change
from driver_review.results import ResultRow
from driver_review.wire import text_of, verdict_of


class Decider(Protocol):
    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse: ...


@dataclass(frozen=True)
class Fetched:
    """What the cache gave for one item: the record, or why not (``"NotFound"``, ...)."""

    record: DriverRecord | None
    error: str | None = None


@dataclass(frozen=True)
class Reviewed:
    result: ItemResult  # for the orchestrator
    row: ResultRow | None  # for the results (None: nothing decided, nothing to record)
    outcome: str  # see the module's table

    @property
    def decided(self) -> str | None:
        """The verdict PUT to the catalog, if one was (for the decisions metric)."""
        return self.outcome if self.outcome in ("approved", "rejected") else None


@dataclass(frozen=True)
class Reviewer:
    """What a stage's reviews need, bound once per worker."""

    stage_names: Sequence[str]
    checks: Sequence[NamedCheck]
    contexts: ContextFactory
    catalog: Decider
    #: The catalog's record of a driver now, past any cache (after a 409); None if gone.
    refresh: Callable[[str], Awaitable[DriverRecord | None]]
    worker: str = ""
    clock: Callable[[], float] = time.time


async def review_batch(
    reviewer: Reviewer, items: Sequence[dict[str, Any]], fetched: Sequence[Fetched]
) -> list[Reviewed]:
    """Review every item of a batch concurrently; one :class:`Reviewed` per item, in order.

    ``items`` are backlog rows (``driver_id``, ``version``, ``stage``, ``lane``,
    ``revalidate``, ``enqueued_at``), ``fetched`` their records from the cache.
    """
    return list(
        await asyncio.gather(
            *(review_one(reviewer, it, got) for it, got in zip(items, fetched, strict=True))
        )
    )


async def review_one(reviewer: Reviewer, item: dict[str, Any], got: Fetched) -> Reviewed:
    r = reviewer
    started = r.clock()
    driver_id, version, stage = item["driver_id"], item["version"], item["stage"]
    record = got.record
    if record is None:
        if got.error == "NotFound":  # the driver left the catalog: nothing to review
            return Reviewed(ItemResult(driver_id, version, stage, Verdict.NONE), None, "gone")
        return _error(r, item, started, {"fetch": str(got.error)})
    seen = _change(r, record)
    if isinstance(seen, BadRow):
        # A record we cannot take (unknown stage, bad version or time): decide nothing;
        # the orchestrator sets it aside until the catalog's row changes.
        return _moved(item, seen, "quarantined")
    if record.version != version:
        # The catalog moved on since this item was queued: review the newest instead.
        return _moved(item, seen, "moved_on")
    if record.status != "in_review" and item["lane"] == Lane.STALE:
        row = _row(r, item, "confirmed", {}, [], started)
        return Reviewed(ItemResult(driver_id, version, stage, Verdict.CONFIRMED), row, "confirmed")
    if item["revalidate"] and (record.status != "in_review" or record.stage != stage):
        # Fresh from the catalog: this stage was decided already (after the snapshot this
        # work was restored from). Learn where the driver is; decide nothing.
        return _moved(item, seen, "already_decided")
    result = await run_stage(record, r.checks, r.contexts)
    checks = [
        {"name": c.name, "outcome": c.status, "reason": c.reason, "duration_s": c.duration_s}
        for c in result.checks
    ]
    after: Change | None = None
    bad: BadRow | None = None
    verdict = result.verdict
    if verdict != "error":
        try:
            answer = await r.catalog.put_decision(
                driver_id, version, stage, DecisionRequest(verdict=verdict, reasons=result.reasons)
            )
        except Conflict:
            # Someone moved the driver (new version, or decided elsewhere): learn where.
            fresh = await r.refresh(driver_id)
            return _moved(item, _change(r, fresh) if fresh is not None else None, "conflict")
        except (CatalogError, NotFound) as exc:
            return _error(r, item, started, {"decision": str(exc)}, checks)
        if answer.updated_at is not None:
            answered = to_change(r.stage_names, answer, now=r.clock(), source="report")
            # A bad answer is reported as such: the decision stands, the driver is set
            # aside until the catalog's row changes.
            after, bad = (None, answered) if isinstance(answered, BadRow) else (answered, None)
    row = _row(r, item, verdict, result.reasons, checks, started)
    return Reviewed(
        ItemResult(driver_id, version, stage, verdict_of(verdict), after, bad), row, verdict
    )


def _change(r: Reviewer, record: DriverRecord) -> Change | BadRow:
    return to_change(r.stage_names, record, now=r.clock(), source="record")


def _moved(item: dict[str, Any], seen: Change | BadRow | None, outcome: str) -> Reviewed:
    """Nothing decided; ``seen`` is where the catalog says the driver is now."""
    after, bad = (None, seen) if isinstance(seen, BadRow) else (seen, None)
    result = ItemResult(item["driver_id"], item["version"], item["stage"], Verdict.NONE, after, bad)
    return Reviewed(result, None, outcome)


def _error(
    r: Reviewer,
    item: dict[str, Any],
    started: float,
    reasons: dict[str, str],
    checks: list[dict[str, Any]] | None = None,
) -> Reviewed:
    row = _row(r, item, "error", reasons, checks or [], started)
    result = ItemResult(item["driver_id"], item["version"], item["stage"], Verdict.ERROR)
    return Reviewed(result, row, "error")


def _row(
    r: Reviewer,
    item: dict[str, Any],
    verdict: str,
    reasons: dict[str, str],
    checks: list[dict[str, Any]],
    started: float,
) -> ResultRow:
    now = r.clock()
    return ResultRow(
        driver_id=item["driver_id"],
        version=item["version"],
        stage=item["stage"],
        verdict=verdict,
        reasons=reasons,
        checks=checks,
        reviewed_at=now,
        queued_at=item["enqueued_at"],
        duration_s=now - started,
        lane=text_of(item["lane"], Lane),
        worker=r.worker,
    )

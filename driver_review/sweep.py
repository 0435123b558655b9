"""One batch sweep to quiescence: every driver at its current stage, followed through the
stages to its final state.

Runs in the driver process of ``driver-review sweep`` and of ``ray job submit -- python -m
jobs.sweep``: starts an instance of its own (named ``sweep-…`` so it never collides with
a running service), feeds the listing into intake (waiting whenever intake is full),
waits until nothing is queued, leased or undecided, then drains and stops the instance.

Durability: the catalog is the source of truth (every decision is a PUT that moves the
driver there), so the sweep keeps no snapshot of its own. Its orchestrator restarts empty
when killed; the sweep notices (a new ``incarnation``), lists the catalog again and feeds
it again: a driver already final queues nothing, one still in review queues its current
stage, and repeats are harmless because decisions are idempotent PUTs. Quiescence is
believed only from the incarnation that received the whole last feed, and is then
confirmed by one more listing: a round that still finds drivers in review feeds them
again, at most ``MAX_ROUNDS`` times. A sweep that cannot finish says why in one line and
counts what it left unresolved; it never reports success while work is lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from ray.exceptions import GetTimeoutError, RayActorError

from driver_review.backlog import Lane
from driver_review.catalog.adapter import build_catalog
from driver_review.config import PipelineConfig
from driver_review.errors import CatalogError, IntakeFull
from driver_review.identifiers import redact_location
from driver_review.ledger import Change
from driver_review.quarantine import BadRow, taken
from driver_review.runtime.answers import SweepProgress
from driver_review.runtime.clients import make_catalog
from driver_review.runtime.handles import OrchestratorClient
from driver_review.runtime.names import connect
from driver_review.runtime.pool import merge_calls, merge_counts
from driver_review.runtime.system import System, start_system, stop_system

log = logging.getLogger(__name__)

INTAKE_CHUNK = 1000
POLL_S = 0.5
#: Confirming listings that may still find drivers in review (the catalog changed under
#: the sweep, or work was lost) before the sweep gives up and says so.
MAX_ROUNDS = 10
#: What the failure path may spend counting, from the catalog, the drivers left in review.
COUNT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SweepOptions:
    data_dir: str = "./data"
    instance: str | None = None
    timeout_s: float = 3600.0
    autoscale: bool = True


class Progress:
    """A bar on a terminal; a plain line every ``every_s`` otherwise (logs, CI, jobs)."""

    def __init__(self, out: TextIO = sys.stderr, every_s: float = 5.0) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every_s = every_s
        self._last = 0.0

    def update(
        self,
        listed: int,
        decided: int,
        queued: int,
        leased: int,
        elapsed_s: float,
        final: bool = False,
    ) -> None:
        now = time.monotonic()
        if not final and not self.tty and now - self._last < self.every_s:
            return
        self._last = now
        line = (
            f"sweep: {listed} listed, {decided} decisions, {queued} queued, "
            f"{leased} in flight, {elapsed_s:.0f}s"
        )
        if self.tty:
            self.out.write("\r\x1b[2K" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


class Unfinished(Exception):
    """The sweep cannot finish; the message is the one-line reason."""


@dataclass
class Listing:
    """What one pass over ``GET /v1/drivers`` saw."""

    listed: int = 0
    fed: int = 0  # rows handed to intake
    bad: int = 0  # rows set aside (quarantined), in no status count
    queued: int = 0  # of which intake queued work for
    by_status: dict[str, int] = field(
        default_factory=lambda: {"published": 0, "rejected": 0, "in_review": 0}
    )

    @property
    def in_review(self) -> int:
        return self.by_status.get("in_review", 0)


def run_sweep(
    config: PipelineConfig, options: SweepOptions, progress: Progress | None = None
) -> dict[str, Any]:
    connect()
    return asyncio.run(_sweep(config, options, progress or Progress()))


async def _intake(orchestrator: OrchestratorClient, changes: list[Change], deadline: float) -> int:
    """Hand a chunk to intake, waiting as long as the orchestrator says it is full."""
    while True:
        try:
            return await orchestrator.intake(changes, Lane.STALE)
        except IntakeFull as full:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(min(full.retry_after_s, 1.0))


class _Run:
    """One sweep's loop: feed the listing, wait for a quiescence that can be believed,
    confirm it against the catalog."""

    def __init__(
        self,
        config: PipelineConfig,
        system: System,
        catalog: Any,
        progress: Progress,
        timeout_s: float,
    ) -> None:
        self.config = config
        self.system = system
        self.catalog = catalog
        self.progress = progress
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.listing = Listing()
        self.listings = 0
        self.rounds = 0
        #: The incarnation that received the whole last feed (None: no complete feed yet).
        self.fed: str | None = None
        #: Verdict counters per orchestrator incarnation, as last read: each restart
        #: starts its own from zero.
        self.verdicts: dict[str, dict[str, int]] = {}
        self.orchestrator_down = False
        self._last: Mapping[str, Any] = {}

    @property
    def restarts(self) -> int:
        return max(0, len(self.verdicts) - 1)

    def decided(self) -> int:
        return sum(sum(v.values()) for v in self.verdicts.values())

    async def _state(self) -> SweepProgress:
        try:
            state = await self.system.orchestrator.progress()
        except (RayActorError, GetTimeoutError, ValueError) as exc:
            self.orchestrator_down = True
            raise Unfinished(
                f"orchestrator unreachable for "
                f"{self.system.orchestrator.timeout_s:.0f} s "
                f"({type(exc).__name__})"
            ) from exc
        if state["incarnation"] not in self.verdicts and self.verdicts:
            log.warning(
                "sweep: the orchestrator restarted (incarnation %d, %s)",
                len(self.verdicts) + 1,
                state["incarnation"][:8],
            )
        self.verdicts[state["incarnation"]] = state["verdicts"]
        self._last = state
        return state

    def _check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise Unfinished(f"timed out after {self.timeout_s:g} s")

    async def drive(self) -> None:
        """Returns once the catalog shows nothing in review; raises :class:`Unfinished`."""
        try:
            await self._drive()
        except IntakeFull as exc:
            raise Unfinished(f"timed out after {self.timeout_s:g} s (intake full)") from exc
        except CatalogError as exc:
            raise Unfinished("catalog listing failed: " + " ".join(str(exc).split())) from exc
        except (RayActorError, GetTimeoutError) as exc:  # intake retried past its bound
            self.orchestrator_down = True
            raise Unfinished(f"orchestrator unreachable ({type(exc).__name__})") from exc

    async def _drive(self) -> None:
        while True:
            self._check_deadline()
            state = await self._state()
            if state["incarnation"] != self.fed:
                # The first feed, or the orchestrator restarted (empty, or holding part of
                # a feed): give the catalog's whole current state to the one now running.
                if self.fed is not None:
                    log.warning("sweep: listing the catalog again for the restarted orchestrator")
                self.fed = await self._feed()
                continue
            if not state["quiescent"]:
                self._report(state)
                await asyncio.sleep(POLL_S)
                continue
            # Quiescent, and from the incarnation that holds the whole feed. Confirm with
            # the catalog itself: anything still in review is fed again (a row intake has
            # as news queues its current stage).
            confirmed_by = await self._feed()
            if confirmed_by != self.fed:
                self.fed = confirmed_by
                continue
            # Drivers whose record could not be taken are parked (quarantined, reported),
            # not unresolved: their review waits for the catalog to fix the record.
            if self.listing.in_review - state.get("parked", 0) <= 0:
                return
            self.rounds += 1
            log.warning(
                "sweep: %d drivers still in review after quiescence (round %d of %d)",
                self.listing.in_review,
                self.rounds,
                MAX_ROUNDS,
            )
            if self.rounds >= MAX_ROUNDS:
                raise Unfinished(f"{MAX_ROUNDS} confirming listings still found drivers in review")

    async def _feed(self) -> str | None:
        """List the catalog and hand every row to intake. Returns the incarnation that
        received all of it, or None when the orchestrator restarted meanwhile."""
        before = (await self._state())["incarnation"]
        listing = Listing()
        chunk: list[Change] = []
        bad: list[BadRow] = []
        async for summary in self.catalog.iter_drivers():
            listing.listed += 1
            item = taken(self.config.stage_names, summary, now=time.time(), source="listing")
            if isinstance(item, BadRow):  # set aside alone; the sweep goes on
                bad.append(item)
                continue
            chunk.append(item)
            listing.by_status[summary.status] = listing.by_status.get(summary.status, 0) + 1
            if len(chunk) >= INTAKE_CHUNK:
                listing.queued += await _intake(self.system.orchestrator, chunk, self.deadline)
                listing.fed += len(chunk)
                chunk = []
        if chunk:
            listing.queued += await _intake(self.system.orchestrator, chunk, self.deadline)
            listing.fed += len(chunk)
        if bad:
            await self.system.orchestrator.quarantine(bad)
        listing.bad = len(bad)
        self.listing = listing
        self.listings += 1
        after = (await self._state())["incarnation"]
        return after if after == before else None

    async def held_unresolved(self) -> int | None:
        """Drivers in review per the orchestrator that holds the whole feed, if it answers
        (None otherwise: a restarted one knows only part of the catalog)."""
        if self.orchestrator_down or self.fed is None:
            return None
        try:
            state = await asyncio.wait_for(self._state(), COUNT_TIMEOUT_S)
        except (Unfinished, TimeoutError):
            return None
        return int(state["in_review"]) if state["incarnation"] == self.fed else None

    async def count_unresolved(self, held: int | None) -> int:
        """Drivers still in review, counted once the pools have drained (so nothing decided
        meanwhile is counted): from the catalog itself, else what the orchestrator held,
        else the last listing (what it saw in review, perhaps decided since)."""
        # The instance is stopped, governor included: a few unpaced pages, bounded.
        catalog = build_catalog(
            self.config.catalog, limiter=None, on_response=None, stages=self.config.stage_names
        )
        try:
            return await asyncio.wait_for(self._count(catalog), COUNT_TIMEOUT_S)
        except (CatalogError, TimeoutError) as exc:
            log.warning("sweep: counting what is unresolved: %s", exc)
            return held if held is not None else self.listing.in_review
        finally:
            await catalog.aclose()

    async def _count(self, catalog: Any) -> int:
        listing = Listing()
        async for summary in catalog.iter_drivers():
            listing.listed += 1
            if isinstance(summary, BadRow):  # set aside, not in review here
                listing.bad += 1
                continue
            listing.by_status[summary.status] = listing.by_status.get(summary.status, 0) + 1
        self.listing = listing
        return listing.in_review

    def _report(self, state: Mapping[str, Any], final: bool = False) -> None:
        self.progress.update(
            self.listing.listed,
            self.decided(),
            state.get("queued", 0),
            state.get("leased", 0),
            time.monotonic() - self.started,
            final=final,
        )

    def report_final(self) -> None:
        self._report(self._last, final=True)


async def _sweep(config: PipelineConfig, options: SweepOptions, progress: Progress) -> dict:
    instance = options.instance or f"sweep-{uuid.uuid4().hex[:8]}"
    system: System = await asyncio.to_thread(
        start_system,
        config,
        instance=instance,
        data_dir=options.data_dir,
        outer_loop=False,
        autoscale=options.autoscale,
    )
    catalog, _ = make_catalog(config, instance)
    run = _Run(config, system, catalog, progress, options.timeout_s)
    reason = ""
    held: int | None = None
    try:
        try:
            await run.drive()
        except Unfinished as exc:
            reason = str(exc)
            held = await run.held_unresolved()
        run.report_final()
        wall_s = time.monotonic() - run.started
    finally:
        listing_calls = catalog.stats().get("calls", {})
        listing_rows = catalog.stats().get("rows", {})
        await catalog.aclose()
        final = await stop_system(system)
    unresolved = await run.count_unresolved(held) if reason else 0
    return summarize(
        final,
        listed=run.listing.listed,
        final_states=run.listing.by_status,
        decisions=_merge_verdicts(run.verdicts),
        wall_s=wall_s,
        listing_calls=listing_calls,
        instance=instance,
        data_dir=options.data_dir,
        reason=reason,
        unresolved=unresolved,
        restarts=run.restarts,
        listings=run.listings,
        rounds=run.rounds,
        listing_rows=listing_rows,
    )


def _merge_verdicts(per_incarnation: dict[str, dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for verdicts in per_incarnation.values():
        for name, n in verdicts.items():
            total[name] = total.get(name, 0) + n
    return total


def summarize(
    final: dict[str, Any],
    *,
    listed: int,
    final_states: dict[str, int],
    decisions: dict[str, int],
    wall_s: float,
    listing_calls: dict[str, dict[str, int]],
    instance: str,
    data_dir: str,
    reason: str = "",
    unresolved: int = 0,
    restarts: int = 0,
    listings: int = 0,
    rounds: int = 0,
    listing_rows: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary ``--json`` prints. ``final_states`` are the catalog's, as last listed;
    ``ok`` is false exactly when ``reason`` says why the sweep did not finish."""
    calls: dict[str, dict[str, int]] = {}
    merge_calls(calls, listing_calls)
    merge_calls(calls, final.get("cache", {}).get("calls", {}))
    worker_counts: dict[str, int] = {}
    workers: dict[str, int] = {}
    for stage, pool in final.get("pools", {}).items():
        merge_calls(calls, pool.get("retired_calls", {}))
        merge_counts(worker_counts, pool.get("retired", {}))
        workers[stage] = pool.get("peak_workers", 0)
    total_calls = sum(sum(by.values()) for by in calls.values())
    rate_limited = sum(by.get("429", 0) for by in calls.values())
    cache = final.get("cache", {})
    orch = final.get("orchestrator", {})
    return {
        "instance": instance,
        "data_dir": redact_location(os.fspath(data_dir)),  # an s3:// URI may hold keys
        "drivers": listed,
        "ok": not reason,
        "reason": reason or None,
        "decisions": decisions,
        "final_states": {k: final_states.get(k, 0) for k in ("published", "rejected", "in_review")},
        "unresolved": unresolved,
        "timed_out": reason.startswith("timed out"),
        "orchestrator_restarts": restarts,
        "listings": listings,
        "confirm_rounds": rounds,
        # Bad rows set aside (by kind), and bad listing rows whose record by id was good.
        "quarantined": {
            **{
                k: v
                for k, v in orch.get("quarantined", {}).items()
                if k in ("total", "by_kind", "parked")
            },
            "resolved": sum((listing_rows or {}).get("resolved", {}).values()),
            # Bad rows the listings yielded, every pass counted (a confirming listing reads
            # the same bad rows again; ``total`` counts each distinct row once).
            "listed_bad": sum((listing_rows or {}).get("bad", {}).values()),
        },
        "external_calls": calls,
        "external_calls_total": total_calls,
        "rate_limited_share": rate_limited / total_calls if total_calls else 0.0,
        "worker_counts": worker_counts,
        "peak_workers": workers,
        "cache": {
            k: cache.get(k)
            for k in ("hits", "misses", "stale", "fetches", "not_modified", "fills", "hit_ratio")
        },
        "governor": final.get("governor", {}),
        "wall_s": round(wall_s, 3),
        "achieved_rps": round(total_calls / wall_s, 2) if wall_s else 0.0,
    }


def failure_line(summary: dict[str, Any]) -> str:
    """The one line a sweep that did not finish ends with (empty when it finished)."""
    if summary["ok"]:
        return ""
    return (
        f"sweep did not finish: {summary['reason']} with {summary['unresolved']} drivers unresolved"
    )


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The sweep's summary for a person, a line each (the CLI prints them)."""
    lines: list[str] = []
    write = lines.append
    write(f"sweep {summary['instance']}: {summary['drivers']} drivers in {summary['wall_s']:.1f}s")
    write("  decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["decisions"].items())))
    write("  final:     " + ", ".join(f"{k} {v}" for k, v in summary["final_states"].items()))
    write(
        f"  calls:     {summary['external_calls_total']} at {summary['achieved_rps']}/s, "
        f"429s {summary['rate_limited_share']:.2%}"
    )
    c = summary["cache"]
    write(f"  cache:     {c['hits']} hits, {c['misses']} misses, {c['fetches']} fetches")
    write(f"  results:   {summary['data_dir']}/reviews/")
    q = summary.get("quarantined") or {}
    if q.get("total") or q.get("resolved"):
        write(
            f"  quarantined: {q.get('total', 0)} rows set aside ("
            + ", ".join(f"{k} {v}" for k, v in sorted(q.get("by_kind", {}).items()))
            + f"); {q.get('resolved', 0)} bad rows resolved by id"
        )
    if summary["orchestrator_restarts"]:
        write(
            f"  restarts:  orchestrator {summary['orchestrator_restarts']}, "
            f"{summary['listings']} listings"
        )
    return lines

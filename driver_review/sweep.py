"""One batch sweep to quiescence: every driver at its current stage, followed through the
stages to its final state.

Runs in the driver process of ``driver-review sweep`` and of ``ray job submit -- python -m
jobs.sweep``: starts an instance of its own (named ``sweep-…`` so it never collides with
a running service), feeds the listing into intake (waiting whenever intake is full),
waits until nothing is queued, leased or undecided, then drains and stops the instance.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from driver_review.backlog import Lane
from driver_review.config import PipelineConfig
from driver_review.errors import IntakeFull
from driver_review.identifiers import redact_location
from driver_review.ledger import Change
from driver_review.quarantine import BadRow, taken
from driver_review.runtime.clients import make_catalog
from driver_review.runtime.names import ActorRef, connect
from driver_review.runtime.pool import merge_calls, merge_counts
from driver_review.runtime.system import System, start_system, stop_system

INTAKE_CHUNK = 1000
POLL_S = 0.5


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

    def update(self, listed: int, decided: int, queued: int, leased: int, elapsed_s: float,
               final: bool = False) -> None:
        now = time.monotonic()
        if not final and not self.tty and now - self._last < self.every_s:
            return
        self._last = now
        line = (f"sweep: {listed} listed, {decided} decisions, {queued} queued, "
                f"{leased} in flight, {elapsed_s:.0f}s")
        if self.tty:
            self.out.write("\r\x1b[2K" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


def run_sweep(
    config: PipelineConfig, options: SweepOptions, progress: Progress | None = None
) -> dict[str, Any]:
    connect()
    return asyncio.run(_sweep(config, options, progress or Progress()))


async def _intake(orchestrator: ActorRef, changes: list[Change], deadline: float) -> None:
    """Hand a chunk to intake, waiting as long as the orchestrator says it is full."""
    while True:
        try:
            await orchestrator.call("intake", changes, int(Lane.STALE))
            return
        except IntakeFull as full:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(min(full.retry_after_s, 1.0))


async def _sweep(config: PipelineConfig, options: SweepOptions, progress: Progress) -> dict:
    instance = options.instance or f"sweep-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    deadline = started + options.timeout_s
    system: System = await asyncio.to_thread(
        start_system, config, instance=instance, data_dir=options.data_dir,
        outer_loop=False, autoscale=options.autoscale,
    )
    catalog, _ = make_catalog(config, instance)
    listed = 0
    timed_out = False
    try:
        chunk: list[Change] = []
        bad: list[BadRow] = []
        async for summary in catalog.iter_drivers():
            listed += 1
            item = taken(config.stage_names, summary, now=time.time(), source="listing")
            if isinstance(item, BadRow):  # set aside alone; the sweep goes on
                bad.append(item)
                continue
            chunk.append(item)
            if len(chunk) >= INTAKE_CHUNK:
                await _intake(system.orchestrator, chunk, deadline)
                chunk = []
        if chunk:
            await _intake(system.orchestrator, chunk, deadline)
        if bad:
            await system.orchestrator.call("quarantine", bad)
        while not await system.orchestrator.call("quiescent"):
            if time.monotonic() > deadline:
                timed_out = True
                break
            await _report_progress(system, progress, listed, started)
            await asyncio.sleep(POLL_S)
        await _report_progress(system, progress, listed, started, final=True)
        wall_s = time.monotonic() - started
    finally:
        listing_calls = catalog.stats().get("calls", {})
        listing_rows = catalog.stats().get("rows", {})
        await catalog.aclose()
        final = await stop_system(system)
    return summarize(final, listed=listed, wall_s=wall_s, listing_calls=listing_calls,
                     instance=instance, data_dir=options.data_dir, timed_out=timed_out,
                     listing_rows=listing_rows)


async def _report_progress(system: System, progress: Progress, listed: int, started: float,
                           final: bool = False) -> None:
    stats = await system.orchestrator.call("stats")
    decided = sum(stats["counters"]["verdicts"].values())
    progress.update(listed, decided, sum(b["queued"] for b in stats["backlog"].values()),
                    stats["leased_items"], time.monotonic() - started, final=final)


def summarize(final: dict[str, Any], *, listed: int, wall_s: float,
              listing_calls: dict[str, dict[str, int]], instance: str, data_dir: str,
              timed_out: bool, listing_rows: dict[str, Any] | None = None) -> dict[str, Any]:
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
    orch = final.get("orchestrator", {})
    cache = final.get("cache", {})
    ledger = orch.get("ledger", {})
    return {
        "instance": instance,
        "data_dir": redact_location(os.fspath(data_dir)),  # an s3:// URI may hold keys
        "drivers": listed,
        "decisions": orch.get("counters", {}).get("verdicts", {}),
        "final_states": {k: ledger.get(k, 0) for k in ("published", "rejected", "in_review")},
        "unresolved": ledger.get("in_review", 0) if timed_out else 0,
        "timed_out": timed_out,
        # Bad rows set aside (by kind), and bad listing rows whose record by id was good.
        "quarantined": {
            **{k: v for k, v in orch.get("quarantined", {}).items()
               if k in ("total", "by_kind", "parked")},
            "resolved": sum((listing_rows or {}).get("resolved", {}).values()),
        },
        "external_calls": calls,
        "external_calls_total": total_calls,
        "rate_limited_share": rate_limited / total_calls if total_calls else 0.0,
        "worker_counts": worker_counts,
        "peak_workers": workers,
        "cache": {k: cache.get(k) for k in ("hits", "misses", "stale", "fetches",
                                            "not_modified", "fills", "hit_ratio")},
        "governor": final.get("governor", {}),
        "wall_s": round(wall_s, 3),
        "achieved_rps": round(total_calls / wall_s, 2) if wall_s else 0.0,
    }


def format_summary(summary: dict[str, Any], write: Callable[[str], Any] = print) -> None:
    write(f"sweep {summary['instance']}: {summary['drivers']} drivers in {summary['wall_s']:.1f}s")
    write("  decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["decisions"].items())))
    write("  final:     " + ", ".join(f"{k} {v}" for k, v in summary["final_states"].items()))
    write(f"  calls:     {summary['external_calls_total']} at {summary['achieved_rps']}/s, "
          f"429s {summary['rate_limited_share']:.2%}")
    c = summary["cache"]
    write(f"  cache:     {c['hits']} hits, {c['misses']} misses, {c['fetches']} fetches")
    write(f"  results:   {summary['data_dir']}/reviews/")
    q = summary.get("quarantined") or {}
    if q.get("total") or q.get("resolved"):
        write(f"  quarantined: {q.get('total', 0)} rows set aside ("
              + ", ".join(f"{k} {v}" for k, v in sorted(q.get("by_kind", {}).items()))
              + f"); {q.get('resolved', 0)} bad rows resolved by id")
    if summary["timed_out"]:
        write(f"  TIMED OUT with {summary['unresolved']} drivers unresolved")

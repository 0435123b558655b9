"""Scenario 2, peers on the same sweep: what a good engineer would write instead of
driver-review, each run against a fresh simulator with the same seed, size, latency and
rate limit as scenario 1's undisclosed-limit sweep (:mod:`.peer_runners`):

- **fanout**: asyncio, one client per process, a semaphore; best of a concurrency grid;
- **ray_data**: ``map_batches`` over a tuned actor pool; best of a (pool, batch) grid;
- **adaptive**: botocore's adaptive retry mode (CUBIC client-side rate limiting).

All use the product's own checks, PUT real decisions and take the PUT's answer instead
of fetching again; their clocks start like driver-review's (at the first call after the
listing). A setting counts only if every driver reached its true final state
(:mod:`.peer_scoring`): a peer that crashes, runs out of time or misses the truth at
every setting is an error of the scenario, never scored at a bound nor a met target.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import DriverSummary
from driver_review.config import CatalogConfig
from driver_review.sim import SimServer
from jobs.bench.common import CallLog, Context, call_counts, ratio, say
from jobs.bench.peer_runners import RAY_DATA_ACTOR_CPUS, RUNNERS
from jobs.bench.peer_scoring import (
    peer_error,
    peer_targets,
    pick_best,
    run_error,
)
from jobs.bench.utilization import measure_sweep, sim_settings

#: The settings each peer is tried at (its best counts). Quick runs a smaller grid.
GRIDS: dict[str, list[dict[str, int]]] = {
    "fanout": [{"concurrency": c} for c in (8, 32, 128)],
    "ray_data": [
        {"pool": 2, "batch_size": 16},
        {"pool": 4, "batch_size": 16},
        {"pool": 4, "batch_size": 32},
    ],
    "adaptive": [{"concurrency": c} for c in (32, 128)],
}
QUICK_GRIDS: dict[str, list[dict[str, int]]] = {
    "fanout": [{"concurrency": c} for c in (8, 32)],
    "ray_data": [{"pool": 2, "batch_size": 16}, {"pool": 4, "batch_size": 16}],
    "adaptive": [{"concurrency": 32}],
}
PEERS = tuple(GRIDS)
MIN_BOUND_S = 60.0


def grids(quick: bool) -> dict[str, list[dict[str, int]]]:
    return QUICK_GRIDS if quick else GRIDS


def in_review_ids(url: str) -> list[str]:
    async def listing() -> list[str]:
        catalog = HttpCatalog(CatalogConfig(url=url, max_attempts=20))
        try:
            return [
                s.id
                async for s in catalog.iter_drivers()
                if isinstance(s, DriverSummary) and s.status == "in_review"
            ]
        finally:
            await catalog.aclose()

    return asyncio.run(listing())


def measure_point(
    ctx: Context, name: str, setting: dict[str, int], bound_s: float
) -> dict[str, Any]:
    """One run of peer ``name`` at ``setting`` against a fresh simulator; its figures,
    with ``error`` when it does not count."""
    limit = ctx.sizes.rate_limit
    with SimServer(sim_settings(ctx)) as sim:
        log = CallLog.install(sim)
        started = time.monotonic()
        deadline = time.time() + bound_s
        try:
            ids = in_review_ids(sim.url)
            detail = RUNNERS[name](sim.url, ids, deadline, setting)
        except Exception as exc:  # reported, not raised: the other peers still run
            detail = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
        total_s = time.monotonic() - started
        stats = sim.state.stats.as_dict()
        converged, drivers = sim.state.converged()
    counts = call_counts(stats)
    active_s = log.active_s()
    useful = counts["calls"] - counts["rate_limited_calls"]
    minimum_s = counts["necessary_calls"] / limit
    out: dict[str, Any] = {
        "setting": setting,
        "drivers": drivers,
        "converged_drivers": converged,
        "decisions": stats["decisions"],
        **counts,
        "active_s": active_s,
        "startup_s": (log.first_review - started) if log.first_review is not None else None,
        "total_s": total_s,
        "useful_calls_per_s": ratio(useful, active_s),
        "utilization_ratio": ratio(ratio(useful, active_s), limit),
        "rate_limited_share": ratio(counts["rate_limited_calls"], counts["calls"]),
        "wall_to_minimum_ratio": ratio(active_s, minimum_s),
        "calls_per_decision_ratio": ratio(counts["calls"], stats["decisions"]),
        "max_fetches_per_version": stats["max_fetches_per_version"],
        "detail": detail,
        "useful_calls_per_second_series": log.per_second(),
    }
    error = run_error(detail, converged, drivers)
    if error is not None:
        out["error"] = error
    say(
        f"  {name} {setting}: {error or 'reached the truth'}; {counts['calls']} calls, "
        f"429s {out['rate_limited_share'] or 0:.1%}, active {active_s or 0:.1f}s, "
        f"utilization {out['utilization_ratio'] or 0:.3f}"
    )
    return out


def _reference(ctx: Context) -> dict[str, Any]:
    reference = ctx.results.get("utilization", {}).get("runs", {}).get("no_headers")
    if reference is None:
        say("  driver-review reference sweep (utilization did not run)")
        reference = measure_sweep(ctx, headers=False, label="peers-reference")
    return reference


def run(ctx: Context) -> dict[str, Any]:
    reference = _reference(ctx)
    dr_wall = reference["active_s"]
    bound_s = max(MIN_BOUND_S, ctx.sizes.peer_bound_factor * (dr_wall or MIN_BOUND_S))
    dr = {
        k: reference[k]
        for k in (
            "active_s",
            "calls",
            "rate_limited_share",
            "utilization_ratio",
            "wall_to_minimum_ratio",
            "calls_per_decision_ratio",
            "decisions",
            "converged_drivers",
            "drivers",
        )
    }
    peers: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    errors: list[str] = []
    for name, settings in grids(ctx.quick).items():
        points = [measure_point(ctx, name, s, bound_s) for s in settings]
        best = pick_best(points)
        peer: dict[str, Any] = {"grid": points}
        if best is None:
            peer["error"] = peer_error(name, points)
            errors.append(peer["error"])
        else:
            peer["best_setting"] = best["setting"]
            peer["best"] = {k: v for k, v in best.items() if k != "useful_calls_per_second_series"}
            peer["wall_to_driver_review_ratio"] = ratio(best["active_s"], dr_wall)
            peer["calls_per_decision_to_driver_review_ratio"] = ratio(
                best["calls_per_decision_ratio"], dr["calls_per_decision_ratio"]
            )
            peer["useful_calls_per_second_series"] = best["useful_calls_per_second_series"]
            targets.update(peer_targets(name, best, reference))
        for point in points:
            point.pop("useful_calls_per_second_series", None)
        peers[name] = peer
    return {
        "what": "the same sweep by competent peers (bounded asyncio fan-out, a tuned Ray "
        "Data pool, botocore's adaptive CUBIC client), each the best of a small "
        "grid and counted only when every driver reached its true final state: "
        "wall, 429 share, useful calls/s ÷ limit, wall ÷ minimum",
        "settings": {
            "drivers": ctx.sizes.sweep_drivers,
            "rate_limit_per_s": ctx.sizes.rate_limit,
            "bound_s": bound_s,
            "grids": grids(ctx.quick),
            "ray_data_actor_num_cpus": RAY_DATA_ACTOR_CPUS,
            "fanout_and_adaptive_task_num_cpus": 0,
            "cluster_cpus": ray.cluster_resources().get("CPU"),
        },
        "driver_review": dr,
        "peers": peers,
        "targets": targets,
        "errors": errors,
    }

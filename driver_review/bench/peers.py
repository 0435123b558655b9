"""Scenario 2, peers on the same sweep: what driver-review replaces, run against a fresh
simulator with the same seed, size and rate limit as scenario 1's undisclosed-limit sweep.

- **naive**: list everything, fire one Ray task per driver in review (no backpressure;
  tasks take Ray's default of 1 CPU each), each following its driver through the stages
  with a plain retrying client (:mod:`.peer_review`).
- **ray_data**: ``ray.data.from_items(drivers).map_batches(Reviewer, concurrency=k,
  batch_size=b)``: an actor pool, each batch reviewed concurrently with a retrying client.

Both run the product's own checks and PUT real decisions, so the simulator's truth says
whether they reviewed correctly. Each is bounded: it gives up after
``peer_bound_factor`` x driver-review's active wall and is then reported as "did not
finish in X s", with what it got done by then.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from collections import Counter
from typing import Any

import ray

from driver_review.bench.common import (
    CallLog,
    Context,
    call_counts,
    ratio,
    say,
    target,
)
from driver_review.bench.peer_review import review_sync
from driver_review.bench.utilization import measure_sweep, sim_settings
from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import DriverSummary
from driver_review.config import CatalogConfig
from driver_review.sim import SimServer

RAY_DATA_CONCURRENCY = 4  # actors in the pool
RAY_DATA_BATCH = 16  # drivers per batch, reviewed concurrently inside an actor
RAY_DATA_CPUS = 0.5  # per actor, so the pool fits a 2-core machine's 4 logical CPUs
MIN_BOUND_S = 60.0
GRACE_S = 15.0  # after the deadline, for in-flight work to notice and stop


@ray.remote(max_retries=0)
def _naive_task(url: str, driver_id: str, deadline: float) -> dict[str, Any]:
    return review_sync(url, [driver_id], deadline, "naive")


class _Reviewer:
    """The Ray Data UDF: a batch of driver ids in, what became of them out."""

    def __init__(self, url: str, deadline: float) -> None:
        self.url = url
        self.deadline = deadline

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        ids = [str(d) for d in batch["driver_id"]]
        counts = review_sync(self.url, ids, self.deadline, "ray-data")
        return {"n": np.array([len(ids)]), "decisions": np.array([counts.get("decisions", 0)]),
                "abandoned": np.array([counts.get("abandoned", 0)])}


def _in_review(url: str) -> list[str]:
    async def listing() -> list[str]:
        catalog = HttpCatalog(CatalogConfig(url=url, max_attempts=20))
        try:
            return [s.id async for s in catalog.iter_drivers()
                    if isinstance(s, DriverSummary) and s.status == "in_review"]
        finally:
            await catalog.aclose()

    return asyncio.run(listing())


def _run_naive(url: str, deadline: float) -> dict[str, Any]:
    ids = _in_review(url)
    refs = [_naive_task.remote(url, d, deadline) for d in ids]
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=deadline - time.time()
                             + GRACE_S)
    for ref in pending:
        ray.cancel(ref, force=True)
    totals: Counter[str] = Counter(unfinished=len(pending))
    for counts in ray.get(done):
        totals.update(counts)
    return {"in_review_listed": len(ids), "tasks": len(refs), **totals}


def _run_ray_data(url: str, deadline: float) -> dict[str, Any]:
    from ray.data import ActorPoolStrategy, DataContext

    DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ids = _in_review(url)
    ds = ray.data.from_items([{"driver_id": d} for d in ids]).map_batches(
        _Reviewer, fn_constructor_args=(url, deadline),
        compute=ActorPoolStrategy(size=RAY_DATA_CONCURRENCY), batch_size=RAY_DATA_BATCH,
        num_cpus=RAY_DATA_CPUS, batch_format="numpy",
    )
    rows = ds.take_all()
    return {"in_review_listed": len(ids),
            "decisions": int(sum(r["decisions"] for r in rows)),
            "abandoned": int(sum(r["abandoned"] for r in rows))}


def _missing(name: str) -> str | None:
    """Why a peer cannot run here, or None."""
    if name == "ray_data" and importlib.util.find_spec("pandas") is None:
        return "not run: Ray Data needs pandas (pip install 'driver-review[bench]')"
    return None


def _measure_peer(ctx: Context, name: str, bound_s: float) -> dict[str, Any]:
    missing = _missing(name)
    if missing is not None:
        say(f"  {name}: {missing}")
        return {"finished": False, "did_not_finish": missing, "active_s": None,
                "rate_limited_share": None, "calls_per_decision_ratio": None,
                "useful_calls_per_second_series": []}
    runner = {"naive": _run_naive, "ray_data": _run_ray_data}[name]
    with SimServer(sim_settings(ctx)) as sim:
        log = CallLog.install(sim)
        started = time.monotonic()
        deadline = time.time() + bound_s
        try:
            detail = runner(sim.url, deadline)
        except Exception as exc:  # reported, not raised: the other scenarios still run
            detail = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
        total_s = time.monotonic() - started
        stats = sim.state.stats.as_dict()
        converged, drivers = sim.state.converged()
    counts = call_counts(stats)
    finished = (converged == drivers and not detail.get("abandoned")
                and not detail.get("unfinished") and "failed" not in detail)
    active_s = log.active_s()
    out: dict[str, Any] = {
        "finished": finished,
        "drivers": drivers,
        "converged_drivers": converged,
        "decisions": stats["decisions"],
        **counts,
        "active_s": active_s if finished else None,
        "startup_s": (log.first_review - started) if log.first_review is not None else None,
        "total_s": total_s,
        "rate_limited_share": ratio(counts["rate_limited_calls"], counts["calls"]),
        "calls_per_decision_ratio": ratio(counts["calls"], stats["decisions"]),
        "useful_calls_per_s": ratio(counts["calls"] - counts["rate_limited_calls"], active_s),
        "max_fetches_per_version": stats["max_fetches_per_version"],
        "detail": detail,
        "useful_calls_per_second_series": log.per_second(),
    }
    if not finished:
        out["did_not_finish"] = (f"did not finish in {bound_s:.0f} s: {converged}/{drivers} "
                                 f"drivers in their final state")
    say(f"  {name}: {'finished' if finished else 'DID NOT FINISH'}, {counts['calls']} calls, "
        f"429s {out['rate_limited_share'] or 0:.1%}, active {active_s or 0:.1f}s")
    return out


def run(ctx: Context) -> dict[str, Any]:
    reference = ctx.results.get("utilization", {}).get("runs", {}).get("no_headers")
    if reference is None:
        say("  driver-review reference sweep (utilization did not run)")
        reference = measure_sweep(ctx, headers=False, label="peers-reference")
    dr_wall = reference["active_s"]
    bound_s = max(MIN_BOUND_S, ctx.sizes.peer_bound_factor * (dr_wall or MIN_BOUND_S))
    peers = {name: _measure_peer(ctx, name, bound_s) for name in ("naive", "ray_data")}
    dr = {k: reference[k] for k in ("active_s", "calls", "rate_limited_share",
                                    "calls_per_decision_ratio", "decisions",
                                    "converged_drivers", "drivers")}
    targets: dict[str, Any] = {}
    for name, p in peers.items():
        if "calls" not in p:  # could not run here at all
            targets[f"{name}.wall_to_driver_review_ratio"] = target(None, ">=", 1.0,
                                                                   p["did_not_finish"])
            continue
        p["wall_to_driver_review_ratio"] = ratio(p["active_s"], dr_wall)
        p["total_to_driver_review_ratio"] = ratio(p["total_s"] if p["finished"] else None,
                                                  reference["total_s"])
        p["calls_per_decision_to_driver_review_ratio"] = ratio(
            p["calls_per_decision_ratio"], dr["calls_per_decision_ratio"])
        p["rate_limited_share_minus_driver_review"] = (
            None if p["rate_limited_share"] is None or dr["rate_limited_share"] is None
            else p["rate_limited_share"] - dr["rate_limited_share"])
        wall = p["wall_to_driver_review_ratio"] if p["finished"] else ctx.sizes.peer_bound_factor
        targets[f"{name}.wall_to_driver_review_ratio"] = target(
            wall, ">=", 1.0, "driver-review at least as fast" + (
                "" if p["finished"] else f" (peer {p['did_not_finish']}; counted as the bound)"))
        targets[f"{name}.rate_limited_share_minus_driver_review"] = target(
            p["rate_limited_share_minus_driver_review"], ">=", 0.0,
            "driver-review draws no more 429s")
    return {
        "what": "the same sweep by a naive task-per-driver fan-out and by a Ray Data actor "
                "pool, each against a fresh simulator (same seed and limit): wall, 429 "
                "share, calls per decision, as ratios to driver-review",
        "settings": {"drivers": ctx.sizes.sweep_drivers, "rate_limit_per_s": ctx.sizes.rate_limit,
                     "bound_s": bound_s, "ray_data_concurrency": RAY_DATA_CONCURRENCY,
                     "ray_data_batch_size": RAY_DATA_BATCH,
                     "ray_data_num_cpus": RAY_DATA_CPUS,
                     "naive_task_num_cpus": 1,
                     "cluster_cpus": ray.cluster_resources().get("CPU")},
        "driver_review": dr,
        "peers": peers,
        "targets": targets,
    }

"""Scenario 7, stage isolation: the same sweep twice, side by side — all stages as
shipped, then ``compatibility`` made about ten times slower by an extra check that just
waits (:func:`slow`). The other stages' throughput in the slow run, as a ratio to the
fast run, says whether a slow stage holds the others up.

Pools are fixed (one worker per stage, ``IN_FLIGHT`` drivers at a time, no autoscaling)
so that "ten times slower" is well defined: the delay is chosen from the fast run's
compatibility throughput, and the slowdown actually reached is reported. A stage's
throughput is its decisions ÷ the time from its first decision to its last (Parquet).
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import numpy as np

from driver_review.catalog.models import DriverRecord
from driver_review.checks import CheckContext, Outcome
from driver_review.config import PipelineConfig, load_config, parse_config
from driver_review.results import read_results
from driver_review.sim import SimServer, SimSettings
from driver_review.sweep import Progress, SweepOptions, run_sweep
from jobs.bench.common import SEED, SWEEP_LATENCY_MS, Context, ratio, say, target

SLOW_CHECK = "jobs.bench.isolation:slow"
SLOW_STAGE = "compatibility"
IN_FLIGHT = 8
SLOWDOWN = 10.0
SWEEP_TIMEOUT_S = 300.0


async def slow(driver: DriverRecord, ctx: CheckContext) -> Outcome:
    """A check that takes ``options.delay_s`` and passes."""
    await asyncio.sleep(float(ctx.options.get("delay_s", 1.0)))
    return Outcome.ok()


def _config(url: str, delay_s: float | None) -> PipelineConfig:
    data = load_config().model_dump()
    data["catalog"]["url"] = url
    data["results"]["rollover_s"] = 1.0
    for stage in data["stages"]:
        stage["pool"].update(min_workers=1, max_workers=1, max_in_flight=IN_FLIGHT)
        if delay_s is not None and stage["name"] == SLOW_STAGE:
            stage["checks"].append("slow")
    if delay_s is not None:
        data["checks"]["slow"] = {
            "kind": "python",
            "target": SLOW_CHECK,
            "options": {"delay_s": delay_s},
        }
    return parse_config(data, source="bench isolation")


def _stage_rates(data_dir: str) -> dict[str, dict[str, float]]:
    table = read_results(data_dir)
    stages = np.array(table.column("stage").to_pylist())
    times = table.column("reviewed_at").cast("int64").to_numpy() / 1e6
    out = {}
    for stage in load_config().stage_names:
        t = times[stages == stage]
        span = float(t.max() - t.min()) if len(t) > 1 else 0.0
        out[stage] = {
            "decisions": len(t),
            "span_s": span,
            "decisions_per_s": len(t) / span if span > 0 else None,
        }
    return out


def _sweep(ctx: Context, label: str, delay_s: float | None) -> dict[str, Any]:
    settings = SimSettings(
        drivers=ctx.sizes.isolation_drivers, seed=SEED + 2, latency_ms=SWEEP_LATENCY_MS
    )
    data_dir = ctx.scratch(f"isolation-{label}")
    with SimServer(settings) as sim:
        summary = run_sweep(
            _config(sim.url, delay_s),
            SweepOptions(data_dir=data_dir, timeout_s=SWEEP_TIMEOUT_S, autoscale=False),
            Progress(out=io.StringIO()),
        )
        converged, drivers = sim.state.converged()
    rates = _stage_rates(data_dir)
    say(
        f"  isolation {label}: "
        + ", ".join(f"{s} {r['decisions_per_s'] or 0:.1f}/s" for s, r in rates.items())
    )
    return {
        "wall_s": summary["wall_s"],
        "timed_out": summary["timed_out"],
        "converged_drivers": converged,
        "drivers": drivers,
        "stages": rates,
    }


def run(ctx: Context) -> dict[str, Any]:
    fast = _sweep(ctx, "fast", None)
    fast_rate = fast["stages"][SLOW_STAGE]["decisions_per_s"] or IN_FLIGHT / ctx.sizes.slow_delay_s
    # The fast stage holds IN_FLIGHT drivers for IN_FLIGHT / rate each: wait that much more.
    delay_s = max(ctx.sizes.slow_delay_s / 10, (SLOWDOWN - 1) * IN_FLIGHT / fast_rate)
    slow_run = _sweep(ctx, "slow", delay_s)
    ratios = {
        stage: ratio(
            slow_run["stages"][stage]["decisions_per_s"], fast["stages"][stage]["decisions_per_s"]
        )
        for stage in fast["stages"]
    }
    slowdown = ratio(1.0, ratios[SLOW_STAGE])
    targets = {
        f"{stage}.throughput_ratio": target(r, ">=", 0.9, "beside a slow stage, our own target")
        for stage, r in ratios.items()
        if stage != SLOW_STAGE
    }
    targets[f"{SLOW_STAGE}.slowdown_ratio"] = target(
        slowdown, ">=", 5.0, "the slow stage really was slow (aimed at 10x)"
    )
    return {
        "what": "throughput of the other stages beside a stage made ~10x slower, as a ratio "
        "to the same sweep without the slow stage",
        "settings": {
            "drivers": ctx.sizes.isolation_drivers,
            "in_flight_per_stage": IN_FLIGHT,
            "slow_stage": SLOW_STAGE,
            "slow_check_delay_s": delay_s,
            "latency_ms": SWEEP_LATENCY_MS,
            "rate_limit": "none",
        },
        "fast": fast,
        "slow": slow_run,
        "throughput_ratio": ratios,
        "slowdown_ratio": slowdown,
        "targets": targets,
    }

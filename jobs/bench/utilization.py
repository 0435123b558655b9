"""Scenario 1, rate-limit utilization: one sweep of N drivers against a catalog that allows
R requests/s and does not say so (and then once more with the IETF RateLimit headers).

Figures: useful calls/s ÷ R (useful = not 429), the share of 429s, and the active wall
time ÷ the theoretical minimum (necessary calls ÷ R, where necessary = 2xx/304 answers
counted by the simulator). Active is from the first review call (right after the listing)
to the last call; Ray and actor start-up come before it and are reported apart
(``startup_s``, and in ``total_s``, from the call to ``run_sweep`` to its return).
"""

from __future__ import annotations

import io
import time
from typing import Any

from driver_review.sim import SimServer, SimSettings
from driver_review.sim.ports import free_port
from driver_review.sweep import Progress, SweepOptions, run_sweep
from jobs.bench.common import (
    SEED,
    SWEEP_LATENCY_MS,
    CallLog,
    Context,
    call_counts,
    pipeline_config,
    ratio,
    say,
    target,
)

CALLS_PER_DRIVER_GUESS = 8  # listing share + fetch + checks + one PUT per stage
MIN_TIMEOUT_S = 300.0  # start-up alone took 100 s on a machine loaded 40 deep
FIRST_S = 5  # "the first seconds" of a sweep, from its first review call


def sim_settings(ctx: Context, *, headers: bool = False, port: int = 0) -> SimSettings:
    """The catalog every sweep-shaped scenario runs against: same seed, same limit."""
    return SimSettings(
        drivers=ctx.sizes.sweep_drivers,
        seed=SEED,
        rate_limit=ctx.sizes.rate_limit,
        ratelimit_headers=headers,
        latency_ms=SWEEP_LATENCY_MS,
        port=port,
    )


def sweep_timeout_s(ctx: Context) -> float:
    """A generous bound: four times the fastest a sweep could possibly be."""
    s = ctx.sizes
    return max(MIN_TIMEOUT_S, 4 * s.sweep_drivers * CALLS_PER_DRIVER_GUESS / s.rate_limit)


def measure_sweep(
    ctx: Context, *, headers: bool, label: str, port: int = 0, data_dir: str | None = None
) -> dict[str, Any]:
    """One driver-review sweep against a fresh simulator; its figures. A sweep with the
    ``data_dir`` and ``port`` of an earlier one starts from what that one learnt."""
    limit = ctx.sizes.rate_limit
    with SimServer(sim_settings(ctx, headers=headers, port=port)) as sim:
        log = CallLog.install(sim)
        config = pipeline_config(sim.url)
        started = time.monotonic()
        summary = run_sweep(
            config,
            SweepOptions(
                data_dir=data_dir or ctx.scratch(f"sweep-{label}"), timeout_s=sweep_timeout_s(ctx)
            ),
            Progress(out=io.StringIO()),
        )
        total_s = time.monotonic() - started
        stats = sim.state.stats.as_dict()
        converged, drivers = sim.state.converged()
    counts = call_counts(stats)
    active_s = log.active_s()
    useful = counts["calls"] - counts["rate_limited_calls"]
    minimum_s = counts["necessary_calls"] / limit
    decisions = stats["decisions"]
    out = {
        "label": label,
        "drivers": drivers,
        "converged_drivers": converged,
        "timed_out": summary["timed_out"],
        "decisions": decisions,
        **counts,
        "useful_calls": useful,
        "retries_and_429s": counts["calls"] - counts["necessary_calls"],
        "active_s": active_s,
        "startup_s": (log.first_review - started) if log.first_review is not None else None,
        "sweep_wall_s": summary["wall_s"],
        "total_s": total_s,
        "minimum_s": minimum_s,
        "useful_calls_per_s": ratio(useful, active_s),
        "utilization_ratio": ratio(ratio(useful, active_s), limit),
        "rate_limited_share": ratio(counts["rate_limited_calls"], counts["calls"]),
        "wall_to_minimum_ratio": ratio(active_s, minimum_s),
        "calls_per_decision_ratio": ratio(counts["calls"], decisions),
        "max_fetches_per_version": stats["max_fetches_per_version"],
        "governor_rate_per_s": _governor_rate(summary),
        # A cold sweep has no warm start: say so, rather than leave a figure empty.
        **_warm_start(summary),
        # The first seconds, where a cold start pays for finding the limit.
        "first_5s_utilization_ratio": ratio(sum(log.per_second()[:FIRST_S]) / FIRST_S, limit),
        "peak_workers": summary["peak_workers"],
        "useful_calls_per_second_series": log.per_second(),
    }
    say(
        f"  {label}: {drivers} drivers, {counts['calls']} calls in {active_s or 0:.1f}s "
        f"active (+{out['startup_s'] or 0:.1f}s start-up), utilization "
        f"{out['utilization_ratio'] or 0:.3f}, 429s {out['rate_limited_share'] or 0:.2%}"
    )
    return out


def _warm_start(summary: dict[str, Any]) -> dict[str, Any]:
    starts = [g.get("warm_start") for g in summary.get("governor", {}).values()]
    warm = next((w for w in starts if w), None)
    if warm is None:
        return {"started_warm": False}
    return {"started_warm": True, "warm_start_age_s": warm["age_s"]}


def _governor_rate(summary: dict[str, Any]) -> float | None:
    rates = [g.get("rate") for g in summary.get("governor", {}).values()]
    return rates[0] if rates else None


def run(ctx: Context) -> dict[str, Any]:
    # Cold, then warm: the same vendor (port) and data dir, so the second sweep starts from
    # the limit the first learnt. Cold start is measured and reported apart.
    port, learnt_dir = free_port(), ctx.scratch("sweep-learnt")
    runs = {
        "no_headers": measure_sweep(
            ctx, headers=False, label="no-headers", port=port, data_dir=learnt_dir
        ),
        "warm": measure_sweep(ctx, headers=False, label="warm", port=port, data_dir=learnt_dir),
        "ratelimit_headers": measure_sweep(ctx, headers=True, label="ratelimit-headers"),
    }
    targets: dict[str, Any] = {}
    warm, cold = runs["warm"], runs["no_headers"]
    targets["warm.first_5s_utilization_ratio"] = target(
        warm["first_5s_utilization_ratio"], ">=", 0.95, "from the first seconds of a warm sweep"
    )
    targets["warm.started_warm"] = target(
        1.0 if warm["started_warm"] else 0.0,
        ">=",
        1.0,
        "the second sweep used what the first learnt",
    )
    targets["warm.extra_429s"] = target(
        warm["rate_limited_calls"] - cold["rate_limited_calls"],
        "<=",
        0,
        "no more 429s than the cold sweep",
    )
    for name, r in runs.items():
        targets[f"{name}.utilization_ratio"] = target(r["utilization_ratio"], ">=", 0.95)
        targets[f"{name}.rate_limited_share"] = target(r["rate_limited_share"], "<=", 0.01)
        targets[f"{name}.wall_to_minimum_ratio"] = target(r["wall_to_minimum_ratio"], "<=", 1.10)
        targets[f"{name}.converged"] = target(
            ratio(r["converged_drivers"], r["drivers"]),
            ">=",
            1.0,
            "every driver ends in its true final state",
        )
    return {
        "what": "one sweep at an undisclosed rate limit R (and with RateLimit headers): "
        "useful calls/s ÷ R, 429 share, active wall ÷ (necessary calls ÷ R)",
        "settings": {
            "drivers": ctx.sizes.sweep_drivers,
            "rate_limit_per_s": ctx.sizes.rate_limit,
            "latency_ms": SWEEP_LATENCY_MS,
            "seed": SEED,
            "pipeline": "shipped default (autoscaling pools)",
        },
        "runs": runs,
        "targets": targets,
    }

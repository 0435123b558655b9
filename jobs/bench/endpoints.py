"""Scenario "endpoints": the catalog and a check service on two ports of one simulator,
each with its own undisclosed limit, the check service's far lower (as a third-party
scanner's is): the compatibility stage's crash telemetry moves to the check service, so one
sweep keeps two endpoints busy, each governed apart.

Figures per endpoint: calls, the 429 share, and useful calls/s ÷ its limit *while it was
the constraint*: over the spans in which demand kept its governor's schedule full (read
from the governor actor during the sweep, on this node's monotonic clock, the clock the
call log uses too). When an endpoint was not the constraint, running below its limit is
right, not waste, so the whole active span's ratio is reported beside it, not targeted.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from typing import Any

from driver_review.config import PipelineConfig, load_config, parse_config
from driver_review.identifiers import endpoint_key
from driver_review.sim import SimServer, SimSettings
from driver_review.sweep import Progress, SweepOptions, run_sweep
from jobs.bench.common import SEED, SWEEP_LATENCY_MS, Context, ratio, say, target

CHECKS_PREFIX = "checks "  # the simulator's stats prefix for the checks port's routes
CHECK_LIMIT_SHARE = 0.12  # the check service's limit, as a share of the catalog's
MIN_TIMEOUT_S = 300.0


class _Calls:
    """When each request to either port was answered, and with what status."""

    def __init__(self, sim: SimServer) -> None:
        self.log: list[tuple[float, bool, str]] = []  # (monotonic, checks port?, status)
        stats = sim.state.stats
        count = stats.count_request

        def counted(route: str, status: str) -> None:
            self.log.append((time.monotonic(), route.startswith(CHECKS_PREFIX), status))
            count(route, status)

        stats.count_request = counted  # type: ignore[method-assign]

    def figures(
        self, checks: bool, limit: float, busy: list[tuple[float, float]]
    ) -> dict[str, Any]:
        calls = [(t, s) for t, c, s in self.log if c == checks]
        useful = [t for t, s in calls if s != "429"]
        refused = len(calls) - len(useful)
        active_s = (calls[-1][0] - calls[0][0]) if len(calls) > 1 else None
        busy_s = sum(end - start for start, end in busy)
        in_busy = sum(1 for t in useful if any(start <= t < end for start, end in busy))
        return {
            "limit_per_s": limit,
            "calls": len(calls),
            "rate_limited_calls": refused,
            "rate_limited_share": ratio(refused, len(calls)),
            "active_s": active_s,
            "active_utilization_ratio": ratio(ratio(len(useful), active_s), limit),
            "busy_s": busy_s,
            "busy_spans": len(busy),
            "busy_useful_calls": in_busy,
            "utilization_ratio": ratio(ratio(in_busy, busy_s), limit),
        }


def _config(catalog_url: str, checks_url: str) -> PipelineConfig:
    data = load_config().model_dump(exclude_none=True)
    data["catalog"]["url"] = catalog_url
    data["checks"]["telemetry_api"] = {
        "kind": "http",
        "url": f"{checks_url}/v1/checks/crash_telemetry",
        "max_wait_s": 60.0,
    }
    for stage in data["stages"]:
        stage["checks"] = [
            "telemetry_api" if c == "crash_telemetry" else c for c in stage["checks"]
        ]
    return parse_config(data, source="benchmark endpoints scenario")


def _watch_governor(
    instance: str,
    stop: threading.Event,
    busy: dict[str, Any],
    series: dict[str, list[tuple[float, float, float | None, str]]],
) -> None:
    """Poll the governor once a second until ``stop``: its busy spans (the last poll wins:
    the governor keeps its newest spans, merged, so nothing is lost between polls) and,
    per endpoint, (time, rate, limit estimate, state) for the record."""
    import asyncio

    from driver_review.runtime.handles import GovernorClient

    governor = GovernorClient(instance)

    async def poll() -> tuple[dict[str, Any], dict[str, Any]]:
        return await governor.busy_spans(), dict(await governor.stats())

    while not stop.wait(1.0):
        try:
            spans, stats = asyncio.run(poll())
        except Exception:  # not started yet, or stopped: the last answer stands
            continue
        busy.update(spans)
        now = time.monotonic()
        for key, s in stats.items():
            series.setdefault(key, []).append((now, s["rate"], s.get("limit_estimate"), s["state"]))


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.sizes
    check_limit = round(s.rate_limit * CHECK_LIMIT_SHARE, 1)
    settings = SimSettings(
        drivers=s.sweep_drivers,
        seed=SEED,
        rate_limit=s.rate_limit,
        latency_ms=SWEEP_LATENCY_MS,
        checks_port=0,
        checks_rate_limit=check_limit,
    )
    instance = f"bench-endpoints-{uuid.uuid4().hex[:6]}"
    busy: dict[str, list[tuple[float, float]]] = {}
    series: dict[str, list[tuple[float, float, float | None, str]]] = {}
    with SimServer(settings) as sim:
        calls = _Calls(sim)
        config = _config(sim.url, sim.checks_url)
        stop = threading.Event()
        watcher = threading.Thread(
            target=_watch_governor, args=(instance, stop, busy, series), daemon=True
        )
        watcher.start()
        try:
            summary = run_sweep(
                config,
                SweepOptions(
                    data_dir=ctx.scratch("sweep-endpoints"),
                    instance=instance,
                    timeout_s=max(MIN_TIMEOUT_S, 40 * s.sweep_drivers / check_limit),
                ),
                Progress(out=io.StringIO()),
            )
        finally:
            stop.set()
            watcher.join(timeout=10)
        converged, drivers = sim.state.converged()
        keys = {"catalog": endpoint_key(sim.url), "checks": endpoint_key(sim.checks_url)}
    endpoints = {
        "catalog": calls.figures(False, s.rate_limit, busy.get(keys["catalog"], [])),
        "checks": calls.figures(True, check_limit, busy.get(keys["checks"], [])),
    }
    for name, e in endpoints.items():
        gov = summary.get("governor", {}).get(keys[name], {})
        e["governor_rate_per_s"] = gov.get("rate")
        e["governor_429s"] = gov.get("429s")
        start = calls.log[0][0] if calls.log else 0.0
        # Once a second: seconds since the first call, the rate set, the state, and the
        # limit estimate once there is one.
        e["governor_series"] = [
            {"t_s": round(t - start, 1), "rate_per_s": rate, "state": state}
            | ({"limit_estimate_per_s": limit} if limit is not None else {})
            for t, rate, limit, state in series.get(keys[name], [])
        ]
        say(
            f"  {name}: {e['calls']} calls, 429s {e['rate_limited_share'] or 0:.2%}, "
            f"busy {e['busy_s']:.1f}s at {e['utilization_ratio'] or 0:.3f} of {e['limit_per_s']}"
            f"/s (whole span {e['active_utilization_ratio'] or 0:.3f})"
        )
    targets: dict[str, Any] = {}
    for name, e in endpoints.items():
        targets[f"{name}.utilization_ratio"] = target(
            e["utilization_ratio"], ">=", 0.9, "while demand kept its schedule full"
        )
        targets[f"{name}.rate_limited_share"] = target(e["rate_limited_share"], "<=", 0.01)
    targets["converged"] = target(
        ratio(converged, drivers), ">=", 1.0, "every driver ends in its true final state"
    )
    return {
        "what": "one sweep, two endpoints with their own undisclosed limits (the catalog; a "
        "check service at a far lower limit): per endpoint useful calls/s ÷ its limit "
        "while it was the constraint, and its 429 share",
        "settings": {
            "drivers": s.sweep_drivers,
            "catalog_limit_per_s": s.rate_limit,
            "checks_limit_per_s": check_limit,
            "checks_burst": settings.checks_burst,
            "latency_ms": SWEEP_LATENCY_MS,
            "seed": SEED,
            "moved_check": "crash_telemetry -> checks port",
        },
        "drivers": drivers,
        "converged_drivers": converged,
        "timed_out": summary["timed_out"],
        "sweep_wall_s": summary["wall_s"],
        "endpoints": endpoints,
        "targets": targets,
    }

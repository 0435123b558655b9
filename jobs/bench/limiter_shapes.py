"""Scenario "limiters": cold discovery on real limiter shapes. One sweep of 60 s or more
per shape, each started cold: nginx ``limit_req`` without burst (leaky bucket) and with
``burst=N nodelay``, an HAProxy stick table (``http_req_rate(1s)``) — the last three real
servers on loopback in front of an unlimited simulator — and the simulator's own fixed and
sliding windows.

Figures per shape: useful calls/s ÷ the limit (useful = not 429) over the active time (the
first review call to the last call), and the 429 share, counted where the limit is applied
(the proxy's own log, or the simulator's). Targets: >= 0.95 and <= 1%. Beside each, once
its sweep is done, what a paced client told the limit gets from the same limiter at <= 1%
429s (:mod:`jobs.bench.paced`): what the shape allows a client on this machine.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from driver_review.sim import SimServer, SimSettings
from driver_review.sweep import Progress, SweepOptions, run_sweep
from jobs.bench import paced
from jobs.bench.common import (
    SEED,
    SWEEP_LATENCY_MS,
    CallLog,
    Context,
    pipeline_config,
    ratio,
    say,
    target,
)
from jobs.bench.limiters import HaproxyLimiter, NginxLimiter, missing_binary

RATE_PER_S = 60.0  # where nginx limit_req was first measured against the governor
NGINX_BURST = 12  # 0.2 s at the rate, as the simulator's default bucket
CALLS_PER_DRIVER = 6.0  # measured: 3,054 calls for 495 drivers (one sweep per shape)
SWEEP_S = {False: 66.0, True: 4.0}  # full / quick: how long a sweep should last at the limit
PACED_STEP_S = {False: 6.0, True: 1.0}  # full / quick: each step of the paced client's ladder
# Beside each sweep's figure, the same from this long after its first review call on: what
# it held once the cold discovery was over (the target counts the whole sweep). Full /
# quick: a quick sweep lasts 4 s at the limit.
COLD_S = {False: 20.0, True: 1.0}


def _drivers(quick: bool) -> int:
    return int(SWEEP_S[quick] * RATE_PER_S / CALLS_PER_DRIVER)


def _figures(
    label: str,
    entries: list[tuple[float, str]],
    settings: dict[str, Any],
    sweep: dict[str, Any],
    converged: tuple[int, int],
    cold_s: float,
) -> dict[str, Any]:
    """``entries``: (time, status) of every request the limiter answered, listing first;
    ``cold_s``: how long after the first review call the figure after cold start begins."""
    entries = sorted(entries)
    useful = [t for t, s in entries if s != "429"]
    refused = len(entries) - len(useful)
    active_s = useful[-1] - useful[1] if len(useful) > 2 else None
    out = {
        "label": label,
        "settings": settings,
        "calls": len(entries),
        "rate_limited_calls": refused,
        "active_s": active_s,
        "useful_calls_per_s": ratio(len(useful) - 1, active_s),
        "utilization_ratio": ratio(ratio(len(useful) - 1, active_s), RATE_PER_S),
        "rate_limited_share": ratio(refused, len(entries)),
        "rate_limited_first_15s": sum(
            1 for t, s in entries if s == "429" and useful and t - useful[0] < 15
        ),
        "converged_drivers": converged[0],
        "drivers": converged[1],
        "timed_out": sweep["timed_out"],
        "sweep_wall_s": sweep["wall_s"],
        "cold_s": cold_s,
        "utilization_after_cold_ratio": _utilization_after(useful[1:], cold_s),
        # Where a sweep loses against its limit: slow start, a pause, a step back.
        "useful_calls_per_second_series": _per_second(useful[1:]),
        "governor": _governor(sweep.get("governor") or {}),
    }
    say(
        f"  {label}: {len(entries)} calls in {active_s or 0:.1f}s, utilization "
        f"{out['utilization_ratio'] or 0:.3f}, 429s {out['rate_limited_share'] or 0:.2%}"
    )
    return out


#: What the governor did on a shape, per endpoint key, from the sweep's end: how often it
#: stepped back, paused, found a window still shut, the limit it ended on, and its last
#: decisions with what each read.
GOVERNOR_FIELDS = (
    "state",
    "rate",
    "limit_estimate",
    "window_s",
    "ok",
    "429s",
    "decreases",
    "echo_pauses",
    "shut_pauses",
    "strict_spacing",
    "decided",
    "decisions",
)


def _governor(stats: dict[str, Any]) -> dict[str, Any]:
    """Only the fields with a value: no window found, no estimate yet, is left out (every
    figure the benchmark records has a value)."""
    return {
        key: {f: _rounded(gov[f]) for f in GOVERNOR_FIELDS if gov.get(f) is not None}
        for key, gov in sorted(stats.items())
        if isinstance(gov, dict)
    }


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 2) if isinstance(value, float) else value


def _utilization_after(times: list[float], cold_s: float) -> float | None:
    """Useful calls/s ÷ the limit from ``cold_s`` after the first of ``times`` (sorted)
    to the last, counted as the whole sweep is (intervals between calls)."""
    if not times:
        return None
    after = [t for t in times if t - times[0] >= cold_s]
    if len(after) < 2:
        return None
    return ratio(ratio(len(after) - 1, after[-1] - after[0]), RATE_PER_S)


def _per_second(times: list[float]) -> list[int]:
    """How many of ``times`` (sorted) fall in each second from the first."""
    if not times:
        return []
    counts = [0] * (int(times[-1] - times[0]) + 1)
    for t in times:
        counts[int(t - times[0])] += 1
    return counts


def _sweep(ctx: Context, url: str, label: str) -> dict[str, Any]:
    config = pipeline_config(url)
    return run_sweep(
        config,
        SweepOptions(
            data_dir=ctx.scratch(f"limiters-{label}"), timeout_s=max(300.0, 6 * SWEEP_S[ctx.quick])
        ),
        Progress(out=io.StringIO()),
    )


def _through_proxy(ctx: Context, label: str, make: Callable[[str], Any]) -> dict[str, Any]:
    settings = SimSettings(drivers=_drivers(ctx.quick), seed=SEED, latency_ms=SWEEP_LATENCY_MS)
    with SimServer(settings) as sim, make(sim.url) as proxy:
        sweep = _sweep(ctx, proxy.url, label)
        time.sleep(0.2)  # the last log lines
        entries = [(t, str(s)) for t, s in proxy.log()]
        converged = sim.state.converged()
        out = _figures(label, entries, proxy.settings(), sweep, converged, COLD_S[ctx.quick])
        out["paced_client"] = _paced(ctx, proxy.url, label)
        return out


def _in_sim(ctx: Context, label: str, limiter: str) -> dict[str, Any]:
    settings = SimSettings(
        drivers=_drivers(ctx.quick),
        seed=SEED,
        rate_limit=RATE_PER_S,
        limiter=limiter,
        latency_ms=SWEEP_LATENCY_MS,
    )
    with SimServer(settings) as sim:
        log = CallLog.install(sim)
        sweep = _sweep(ctx, sim.url, label)
        entries = list(zip(log.times, log.statuses, strict=True))
        converged = sim.state.converged()
        out = _figures(
            label,
            entries,
            {"kind": "sim", "limiter": limiter, "rate_per_s": RATE_PER_S, "retry_after": True},
            sweep,
            converged,
            COLD_S[ctx.quick],
        )
        out["paced_client"] = _paced(ctx, sim.url, label)
    return out


def _paced(ctx: Context, url: str, label: str) -> dict[str, Any]:
    """The paced client's ladder on the same limiter, once the sweep is done."""
    out = paced.measure(url, RATE_PER_S, PACED_STEP_S[ctx.quick])
    if "error" in out:
        say(f"  {label}: {out['error']}")
    else:
        u = out["utilization_ratio"]
        say(f"  {label}: a paced client gets {'none' if u is None else f'{u:.3f}'} at <= 1% 429s")
    return out


def _note(r: dict[str, Any]) -> str:
    """Beside a shape's utilization: what it held once cold discovery was over, and what
    a client that knows the limit gets here."""
    after = r.get("utilization_after_cold_ratio")
    held = f"after the first {r['cold_s']:g} s {after:.3g}; " if after is not None else ""
    p = r["paced_client"]
    if "error" in p:
        return f"{held}the paced client failed"
    u = p["utilization_ratio"]
    if u is None:
        return f"{held}a paced client got no share down to {paced.FRACTIONS[-1]} with <= 1% 429s"
    return f"{held}a paced client that knows the limit: {u:.3g} at <= 1% 429s"


def run(ctx: Context) -> dict[str, Any]:
    shapes: dict[str, Callable[[], dict[str, Any]]] = {
        "nginx_leaky": lambda: _through_proxy(
            ctx, "nginx-leaky", lambda url: NginxLimiter(url, rate=RATE_PER_S)
        ),
        "nginx_burst_nodelay": lambda: _through_proxy(
            ctx,
            "nginx-burst-nodelay",
            lambda url: NginxLimiter(url, rate=RATE_PER_S, burst=NGINX_BURST, nodelay=True),
        ),
        "haproxy_stick_table": lambda: _through_proxy(
            ctx, "haproxy", lambda url: HaproxyLimiter(url, rate=RATE_PER_S)
        ),
        "sim_fixed_window": lambda: _in_sim(ctx, "sim-fixed", "fixed"),
        "sim_sliding_window": lambda: _in_sim(ctx, "sim-sliding", "sliding"),
    }
    needs = {
        "nginx_leaky": "nginx",
        "nginx_burst_nodelay": "nginx",
        "haproxy_stick_table": "haproxy",
    }
    runs: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    for name, measure in shapes.items():
        why = missing_binary(needs[name]) if name in needs else None
        if why:
            runs[name] = {"skipped": why}
            say(f"  {name}: skipped, {why}")
            continue
        try:
            r = runs[name] = measure()
        except Exception as exc:  # one shape failing leaves the others' figures
            runs[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            say(f"  {name} failed: {runs[name]['error']}")
            targets[f"{name}.utilization_ratio"] = target(None, ">=", 0.95)
            continue
        targets[f"{name}.utilization_ratio"] = target(r["utilization_ratio"], ">=", 0.95, _note(r))
        targets[f"{name}.rate_limited_share"] = target(r["rate_limited_share"], "<=", 0.01)
        targets[f"{name}.converged"] = target(
            ratio(r["converged_drivers"], r["drivers"]),
            ">=",
            1.0,
            "every driver at its true final state",
        )
    return {
        "what": "cold sweeps through real limiter shapes (nginx limit_req, HAProxy stick "
        "table, sim fixed/sliding windows): useful calls/s ÷ limit, 429 share",
        "settings": {
            "rate_limit_per_s": RATE_PER_S,
            "drivers": _drivers(ctx.quick),
            "target_sweep_s": SWEEP_S[ctx.quick],
            "latency_ms": SWEEP_LATENCY_MS,
            "seed": SEED,
            "nginx_burst": NGINX_BURST,
            "cold": True,
        },
        "runs": runs,
        "targets": targets,
    }

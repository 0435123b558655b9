"""Scenario ``ceiling``: how fast the pipeline itself goes when the catalog does not limit
it, and what it costs in CPU.

Against an unlimited simulator (no rate limit; the same latency as the other sweeps):

- a driver-review sweep (the shipped pipeline, autoscaling pools);
- a single-process asyncio reviewer — one Ray task, ``num_cpus=0`` — running the same
  checks (:mod:`driver_review.checks`) through the same client
  (:class:`~driver_review.catalog.http.HttpCatalog`), ``CONCURRENCY`` drivers in flight,
  following each driver with the PUT's answer (:mod:`.peer_review`).

Figures: decisions/s (from the first review call to the last call) and decisions per
CPU-second of the local Ray node (:mod:`.cpu`: the raylet, the GCS and every process
under it), their ratios, and the CPU of the benchmark's own process (the simulator and
the sweep's driver loop live there; not counted for either). Full mode adds the same
sweep on a two-node loopback cluster (:mod:`.two_node`) against one node started the same
way, each twice in the order 1, 2, 2, 1: the scale-out ratio, of their decisions/s over
both runs. Both nodes share this machine's cores, so that ratio says what a second node
costs or gains here, not on two machines.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from typing import Any

from driver_review.sim import SimServer, SimSettings
from driver_review.sweep import Progress, SweepOptions, run_sweep
from jobs.bench import cpu, two_node
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
from jobs.bench.peer_runners import run_fanout
from jobs.bench.peer_scoring import run_error
from jobs.bench.peers import in_review_ids

QUICK_DRIVERS = 150
FULL_DRIVERS = 2000
CONCURRENCY = 64  # the asyncio reviewer's drivers in flight
TIMEOUT_S = 600.0
#: A threshold of our own: the distributed pipeline may cost up to twice the CPU
#: per decision of one asyncio process (actor round trips, the object store, leases).
PER_CPU_TARGET = 0.5


def settings(drivers: int) -> SimSettings:
    return SimSettings(drivers=drivers, seed=SEED, rate_limit=None, latency_ms=SWEEP_LATENCY_MS)


def _measure(
    drivers: int, label: str, run: Callable[[str], dict[str, Any]], *, measure_cpu: bool = True
) -> dict[str, Any]:
    roots = cpu.local_ray_pids() if measure_cpu else None
    with SimServer(settings(drivers)) as sim:
        log = CallLog.install(sim)
        meter = cpu.TreeCpu(roots) if roots else contextlib.nullcontext()
        own_before = time.process_time()
        with meter:
            try:
                detail = run(sim.url)
            except Exception as exc:  # an error of this run, reported with the figures
                detail = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
        own_s = time.process_time() - own_before
        stats = sim.state.stats.as_dict()
        converged, total = sim.state.converged()
    active_s = log.active_s()
    ray_cpu_s = meter.spent_s if isinstance(meter, cpu.TreeCpu) else None
    decisions = stats["decisions"]
    out: dict[str, Any] = {
        "drivers": total,
        "converged_drivers": converged,
        "decisions": decisions,
        **call_counts(stats),
        "active_s": active_s,
        "decisions_per_s": ratio(decisions, active_s),
        "bench_process_cpu_s": own_s,
        "detail": detail,
    }
    if measure_cpu:
        out["ray_node_cpu_s"] = ray_cpu_s
        out["decisions_per_cpu_s"] = ratio(decisions, ray_cpu_s)
    error = run_error(detail, converged, total)
    if error is not None:
        out["error"] = error
    per_cpu = f", {out['decisions_per_cpu_s'] or 0:.0f}/CPU-s" if measure_cpu else ""
    say(
        f"  {label}: {error or 'reached the truth'}; {decisions} decisions in "
        f"{active_s or 0:.1f}s, {out['decisions_per_s'] or 0:.0f}/s{per_cpu}"
    )
    return out


def _sweep(ctx: Context, label: str) -> Callable[[str], dict[str, Any]]:
    def run(url: str) -> dict[str, Any]:
        summary = run_sweep(
            pipeline_config(url),
            SweepOptions(data_dir=ctx.scratch(f"ceiling-{label}"), timeout_s=TIMEOUT_S),
            Progress(out=io.StringIO()),
        )
        detail = {"peak_workers": summary["peak_workers"]}
        if not summary["ok"]:
            detail["unfinished"] = int(summary["unresolved"] or 1)
            detail["reason"] = summary["reason"]
        return detail

    return run


def _asyncio_reviewer(url: str) -> dict[str, Any]:
    ids = in_review_ids(url)
    return run_fanout(url, ids, time.time() + TIMEOUT_S, {"concurrency": CONCURRENCY})


def run(ctx: Context) -> dict[str, Any]:
    drivers = QUICK_DRIVERS if ctx.quick else FULL_DRIVERS
    runs = {
        "driver_review": _measure(drivers, "driver-review", _sweep(ctx, "dr")),
        "asyncio": _measure(drivers, "asyncio reviewer", _asyncio_reviewer),
    }
    errors = [f"{name}: {r['error']}" for name, r in runs.items() if "error" in r]
    dr, aio = runs["driver_review"], runs["asyncio"]
    out: dict[str, Any] = {
        "what": "an unlimited catalog: decisions/s and decisions per CPU-second of the Ray "
        "node, driver-review's sweep against one asyncio process with the same "
        "checks and client; full mode adds a two-node loopback cluster",
        "settings": {
            "drivers": drivers,
            "latency_ms": SWEEP_LATENCY_MS,
            "rate_limit": "unlimited",
            "asyncio_concurrency": CONCURRENCY,
            "asyncio_task_num_cpus": 0,
            "seed": SEED,
            "pipeline": "shipped default (autoscaling pools)",
            "node_cpu": f"/proc of the raylet's and GCS's trees, read every "
            f"{cpu.READ_EVERY_S} s while a run lasts",
        },
        "runs": runs,
        "targets": {},
        "errors": errors,
    }
    if not errors:
        out["decisions_per_s_ratio"] = ratio(dr["decisions_per_s"], aio["decisions_per_s"])
        out["decisions_per_cpu_s_ratio"] = ratio(
            dr["decisions_per_cpu_s"], aio["decisions_per_cpu_s"]
        )
        out["targets"]["decisions_per_cpu_s_ratio"] = target(
            out["decisions_per_cpu_s_ratio"],
            ">=",
            PER_CPU_TARGET,
            "driver-review's decisions per CPU-second ÷ one asyncio process's (threshold "
            "of our own: actor round trips and leases cost CPU)",
        )
    if ctx.quick:
        out["two_node"] = {
            "skipped": "quick mode: two extra Ray clusters cost about a "
            "minute; run the full benchmark"
        }
    else:
        out["two_node"] = _two_node(drivers, errors)
        scale = out["two_node"].get("scale_out_ratio")
        if scale is not None:
            out["targets"]["scale_out_ratio"] = target(
                scale, ">=", 1.0, "two nodes on one machine at least as fast as one"
            )
    return out


#: The one-node and two-node sweeps, in this order: each twice, the second pair in reverse
#: (ABBA), so that a drift in this machine's load weighs on both alike.
TWO_NODE_ORDER = (1, 2, 2, 1)


def _two_node(drivers: int, errors: list[str]) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for nodes in TWO_NODE_ORDER:
        label = f"{nodes}-node cluster, run {len(runs[nodes]) + 1}"
        run = _measure(
            drivers,
            label,
            lambda url, n=nodes: two_node.run_in_subprocess(url, n),
            measure_cpu=False,
        )
        runs[nodes].append(run)
        if "error" in run:
            errors.append(f"{label}: {run['error']}")
    result: dict[str, Any] = {"order": list(TWO_NODE_ORDER)}
    for nodes, measured in runs.items():
        result[f"nodes_{nodes}"] = {
            # decisions over the runs' active time together: each run weighs by its length
            "decisions_per_s": ratio(
                sum(r["decisions"] for r in measured), sum(r["active_s"] or 0 for r in measured)
            ),
            "runs": measured,
        }
    if not any("error" in r for measured in runs.values() for r in measured):
        result["scale_out_ratio"] = ratio(
            result["nodes_2"]["decisions_per_s"], result["nodes_1"]["decisions_per_s"]
        )
    return result

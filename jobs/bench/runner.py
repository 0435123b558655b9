"""Run the selected scenarios one after the other on this machine, then write
``bench.json`` and ``bench.png`` into the output directory.

Scenarios run side by side in one process, against simulators on loopback, so that
every comparison is a ratio of figures measured minutes apart under the same load. A
scenario that fails is recorded with its error and the others still run. The machine
(cores, Python, Ray, load average at start and end) is recorded with the results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from driver_review.errors import ConfigError
from jobs.bench import chart
from jobs.bench.common import FULL, QUICK, UNITS, Context, load_average, rounded, say

SCENARIOS = (
    "utilization",
    "endpoints",
    "limiters",
    "peers",
    "ceiling",
    "cache",
    "latency",
    "ingress",
    "ledger",
    "isolation",
)
LIVE = ("cache", "latency", "ingress")  # share one running service
NEEDS_RAY = frozenset(SCENARIOS) - {"ledger"}
#: Logical CPUs of the local Ray the benchmark starts (as the test suite: the actors ask
#: for none, so 4 on 2 cores only lets a few CPU-reserving tasks run side by side).
LOCAL_CPUS = 4
START_ATTEMPTS = 3


def parse_only(only: str | Sequence[str] | None) -> list[str]:
    """The scenarios to run, in their fixed order; a bad name is a one-line error."""
    if not only:
        return list(SCENARIOS)
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only)]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not any(names):
        raise ConfigError(
            f"--only: unknown scenario {unknown[0] if unknown else '(none)'!r} "
            f"(scenarios: {', '.join(SCENARIOS)})"
        )
    return [n for n in SCENARIOS if n in names]


def _connect() -> str:
    import ray

    from driver_review.runtime.names import NAMESPACE, connect

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return "already connected"
    if os.environ.get("RAY_ADDRESS"):
        connect()
        return f"joined RAY_ADDRESS={os.environ['RAY_ADDRESS']}"
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            # address="local": a Ray of our own, never the cluster last `ray start`ed here.
            ray.init(
                address="local",
                num_cpus=LOCAL_CPUS,
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
            )
            break
        except Exception as exc:  # Ray gives its raylet 30 s: not always enough when loaded
            ray.shutdown()
            if attempt == START_ATTEMPTS:
                raise
            say(f"starting Ray failed ({exc}); once more")
    return f"local, {LOCAL_CPUS} logical CPUs"


def _disconnect(started_ray: bool) -> None:
    if not started_ray:
        return
    import ray

    ray.shutdown()  # Serve and every actor started here go with the local cluster


def _machine() -> dict[str, Any]:
    import ray

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "platform": platform.platform(),
        "load_average_start": load_average(),
    }


def _scenario_runners(ctx: Context, selected: list[str]) -> list[tuple[str, Callable]]:
    from jobs.bench import (
        ceiling,
        endpoints,
        isolation,
        ledger_scale,
        limiter_shapes,
        live,
        peers,
        utilization,
    )

    live_phases = {n for n in selected if n in LIVE}
    runners: list[tuple[str, Callable]] = []
    for name in selected:
        if name == "utilization":
            runners.append((name, lambda: utilization.run(ctx)))
        elif name == "endpoints":
            runners.append((name, lambda: endpoints.run(ctx)))
        elif name == "peers":
            runners.append((name, lambda: peers.run(ctx)))
        elif name == "ceiling":
            runners.append((name, lambda: ceiling.run(ctx)))
        elif name in LIVE:
            if name == min(live_phases, key=SCENARIOS.index):
                runners.append(("live", lambda: live.run(ctx, live_phases)))
        elif name == "ledger":
            runners.append((name, lambda: ledger_scale.run(ctx)))
        elif name == "isolation":
            runners.append((name, lambda: isolation.run(ctx)))
        elif name == "limiters":
            runners.append((name, lambda: limiter_shapes.run(ctx)))
    return runners


def _summary(scenarios: dict[str, Any]) -> dict[str, Any]:
    met, missed, errors = [], [], []
    for name, result in scenarios.items():
        if "error" in result:
            errors.append(f"{name}: {result['error']}")
        # Parts of a scenario that failed while the rest reported (e.g. a peer that never
        # reached the truth): errors too, never met or missed targets.
        errors.extend(f"{name}: {e}" for e in result.get("errors", []))
        for key, t in result.get("targets", {}).items():
            (met if t["met"] else missed).append(f"{name}.{key} = {t['value']} ({t['target']})")
    return {
        "targets_met": len(met),
        "targets_missed": len(missed),
        "missed": missed,
        "errors": errors,
    }


def run_bench(*, quick: bool, out_dir: str, only: str | Sequence[str] | None = None) -> int:
    """Run the benchmark; returns 0 when every selected scenario produced its figures."""
    selected = parse_only(only)
    sizes = QUICK if quick else FULL
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="driver-review-bench-"))
    ctx = Context(sizes, work, quick)
    started, started_at = time.monotonic(), datetime.now(UTC)
    doc: dict[str, Any] = {
        "bench": {
            "quick": quick,
            "only": selected,
            "started_at": started_at.isoformat(),
            "argv": sys.argv[1:],
        },
        "machine": _machine(),
        "settings": dataclasses.asdict(sizes),
        "units": UNITS,
        "scenarios": {},
    }
    started_ray = False
    no_ray: str | None = None
    try:
        if NEEDS_RAY.intersection(selected):
            import ray

            already = ray.is_initialized()
            try:
                doc["machine"]["ray_cluster"] = _connect()
                started_ray = not already and not os.environ.get("RAY_ADDRESS")
                doc["machine"]["ray_cluster_cpus"] = ray.cluster_resources().get("CPU")
            except Exception as exc:  # the scenarios without Ray still run
                no_ray = f"Ray did not start: {type(exc).__name__}: {exc}"[:500]
                say(no_ray)
        for name, runner in _scenario_runners(ctx, selected):
            if no_ray is not None and name != "ledger":
                for part in LIVE if name == "live" else (name,):
                    if part in selected:
                        doc["scenarios"][part] = {"error": no_ray}
                continue
            say(f"{name} ...")
            t = time.monotonic()
            try:
                result = runner()
            except Exception as exc:
                say(f"{name} failed: {type(exc).__name__}: {exc}")
                result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            elapsed = time.monotonic() - t
            parts = result if name == "live" and "error" not in result else {name: result}
            if name == "live" and "error" in result:
                parts = {n: result for n in selected if n in LIVE}
            for part, figures in parts.items():
                figures["elapsed_s"] = elapsed
                ctx.results[part] = figures
                doc["scenarios"][part] = figures
            say(f"{name} done in {elapsed:.0f}s")
            # What is known so far survives a run stopped midway (the full run is long).
            (out / "bench.partial.json").write_text(json.dumps(rounded(doc), indent=1))
    finally:
        _disconnect(started_ray)
        shutil.rmtree(work, ignore_errors=True)
    doc["scenarios"] = {n: doc["scenarios"][n] for n in SCENARIOS if n in doc["scenarios"]}
    doc["machine"]["load_average_end"] = load_average()
    doc["bench"]["elapsed_s"] = time.monotonic() - started
    doc["summary"] = _summary(doc["scenarios"])
    doc = rounded(doc)
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "bench.partial.json").unlink(missing_ok=True)
    note = chart.draw(doc, out / "bench.png")
    _print_summary(doc, out, note)
    return 1 if doc["summary"]["errors"] else 0


def _print_summary(doc: dict[str, Any], out: Path, chart_note: str | None) -> None:
    s = doc["summary"]
    print(
        f"benchmark ({'quick' if doc['bench']['quick'] else 'full'}) in "
        f"{doc['bench']['elapsed_s']:.0f}s: {s['targets_met']} targets met, "
        f"{s['targets_missed']} missed"
    )
    for line in s["missed"]:
        print(f"  missed: {line}")
    for line in s["errors"]:
        print(f"  error:  {line}")
    print(f"  results: {out / 'bench.json'}")
    print(f"  chart:   {chart_note or out / 'bench.png'}")

"""What every scenario of the benchmark shares: sizes, the run context, the simulator's
call log, targets, and the pipeline config the scenarios run with.

Units are in the names of the figures (``_s`` seconds, ``_per_s`` per second, ``_bytes``,
``_share`` a fraction of 1, ``_ratio`` a quotient of two like figures), as everywhere in
this code base; ``UNITS`` spells them out for the JSON document.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver_review.config import PipelineConfig, load_config
from driver_review.sim import SimServer

UNITS = {
    "_s": "seconds",
    "_per_s": "per second",
    "_bytes": "bytes",
    "_share": "fraction of 1 (0.01 = 1%)",
    "_ratio": "quotient of two like figures (dimensionless)",
    "calls": "HTTP requests to the simulated catalog",
}

SEED = 7
LISTING_ROUTE = "GET /v1/drivers"
#: Mean latency of every simulated catalog answer in the sweeps (a real vendor is not 0 ms away).
SWEEP_LATENCY_MS = 10.0


@dataclass(frozen=True)
class Sizes:
    """How big each scenario is. ``QUICK`` checks that every scenario runs and reports (a
    few minutes on 2 cores); its figures are too small to compare: use the full run."""

    sweep_drivers: int  # utilization, peers
    rate_limit: float  # requests/s the simulated catalog allows in those sweeps
    live_drivers: int  # the live service of cache / latency / ingress
    ping_rate: float  # generated changes (and so pings) per second
    ping_duration_s: float
    ingress_pings: int  # per endpoint and round
    ingress_concurrency: int
    ingress_rounds: int
    ledger_sizes: tuple[int, ...]
    isolation_drivers: int
    slow_delay_s: float  # the slow check of the isolation scenario
    peer_bound_factor: float = 3.0  # a peer gives up after this many driver-review walls
    ingress_duration_s: float = 10.0  # per endpoint and round, with wrk (pings: without)


QUICK = Sizes(
    sweep_drivers=80,
    rate_limit=100.0,
    live_drivers=150,
    ping_rate=5.0,
    ping_duration_s=5.0,
    ingress_pings=400,
    ingress_concurrency=16,
    ingress_rounds=1,
    ledger_sizes=(50_000, 200_000),
    isolation_drivers=40,
    slow_delay_s=0.5,
    ingress_duration_s=3.0,
)
FULL = Sizes(
    sweep_drivers=1000,
    rate_limit=100.0,
    live_drivers=2000,
    ping_rate=10.0,
    ping_duration_s=45.0,
    ingress_pings=3000,
    ingress_concurrency=64,
    ingress_rounds=2,
    ledger_sizes=(1_000_000, 5_000_000),
    isolation_drivers=400,
    slow_delay_s=0.5,
    ingress_duration_s=15.0,
)


@dataclass
class Context:
    """One benchmark run: its sizes, a scratch directory, and results so far (a later
    scenario may reuse an earlier one's run instead of repeating it)."""

    sizes: Sizes
    work_dir: Path
    quick: bool
    results: dict[str, Any] = field(default_factory=dict)

    def scratch(self, name: str) -> str:
        path = self.work_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)


def say(text: str) -> None:
    """Progress, on stderr: stdout is left to the final summary."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


def pipeline_config(url: str, **sections: dict) -> PipelineConfig:
    """The shipped pipeline against ``url``, with some sections overridden."""
    return load_config().with_overrides(catalog={"url": url}, **sections)


class CallLog:
    """When each ``/v1`` request to one simulator was answered, and with what status.

    Hooked onto the simulator's own counter (it runs in this process), so the first and
    last catalog calls of a run are known to the millisecond without polling.
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self.statuses: list[str] = []
        self.first_review: float | None = None  # first call that is not the listing

    @classmethod
    def install(cls, sim: SimServer) -> CallLog:
        log = cls()
        stats = sim.state.stats
        count = stats.count_request

        def counted(route: str, status: str) -> None:
            now = time.monotonic()
            log.times.append(now)
            log.statuses.append(status)
            if log.first_review is None and route != LISTING_ROUTE:
                log.first_review = now
            count(route, status)

        stats.count_request = counted  # type: ignore[method-assign]
        return log

    def active_s(self) -> float | None:
        """From the first review call (after the listing, which every approach makes
        first and the same way) to the last call."""
        if len(self.times) < 2 or self.first_review is None:
            return None
        return self.times[-1] - self.first_review

    def per_second(self, *, useful: bool = True) -> list[int]:
        """Calls answered in each second since the first review call (useful: not 429)."""
        if self.first_review is None:
            return []
        start = self.first_review
        counts: Counter[int] = Counter()
        for t, status in zip(self.times, self.statuses, strict=True):
            if t >= start and (not useful or status != "429"):
                counts[int(t - start)] += 1
        return [counts[i] for i in range(max(counts, default=-1) + 1)]


def call_counts(stats: dict[str, Any]) -> dict[str, int]:
    """Totals of ``/_sim/stats`` requests: all, necessary (2xx/304), 429, other."""
    total = ok = limited = 0
    for by_status in stats["requests"].values():
        for status, n in by_status.items():
            total += n
            if status == "429":
                limited += n
            elif status.isdigit() and (200 <= int(status) < 300 or status == "304"):
                ok += n
    return {
        "calls": total,
        "necessary_calls": ok,
        "rate_limited_calls": limited,
        "other_calls": total - ok - limited,
    }


def target(value: float | None, op: str, threshold: float, note: str = "") -> dict[str, Any]:
    """``{"value", "target", "met"}``; a missing value is a missed target."""
    ok = (
        value is not None
        and not math.isnan(value)
        and {
            ">=": value >= threshold,
            "<=": value <= threshold,  # type: ignore[operator]
        }[op]
    )
    out: dict[str, Any] = {"value": value, "target": f"{op} {threshold:g}", "met": bool(ok)}
    if note:
        out["note"] = note
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def rounded(value: Any) -> Any:
    """Floats to 4 significant digits (one decimal from 1000 up) for a readable JSON
    document, recursively; NaN and infinities become null."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, 1) if abs(value) >= 1000 else float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None

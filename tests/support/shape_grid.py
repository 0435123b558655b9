"""Cold discovery on every limiter shape, over many seeds: the instrument for a governor
change.

One run of :func:`~tests.support.rate_sim.simulate` per shape is deterministic, and where
a limiter counts in windows its figure turns on the phase of the first 429 against the
window's edge: a change that moved decisions by milliseconds moved one run's figure by
0.06 (the two-window limit at 60/s, 0.903 to 0.841) while its mean over seeds stayed at
0.858. Over a dozen seeds of a little arrival jitter, with workers in a few processes that
report their successes with their next lease (as Ray's do), the mean over every shape
moved by at most 0.0014 between three sets of four seeds: a change worth keeping shows
there first. It is a filter, not a verdict: one that gained 0.004 here lost about 0.015
through the real simulator's fixed window; sweeps through real limiters decide.

Jitter of a millisecond barely moves that phase, and a real sweep starts anywhere in the
second: each seed also starts at its own phase, spread evenly over the second. Started on
the whole second, six seeds of the fixed window of 60/s read 0.919 each; spread over the
second, 0.910 on average and 0.870 at the lowest (the sliding window at 60/s: 0.858 each,
then 0.896 on average).

``python -m tests.support.shape_grid [--jitter-ms 1] [--processes 3] [--seeds 12]``
prints, per shape and limit, the mean and lowest utilization over the seeds and the mean
429 share, and how many runs met the target (≥ 0.95 of the limit, ≤ 1% 429s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tests.support.rate_sim import ShapeServer, simulate

#: (shape, whether its 429 says Retry-After): the simulator's do; nginx and HAProxy don't.
SHAPES: tuple[tuple[str, bool], ...] = (
    ("token", True),
    ("leaky", False),
    ("leaky-burst", False),
    ("leaky-delay", False),
    ("fixed", True),
    ("sliding", True),
    ("sliding-log", True),
    ("haproxy", False),
)
RATES: tuple[float, ...] = (10.0, 60.0, 150.0)
TARGET_UTILIZATION, TARGET_SHARE = 0.95, 0.01


@dataclass(frozen=True)
class Case:
    shape: str
    retry_after: bool
    rate: float
    seed: int
    jitter_s: float
    processes: int
    duration_s: float
    #: When the run starts, within the second: where its first 429 falls against a
    #: window's edge (a fixed window turns over on the whole second).
    phase_s: float = 0.0


@dataclass(frozen=True)
class Outcome:
    shape: str
    rate: float
    utilization: float
    share_429: float

    @property
    def met(self) -> bool:
        return self.utilization >= TARGET_UTILIZATION and self.share_429 <= TARGET_SHARE


def run_case(case: Case) -> Outcome:
    end_s = case.phase_s + case.duration_s
    run = simulate(
        ShapeServer(case.shape, case.rate, retry_after=case.retry_after),
        start_s=case.phase_s,
        duration_s=end_s,
        latency_s=0.02,
        jitter_s=case.jitter_s,
        seed=case.seed,
        processes=case.processes,
    )
    return Outcome(
        case.shape,
        case.rate,
        run.served_rate(case.phase_s, end_s) / case.rate,
        run.share_429(case.phase_s, end_s),
    )


def cases(
    *,
    seeds: int,
    jitter_s: float,
    processes: int,
    duration_s: float,
    shapes: Sequence[tuple[str, bool]] = SHAPES,
    rates: Sequence[float] = RATES,
) -> list[Case]:
    """Each seed starts at its own phase, spread evenly over the second."""
    return [
        Case(name, retry_after, rate, seed, jitter_s, processes, duration_s, seed / seeds)
        for name, retry_after in shapes
        for rate in rates
        for seed in range(seeds)
    ]


def summarize(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per shape and limit, then the totals."""
    groups: dict[tuple[str, float], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.shape, o.rate), []).append(o)
    lines = []
    for (shape, rate), group in groups.items():
        us = [o.utilization for o in group]
        share = statistics.fmean(o.share_429 for o in group)
        met = sum(o.met for o in group)
        lines.append(
            f"{shape:>12} {rate:>5.0f}/s  mean {statistics.fmean(us):.3f}  lowest {min(us):.3f}"
            f"  429s {share:.2%}  met {met}/{len(group)}"
        )
    if outcomes:
        mean = statistics.fmean(o.utilization for o in outcomes)
        met = sum(o.met for o in outcomes)
        lines.append(f"all: mean {mean:.4f}, met {met}/{len(outcomes)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.shape_grid")
    parser.add_argument("--jitter-ms", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--shapes", default=",".join(name for name, _ in SHAPES))
    args = parser.parse_args(argv)
    known = dict(SHAPES)
    names = [n for n in args.shapes.split(",") if n]
    if unknown := [n for n in names if n not in known]:
        parser.error(f"unknown shape {unknown[0]!r}; known: {', '.join(known)}")
    if args.seeds < 1 or args.processes < 0 or args.jitter_ms < 0 or args.duration_s <= 0:
        parser.error("--seeds must be >= 1, --processes and --jitter-ms >= 0, --duration-s > 0")
    todo = cases(
        seeds=args.seeds,
        jitter_s=args.jitter_ms / 1000,
        processes=args.processes,
        duration_s=args.duration_s,
        shapes=[(n, known[n]) for n in names],
    )
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        outcomes = list(pool.map(run_case, todo, chunksize=4))
    print("\n".join(summarize(outcomes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

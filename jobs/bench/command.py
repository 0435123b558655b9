"""``driver-review bench`` (and ``python -m jobs.bench``): contributed to the library's CLI
through the ``driver_review.commands`` entry point group; the library never imports the
benchmark."""

from __future__ import annotations

import argparse

from driver_review.commands import Command


def add_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    bench.add_argument("--out", default="bench-results", help="directory for bench.json/.png")
    bench.add_argument("--only", help="comma-separated scenarios (default: all)")


def run(args: argparse.Namespace) -> int:
    from jobs.bench.runner import run_bench

    return run_bench(quick=args.quick, out_dir=args.out, only=args.only)


BENCH = Command("bench", "the benchmark: every scenario side by side, here", add_arguments, run)

"""``ray job submit -- python -m jobs.bench [--quick] [--out DIR] [--only a,b]``

The same as ``driver-review bench``; inside a job, Ray's own ``RAY_ADDRESS`` makes it join
the cluster the job was submitted to (the simulators still run in the job's driver process,
on its loopback).
"""

import argparse
import logging
import sys

from driver_review.errors import DriverReviewError
from jobs.bench.command import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bench")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except DriverReviewError as exc:
        print(f"python -m jobs.bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

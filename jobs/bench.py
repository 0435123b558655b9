"""``ray job submit -- python -m jobs.bench [--quick] [--out DIR] [--only a,b]``

The same as ``driver-review bench``; inside a job, Ray's own ``RAY_ADDRESS`` makes it join
the cluster the job was submitted to (the simulators still run in the job's driver process,
on its loopback).
"""

import sys

from driver_review.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))

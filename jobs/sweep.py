"""``ray job submit -- python -m jobs.sweep --catalog-url URL [--config F] [--data-dir D] [--json]``

The same as ``driver-review sweep``; inside a job, Ray's own ``RAY_ADDRESS`` makes it join
the cluster the job was submitted to.
"""

import sys

from driver_review.cli import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))

import sys

from driver_review.cli import main

sys.exit(main())

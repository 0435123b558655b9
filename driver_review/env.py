"""Every environment variable driver-review reads, each named once here.

Secrets come from the environment only; these are their names, never their values.
"""

from __future__ import annotations

#: The webhook signing secret (``whsec_…``) of the public port (``driver-review serve``).
WEBHOOK_SECRET = "DRIVER_REVIEW_WEBHOOK_SECRET"
#: The admin endpoint's bearer token: required beyond loopback, used when set.
ADMIN_TOKEN = "DRIVER_REVIEW_ADMIN_TOKEN"
#: A custom Ray resource: the orchestrator and governor are placed on nodes offering it.
HEAD_RESOURCE = "DRIVER_REVIEW_HEAD_RESOURCE"
#: The simulator's credentials when it plays a guarded vendor (``sim --auth``).
SIM_TOKEN = "DRIVER_REVIEW_SIM_TOKEN"
SIM_CLIENT_ID = "DRIVER_REVIEW_SIM_CLIENT_ID"
SIM_CLIENT_SECRET = "DRIVER_REVIEW_SIM_CLIENT_SECRET"

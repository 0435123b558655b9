"""The Ray Serve ingress of driver-review: signed catalog webhooks in, micro-batches of
changes to the orchestrator out, plus read-only status routes.

Public routes: ``POST /webhooks/drivers``, ``GET /healthz``; the operator routes
(``GET /status``, ``GET /drivers/{id}``) are on the admin endpoint (:mod:`serve_app.admin`).
Build with :func:`build_app` (``serve run
serve_app.app:build_app instance=main``); :func:`collect_status` is the status document
the ``driver-review status`` CLI prints too.
"""

from serve_app.app import IngressArgs, build_app
from serve_app.status import collect_status

__all__ = ["IngressArgs", "build_app", "collect_status"]

"""The Ray Serve ingress of driver-review: signed catalog webhooks in, micro-batches of
changes to the orchestrator out; the admin endpoint; the always-on service and the demo.

Public routes: ``POST /webhooks/drivers``, ``GET /healthz``; the operator routes
(``GET /status``, ``GET /drivers/{id}``, the live page) are on the admin endpoint
(:mod:`serve_app.admin`). Build with :func:`build_app` (``serve run
serve_app.app:build_app instance=main``). Nothing is imported until asked for: the CLI
reads :mod:`serve_app.commands` without loading Serve.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IngressArgs", "build_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from serve_app import app

        return getattr(app, name)
    raise AttributeError(f"module 'serve_app' has no attribute {name!r}")

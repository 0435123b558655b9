"""The private admin surface of one instance: ``GET /status``, ``GET /drivers/{id}`` and
``GET /healthz`` and the live page (``GET /ui``, :mod:`serve_app.ui`), apart from the
public webhook port.

It binds to 127.0.0.1 by default. Bound to anything else, it refuses to start without a
bearer token in ``DRIVER_REVIEW_ADMIN_TOKEN`` and answers 401 to a request without it;
a token that is set is required on loopback too. The status document is kept for
``status_max_age_s`` (about a second) and built from the orchestrator's per-tick stats,
so neither many callers nor a large catalog make it cost more.

:func:`build_admin_api` is the FastAPI app; :mod:`serve_app.admin_server` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from driver_review import env
from driver_review.errors import ConfigError
from driver_review.identifiers import id_problem
from driver_review.runtime.system import System
from driver_review.statcache import AsyncCachedValue
from driver_review.status import collect_status, json_safe
from serve_app import defaults
from serve_app.history import SAMPLE_EVERY_S, StatusHistory
from serve_app.ui import PUBLIC_PATHS, ui_router
from serve_app.webhook import RedactedSecret

ADMIN_TOKEN_ENV = env.ADMIN_TOKEN
DEFAULT_ADMIN_HOST, DEFAULT_ADMIN_PORT = defaults.ADMIN_HOST, defaults.ADMIN_PORT
#: A shorter token is a password, not a bearer token.
MIN_TOKEN_CHARS = 16

IngressStats = Callable[[], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class AdminArgs:
    instance: str
    #: The Serve application of the instance's webhook edge, whose replica counters
    #: /status shows under ``ingress``; None: none.
    ingress_app: str | None = None
    status_timeout_s: float = 2.0
    status_max_age_s: float = 1.0
    #: Where the instance writes its results (the UI's driver page reads them); None: none.
    results_dir: str | None = None
    history_window_s: float = 600.0
    sample_every_s: float = SAMPLE_EVERY_S


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return False


def admin_token(host: str, environ: Mapping[str, str] = os.environ) -> RedactedSecret | None:
    """The bearer token for an endpoint on ``host``: required unless ``host`` is loopback.
    Errors name the variable, never its value."""
    value = environ.get(ADMIN_TOKEN_ENV, "").strip()
    if not value:
        if is_loopback(host):
            return None
        raise ConfigError(
            f"{ADMIN_TOKEN_ENV} is not set: the admin endpoint on {host!r} is "
            "not loopback and needs a bearer token"
        )
    if len(value) < MIN_TOKEN_CHARS or not value.isascii() or not value.isprintable():
        raise ConfigError(
            f"{ADMIN_TOKEN_ENV}: not a token of at least {MIN_TOKEN_CHARS} "
            "printable ASCII characters"
        )
    return RedactedSecret(value)


def bearer_ok(authorization: str | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header carries ``token``, compared in constant time."""
    if not authorization:
        return False
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes sent.
    return hmac.compare_digest(value.strip().encode("latin-1"), token)


class _Unauthorized(Exception):
    pass


def serve_ingress_stats(app_name: str | None, timeout_s: float) -> IngressStats:
    """Counters of one replica of the Serve app ``app_name``, or None when unreachable."""

    handles: list[Any] = []  # the app's handle, once found

    async def ask() -> dict[str, Any] | None:
        if app_name is None:
            return None
        from ray import serve

        try:
            if not handles:
                # A blocking call into the Serve controller: off the event loop, which also
                # serves the admin's HTTP (and must not stall while Serve starts).
                handles.append(
                    await asyncio.wait_for(
                        asyncio.to_thread(serve.get_app_handle, app_name), timeout_s
                    )
                )
            return await asyncio.wait_for(handles[0].stats.remote(), timeout_s)
        except Exception:  # not deployed, restarting: the rest of the status still shows
            return None

    return ask


def build_admin_api(
    system: System,
    args: AdminArgs,
    token: RedactedSecret | None,
    ingress_stats: IngressStats | None = None,
) -> FastAPI:
    secret = token.reveal().encode() if token is not None else None
    ask_ingress = ingress_stats or serve_ingress_stats(args.ingress_app, args.status_timeout_s)

    async def authorize(request: Request) -> None:
        if request.url.path in PUBLIC_PATHS:  # the page's static files: no data in them
            return
        if secret is not None and not bearer_ok(request.headers.get("authorization"), secret):
            raise _Unauthorized

    api = FastAPI(
        title="driver-review admin",
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(authorize)],
    )

    @api.exception_handler(_Unauthorized)
    async def unauthorized(_request: Request, _exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"detail": "missing or wrong bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    async def build_status() -> dict[str, Any]:
        doc, ingress = await asyncio.gather(
            collect_status(system, timeout_s=args.status_timeout_s), ask_ingress()
        )
        doc["ingress"] = json_safe(ingress)
        return doc

    status_doc = AsyncCachedValue(build_status, max_age_s=args.status_max_age_s)
    history = StatusHistory(window_s=args.history_window_s)

    async def current_status() -> dict[str, Any]:
        doc = await status_doc.get()
        history.add(doc)  # a cached document is added once
        return doc

    async def sample_forever() -> None:
        """Keep the history filling while nobody watches (run by the admin server)."""
        while True:
            with contextlib.suppress(Exception):  # a failed status is a gap, not an end
                await current_status()
            await asyncio.sleep(args.sample_every_s)

    async def ledger_entry(driver_id: str) -> dict[str, Any] | None:
        entry = await asyncio.wait_for(system.orchestrator.driver(driver_id), args.status_timeout_s)
        return dict(entry) if entry is not None else None

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/status")
    async def status() -> JSONResponse:
        return JSONResponse(await current_status())

    @api.get("/drivers/{driver_id}")
    async def driver(driver_id: str) -> JSONResponse:
        if (problem := id_problem(driver_id)) is not None:
            return JSONResponse({"detail": problem}, 400)
        try:
            entry = await ledger_entry(driver_id)
        except Exception as exc:
            return JSONResponse({"detail": f"orchestrator: {type(exc).__name__}"}, 503)
        if entry is None:
            return JSONResponse({"detail": f"driver {driver_id!r} is not in the ledger"}, 404)
        return JSONResponse(json_safe(entry))

    api.include_router(
        ui_router(
            status=current_status,
            history=history,
            ledger_entry=ledger_entry,
            results_dir=args.results_dir,
        )
    )
    api.state.status_cache = status_doc  # tests read its counts
    api.state.history = history
    api.state.sample_forever = sample_forever
    return api

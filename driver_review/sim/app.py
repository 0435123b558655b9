"""The simulator's HTTP surface: the ``/v1`` REST contract (documented at
``/openapi.json`` through the shared wire models) and the ``/_sim`` oracle.

Route handlers only translate HTTP to :class:`~driver_review.sim.state.CatalogState`
calls; rate limit, latency and faults are applied around them by
:class:`~driver_review.sim.edge.Edge`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from driver_review.catalog.models import (
    CheckRequest,
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    Page,
    UtcDatetime,
)
from driver_review.errors import first_error
from driver_review.sim.auth import TOKEN_PATH, AuthGate, TokenIssuer, token_form
from driver_review.sim.badrows import BadRows
from driver_review.sim.edge import Edge, Limits
from driver_review.sim.generator import ChangeGenerator
from driver_review.sim.ratelimit import QuotaWindow, TokenBucket
from driver_review.sim.settings import SimSettings
from driver_review.sim.state import CatalogState
from driver_review.sim.webhooks import WebhookSender
from driver_review.sim.wire import MAX_PAGE, SimError


class ErrorDetail(BaseModel):
    detail: str


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorDetail} for code in (*codes, 429)}


DriverId = Annotated[str, Path(alias="id", description="driver id, e.g. drv-000123")]
Cursor = Annotated[str | None, Query(description="opaque; next_cursor of the previous page")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]


def _one_line(exc: RequestValidationError) -> str:
    # FastAPI's location starts with where the value was (body, query, ...): named first.
    first = first_error(exc)
    where, *rest = (*first.loc, "")
    name = ".".join(str(p) for p in rest if p != "")
    kind = {"query": "query parameter", "path": "path parameter", "header": "header"}
    if where == "body":
        label = f"body field {name!r}" if name else "body"
    else:
        label = f"{kind.get(str(where), str(where))} {name!r}"
    return f"{label}: {first.message}"


def create_app(
    settings: SimSettings,
    state: CatalogState,
    *,
    gate: AuthGate | None = None,
    issuer: TokenIssuer | None = None,
) -> Edge:
    """The ASGI app: the FastAPI routes wrapped in the auth/rate-limit/latency/fault edge;
    with ``issuer``, also the OAuth2 token endpoint."""
    sender = None
    if settings.webhook_url and settings.webhook_secret:
        sender = WebhookSender(
            url=settings.webhook_url,
            secret=settings.webhook_secret,
            stats=state.stats,
            seed=settings.seed,
            drop_rate=settings.webhook_drop_rate,
            fat=settings.fat_pings,
            thin=settings.thin_pings,
        )
    generator = ChangeGenerator(state, settings, sender.offer if sender else None)
    bad_rows = BadRows(settings.bad_rows, settings.seed)

    def rendered(page: Page) -> Page | JSONResponse:
        # Bad rows do not fit the Page model: sent as plain JSON, past its validation.
        return JSONResponse(bad_rows.render(page)) if settings.bad_rows > 0 else page

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Shutdown order: stop making changes, then stop sending about them.
        if sender is not None:
            sender.start()
        generator.start()
        try:
            yield
        finally:
            await generator.aclose()
            if sender is not None:
                await sender.aclose()

    api = FastAPI(
        title="Vendor driver catalog (simulated)",
        version="1",
        description="The REST contract driver-review speaks, served by driver_review.sim.",
        lifespan=lifespan,
    )
    api.state.generator = generator
    api.state.sender = sender

    @api.exception_handler(SimError)
    async def _sim_error(_: Request, exc: SimError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    @api.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _one_line(exc)}, status_code=400)

    @api.get("/v1/drivers", response_model=Page, tags=["drivers"], responses=_errors(400))
    async def list_drivers(cursor: Cursor = None, limit: Limit = 500) -> Page | JSONResponse:
        """Every driver, ordered by id."""
        return rendered(state.list_page(cursor, limit))

    @api.get("/v1/drivers/changes", response_model=Page, tags=["drivers"], responses=_errors(400))
    async def list_changes(
        since: Annotated[UtcDatetime, Query(description="RFC 3339; rows have updated_at > since")],
        cursor: Cursor = None,
        limit: Limit = 500,
    ) -> Page | JSONResponse:
        """Drivers changed after ``since``, ordered by (updated_at, id), each once with its
        latest state. Following ``next_cursor`` to null is complete even while changes
        keep arriving (a driver that changes meanwhile shows up again, later)."""
        return rendered(state.changes_page(since, cursor, limit))

    @api.get(
        "/v1/drivers/{id}",
        response_model=DriverRecord,
        tags=["drivers"],
        responses={304: {"description": "If-None-Match matched the current ETag"}, **_errors(404)},
    )
    async def get_driver(
        driver_id: DriverId, if_none_match: Annotated[str | None, Header()] = None
    ) -> Response:
        """The current version's record, with a strong ETag."""
        body, etag = state.fetch_record(driver_id, if_none_match)
        if body is None:
            return Response(status_code=304, headers={"ETag": etag})
        return Response(body, media_type="application/json", headers={"ETag": etag})

    @api.get(
        "/v1/drivers/{id}/package",
        response_class=Response,
        tags=["drivers"],
        responses={
            200: {"content": {"application/octet-stream": {}}, "description": "package bytes"},
            **_errors(404, 409),
        },
    )
    async def get_package(
        driver_id: DriverId,
        version: Annotated[str | None, Query(description="409 unless current")] = None,
    ) -> Response:
        """The current version's package; ``X-Driver-Version`` says which version it is."""
        current, blob = state.package(driver_id, version)
        return Response(
            blob, media_type="application/octet-stream", headers={"X-Driver-Version": current}
        )

    @api.post(
        "/v1/checks/{check}",
        response_model=CheckResponse,
        tags=["checks"],
        responses=_errors(400, 404, 409),
    )
    async def run_check(
        check: Annotated[str, Path(description="malware_scan, crash_telemetry, hwid_conflicts")],
        request: CheckRequest,
    ) -> CheckResponse:
        """An external check of the driver's current version."""
        return state.run_check(check, request.driver_id, request.version)

    @api.put(
        "/v1/drivers/{id}/versions/{version}/reviews/{stage}",
        response_model=DecisionResponse,
        tags=["reviews"],
        responses=_errors(400, 404, 409),
    )
    async def put_decision(
        driver_id: DriverId, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        """Decide a stage. Approving advances the driver; rejecting ends the version.
        Repeating a decided (driver, version, stage) changes nothing (``duplicate``)."""
        return state.decide(driver_id, version, stage, decision)

    if issuer is not None:

        @api.post(TOKEN_PATH, include_in_schema=False)
        async def token(request: Request) -> JSONResponse:
            """OAuth2 client credentials (RFC 6749 §4.4); see driver_review.sim.auth."""
            form = token_form(await request.body())
            status, answer = issuer.issue(form, request.headers.get("authorization"))
            state.stats.tokens[str(status)] += 1
            return JSONResponse(answer, status_code=status, headers={"cache-control": "no-store"})

    @api.get("/_sim/truth", include_in_schema=False)
    async def truth() -> dict[str, Any]:
        return {"drivers": state.truth()}

    @api.get("/_sim/state", include_in_schema=False)
    async def current() -> dict[str, Any]:
        return {"drivers": state.current()}

    @api.get("/_sim/stats", include_in_schema=False)
    async def stats() -> dict[str, Any]:
        converged, drivers = state.converged()
        pending = sender.pending if sender is not None else 0
        return {
            **state.stats.as_dict(),
            "webhooks_pending": pending,
            "bad_rows": bad_rows.stats(),
            "converged": converged,
            "drivers": drivers,
        }

    @api.post("/_sim/reset_stats", include_in_schema=False)
    async def reset_stats() -> dict[str, bool]:
        state.stats.reset()
        return {"reset": True}

    @api.post("/_sim/pause", include_in_schema=False)
    async def pause() -> dict[str, bool]:
        """Stop making changes (webhooks already queued still go out), so that a run can
        end with a catalog that holds still and compare it with its truth."""
        await generator.aclose()
        return {"paused": True}

    return Edge(api, settings, state.stats, gate=gate)


def create_checks_app(
    settings: SimSettings, state: CatalogState, *, gate: AuthGate | None = None
) -> Edge:
    """The checks port: only ``POST /v1/checks/{check}``, behind limits of its own."""
    api = FastAPI(
        title="Driver checks (simulated)",
        version="1",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    @api.exception_handler(SimError)
    async def _sim_error(_: Request, exc: SimError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    @api.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _one_line(exc)}, status_code=400)

    @api.post("/v1/checks/{check}", response_model=CheckResponse)
    async def run_check(check: str, request: CheckRequest) -> CheckResponse:
        return state.run_check(check, request.driver_id, request.version)

    rate = settings.checks_rate_limit
    quota = (
        QuotaWindow(settings.checks_quota, settings.checks_quota_window_s)
        if settings.checks_quota
        else None
    )
    limits = Limits(
        TokenBucket(rate, settings.checks_burst) if rate else None,
        quota=quota,
        headers=settings.ratelimit_headers,
        label="checks ",
    )
    return Edge(api, settings, state.stats, gate=gate, limits=limits)

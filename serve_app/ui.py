"""The live page of the admin endpoint: ``GET /ui`` and the JSON it polls.

- ``GET /ui/`` (``/ui`` redirects there) and ``GET /ui/assets/{name}``: the page itself,
  static files shipped in ``serve_app/ui/`` (no CDN, no build step). They hold no data,
  so they are served without the bearer token: a browser cannot send a header on
  navigation. The page takes the
  token from the URL fragment (``/ui#token=…``: a fragment never reaches the server or
  its logs), keeps it in the tab's ``sessionStorage``, removes it from the address bar,
  and sends it as ``Authorization: Bearer`` on every data call.
- ``GET /live?since=T``: the status document and the history points newer than ``T``.
- ``GET /drivers/{id}/explain``: :func:`driver_review.explain.explain` with the ledger entry.

Every data route stays behind the admin's token check.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from driver_review.explain import explain, known
from driver_review.identifiers import id_problem
from driver_review.status import json_safe
from serve_app.history import StatusHistory

UI_DIR = Path(__file__).parent / "ui"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "charts.js": "text/javascript"}
#: Paths served without the token: the static page, never data.
PUBLIC_PATHS = frozenset({"/ui", "/ui/", *(f"/ui/assets/{name}" for name in ASSETS)})
# The page loads only its own files and talks only to its own origin.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
EXPLAIN_TIMEOUT_S = 20.0


def ui_router(
    *,
    status: Callable[[], Awaitable[dict[str, Any]]],
    history: StatusHistory,
    ledger_entry: Callable[[str], Awaitable[dict[str, Any] | None]],
    results_dir: str | None,
) -> APIRouter:
    router = APIRouter()

    @router.get("/ui", include_in_schema=False)
    async def to_page() -> Response:
        # Relative, so the page works behind a path prefix too; the browser keeps the
        # fragment (the token) across the redirect.
        return RedirectResponse("ui/", 308, headers=HEADERS)

    @router.get("/ui/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=HEADERS)

    @router.get("/ui/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:  # a fixed set: no path ever reaches the filesystem
            return JSONResponse({"detail": f"no asset {name[:64]!r}"}, 404)
        return FileResponse(UI_DIR / name, media_type=ASSETS[name], headers=HEADERS)

    @router.get("/live")
    async def live(since: str = "0") -> JSONResponse:
        try:
            after = float(since)
        except ValueError:
            after = math.nan
        if not math.isfinite(after):
            return JSONResponse(
                {"detail": f"since: not a time in epoch seconds: {since[:32]!r}"}, 400
            )
        doc = await status()
        return JSONResponse(
            {"status": doc, "history": history.since(after), "window_s": history.window_s}
        )

    @router.get("/drivers/{driver_id}/explain")
    async def explain_driver(driver_id: str) -> JSONResponse:
        if (problem := id_problem(driver_id)) is not None:
            return JSONResponse({"detail": problem}, 400)
        try:
            entry = await ledger_entry(driver_id)
            service = None
        except Exception as exc:  # the Parquet side still answers
            entry, service = None, f"orchestrator: {type(exc).__name__}"
        try:
            doc = await asyncio.wait_for(
                asyncio.to_thread(explain, results_dir, driver_id, json_safe(entry)),
                EXPLAIN_TIMEOUT_S,
            )
        except Exception as exc:
            return JSONResponse({"detail": f"results: {type(exc).__name__}: {exc}"[:300]}, 503)
        if not known(doc):
            return JSONResponse(
                {"detail": f"driver {driver_id!r} is neither in the ledger nor in the results"}, 404
            )
        doc["service"] = service
        return JSONResponse(json_safe(doc))

    return router

"""A worked example of the catalog seam: a vendor API of another shape, and its adapter.

**The vendor** ("driver hub v2", :class:`HubServer`) is a real HTTP server on loopback that
serves the simulated catalog's drivers in its own shapes, so a sweep through it still ends
at the simulator's truth:

- ``GET /hub/v2/updates?offset=&count=[&modifiedAfterMs=]`` → ``{"updates": [...], "total"}``:
  offset paging instead of cursors; rows ``{driverId, rev, phase, state, modifiedMs}`` with
  upper-case phases, ``PENDING``/``LIVE``/``DENIED`` states and epoch milliseconds;
- ``GET /hub/v2/updates/{id}`` (ETag), ``GET /hub/v2/updates/{id}/blob?rev=``;
- ``POST /hub/v2/analyses`` ``{analysis, driverId, rev}`` → ``{ok, why}``;
- ``POST /hub/v2/updates/{id}/reviews`` ``{rev, phase, outcome: ACCEPT|DENY, notes}``.

**The adapter** (:class:`HubCatalog`) is what a team writes for such a vendor: one class
whose constructor is the factory named in the pipeline file
(``catalog.adapter: "tests.integration.other_vendor:HubCatalog"``); it translates shapes into
the wire models, yields bad rows as ``BadRow``, raises the errors of
:mod:`driver_review.errors`, and paces every request through the limiter it is given.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from driver_review.catalog.adapter import ResponseHook
from driver_review.catalog.base import Limiter
from driver_review.catalog.models import (
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
)
from driver_review.config import CatalogConfig
from driver_review.errors import (
    BadRequest,
    Conflict,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
)
from driver_review.quarantine import BadRow, bad_row, summary_problem
from driver_review.retry import parse_retry_after

STATES = {"in_review": "PENDING", "published": "LIVE", "rejected": "DENIED"}
STATUSES = {v: k for k, v in STATES.items()}


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _hub_row(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "driverId": s["id"],
        "rev": s["version"],
        "phase": s["stage"].upper() if s["stage"] else None,
        "state": STATES[s["status"]],
        "modifiedMs": _ms(s["updated_at"]),
    }


# --- the vendor ----------------------------------------------------------------------


def hub_app(sim_url: str) -> FastAPI:
    app = FastAPI()
    sim = httpx.AsyncClient(base_url=sim_url, timeout=30.0)

    def passthrough(resp: httpx.Response) -> Response:
        headers = {k: v for k, v in resp.headers.items() if k.lower() in ("retry-after", "etag")}
        return Response(
            resp.content,
            resp.status_code,
            headers=headers,
            media_type=resp.headers.get("content-type"),
        )

    @app.get("/hub/v2/updates")
    async def updates(
        offset: int = 0, count: int = 100, modifiedAfterMs: int | None = None
    ) -> Response:
        path, params = "/v1/drivers", {"limit": "1000"}
        if modifiedAfterMs is not None:
            since = datetime.fromtimestamp(modifiedAfterMs / 1000, UTC).isoformat()
            path, params = "/v1/drivers/changes", {**params, "since": since}
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:  # the whole list, then a slice of it: the hub pages by offset
            resp = await sim.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
            if resp.status_code != 200:
                return passthrough(resp)
            page = resp.json()
            rows += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return JSONResponse(
            {"updates": [_hub_row(r) for r in rows[offset : offset + count]], "total": len(rows)}
        )

    @app.get("/hub/v2/updates/{driver_id}")
    async def record(driver_id: str, request: Request) -> Response:
        etag = request.headers.get("if-none-match")
        resp = await sim.get(
            f"/v1/drivers/{driver_id}", headers={"if-none-match": etag} if etag else None
        )
        if resp.status_code != 200:
            return passthrough(resp)
        r = resp.json()
        body = {
            **_hub_row(r),
            "vendorId": r["vendor_id"],
            "vendorName": r["vendor"],
            "title": r["name"],
            "previousRev": r.get("previous_version"),
            "hardwareIds": r["hardware_ids"],
            "os": r.get("os"),
            "pkg": {"bytes": r["package"]["size"], "sha256": r["package"]["sha256"]},
            "releasedMs": _ms(r["released_at"]) if r.get("released_at") else None,
        }
        return JSONResponse(body, headers={"etag": resp.headers.get("etag", "")})

    @app.get("/hub/v2/updates/{driver_id}/blob")
    async def blob(driver_id: str, rev: str | None = None) -> Response:
        return passthrough(
            await sim.get(
                f"/v1/drivers/{driver_id}/package", params={"version": rev} if rev else None
            )
        )

    @app.post("/hub/v2/analyses")
    async def analyses(request: Request) -> Response:
        body = await request.json()
        resp = await sim.post(
            f"/v1/checks/{body['analysis']}",
            json={"driver_id": body["driverId"], "version": body["rev"]},
        )
        if resp.status_code != 200:
            return passthrough(resp)
        answer = resp.json()
        return JSONResponse({"ok": answer["passed"], "why": answer.get("reason", "")})

    @app.post("/hub/v2/updates/{driver_id}/reviews")
    async def review(driver_id: str, request: Request) -> Response:
        body = await request.json()
        verdict = {"ACCEPT": "approved", "DENY": "rejected"}[body["outcome"]]
        resp = await sim.put(
            f"/v1/drivers/{driver_id}/versions/{body['rev']}/reviews/{body['phase'].lower()}",
            json={"verdict": verdict, "reasons": body.get("notes", {})},
        )
        if resp.status_code != 200:
            return passthrough(resp)
        a = resp.json()
        return JSONResponse(
            {
                "driverId": a["driver_id"],
                "rev": a["version"],
                "phase": a["stage"].upper() if a["stage"] else None,
                "state": STATES[a["status"]],
                "modifiedMs": _ms(a["updated_at"]) if a.get("updated_at") else None,
                "repeat": a.get("duplicate", False),
            }
        )

    return app


class HubServer:
    """:func:`hub_app` served on a free loopback port from a background thread."""

    def __init__(self, sim_url: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(hub_app(sim_url), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> HubServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("hub server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


# --- the adapter ---------------------------------------------------------------------


class HubCatalog:
    """The :class:`~driver_review.catalog.base.Catalog` over driver hub v2."""

    def __init__(
        self,
        config: CatalogConfig,
        *,
        limiter: Limiter | None,
        on_response: ResponseHook | None,
        stages: Sequence[str],
    ) -> None:
        self.config = config
        self._limiter = limiter
        self._on_response = on_response
        self._stages = list(stages)
        self._client = httpx.AsyncClient(base_url=config.url, timeout=config.timeout_s)
        self._calls: dict[str, Counter[str]] = {}

    # -- rows
    async def iter_drivers(self) -> AsyncIterator[DriverSummary | BadRow]:
        async for row in self._rows({}, "listing"):
            yield row

    async def changes_since(self, since: datetime) -> AsyncIterator[DriverSummary | BadRow]:
        async for row in self._rows(
            {"modifiedAfterMs": str(int(since.timestamp() * 1000))}, "changes"
        ):
            yield row

    async def _rows(
        self,
        params: dict[str, str],
        source: str,
    ) -> AsyncIterator[DriverSummary | BadRow]:
        offset = 0
        while True:
            resp = await self._send(
                "GET /hub/v2/updates",
                "GET",
                "/hub/v2/updates",
                params={**params, "offset": str(offset), "count": str(self.config.page_size)},
            )
            page = resp.json()
            for hub in page["updates"]:
                raw = _summary(hub)
                problem = summary_problem(raw, now=time.time(), stages=self._stages)
                if problem is None:
                    yield DriverSummary.model_validate(raw)
                else:  # set aside alone; the page goes on
                    yield bad_row(raw, *problem, source=source, seen_at=time.time())
            offset += len(page["updates"])
            if not page["updates"] or offset >= page["total"]:
                return

    # -- one driver
    async def get_driver(
        self,
        driver_id: str,
        *,
        etag: str | None = None,
    ) -> tuple[DriverRecord | None, str | None]:
        resp = await self._send(
            "GET /hub/v2/updates/{id}",
            "GET",
            f"/hub/v2/updates/{driver_id}",
            headers={"if-none-match": etag} if etag else None,
            not_modified=True,
        )
        if resp.status_code == 304:
            return None, etag
        h = resp.json()
        record = DriverRecord.model_validate(
            {
                **_summary(h),
                "vendor_id": h["vendorId"],
                "vendor": h["vendorName"],
                "name": h["title"],
                "previous_version": h["previousRev"],
                "hardware_ids": h["hardwareIds"],
                "os": h["os"],
                "package": {"size": h["pkg"]["bytes"], "sha256": h["pkg"]["sha256"]},
                "released_at": _iso(h["releasedMs"]) if h["releasedMs"] else None,
            }
        )
        return record, resp.headers.get("etag") or None

    async def get_package(self, driver_id: str, *, version: str | None = None) -> bytes:
        resp = await self._send(
            "GET /hub/v2/updates/{id}/blob",
            "GET",
            f"/hub/v2/updates/{driver_id}/blob",
            params={"rev": version} if version else None,
        )
        return resp.content

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        resp = await self._send(
            "POST /hub/v2/analyses",
            "POST",
            "/hub/v2/analyses",
            json={"analysis": check, "driverId": driver_id, "rev": version},
        )
        answer = resp.json()
        return CheckResponse(
            check=check,
            driver_id=driver_id,
            version=version,
            passed=answer["ok"],
            reason=answer["why"],
        )

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        resp = await self._send(
            "POST /hub/v2/updates/{id}/reviews",
            "POST",
            f"/hub/v2/updates/{driver_id}/reviews",
            json={
                "rev": version,
                "phase": stage.upper(),
                "notes": decision.reasons,
                "outcome": "ACCEPT" if decision.verdict == "approved" else "DENY",
            },
        )
        a = resp.json()
        return DecisionResponse(
            driver_id=a["driverId"],
            version=a["rev"],
            stage=a["phase"].lower() if a["phase"] else None,
            status=STATUSES[a["state"]],
            updated_at=_iso(a["modifiedMs"]) if a["modifiedMs"] else None,
            duplicate=a["repeat"],
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def stats(self) -> dict[str, Any]:
        return {"calls": {route: dict(c) for route, c in self._calls.items()}}

    # -- one request: paced, retried on 429/5xx/transport, typed errors otherwise
    async def _send(
        self, route: str, method: str, path: str, *, not_modified: bool = False, **kwargs: Any
    ) -> httpx.Response:
        for attempt in range(1, self.config.max_attempts + 1):
            if self._limiter is not None:
                await self._limiter.acquire()
            started = time.monotonic()
            try:
                resp = await self._client.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                self._count(route, type(exc).__name__, None, started)
                if attempt == self.config.max_attempts:
                    raise TransportError(f"{route}: {type(exc).__name__}", route=route) from exc
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            self._count(route, str(resp.status_code), resp.status_code, started)
            if self._limiter is not None:
                elapsed_s = time.monotonic() - started
                self._limiter.observe(resp.status_code, resp.headers, elapsed_s=elapsed_s)
            status = resp.status_code
            if status < 300 or (status == 304 and not_modified):
                return resp
            msg = f"{route}: HTTP {status}"
            if status == 404:
                raise NotFound(msg, status=status, route=route)
            if status == 409:
                raise Conflict(msg, status=status, route=route)
            if status != 429 and status < 500:
                raise BadRequest(msg, status=status, route=route)
            wait_s = parse_retry_after(resp.headers.get("retry-after"), time.time())
            if attempt == self.config.max_attempts:
                kind = RateLimited if status == 429 else ServerError
                raise kind(msg, status=status, route=route, retry_after_s=wait_s)
            await asyncio.sleep(wait_s if wait_s is not None else 0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _count(self, route: str, outcome: str, status: int | None, started: float) -> None:
        self._calls.setdefault(route, Counter())[outcome] += 1
        if self._on_response is not None:
            self._on_response(route, status, time.monotonic() - started)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _summary(hub: dict[str, Any]) -> dict[str, Any]:
    """A hub row in the wire shape; whatever does not translate is left for validation."""
    phase, state, ms = hub.get("phase"), hub.get("state"), hub.get("modifiedMs")
    return {
        "id": hub.get("driverId"),
        "version": hub.get("rev"),
        "stage": phase.lower() if isinstance(phase, str) else phase,
        "status": STATUSES.get(state, state),
        "updated_at": _iso(ms) if isinstance(ms, int) else ms,
    }

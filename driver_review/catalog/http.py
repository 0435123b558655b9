"""The :class:`~driver_review.catalog.base.Catalog` over the catalog's REST contract (``/v1``).

Policy lives here, I/O in ``httpx``: tests inject an ``httpx.MockTransport``, a fake
``sleep`` and a seeded ``rng``, and see every wait the client would make.

Per call, up to ``CatalogConfig.max_attempts`` attempts, each preceded by a permit from the
:class:`~driver_review.catalog.base.Limiter` (whose ``observe`` sees every response):

- 2xx: the body is validated against the wire model; a body that does not parse, has the
  wrong shape, or answers a different question (another driver, version or check) is a
  :class:`MalformedResponse` — retried, and never taken for an answer;
- 429: wait exactly what ``Retry-After`` says (delay-seconds or HTTP-date), else back off;
- 5xx, timeouts, resets, truncated bodies, malformed bodies: exponential backoff with full
  jitter (a ``Retry-After`` on a 5xx is honoured too);
- 404 → :class:`NotFound`, 409 → :class:`Conflict`, other 4xx → :class:`BadRequest`:
  raised at once, retrying cannot help;
- a body over the route's byte cap (``max_page_bytes``, ``max_record_bytes``,
  ``max_package_bytes``) → :class:`ResponseTooLarge`, read no further than the cap.

Listing and changes pages are taken row by row: a page whose envelope (``items``,
``next_cursor``) is fine yields each good row as a ``DriverSummary`` and each bad one as a
:class:`~driver_review.quarantine.BadRow` (never failing the page). A bad row whose id is
usable is resolved first: its record is fetched by id, and when that record is good it is
yielded instead.

When attempts run out (or the server asks for a wait longer than ``max_retry_wait_s``)
the last error is raised; it is a :class:`RetryableError` carrying ``retry_after_s``.
The decision PUT is idempotent, so it is retried like the reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json as jsonlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ValidationError

from driver_review.auth import build_auth
from driver_review.catalog.base import Limiter
from driver_review.catalog.models import (
    CheckRequest,
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
    Page,
)
from driver_review.catalog.transport import AiohttpTransport
from driver_review.config import CatalogConfig
from driver_review.errors import (
    BadRequest,
    CatalogError,
    MalformedResponse,
    NotFound,
    ResponseTooLarge,
    RetryableError,
    TransportError,
    error_for_status,
    one_line,
)
from driver_review.identifiers import redact_httpx_logs, redact_in, shown
from driver_review.limiter import Trace, on_time
from driver_review.quarantine import BadRow, bad_row, model_problem, summary_problem
from driver_review.retry import Backoff, parse_retry_after

# Route templates: the names of calls in stats, metrics and error messages.
LIST = "GET /v1/drivers"
CHANGES = "GET /v1/drivers/changes"
DRIVER = "GET /v1/drivers/{id}"
PACKAGE = "GET /v1/drivers/{id}/package"
CHECK = "POST /v1/checks/{check}"
DECISION = "PUT /v1/drivers/{id}/versions/{version}/reviews/{stage}"

#: A Retry-After longer than this is not slept through inside a call: the error is raised
#: at once with its ``retry_after_s`` so the caller can reschedule the work instead.
MAX_RETRY_WAIT_S = 60.0
_DETAIL_CHARS = 200  # how much of a server's error text goes into a one-line message

#: ``on_response(route, status, elapsed_s)``; ``status`` is None when no response came.
ResponseHook = Callable[[str, int | None, float], None]
Sleep = Callable[[float], Awaitable[None]]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

redact_httpx_logs()  # httpx logs each request's whole URL, credentials and all


class HttpCatalog:
    """The vendor catalog over HTTP. One instance per process; close with :meth:`aclose`."""

    def __init__(
        self,
        config: CatalogConfig,
        *,
        limiter: Limiter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_response: ResponseHook | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        max_retry_wait_s: float = MAX_RETRY_WAIT_S,
        stages: Collection[str] | None = None,
    ) -> None:
        self.config = config
        # The pipeline's stages: a row at another stage is bad (and resolved by id) here.
        self._stages = list(stages) if stages is not None else None
        self._caps = {
            LIST: config.max_page_bytes,
            CHANGES: config.max_page_bytes,
            PACKAGE: config.max_package_bytes,
        }
        self._limiter = limiter
        self._on_response = on_response
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock  # to read HTTP-date Retry-After values
        self._max_retry_wait_s = max_retry_wait_s
        self._backoff = Backoff(config.backoff_base_s, config.backoff_max_s, rng or random.Random())
        base, query = _split_query(config.url)
        self._client = httpx.AsyncClient(
            base_url=base,
            # Credentials from the environment (read now; a missing one was caught at start).
            auth=build_auth(config.auth, "catalog.auth"),
            # A query in the catalog URL (an API token, say) goes with every request: left
            # in the base URL, httpx would append the paths to it.
            params=httpx.QueryParams(tuple(query)),
            transport=transport or AiohttpTransport(max_connections=config.max_connections),
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
            headers={"user-agent": "driver-review", "accept": "application/json"},
        )
        self._calls: dict[str, Counter[str]] = {}
        self._n = Counter[str]()
        self._bad = Counter[str]()  # bad rows yielded, by kind
        self._resolved = Counter[str]()  # bad rows replaced by their good record, by kind

    # --- the Catalog interface ------------------------------------------------------------

    async def list_page(self, *, cursor: str | None = None) -> Page:
        params = {"limit": str(self.config.page_size)}
        if cursor is not None:
            params["cursor"] = cursor
        return await self._call(LIST, "GET", "/v1/drivers", params=params, parse=_model(Page))

    async def iter_drivers(self) -> AsyncIterator[DriverSummary | BadRow]:
        async for item in self._pages(LIST, "/v1/drivers", {}):
            yield item

    async def changes_since(self, since: datetime) -> AsyncIterator[DriverSummary | BadRow]:
        if since.tzinfo is None:
            raise BadRequest(f"{CHANGES}: since must be timezone-aware, got {since}", route=CHANGES)
        stamp = since.astimezone(UTC).isoformat().replace("+00:00", "Z")
        async for item in self._pages(CHANGES, "/v1/drivers/changes", {"since": stamp}):
            yield item

    async def get_driver(
        self, driver_id: str, *, etag: str | None = None
    ) -> tuple[DriverRecord | None, str | None]:
        headers = {"if-none-match": etag} if etag else None

        def parse(resp: httpx.Response, what: str) -> tuple[DriverRecord | None, str | None]:
            new_etag = resp.headers.get("etag")
            if resp.status_code == 304:
                return None, new_etag or etag
            record = _model(DriverRecord)(resp, what)
            if record.id != driver_id:
                raise MalformedResponse(f"{what}: answered for driver {record.id!r}")
            return record, new_etag

        path = f"/v1/drivers/{_seg(driver_id)}"
        return await self._call(
            DRIVER, "GET", path, headers=headers, parse=parse, not_modified=etag is not None
        )

    async def get_package(self, driver_id: str, *, version: str | None = None) -> bytes:
        """The package bytes; with ``version``, a 409 unless that version is current."""
        params = {"version": version} if version is not None else None

        def parse(resp: httpx.Response, what: str) -> bytes:
            kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            # An error document served with 200 must never be digested as the package.
            if kind.endswith("json") or kind.startswith("text/"):
                raise MalformedResponse(f"{what}: package came as {kind!r}, not bytes")
            served = resp.headers.get("x-driver-version")
            if version is not None and served is not None and served != version:
                raise MalformedResponse(f"{what}: asked for {version!r}, got {served!r}")
            return resp.content

        path = f"/v1/drivers/{_seg(driver_id)}/package"
        return await self._call(PACKAGE, "GET", path, params=params, parse=parse)

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        body = CheckRequest(driver_id=driver_id, version=version).model_dump(mode="json")

        def parse(resp: httpx.Response, what: str) -> CheckResponse:
            answer = _model(CheckResponse)(resp, what)
            asked = (check, driver_id, version)
            if (answer.check, answer.driver_id, answer.version) != asked:
                got = f"{answer.check} {answer.driver_id} {answer.version}"
                raise MalformedResponse(f"{what}: answered {got!r}, not {' '.join(asked)!r}")
            return answer

        path = f"/v1/checks/{_seg(check)}"
        return await self._call(CHECK, "POST", path, json=body, parse=parse)

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        def parse(resp: httpx.Response, what: str) -> DecisionResponse:
            answer = _model(DecisionResponse)(resp, what)
            if (answer.driver_id, answer.version) != (driver_id, version):
                got = f"{answer.driver_id} {answer.version}"
                raise MalformedResponse(f"{what}: answered for {got!r}")
            return answer

        path = f"/v1/drivers/{_seg(driver_id)}/versions/{_seg(version)}/reviews/{_seg(stage)}"
        body = decision.model_dump(mode="json")
        return await self._call(DECISION, "PUT", path, json=body, parse=parse)

    async def aclose(self) -> None:
        await self._client.aclose()

    def stats(self) -> dict[str, Any]:
        """``calls``: per route template, responses by status (or error kind); totals;
        ``rows``: bad rows yielded and bad rows resolved by id, by kind."""
        return {
            "calls": {r: dict(c) for r, c in self._calls.items()},
            **self._n,
            "rows": {"bad": dict(self._bad), "resolved": dict(self._resolved)},
        }

    # --- machinery ------------------------------------------------------------------------

    async def _pages(
        self, route: str, path: str, params: dict[str, str]
    ) -> AsyncIterator[DriverSummary | BadRow]:
        source = "listing" if route == LIST else "changes"
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            query = {**params, "limit": str(self.config.page_size)}
            if cursor is not None:
                query["cursor"] = cursor
            items, next_cursor = await self._call(route, "GET", path, params=query, parse=_envelope)
            for raw in items:
                now = self._wall_clock()
                problem = summary_problem(raw, now=now, stages=self._stages)
                if problem is None:
                    yield DriverSummary.model_validate(raw)
                else:
                    yield await self._resolve(bad_row(raw, *problem, source=source, seen_at=now))
            if next_cursor is None:
                return
            if next_cursor in seen:  # a loop would page forever
                raise MalformedResponse(f"{route}: next_cursor repeats", route=route)
            seen.add(next_cursor)
            cursor = next_cursor

    async def _resolve(self, bad: BadRow) -> DriverSummary | BadRow:
        """The good record of a bad row's driver, as a summary; else the bad row.

        A failure the next poll may not see (5xx, 429, timeouts) propagates, so the poll
        ends without moving the watermark; a missing or malformed record quarantines."""
        if bad.driver_id is None:
            self._bad[bad.kind] += 1
            return bad
        try:
            record, _ = await self.get_driver(bad.driver_id)
        except (NotFound, BadRequest, MalformedResponse, ResponseTooLarge) as exc:
            record, why = None, f"record by id: {type(exc).__name__}"
        else:
            problem = (
                None
                if record is None
                else model_problem(record, now=self._wall_clock(), stages=self._stages)
            )
            why = f"record by id: {problem[1]}" if problem else ""
        if record is None or why:
            self._bad[bad.kind] += 1
            return dataclasses.replace(bad, reason=f"{bad.reason}; {why}")
        self._resolved[bad.kind] += 1
        return DriverSummary(
            id=record.id,
            version=record.version,
            stage=record.stage,
            status=record.status,
            updated_at=record.updated_at,
        )

    async def _call(
        self,
        route: str,
        method: str,
        path: str,
        *,
        parse: Callable[[httpx.Response, str], T],
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        not_modified: bool = False,
    ) -> T:
        what = f"{method} {path}"
        attempts = self.config.max_attempts
        for attempt in range(1, attempts + 1):
            of = f"(attempt {attempt}/{attempts})"
            trace = None
            if self._limiter is not None:
                await self._limiter.acquire()
                if self._limiter.strict_spacing:
                    trace = on_time(self._limiter.acquire, self._limiter.space, clock=self._clock)
            started = self._clock()
            try:
                resp = await self._send(route, method, path, params, json, headers, trace)
            except ResponseTooLarge:
                self._record(route, "too_large", self._clock() - started)
                raise
            except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
                err = _from_httpx(exc, f"{what}: {{}} {of}", route, self.config.url)
                err.__cause__ = exc
                self._record(route, _kind(exc), self._clock() - started)
                if not isinstance(err, RetryableError) or attempt == attempts:
                    raise err from exc
            else:
                elapsed_s = self._clock() - started
                self._record(route, str(resp.status_code), elapsed_s)
                if self._limiter is not None:
                    self._limiter.observe(resp.status_code, resp.headers, elapsed_s=elapsed_s)
                try:
                    return self._answer(resp, route, what, of, parse, not_modified)
                except RetryableError as exc:
                    if attempt == attempts:
                        raise
                    err = exc
            delay_s = err.retry_after_s
            if delay_s is None:
                delay_s = self._backoff.delay_s(attempt - 1)
            elif delay_s > self._max_retry_wait_s:
                # Too long to wait inside a call: the caller reschedules the work.
                raise err from err.__cause__
            self._n["retries"] += 1
            await self._sleep(delay_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send(
        self,
        route: str,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json: Any,
        headers: Mapping[str, str] | None,
        trace: Trace | None = None,
    ) -> httpx.Response:
        """The response with its body read, but never more than the route's byte cap."""
        cap = self._caps.get(route, self.config.max_record_bytes)
        request = self._client.build_request(
            method, path, params=params, json=json, headers=headers
        )
        if trace is not None:
            request.extensions["trace"] = trace  # a slow new connection takes a fresh permit
        resp = await self._client.send(request, stream=True)
        try:
            declared = resp.headers.get("content-length", "")
            over = declared.isdigit() and int(declared) > cap
            parts: list[bytes] = []
            size = 0
            if not over:
                async for chunk in resp.aiter_bytes():  # decoded: a gzip bomb stops too
                    size += len(chunk)
                    if size > cap:
                        over = True
                        break
                    parts.append(chunk)
            if over:
                raise ResponseTooLarge(
                    f"{method} {path}: body over the {cap}-byte cap of {route}",
                    status=resp.status_code,
                    route=route,
                )
            # What ``aread`` does itself: the body is held, ``resp.content`` reads it.
            resp._content = b"".join(parts)
        finally:
            await resp.aclose()
        return resp

    def _answer(
        self,
        resp: httpx.Response,
        route: str,
        what: str,
        of: str,
        parse: Callable[[httpx.Response, str], T],
        not_modified: bool,
    ) -> T:
        status = resp.status_code
        if 200 <= status < 300 or (status == 304 and not_modified):
            try:
                return parse(resp, what)
            except MalformedResponse as exc:
                # Re-raised with the attempt count and route; the pydantic cause stays.
                raise MalformedResponse(f"{exc} {of}", status=status, route=route) from (
                    exc.__cause__ or exc
                )
        retry_after_s = parse_retry_after(resp.headers.get("retry-after"), self._wall_clock())
        detail = f"{status} {resp.reason_phrase}{_detail(resp)} {of}".replace("  ", " ")
        message = f"{what}: {detail}"
        raise error_for_status(status, message, route=route, retry_after_s=retry_after_s)

    def _record(self, route: str, outcome: str, elapsed_s: float) -> None:
        self._calls.setdefault(route, Counter())[outcome] += 1
        self._n["requests"] += 1
        if self._on_response is not None:
            self._on_response(route, int(outcome) if outcome.isdigit() else None, elapsed_s)


def _envelope(resp: httpx.Response, what: str) -> tuple[list[Any], str | None]:
    """A page's ``items`` (raw rows, each judged alone) and ``next_cursor``."""
    try:
        body = jsonlib.loads(resp.content)
    except ValueError as exc:
        raise MalformedResponse(f"{what}: body is not JSON") from exc
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise MalformedResponse(f"{what}: body is not a page (no items list)")
    cursor = body.get("next_cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise MalformedResponse(f"{what}: next_cursor is {type(cursor).__name__}")
    return body["items"], cursor


def _model(model: type[M]) -> Callable[[httpx.Response, str], M]:
    def parse(resp: httpx.Response, what: str) -> M:
        try:
            return model.model_validate_json(resp.content)
        except ValidationError as exc:
            raise MalformedResponse(
                f"{what}: body is not a valid {model.__name__} ({one_line(exc, top='body')})"
            ) from exc

    return parse


def _seg(value: str) -> str:
    """One path segment: an id with ``/`` or ``?`` in it must not change the route, and
    ``.``/``..`` (which quoting leaves as they are) are refused before any request."""
    if value in (".", "..") or not value:
        raise BadRequest(f"{shown(value)} cannot be a path segment")
    return quote(value, safe="")


def _detail(resp: httpx.Response) -> str:
    """The server's own words (``{"detail": ...}``), on one line, if it gave any."""
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    if not isinstance(detail, str) or not detail.strip():
        return ""
    return ": " + " ".join(detail.split())[:_DETAIL_CHARS]


def _kind(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "truncated"
    return "transport"


def _split_query(url: str) -> tuple[str, list[tuple[str, str]]]:
    parts = urlsplit(url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return base, parse_qsl(parts.query, keep_blank_values=True)


def _from_httpx(exc: BaseException, template: str, route: str, url: str = "") -> CatalogError:
    """The most specific error of :mod:`driver_review.errors` for an httpx failure; the
    catalog URL's credentials and query never reach its message."""
    name = type(exc).__name__
    text = " ".join(redact_in(str(exc), url).split())[:_DETAIL_CHARS] or name
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(template.format(f"timed out ({name})"), route=route)
    if isinstance(exc, httpx.RemoteProtocolError):
        what = "connection closed before the whole response (truncated or reset)"
        return TransportError(template.format(what), route=route)
    if isinstance(exc, httpx.ConnectError):
        return TransportError(template.format(f"cannot connect: {text}"), route=route)
    if isinstance(exc, httpx.NetworkError | OSError):
        return TransportError(template.format(f"connection failed ({name}): {text}"), route=route)
    if isinstance(exc, httpx.DecodingError):
        return MalformedResponse(template.format(f"body cannot be decoded: {text}"), route=route)
    if isinstance(
        exc,
        httpx.UnsupportedProtocol
        | httpx.LocalProtocolError
        | httpx.InvalidURL
        | httpx.TooManyRedirects,
    ):
        return BadRequest(template.format(f"request cannot be sent ({name}): {text}"), route=route)
    return TransportError(template.format(f"{name}: {text}"), route=route)

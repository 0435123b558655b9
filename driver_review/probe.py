"""``driver-review probe``: a bounded, read-only first contact with a vendor catalog.

Before pointing a pipeline at a new vendor, ask it the questions the pipeline relies on,
with at most :data:`MAX_REQUESTS` requests spaced :data:`MIN_GAP_S` apart and never a write:

- **auth**: ``catalog.auth`` (from the environment) is accepted;
- **listing**: two small pages; the envelope parses, ``next_cursor`` leads on to new rows
  (bad rows are counted: the pipeline quarantines them, a page of nothing else is a break);
- **changes**: ``/v1/drivers/changes`` rows come in non-decreasing ``updated_at``;
- **etag**: a driver record has an ETag and ``If-None-Match`` with it answers 304;
- **errors**: an unknown driver is a 404 with a JSON ``detail``;
- **rate limits** (reported, never a break): the ``Retry-After`` form of any 429 met,
  ``RateLimit``/``RateLimit-Policy`` headers;
- **latency** p50/p99 of the requests made;
- with ``check``: one POST of a listed driver to that check's endpoint.

Policy is here and I/O is ``httpx``: tests pass a transport. Nothing secret is shown:
URLs are redacted and no header value but the rate-limit ones is ever read out.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from driver_review.auth import build_auth
from driver_review.catalog.models import CheckResponse, DriverRecord, DriverSummary
from driver_review.checks.builtin import BUILTINS
from driver_review.config import PipelineConfig
from driver_review.errors import ConfigError, DriverReviewError
from driver_review.identifiers import redact_url
from driver_review.retry import parse_retry_after

#: The hard bound on requests per probe (token fetches for OAuth2 not counted).
MAX_REQUESTS = 12
#: Gap between the starts of two requests: a first contact should not look like a load.
MIN_GAP_S = 0.1
#: ... and after the first 429, at least this (the catalog's limit is lower than we thought).
GAP_AFTER_429_S = 1.0
PAGE_LIMIT = 3
#: A 429 is waited out (once per request) only when it asks for no more than this.
MAX_WAIT_S = 5.0
TIMEOUT_S = 10.0
MISSING_ID = "driver-review-probe-no-such-driver"
_EPOCH = "1970-01-01T00:00:00Z"
_DETAIL_CHARS = 80
_REMOTE_CHECKS = {"malware_scan", "crash_telemetry", "hwid_conflicts"}

Status = Literal["ok", "BROKEN", "info"]
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class Item:
    name: str
    status: Status
    detail: str


@dataclass
class ProbeReport:
    catalog: str  # redacted
    items: list[Item] = field(default_factory=list)
    requests: int = 0
    latencies_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(i.status != "BROKEN" for i in self.items)

    def add(self, name: str, status: Status, detail: str) -> None:
        self.items.append(Item(name, status, detail))

    def as_dict(self) -> dict[str, Any]:
        p50, p99 = latency_ms(self.latencies_s)
        return {
            "ok": self.ok,
            "catalog": self.catalog,
            "requests": self.requests,
            "latency_ms": {"p50": p50, "p99": p99},
            "items": [asdict(i) for i in self.items],
        }


class _CheckAnswer(BaseModel):
    # The http check's contract (see checks/http_check.py): strict, as the pipeline reads it.
    model_config = ConfigDict(extra="ignore")
    passed: StrictBool
    reason: StrictStr = ""


class _Stop(Exception):
    """Probing cannot go on (catalog unreachable, auth refused, budget spent)."""


def latency_ms(samples: list[float]) -> tuple[float | None, float | None]:
    """Nearest-rank p50 and p99 in milliseconds (None without samples)."""
    if not samples:
        return None, None
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return round(ordered[max(0, math.ceil(len(ordered) * q / 100) - 1)] * 1000, 1)

    return rank(50), rank(99)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _DETAIL_CHARS else flat[: _DETAIL_CHARS - 1] + "…"


class Prober:
    def __init__(
        self,
        config: PipelineConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
        min_gap_s: float = MIN_GAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._transport = transport
        self._environ = environ
        self._sleep = sleep
        self._min_gap_s = min_gap_s
        self._clock = clock
        self._last_start: float | None = None
        self.report = ProbeReport(redact_url(config.catalog.url))
        self._retry_after_forms: set[str] = set()
        self._ratelimit: dict[str, str] = {}

    # --- requests ---------------------------------------------------------------------

    async def _send(
        self, client: httpx.AsyncClient, method: str, url: str, **kw: Any
    ) -> httpx.Response:
        """One request within the budget; a 429 is noted and waited out once if short."""
        for attempt in range(2):
            if self.report.requests >= MAX_REQUESTS:
                raise _Stop(f"request budget of {MAX_REQUESTS} spent")
            if self._last_start is not None:
                gap = self._min_gap_s - (self._clock() - self._last_start)
                if gap > 0:
                    await self._sleep(gap)
            self._last_start = started = self._clock()
            self.report.requests += 1
            try:
                resp = await client.request(method, url, **kw)
            except httpx.HTTPError as exc:
                raise _Stop(f"{method} {redact_url(url)}: {type(exc).__name__}") from None
            except DriverReviewError as exc:  # the OAuth2 token endpoint, say
                raise _Stop(str(exc)) from None
            self.report.latencies_s.append(self._clock() - started)
            self._note_limits(resp)
            if resp.status_code != 429 or attempt:
                return resp
            # Met a limit: slow down for the rest of the probe, and retry this one once.
            self._min_gap_s = max(self._min_gap_s, GAP_AFTER_429_S)
            wait_s = parse_retry_after(resp.headers.get("retry-after"), time.time())
            if wait_s is None or wait_s > MAX_WAIT_S:
                return resp
            await self._sleep(wait_s)
        raise AssertionError("unreachable")

    def _note_limits(self, resp: httpx.Response) -> None:
        for name in ("ratelimit-policy", "ratelimit"):
            if name in resp.headers:
                self._ratelimit[name] = _one_line(resp.headers[name])
        if resp.status_code in (429, 503):
            value = resp.headers.get("retry-after")
            if value is None:
                self._retry_after_forms.add(f"{resp.status_code} without Retry-After")
            elif value.strip().isdigit():
                self._retry_after_forms.add(f"{resp.status_code} Retry-After seconds")
            elif parse_retry_after(value, time.time()) is not None:
                self._retry_after_forms.add(f"{resp.status_code} Retry-After HTTP-date")
            else:
                self._retry_after_forms.add(f"{resp.status_code} Retry-After unreadable")

    @staticmethod
    def _json(resp: httpx.Response) -> Any:
        try:
            return resp.json()
        except ValueError:
            return None

    # --- the items --------------------------------------------------------------------

    async def run(self, check: str | None = None) -> ProbeReport:
        if check is not None:
            self._check_spec(check)  # a wrong name is a flag error: before any request
        cat = self.config.catalog
        parts = urlsplit(cat.url)
        base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        if cat.adapter:
            # A custom adapter speaks its own API; this probe asks the REST contract's.
            self.report.add(
                "adapter", "info", f"{cat.adapter} not exercised: probing the REST contract"
            )
        async with httpx.AsyncClient(
            base_url=base,
            params=httpx.QueryParams(tuple(parse_qsl(parts.query))),
            transport=self._transport,
            auth=build_auth(
                cat.auth, "catalog.auth", environ=self._environ, transport=self._transport
            ),
            timeout=TIMEOUT_S,
            headers={"user-agent": "driver-review-probe", "accept": "application/json"},
        ) as client:
            try:
                first = await self._listing(client)
                await self._changes(client)
                if first is not None:
                    await self._etag(client, first.id)
                await self._errors(client)
                if check is not None:
                    await self._check(client, check, first)
            except _Stop as exc:
                self.report.add("reach", "BROKEN", f"stopped: {exc}")
        self._signals()
        return self.report

    def _page(
        self, resp: httpx.Response, what: str
    ) -> tuple[list[DriverSummary], int, str | None] | None:
        body = self._json(resp)
        if (
            resp.status_code != 200
            or not isinstance(body, dict)
            or not isinstance(body.get("items"), list)
            or not isinstance(body.get("next_cursor"), str | None)
        ):
            self.report.add(
                what, "BROKEN", f"HTTP {resp.status_code}: no {{items, next_cursor}} envelope"
            )
            return None
        good, bad = [], 0
        for raw in body["items"]:
            try:
                good.append(DriverSummary.model_validate(raw))
            except ValidationError:
                bad += 1
        return good, bad, body["next_cursor"]

    async def _listing(self, client: httpx.AsyncClient) -> DriverSummary | None:
        limit = {"limit": str(PAGE_LIMIT)}
        resp = await self._send(client, "GET", "/v1/drivers", params=limit)
        auth = self.config.catalog.auth
        how = f"{auth.kind} from the environment" if auth else "no auth configured"
        if resp.status_code in (401, 403):
            self.report.add("auth", "BROKEN", f"HTTP {resp.status_code} with {how}")
            raise _Stop("credentials refused")
        if 200 <= resp.status_code < 300:
            self.report.add("auth", "ok", f"accepted ({how})")
        else:  # a 429 or 5xx says nothing either way about the credentials
            self.report.add("auth", "info", f"not known: HTTP {resp.status_code} ({how})")
        page = self._page(resp, "listing")
        if page is None:
            return None
        rows, bad, cursor = page
        if not rows and bad:
            self.report.add("listing", "BROKEN", f"page 1: all {bad} rows bad")
            return None
        if cursor is None:
            self.report.add("listing", "info", f"one page of {len(rows)} rows (no cursor used)")
            return rows[0] if rows else None
        resp = await self._send(client, "GET", "/v1/drivers", params={**limit, "cursor": cursor})
        page2 = self._page(resp, "listing")
        if page2 is None:
            return rows[0] if rows else None
        rows2, bad2, cursor2 = page2
        repeated = {r.id for r in rows} & {r.id for r in rows2}
        if repeated or cursor2 == cursor or not (rows2 or bad2):
            why = (
                f"page 2 repeats {sorted(repeated)[0]}"
                if repeated
                else "page 2 is empty"
                if not (rows2 or bad2)
                else "next_cursor repeats"
            )
            self.report.add("listing", "BROKEN", f"next_cursor does not advance: {why}")
        else:
            self.report.add(
                "listing",
                "ok",
                f"2 pages of {PAGE_LIMIT}: {len(rows) + len(rows2)}"
                f" rows parse, {bad + bad2} bad (quarantined)",
            )
        return rows[0] if rows else (rows2[0] if rows2 else None)

    async def _changes(self, client: httpx.AsyncClient) -> None:
        params = {"since": _EPOCH, "limit": str(PAGE_LIMIT * 2)}
        resp = await self._send(client, "GET", "/v1/drivers/changes", params=params)
        page = self._page(resp, "changes")
        if page is None:
            return
        rows, bad, _ = page
        stamps = [r.updated_at for r in rows]
        for before, after in itertools.pairwise(stamps):
            if after < before:
                self.report.add(
                    "changes",
                    "BROKEN",
                    f"updated_at goes back: {after.isoformat()} after {before.isoformat()}",
                )
                return
        self.report.add(
            "changes",
            "ok" if rows else "info",
            f"{len(rows)} rows in non-decreasing updated_at, {bad} bad",
        )

    async def _etag(self, client: httpx.AsyncClient, driver_id: str) -> None:
        path = f"/v1/drivers/{quote(driver_id, safe='')}"
        resp = await self._send(client, "GET", path)
        try:
            record = DriverRecord.model_validate_json(resp.content)
        except ValidationError:
            record = None
        if resp.status_code != 200 or record is None or record.id != driver_id:
            self.report.add(
                "record", "BROKEN", f"GET {driver_id}: HTTP {resp.status_code}, no record of it"
            )
            return
        self.report.add("record", "ok", f"GET {driver_id}: record parses")
        etag = resp.headers.get("etag")
        if not etag:
            self.report.add("etag", "BROKEN", "no ETag: every re-check costs a full fetch")
            return
        again = await self._send(client, "GET", path, headers={"if-none-match": etag})
        if again.status_code == 304:
            self.report.add("etag", "ok", "If-None-Match answered 304")
        else:
            self.report.add(
                "etag", "BROKEN", f"If-None-Match answered {again.status_code}, not 304"
            )

    async def _errors(self, client: httpx.AsyncClient) -> None:
        resp = await self._send(client, "GET", f"/v1/drivers/{MISSING_ID}")
        body = self._json(resp)
        if resp.status_code != 404:
            self.report.add("errors", "BROKEN", f"unknown driver: HTTP {resp.status_code}, not 404")
        elif not (isinstance(body, dict) and isinstance(body.get("detail"), str)):
            self.report.add("errors", "BROKEN", "404 body is not JSON with a string detail")
        else:
            self.report.add("errors", "ok", f"404 {{detail: {_one_line(body['detail'])!r}}}")

    def _check_spec(self, name: str) -> tuple[str, str | None]:
        """``(url or remote check name, kind)``; a ConfigError for what cannot be probed."""
        if name not in self.config.checks and name not in BUILTINS:
            raise ConfigError(f"--check {name}: no such check in the pipeline or builtins")
        spec = self.config.check_spec(name)
        if spec.kind == "http":
            return str(spec.url), "http"
        remote = str(spec.options.get("check", name))
        if spec.kind == "builtin" and name in _REMOTE_CHECKS:
            return remote, "builtin"
        raise ConfigError(f"--check {name}: a {spec.kind} check that calls no HTTP endpoint")

    async def _check(
        self, client: httpx.AsyncClient, name: str, driver: DriverSummary | None
    ) -> None:
        if driver is None:
            self.report.add(f"check {name}", "BROKEN", "no listed driver to send")
            return
        target, kind = self._check_spec(name)
        body = {"driver_id": driver.id, "version": driver.version}
        if kind == "builtin":
            resp = await self._send(
                client, "POST", f"/v1/checks/{quote(target, safe='')}", json=body
            )
            model: type[CheckResponse] | type[_CheckAnswer] = CheckResponse
        else:
            spec = self.config.check_spec(name)
            async with httpx.AsyncClient(
                transport=self._transport,
                timeout=spec.timeout_s,
                auth=build_auth(
                    spec.auth,
                    f"checks.{name}.auth",
                    environ=self._environ,
                    transport=self._transport,
                ),
            ) as other:
                resp = await self._send(other, "POST", target, json=body)
            model = _CheckAnswer
        where = f"check {name}"
        if resp.status_code in (401, 403):
            self.report.add(where, "BROKEN", f"HTTP {resp.status_code}: credentials refused")
            return
        try:
            answer = model.model_validate_json(resp.content)
        except ValidationError:
            self.report.add(
                where, "BROKEN", f"HTTP {resp.status_code}: answer is not {{passed, reason}}"
            )
            return
        if resp.status_code != 200:
            self.report.add(where, "BROKEN", f"HTTP {resp.status_code}")
            return
        self.report.add(where, "ok", f"{driver.id}: passed={answer.passed}")

    def _signals(self) -> None:
        forms = ", ".join(sorted(self._retry_after_forms)) or "no 429/503 met"
        self.report.add("retry-after", "info", forms)
        headers = "; ".join(f"{k}: {v}" for k, v in sorted(self._ratelimit.items()))
        self.report.add("ratelimit", "info", headers or "no RateLimit headers sent")
        p50, p99 = latency_ms(self.report.latencies_s)
        self.report.add(
            "latency",
            "info",
            f"p50 {p50} ms, p99 {p99} ms over {len(self.report.latencies_s)} requests",
        )


def run_probe(
    config: PipelineConfig,
    *,
    check: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    environ: Mapping[str, str] | None = None,
    min_gap_s: float = MIN_GAP_S,
) -> ProbeReport:
    prober = Prober(config, transport=transport, environ=environ, min_gap_s=min_gap_s)
    return asyncio.run(prober.run(check))


def format_report(report: ProbeReport) -> list[str]:
    width = max(len(i.name) for i in report.items) if report.items else 4
    lines = [
        f"probe of {report.catalog}: {report.requests} requests",
        f"{'item'.ljust(width)}  {'result':6}  detail",
    ]
    lines += [f"{i.name.ljust(width)}  {i.status:6}  {i.detail}" for i in report.items]
    return lines


def broken_lines(report: ProbeReport) -> list[str]:
    """One line per broken item, for stderr."""
    return [f"probe: {i.name}: {i.detail}" for i in report.items if i.status == "BROKEN"]

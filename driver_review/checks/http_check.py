"""The ``http`` check kind: a user's own decision API, spoken in the smallest contract.

``POST <url>`` with ``{"driver_id": ..., "version": ...}``; the answer is
``{"passed": <bool>, "reason": <str>}`` (``reason`` and a ``details`` object optional).
Anything else raises: a half-understood answer is never taken for a verdict.
"""

from __future__ import annotations

import asyncio
from email.utils import parsedate_to_datetime
from time import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from driver_review.catalog.models import DriverRecord
from driver_review.checks.base import CheckContext, Outcome
from driver_review.errors import (
    BadRequest,
    MalformedResponse,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
)
from driver_review.identifiers import redact_httpx_logs, redact_in, redact_url

redact_httpx_logs()  # httpx logs each request's whole URL, credentials and all


class _Answer(BaseModel):
    # Strict: "passed": "false" is a truthy string, exactly the mistake to refuse.
    model_config = ConfigDict(extra="ignore")

    passed: StrictBool
    reason: StrictStr = ""
    details: dict[str, Any] = {}


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None


class HttpCheck:
    """One ``http``-kind check. Makes one attempt: an ``error`` is retried by the pipeline
    later, so retrying here too would only multiply load on a struggling endpoint."""

    def __init__(self, name: str, url: str, timeout_s: float) -> None:
        self.name = name
        self.url = url
        #: The URL as shown (errors, reasons in the results, logs): no credentials or query.
        self.shown_url = redact_url(url)
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"HttpCheck({self.name!r}, {self.shown_url!r})"

    async def __call__(self, driver: DriverRecord, ctx: CheckContext) -> Outcome:
        body = {"driver_id": driver.id, "version": driver.version}
        where = f"check {self.name}: POST {self.shown_url}"
        try:
            # httpx bounds each phase; this bounds the whole exchange (a server trickling
            # bytes would otherwise never time out).
            async with asyncio.timeout(self.timeout_s):
                if ctx.http is not None:
                    resp = await ctx.http.post(self.url, json=body, timeout=self.timeout_s)
                else:
                    async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                        resp = await client.post(self.url, json=body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise TransportError(f"{where}: timed out after {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            detail = redact_in(str(exc), self.url)
            raise TransportError(f"{where}: {type(exc).__name__}: {detail}") from exc
        self._raise_for_status(resp, where)
        try:
            answer = _Answer.model_validate_json(resp.content)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "body"
            raise MalformedResponse(
                f"{where}: answer {field}: {err['msg']}", status=resp.status_code
            ) from None
        return Outcome(answer.passed, answer.reason, answer.details)

    @staticmethod
    def _raise_for_status(resp: httpx.Response, where: str) -> None:
        status = resp.status_code
        if 200 <= status < 300:
            return
        msg = f"{where}: HTTP {status}"
        if status == 429:
            raise RateLimited(
                msg, status=status, retry_after_s=_retry_after_s(resp.headers.get("retry-after"))
            )
        if status >= 500:
            raise ServerError(msg, status=status)
        if status == 404:
            raise NotFound(msg, status=status)
        if 400 <= status < 500:
            raise BadRequest(msg, status=status)
        raise MalformedResponse(f"{msg} (unexpected)", status=status)

"""The ``http`` check kind: a user's own decision API, spoken in the smallest contract.

``POST <url>`` with ``{"driver_id": ..., "version": ...}``; the answer is
``{"passed": <bool>, "reason": <str>}`` (``reason`` and a ``details`` object optional).
Anything else raises: a half-understood answer is never taken for a verdict.

Every attempt waits for a permit of the check endpoint's governor (``ctx.limiter``: the
endpoint's own key, shared cluster-wide) and reports the response to it, so a scanner
with a limit far below the catalog's is paced at *its* limit. A 429, or a 503 with
``Retry-After``, is the endpoint asking us to wait, not an answer: the check waits (the
governor pauses every caller of that endpoint) and tries again, up to ``max_attempts``
within ``max_wait_s``, permit waits included. Past either bound it raises
:class:`RateLimited` and the stage is ``error``, retried later. Other failures make one
attempt: the pipeline retries them later, and retrying here would only add load to a
struggling endpoint.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from driver_review.catalog.base import Limiter
from driver_review.catalog.models import DriverRecord
from driver_review.checks.base import CheckContext, Outcome
from driver_review.errors import (
    MalformedResponse,
    RateLimited,
    TransportError,
    error_for_status,
    one_line,
)
from driver_review.identifiers import endpoint_key, redact_httpx_logs, redact_url
from driver_review.limiter import on_time
from driver_review.retry import parse_retry_after

redact_httpx_logs()  # httpx logs each request's whole URL, credentials and all

#: Without a limiter (tests, a bare ``run_stage``) a 429 without Retry-After waits this
#: long, doubling per attempt; with one, the governor's slower schedule is the wait.
BACKOFF_S = 0.2


class _Answer(BaseModel):
    # Strict: "passed": "false" is a truthy string, exactly the mistake to refuse.
    model_config = ConfigDict(extra="ignore")

    passed: StrictBool
    reason: StrictStr = ""
    details: dict[str, Any] = {}


class HttpCheck:
    """One ``http``-kind check (see the module doc for pacing and retries)."""

    def __init__(
        self,
        name: str,
        url: str,
        timeout_s: float,
        *,
        auth: httpx.Auth | None = None,
        rate_key: str | None = None,
        max_attempts: int = 5,
        max_wait_s: float = 60.0,
    ) -> None:
        self.name = name
        self.url = url
        #: The URL as shown (errors, reasons in the results, logs): no credentials or query.
        self.shown_url = redact_url(url)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.max_wait_s = max_wait_s
        #: The governor key this check paces under (credentials and query never in it).
        self.endpoint_key = endpoint_key(url, rate_key)
        self._auth = auth
        # Errors, logs and results name the endpoint without credentials or query.
        self._where = f"check {name}: POST {redact_url(url)}"

    def __repr__(self) -> str:
        return f"HttpCheck({self.name!r}, {redact_url(self.url)!r})"

    async def __call__(self, driver: DriverRecord, ctx: CheckContext) -> Outcome:
        body = {"driver_id": driver.id, "version": driver.version}
        deadline = time.monotonic() + self.max_wait_s
        attempt = 1
        while True:
            await self._permit(ctx.limiter, deadline)
            sent = time.monotonic()
            resp = await self._post(body, ctx)
            if ctx.limiter is not None:
                elapsed_s = time.monotonic() - sent
                ctx.limiter.observe(resp.status_code, resp.headers, elapsed_s=elapsed_s)
            try:
                return self._answer(resp)
            except RateLimited as exc:
                wait_s = exc.retry_after_s
                if wait_s is None:
                    wait_s = 0.0 if ctx.limiter is not None else BACKOFF_S * 2 ** (attempt - 1)
                if attempt >= self.max_attempts or time.monotonic() + wait_s > deadline:
                    raise RateLimited(
                        f"{exc} (attempt {attempt}/{self.max_attempts}, "
                        f"wait budget {self.max_wait_s:g}s)",
                        status=exc.status,
                        retry_after_s=exc.retry_after_s,
                    ) from None
                # The governor pauses the endpoint too; sleeping here as well covers the
                # moment before that pause reaches this process's permits.
                await asyncio.sleep(wait_s)
            attempt += 1

    async def _permit(self, limiter: Limiter | None, deadline: float) -> None:
        if limiter is None:
            return
        left_s = deadline - time.monotonic()
        paused_s = getattr(limiter, "paused_for_s", lambda: 0.0)()
        if left_s <= 0 or paused_s > left_s:
            raise RateLimited(
                f"{self._where}: {self.endpoint_key} is paused for {paused_s:.0f}s, beyond "
                f"the wait budget {self.max_wait_s:g}s",
                retry_after_s=paused_s or None,
            )
        try:
            async with asyncio.timeout(left_s):
                await limiter.acquire()
        except TimeoutError:
            raise RateLimited(
                f"{self._where}: no permit for {self.endpoint_key} within "
                f"{self.max_wait_s:g}s (the endpoint is at its limit)"
            ) from None

    async def _post(self, body: dict[str, str], ctx: CheckContext) -> httpx.Response:
        auth: Any = self._auth if self._auth is not None else httpx.USE_CLIENT_DEFAULT
        # The permit was just taken: a slow new connection waits for a fresh one where the
        # endpoint refuses requests bunched together.
        extensions = (
            {"trace": on_time(ctx.limiter.acquire, ctx.limiter.space)}
            if ctx.limiter is not None and ctx.limiter.strict_spacing
            else {}
        )
        try:
            # httpx bounds each phase; this bounds the whole exchange (a server trickling
            # bytes would otherwise never time out).
            async with asyncio.timeout(self.timeout_s):
                if ctx.http is not None:
                    return await ctx.http.post(
                        self.url,
                        json=body,
                        timeout=self.timeout_s,
                        auth=auth,
                        extensions=extensions,
                    )
                async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                    return await client.post(self.url, json=body, auth=auth, extensions=extensions)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise TransportError(f"{self._where}: timed out after {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            # The class name only: httpx messages may quote the URL, query and all.
            raise TransportError(f"{self._where}: {type(exc).__name__}") from exc

    def _answer(self, resp: httpx.Response) -> Outcome:
        status = resp.status_code
        msg = f"{self._where}: HTTP {status}"
        if not 200 <= status < 300:
            retry_after_s = parse_retry_after(resp.headers.get("retry-after"), time.time())
            if status == 503 and retry_after_s is not None:
                # The endpoint says when to come back: waited out like a 429 (the loop in
                # ``__call__``), not an answer and not yet a failure.
                raise RateLimited(msg, status=status, retry_after_s=retry_after_s)
            raise error_for_status(status, msg, retry_after_s=retry_after_s)
        try:
            answer = _Answer.model_validate_json(resp.content)
        except ValidationError as exc:
            raise MalformedResponse(
                f"{self._where}: answer {one_line(exc, top='body')}", status=status
            ) from None
        return Outcome(answer.passed, answer.reason, answer.details)

"""How a peer reviews drivers: the loop a good engineer writes, with the product's checks.

Fetch the driver once, run its stage's checks (:mod:`driver_review.checks`, the same code
the stage workers run), PUT the decision, and take the PUT's answer for where the driver
is now — as driver-review does — fetching again only when the catalog says the driver
moved on (409/404). All drivers of a process share one client and run under a semaphore
(``concurrency``), so the pool of connections is bounded and reused.

Retries belong to the peer, not to the client (:class:`PeerCatalog` around an
:class:`~driver_review.catalog.http.HttpCatalog` that tries once), with one of two
policies:

- ``jittered``: the server's ``Retry-After`` as a floor plus exponential full jitter on
  top, so clients throttled together do not come back together;
- ``botocore``: the AWS SDK's standard backoff (:func:`.cubic.standard_delay_s`), for the
  adaptive peer, whose pacing is :class:`.cubic.ClientRateLimiter`.

Every wait checks the peer's deadline, so a peer that runs out of time stops within a
second or so instead of holding the benchmark.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import (
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
)
from driver_review.checks import build_stage_checks, context_factory, run_stage
from driver_review.config import CatalogConfig, load_config
from driver_review.errors import CatalogError, Conflict, NotFound, RateLimited, RetryableError
from driver_review.quarantine import BadRow
from jobs.bench.cubic import ClientRateLimiter, standard_delay_s

Policy = Literal["jittered", "botocore"]
POLICIES: tuple[Policy, ...] = ("jittered", "botocore")

MAX_ATTEMPTS = 15  # per call: patient enough to reach the truth through a 429 storm
JITTER_BASE_S = 0.25  # first retry's spread above Retry-After; doubles per attempt
JITTER_CAP_S = 4.0
ERROR_PAUSE_S = 1.0  # before reviewing a stage again after an unanswerable check
MAX_STEPS = 12  # stages plus retries: a driver that needs more is given up
T = TypeVar("T")


class Abandoned(Exception):
    """The peer's deadline passed."""


def jittered_delay_s(attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
    """Wait before retrying after failed ``attempt`` (1-based): ``Retry-After`` (or 0) plus
    ``uniform(0, min(cap, base * 2**(attempt-1)))``."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    spread = min(JITTER_CAP_S, JITTER_BASE_S * 2 ** min(attempt - 1, 32))
    return max(0.0, retry_after_s or 0.0) + rng.uniform(0.0, spread)


class PeerCatalog:
    """The catalog calls a peer makes, each retried by the peer's policy until the
    deadline; duck-types the :class:`~driver_review.catalog.base.Catalog` the checks use."""

    def __init__(
        self,
        url: str,
        deadline: float,
        *,
        policy: Policy,
        concurrency: int,
        limiter: ClientRateLimiter | None = None,
        seed: int | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"retry policy must be one of {POLICIES}, got {policy!r}")
        config = CatalogConfig(url=url, max_attempts=1, max_connections=max(1, concurrency))
        self.http = HttpCatalog(config, limiter=limiter)
        self.deadline = deadline
        self.policy = policy
        self.limiter = limiter
        self.rng = random.Random(seed)
        self.retries = Counter[str]()

    def _delay_s(self, attempt: int, exc: RetryableError) -> float:
        if self.policy == "botocore":
            return standard_delay_s(
                attempt,
                throttled=isinstance(exc, RateLimited),
                retry_after_s=exc.retry_after_s,
                rand=self.rng.random,
            )
        return jittered_delay_s(attempt, exc.retry_after_s, self.rng)

    async def sleep(self, delay_s: float) -> None:
        if time.time() + delay_s > self.deadline:
            raise Abandoned
        await asyncio.sleep(delay_s)

    async def _retry(self, call: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return await call()
            except RetryableError as exc:
                if attempt == MAX_ATTEMPTS:
                    raise
                self.retries[type(exc).__name__] += 1
                await self.sleep(self._delay_s(attempt, exc))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def iter_drivers(self) -> AsyncIterator[DriverSummary | BadRow]:
        return self.http.iter_drivers()

    async def get_driver(
        self, driver_id: str, *, etag: str | None = None
    ) -> tuple[DriverRecord | None, str | None]:
        return await self._retry(lambda: self.http.get_driver(driver_id, etag=etag))

    async def get_package(self, driver_id: str, *, version: str | None = None) -> bytes:
        return await self._retry(lambda: self.http.get_package(driver_id, version=version))

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        return await self._retry(lambda: self.http.run_check(check, driver_id, version))

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        return await self._retry(
            lambda: self.http.put_decision(driver_id, version, stage, decision)
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    def stats(self) -> dict[str, Any]:
        return self.http.stats()


async def follow(catalog: PeerCatalog, checks: dict, driver_id: str, reviewer: str) -> Counter[str]:
    """Review ``driver_id`` through its stages; counts of what happened."""
    counts: Counter[str] = Counter()
    ctx = context_factory(catalog)  # type: ignore[arg-type]  # duck-typed Catalog
    record: DriverRecord | None = None
    for _ in range(MAX_STEPS):
        if time.time() > catalog.deadline:
            raise Abandoned
        try:
            if record is None:
                record, _ = await catalog.get_driver(driver_id)
                counts["fetches"] += 1
                assert record is not None  # no ETag sent, so never a 304
            if record.status != "in_review" or record.stage is None:
                counts["final"] += 1
                return counts
            result = await run_stage(record, checks[record.stage], ctx)
            if result.verdict == "error":
                counts["check_errors"] += 1
                await catalog.sleep(ERROR_PAUSE_S)
                continue
            answer = await catalog.put_decision(
                driver_id,
                record.version,
                record.stage,
                DecisionRequest(verdict=result.verdict, reasons=result.reasons, reviewer=reviewer),
            )
            counts["decisions"] += 1
            # The answer says where the driver is now: the same version, at its next
            # stage or final. No fetch needed (driver-review's cache does the same).
            record = record.model_copy(update={"stage": answer.stage, "status": answer.status})
        except (Conflict, NotFound):
            counts["conflicts"] += 1  # moved on meanwhile: look again
            record = None
        except CatalogError:
            counts["call_errors"] += 1
            record = None
            await catalog.sleep(ERROR_PAUSE_S)
    counts["gave_up"] += 1
    return counts


async def review_all(
    catalog: PeerCatalog, checks: dict, driver_ids: Sequence[str], reviewer: str, concurrency: int
) -> dict[str, Any]:
    """Review drivers through ``catalog`` with at most ``concurrency`` in flight."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(driver_id: str) -> Counter[str]:
        async with gate:
            return await follow(catalog, checks, driver_id, reviewer)

    results = await asyncio.gather(*(one(d) for d in driver_ids), return_exceptions=True)
    total: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for r in results:
        if isinstance(r, Abandoned):
            total["abandoned"] += 1
        elif isinstance(r, BaseException):
            total["crashed"] += 1
            errors[f"{type(r).__name__}: {r}"[:200]] += 1
        else:
            total.update(r)
    out: dict[str, Any] = dict(total)
    if errors:
        out["crash_reasons"] = dict(errors.most_common(3))
    return out


async def review_many(
    url: str,
    driver_ids: Sequence[str],
    deadline: float,
    reviewer: str,
    *,
    concurrency: int,
    policy: Policy = "jittered",
    adaptive: bool = False,
) -> dict[str, Any]:
    """Review drivers with one client (one per process) and a semaphore."""
    checks = build_stage_checks(load_config())
    limiter = ClientRateLimiter() if adaptive else None
    catalog = PeerCatalog(url, deadline, policy=policy, concurrency=concurrency, limiter=limiter)
    try:
        out = await review_all(catalog, checks, driver_ids, reviewer, concurrency)
    finally:
        await catalog.aclose()
    out["retries"] = dict(catalog.retries)
    if limiter is not None:
        out["limiter"] = limiter.stats()
    return out


def review_sync(
    url: str, driver_ids: Sequence[str], deadline: float, reviewer: str, **options: Any
) -> dict[str, Any]:
    if time.time() > deadline:
        return {"abandoned": len(driver_ids)}
    return asyncio.run(review_many(url, driver_ids, deadline, reviewer, **options))

"""How the peers review one driver: the obvious loop, with the product's own checks.

Fetch the driver, run its stage's checks (:mod:`driver_review.checks`, the same code the
stage workers run), PUT the decision, and follow an approval to the next stage by fetching
the driver again — until it is published or rejected. The client is
:class:`~driver_review.catalog.http.HttpCatalog` without a limiter: it retries a 429 after
the server's ``Retry-After`` and backs off on other failures, like any careful client.

Every wait checks the peer's deadline, so a peer that runs out of time stops within a
second or so instead of holding the benchmark.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import DecisionRequest
from driver_review.checks import build_stage_checks, context_factory, run_stage
from driver_review.config import CatalogConfig, load_config
from driver_review.errors import CatalogError, Conflict, NotFound

#: A plain client is patient: plenty of attempts, short backoff, Retry-After honoured.
MAX_ATTEMPTS = 20
BACKOFF_MAX_S = 2.0
ERROR_PAUSE_S = 1.0  # before reviewing a stage again after an unanswerable check
MAX_STEPS = 12  # stages plus retries: a driver that needs more is given up


class Abandoned(Exception):
    """The peer's deadline passed."""


def _sleeper(deadline: float):
    async def sleep(delay_s: float) -> None:
        if time.time() + delay_s > deadline:
            raise Abandoned
        await asyncio.sleep(delay_s)

    return sleep


def plain_client(url: str, deadline: float) -> HttpCatalog:
    config = CatalogConfig(url=url, max_attempts=MAX_ATTEMPTS, backoff_max_s=BACKOFF_MAX_S)
    return HttpCatalog(config, sleep=_sleeper(deadline))


async def follow(catalog: HttpCatalog, checks: dict, driver_id: str, deadline: float,
                 reviewer: str) -> Counter[str]:
    """Review ``driver_id`` through its stages; counts of what happened."""
    counts: Counter[str] = Counter()
    sleep = _sleeper(deadline)
    ctx = context_factory(catalog)
    for _ in range(MAX_STEPS):
        if time.time() > deadline:
            raise Abandoned
        try:
            record, _ = await catalog.get_driver(driver_id)
            assert record is not None  # no ETag sent, so never a 304
            if record.status != "in_review" or record.stage is None:
                counts["final"] += 1
                return counts
            result = await run_stage(record, checks[record.stage], ctx)
            if result.verdict == "error":
                counts["check_errors"] += 1
                await sleep(ERROR_PAUSE_S)
                continue
            answer = await catalog.put_decision(
                driver_id, record.version, record.stage,
                DecisionRequest(verdict=result.verdict, reasons=result.reasons,
                                reviewer=reviewer),
            )
            counts["decisions"] += 1
            if answer.status != "in_review":
                counts["final"] += 1
                return counts
        except (Conflict, NotFound):
            counts["conflicts"] += 1  # moved on meanwhile: look again
        except CatalogError:
            counts["call_errors"] += 1
            await sleep(ERROR_PAUSE_S)
    counts["gave_up"] += 1
    return counts


async def review_many(url: str, driver_ids: Sequence[str], deadline: float,
                      reviewer: str) -> dict[str, Any]:
    """Review drivers concurrently with one client; ``abandoned`` when out of time."""
    checks = build_stage_checks(load_config())
    catalog = plain_client(url, deadline)
    total: Counter[str] = Counter()
    try:
        results = await asyncio.gather(
            *(follow(catalog, checks, d, deadline, reviewer) for d in driver_ids),
            return_exceptions=True,
        )
    finally:
        await catalog.aclose()
    for r in results:
        if isinstance(r, Abandoned):
            total["abandoned"] += 1
        elif isinstance(r, BaseException):
            total["crashed"] += 1
        else:
            total.update(r)
    return dict(total)


def review_sync(url: str, driver_ids: Sequence[str], deadline: float,
                reviewer: str) -> dict[str, Any]:
    if time.time() > deadline:
        return {"abandoned": len(driver_ids)}
    return asyncio.run(review_many(url, driver_ids, deadline, reviewer))

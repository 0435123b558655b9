"""Run one stage's checks on one driver, concurrently, and decide the stage's verdict.

Pure asyncio: the Ray stage worker calls :func:`run_stage` for each driver it holds.

Verdict rule (DESIGN.md, Domain): any check *failed* → ``rejected`` (reasons of the failed
checks); otherwise any check in *error* → ``error`` (retried later); otherwise
``approved``. A failure is a fact about the driver, so it decides even while another check
could not be answered: the driver cannot pass this stage whatever that check would say.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from driver_review.catalog.models import DriverRecord, Verdict
from driver_review.checks.base import ContextFactory, NamedCheck, one_line
from driver_review.errors import DriverReviewError

CheckStatus = Literal["passed", "failed", "error"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: CheckStatus
    reason: str
    duration_s: float
    details: dict[str, Any] = field(default_factory=dict)
    #: For ``error``: the exception's class name, e.g. ``RateLimited`` (empty otherwise).
    error_type: str = ""


@dataclass(frozen=True, slots=True)
class StageResult:
    driver_id: str
    version: str
    verdict: Verdict
    #: check name → reason, for the checks that decided the verdict (failed ones when
    #: rejected, errored ones when error; empty when approved).
    reasons: dict[str, str]
    checks: tuple[CheckResult, ...]
    duration_s: float

    def by_name(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)


async def run_one(
    driver: DriverRecord, check: NamedCheck, ctx_factory: ContextFactory
) -> CheckResult:
    """Run one check; never raises except on cancellation."""
    start = time.monotonic()
    try:
        ctx = ctx_factory(check)
        if check.timeout_s is None:
            outcome = await check.run(driver, ctx)
        else:
            async with asyncio.timeout(check.timeout_s):
                outcome = await check.run(driver, ctx)
        if outcome.passed:
            status: CheckStatus = "passed"
            reason = outcome.reason
        else:
            status, reason = "failed", outcome.reason or "check failed"
        return CheckResult(
            check.name, status, reason, time.monotonic() - start, dict(outcome.details)
        )
    except Exception as exc:
        return CheckResult(
            check.name,
            "error",
            _error_reason(exc, check),
            time.monotonic() - start,
            error_type=type(exc).__name__,
        )


def _error_reason(exc: Exception, check: NamedCheck) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        bound = f" after {check.timeout_s:g}s" if check.timeout_s is not None else ""
        return f"timed out{bound}"
    if isinstance(exc, DriverReviewError):
        return one_line(exc)
    # Not one of ours (a bug in a user check, say): the class name says what the bare
    # message does not ("KeyError: 'x'" rather than "'x'").
    return f"{type(exc).__name__}: {one_line(exc)}"


def verdict_of(results: Sequence[CheckResult]) -> tuple[Verdict, dict[str, str]]:
    failed = {r.name: r.reason for r in results if r.status == "failed"}
    if failed:
        return "rejected", failed
    errors = {r.name: r.reason for r in results if r.status == "error"}
    if errors:
        return "error", errors
    return "approved", {}


async def run_stage(
    driver: DriverRecord, checks: Sequence[NamedCheck], ctx_factory: ContextFactory
) -> StageResult:
    """Run ``checks`` on ``driver`` concurrently and decide the stage.

    Every check runs to its own end; one failing or raising does not cancel the others,
    so the results always say what each check found.
    """
    start = time.monotonic()
    results = await asyncio.gather(*(run_one(driver, c, ctx_factory) for c in checks))
    verdict, reasons = verdict_of(results)
    return StageResult(
        driver.id, driver.version, verdict, reasons, tuple(results), time.monotonic() - start
    )

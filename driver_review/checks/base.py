"""What a check is: one async callable with one signature.

::

    async def check(driver: DriverRecord, ctx: CheckContext) -> Outcome

A check answers *passed* or *failed* through its :class:`Outcome`. A check that cannot be
answered (the catalog is down, a timeout, a malformed reply) **raises**; the runner records
that as ``error`` with the exception's one-line message and it is retried later. Returning
``Outcome(passed=False)`` for "I could not tell" would reject a driver for our own outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import httpx

from driver_review.catalog.base import Catalog, Limiter
from driver_review.catalog.models import DriverRecord

#: Runs ``fn(*args)`` away from the event loop and awaits its result, like
#: :func:`asyncio.to_thread`. The Ray stage worker passes one that reserves CPU.
RunCpu = Callable[..., Awaitable[Any]]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer of a check that could be answered."""

    passed: bool
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, **details: Any) -> Outcome:
        return cls(True, "", details)

    @classmethod
    def fail(cls, reason: str, **details: Any) -> Outcome:
        return cls(False, reason, details)


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a check may use besides the driver record.

    ``options`` are the check's ``CheckSpec.options`` from the pipeline file. ``http`` is a
    shared client for ``http``-kind checks; without one they open a client per call.
    ``limiter`` paces the check's own endpoint (``http`` checks; None: unpaced).
    """

    catalog: Catalog
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    run_cpu: RunCpu = asyncio.to_thread
    http: httpx.AsyncClient | None = None
    limiter: Limiter | None = None


class Check(Protocol):
    """The one signature every check has."""

    def __call__(self, driver: DriverRecord, ctx: CheckContext, /) -> Awaitable[Outcome]: ...


@dataclass(frozen=True, slots=True)
class NamedCheck:
    """A check as a stage runs it: its pipeline name, the callable, its options, and an
    overall time bound (``None``: the check's own I/O timeouts are the bound)."""

    name: str
    run: Check
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    timeout_s: float | None = None


def one_line(exc: BaseException) -> str:
    """An exception as the single line that goes into results and logs."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


#: Builds the context one check of a stage runs with (options differ per check).
ContextFactory = Callable[[NamedCheck], CheckContext]


def context_factory(
    catalog: Catalog,
    *,
    run_cpu: RunCpu = asyncio.to_thread,
    http: httpx.AsyncClient | None = None,
    limiters: Mapping[str, Limiter] | None = None,
) -> ContextFactory:
    """The usual :data:`ContextFactory`: shared catalog, CPU runner and client, and each
    check's own options and limiter (``limiters`` by check name)."""
    by_name = limiters or {}

    def make(check: NamedCheck) -> CheckContext:
        return CheckContext(
            catalog=catalog,
            options=check.options,
            run_cpu=run_cpu,
            http=http,
            limiter=by_name.get(check.name),
        )

    return make

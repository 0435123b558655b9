"""The one interface through which everything talks to the vendor catalog.

A team whose vendor API differs writes one class with these methods and changes nothing
else. Every method raises only :class:`~driver_review.errors.CatalogError` subclasses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Protocol, runtime_checkable

from driver_review.catalog.models import (
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
    Page,
)
from driver_review.quarantine import BadRow


class Limiter(Protocol):
    """Outbound pacing for one endpoint key (see :mod:`driver_review.governor`).

    ``acquire`` waits for a permit; ``observe`` reports every response's status and headers
    (429s, ``Retry-After``, ``RateLimit``) so the limiter can adapt.
    """

    async def acquire(self) -> None: ...

    def observe(self, status: int, headers: Mapping[str, str]) -> None: ...


@runtime_checkable
class Catalog(Protocol):
    async def list_page(self, *, cursor: str | None = None) -> Page: ...

    def iter_drivers(self) -> AsyncIterator[DriverSummary | BadRow]:
        """Every driver, following cursors to the end. A row that cannot be taken comes
        as a :class:`BadRow` in its place (the page goes on)."""
        ...

    def changes_since(self, since: datetime) -> AsyncIterator[DriverSummary | BadRow]:
        """Drivers changed after ``since``, in change-time order, following cursors; bad
        rows as :class:`BadRow`, like ``iter_drivers``."""
        ...

    async def get_driver(
        self, driver_id: str, *, etag: str | None = None
    ) -> tuple[DriverRecord | None, str | None]:
        """``(record, etag)``; ``(None, etag)`` when ``etag`` is still current (304)."""
        ...

    async def get_package(self, driver_id: str) -> bytes: ...

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse: ...

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse: ...

    async def aclose(self) -> None: ...

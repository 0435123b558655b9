"""The one interface through which everything talks to the vendor catalog.

A team whose vendor API differs writes one class with these methods, names its factory in
the pipeline file (``catalog.adapter: "package.module:factory"``, see
:mod:`driver_review.catalog.adapter`) and changes nothing else. The contract:

* **Values** are the wire models of :mod:`driver_review.catalog.models` (translate the
  vendor's shapes into them); stage names are the pipeline's.
* **Rows** of a listing or of the changes are yielded one at a time; a row that cannot be
  taken is yielded as a :class:`~driver_review.quarantine.BadRow` in its place
  (``quarantine.bad_row``), never raised: one bad row must not stop a page.
* **Errors** are :class:`~driver_review.errors.CatalogError` subclasses only:
  ``NotFound`` (no such driver), ``Conflict`` (a decision for a version or stage that is no
  longer current), ``BadRequest`` (retrying cannot help) and ``RetryableError`` with its
  ``retry_after_s`` when known (429, 5xx, timeouts, malformed answers). Retry inside a
  call as long as it is cheap; what escapes is recorded as ``error`` and retried later.
* **Pacing**: call ``limiter.acquire()`` before every request and ``limiter.observe(status,
  headers, elapsed_s=...)`` with every response, so the governor keeps the vendor at its
  limit.
* ``put_decision`` is idempotent on (driver, version, stage): repeating it is harmless.

``tests/integration/other_vendor.py`` is a worked example: an adapter over an API with
offset paging, camelCase fields, other status words and a different decision route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from driver_review.catalog.models import (
    CheckResponse,
    DecisionRequest,
    DecisionResponse,
    DriverRecord,
    DriverSummary,
)
from driver_review.quarantine import BadRow


class Limiter(Protocol):
    """Outbound pacing for one endpoint key (see :mod:`driver_review.governor`).

    ``acquire`` waits for a permit; ``observe`` reports every response's status and headers
    (429s, ``Retry-After``, ``RateLimit``) so the limiter can adapt, and ``elapsed_s``, how
    long ago its request was sent: a limiter admits or refuses a request when it arrives,
    and a refusal comes back long before a success the server behind it took its time on.
    """

    async def acquire(self) -> None: ...

    def observe(
        self, status: int, headers: Mapping[str, str], *, elapsed_s: float = 0.0
    ) -> None: ...

    @property
    def strict_spacing(self) -> bool:
        """The endpoint refuses requests bunched closer than its rate: a request that
        leaves late for its permit (opening a connection) waits for a fresh one."""
        ...

    async def space(self) -> None:
        """Called as a request's headers are about to leave, where ``strict_spacing``:
        wait until the endpoint's spacing has passed since the last request sent to it
        from this machine (see :class:`~driver_review.limiter.NodeEndpoint`)."""
        ...


@runtime_checkable
class Catalog(Protocol):
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

    async def get_package(self, driver_id: str, *, version: str | None = None) -> bytes:
        """The package bytes of the driver's current version (with ``version``: a
        ``Conflict`` unless that version is current)."""
        ...

    async def run_check(self, check: str, driver_id: str, version: str) -> CheckResponse:
        """A vendor-side check (``POST /v1/checks/{check}`` in the REST contract)."""
        ...

    async def put_decision(
        self, driver_id: str, version: str, stage: str, decision: DecisionRequest
    ) -> DecisionResponse:
        """Record a verdict; the answer says where the driver is now."""
        ...

    async def aclose(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        """At least ``calls``: per route, answers by status (for summaries and status)."""
        ...

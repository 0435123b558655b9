"""Wire models of the catalog REST contract (``/v1``), shared by the HTTP adapter and the
simulator so that both sides speak exactly one schema.

Times are timezone-aware UTC datetimes, serialised as RFC 3339.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

#: Status of a driver's current version in the catalog.
Status = Literal["in_review", "published", "rejected"]
#: What a stage decided about one (driver, version).
Verdict = Literal["approved", "rejected", "error"]


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamp must carry a timezone (RFC 3339)")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class _Wire(BaseModel):
    # Extra fields from a newer catalog are ignored; the ones we rely on are validated.
    model_config = ConfigDict(extra="ignore", frozen=True)


class PackageInfo(_Wire):
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class DriverRecord(_Wire):
    """``GET /v1/drivers/{id}``: the full record of a driver's current version."""

    id: str = Field(min_length=1, max_length=128)
    vendor_id: str
    vendor: str
    name: str
    version: str
    previous_version: str | None = None
    stage: str | None = Field(
        description="stage the version is at (in_review), was rejected at (rejected), "
        "or null once published"
    )
    status: Status
    hardware_ids: list[str]
    package: PackageInfo
    os: str | None = None
    released_at: UtcDatetime | None = None
    updated_at: UtcDatetime


class DriverSummary(_Wire):
    """One row of ``GET /v1/drivers`` and of ``GET /v1/drivers/changes``; also a thin ping."""

    id: str = Field(min_length=1, max_length=128)
    version: str
    stage: str | None
    status: Status
    updated_at: UtcDatetime


class Page(_Wire):
    """A cursor page. ``next_cursor`` is null on the last page."""

    items: list[DriverSummary]
    next_cursor: str | None = None


class CheckRequest(_Wire):
    """``POST /v1/checks/{check}`` body."""

    driver_id: str
    version: str


class CheckResponse(_Wire):
    check: str
    driver_id: str
    version: str
    passed: bool
    reason: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class DecisionRequest(_Wire):
    """``PUT /v1/drivers/{id}/versions/{version}/reviews/{stage}`` body."""

    verdict: Literal["approved", "rejected"]
    reasons: dict[str, str] = Field(default_factory=dict)
    reviewer: str = "driver-review"


class DecisionResponse(_Wire):
    """Answer to a decision PUT: where the driver is now. ``duplicate`` when the same
    (driver, version, stage) had been decided before (the PUT changed nothing)."""

    driver_id: str
    version: str
    stage: str | None
    status: Status
    updated_at: UtcDatetime | None = None
    duplicate: bool = False


class WebhookPing(_Wire):
    """Body of a Standard Webhooks message from the catalog.

    ``type`` is ``driver.updated``; ``data`` is a thin summary, or with fat pings the whole
    record under ``data.record``.
    """

    type: Literal["driver.updated"]
    timestamp: UtcDatetime
    data: PingData


class PingData(_Wire):
    """Only ``id`` is required: a *thin* ping (``{"id": ...}``) says that the driver
    changed, and the receiver looks it up. With ``version``, ``status`` and ``updated_at``
    (and ``stage``, null once published) it says what changed; with ``record``, everything."""

    id: str = Field(min_length=1, max_length=128)
    version: str | None = Field(default=None, min_length=1, max_length=64)
    stage: str | None = None
    status: Status | None = None
    updated_at: UtcDatetime | None = None
    record: DriverRecord | None = None

    @property
    def thin(self) -> bool:
        """Whether the ping leaves out what changed (the driver must be looked up)."""
        return self.record is None and (
            self.version is None or self.status is None or self.updated_at is None
        )


WebhookPing.model_rebuild()

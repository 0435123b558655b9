"""HTTP-level pieces of the catalog shared by the state and the routes: refusals that
carry their status, opaque cursors, ETag comparison, and the microsecond clock."""

from __future__ import annotations

import base64
import binascii
import time
from datetime import UTC, datetime, timedelta

MAX_PAGE = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SimError(Exception):
    """A request the catalog refuses; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFoundError(SimError):
    status = 404


class ConflictError(SimError):
    status = 409


class BadRequestError(SimError):
    status = 400


def to_datetime(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def to_us(when: datetime) -> int:
    return (when - EPOCH) // timedelta(microseconds=1)


def wall_clock_us() -> int:
    return time.time_ns() // 1000


def encode_cursor(*parts: str | int) -> str:
    """An opaque cursor: the listing's kind and where it stopped, base64url-encoded."""
    raw = "\x1f".join(str(p) for p in parts).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str, arity: int) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    parts = raw.split("\x1f")
    if len(parts) != arity or parts[0] != kind:
        raise BadRequestError(f"cursor: {cursor!r} is not a cursor this listing issued")
    return parts[1:]


def etag_matches(if_none_match: str, etag: str) -> bool:
    # If-None-Match uses the weak comparison (RFC 9110 §13.1.2): W/ is ignored.
    if if_none_match.strip() == "*":
        return True
    candidates = (tag.strip().removeprefix("W/") for tag in if_none_match.split(","))
    return etag in candidates

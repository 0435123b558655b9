"""The one exception tree of driver-review.

::

    DriverReviewError
    ├── ConfigError                 bad config file, flag or setting (one line, names the field)
    ├── SignatureError              a webhook whose signature, timestamp or id is not acceptable
    ├── Refused                     a webhook request the ingress answers with a 4xx
    │                               (carries ``status``, ``detail`` and a quarantine ``kind``)
    ├── IntakeFull                  the orchestrator's intake is above its high-water mark
    │                               (carries ``retry_after_s``)
    └── CatalogError                anything that went wrong talking to the vendor catalog
        ├── NotFound                404: no such driver / version / check
        ├── Conflict                409: the decision is for a version or stage that is no
        │                           longer current (the driver moved on: not an error to retry)
        ├── BadRequest              other 4xx: our request was wrong; retrying cannot help
        ├── ResponseTooLarge        a body over its route's byte cap (read no further)
        └── RetryableError          worth trying again; carries ``retry_after_s`` (or None)
            ├── RateLimited         429, with the server's Retry-After when it sent one
            ├── ServerError         5xx
            ├── TransportError      timeout, reset, refused, truncated stream
            └── MalformedResponse   a body that is not the JSON shape the contract promises

A ``RetryableError`` that escapes the client has exhausted its attempts: the caller records
the check or decision as ``error`` and it is retried later, never taken for a verdict.

Two helpers keep every HTTP client and every validator saying things the same way:
:func:`error_for_status` is the one map from an HTTP status to the tree above (the catalog
client and the http checks both use it), and :func:`one_line` / :func:`first_error` turn a
pydantic validation error into the one line that names the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from driver_review.identifiers import shown


class DriverReviewError(Exception):
    """Base of every error driver-review raises on purpose."""


class ConfigError(DriverReviewError, ValueError):
    """A config file, flag or setting is wrong. The message is one line naming the field."""


class SignatureError(DriverReviewError):
    """A webhook message failed verification (signature, timestamp, or replay)."""


class Refused(DriverReviewError):
    """A request the ingress answers with a 4xx; nothing of it was enqueued.

    ``kind`` is set when the body was verified but its data cannot be taken (one of
    ``serve_app.webhook.QUARANTINE_KINDS``); None for a refusal before or at the signature."""

    def __init__(self, status: int, detail: str, kind: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind

    def __reduce__(self):  # keep the attributes when the error crosses a process boundary
        return (type(self), (self.status, self.detail, self.kind))


class IntakeFull(DriverReviewError):
    """The orchestrator holds as much as it may; try again after ``retry_after_s``."""

    def __init__(self, message: str = "intake is full", *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # keep the delay when the error crosses a process boundary
        return (_rebuild, (type(self), self.args, {"retry_after_s": self.retry_after_s}))


class CatalogError(DriverReviewError):
    """Talking to the vendor catalog failed."""

    def __init__(self, message: str, *, status: int | None = None, route: str | None = None):
        super().__init__(message)
        self.status = status
        self.route = route

    def __reduce__(self):  # keep the attributes when the error crosses a process boundary
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class NotFound(CatalogError):
    """404 from the catalog."""


class Conflict(CatalogError):
    """409: the driver moved on (new version or stage) since the work was handed out."""


class BadRequest(CatalogError):
    """A 4xx other than 404/409/429: the request itself is wrong."""


class ResponseTooLarge(CatalogError):
    """A response body over the byte cap of its route; retrying would only read it again."""


class RetryableError(CatalogError):
    """A failure that may succeed later; ``retry_after_s`` is the server's hint, if any."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        route: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, status=status, route=route)
        self.retry_after_s = retry_after_s


class RateLimited(RetryableError):
    """429 Too Many Requests."""


class ServerError(RetryableError):
    """5xx from the catalog."""


class TransportError(RetryableError):
    """Timeout, connection reset or refused, or a body cut short."""


class MalformedResponse(RetryableError):
    """The body does not parse, or does not have the shape the contract promises."""


def error_for_status(
    status: int,
    message: str,
    *,
    route: str | None = None,
    retry_after_s: float | None = None,
) -> CatalogError:
    """The error for a non-2xx answer: the one status map of driver-review.

    429 → :class:`RateLimited`, 5xx → :class:`ServerError` (both carry the server's
    ``retry_after_s``), 404 → :class:`NotFound`, 409 → :class:`Conflict` (the resource
    moved on: a conflict, not a malformed request), other 4xx → :class:`BadRequest`;
    anything else (1xx, 3xx) is not an answer the contract allows: :class:`MalformedResponse`.
    """
    if status == 429:
        return RateLimited(message, status=status, route=route, retry_after_s=retry_after_s)
    if 500 <= status < 600:
        return ServerError(message, status=status, route=route, retry_after_s=retry_after_s)
    if status == 404:
        return NotFound(message, status=status, route=route)
    if status == 409:
        return Conflict(message, status=status, route=route)
    if 400 <= status < 500:
        return BadRequest(message, status=status, route=route)
    return MalformedResponse(f"{message} (unexpected status)", status=status, route=route)


class _HasErrors(Protocol):
    """A pydantic ``ValidationError`` or FastAPI's ``RequestValidationError``."""

    def errors(self) -> Sequence[Any]: ...


@dataclass(frozen=True)
class FieldError:
    """The first error of a validation, as one line's parts."""

    loc: tuple[str | int, ...]  # pydantic's location, as it gave it
    path: str  # the location dotted (``top`` when the whole value failed), one line
    message: str  # pydantic's message, with "(and N more)" when there are others
    type: str  # pydantic's error type, e.g. "missing", "int_type"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def first_error(exc: _HasErrors, *, top: str = "(top level)") -> FieldError:
    """The first error of ``exc``, never echoing the input (it could be megabytes or hold
    control characters); a location part that is not printable (a key of a dict the
    sender chose) is shown escaped, so the line stays one line."""
    errors = exc.errors()
    err = errors[0] if errors else {"loc": (), "msg": "invalid", "type": "value_error"}
    loc = tuple(err.get("loc") or ())
    parts = (str(p) if str(p).isprintable() else shown(p) for p in loc)
    message = " ".join(str(err.get("msg", "invalid")).split())
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return FieldError(loc, ".".join(parts) or top, message, str(err.get("type", "")))


def one_line(exc: _HasErrors, *, where: str | None = None, top: str = "(top level)") -> str:
    """``[where: ]<field>: <message>[ (and N more)]``: the one line every bad input gets."""
    line = str(first_error(exc, top=top))
    return f"{where}: {line}" if where else line


def _rebuild(cls: type[Exception], args: tuple, attrs: dict) -> Exception:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(attrs)
    return exc

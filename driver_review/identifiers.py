"""What a driver id, a version and a catalog time must be before anything takes them, and
how to show a value that failed in a log line without letting it forge one.

One place for these rules: the catalog client (listing, changes, records), intake, the
webhook edge and the ledger all ask here, so a value accepted by one is accepted by all.
Each check returns a one-line problem, or ``None`` when the value is fine; nothing is ever
shortened to make it fit.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

#: A driver id is at most this many characters (the REST contract's limit).
MAX_ID_CHARS = 128
#: A version is at most this many UTF-8 bytes: the ledger keeps versions in fixed-width
#: columns, and a longer one is refused rather than cut.
MAX_VERSION_BYTES = 32
#: A catalog time may run ahead of our clock by this much at most (clock skew); one further
#: ahead would move the watermark past changes not yet made.
MAX_FUTURE_SKEW_S = 300.0
#: How much of a bad value a log line shows (its length is always shown too).
SHOWN_CHARS = 80

_DOT_SEGMENTS = frozenset({".", ".."})
#: An instance name prefixes actor names (``<instance>/<role>``) and names a folder under
#: the data dir, so it is kept to letters, digits, ``_`` and ``-``: never ``.``/``..``/``/``.
MAX_INSTANCE_CHARS = 64
_INSTANCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _segment_problem(what: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{what} is {type(value).__name__}, not a string"
    if not value:
        return f"{what} is empty"
    if value in _DOT_SEGMENTS:
        # Percent-encoding does not help: servers and proxies normalise %2E%2E too.
        return f"{what} {value!r} is a path segment"
    if "/" in value or "\\" in value:
        return f"{what} {shown(value)} contains a slash"
    if not value.isprintable():
        return f"{what} {shown(value)} contains control or non-printable characters"
    if value != value.strip():
        return f"{what} {shown(value)} has leading or trailing whitespace"
    return None


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a driver id, or None."""
    problem = _segment_problem("id", value)
    if problem is None and len(value) > MAX_ID_CHARS:  # type: ignore[arg-type]
        return f"id {shown(value)} is longer than {MAX_ID_CHARS} characters"
    return problem


def version_problem(value: object) -> str | None:
    """Why ``value`` cannot be a version, or None."""
    problem = _segment_problem("version", value)
    if problem is None and isinstance(value, str) and len(value.encode()) > MAX_VERSION_BYTES:
        return f"version {shown(value)} is longer than {MAX_VERSION_BYTES} bytes"
    return problem


def instance_problem(value: object) -> str | None:
    """Why ``value`` cannot name an instance, or None."""
    if not isinstance(value, str):
        return f"instance name is {type(value).__name__}, not a string"
    if len(value) > MAX_INSTANCE_CHARS or not _INSTANCE.fullmatch(value):
        return (
            f"instance name {shown(value)} is not 1-{MAX_INSTANCE_CHARS} letters, digits, "
            "'_' or '-' starting with a letter or digit"
        )
    return None


def time_problem(
    epoch_s: float, now: float, *, max_future_s: float = MAX_FUTURE_SKEW_S
) -> str | None:
    """Why a catalog time cannot be taken (before 1970, or beyond the skew allowance)."""
    if epoch_s != epoch_s:  # NaN
        return "time is not a number"
    if epoch_s < 0:
        return "time is before 1970"
    if epoch_s > now + max_future_s:
        ahead = epoch_s - now
        shown_s = f"{ahead:.0f}" if ahead < 1e12 else f"{ahead:.3g}"  # 1e300: one short line
        return f"time is {shown_s} s in the future (allowance {max_future_s:.0f} s)"
    return None


def shown(value: object) -> str:
    """``value`` for a log line: its repr (control characters escaped), at most
    ``SHOWN_CHARS`` of it, and its length when longer. Display only: never stored."""
    text = ascii(value) if isinstance(value, str) else ascii(repr(value))[1:-1]
    if len(text) <= SHOWN_CHARS:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:SHOWN_CHARS]}… ({size} chars)"


def redact_url(url: str) -> str:
    """``url`` without credentials or query: for keys, logs, status and metric labels."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: show no port rather than fail while redacting
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_key(url: str, rate_key: str | None = None) -> str:
    """The rate governor's key for calls to ``url``: ``scheme://host:port``.

    One endpoint, one key, however the URL is spelt (host case, default port, path,
    query); credentials and query never reach it, since keys show in status and metric
    labels. An explicit ``rate_key`` from the pipeline file wins: two services behind one
    quota share a key, two quotas on one host split theirs.
    """
    if rate_key:
        return rate_key
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}:{port}" if port is not None else f"{scheme}://{host}"


def redact_location(location: str) -> str:
    """A data dir or other location for display: a URI loses credentials and query (an
    ``s3://KEY:SECRET@bucket`` or ``?secret_key=`` would otherwise show); a local path is
    shown as it is."""
    return redact_url(location) if "://" in location else location


def redact_in(text: str, url: str) -> str:
    """``text`` (an error message, a reason) with ``url``'s credentials and query taken
    out wherever they appear: the whole URL becomes its redacted form, and any stray piece
    (the password, the user:password pair, the query) becomes ``***``."""
    if not text or not url:
        return text
    out = text.replace(url, redact_url(url))
    parts = urlsplit(url)
    secrets = [
        parts.query,
        parts.netloc.rpartition("@")[0] if "@" in parts.netloc else "",
        parts.password or "",
    ]
    # A piece of one or two characters would blot out ordinary text and hides nothing.
    for piece in sorted((p for p in secrets if len(p) >= 3), key=len, reverse=True):
        out = out.replace(piece, "***")
    return out


class RedactUrls(logging.Filter):
    """A logging filter that shows every URL argument of a record redacted. On the
    ``httpx`` logger: its INFO line for each request quotes the whole URL, credentials and
    query (an API token) included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_redacted_arg(a) for a in record.args)
        return True


def _redacted_arg(arg: object) -> object:
    # httpx.URL by name: this module does not import httpx.
    text = arg if isinstance(arg, str) else str(arg) if type(arg).__name__ == "URL" else None
    if text is None or "://" not in text or any(c.isspace() for c in text):
        return arg
    return redact_url(text)


REDACT_URLS = RedactUrls()


def redact_httpx_logs() -> None:
    """Install :data:`REDACT_URLS` on the ``httpx`` logger (idempotent)."""
    logging.getLogger("httpx").addFilter(REDACT_URLS)

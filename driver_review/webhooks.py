"""Standard Webhooks v1 (https://www.standardwebhooks.com/): signing and verification.

A message carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (space-separated ``v1,<base64 HMAC-SHA256>`` entries, several while a
key is rotated). The signed content is ``f"{id}.{timestamp}.{body}"``; secrets are
``whsec_`` followed by the base64 key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from driver_review.errors import ConfigError, SignatureError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300.0
#: A ``webhook-id`` is at most this many characters: it is kept in the dedupe table, and
#: senders use short ids (``msg_`` + a ULID/UUID).
MAX_MSG_ID_CHARS = 256
#: A ``webhook-timestamp`` is Unix seconds in ASCII digits, at most this many (year 33658):
#: a longer one cannot be within any tolerance, and a 400-digit one is not a float.
MAX_TIMESTAMP_DIGITS = 12
#: At most this many ``v1,`` entries are looked at (a rotation needs two or three).
MAX_SIGNATURES = 8

# The base64 of an HMAC-SHA256 digest: 43 characters and one pad. Anything else cannot
# match, and compare_digest raises TypeError on non-ASCII text, so it is filtered first.
_DIGEST_B64 = re.compile(r"[A-Za-z0-9+/]{43}=")
_DIGITS = re.compile(r"[0-9]+")


def decode_secret(secret: str) -> bytes:
    """The HMAC key of a ``whsec_…`` secret."""
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError as exc:
        raise ConfigError("webhook secret: not 'whsec_' followed by base64") from exc
    if len(key) < 16:
        raise ConfigError("webhook secret: key shorter than 16 bytes")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one message."""
    key = decode_secret(secret)
    return "v1," + _digest(key, msg_id, timestamp, body)


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    content = f"{msg_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def signed_headers(
    secret: str, msg_id: str, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(secret, msg_id, ts, body),
    }


@dataclass(frozen=True, slots=True)
class Verified:
    """A message that passed: its id, and its signed timestamp (Unix seconds)."""

    msg_id: str
    timestamp: int


def msg_id_problem(msg_id: str) -> str | None:
    """Why ``msg_id`` cannot be a ``webhook-id``, or None."""
    if len(msg_id) > MAX_MSG_ID_CHARS:
        return f"webhook-id is {len(msg_id)} characters, over the {MAX_MSG_ID_CHARS} limit"
    if not msg_id.isascii() or not msg_id.isprintable() or " " in msg_id:
        return "webhook-id has characters other than printable ASCII without spaces"
    return None


def timestamp_of(ts_raw: str) -> int:
    """The ``webhook-timestamp`` as an int, or :class:`SignatureError` saying why not.

    Only ASCII digits: ``int()`` would also take signs, spaces, underscores and other
    scripts' digits, none of which a sender signs."""
    if _DIGITS.fullmatch(ts_raw) is None:
        raise SignatureError("webhook-timestamp is not Unix seconds in ASCII digits")
    if len(ts_raw) > MAX_TIMESTAMP_DIGITS:
        raise SignatureError(
            f"webhook-timestamp has {len(ts_raw)} digits, over {MAX_TIMESTAMP_DIGITS}"
        )
    return int(ts_raw)


class Verifier:
    """Verifies messages against one or more secrets (several while keys rotate)."""

    def __init__(self, secrets: Sequence[str], *, tolerance_s: float = DEFAULT_TOLERANCE_S):
        if not secrets:
            raise ConfigError("webhook secret: none given")
        self._keys = [decode_secret(s) for s in secrets]
        self.tolerance_s = tolerance_s

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float | None = None) -> str:
        """Return the message id, or raise :class:`SignatureError` saying what is wrong."""
        return self.verify_message(headers, body, now=now).msg_id

    def verify_message(
        self, headers: Mapping[str, str], body: bytes, *, now: float | None = None
    ) -> Verified:
        """The id and timestamp of a correctly signed, timely message, or
        :class:`SignatureError` with one line naming what is wrong (never another error)."""
        msg_id = headers.get("webhook-id")
        ts_raw = headers.get("webhook-timestamp")
        sig_header = headers.get("webhook-signature")
        if not msg_id or not ts_raw or not sig_header:
            raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
        if (problem := msg_id_problem(msg_id)) is not None:
            raise SignatureError(problem)
        timestamp = timestamp_of(ts_raw)
        current = time.time() if now is None else now
        if abs(current - timestamp) > self.tolerance_s:
            raise SignatureError("webhook-timestamp outside the tolerance")
        offered = [
            part[3:]
            for part in sig_header.split()[:MAX_SIGNATURES]
            if part.startswith("v1,") and _DIGEST_B64.fullmatch(part, 3) is not None
        ]
        if not offered:
            raise SignatureError("webhook-signature has no 'v1,' entry with a base64 HMAC-SHA256")
        for key in self._keys:
            expected = _digest(key, msg_id, timestamp, body)
            # compare_digest on every candidate: constant time per comparison.
            if any(hmac.compare_digest(expected, cand) for cand in offered):
                return Verified(msg_id, timestamp)
        raise SignatureError("no valid v1 signature")

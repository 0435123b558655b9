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
import time
from collections.abc import Mapping, Sequence

from driver_review.errors import ConfigError, SignatureError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300.0


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


def signed_headers(secret: str, msg_id: str, body: bytes, timestamp: int | None = None) -> dict:
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(secret, msg_id, ts, body),
    }


class Verifier:
    """Verifies messages against one or more secrets (several while keys rotate)."""

    def __init__(self, secrets: Sequence[str], *, tolerance_s: float = DEFAULT_TOLERANCE_S):
        if not secrets:
            raise ConfigError("webhook secret: none given")
        self._keys = [decode_secret(s) for s in secrets]
        self.tolerance_s = tolerance_s

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float | None = None) -> str:
        """Return the message id, or raise :class:`SignatureError` saying what is wrong."""
        msg_id = headers.get("webhook-id")
        ts_raw = headers.get("webhook-timestamp")
        sig_header = headers.get("webhook-signature")
        if not msg_id or not ts_raw or not sig_header:
            raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
        try:
            timestamp = int(ts_raw)
        except ValueError as exc:
            raise SignatureError("webhook-timestamp is not an integer") from exc
        current = time.time() if now is None else now
        if abs(current - timestamp) > self.tolerance_s:
            raise SignatureError("webhook-timestamp outside the tolerance")
        offered = [
            part.split(",", 1)[1]
            for part in sig_header.split()
            if part.startswith("v1,") and "," in part
        ]
        for key in self._keys:
            expected = _digest(key, msg_id, timestamp, body)
            # compare_digest on every candidate: constant time per comparison.
            if any(hmac.compare_digest(expected, cand) for cand in offered):
                return msg_id
        raise SignatureError("no valid v1 signature")

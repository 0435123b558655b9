"""Authentication of the simulated catalog, so that clients are tested against the real
thing: a static bearer token, or OAuth2 client credentials (RFC 6749 §4.4) with tokens
that expire.

- ``bearer``: every ``/v1`` request needs ``Authorization: Bearer <token>``, the token
  from ``DRIVER_REVIEW_SIM_TOKEN``;
- ``oauth2``: ``POST /oauth/token`` with ``grant_type=client_credentials`` and the client
  id/secret (HTTP Basic, or ``client_id``/``client_secret`` in the form) issues a random
  token valid for ``token_ttl_s``; every ``/v1`` request needs one that has not expired.

Anything else is a 401 with ``WWW-Authenticate: Bearer`` and a JSON ``detail`` that never
echoes what was sent. The issuer is shared by the catalog's port and the checks port,
which run in different threads: it takes a lock.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Literal
from urllib.parse import parse_qsl

from driver_review.sim.faults import Scope, Send
from driver_review.sim.settings import SimSettings

Mode = Literal["none", "bearer", "oauth2"]
TOKEN_PATH = "/oauth/token"
MAX_FORM_BYTES = 4096


class TokenIssuer:
    """Client-credentials tokens: issued, checked, forgotten once expired."""

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_id = client_id.encode()
        self._client_secret = client_secret.encode()
        self.ttl_s = ttl_s
        self._clock = clock
        self._tokens: dict[str, float] = {}  # token -> expires at
        self._lock = threading.Lock()
        self.issued = 0
        self.refused = 0

    def issue(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict]:
        """``(status, JSON body)`` of the token endpoint."""
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization and authorization.lower().startswith("basic "):
            try:
                pair = base64.b64decode(authorization[6:].strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                pair = ""
            client_id, _, secret = pair.partition(":")
        ok = hmac.compare_digest(client_id.encode(), self._client_id)
        ok = hmac.compare_digest(secret.encode(), self._client_secret) and ok
        if not ok:
            with self._lock:
                self.refused += 1
            return 401, {"error": "invalid_client"}
        token = secrets.token_urlsafe(24)
        now = self._clock()
        with self._lock:
            # Forget expired tokens here, so the table stays as small as the live ones.
            self._tokens = {t: at for t, at in self._tokens.items() if at > now}
            self._tokens[token] = now + self.ttl_s
            self.issued += 1
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.ttl_s}

    def valid(self, token: str) -> bool:
        with self._lock:
            expires_at = self._tokens.get(token)
        return expires_at is not None and self._clock() < expires_at


class AuthGate:
    """Whether a ``/v1`` request may pass, for one port's mode."""

    def __init__(
        self, mode: Mode, *, token: str | None = None, issuer: TokenIssuer | None = None
    ) -> None:
        if mode == "bearer" and not token:
            raise ValueError("bearer auth needs a token")
        if mode == "oauth2" and issuer is None:
            raise ValueError("oauth2 auth needs a token issuer")
        self.mode = mode
        self._token = (token or "").encode()
        self._issuer = issuer

    def allows(self, scope: Scope) -> bool:
        if self.mode == "none":
            return True
        value = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, credential = value.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            return False
        if self.mode == "bearer":
            return hmac.compare_digest(credential.strip().encode(), self._token)
        assert self._issuer is not None
        return self._issuer.valid(credential.strip())


async def refuse(send: Send, detail: str = "missing or invalid bearer token") -> None:
    await _json(send, 401, {"detail": detail}, [(b"www-authenticate", b"Bearer")])


async def _json(
    send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def token_form(body: bytes) -> dict[str, str]:
    return dict(parse_qsl(body[:MAX_FORM_BYTES].decode("utf-8", "replace")))


def build_gates(
    settings: SimSettings,
) -> tuple[AuthGate | None, AuthGate | None, TokenIssuer | None]:
    """``(catalog port's gate, checks port's gate, issuer)`` from the settings."""
    modes = {settings.auth, settings.checks_auth or settings.auth}
    issuer = None
    if "oauth2" in modes:
        assert settings.client_id is not None and settings.client_secret is not None
        issuer = TokenIssuer(
            settings.client_id.get_secret_value(),
            settings.client_secret.get_secret_value(),
            settings.token_ttl_s,
        )
    token = settings.auth_token.get_secret_value() if settings.auth_token else None

    def gate(mode: Mode) -> AuthGate | None:
        return None if mode == "none" else AuthGate(mode, token=token, issuer=issuer)

    return gate(settings.auth), gate(settings.checks_auth or settings.auth), issuer

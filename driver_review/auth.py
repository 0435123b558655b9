"""Credentials for outbound calls, from the environment only.

The pipeline file names *where* a secret is (an environment variable), never the secret::

    catalog:
      auth: {kind: bearer, token_env: CATALOG_TOKEN}
    checks:
      malware_scan:
        kind: http
        url: https://scanner.example/v1/scan
        auth: {kind: oauth2_client_credentials, token_url: https://id.example/token,
               client_id_env: SCAN_ID, client_secret_env: SCAN_SECRET, scope: scan}

Each kind is an ``httpx.Auth``, so the client code that sends requests does not change.
OAuth2 client credentials (RFC 6749 §4.4): the token is fetched once per process and
shared by every concurrent call and refreshed once on a 401; concurrent callers wait for
one refresh instead of each fetching (single flight). Shortly before it expires it is
refreshed in the background while calls go on with the current one: a call never waits for
a scheduled refresh, so the calls of a paced client are not held up and then sent together
(a burst that a rate limiter refuses). Values read from the environment live only in
memory: no repr, log line, error, status or key shows them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Annotated, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from driver_review.errors import BadRequest, ConfigError, ServerError, TransportError
from driver_review.identifiers import redact_url

#: A token is refreshed (in the background) this long before the expiry its server
#: announced, or half-way through its life if that is shorter.
REFRESH_MARGIN_S = 30.0
#: ... and not sent at all in its last seconds (clocks and latency): at most this, at most
#: a tenth of its life.
EXPIRY_SKEW_S = 5.0
#: Used when the token endpoint gives no ``expires_in``.
DEFAULT_TOKEN_TTL_S = 300.0
TOKEN_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)
_ENV_NAME = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BearerAuth(_Strict):
    kind: Literal["bearer"]
    token_env: Annotated[str, _ENV_NAME]


class HeaderAuth(_Strict):
    kind: Literal["header"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")]  # an HTTP token
    value_env: Annotated[str, _ENV_NAME]


class OAuth2ClientCredentials(_Strict):
    kind: Literal["oauth2_client_credentials"]
    token_url: Annotated[str, Field(pattern=r"^https?://")]
    client_id_env: Annotated[str, _ENV_NAME]
    client_secret_env: Annotated[str, _ENV_NAME]
    scope: str | None = None


AuthConfig = Annotated[
    BearerAuth | HeaderAuth | OAuth2ClientCredentials, Field(discriminator="kind")
]


def env_names(config: BearerAuth | HeaderAuth | OAuth2ClientCredentials) -> list[str]:
    if isinstance(config, BearerAuth):
        return [config.token_env]
    if isinstance(config, HeaderAuth):
        return [config.value_env]
    return [config.client_id_env, config.client_secret_env]


def _read(name: str, where: str, environ: Mapping[str, str]) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{where}: environment variable {name} is not set or empty")
    return value


def check_environment(
    config: BearerAuth | HeaderAuth | OAuth2ClientCredentials | None,
    where: str,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Fail at start, with one line naming the variable, when a credential is missing."""
    if config is None:
        return
    env = environ if environ is not None else _environ()
    for name in env_names(config):
        _read(name, where, env)


def _environ() -> Mapping[str, str]:
    import os

    return os.environ


def build_auth(
    config: BearerAuth | HeaderAuth | OAuth2ClientCredentials | None,
    where: str,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> httpx.Auth | None:
    """The ``httpx.Auth`` for ``config`` (None: no auth). Reads the environment now."""
    if config is None:
        return None
    env = environ if environ is not None else _environ()
    if isinstance(config, BearerAuth):
        return _StaticHeader("authorization", "Bearer " + _read(config.token_env, where, env))
    if isinstance(config, HeaderAuth):
        return _StaticHeader(config.name, _read(config.value_env, where, env))
    return ClientCredentialsAuth(
        config.token_url,
        _read(config.client_id_env, where, env),
        _read(config.client_secret_env, where, env),
        scope=config.scope,
        where=where,
        transport=transport,
        clock=clock,
    )


class _StaticHeader(httpx.Auth):
    def __init__(self, name: str, value: str) -> None:
        self._name = name
        self._value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name}: ***)"

    def auth_flow(self, request: httpx.Request):
        request.headers[self._name] = self._value
        yield request


class _Token(BaseModel):
    model_config = ConfigDict(extra="ignore")

    access_token: Annotated[str, Field(min_length=1)]
    token_type: str = "Bearer"
    expires_in: Annotated[float, Field(gt=0)] | None = None


class ClientCredentialsAuth(httpx.Auth):
    """OAuth2 client credentials with one shared token per process (see module doc)."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None,
        where: str,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_url = token_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._where = where
        self._transport = transport
        self._clock = clock
        self._token: str | None = None
        self._refresh_at = 0.0  # from here a background refresh is started ...
        self._valid_until = 0.0  # ... and from here calls wait for a new token
        self._lock: asyncio.Lock | None = None
        self._ahead: asyncio.Task[None] | None = None
        self.fetches = 0

    def __repr__(self) -> str:
        return f"ClientCredentialsAuth({self.token_url!r}, ***)"

    def sync_auth_flow(self, request: httpx.Request):
        raise RuntimeError("oauth2_client_credentials is for async clients")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._current()
        request.headers["authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # Revoked or rotated early: one refresh (shared with concurrent callers), one
            # more try; a second 401 is the server's answer.
            token = await self._refresh(stale=token)
            request.headers["authorization"] = f"Bearer {token}"
            yield request

    async def _current(self) -> str:
        now = self._clock()
        token = self._token
        if token is None or now >= self._valid_until:
            return await self._refresh(stale=token)
        if now >= self._refresh_at and self._ahead is None:
            self._ahead = asyncio.get_running_loop().create_task(self._refresh_ahead(token))
        return token

    async def _refresh_ahead(self, token: str) -> None:
        try:
            await self._refresh(stale=token)
        except Exception as exc:  # typed and redacted by _fetch
            # The current token still serves; the first call that finds it too old fetches
            # one itself and fails with the typed error if the endpoint still refuses.
            log.warning("%s: background token refresh failed: %s", self._where, exc)
        finally:
            self._ahead = None

    async def _refresh(self, *, stale: str | None) -> str:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            # Single flight: whoever waited while another caller refreshed takes its token.
            if (
                self._token is not None
                and self._token != stale
                and self._clock() < self._valid_until
            ):
                return self._token
            asked_at = self._clock()  # the token's life counts from the request, to err early
            token, ttl_s = await self._fetch()
            self._token = token
            self._refresh_at = asked_at + max(ttl_s - REFRESH_MARGIN_S, ttl_s / 2)
            self._valid_until = asked_at + ttl_s - min(EXPIRY_SKEW_S, ttl_s / 10)
            return token

    async def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        where = f"{self._where}: token endpoint {redact_url(self.token_url)}"
        route = "POST token"
        self.fetches += 1
        try:
            async with httpx.AsyncClient(
                transport=self._transport, timeout=TOKEN_TIMEOUT_S
            ) as client:
                resp = await client.post(
                    self.token_url,
                    data=form,
                    auth=(self._client_id, self._client_secret),
                    headers={"accept": "application/json"},
                )
        except httpx.HTTPError as exc:
            # Transient: the call that needed the token fails as retryable, and so is retried.
            raise TransportError(f"{where}: {type(exc).__name__}", route=route) from None
        status = resp.status_code
        if status == 429 or status >= 500:
            raise ServerError(f"{where}: HTTP {status}", status=status, route=route)
        if status != 200:
            # Credentials refused: retrying cannot help until someone fixes them.
            raise BadRequest(
                f"{where}: HTTP {status} (credentials refused?)", status=status, route=route
            )
        try:
            answer = _Token.model_validate_json(resp.content)
        except ValidationError:
            raise BadRequest(f"{where}: answer has no usable access_token", route=route) from None
        if answer.token_type.lower() != "bearer":
            raise BadRequest(f"{where}: token_type is not Bearer", route=route)
        return answer.access_token, answer.expires_in or DEFAULT_TOKEN_TTL_S

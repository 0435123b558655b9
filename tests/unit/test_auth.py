"""Credentials from the environment: bearer, a named header, OAuth2 client credentials."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from driver_review.auth import (
    AuthConfig,
    ClientCredentialsAuth,
    build_auth,
    check_environment,
)
from driver_review.errors import BadRequest, ConfigError, ServerError

SECRET = "s3cr3t-value-never-shown"
parse = TypeAdapter(AuthConfig).validate_python


def _echo(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={k: v for k, v in request.headers.items()})


async def _get(auth: httpx.Auth | None, handler=_echo) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), auth=auth) as client:
        return await client.get("http://api.test/x")


def test_bearer_and_header_kinds_read_their_variable() -> None:
    env = {"TOKEN": SECRET, "KEY": "k-123"}
    bearer = build_auth(
        parse({"kind": "bearer", "token_env": "TOKEN"}), "catalog.auth", environ=env
    )
    header = build_auth(
        parse({"kind": "header", "name": "X-Api-Key", "value_env": "KEY"}),
        "checks.scan.auth",
        environ=env,
    )
    assert asyncio.run(_get(bearer)).json()["authorization"] == f"Bearer {SECRET}"
    assert asyncio.run(_get(header)).json()["x-api-key"] == "k-123"
    assert SECRET not in repr(bearer)


def test_a_missing_variable_fails_at_start_naming_it_and_never_a_value() -> None:
    config = parse(
        {
            "kind": "oauth2_client_credentials",
            "token_url": "https://id.test/t",
            "client_id_env": "CID",
            "client_secret_env": "CSECRET",
        }
    )
    with pytest.raises(ConfigError) as err:
        check_environment(config, "checks.scan.auth", {"CID": SECRET})
    assert str(err.value) == "checks.scan.auth: environment variable CSECRET is not set or empty"
    with pytest.raises(ConfigError, match="TOKEN"):
        build_auth(parse({"kind": "bearer", "token_env": "TOKEN"}), "catalog.auth", environ={})


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "bearer", "token": SECRET},  # a secret in the file is refused
        {"kind": "bearer", "token_env": "not a name"},
        {"kind": "basic", "token_env": "X"},
        {
            "kind": "oauth2_client_credentials",
            "token_url": "ftp://x",
            "client_id_env": "A",
            "client_secret_env": "B",
        },
    ],
)
def test_bad_auth_blocks_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        parse(bad)


class TokenServer:
    """A token endpoint and an API behind it, both in one MockTransport."""

    def __init__(self, *, expires_in: float = 3600, status: int = 200) -> None:
        self.issued = 0
        self.valid: set[str] = set()
        self.expires_in = expires_in
        self.status = status
        self.forms: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            await asyncio.sleep(0.01)  # concurrent callers arrive while the fetch is out
            basic = base64.b64decode(request.headers["authorization"].split()[1]).decode()
            assert basic == f"client-1:{SECRET}"
            self.forms.append(request.content.decode())
            if self.status != 200:
                return httpx.Response(self.status)
            self.issued += 1
            token = f"tok-{self.issued}"
            self.valid.add(token)  # earlier tokens stay valid until they expire
            return httpx.Response(
                200,
                json={"access_token": token, "token_type": "bearer", "expires_in": self.expires_in},
            )
        got = request.headers.get("authorization", "")
        if got.removeprefix("Bearer ") not in self.valid:
            return httpx.Response(401)
        return httpx.Response(200, json={"token": got})


def _oauth(server: TokenServer, clock=None) -> ClientCredentialsAuth:
    config = parse(
        {
            "kind": "oauth2_client_credentials",
            "token_url": "http://id.test/token",
            "client_id_env": "CID",
            "client_secret_env": "CSECRET",
            "scope": "scan",
        }
    )
    kwargs = {"clock": clock} if clock else {}
    auth = build_auth(
        config,
        "checks.scan.auth",
        environ={"CID": "client-1", "CSECRET": SECRET},
        transport=httpx.MockTransport(server),
        **kwargs,
    )
    assert isinstance(auth, ClientCredentialsAuth)
    return auth


def test_oauth2_token_is_fetched_once_for_many_concurrent_calls() -> None:
    server = TokenServer()
    auth = _oauth(server)

    async def many() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server), auth=auth) as c:
            return await asyncio.gather(*(c.get("http://api.test/x") for _ in range(50)))

    answers = asyncio.run(many())
    assert {r.status_code for r in answers} == {200}
    assert server.issued == 1 and auth.fetches == 1
    assert server.forms == ["grant_type=client_credentials&scope=scan"]
    assert SECRET not in repr(auth)


async def _background_refresh(auth: ClientCredentialsAuth) -> None:
    """Wait for the refresh a call started in the background (none started: a failure)."""
    ahead = auth._ahead
    assert ahead is not None, "no background refresh was started"
    await ahead


def test_oauth2_token_is_refreshed_in_the_background_before_expiry() -> None:
    server = TokenServer(expires_in=120)
    now = [0.0]
    auth = _oauth(server, clock=lambda: now[0])

    async def calls() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server), auth=auth) as c:

            async def token() -> str:
                return (await c.get("http://api.test/x")).json()["token"]

            out = [await token()]
            now[0] = 60.0  # inside the token's life less the margin: same token
            out.append(await token())
            now[0] = 95.0  # within 30 s of expiry: a refresh starts, this call goes on
            out.append(await token())
            assert server.issued == 1
            await _background_refresh(auth)
            assert server.issued == 2
            out.append(await token())  # the new token, never waited for
            now[0] = 96.0 + 120.0  # past even the new token's life: this call waits for one
            out.append(await token())
            return out

    assert asyncio.run(calls()) == [
        "Bearer tok-1",
        "Bearer tok-1",
        "Bearer tok-1",
        "Bearer tok-2",
        "Bearer tok-3",
    ]
    assert server.issued == 3


def test_a_token_is_not_sent_in_its_last_seconds_and_a_failed_background_refresh_waits(
    caplog,
) -> None:
    server = TokenServer(expires_in=6)  # refreshed half-way, not sent in its last 0.6 s
    now = [0.0]
    auth = _oauth(server, clock=lambda: now[0])

    async def calls() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server), auth=auth) as c:

            async def token() -> str:
                return (await c.get("http://api.test/x")).json()["token"]

            out = [await token()]
            server.status = 503  # the token endpoint is down for a while
            now[0] = 3.5  # past half-way: a background refresh, which fails
            out.append(await token())
            await _background_refresh(auth)
            assert auth.fetches == 2
            server.status = 200
            now[0] = 5.5  # in the last tenth of its life: not sent, a new one fetched
            out.append(await token())
            return out

    assert asyncio.run(calls()) == ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2"]
    assert auth.fetches == 3
    assert "background token refresh failed" in caplog.text and SECRET not in caplog.text


def test_a_401_refreshes_once_for_all_waiting_calls_and_retries() -> None:
    server = TokenServer()
    auth = _oauth(server)

    async def calls() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server), auth=auth) as c:
            first = (await c.get("http://api.test/x")).status_code
            server.valid = set()  # revoked server-side
            rest = await asyncio.gather(*(c.get("http://api.test/x") for _ in range(20)))
            return [first, *(r.status_code for r in rest)]

    assert set(asyncio.run(calls())) == {200}
    assert server.issued == 2  # one refresh for twenty 401s


def test_token_endpoint_failures_are_typed_and_never_show_the_secret() -> None:
    for status, kind in ((503, ServerError), (401, BadRequest)):
        auth = _oauth(TokenServer(status=status))
        with pytest.raises(kind) as err:
            asyncio.run(_get(auth, TokenServer()))
        assert SECRET not in str(err.value) and "id.test/token" in str(err.value)
        assert json.dumps(str(err.value)).count("\\n") == 0

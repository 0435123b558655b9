"""The simulator's authentication (bearer, OAuth2 client credentials with expiring tokens)
and its second port for check APIs (own token bucket, own quota window), over real HTTP on
127.0.0.1; and ``driver-review probe`` against both. No Ray."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from driver_review.auth import ClientCredentialsAuth
from driver_review.cli import main
from driver_review.errors import ConfigError
from driver_review.sim import SimServer, SimSettings
from driver_review.sim.cli import add_arguments, settings_from_args
from driver_review.sim.ratelimit import QuotaWindow

TOKEN = "sim-bearer-token-0123456789"
CLIENT_ID, CLIENT_SECRET = "probe-client", "sim-client-secret-9876543210"


def _flags(*argv: str) -> SimSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)))


def _first_driver(sim: SimServer, headers: dict[str, str]) -> dict[str, str]:
    page = httpx.get(f"{sim.url}/v1/drivers", params={"limit": 1}, headers=headers).json()
    row = page["items"][0]
    return {"driver_id": row["id"], "version": row["version"]}


def test_bearer_token_from_the_environment(
    sim_factory: Callable[..., SimServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DRIVER_REVIEW_SIM_TOKEN", raising=False)
    with pytest.raises(
        ConfigError, match="--auth: bearer needs environment variable DRIVER_REVIEW_SIM_TOKEN"
    ):
        _flags("--auth", "bearer")
    monkeypatch.setenv("DRIVER_REVIEW_SIM_TOKEN", TOKEN)
    settings = _flags("--auth", "bearer", "--port", "0", "--drivers", "5")
    assert TOKEN not in repr(settings)
    sim = sim_factory(settings)
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}):
        resp = httpx.get(f"{sim.url}/v1/drivers", headers=headers)
        assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in resp.text
    assert (
        httpx.get(f"{sim.url}/v1/drivers", headers={"authorization": f"Bearer {TOKEN}"}).status_code
        == 200
    )
    assert httpx.get(f"{sim.url}/_sim/stats").status_code == 200  # the oracle is not gated
    assert httpx.get(f"{sim.url}/_sim/stats").json()["requests"]["GET /v1/drivers"] == {
        "401": 3,
        "200": 1,
    }


def test_oauth2_tokens_expire_and_the_client_refreshes(
    sim_factory: Callable[..., SimServer],
) -> None:
    sim = sim_factory(
        SimSettings(
            drivers=5,
            auth="oauth2",
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            token_ttl_s=1.0,
        )
    )
    url = f"{sim.url}/oauth/token"
    form = {"grant_type": "client_credentials"}
    assert httpx.post(url, data=form, auth=(CLIENT_ID, "wrong")).status_code == 401
    assert (
        httpx.post(
            url, data={"grant_type": "password"}, auth=(CLIENT_ID, CLIENT_SECRET)
        ).status_code
        == 400
    )
    # Basic auth or the form: both are RFC 6749 client authentication.
    by_form = httpx.post(
        url, data={**form, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
    ).json()
    token = by_form["access_token"]
    assert by_form["expires_in"] == 1.0 and by_form["token_type"] == "Bearer"
    bearer = {"authorization": f"Bearer {token}"}
    assert httpx.get(f"{sim.url}/v1/drivers", headers=bearer).status_code == 200
    time.sleep(1.2)
    assert httpx.get(f"{sim.url}/v1/drivers", headers=bearer).status_code == 401

    async def through_the_real_client() -> list[int]:
        auth = ClientCredentialsAuth(url, CLIENT_ID, CLIENT_SECRET, scope=None, where="t")
        async with httpx.AsyncClient(auth=auth) as client:
            codes = [(await client.get(f"{sim.url}/v1/drivers")).status_code]
            time.sleep(1.2)  # the token expires; the client refreshes before or on the 401
            codes.append((await client.get(f"{sim.url}/v1/drivers")).status_code)
        return codes

    import asyncio

    assert asyncio.run(through_the_real_client()) == [200, 200]
    assert httpx.get(f"{sim.url}/_sim/stats").json()["tokens"]["200"] >= 3


def test_checks_port_has_its_own_bucket_and_quota(
    sim_factory: Callable[..., SimServer],
) -> None:
    sim = sim_factory(
        SimSettings(
            drivers=5,
            checks_port=0,
            checks_rate_limit=2,
            checks_rate_burst=1,
            checks_quota=3,
            checks_quota_window_s=3600,
        )
    )
    assert sim.checks_url and sim.checks_url != sim.url
    body = _first_driver(sim, {})
    check = f"{sim.checks_url}/v1/checks/malware_scan"
    first, second = httpx.post(check, json=body), httpx.post(check, json=body)
    assert first.status_code == 200 and first.json()["driver_id"] == body["driver_id"]
    assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
    # The catalog's port is not limited by the checks port's bucket.
    codes = {httpx.get(f"{sim.url}/v1/drivers").status_code for _ in range(5)}
    assert codes == {200}
    # The quota is announced as a long window, and once spent everything waits for it.
    time.sleep(0.6)
    assert httpx.post(check, json=body).status_code == 200
    time.sleep(0.6)
    third = httpx.post(check, json=body)
    assert third.status_code == 200 and third.headers["ratelimit-policy"] == ('"quota";q=3;w=3600')
    assert third.headers["ratelimit"].startswith('"quota";r=0;t=')
    time.sleep(0.6)
    spent = httpx.post(check, json=body)
    assert spent.status_code == 429 and int(spent.headers["retry-after"]) > 3000
    stats = httpx.get(f"{sim.url}/_sim/stats").json()["requests"]
    assert stats["checks POST /v1/checks/{check}"] == {"200": 3, "429": 2}


def test_checks_port_serves_only_checks(sim_factory: Callable[..., SimServer]) -> None:
    with pytest.raises(ConfigError, match="--checks-rate-limit: needs checks_port"):
        _flags("--checks-rate-limit", "5")
    sim = sim_factory(SimSettings(drivers=3, checks_port=0))
    assert httpx.get(f"{sim.checks_url}/v1/drivers").status_code == 404
    body = _first_driver(sim, {})
    assert httpx.post(f"{sim.checks_url}/v1/checks/malware_scan", json=body).status_code == 200


def test_quota_window_refills_at_the_next_window() -> None:
    now = [0.0]
    quota = QuotaWindow(2, 10.0, clock=lambda: now[0])
    assert [quota.try_acquire().admitted for _ in range(3)] == [True, True, False]
    now[0] = 9.5
    spent = quota.try_acquire()
    assert not spent.admitted and spent.wait_s == pytest.approx(0.5)
    now[0] = 10.1
    assert quota.try_acquire().admitted and quota.try_acquire().remaining == 0


def test_probe_authenticates_to_both_ports(
    sim_factory: Callable[..., SimServer],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in (
        ("DRIVER_REVIEW_SIM_TOKEN", TOKEN),
        ("DRIVER_REVIEW_SIM_CLIENT_ID", CLIENT_ID),
        ("DRIVER_REVIEW_SIM_CLIENT_SECRET", CLIENT_SECRET),
        ("VENDOR_TOKEN", TOKEN),
        ("SCAN_ID", CLIENT_ID),
        ("SCAN_SECRET", CLIENT_SECRET),
    ):
        monkeypatch.setenv(name, value)
    sim = sim_factory(
        _flags(
            "--port",
            "0",
            "--drivers",
            "10",
            "--auth",
            "bearer",
            "--checks-port",
            "0",
            "--checks-auth",
            "oauth2",
            "--checks-rate-limit",
            "20",
        )
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        json.dumps(
            {
                "stages": [{"name": "security", "checks": ["scanner"]}],
                "catalog": {"auth": {"kind": "bearer", "token_env": "VENDOR_TOKEN"}},
                "checks": {
                    "scanner": {
                        "kind": "http",
                        "url": f"{sim.checks_url}/v1/checks/malware_scan",
                        "auth": {
                            "kind": "oauth2_client_credentials",
                            "token_url": f"{sim.url}/oauth/token",
                            "client_id_env": "SCAN_ID",
                            "client_secret_env": "SCAN_SECRET",
                        },
                    }
                },
            }
        )
    )
    argv = ["probe", "--catalog-url", sim.url, "--config", str(config), "--check", "scanner"]
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ok"] and report["requests"] <= 12
    assert {i["name"]: i["status"] for i in report["items"]}["check scanner"] == "ok"
    assert TOKEN not in out and CLIENT_SECRET not in out
    # Without the catalog's token the probe stops at auth, with one line naming it.
    monkeypatch.setenv("VENDOR_TOKEN", "not-the-token")
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "probe: auth: HTTP 401 with bearer from the environment" in captured.err
    assert TOKEN not in captured.out + captured.err

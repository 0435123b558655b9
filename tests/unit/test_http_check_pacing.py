"""``http`` checks paced by their endpoint's governor, retrying 429s within their budget,
with credentials from the environment: against a real loopback service with its own
limit (no Ray: the governor runs in-process behind a :class:`LocalLimiter`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from driver_review.catalog.models import DriverRecord
from driver_review.checks import build_check, context_factory, run_stage
from driver_review.config import CheckSpec, GovernorConfig, parse_config
from driver_review.errors import ConfigError
from driver_review.governor import RateGovernor
from driver_review.identifiers import endpoint_key
from driver_review.limiter import LocalLimiter
from tests.support.check_server import CheckServer
from tests.support.fakes import FakeCatalog, make_driver

TOKEN = "tok-" + "x7Qp2" * 6  # what a scan of errors must never find


@pytest.fixture
def limited() -> Iterator[CheckServer]:
    server = CheckServer(rate=40, burst=4).start()
    yield server
    server.stop()


async def _review(
    drivers: list[DriverRecord], spec: CheckSpec, limiter: LocalLimiter | None
) -> list[Any]:
    check = build_check("scan", spec)
    async with httpx.AsyncClient() as client:
        factory = context_factory(
            FakeCatalog(),
            http=client,  # type: ignore[arg-type]
            limiters={"scan": limiter} if limiter is not None else None,
        )
        return await asyncio.gather(*(run_stage(d, [check], factory) for d in drivers))


def _drivers(n: int) -> list[DriverRecord]:
    return [make_driver(id=f"drv-{i}") for i in range(n)]


def test_paced_checks_all_answer_at_the_services_limit_with_few_429s(
    limited: CheckServer,
) -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=10), key=endpoint_key(limited.url))
    spec = CheckSpec(kind="http", url=f"{limited.url}/check", max_wait_s=30)
    results = asyncio.run(_review(_drivers(60), spec, LocalLimiter(gov)))
    assert [r.verdict for r in results] == ["approved"] * 60
    refused = limited.statuses[429]
    assert refused <= 0.1 * 60, limited.statuses  # discovery finds 40/s with a few 429s
    assert gov.stats()["429s"] == refused  # every response reached the governor


def test_unpaced_single_attempts_were_the_old_429_storm() -> None:
    # The behaviour this replaces: one attempt each, all at once: most are errors. At 2/s
    # a loaded machine spreading the 30 over a second or two still lets few more by.
    server = CheckServer(rate=2, burst=4).start()
    try:
        spec = CheckSpec(kind="http", url=f"{server.url}/check", max_attempts=1)
        results = asyncio.run(_review(_drivers(30), spec, None))
    finally:
        server.stop()
    assert sum(r.verdict == "error" for r in results) >= 20  # burst 4 lets a few by


def test_a_429_is_waited_out_and_retried_within_the_review() -> None:
    server = CheckServer(rate=2, burst=1).start()
    try:
        spec = CheckSpec(kind="http", url=f"{server.url}/check", max_wait_s=10)
        # Unpaced and all at once: several meet a 429 (Retry-After: 1) and try again.
        results = asyncio.run(_review(_drivers(3), spec, None))
    finally:
        server.stop()
    assert [r.verdict for r in results] == ["approved"] * 3
    assert server.statuses[429] >= 1


def test_a_wait_beyond_the_budget_is_an_error_now_to_be_retried_later() -> None:
    server = CheckServer(rate=0.2, burst=1).start()  # Retry-After: 5
    try:
        spec = CheckSpec(kind="http", url=f"{server.url}/check", max_wait_s=2)
        results = asyncio.run(_review(_drivers(2), spec, None))
    finally:
        server.stop()
    # Sent at once: whichever the bucket admits is approved, the other waits past its budget.
    ok, refused = sorted(results, key=lambda r: r.verdict)
    assert ok.verdict == "approved" and refused.verdict == "error"
    assert refused.by_name("scan").error_type == "RateLimited"
    assert "wait budget 2s" in refused.reasons["scan"]


def test_a_paused_endpoint_fails_fast_instead_of_holding_the_driver() -> None:
    server = CheckServer(rate=100).start()
    try:
        gov = RateGovernor(GovernorConfig(), key=endpoint_key(server.url))
        gov.observe(
            200,
            {"RateLimit-Policy": '"daily";q=10;w=86400', "RateLimit": '"daily";r=0;t=3600'},
            __import__("time").monotonic(),
        )
        spec = CheckSpec(kind="http", url=f"{server.url}/check", max_wait_s=5)
        (result,) = asyncio.run(_review(_drivers(1), spec, LocalLimiter(gov)))
    finally:
        server.stop()
    assert result.verdict == "error" and "paused" in result.reasons["scan"]
    assert server.statuses.total() == 0


def test_bearer_credentials_come_from_the_environment_and_never_show(monkeypatch) -> None:
    server = CheckServer(rate=100, bearer=TOKEN).start()
    url = f"{server.url}/check?api_key={TOKEN}"  # a secret in a query never shows either
    auth = {"kind": "bearer", "token_env": "SCAN_TOKEN"}
    try:
        monkeypatch.setenv("SCAN_TOKEN", TOKEN)
        spec = CheckSpec(kind="http", url=url, auth=auth)
        (ok,) = asyncio.run(_review(_drivers(1), spec, None))
        monkeypatch.setenv("SCAN_TOKEN", "wrong-" + TOKEN)
        (refused,) = asyncio.run(
            _review(_drivers(1), CheckSpec(kind="http", url=url, auth=auth), None)
        )
    finally:
        server.stop()
    assert ok.verdict == "approved"
    assert refused.verdict == "error" and "HTTP 401" in refused.reasons["scan"]
    assert TOKEN not in repr(refused) and TOKEN not in repr(build_check("scan", spec))


def test_a_missing_check_credential_fails_at_start_naming_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_SCAN_TOKEN", raising=False)
    config = parse_config(
        {
            "stages": [{"name": "security", "checks": ["scan"]}],
            "checks": {
                "scan": {
                    "kind": "http",
                    "url": "http://127.0.0.1:9/check",
                    "auth": {"kind": "bearer", "token_env": "NO_SUCH_SCAN_TOKEN"},
                }
            },
        }
    )
    with pytest.raises(ConfigError) as err:
        config.check_environment()
    assert str(err.value) == (
        "checks.scan.auth: environment variable NO_SUCH_SCAN_TOKEN is not set or empty"
    )
    assert "NO_SUCH_SCAN_TOKEN" not in os.environ


@pytest.mark.parametrize(
    ("url", "rate_key", "key"),
    [
        ("https://u:pw@Scan.Example/v1/x?k=1", None, "https://scan.example:443"),
        ("http://127.0.0.1:8080/a", None, "http://127.0.0.1:8080"),
        ("http://[::1]/a", None, "http://[::1]:80"),
        ("https://a.example/x", "shared-quota", "shared-quota"),
    ],
)
def test_endpoint_keys_hold_no_credentials_path_or_query(
    url: str, rate_key: str | None, key: str
) -> None:
    assert endpoint_key(url, rate_key) == key


def test_auth_and_rate_key_are_for_http_checks_only() -> None:
    with pytest.raises(ConfigError, match="auth/rate_key apply to http checks only"):
        parse_config(
            {
                "stages": [{"name": "s", "checks": ["malware_scan"]}],
                "checks": {"malware_scan": {"rate_key": "x"}},
            }
        )


def test_the_catalog_client_sends_its_credentials_from_the_environment(monkeypatch) -> None:
    from driver_review.catalog.http import HttpCatalog
    from driver_review.config import CatalogConfig

    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-api-key"))
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    monkeypatch.setenv("CATALOG_KEY", TOKEN)
    config = CatalogConfig(
        url="http://catalog.test",
        auth={"kind": "header", "name": "X-Api-Key", "value_env": "CATALOG_KEY"},
    )

    async def go() -> None:
        catalog = HttpCatalog(config, transport=httpx.MockTransport(handler))
        await catalog.list_page()
        await catalog.aclose()

    asyncio.run(go())
    assert seen == [TOKEN]

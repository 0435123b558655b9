"""Credentials and query strings of catalog and check URLs never show: not in governor
keys, error messages, reasons or data-dir displays. The catalog client still sends them."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import DriverRecord
from driver_review.checks.base import CheckContext
from driver_review.checks.http_check import HttpCheck
from driver_review.config import CatalogConfig
from driver_review.errors import NotFound, TransportError
from driver_review.identifiers import redact_in, redact_location
from driver_review.runtime.clients import endpoint_key

SECRET = "secret-9f1c"
URL = f"https://reviewer:{SECRET}@catalog.example:8443/api?token={SECRET}&x=1"


def test_endpoint_key_is_scheme_host_and_port_only() -> None:
    assert endpoint_key(URL) == "https://catalog.example:8443"
    assert endpoint_key("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert endpoint_key(f"http://u:{SECRET}@[::1]:81/?k={SECRET}") == "http://[::1]:81"


def test_redact_in_takes_every_piece_out_of_a_message() -> None:
    text = f"POST {URL} failed; sent reviewer:{SECRET} and token={SECRET}&x=1"
    out = redact_in(text, URL)
    assert SECRET not in out
    assert "https://catalog.example:8443/api failed" in out
    assert redact_in("no url here", "") == "no url here"
    # A one- or two-character password hides nothing and must not blot out the text.
    assert redact_in("a plain message", "http://u:a@h/") == "a plain message"


def test_a_data_dir_uri_is_shown_without_keys_and_a_path_as_it_is() -> None:
    assert (
        redact_location(f"s3://AKIA:{SECRET}@bucket/prefix?secret_key={SECRET}")
        == "s3://bucket/prefix"
    )
    assert redact_location("./data/run 1") == "./data/run 1"


def _record() -> DriverRecord:
    return DriverRecord.model_validate(
        {
            "id": "drv-1",
            "vendor_id": "v1",
            "vendor": "Acme",
            "name": "NIC",
            "version": "1.0",
            "stage": "intake",
            "status": "in_review",
            "hardware_ids": ["PCI\\VEN_8086&DEV_1234"],
            "package": {"size": 3, "sha256": "a" * 64},
            "updated_at": "2025-01-01T00:00:00Z",
        }
    )


@pytest.mark.parametrize("answer", ["refused", "500"])
def test_an_http_check_error_names_the_url_without_its_secrets(answer) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if answer == "refused":  # transport errors may quote the whole URL
            raise httpx.ConnectError(f"cannot reach {request.url}", request=request)
        return httpx.Response(500, json={"detail": "down"})

    check = HttpCheck("legal_api", URL, timeout_s=2.0)
    assert SECRET not in repr(check)

    async def run() -> str:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            ctx = CheckContext(catalog=None, http=http)  # type: ignore[arg-type]
            with pytest.raises(Exception) as info:
                await check(_record(), ctx)
        return str(info.value)

    message = asyncio.run(run())
    assert SECRET not in message
    assert "POST https://catalog.example:8443/api" in message


def test_the_catalog_client_sends_the_query_and_credentials_but_never_shows_them(
    caplog,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx logs every request's URL at INFO
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/gone"):
            return httpx.Response(404, json={"detail": "no such driver"})
        raise httpx.ConnectError(f"reset talking to {request.url}", request=request)

    config = CatalogConfig(url=URL, max_attempts=1)
    catalog = HttpCatalog(config, transport=httpx.MockTransport(handler))

    async def run() -> tuple[str, str]:
        try:
            with pytest.raises(NotFound) as missing:
                await catalog.get_driver("gone")
            with pytest.raises(TransportError) as broken:
                await catalog.get_driver("drv-1")
        finally:
            await catalog.aclose()
        return str(missing.value), str(broken.value)

    missing, broken = asyncio.run(run())
    request = seen[0]
    # Sent: the path under the base, the URL's query on every request, basic auth.
    assert request.url.path == "/api/v1/drivers/gone"
    assert request.url.params["token"] == SECRET and request.url.params["x"] == "1"
    assert request.headers["authorization"].startswith("Basic ")
    # Shown: neither.
    for message in (missing, broken):
        assert SECRET not in message, message
    assert "HTTP Request: GET https://catalog.example:8443/api/v1/drivers/gone" in caplog.text
    assert SECRET not in caplog.text

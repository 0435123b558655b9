"""HttpCatalog against ``httpx.MockTransport``: status mapping, retries, Retry-After,
malformed bodies, paging and ETags. Waits are recorded by a fake sleep, never slept."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from driver_review.catalog.base import Catalog
from driver_review.catalog.http import CHECK, DRIVER, HttpCatalog
from driver_review.catalog.models import DecisionRequest
from driver_review.config import CatalogConfig
from driver_review.errors import (
    BadRequest,
    CatalogError,
    Conflict,
    MalformedResponse,
    NotFound,
    RateLimited,
    RetryableError,
    ServerError,
    TransportError,
)

NOW_WALL = 1_750_000_000.0
SHA = "a" * 64
Handler = Callable[[httpx.Request], httpx.Response]


def record(driver_id: str = "drv-1", version: str = "1.0") -> dict[str, Any]:
    return {
        "id": driver_id,
        "vendor_id": "v1",
        "vendor": "Acme",
        "name": "NIC",
        "version": version,
        "stage": "intake",
        "status": "in_review",
        "hardware_ids": ["PCI\\VEN_8086&DEV_1234"],
        "package": {"size": 3, "sha256": SHA},
        "updated_at": "2025-01-01T00:00:00Z",
    }


def summary(i: int) -> dict[str, Any]:
    return {
        "id": f"drv-{i}",
        "version": "1.0",
        "stage": "intake",
        "status": "in_review",
        "updated_at": f"2025-01-01T00:00:{i:02d}Z",
    }


def check_body(**over: Any) -> dict[str, Any]:
    return {"check": "malware_scan", "driver_id": "drv-1", "version": "1.0", "passed": True} | over


class Harness:
    """A catalog wired to a handler, with recorded sleeps, permits and observations."""

    def __init__(self, handler: Handler, **config: Any) -> None:
        self.sleeps: list[float] = []
        self.requests: list[httpx.Request] = []
        self.events: list[tuple[str, int | None, float]] = []
        self.limiter = FakeLimiter()

        def wrapped(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return handler(request)

        async def sleep(delay_s: float) -> None:
            self.sleeps.append(delay_s)

        cfg = CatalogConfig(url="http://catalog.test", **({"max_attempts": 4} | config))
        self.catalog = HttpCatalog(
            cfg,
            limiter=self.limiter,
            transport=httpx.MockTransport(wrapped),
            on_response=lambda *e: self.events.append(e),
            sleep=sleep,
            rng=random.Random(1),
            wall_clock=lambda: NOW_WALL,
        )

    def run(self, coro_fn: Callable[[HttpCatalog], Any]) -> Any:
        async def main() -> Any:
            try:
                return await coro_fn(self.catalog)
            finally:
                await self.catalog.aclose()

        return asyncio.run(main())


class FakeLimiter:
    strict_spacing = False

    def __init__(self) -> None:
        self.acquired = 0
        self.observed: list[int] = []
        self.elapsed_s: list[float] = []

    async def acquire(self) -> None:
        self.acquired += 1

    async def space(self) -> None:
        pass

    def observe(self, status: int, headers: Mapping[str, str], *, elapsed_s: float = 0.0) -> None:
        self.observed.append(status)
        self.elapsed_s.append(elapsed_s)


def sequence(*responses: httpx.Response) -> Handler:
    """Answer with these responses in turn, repeating the last."""
    it = iter(responses)
    last: list[httpx.Response] = []

    def handler(request: httpx.Request) -> httpx.Response:
        resp = next(it, None)
        if resp is None:
            resp = last[0]
        last[:] = [resp]
        return httpx.Response(resp.status_code, headers=resp.headers, content=resp.content)

    return handler


def ok(body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(200, json=body, headers=headers)


# --- status mapping ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [(404, NotFound), (409, Conflict), (400, BadRequest), (403, BadRequest), (422, BadRequest)],
)
def test_client_errors_are_typed_and_never_retried(status: int, error: type) -> None:
    h = Harness(sequence(httpx.Response(status, json={"detail": "no such\ndriver"})))
    with pytest.raises(error) as info:
        h.run(lambda c: c.get_driver("drv-1"))
    assert len(h.requests) == 1 and h.sleeps == []
    assert info.value.status == status and info.value.route == DRIVER
    message = str(info.value)
    assert (
        "\n" not in message and "GET /v1/drivers/drv-1" in message and "no such driver" in message
    )


@pytest.mark.parametrize(("status", "error"), [(500, ServerError), (503, ServerError)])
def test_server_errors_are_retried_with_jittered_backoff_then_raised(
    status: int, error: type
) -> None:
    h = Harness(sequence(httpx.Response(status, text="<html>oops</html>")))
    with pytest.raises(error) as info:
        h.run(lambda c: c.get_driver("drv-1"))
    assert len(h.requests) == 4 and len(h.sleeps) == 3
    caps = [0.05 * 2**i for i in range(3)]
    assert all(0 <= s <= cap for s, cap in zip(h.sleeps, caps, strict=True))
    assert isinstance(info.value, RetryableError) and info.value.retry_after_s is None
    assert "attempt 4/4" in str(info.value)


def test_a_retry_that_succeeds_returns_the_answer_and_everything_is_paced() -> None:
    h = Harness(sequence(httpx.Response(502), httpx.Response(503), ok(record(), etag='"e1"')))
    rec, etag = h.run(lambda c: c.get_driver("drv-1"))
    assert rec is not None and rec.id == "drv-1" and etag == '"e1"'
    assert h.limiter.acquired == 3 and h.limiter.observed == [502, 503, 200]
    assert [e[1] for e in h.events] == [502, 503, 200] and all(e[0] == DRIVER for e in h.events)
    assert h.catalog.stats()["calls"][DRIVER] == {"502": 1, "503": 1, "200": 1}


def test_backoff_grows_but_stays_under_the_cap() -> None:
    h = Harness(sequence(httpx.Response(500)), max_attempts=12, backoff_max_s=0.3)
    with pytest.raises(ServerError):
        h.run(lambda c: c.get_driver("drv-1"))
    assert len(h.sleeps) == 11 and max(h.sleeps) <= 0.3


# --- 429 and Retry-After -----------------------------------------------------------------


def test_429_waits_exactly_the_retry_after_seconds() -> None:
    h = Harness(sequence(httpx.Response(429, headers={"retry-after": "3"}), ok(check_body())))
    answer = h.run(lambda c: c.run_check("malware_scan", "drv-1", "1.0"))
    assert answer.passed and h.sleeps == [3.0]


def test_429_waits_until_the_retry_after_http_date() -> None:
    when = formatdate(NOW_WALL + 7, usegmt=True)
    h = Harness(sequence(httpx.Response(429, headers={"Retry-After": when}), ok(check_body())))
    h.run(lambda c: c.run_check("malware_scan", "drv-1", "1.0"))
    assert h.sleeps == [pytest.approx(7.0)]


def test_429_exhaustion_raises_rate_limited_and_without_retry_after_backs_off() -> None:
    h = Harness(sequence(httpx.Response(429, headers={"retry-after": "2"})), max_attempts=3)
    with pytest.raises(RateLimited) as info:
        h.run(lambda c: c.run_check("malware_scan", "drv-1", "1.0"))
    assert h.sleeps == [2.0, 2.0] and info.value.retry_after_s == 2.0
    assert info.value.route == CHECK and info.value.status == 429

    h = Harness(sequence(httpx.Response(429), ok(check_body())))
    h.run(lambda c: c.run_check("malware_scan", "drv-1", "1.0"))
    assert len(h.sleeps) == 1 and 0 <= h.sleeps[0] <= 0.05


def test_a_retry_after_too_long_to_wait_inside_a_call_is_raised_at_once() -> None:
    h = Harness(sequence(httpx.Response(429, headers={"retry-after": "3600"})))
    with pytest.raises(RateLimited) as info:
        h.run(lambda c: c.get_package("drv-1"))
    assert h.sleeps == [] and info.value.retry_after_s == 3600.0


# --- transport failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ConnectError("connection refused"),
        httpx.ReadError("connection reset by peer"),
        httpx.RemoteProtocolError("peer closed connection without sending complete body"),
    ],
)
def test_transport_failures_become_transport_errors_from_the_httpx_error(exc: Exception) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    h = Harness(handler, max_attempts=2)
    with pytest.raises(TransportError) as info:
        h.run(lambda c: c.list_page())
    assert info.value.__cause__ is exc and len(h.requests) == 2 and len(h.sleeps) == 1
    assert "GET /v1/drivers" in str(info.value) and "\n" not in str(info.value)
    assert h.events[-1][1] is None and h.limiter.observed == []


def test_a_request_that_cannot_be_built_is_a_bad_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("ftp is not supported")

    h = Harness(handler)
    with pytest.raises(BadRequest) as info:
        h.run(lambda c: c.list_page())
    assert len(h.requests) == 1 and isinstance(info.value.__cause__, httpx.UnsupportedProtocol)


# --- malformed bodies --------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"check": "malware_scan", "driver_id": "drv-1", "ver',  # cut off
        b"<html>not json</html>",
        json.dumps(check_body(passed="maybe")).encode(),  # wrong shape
        json.dumps({"passed": True}).encode(),  # missing fields
        json.dumps(check_body(driver_id="drv-2")).encode(),  # another driver's answer
        json.dumps(check_body(version="0.9")).encode(),  # another version's answer
        json.dumps(check_body(check="hwid_conflicts")).encode(),  # another check's answer
    ],
)
def test_malformed_or_mismatched_check_answers_are_never_verdicts(body: bytes) -> None:
    h = Harness(sequence(httpx.Response(200, content=body)), max_attempts=3)
    with pytest.raises(MalformedResponse) as info:
        h.run(lambda c: c.run_check("malware_scan", "drv-1", "1.0"))
    assert len(h.requests) == 3 and info.value.route == CHECK
    assert "\n" not in str(info.value) and "POST /v1/checks/malware_scan" in str(info.value)


def test_a_malformed_body_is_retried_and_a_good_one_then_accepted() -> None:
    h = Harness(sequence(httpx.Response(200, content=b'{"items": "soon"}'), ok({"items": []})))
    page = h.run(lambda c: c.list_page())
    assert page.items == [] and len(h.requests) == 2


def test_a_package_served_as_json_is_malformed_not_bytes() -> None:
    h = Harness(sequence(ok({"package": None}), httpx.Response(200, content=b"\x00\x01\x02")))
    assert h.run(lambda c: c.get_package("drv-1")) == b"\x00\x01\x02"
    assert len(h.requests) == 2


def test_a_decision_put_is_retried_and_validated() -> None:
    answer = {"driver_id": "drv-1", "version": "1.0", "stage": "security", "status": "in_review"}
    h = Harness(sequence(httpx.Response(503), ok({"status": 42}), ok(answer | {"duplicate": True})))
    decision = DecisionRequest(verdict="approved")
    got = h.run(lambda c: c.put_decision("drv-1", "1.0", "intake", decision))
    assert got.duplicate and [r.method for r in h.requests] == ["PUT"] * 3
    assert h.requests[0].url.path == "/v1/drivers/drv-1/versions/1.0/reviews/intake"
    assert json.loads(h.requests[0].content)["verdict"] == "approved"


def test_path_segments_are_escaped() -> None:
    h = Harness(sequence(ok(record("a/b?c"))))
    h.run(lambda c: c.get_driver("a/b?c"))
    assert h.requests[0].url.raw_path == b"/v1/drivers/a%2Fb%3Fc"


# --- paging and ETags --------------------------------------------------------------------


def paged(pages: list[list[int]]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        i = int(request.url.params.get("cursor", "0"))
        nxt = str(i + 1) if i + 1 < len(pages) else None
        return ok({"items": [summary(n) for n in pages[i]], "next_cursor": nxt})

    return handler


def test_iter_drivers_follows_cursors_to_the_end() -> None:
    h = Harness(paged([[1, 2], [3, 4], [5]]), page_size=2)

    async def collect(c: HttpCatalog) -> list[str]:
        return [s.id async for s in c.iter_drivers()]

    assert h.run(collect) == ["drv-1", "drv-2", "drv-3", "drv-4", "drv-5"]
    assert [r.url.params.get("cursor") for r in h.requests] == [None, "1", "2"]
    assert all(r.url.params["limit"] == "2" for r in h.requests)


def test_changes_since_sends_an_rfc3339_time_and_pages() -> None:
    h = Harness(paged([[1], [2]]))
    since = datetime(2025, 1, 1, tzinfo=UTC)

    async def collect(c: HttpCatalog) -> list[str]:
        return [s.id async for s in c.changes_since(since)]

    assert h.run(collect) == ["drv-1", "drv-2"]
    assert h.requests[0].url.path == "/v1/drivers/changes"
    assert all(r.url.params["since"] == "2025-01-01T00:00:00Z" for r in h.requests)


def test_a_repeating_cursor_is_malformed_rather_than_an_endless_loop() -> None:
    h = Harness(lambda r: ok({"items": [summary(1)], "next_cursor": "same"}))

    async def collect(c: HttpCatalog) -> list[str]:
        return [s.id async for s in c.iter_drivers()]

    with pytest.raises(MalformedResponse, match="repeats"):
        h.run(collect)
    assert len(h.requests) == 2


def test_a_naive_since_is_refused() -> None:
    h = Harness(paged([[1]]))

    async def collect(c: HttpCatalog) -> list[str]:
        return [s.id async for s in c.changes_since(datetime(2025, 1, 1))]

    with pytest.raises(BadRequest, match="timezone"):
        h.run(collect)


def test_304_on_a_current_etag_returns_no_record() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("if-none-match") == '"e1"':
            return httpx.Response(304, headers={"etag": '"e1"'})
        return ok(record(), etag='"e1"')

    async def both(c: HttpCatalog) -> tuple[Any, Any]:
        return await c.get_driver("drv-1"), await c.get_driver("drv-1", etag='"e1"')

    (rec, etag), revalidated = Harness(handler).run(both)
    assert rec is not None and etag == '"e1"'
    assert revalidated == (None, '"e1"')


def test_a_record_for_another_driver_is_malformed() -> None:
    h = Harness(sequence(ok(record("drv-2"))), max_attempts=2)
    with pytest.raises(MalformedResponse, match="drv-2"):
        h.run(lambda c: c.get_driver("drv-1"))


def test_http_catalog_is_a_catalog_and_every_error_is_a_catalog_error() -> None:
    h = Harness(sequence(httpx.Response(418)))
    assert isinstance(h.catalog, Catalog)
    with pytest.raises(CatalogError):
        h.run(lambda c: c.get_package("drv-1"))


def test_the_limiter_hears_how_long_ago_each_answered_request_was_sent() -> None:
    """A limiter admits a request when it arrives and a success comes back after the
    server's time: the governor places answers by when their requests were sent."""

    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.05)  # the server's time on it
        return ok(record())

    h = Harness(slow)
    h.run(lambda c: c.get_driver("drv-1"))
    assert h.limiter.observed == [200]
    assert 0.05 <= h.limiter.elapsed_s[0] < 1.0

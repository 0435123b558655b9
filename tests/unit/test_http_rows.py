"""HttpCatalog takes pages row by row: bad rows come as BadRow in their place, resolved by
id when the record is good; bodies are read with byte caps. ``httpx.MockTransport``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from driver_review.catalog.http import LIST, HttpCatalog
from driver_review.catalog.models import DriverSummary
from driver_review.config import CatalogConfig
from driver_review.errors import BadRequest, MalformedResponse, ResponseTooLarge
from driver_review.quarantine import BadRow

NOW_WALL = 1_750_000_000.0
STAGES = ["intake", "security", "compatibility"]


def row(i: int, **over: Any) -> dict[str, Any]:
    return {
        "id": f"drv-{i}",
        "version": "1.0",
        "stage": "intake",
        "status": "in_review",
        "updated_at": f"2025-01-01T00:00:{i:02d}Z",
    } | over


def record(driver_id: str, **over: Any) -> dict[str, Any]:
    return {
        "id": driver_id,
        "vendor_id": "v1",
        "vendor": "Acme",
        "name": "NIC",
        "version": "2.0",
        "stage": "security",
        "status": "in_review",
        "hardware_ids": ["PCI\\VEN_8086&DEV_1234"],
        "package": {"size": 3, "sha256": "a" * 64},
        "updated_at": "2025-01-01T00:01:00Z",
    } | over


def listing(
    pages: list[list[Any]],
    records: dict[str, dict] | None = None,
    requests: list[httpx.Request] | None = None,
):
    def handler(request: httpx.Request) -> httpx.Response:
        if requests is not None:
            requests.append(request)
        path = request.url.path
        if path == "/v1/drivers":
            k = int(request.url.params.get("cursor", "0"))
            nxt = str(k + 1) if k + 1 < len(pages) else None
            return httpx.Response(200, json={"items": pages[k], "next_cursor": nxt})
        driver_id = path.rsplit("/", 1)[1]
        if records and driver_id in records:
            return httpx.Response(200, json=records[driver_id])
        return httpx.Response(404, json={"detail": "no such driver"})

    return handler


def run(handler, coro_fn, **config: Any) -> Any:
    async def main() -> Any:
        catalog = HttpCatalog(
            CatalogConfig(url="http://catalog.test", max_attempts=2, **config),
            transport=httpx.MockTransport(handler),
            sleep=_no_sleep,
            wall_clock=lambda: NOW_WALL,
            stages=STAGES,
        )
        try:
            return await coro_fn(catalog)
        finally:
            await catalog.aclose()

    return asyncio.run(main())


async def _no_sleep(_: float) -> None:
    return None


async def _all(catalog: HttpCatalog) -> list[DriverSummary | BadRow]:
    return [item async for item in catalog.iter_drivers()]


BAD = [
    ("unknown_stage", {"stage": "legal_review"}),
    ("bad_version", {"version": "1." * 20}),
    ("bad_version", {"version": "1.0\n\x1b[2J"}),
    ("bad_version", {"version": ".."}),
    ("bad_id", {"id": ".."}),
    ("bad_id", {"id": "a/b"}),
    ("bad_time", {"updated_at": "2999-01-01T00:00:00Z"}),
    ("bad_time", {"updated_at": "1969-12-31T23:59:59Z"}),
    ("bad_time", {"updated_at": "2025-01-01T00:00:00"}),  # no timezone
    ("bad_status", {"status": "legal"}),
    ("wrong_type", {"version": 17}),
    ("wrong_type", {"id": 17}),
]


@pytest.mark.parametrize(("kind", "over"), BAD)
def test_a_bad_row_is_set_aside_alone_and_the_page_goes_on(kind: str, over: dict) -> None:
    got = run(listing([[row(1), row(2, **over), row(3)], [row(4)]]), _all)
    assert [g.id for g in got if isinstance(g, DriverSummary)] == ["drv-1", "drv-3", "drv-4"]
    (bad,) = [g for g in got if isinstance(g, BadRow)]
    assert bad.kind == kind and bad.source == "listing"
    assert "\n" not in bad.reason and "\x1b" not in bad.reason and "\n" not in bad.shown_id


def test_missing_fields_and_rows_that_are_not_objects() -> None:
    missing = row(2)
    del missing["status"]
    got = run(listing([[missing, "drv-9", None, [1], row(5)]]), _all)
    kinds = [g.kind if isinstance(g, BadRow) else "good" for g in got]
    assert kinds == ["missing_field", "bad_row", "bad_row", "bad_row", "good"]


def test_a_bad_row_whose_record_by_id_is_good_is_resolved_to_that_record() -> None:
    requests: list[httpx.Request] = []
    handler = listing(
        [[row(1, stage="legal_review"), row(2, version=".."), row(3, id="..")]],
        records={"drv-1": record("drv-1"), "drv-2": record("drv-2")},
        requests=requests,
    )
    got, stats = run(handler, lambda c: _with_stats(c))
    assert [(g.id, g.version, g.stage) for g in got if isinstance(g, DriverSummary)] == [
        ("drv-1", "2.0", "security"),
        ("drv-2", "2.0", "security"),
    ]
    (bad,) = [g for g in got if isinstance(g, BadRow)]
    assert bad.kind == "bad_id" and bad.driver_id is None and bad.shown_id == "'..'"
    # ``..`` never became a request path: only the two usable ids were fetched by id.
    assert [r.url.path for r in requests if r.url.path != "/v1/drivers"] == [
        "/v1/drivers/drv-1",
        "/v1/drivers/drv-2",
    ]
    assert stats["rows"] == {
        "bad": {"bad_id": 1},
        "resolved": {"unknown_stage": 1, "bad_version": 1},
    }


async def _with_stats(catalog: HttpCatalog) -> tuple[list, dict]:
    return await _all(catalog), catalog.stats()


def test_a_bad_record_by_id_keeps_the_row_quarantined() -> None:
    handler = listing(
        [[row(1, stage="legal_review"), row(2, version="x" * 40)]],
        records={"drv-1": record("drv-1", stage="legal_review")},
    )
    got = run(handler, _all)
    assert [(g.kind, g.driver_id) for g in got] == [
        ("unknown_stage", "drv-1"),
        ("bad_version", "drv-2"),
    ]
    assert "record by id" in got[0].reason and "record by id: NotFound" in got[1].reason


def test_a_broken_envelope_still_fails_the_page() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"rows": [row(1)]})

    with pytest.raises(MalformedResponse, match="no items list"):
        run(handler, _all)


def test_a_page_over_its_byte_cap_is_one_line_naming_route_and_cap() -> None:
    big = [row(i, name="x" * 2000) for i in range(10)]
    with pytest.raises(ResponseTooLarge) as info:
        run(listing([big]), _all, max_page_bytes=4096)
    message = str(info.value)
    assert "\n" not in message and LIST in message and "4096" in message
    assert run(listing([big]), _all, max_page_bytes=64 * 1024)[0].id == "drv-0"


def test_a_streamed_record_stops_at_the_cap_without_a_content_length() -> None:
    chunks_read = []

    async def body():
        for _ in range(1000):
            chunks_read.append(1)
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    with pytest.raises(ResponseTooLarge, match=r"GET /v1/drivers/\{id\}"):
        run(handler, lambda c: c.get_driver("drv-1"), max_record_bytes=8192)
    assert len(chunks_read) < 20  # read no further than the cap


def test_packages_are_capped_by_the_configured_package_size() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=b"p" * 5000, headers={"content-type": "application/octet-stream"}
        )

    assert len(run(handler, lambda c: c.get_package("drv-1"), max_package_bytes=5000)) == 5000
    with pytest.raises(ResponseTooLarge, match="4999-byte cap"):
        run(handler, lambda c: c.get_package("drv-1"), max_package_bytes=4999)


@pytest.mark.parametrize("segment", ["..", ".", ""])
def test_dot_segments_never_reach_the_wire(segment: str) -> None:
    requests: list[httpx.Request] = []
    with pytest.raises(BadRequest, match="path segment"):
        run(listing([[]], requests=requests), lambda c: c.get_driver(segment))
    assert requests == []


def test_an_unchanged_page_gives_identical_bad_rows() -> None:
    page = [row(1, stage="legal_review", id="..")]
    first = run(listing([page]), _all)[0]
    again = run(listing([json.loads(json.dumps(page))]), _all)[0]
    assert (first.key, first.fingerprint) == (again.key, again.fingerprint)

"""``driver-review probe``: against the simulator (real HTTP on 127.0.0.1) the contract
holds; against a deliberately broken catalog each break is named; never more than 12
requests, never a write."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from driver_review.cli import main
from driver_review.config import PipelineConfig, load_config
from driver_review.probe import MAX_REQUESTS, ProbeReport, latency_ms, run_probe
from driver_review.sim import SimServer, SimSettings

ITEMS = {
    "auth",
    "listing",
    "changes",
    "record",
    "etag",
    "errors",
    "retry-after",
    "ratelimit",
    "latency",
}
TOKEN = "probe-secret-token-4711"


class Counting(httpx.AsyncBaseTransport):
    """The real network, with every request the probe makes written down."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _config(url: str, **catalog: Any) -> PipelineConfig:
    return load_config(None).with_overrides(catalog={"url": url, **catalog})


def _by_name(report: ProbeReport) -> dict[str, tuple[str, str]]:
    return {i.name: (i.status, i.detail) for i in report.items}


def test_simulator_holds_the_contract_within_the_budget(
    sim_factory: Callable[..., SimServer],
) -> None:
    sim = sim_factory(SimSettings(drivers=30, seed=2, ratelimit_headers=True, rate_limit=100))
    wire = Counting()
    report = run_probe(_config(sim.url), check="malware_scan", transport=wire)
    items = _by_name(report)
    assert report.ok, report.items
    assert ITEMS | {"check malware_scan"} <= set(items)
    assert all(status != "BROKEN" for status, _ in items.values())
    # The RateLimit signals the simulator sends are reported, with the policy's numbers.
    assert "ratelimit-policy" in items["ratelimit"][1] and "q=100" in items["ratelimit"][1]
    assert items["retry-after"][1] == "no 429/503 met"
    assert report.requests == len(wire.requests) <= MAX_REQUESTS
    # Read-only: the one POST is the check itself, and nothing is ever PUT.
    assert [r.method for r in wire.requests].count("PUT") == 0
    assert [r.url.path for r in wire.requests if r.method == "POST"] == ["/v1/checks/malware_scan"]
    p50, p99 = latency_ms(report.latencies_s)
    assert p50 is not None and p99 is not None and p50 <= p99


def test_a_limit_met_is_waited_out_and_its_retry_after_form_reported(
    sim_factory: Callable[..., SimServer],
) -> None:
    sim = sim_factory(
        SimSettings(drivers=30, seed=3, rate_limit=4, rate_burst=1, retry_after_format="http-date")
    )
    wire = Counting()
    report = run_probe(_config(sim.url), transport=wire)
    items = _by_name(report)
    assert report.ok, report.items
    assert "429 Retry-After HTTP-date" in items["retry-after"][1]
    assert len(wire.requests) <= MAX_REQUESTS
    assert sum(1 for i in report.items if i.status == "ok") >= 6


def _broken_catalog(
    *,
    repeat_cursor: bool = False,
    etag: bool = True,
    json_404: bool = True,
    token: str | None = None,
    changes_back: bool = False,
) -> httpx.MockTransport:
    rows = [
        {
            "id": f"d{i}",
            "version": "1.0",
            "stage": "intake",
            "status": "in_review",
            "updated_at": f"2026-01-0{i + 1}T00:00:00Z",
        }
        for i in range(6)
    ]
    record = {
        "vendor_id": "v",
        "vendor": "V",
        "name": "n",
        "version": "1.0",
        "stage": "intake",
        "status": "in_review",
        "hardware_ids": [],
        "package": {"size": 1, "sha256": "0" * 64},
        "updated_at": "2026-01-01T00:00:00Z",
    }

    def handle(request: httpx.Request) -> httpx.Response:
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return httpx.Response(401, json={"detail": "no"})
        path, q = request.url.path, request.url.params
        if path == "/v1/drivers":
            start = 0 if repeat_cursor or "cursor" not in q else int(q["cursor"])
            return httpx.Response(
                200, json={"items": rows[start : start + 3], "next_cursor": str(start + 3)}
            )
        if path == "/v1/drivers/changes":
            page = list(reversed(rows)) if changes_back else rows
            return httpx.Response(200, json={"items": page, "next_cursor": None})
        driver = path.rsplit("/", 1)[1]
        if driver in {r["id"] for r in rows}:
            if etag and request.headers.get("if-none-match") == '"e1"':
                return httpx.Response(304, headers={"etag": '"e1"'})
            return httpx.Response(
                200, json={"id": driver, **record}, headers={"etag": '"e1"'} if etag else {}
            )
        if json_404:
            return httpx.Response(404, json={"detail": "no such driver"})
        return httpx.Response(404, text="<html>Not Found</html>")

    return httpx.MockTransport(handle)


def test_a_well_behaved_fake_passes() -> None:
    report = run_probe(_config("http://vendor.test"), transport=_broken_catalog(), min_gap_s=0)
    assert report.ok, report.items


@pytest.mark.parametrize(
    ("fault", "item", "words"),
    [
        ({"repeat_cursor": True}, "listing", "does not advance"),
        ({"etag": False}, "etag", "no ETag"),
        ({"json_404": False}, "errors", "not JSON"),
        ({"changes_back": True}, "changes", "goes back"),
    ],
)
def test_each_contract_break_is_named(fault: dict[str, bool], item: str, words: str) -> None:
    report = run_probe(
        _config("http://vendor.test"), transport=_broken_catalog(**fault), min_gap_s=0
    )
    assert not report.ok
    broken = {i.name: i.detail for i in report.items if i.status == "BROKEN"}
    assert list(broken) == [item] and words in broken[item]


def test_credentials_come_from_the_environment_and_never_show() -> None:
    cfg = _config("http://vendor.test", auth={"kind": "bearer", "token_env": "VENDOR_TOKEN"})
    good = run_probe(
        cfg, transport=_broken_catalog(token=TOKEN), environ={"VENDOR_TOKEN": TOKEN}, min_gap_s=0
    )
    assert good.ok, good.items
    assert TOKEN not in json.dumps(good.as_dict())
    bad = run_probe(
        cfg,
        transport=_broken_catalog(token=TOKEN),
        environ={"VENDOR_TOKEN": "wrong-token"},
        min_gap_s=0,
    )
    assert not bad.ok and bad.requests == 1  # refused: nothing else is asked
    assert _by_name(bad)["auth"] == ("BROKEN", "HTTP 401 with bearer from the environment")


def test_cli_exit_codes(
    sim_factory: Callable[..., SimServer], capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory(drivers=10, seed=4)
    assert main(["probe", "--catalog-url", sim.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok"] and out["requests"] <= MAX_REQUESTS
    # A check that calls no endpoint, or none at all: a flag error, before any request.
    assert main(["probe", "--catalog-url", sim.url, "--check", "metadata_complete"]) == 2
    assert main(["probe", "--catalog-url", sim.url, "--check", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--check nope: no such check" in err
    # Nothing listens here: a break (exit 1) named in one line.
    sim.stop()
    assert main(["probe", "--catalog-url", sim.url]) == 1
    assert "probe: reach: stopped: GET" in capsys.readouterr().err

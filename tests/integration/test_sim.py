"""The simulated catalog over real HTTP on 127.0.0.1: the REST contract, rate limiting,
faults, generated changes and signed webhook pings."""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from driver_review.catalog.models import DriverRecord, Page, WebhookPing
from driver_review.errors import ConfigError
from driver_review.sim import SimSettings
from driver_review.sim.cli import add_arguments, settings_from_args
from tests.support.wait import wait_until

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 bytes


def all_pages(client: httpx.Client, path: str, **params: object) -> list[Page]:
    pages, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = client.get(path, params=query)
        assert response.status_code == 200, response.text
        pages.append(Page.model_validate_json(response.content))
        cursor = pages[-1].next_cursor
        if cursor is None:
            return pages


# --- a tiny webhook receiver -------------------------------------------------------------


@dataclass
class Receiver:
    """Records every POST; ``answer(attempt_of_this_id)`` gives (status, headers)."""

    answer: Callable[[int], tuple[int, dict[str, str]]] = lambda attempt: (204, {})
    received: list[tuple[float, dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    def attempts(self, msg_id: str) -> list[float]:
        return [t for t, h, _ in self.received if h["webhook-id"] == msg_id]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            with lock:
                rec.received.append((time.monotonic(), headers, body))
                attempt = len(rec.attempts(headers["webhook-id"]))
            status, extra = rec.answer(attempt)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield rec
    server.shutdown()
    server.server_close()
    thread.join(5)


# --- REST contract -------------------------------------------------------------------------


def test_full_listing_pages_are_complete_and_ordered(sim_factory) -> None:
    sim = sim_factory(drivers=1200, seed=1)
    with httpx.Client(base_url=sim.url) as client:
        pages = all_pages(client, "/v1/drivers", limit=500)
        assert [len(p.items) for p in pages] == [500, 500, 200]
        ids = [s.id for p in pages for s in p.items]
        assert ids == sorted(set(ids)) and len(ids) == 1200
        assert client.get("/v1/drivers").json()["items"][0]["id"] == "drv-000000"
        too_big = client.get("/v1/drivers", params={"limit": 1001})
        assert too_big.status_code == 400 and "limit" in too_big.json()["detail"]
        bad = client.get("/v1/drivers", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 400 and "cursor" in bad.json()["detail"]


@pytest.mark.timeout(60)
def test_changes_since_is_complete_and_ordered_while_changes_arrive(sim_factory) -> None:
    sim = sim_factory(drivers=400, seed=2, update_rate=300.0)
    with httpx.Client(base_url=sim.url) as client:
        rows = [s for p in all_pages(client, "/v1/drivers/changes", since="1970-01-01T00:00:00Z",
                                     limit=40) for s in p.items]  # fmt: skip
        keys = [(s.updated_at, s.id) for s in rows]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        watermark = keys[-1][0]
        latest = {s.id: s for s in rows}
        # Every driver whose current state is not newer than the watermark was seen in it.
        now = [s for p in all_pages(client, "/v1/drivers", limit=1000) for s in p.items]
        assert len(now) >= 400
        for s in now:
            if s.updated_at <= watermark:
                assert latest[s.id] == s
        wait_until(lambda: sim.state.stats.changes_generated > 50, 10, "50 changes", every_s=0.02)
        newer = client.get("/v1/drivers/changes", params={"since": watermark.isoformat()})
        assert newer.status_code == 200
        assert all(datetime.fromisoformat(r["updated_at"]) > watermark
                   for r in newer.json()["items"])  # fmt: skip
        assert newer.json()["items"], "changes keep arriving"
        bad = client.get("/v1/drivers/changes", params={"since": "yesterday"})
        assert bad.status_code == 400 and "since" in bad.json()["detail"]
        naive = client.get("/v1/drivers/changes", params={"since": "2024-01-01T00:00:00"})
        assert naive.status_code == 400 and "since" in naive.json()["detail"]


def test_driver_etag_304_and_change(sim_factory) -> None:
    sim = sim_factory(drivers=50, seed=3)
    driver_id = next(d for d, s in sim.state.current().items() if s["stage"] == "intake")
    with httpx.Client(base_url=sim.url) as client:
        first = client.get(f"/v1/drivers/{driver_id}")
        etag = first.headers["etag"]
        record = DriverRecord.model_validate_json(first.content)
        assert re.fullmatch(r'"[0-9a-f]{32}"', etag) and record.id == driver_id
        again = client.get(f"/v1/drivers/{driver_id}", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        put = client.put(
            f"/v1/drivers/{driver_id}/versions/{record.version}/reviews/intake",
            json={"verdict": "approved"},
        )
        assert put.status_code == 200 and put.json()["stage"] == "security"
        after = client.get(f"/v1/drivers/{driver_id}", headers={"If-None-Match": etag})
        assert after.status_code == 200 and after.headers["etag"] != etag
        assert client.get("/v1/drivers/drv-999999").status_code == 404
    stats = httpx.get(f"{sim.url}/_sim/stats").json()
    assert stats["requests"]["GET /v1/drivers/{id}"] == {"200": 2, "304": 1, "404": 1}
    assert stats["driver_fetches"] == 2 and stats["driver_not_modified"] == 1


def test_package_checks_and_decisions(sim_factory) -> None:
    import hashlib

    sim = sim_factory(drivers=600, seed=4, package_size=4096)
    truth = sim.state.truth()
    with httpx.Client(base_url=sim.url) as client:
        for driver_id in list(truth)[:40]:
            record = DriverRecord.model_validate_json(
                client.get(f"/v1/drivers/{driver_id}").content
            )
            package = client.get(f"/v1/drivers/{driver_id}/package")
            assert package.headers["content-type"] == "application/octet-stream"
            assert package.headers["x-driver-version"] == record.version
            assert (hashlib.sha256(package.content).hexdigest() == record.package.sha256) == (
                truth[driver_id]["check"] != "package_digest"
            )
        failing = next(d for d, t in truth.items() if t["check"] == "malware_scan")
        version = truth[failing]["version"]
        scan = client.post(
            "/v1/checks/malware_scan", json={"driver_id": failing, "version": version}
        )
        assert scan.status_code == 200 and scan.json()["passed"] is False
        body = {"driver_id": failing, "version": "0.0.0.1"}
        assert client.post("/v1/checks/malware_scan", json=body).status_code == 409
        assert client.post("/v1/checks/astrology", json=body).status_code == 404
        assert (
            client.post("/v1/checks/malware_scan", json={"driver_id": failing}).status_code == 400
        )
        url = f"/v1/drivers/{failing}/versions/{version}/reviews"
        stage = sim.state.current()[failing]["stage"]
        assert (
            client.put(f"{url}/{stage}", json={"verdict": "approved"}).json()["duplicate"] is False
        )
        dup = client.put(f"{url}/{stage}", json={"verdict": "approved"})
        assert dup.status_code == 200 and dup.json()["duplicate"] is True
        wrong = client.put(f"/v1/drivers/{failing}/versions/0.0.0.1/reviews/intake",
                           json={"verdict": "approved"})  # fmt: skip
        assert wrong.status_code == 409 and "not current" in wrong.json()["detail"]
        bad = client.put(f"{url}/{stage}", json={"verdict": "maybe"})
        assert bad.status_code == 400 and "verdict" in bad.json()["detail"]
    stats = httpx.get(f"{sim.url}/_sim/stats").json()
    assert (stats["decisions"], stats["duplicate_decisions"]) == (2, 1)
    assert stats["packages_served"] == 40 and stats["package_bytes"] == 40 * 4096


def test_openapi_lists_the_v1_routes(sim_factory) -> None:
    sim = sim_factory(drivers=10)
    paths = httpx.get(f"{sim.url}/openapi.json").json()["paths"]
    assert {p: sorted(ops) for p, ops in paths.items()} == {
        "/v1/drivers": ["get"],
        "/v1/drivers/changes": ["get"],
        "/v1/drivers/{id}": ["get"],
        "/v1/drivers/{id}/package": ["get"],
        "/v1/checks/{check}": ["post"],
        "/v1/drivers/{id}/versions/{version}/reviews/{stage}": ["put"],
    }
    ok = paths["/v1/drivers/{id}"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/DriverRecord")


def test_truth_is_deterministic_by_seed(sim_factory) -> None:
    a, b, c = (sim_factory(drivers=300, seed=s) for s in (5, 5, 6))
    truth = [httpx.get(f"{s.url}/_sim/truth").json()["drivers"] for s in (a, b, c)]
    assert truth[0] == truth[1] and truth[0] != truth[2]
    state = httpx.get(f"{a.url}/_sim/state").json()["drivers"]
    assert set(state) == set(truth[0])
    assert httpx.get(f"{a.url}/_sim/stats").json()["drivers"] == 300


# --- rate limit, latency, faults -----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["seconds", "http-date"])
def test_429_with_retry_after(sim_factory, fmt: str) -> None:
    sim = sim_factory(drivers=10, rate_limit=2.0, rate_burst=2, retry_after_format=fmt)
    with httpx.Client(base_url=sim.url) as client:
        answers = [client.get("/v1/drivers", params={"limit": 1}) for _ in range(5)]
        # The oracle is never limited.
        assert all(client.get("/_sim/stats").status_code == 200 for _ in range(5))
    limited = [r for r in answers if r.status_code == 429]
    assert [r.status_code for r in answers[:2]] == [200, 200] and limited
    for r in limited:
        assert "rate limit" in r.json()["detail"]
        assert "ratelimit" not in r.headers and "ratelimit-policy" not in r.headers
        value = r.headers["retry-after"]
        if fmt == "seconds":
            assert value.isdigit() and int(value) >= 1
        else:
            wait_s = parsedate_to_datetime(value).timestamp() - time.time()
            assert 0 < wait_s <= 2.5
    stats = httpx.get(f"{sim.url}/_sim/stats").json()
    assert stats["rate_limited"] == len(limited)


def test_ratelimit_headers_only_with_the_flag(sim_factory) -> None:
    plain = sim_factory(drivers=10, rate_limit=50.0)
    flagged = sim_factory(drivers=10, rate_limit=50.0, rate_burst=5, ratelimit_headers=True)
    r = httpx.get(f"{plain.url}/v1/drivers/drv-000001")
    assert "ratelimit" not in r.headers and "ratelimit-policy" not in r.headers
    r = httpx.get(f"{flagged.url}/v1/drivers/drv-000001")
    assert r.headers["ratelimit-policy"] == '"default";q=50;w=1'
    assert re.fullmatch(r'"default";r=4;t=\d+', r.headers["ratelimit"])
    missing = httpx.get(f"{flagged.url}/v1/drivers/nope")
    assert missing.status_code == 404 and "ratelimit" in missing.headers


def test_latency_is_added_to_v1_only(sim_factory) -> None:
    sim = sim_factory(drivers=10, latency_ms=80.0, latency_jitter_ms=0.0)
    with httpx.Client(base_url=sim.url) as client:
        client.get("/_sim/stats")  # connect first
        started = time.monotonic()
        client.get("/v1/drivers/drv-000001")
        slow = time.monotonic() - started
        started = time.monotonic()
        client.get("/_sim/stats")
        fast = time.monotonic() - started
    assert slow >= 0.075 and fast < 0.075


@pytest.mark.timeout(60)
def test_fault_injection_produces_every_kind_and_keeps_state(sim_factory) -> None:
    sim = sim_factory(drivers=200, seed=6, fault_rate=1.0, fault_timeout_s=0.2)
    before = sim.state.current()
    targets = iter([(d, s) for d, s in before.items() if s["status"] == "in_review"])
    seen: set[str] = set()
    statuses: set[int] = set()
    lost: list[str] = []

    def request(client: httpx.Client, i: int) -> None:
        try:
            target = next(targets, None) if i % 3 == 2 else None
            if target is not None:
                driver_id, s = target
                lost.append(driver_id)
                url = f"/v1/drivers/{driver_id}/versions/{s['version']}/reviews/{s['stage']}"
                r = client.put(url, json={"verdict": "approved"})
            else:
                r = client.get("/v1/drivers/drv-000001")
        except httpx.TimeoutException:
            seen.add("client-timeout")
            return
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            seen.add("truncated" if "incomplete" in str(exc) or "peer closed" in str(exc)
                     else "dropped")  # fmt: skip
            return
        statuses.add(r.status_code)
        if r.status_code == 200:
            try:
                DriverRecord.model_validate_json(r.content)
            except ValueError:
                seen.add("malformed")

    kinds = {"500", "502", "503", "reset", "timeout", "truncated", "malformed", "lost_response"}
    with httpx.Client(base_url=sim.url, timeout=5.0) as client:
        for i in range(600):
            request(client, i)
            if set(sim.state.stats.faults) >= kinds:
                break
    assert set(sim.state.stats.faults) >= kinds, sim.state.stats.faults
    assert {500, 502, 503} <= statuses
    assert {"dropped", "truncated", "malformed"} <= seen
    # Only a lost response changes state: the decision was made, the answer never came.
    after = sim.state.current()
    changed = {d for d in before if before[d] != after[d]}
    assert len(changed) == sim.state.stats.faults["lost_response"] == sim.state.stats.decisions
    assert changed <= set(lost)


# --- changes and webhooks ------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_webhook_pings_verify_with_standardwebhooks(sim_factory, receiver: Receiver) -> None:
    sim = sim_factory(drivers=100, seed=7, burst_every_s=0.1, burst_size=10, fat_pings=True,
                      webhook_url=receiver.url, webhook_secret=SECRET)  # fmt: skip
    wait_until(lambda: len(receiver.received) >= 20, 10, "20 pings received", every_s=0.02)
    verifier = Webhook(SECRET)
    ids = set()
    for _, headers, body in list(receiver.received)[:20]:
        payload = verifier.verify(body, headers)
        ping = WebhookPing.model_validate(payload)
        assert ping.type == "driver.updated" and ping.data.record is not None
        assert ping.data.record.version == ping.data.version
        ids.add(headers["webhook-id"])
    assert len(ids) == 20
    stats = httpx.get(f"{sim.url}/_sim/stats").json()
    assert stats["webhooks"]["delivered"] >= 20 and stats["changes_generated"] >= 20


@pytest.mark.timeout(30)
def test_thin_pings_and_drops_are_counted(sim_factory, receiver: Receiver) -> None:
    sim = sim_factory(drivers=100, seed=8, update_rate=200.0, webhook_drop_rate=0.5,
                      webhook_url=receiver.url, webhook_secret=SECRET)  # fmt: skip
    wait_until(
        lambda: sim.state.stats.webhooks["delivered"] >= 20, 10, "20 deliveries", every_s=0.02
    )
    body = json.loads(receiver.received[0][2])
    assert "record" not in body["data"] and body["data"]["stage"] == "intake"
    counts = sim.state.stats.webhooks
    assert counts["dropped"] > 0 and counts["queued"] > 0
    # Every generated change is either queued or dropped, never lost silently.
    wait_until(
        lambda: counts["dropped"] + counts["queued"] == sim.state.stats.changes_generated,
        10,
        "every change dropped or queued",
        every_s=0.02,
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_webhook_retries_honour_429_retry_after(sim_factory, receiver: Receiver, form) -> None:
    def answer(attempt: int) -> tuple[int, dict[str, str]]:
        if attempt > 1:
            return 200, {}
        value = "1" if form == "seconds" else formatdate(time.time() + 2, usegmt=True)
        return 429, {"Retry-After": value}

    receiver.answer = answer
    sim = sim_factory(drivers=20, seed=9, burst_every_s=0.05, burst_size=1,
                      webhook_url=receiver.url, webhook_secret=SECRET)  # fmt: skip
    wait_until(lambda: receiver.received, 10, "a first attempt", every_s=0.02)
    msg_id = receiver.received[0][1]["webhook-id"]
    # An HTTP-date has whole seconds: every message refused within one second is due again
    # at the same instant, so another message's retry may land before this one's.
    wait_until(lambda: len(receiver.attempts(msg_id)) >= 2, 10, "its retry", every_s=0.02)
    first, second = receiver.attempts(msg_id)[:2]
    assert second - first >= 0.9
    verifier = Webhook(SECRET)
    for _, headers, body in receiver.received:
        if headers["webhook-id"] == msg_id:
            verifier.verify(body, headers)
    counts = sim.state.stats.webhooks
    assert counts["rate_limited"] >= 1 and counts["retried"] >= 1


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"rate_limit": -1.0}, "rate_limit"),
        ({"fault_rate": 1.5}, "fault_rate"),
        ({"webhook_url": "http://127.0.0.1:9/hook"}, "webhook_secret"),
        (
            {"webhook_url": "http://127.0.0.1:9/hook", "webhook_secret": "whsec_!!"},
            "webhook_secret",
        ),
        ({"webhook_url": "ftp://x", "webhook_secret": SECRET}, "webhook_url"),
        ({"drivers": 0}, "drivers"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_settings_raise_a_one_line_config_error(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        SimSettings(**fields)
    message = str(info.value)
    assert "\n" not in message and named in message, message


def test_cli_flags_build_settings_and_name_the_flag_on_error() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = "--port 0 --drivers 7 --rate-limit 20 --burst-every 2 --ratelimit-headers"
    ns = parser.parse_args([*flags.split(), "--retry-after-format", "http-date"])
    settings = settings_from_args(ns)
    assert (settings.drivers, settings.rate_limit, settings.burst_every_s) == (7, 20.0, 2.0)
    assert settings.ratelimit_headers and settings.retry_after_format == "http-date"
    with pytest.raises(ConfigError, match="--fault-rate"):
        settings_from_args(parser.parse_args(["--fault-rate", "2"]))
    with pytest.raises(ConfigError, match="--webhook-secret"):
        settings_from_args(parser.parse_args(["--webhook-url", "http://127.0.0.1:1/x"]))


def test_start_stop_is_idempotent_and_binds_before_returning(sim_factory) -> None:
    sim = sim_factory(drivers=5)
    assert sim.running and sim.start() is sim
    assert httpx.get(f"{sim.url}/v1/drivers").status_code == 200
    sim.stop()
    sim.stop()
    assert not sim.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/v1/drivers")

"""The live page in real headless Chromium against a running service, and ``explain`` on
that run's Parquet results.

One service for the module (``start_service`` on the session's Ray, the simulator as
the catalog with pings), its admin endpoint on loopback with a bearer token set: the
page gets the token from its URL fragment. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from driver_review.cli import main as cli_main
from driver_review.config import PipelineConfig, load_config, parse_config
from driver_review.results import read_results
from driver_review.runtime.system import System
from driver_review.sim import SimServer, SimSettings
from serve_app.admin import ADMIN_TOKEN_ENV
from serve_app.service import SECRET_ENV, admin_url, start_service, stop_service, ui_address
from tests.support.cdp import Browser, chromium_binary
from tests.support.net import free_port
from tests.support.serve import shutdown_serve

pytestmark = pytest.mark.ray

PAGE_TIMEOUT_S = 30.0


@dataclass
class Service:
    admin: str
    token: str
    config: PipelineConfig
    system: System
    sim: SimServer
    data_dir: str

    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def status(self) -> dict:
        answer = httpx.get(f"{self.admin}/status", headers=self.auth(), timeout=10)
        answer.raise_for_status()
        return answer.json()


@pytest.fixture(scope="module")
def service(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    saved = {k: os.environ.get(k) for k in (SECRET_ENV, ADMIN_TOKEN_ENV)}
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    token = base64.urlsafe_b64encode(os.urandom(24)).decode()
    os.environ[SECRET_ENV], os.environ[ADMIN_TOKEN_ENV] = secret, token
    port = free_port()
    # A rate limit the governor must find (429s), a steady trickle of updates and pings.
    sim = SimServer(
        SimSettings(
            drivers=120,
            seed=15,
            rate_limit=60.0,
            latency_ms=5.0,
            update_rate=3.0,
            webhook_url=f"http://127.0.0.1:{port}/webhooks/drivers",
            webhook_secret=secret,
        )
    ).start()
    data = load_config().model_dump()
    data["catalog"]["url"] = sim.url
    data["window"].update(bucket_s=2.0, lease_s=15.0, batch_size=16, freshness_s=3600.0)
    data["results"]["rollover_s"] = 1.0
    config = parse_config(data, source="test")
    data_dir = str(tmp_path_factory.mktemp("ui"))
    system = start_service(
        config,
        config_path=None,
        instance=f"ui-{uuid.uuid4().hex[:6]}",
        data_dir=data_dir,
        host="127.0.0.1",
        port=port,
        poll_interval_s=2.0,
        admin_port=0,
    )
    try:
        yield Service(admin_url(system.instance), token, config, system, sim, data_dir)
    finally:
        stop_service(system)
        shutdown_serve()  # and its proxy: the next module's Serve takes a port of its own
        sim.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt: chromium)")
    profile = tmp_path / "profile"
    profile.mkdir()
    started = Browser(binary, profile)
    yield started
    started.close()


def _decided_driver(data_dir: str, timeout_s: float = 40.0) -> str:
    """A driver with decisions at two stages or more in the results (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = read_results(data_dir).select(["driver_id", "stage"]).to_pylist()
        stages: dict[str, set[str]] = {}
        for r in rows:
            stages.setdefault(r["driver_id"], set()).add(r["stage"])
        best = max(stages.items(), key=lambda kv: len(kv[1]), default=(None, set()))
        if best[0] is not None and len(best[1]) >= 2:
            return best[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no driver decided at two stages in {timeout_s} s")
        time.sleep(1.0)


_READ_PAGE = """(() => ({
  at: Number(document.body.dataset.at || 0),
  values: [...document.querySelectorAll('#live [data-k]')].map(e => [e.dataset.k, e.dataset.v,
                                                                       e.textContent]),
}))()"""


def _lookup(doc: dict, path: list[str]):
    for key in path:
        if doc is None:
            return None
        doc = doc.get(key)
    return doc


@pytest.mark.timeout(180)
def test_live_page_draws_the_pipeline_and_agrees_with_status(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    stages = service.config.stage_names
    assert service.status()["stages"] == stages
    browser.navigate(f"{service.admin}/ui#token={service.token}")
    drawn = browser.wait_for(
        f"document.querySelectorAll('#flow [data-stage]').length >= {len(stages)} && "
        "document.querySelectorAll('#endpoints [data-endpoint]').length > 0",
        PAGE_TIMEOUT_S,
    )
    assert drawn, f"the page never drew the stages; browser said {browser.errors}"
    assert (
        browser.eval(
            "[...document.querySelectorAll('#flow [data-stage]')].map(e => e.dataset.stage)"
        )
        == stages
    )
    assert browser.eval(
        "[...document.querySelectorAll('#flow .node')].map(e => e.dataset.node || 'stage')"
    ) == ["source", "intake", *["stage"] * len(stages), "decisions"]
    # The token left the address bar (it lives in the tab's sessionStorage).
    assert service.token not in browser.eval("location.href")

    # Its numbers are /status's: compared when the page shows the very document /status
    # answers (the admin keeps one per second), up to 40 tries.
    compared = 0
    for _ in range(40):
        page = browser.eval(_READ_PAGE)
        status = service.status()
        if status["at"] != page["at"]:
            browser.pump(0.3)
            continue
        assert len(page["values"]) > 40
        for key, raw, text in page["values"]:
            path = json.loads(key)
            expected = _lookup(status, path)
            assert json.loads(raw) == expected, f"{path}: page {raw}, /status {expected}"
            if isinstance(expected, int) and not isinstance(expected, bool):
                assert text.replace(",", "") == str(expected), f"{path}: shown as {text!r}"
        compared += 1
        break
    assert compared, "the page never showed the document /status answered"
    endpoints = browser.eval(
        "[...document.querySelectorAll('#endpoints [data-endpoint]')].map(e => e.dataset.endpoint)"
    )
    assert sorted(endpoints) == sorted(status["governor"])

    # It updates: a newer document, more history, and decisions drawn per stage.
    first = browser.eval("Number(document.body.dataset.at)")
    browser.pump(6.0)
    assert browser.eval("Number(document.body.dataset.at)") > first
    assert browser.wait_for(
        "[...document.querySelectorAll('#chart-decisions path')].map(p => p.dataset.series)"
        f".length === {len(stages)}",
        PAGE_TIMEOUT_S,
    )
    assert (
        browser.eval(
            "[...document.querySelectorAll('#chart-backlog path')].map(p => p.dataset.series)"
        )
        == stages
    )
    assert browser.eval("document.querySelectorAll('#chart-rate path').length") >= 2
    shot = browser.screenshot(tmp_path / "live-page.png")
    print(f"screenshot of the live page: {shot}")

    # The driver page: every decision and check of a driver from the run's results.
    driver = _decided_driver(service.data_dir)
    rows = [r for r in read_results(service.data_dir).to_pylist() if r["driver_id"] == driver]
    browser.eval(f"location.hash = '#/driver/{driver}'")
    assert browser.wait_for(
        f"document.querySelectorAll('#driver [data-decision]').length >= {len(rows)}",
        PAGE_TIMEOUT_S,
    ), browser.eval("document.body.innerText")[:500]
    assert browser.eval("getComputedStyle(document.getElementById('live')).display") == "none"
    decided = browser.eval(
        "[...document.querySelectorAll('#driver [data-decision]')].map(e => e.dataset.decision)"
    )
    assert set(decided) >= {r["stage"] for r in rows}
    checks = set(
        browser.eval(
            "[...document.querySelectorAll('#driver [data-check]')].map(e => e.dataset.check)"
        )
    )
    assert checks >= {c["name"] for r in rows for c in r["checks"]}
    shot = browser.screenshot(tmp_path / "driver-page.png")
    print(f"screenshot of the driver page: {shot}")
    assert browser.errors == [], browser.errors


def test_page_is_public_and_its_data_needs_the_token(service: Service) -> None:
    with httpx.Client(base_url=service.admin, timeout=10) as client:
        redirect = client.get("/ui")
        assert redirect.status_code == 308 and redirect.headers["location"] == "ui/"
        page = client.get("/ui/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert client.get("/ui/assets/app.js").status_code == 200
        assert client.get("/ui/assets/..%2Fadmin.py").status_code == 404
        assert client.get("/live").status_code == 401
        assert client.get("/drivers/drv-000001/explain").status_code == 401
        bad = client.get("/live", params={"since": "soon"}, headers=service.auth())
        assert bad.status_code == 400 and "since" in bad.json()["detail"]
        live = client.get("/live", headers=service.auth()).json()
        assert live["status"]["instance"] == service.system.instance
        assert live["history"], "the admin samples the status while nobody watches"
        assert client.get("/drivers/nobody-here/explain", headers=service.auth()).status_code == 404
    assert ui_address(service.system.instance).endswith(
        f"/ui#token=<the value of {ADMIN_TOKEN_ENV}>"
    )


def test_explain_on_the_runs_parquet(service: Service, capsys: pytest.CaptureFixture) -> None:
    driver = _decided_driver(service.data_dir)
    rows = [r for r in read_results(service.data_dir).to_pylist() if r["driver_id"] == driver]
    assert (
        cli_main(["explain", driver, "--data-dir", service.data_dir, "--admin-url", service.admin])
        == 0
    )
    text = capsys.readouterr().out
    print(text)
    assert f"driver {driver}:" in text and "ledger: version" in text
    for r in rows:
        assert f"version {r['version']}" in text
        assert r["stage"] in text
        for check in r["checks"]:
            assert check["name"] in text and check["outcome"] in text

    assert cli_main(["explain", driver, "--data-dir", service.data_dir, "--offline", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["decisions"] >= len(rows) and doc["ledger"] is None
    assert sum(len(v["decisions"]) for v in doc["versions"]) == doc["decisions"]

    assert (
        cli_main(
            [
                "explain",
                "drv-does-not-exist",
                "--data-dir",
                service.data_dir,
                "--admin-url",
                service.admin,
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "drv-does-not-exist" in err
    assert cli_main(["explain", "..", "--data-dir", service.data_dir, "--offline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("driver-review: error: DRIVER_ID")

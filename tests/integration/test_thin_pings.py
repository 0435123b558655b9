"""Thin pings (Standard Webhooks ``data`` holding only ``id``): accepted, resolved by a
conditional GET before intake, and reviewed within seconds, not at the next poll."""

from __future__ import annotations

import base64
import os
import time
import uuid

import httpx
import pytest

from driver_review.config import load_config, parse_config
from driver_review.sim import SimSettings
from serve_app.service import SECRET_ENV, start_service, stop_service
from tests.support.net import free_port
from tests.support.serve import shutdown_serve

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.mark.timeout(300)
def test_thin_pings_are_looked_up_and_reviewed_within_seconds(
    sim_factory, tmp_path, serve_cleanup
) -> None:
    # The simulator pings the port given here, so Serve must listen there: a Serve left
    # running by an earlier test keeps its own port.
    shutdown_serve()
    secret = os.environ.setdefault(SECRET_ENV, "whsec_" + base64.b64encode(os.urandom(24)).decode())
    port = free_port()
    sim = sim_factory(
        SimSettings(
            drivers=60,
            seed=4,
            thin_pings=True,
            update_rate=4.0,
            webhook_url=f"http://127.0.0.1:{port}/webhooks/drivers",
            webhook_secret=secret,
        )
    )
    data = load_config().model_dump()
    data["catalog"].update(url=sim.url, timeout_s=3.0)
    data["window"].update(bucket_s=1.0, lease_s=10.0, batch_size=16, freshness_s=3600.0)
    data["results"]["rollover_s"] = 1.0
    config = parse_config(data, source="test")
    # The poller lists the catalog once at start and then not for ten minutes: whatever
    # is reviewed after the bootstrap came through the pings.
    system = start_service(
        config,
        config_path=None,
        instance=f"thin-{uuid.uuid4().hex[:6]}",
        data_dir=str(tmp_path),
        host="127.0.0.1",
        port=port,
        poll_interval_s=600.0,
        admin_port=0,
    )
    try:
        # Pings sent before the proxy routed to the ingress were answered 404; the poller's
        # first listing, made once the ingress is routed, covers their changes. Counted
        # from here, every ping must be taken.
        httpx.post(f"{sim.url}/_sim/reset_stats", timeout=10)
        time.sleep(8.0)  # changes at 4/s, each announced by a thin ping
        httpx.post(f"{sim.url}/_sim/pause", timeout=10)
        paused = time.monotonic()
        while not _converged(sim) and time.monotonic() - paused < 90:
            time.sleep(0.25)  # bounded: 90 s
        took_s = time.monotonic() - paused
        stats = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()
    finally:
        stop_service(system)
    hooks = stats["webhooks"]
    done, total = sim.state.converged()
    print(
        f"thin pings: {done}/{total} at the truth {took_s:.1f}s after the last change; "
        f"webhooks {hooks}, rejected by status {stats['webhook_rejections']}"
    )
    assert done == total, "changes waited for the next poll (ten minutes away)"
    assert took_s < 60
    assert hooks["delivered"] >= 20 and hooks["rejected"] == 0


def _converged(sim) -> bool:
    done, total = sim.state.converged()
    return done == total

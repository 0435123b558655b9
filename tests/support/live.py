"""A live service on the session Ray with the simulator sending it real pings (the fault
tests and the integration tests of the live path), and how to tell it caught up."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from driver_review.config import PipelineConfig
from driver_review.sim import SimServer, SimSettings
from serve_app.service import SECRET_ENV, start_service, stop_service
from tests.support.configs import fast_config
from tests.support.net import free_port


@dataclass
class Live:
    sim: SimServer
    system: Any
    config: PipelineConfig
    data_dir: str

    def stats(self) -> dict:
        return httpx.get(f"{self.sim.url}/_sim/stats", timeout=30).json()

    def stop(self) -> dict:
        return stop_service(self.system)


def start_live(
    sim_factory: Callable[..., SimServer],
    data_dir: str,
    *,
    drivers: int,
    update_rate: float,
    seed: int = 3,
    window: dict | None = None,
    **sim: Any,
) -> Live:
    secret = os.environ.setdefault(SECRET_ENV, "whsec_" + base64.b64encode(os.urandom(24)).decode())
    port = free_port()
    server = sim_factory(
        SimSettings(
            drivers=drivers,
            seed=seed,
            update_rate=update_rate,
            webhook_url=f"http://127.0.0.1:{port}/webhooks/drivers",
            webhook_secret=secret,
            **sim,
        )
    )
    config = fast_config(server.url, **(window or {}))
    system = start_service(
        config,
        config_path=None,
        instance=f"f-{uuid.uuid4().hex[:6]}",
        data_dir=data_dir,
        host="127.0.0.1",
        port=port,
        poll_interval_s=1.0,
        admin_port=0,
    )
    return Live(server, system, config, data_dir)


def converged(sim: SimServer) -> bool:
    done, total = sim.state.converged()
    return done == total


def diverged(sim: SimServer, orchestrator: Any, limit: int = 5) -> list[dict]:
    """Drivers whose catalog state differs from the truth, with their ledger entries: what
    a failing convergence assertion shows."""
    truth, now = sim.state.truth(), sim.state.current()
    keys = ("version", "status", "stage")
    wrong = [d for d, t in truth.items() if any(now[d][k] != t[k] for k in keys)]
    return [
        {
            "id": d,
            "truth": truth[d],
            "catalog": now[d],
            "ledger": orchestrator.call_sync("driver", d),
        }
        for d in wrong[:limit]
    ]

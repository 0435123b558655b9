"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from driver_review.sim import SimServer, SimSettings
from tests.support.serve import shutdown_serve


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray (never mocked), started once per test session. CI has 2 cores, so
    ask for 4 logical CPUs: the actors ask for none and the few tasks that do are short."""
    import os

    import ray

    from driver_review.runtime.names import NAMESPACE

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # A loaded machine can take longer than Ray's default to start the node's agents.
    os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=4,
            namespace=NAMESPACE,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=512 * 1024 * 1024,
        )
    yield
    ray.shutdown()


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimServer]]:
    """Start simulated catalogs: ``sim_factory(SimSettings(...))`` or
    ``sim_factory(drivers=50, seed=3)``; every one started is stopped at teardown."""
    started: list[SimServer] = []

    def start(settings: SimSettings | None = None, **fields: Any) -> SimServer:
        server = SimServer(settings if settings is not None else SimSettings(**fields))
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def serve_cleanup() -> Iterator[None]:
    """Shut Serve down after the test (a live service deploys its ingress on it)."""
    yield
    shutdown_serve()

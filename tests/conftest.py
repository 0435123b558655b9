"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from driver_review.sim import SimServer, SimSettings


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

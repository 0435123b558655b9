"""The change generator: new driver versions (and now and then new drivers) arriving as a
Poisson process of ``update_rate`` per second, plus ``burst_size`` at once every
``burst_every_s``. Which driver changes and how is the state's seeded sequence; only the
timing depends on the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable

from driver_review.catalog.models import DriverRecord
from driver_review.sim.settings import SimSettings
from driver_review.sim.state import CatalogState

#: Most changes made in one go before yielding to the server's requests.
YIELD_EVERY = 100
#: Arrivals the Poisson loop may owe after a stall; older debt is forgotten, not replayed.
MAX_BACKLOG = 10_000


class ChangeGenerator:
    def __init__(
        self,
        state: CatalogState,
        settings: SimSettings,
        on_change: Callable[[DriverRecord], object] | None = None,
    ) -> None:
        self.state = state
        self.rate = settings.update_rate
        self.burst_every_s = settings.burst_every_s
        self.burst_size = settings.burst_size
        self.on_change = on_change
        self._rng = random.Random(f"{settings.seed}/arrivals")
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def active(self) -> bool:
        return self.rate > 0 or self.burst_every_s is not None

    def start(self) -> None:
        if self.rate > 0:
            self._tasks.append(asyncio.create_task(self._poisson(), name="sim-changes"))
        if self.burst_every_s is not None:
            self._tasks.append(asyncio.create_task(self._bursts(), name="sim-bursts"))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def emit(self, count: int) -> None:
        """Make ``count`` changes now, yielding to the server every ``YIELD_EVERY``."""
        for i in range(count):
            record = self.state.generate_change()
            if self.on_change is not None:
                self.on_change(record)
            if (i + 1) % YIELD_EVERY == 0:
                await asyncio.sleep(0)

    async def _poisson(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self._rng.expovariate(self.rate)
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            now = loop.time()
            due = 0
            while next_at <= now and due < MAX_BACKLOG:
                due += 1
                next_at += self._rng.expovariate(self.rate)
            if due == MAX_BACKLOG:
                next_at = now + self._rng.expovariate(self.rate)
            await self.emit(due)

    async def _bursts(self) -> None:
        assert self.burst_every_s is not None
        while True:
            await asyncio.sleep(self.burst_every_s)
            await self.emit(self.burst_size)

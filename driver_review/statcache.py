"""A value computed at most once per ``max_age_s``: the status document.

The orchestrator's stats walk the ledger (counts, oldest review), so their cost grows with
the catalog; computed once per tick and answered from that, a status call costs the same
at ten drivers and ten million, however often it is asked. The admin endpoint keeps the
whole status document the same way, and lets concurrent callers share one computation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class CachedValue(Generic[T]):
    """``get()`` answers the last value while it is younger than ``max_age_s``."""

    def __init__(
        self,
        compute: Callable[[], T],
        *,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self._compute = compute
        self.max_age_s = max_age_s
        self._clock = clock
        self._value: T | None = None
        self._at = float("-inf")
        self.computed = 0  # how many times compute ran: tests and stats read it

    def refresh(self) -> T:
        """Compute now (the owner's tick), keep and return it."""
        self._value = self._compute()
        self._at = self._clock()
        self.computed += 1
        return self._value

    def get(self) -> T:
        if self._value is None or self._clock() - self._at >= self.max_age_s:
            return self.refresh()
        return self._value


class AsyncCachedValue(Generic[T]):
    """As :class:`CachedValue` for a coroutine; callers arriving while it runs wait for
    that one run instead of starting their own."""

    def __init__(
        self,
        compute: Callable[[], Awaitable[T]],
        *,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self._compute = compute
        self.max_age_s = max_age_s
        self._clock = clock
        self._value: T | None = None
        self._at = float("-inf")
        self._lock = asyncio.Lock()
        self.computed = 0

    def _fresh(self) -> bool:
        return self._value is not None and self._clock() - self._at < self.max_age_s

    async def get(self) -> T:
        if self._fresh():
            return self._value  # type: ignore[return-value]
        async with self._lock:
            if not self._fresh():  # another caller may have computed it while we waited
                self._value = await self._compute()
                self._at = self._clock()
                self.computed += 1
            return self._value  # type: ignore[return-value]

"""Client side of the rate governor: spend leased permits on time.

:class:`PermitBucket` holds the current :class:`~driver_review.governor.Grant` of one
process and hands its permits out in order; it knows nothing about where grants come
from — a ``lease`` coroutine function — so the same bucket serves an in-process governor
(:class:`LocalLimiter`) and, later, a governor actor reached through Ray.

Grants carry delays relative to the lease; the bucket anchors them on its own monotonic
clock when the grant arrives, so a remote governor's clock never matters (a slow round
trip only makes permits later, never earlier). When the governor voids grants (its epoch
changes, e.g. on a 429 with Retry-After) the bucket drops what it holds, and coroutines
already sleeping on a dropped permit take a fresh one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from driver_review.governor import Grant, RateGovernor

LeaseFn = Callable[[int], Awaitable[Grant]]
GiveBackFn = Callable[[Grant, int], Awaitable[None]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

#: A permit this late is forfeited rather than spent: after a stall (a busy machine, a GC
#: pause) spending every overdue permit at once would be a burst the server never allowed.
MAX_LATE_S = 0.1
#: A request that had to open a connection and is still not sending this long after its
#: permit waits for a fresh one (see :func:`on_time`). Measured on a busy 2-core machine:
#: headers leave 0.6 ms after the permit (2.2 ms at the 99th percentile); a connection
#: opened on the way took 6-21 ms for a third of them.
LATE_SEND_S = 0.004

Trace = Callable[[str, Mapping[str, Any]], Awaitable[None]]


def on_time(acquire: Callable[[], Awaitable[None]], *, clock: Clock = time.monotonic) -> Trace:
    """An httpcore ``trace`` extension for a request whose permit was just taken: if the
    request has to open a connection first, and that makes it later than ``LATE_SEND_S``,
    its headers wait for a fresh permit.

    A permit is a moment, not a licence: a request that leaves long after its slot lands
    beside the next one, a pair closer than the rate that nginx ``limit_req`` without
    ``burst`` refuses. The slot passed is lost (one per slow connection, a few per run),
    so callers hold only where the endpoint's grants say ``strict_spacing`` (its 429s came
    without Retry-After): a bucket's burst or a window's count absorbs a late request,
    and at a sweep's start every new process's first connections are late (a warm sweep
    served 0.944 of its limit in its first 5 s holding them, 0.988 not). A request on a
    connection already open is never held (a loop that is late for every request must
    still send)."""
    taken = clock()
    connecting = False

    async def trace(event: str, info: Mapping[str, Any]) -> None:
        nonlocal connecting
        if event.endswith("connect_tcp.started"):
            connecting = True
        elif connecting and event.endswith("send_request_headers.started"):
            connecting = False  # once
            if clock() - taken > LATE_SEND_S:
                await acquire()

    return trace


class PermitBucket:
    """Permits of the current grant, leased ``batch`` at a time when the bucket runs dry."""

    def __init__(
        self,
        lease: LeaseFn,
        *,
        batch: int,
        give_back: GiveBackFn | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        max_late_s: float = MAX_LATE_S,
        clock_name: str | None = None,
    ) -> None:
        """``clock_name``: what ``clock`` is, as grants name theirs (``Grant.clock``);
        a grant made on the same clock is scheduled from when it was made."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self._lease = lease
        self._give_back = give_back
        self._batch = batch
        self._clock = clock
        self._sleep = sleep
        self._max_late_s = max_late_s
        self._clock_name = clock_name
        self._times: deque[float] = deque()  # local monotonic times of held permits
        self._grant: Grant | None = None
        #: As the last grant said: a request late for its permit waits for a fresh one.
        self.strict_spacing = False
        self._generation = 0  # bumped when held permits are dropped
        self._lock = asyncio.Lock()  # one lease in flight at a time
        self._n = {"acquired": 0, "leases": 0, "dropped": 0, "late": 0, "empty_grants": 0}

    async def acquire(self) -> None:
        """Wait until this caller may send one request."""
        woke_late = False
        while True:
            async with self._lock:
                at = await self._next_permit()
                generation = self._generation
            delay_s = at - self._clock()
            if delay_s > 0:
                await self._sleep(delay_s)
            if generation != self._generation:
                continue  # the permit was voided while we slept on it: take a fresh one
            if not woke_late and self._clock() - at > self._max_late_s:
                # Woke this late (a stalled event loop, a busy machine): every caller that
                # slept through the stall would send at once, a burst the server never
                # allowed. Take the next permit instead, once (a loop that is always this
                # late must still send).
                woke_late = True
                self._n["late"] += 1
                continue
            self._n["acquired"] += 1
            return

    async def _next_permit(self) -> float:
        """When the next permit still worth spending falls due; leases when none is left."""
        while True:
            while not self._times:
                await self._refill()
            at = self._times.popleft()
            if self._clock() - at <= self._max_late_s:
                return at
            self._n["late"] += 1

    async def _refill(self) -> None:
        grant = await self._lease(self._batch)
        self._n["leases"] += 1
        if not grant.delays_s:
            # The governor's schedule is full (or paused): ask again when it has room.
            self._n["empty_grants"] += 1
            await self._sleep(max(grant.retry_in_s, 0.001))
            return
        base = self._clock()
        if (
            grant.issued_at is not None
            and self._clock_name is not None
            and grant.clock == self._clock_name
        ):
            base = grant.issued_at  # permits it took long to deliver are late, not later
        self._grant = grant
        self.strict_spacing = grant.strict_spacing
        self._times.extend(base + d for d in grant.delays_s)

    def note_epoch(self, epoch: int) -> None:
        """The governor's current epoch; a change voids the permits held here."""
        if self._grant is not None and epoch != self._grant.epoch:
            self.drop()

    def drop(self) -> int:
        """Forget held permits (and wake nobody: sleepers notice on waking)."""
        dropped = len(self._times)
        self._n["dropped"] += dropped
        self._times.clear()
        self._grant = None
        self._generation += 1
        return dropped

    async def aclose(self) -> None:
        """Give unused permits back so they are not lost to the other callers."""
        grant, unused = self._grant, len(self._times)
        self.drop()
        if grant is not None and unused and self._give_back is not None:
            await self._give_back(grant, unused)

    def stats(self) -> dict[str, Any]:
        return {"held": len(self._times), **self._n}


class LocalLimiter:
    """The :class:`~driver_review.catalog.base.Limiter` over a governor in this process."""

    def __init__(
        self,
        governor: RateGovernor,
        *,
        batch: int | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.governor = governor
        self._clock = clock
        self._bucket = PermitBucket(
            self._lease,
            batch=batch or governor.config.lease_size,
            give_back=self._give_back,
            clock=clock,
            sleep=sleep,
        )

    async def _lease(self, n: int) -> Grant:
        return self.governor.lease(n, self._clock())

    async def _give_back(self, grant: Grant, unused: int) -> None:
        self.governor.give_back(grant, unused, self._clock())

    async def acquire(self) -> None:
        await self._bucket.acquire()

    @property
    def strict_spacing(self) -> bool:
        return self._bucket.strict_spacing

    def paused_for_s(self) -> float:
        """How much longer the governor holds every permit (a Retry-After, a quota)."""
        return self.governor.paused_for_s(self._clock())

    def observe(self, status: int, headers: Mapping[str, str], *, elapsed_s: float = 0.0) -> None:
        now = self._clock()
        epoch = self.governor.observe(status, headers, now, sent_at=now - max(0.0, elapsed_s))
        self._bucket.note_epoch(epoch)

    async def aclose(self) -> None:
        await self._bucket.aclose()

    def stats(self) -> dict[str, Any]:
        return {**self.governor.stats(self._clock()), "bucket": self._bucket.stats()}

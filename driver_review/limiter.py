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
import hashlib
import logging
import mmap
import os
import struct
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: sends are spaced per process only
    fcntl = None  # type: ignore[assignment]

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

#: Where an endpoint keeps strict spacing, two requests to it from this machine leave at
#: least this share of the pace's spacing apart (:class:`NodeEndpoint`). Permits are spaced
#: at the pace, but each process wakes for its own a little late, by how busy its event
#: loop and the machine are: at 57/s through nginx without ``burst`` (60/s, so 17 ms
#: apart), one asyncio process sending on schedule drew 4.9% 429s, its gaps 16.4 ms at the
#: 1st percentile; holding each send until 0.97 of the spacing had passed since the last,
#: 0.2% (none under 17.1 ms).
SEND_GAP = 0.97

log = logging.getLogger(__name__)

Trace = Callable[[str, Mapping[str, Any]], Awaitable[None]]


def on_time(
    acquire: Callable[[], Awaitable[None]],
    space: Callable[[], Awaitable[None]] | None = None,
    *,
    clock: Clock = time.monotonic,
) -> Trace:
    """A ``trace`` extension (httpcore's event names, which
    :class:`~driver_review.catalog.transport.AiohttpTransport` sends too) for a request
    whose permit was just taken: if the request has to open a connection first, and that
    makes it later than ``LATE_SEND_S``, its headers wait for a fresh permit; then they
    wait for ``space`` (the limiter's
    :meth:`~driver_review.catalog.base.Limiter.space`: the endpoint's spacing since the
    last request sent to it from this machine).

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
        elif event.endswith("send_request_headers.started"):
            if connecting:
                connecting = False  # once
                if clock() - taken > LATE_SEND_S:
                    await acquire()
            if space is not None:
                await space()

    return trace


class NodeEndpoint:
    """One endpoint key as every process on this machine sees it, shared through a small
    file (memory-mapped monotonic readings under a ``flock``): when a request last left
    for it, and until when it asked every caller to wait.

    **Spacing.** Permits are spaced by the governor, but the processes spending them wake a
    little late, each by its own event loop's lag: two permits 17 ms apart in two
    processes can leave 2 ms apart, a pair nginx ``limit_req`` without ``burst`` refuses.
    :meth:`space` holds a send until the gap since the last has passed, and records it.

    **Pauses.** A 429 (or 503) with ``Retry-After`` reaches the governor a round trip
    after the process it came to, and the other processes hear of the pause only when
    they lease again, spending what they hold until then: at a slow start's pace of
    640/s, a lease horizon of permits is 160 requests, each sure to be refused.
    :meth:`pause` tells every process here at once; :meth:`paused_for_s` is what a
    :class:`PermitBucket` reads before it lets a caller send.

    Senders on other machines are not seen (their own network adds jitter anyway, and they
    hear of a pause from the governor). Where the file cannot be used (another user's, no
    ``fcntl``), this process alone is spaced and paused, said once.
    """

    def __init__(
        self,
        key: str,
        *,
        directory: str | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.path = Path(directory or tempfile.gettempdir()) / f"driver-review-spacing-{digest}"
        self._clock = clock
        self._sleep = sleep
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        self._shared: bool | None = None  # None until first used
        # This process's fields, when the file cannot be used: no send yet, no pause.
        self._own = [-float("inf"), 0.0, 0.0]
        self.held = 0  # sends held for the spacing

    async def space(self, gap_s: float) -> None:
        """Return once ``gap_s`` has passed since the last send recorded here, recording
        this one."""
        held = False
        while (wait_s := self._claim(self._clock(), gap_s)) > 0:
            held = True
            await self._sleep(wait_s)
        self.held += held

    def _claim(self, now: float, gap_s: float) -> float:
        """0 and this send recorded at ``now``, or how long until it may leave."""
        with self._fields() as fields:
            last = fields[_SENT]
            if last > now + gap_s:
                last = -float("inf")  # from before a reboot (a monotonic clock starts again)
            if now < last + gap_s:
                return last + gap_s - now
            fields[_SENT] = now
            return 0.0

    def pause(self, pause_s: float) -> None:
        """The endpoint asked to wait ``pause_s`` from now: every sender here waits (a
        pause already running ends at the later of the two)."""
        now = self._clock()
        with self._fields() as fields:
            if fields[_PAUSED_AT] <= now < fields[_PAUSED_UNTIL]:
                fields[_PAUSED_UNTIL] = max(fields[_PAUSED_UNTIL], now + pause_s)
            else:
                fields[_PAUSED_AT], fields[_PAUSED_UNTIL] = now, now + pause_s

    def paused_for_s(self) -> float:
        """How much longer the endpoint asked every sender here to wait."""
        now = self._clock()
        with self._fields(write=False) as fields:
            at, until = fields[_PAUSED_AT], fields[_PAUSED_UNTIL]
        # A pause that began after now is from before a reboot.
        return until - now if at <= now < until else 0.0

    @contextmanager
    def _fields(self, *, write: bool = True) -> Iterator[list[float]]:
        """The shared fields, locked; changes to them are written back. Readers
        (``write=False``) share the lock; their changes are not written."""
        if self._shared is None:
            self._shared = self._open()
        if not self._shared:
            yield self._own
            return
        assert self._fd is not None and self._map is not None
        fcntl.flock(self._fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        try:
            fields = list(_LAYOUT.unpack_from(self._map, 0))
            read = list(fields)
            yield fields
            if write and fields != read:
                _LAYOUT.pack_into(self._map, 0, *fields)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _open(self) -> bool:
        if fcntl is None:
            log.warning("send spacing and pauses for this process only: no fcntl here")
            return False
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            log.warning("send spacing and pauses for this process only: %s", exc)
            return False
        try:
            if os.fstat(fd).st_size < _LAYOUT.size:
                # Zeros: a send at monotonic 0.0, long ago, and no pause (a file of an
                # earlier version holds the last send alone).
                os.ftruncate(fd, _LAYOUT.size)
            self._map = mmap.mmap(fd, _LAYOUT.size)
        except OSError as exc:
            os.close(fd)
            log.warning("send spacing and pauses for this process only: %s", exc)
            return False
        self._fd = fd
        return True

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._shared = None


#: :class:`NodeEndpoint`'s file: monotonic readings of the last send, and of when the last
#: pause began and when it ends.
_LAYOUT = struct.Struct("3d")
_SENT, _PAUSED_AT, _PAUSED_UNTIL = 0, 1, 2


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
        paused_for_s: Callable[[], float] | None = None,
    ) -> None:
        """``clock_name``: what ``clock`` is, as grants name theirs (``Grant.clock``);
        a grant made on the same clock is scheduled from when it was made.
        ``paused_for_s``: how much longer the endpoint asked to wait, as heard on this
        machine before the governor says so (:meth:`NodeEndpoint.paused_for_s`): a permit
        falling due within it is dropped with the rest, and its caller waits it out."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self._lease = lease
        self._give_back = give_back
        self._batch = batch
        self._clock = clock
        self._sleep = sleep
        self._max_late_s = max_late_s
        self._clock_name = clock_name
        self._paused_for_s = paused_for_s
        self._times: deque[float] = deque()  # local monotonic times of held permits
        self._grant: Grant | None = None
        #: As the last grant said: a request late for its permit waits for a fresh one.
        self.strict_spacing = False
        self._rate = 0.0  # of the last grant
        self._generation = 0  # bumped when held permits are dropped
        self._lock = asyncio.Lock()  # one lease in flight at a time
        self._n = {
            "acquired": 0,
            "leases": 0,
            "dropped": 0,
            "late": 0,
            "empty_grants": 0,
            "paused": 0,  # callers held by a pause heard on this machine
        }

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
            if self._paused_for_s is not None and (pause_s := self._paused_for_s()) > 0:
                # Another process here was told to wait: so is this one, before the
                # governor's answer to it voids these permits (a lease after the pause
                # brings fresh ones).
                self._n["paused"] += 1
                self.drop()
                await self._sleep(pause_s)
                continue
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
        self._rate = grant.rate
        self.strict_spacing = grant.strict_spacing
        self._times.extend(base + d for d in grant.delays_s)

    @property
    def send_gap_s(self) -> float:
        """How far apart requests leave, where the last grant asks for strict spacing."""
        if not self.strict_spacing or not self._rate > 0:
            return 0.0
        return SEND_GAP / self._rate

    def note_epoch(self, epoch: int) -> None:
        """The governor's current epoch; a newer one voids the permits held here (an
        older one is an answer overtaken by a lease)."""
        if self._grant is not None and epoch > self._grant.epoch:
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
        self._node = NodeEndpoint(governor.key, clock=clock, sleep=sleep)
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

    async def space(self) -> None:
        if gap_s := self._bucket.send_gap_s:
            await self._node.space(gap_s)

    def paused_for_s(self) -> float:
        """How much longer the governor holds every permit (a Retry-After, a quota)."""
        return self.governor.paused_for_s(self._clock())

    def observe(self, status: int, headers: Mapping[str, str], *, elapsed_s: float = 0.0) -> None:
        now = self._clock()
        epoch = self.governor.observe(status, headers, now, sent_at=now - max(0.0, elapsed_s))
        self._bucket.note_epoch(epoch)

    async def aclose(self) -> None:
        await self._bucket.aclose()
        self._node.close()

    def stats(self) -> dict[str, Any]:
        return {
            **self.governor.stats(self._clock()),
            "bucket": self._bucket.stats(),
            "spacing_held": self._node.held,
        }

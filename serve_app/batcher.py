"""Group intake: concurrent requests share one call, sent as soon as the last returned.

A timed micro-batch (Serve's ``@serve.batch``) waits a fixed time for each batch to fill,
then runs the batches one after the other: every ping pays the wait, however light the
load, and under load a batch waits both for its timer and for the batch before it. Here
(as a database's group commit, or a producer with no linger) the first request goes out
at once; whatever arrives while calls are in flight waits only for a free slot and then
leaves together, up to ``max_size``. Batches grow with the load and the round trip, and
no request waits for a timer. ``linger_s`` adds the timed wait back, for callers that
would rather have fewer, larger calls than the lowest latency.

A request cancelled while it waits (its client went away) is dropped before its batch is
sent; one cancelled once sent is still part of the call. An exception the flush raises
reaches every request of its batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupIntake(Generic[T, R]):
    def __init__(
        self,
        flush: Callable[[list[T]], Awaitable[list[R]]],
        *,
        max_size: int,
        max_in_flight: int = 1,
        linger_s: float = 0.0,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if linger_s < 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        self._flush = flush
        self.max_size = max_size
        self.max_in_flight = max_in_flight
        self.linger_s = linger_s
        self._waiting: deque[tuple[T, asyncio.Future[R], float]] = deque()
        self._in_flight = 0
        self._slot_free: asyncio.Event | None = None  # made on first use, in the running loop
        self._drainer: asyncio.Task[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, future, loop.time()))
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        if self._slot_free is None:
            self._slot_free = asyncio.Event()
        try:
            while self._waiting:
                while self._in_flight >= self.max_in_flight:
                    self._slot_free.clear()
                    await self._slot_free.wait()
                if self.linger_s > 0 and len(self._waiting) < self.max_size:
                    due = self._waiting[0][2] + self.linger_s
                    if due > loop.time():
                        await asyncio.sleep(due - loop.time())
                batch: list[tuple[T, asyncio.Future[R]]] = []
                while self._waiting and len(batch) < self.max_size:
                    item, future, _ = self._waiting.popleft()
                    if not future.done():  # cancelled while it waited: never sent
                        batch.append((item, future))
                if batch:
                    self._in_flight += 1
                    task = loop.create_task(self._send(batch))
                    self._flushes.add(task)
                    task.add_done_callback(self._flushes.discard)
        finally:
            self._drainer = None

    async def _send(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"flush answered {len(results)} for a batch of {len(batch)}")
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            self._in_flight -= 1
            assert self._slot_free is not None
            self._slot_free.set()

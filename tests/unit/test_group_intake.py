"""Group intake (serve_app/batcher.py): a call leaves as soon as one may, holding all that
arrived while the last was in flight; no timer unless asked for."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.batcher import GroupIntake


class Flush:
    """A flush whose calls stay in flight until released, recording every batch."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []
        self.fail: BaseException | None = None
        self.short = False

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        if self.fail is not None:
            raise self.fail
        return [i * 10 for i in items][: len(items) - 1 if self.short else None]

    def release(self, n: int) -> None:
        self.gates[n].set()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_first_request_leaves_at_once_and_later_ones_wait_for_it() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=100)
        first = asyncio.create_task(intake(1))
        await _settle()
        assert flush.batches == [[1]]  # no timer: sent before anything else ran
        rest = [asyncio.create_task(intake(i)) for i in (2, 3, 4)]
        await _settle()
        assert flush.batches == [[1]] and intake.waiting == 3 and intake.in_flight == 1
        flush.release(0)
        assert await first == 10
        await _settle()
        assert flush.batches == [[1], [2, 3, 4]]  # all that waited, in one call
        flush.release(1)
        assert await asyncio.gather(*rest) == [20, 30, 40]
        assert intake.in_flight == 0 and intake.waiting == 0

    asyncio.run(run())


def test_a_batch_holds_at_most_max_size() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=2)
        tasks = [asyncio.create_task(intake(i)) for i in range(5)]
        for n in range(3):
            await _settle()
            flush.release(n)
        assert await asyncio.gather(*tasks) == [0, 10, 20, 30, 40]
        assert flush.batches == [[0, 1], [2, 3], [4]]

    asyncio.run(run())


def test_calls_in_flight_are_bounded() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=100, max_in_flight=2)
        a = asyncio.create_task(intake(1))
        await _settle()
        b = asyncio.create_task(intake(2))
        await _settle()
        assert flush.batches == [[1], [2]] and intake.in_flight == 2
        c = [asyncio.create_task(intake(i)) for i in (3, 4)]
        await _settle()
        assert len(flush.batches) == 2 and intake.waiting == 2  # no third call
        flush.release(1)  # the second returns first: its slot goes to the waiting pair
        assert await b == 20
        await _settle()
        assert flush.batches[2] == [3, 4] and not a.done()
        flush.release(0)
        flush.release(2)
        assert [await a, *await asyncio.gather(*c)] == [10, 30, 40]

    asyncio.run(run())


def test_a_request_cancelled_while_it_waits_is_never_sent() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=100)
        first = asyncio.create_task(intake(1))
        await _settle()
        gone = asyncio.create_task(intake(2))
        kept = asyncio.create_task(intake(3))
        await _settle()
        gone.cancel()
        await _settle()
        flush.release(0)
        await first
        await _settle()
        assert flush.batches == [[1], [3]]
        flush.release(1)
        assert await kept == 30
        assert gone.cancelled()

    asyncio.run(run())


def test_a_failed_call_fails_its_batch_only() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=100)
        first = asyncio.create_task(intake(1))
        await _settle()
        flush.fail = ConnectionError("orchestrator gone")
        flush.release(0)
        with pytest.raises(ConnectionError, match="orchestrator gone"):
            await first
        flush.fail = None
        later = asyncio.create_task(intake(2))
        await _settle()
        flush.release(1)
        assert await later == 20 and intake.in_flight == 0

    asyncio.run(run())


def test_a_flush_answering_the_wrong_count_fails_the_batch() -> None:
    async def run() -> None:
        flush = Flush()
        flush.short = True
        intake = GroupIntake(flush, max_size=100)
        a = asyncio.create_task(intake(1))
        await _settle()
        b, c = asyncio.create_task(intake(2)), asyncio.create_task(intake(3))
        flush.release(0)
        await _settle()
        flush.release(1)
        for task in (a, b, c):
            with pytest.raises(RuntimeError, match="answered"):
                await task

    asyncio.run(run())


def test_linger_holds_a_batch_for_company() -> None:
    async def run() -> None:
        flush = Flush()
        intake = GroupIntake(flush, max_size=100, linger_s=0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        first = asyncio.create_task(intake(1))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(intake(2))
        await asyncio.sleep(0.01)
        assert flush.batches == []  # still lingering
        give_up = loop.time() + 5.0
        while not flush.batches and loop.time() < give_up:
            await asyncio.sleep(0.005)
        assert loop.time() - started >= 0.05
        assert flush.batches == [[1, 2]]
        flush.release(0)
        assert await asyncio.gather(first, second) == [10, 20]

    asyncio.run(run())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_size": 0}, "max_size must be >= 1"),
        ({"max_size": 1, "max_in_flight": 0}, "max_in_flight must be >= 1"),
        ({"max_size": 1, "linger_s": -1.0}, "linger_s must be >= 0"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroupIntake(Flush(), **kwargs)

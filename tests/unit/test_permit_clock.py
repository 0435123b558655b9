"""Permits leased from a governor on the same clock are scheduled from when the lease was
made, not from when the grant arrived: a grant delivered late must not overlap the next
one (another worker's, delivered promptly) as a burst."""

from __future__ import annotations

import asyncio

from driver_review.governor import Grant
from driver_review.limiter import LATE_SEND_S, PermitBucket, on_time


def _spent_at(grant_clock: str | None, bucket_clock: str | None) -> list[float]:
    now = [0.3]  # the grant, made at 0.0, reaches this client 0.3 s late
    spent: list[float] = []

    async def lease(n: int) -> Grant:
        return Grant(1, 0, (0.0, 0.2, 0.4, 0.6), 5.0, issued_at=0.0, clock=grant_clock)

    async def sleep(s: float) -> None:
        now[0] += s

    async def run() -> None:
        bucket = PermitBucket(
            lease, batch=4, clock=lambda: now[0], sleep=sleep, clock_name=bucket_clock
        )
        for _ in range(3):
            await bucket.acquire()
            spent.append(round(now[0], 3))

    asyncio.run(run())
    return spent


def test_on_the_same_clock_a_late_grant_keeps_its_schedule_and_forfeits_what_is_overdue() -> None:
    # 0.0 is 0.3 s overdue: forfeited; 0.2 is 0.1 s overdue: still spent (MAX_LATE_S).
    assert _spent_at("monotonic@n1", "monotonic@n1") == [0.3, 0.4, 0.6]


def test_on_another_clock_the_schedule_starts_when_the_grant_arrives() -> None:
    assert _spent_at("monotonic@n1", "monotonic@n2") == [0.3, 0.5, 0.7]
    assert _spent_at(None, None) == [0.3, 0.5, 0.7]


def test_callers_that_slept_through_a_stall_do_not_send_together() -> None:
    """Three callers sleep on permits 0.1 s apart; the loop stalls 0.5 s. Each wakes with
    its permit overdue, forfeits it and takes the next one: they go out spaced, not at once,
    and a caller forfeits at most once (a loop that is always late still sends)."""
    now = [0.0]
    spent: list[float] = []
    stalled = [False]

    async def lease(n: int) -> Grant:
        start = now[0]
        return Grant(1, 0, tuple(round(0.1 * i, 3) for i in range(n)), 10.0, issued_at=start)

    async def sleep(s: float) -> None:
        await asyncio.sleep(0)
        if not stalled[0]:
            stalled[0] = True
            now[0] += 0.5  # the stall: everyone sleeping wakes at 0.5
        else:
            now[0] = max(now[0], now[0] + s)

    async def caller(bucket: PermitBucket) -> None:
        await bucket.acquire()
        spent.append(round(now[0], 3))

    async def run() -> dict:
        bucket = PermitBucket(lease, batch=10, clock=lambda: now[0], sleep=sleep)
        await asyncio.gather(*(caller(bucket) for _ in range(3)))
        return bucket.stats()

    stats = asyncio.run(run())
    assert stats["late"] >= 1
    assert len(spent) == 3 and len(set(spent)) == 3, spent  # not all in one instant


def _holds(events: list[tuple[str, float]]) -> int:
    """How many fresh permits ``on_time`` waited for, the permit taken at 0.0 and each
    httpcore event at its time."""
    now = [0.0]
    acquired = [0]

    async def acquire() -> None:
        acquired[0] += 1

    async def main() -> None:
        trace = on_time(acquire, clock=lambda: now[0])
        for name, at in events:
            now[0] = at
            await trace(name, {})

    asyncio.run(main())
    return acquired[0]


def test_a_request_late_for_its_permit_because_it_opened_a_connection_takes_a_fresh_one() -> None:
    late = LATE_SEND_S * 3
    connect = [("connection.connect_tcp.started", 0.0), ("connection.connect_tcp.complete", late)]
    assert _holds([*connect, ("http11.send_request_headers.started", late)]) == 1
    assert _holds([*connect, ("http2.send_request_headers.started", late)]) == 1
    # A connection opened in time, or a request on one already open, is never held: a
    # loop late for every request must still send.
    assert _holds([*connect[:1], ("http11.send_request_headers.started", LATE_SEND_S / 2)]) == 0
    assert _holds([("http11.send_request_headers.started", late)]) == 0
    # Once per request, whatever follows.
    again = [
        ("http11.send_request_headers.started", late),
        ("http11.send_request_headers.started", 2 * late),
    ]
    assert _holds([*connect, *again]) == 1


def test_an_answer_overtaken_by_a_lease_voids_nothing() -> None:
    """A process learns the governor's epoch from its leases and, later, from the answers
    to its 429s sent without waiting: an answer older than the grant held says nothing
    of it, and only a newer epoch drops what is held."""

    async def lease(n: int) -> Grant:
        return Grant(1, 5, tuple(0.01 * i for i in range(n)), 100.0)

    async def run() -> list[int]:
        bucket = PermitBucket(lease, batch=4)
        await bucket.acquire()
        held = [bucket.stats()["held"]]
        bucket.note_epoch(4)
        held.append(bucket.stats()["held"])
        bucket.note_epoch(6)
        held.append(bucket.stats()["held"])
        return held

    assert asyncio.run(run()) == [3, 3, 0]

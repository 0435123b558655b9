"""Sends to an endpoint that keeps strict spacing leave a gap apart across every process of
a machine (:class:`~driver_review.limiter.SendSpacing`), whoever's permit they spend."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import struct
import time
from pathlib import Path

import pytest

from driver_review.governor import Grant
from driver_review.limiter import SEND_GAP, PermitBucket, SendSpacing, on_time
from tests.support.fakes import FakeTime


def test_a_send_waits_for_the_gap_since_another_process_sent(tmp_path: Path) -> None:
    t = FakeTime()
    a = SendSpacing("http://vendor:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    b = SendSpacing("http://vendor:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    other = SendSpacing("http://other:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)

    async def run() -> list[float]:
        sent = []
        t.now = 10.0
        await a.wait(0.017)
        sent.append(t.now)
        t.now = 10.002  # b's permit came 2 ms later: held until 17 ms after a's send
        await b.wait(0.017)
        sent.append(t.now)
        await other.wait(0.017)  # another endpoint: its own gap
        sent.append(t.now)
        t.now = 10.030
        await a.wait(0.017)  # 13 ms after b's send: held 4 ms
        sent.append(t.now)
        return [round(s, 6) for s in sent]

    try:
        assert asyncio.run(run()) == [10.0, 10.017, 10.017, 10.034]
        assert t.slept == pytest.approx([0.015, 0.004])
        assert (a.held, b.held, other.held) == (1, 1, 0)
    finally:
        for s in (a, b, other):
            s.close()


def test_a_reading_from_before_a_reboot_holds_nothing(tmp_path: Path) -> None:
    t = FakeTime()
    spacing = SendSpacing("k", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    spacing.path.write_bytes(struct.pack("d", 1e9))  # monotonic readings start again at boot
    t.now = 5.0
    asyncio.run(spacing.wait(0.017))
    spacing.close()
    assert t.slept == [] and struct.unpack("d", spacing.path.read_bytes()) == (5.0,)


def test_without_a_usable_file_the_sends_of_this_process_are_still_spaced(tmp_path: Path) -> None:
    t = FakeTime()
    spacing = SendSpacing("k", directory=str(tmp_path / "missing"), clock=t.clock, sleep=t.sleep)

    async def run() -> None:
        await spacing.wait(0.02)
        await spacing.wait(0.02)

    asyncio.run(run())
    assert t.slept == pytest.approx([0.02])


def _send(directory: str, n: int, gap_s: float, out: multiprocessing.Queue) -> None:
    spacing = SendSpacing("http://vendor:80", directory=directory)
    sent = []

    async def run() -> None:
        for _ in range(n):
            await spacing.wait(gap_s)
            sent.append(time.monotonic())

    asyncio.run(run())
    spacing.close()
    out.put(sent)


def test_two_processes_sending_at_once_keep_the_gap_between_all_their_sends(
    tmp_path: Path,
) -> None:
    """Each process alone would send its 40 at once; together they interleave, every send
    at least the gap after the one before it, whichever process sent that one."""
    gap_s, n = 0.004, 40
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_send, args=(str(tmp_path), n, gap_s, out)) for _ in range(2)]
    for p in procs:
        p.start()
    sends = sorted(out.get(timeout=60) + out.get(timeout=60))
    for p in procs:
        p.join(timeout=10)
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert len(sends) == 2 * n
    assert min(gaps) >= gap_s * 0.999, sorted(gaps)[:5]


def test_the_gap_is_a_share_of_the_pace_and_only_where_the_grant_asks_for_spacing() -> None:
    async def run(strict: bool) -> float:
        async def lease(n: int) -> Grant:
            return Grant(1, 0, (0.0,), 50.0, strict_spacing=strict)

        bucket = PermitBucket(lease, batch=1)
        before = bucket.send_gap_s
        await bucket.acquire()
        assert before == 0.0
        bucket.drop()  # a 429's drop keeps the spacing: the requests in flight still leave
        return bucket.send_gap_s

    assert asyncio.run(run(False)) == 0.0
    assert asyncio.run(run(True)) == SEND_GAP / 50.0


def test_headers_wait_for_the_spacing_on_a_kept_connection_too() -> None:
    spaced: list[str] = []

    async def acquire() -> None:
        spaced.append("permit")

    async def space() -> None:
        spaced.append("space")

    async def run() -> None:
        trace = on_time(acquire, space, clock=lambda: 0.0)
        await trace("http11.send_request_headers.started", {})

    asyncio.run(run())
    assert spaced == ["space"]

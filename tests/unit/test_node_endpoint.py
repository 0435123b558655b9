"""What the processes of a machine share of one endpoint
(:class:`~driver_review.limiter.NodeEndpoint`): sends to an endpoint that keeps strict
spacing leave a gap apart, whoever's permit they spend, and a pause one process was told
holds every sender."""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import multiprocessing
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from driver_review.governor import Grant
from driver_review.limiter import SEND_GAP, NodeEndpoint, PermitBucket, on_time
from tests.support.fakes import FakeTime


def test_a_send_waits_for_the_gap_since_another_process_sent(tmp_path: Path) -> None:
    t = FakeTime()
    a = NodeEndpoint("http://vendor:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    b = NodeEndpoint("http://vendor:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    other = NodeEndpoint("http://other:80", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)

    async def run() -> list[float]:
        sent = []
        t.now = 10.0
        await a.space(0.017)
        sent.append(t.now)
        t.now = 10.002  # b's permit came 2 ms later: held until 17 ms after a's send
        await b.space(0.017)
        sent.append(t.now)
        await other.space(0.017)  # another endpoint: its own gap
        sent.append(t.now)
        t.now = 10.030
        await a.space(0.017)  # 13 ms after b's send: held 4 ms
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
    spacing = NodeEndpoint("k", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    # Monotonic readings start again at boot: a send, and a pause, from before one.
    spacing.path.write_bytes(struct.pack("3d", 1e9, 1e9, 1e9 + 30))
    t.now = 5.0
    assert spacing.paused_for_s() == 0.0
    asyncio.run(spacing.space(0.017))
    spacing.close()
    assert t.slept == [] and struct.unpack("3d", spacing.path.read_bytes())[0] == 5.0


def test_a_pause_told_to_one_process_holds_every_sender_here_until_it_ends(
    tmp_path: Path,
) -> None:
    t = FakeTime()
    told, other = (
        NodeEndpoint("http://vendor:80", directory=str(tmp_path), clock=t.clock) for _ in "ab"
    )
    elsewhere = NodeEndpoint("http://other:80", directory=str(tmp_path), clock=t.clock)
    try:
        t.now = 100.0
        assert other.paused_for_s() == 0.0
        told.pause(1.0)
        t.now = 100.25
        assert other.paused_for_s() == pytest.approx(0.75)
        assert elsewhere.paused_for_s() == 0.0  # another endpoint key
        other.pause(0.5)  # a shorter one told meanwhile ends no sooner
        assert told.paused_for_s() == pytest.approx(0.75)
        other.pause(2.0)  # a longer one: the later end
        assert told.paused_for_s() == pytest.approx(2.0)
        t.now = 102.25
        assert told.paused_for_s() == other.paused_for_s() == 0.0
    finally:
        for e in (told, other, elsewhere):
            e.close()


def test_a_file_of_an_earlier_version_holds_its_last_send_and_no_pause(tmp_path: Path) -> None:
    t = FakeTime()
    endpoint = NodeEndpoint("k", directory=str(tmp_path), clock=t.clock, sleep=t.sleep)
    endpoint.path.write_bytes(struct.pack("d", 4.99))  # the last send alone
    t.now = 5.0
    assert endpoint.paused_for_s() == 0.0
    asyncio.run(endpoint.space(0.017))
    endpoint.close()
    assert t.slept == pytest.approx([0.007])


def test_without_a_usable_file_this_process_is_still_spaced_and_paused(tmp_path: Path) -> None:
    t = FakeTime()
    spacing = NodeEndpoint("k", directory=str(tmp_path / "missing"), clock=t.clock, sleep=t.sleep)

    async def run() -> None:
        await spacing.space(0.02)
        await spacing.space(0.02)

    asyncio.run(run())
    assert t.slept == pytest.approx([0.02])
    spacing.pause(1.0)  # and pauses
    t.now += 0.25
    assert spacing.paused_for_s() == pytest.approx(0.75)


def _send(directory: str, n: int, gap_s: float, out: multiprocessing.Queue) -> None:
    # Each send's moment is the clock reading it was recorded at, under the lock: a reading
    # taken after ``space`` returns would add this process's own scheduling delay.
    last = [0.0]

    def clock() -> float:
        last[0] = time.monotonic()
        return last[0]

    spacing = NodeEndpoint("http://vendor:80", directory=directory, clock=clock)
    sent = []

    async def run() -> None:
        for _ in range(n):
            await spacing.space(gap_s)
            sent.append(last[0])

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


def _pause(directory: str, pause_s: float) -> None:
    endpoint = NodeEndpoint("http://vendor:80", directory=directory)
    endpoint.pause(pause_s)
    endpoint.close()


def test_a_pause_told_in_another_process_is_read_here(tmp_path: Path) -> None:
    process = multiprocessing.get_context("spawn").Process(
        target=_pause, args=(str(tmp_path), 30.0)
    )
    process.start()
    process.join(timeout=60)
    endpoint = NodeEndpoint("http://vendor:80", directory=str(tmp_path))
    try:
        assert process.exitcode == 0
        assert 0.0 < endpoint.paused_for_s() <= 30.0
    finally:
        endpoint.close()


def test_permits_falling_due_in_a_pause_told_elsewhere_are_dropped_and_waited_out(
    tmp_path: Path,
) -> None:
    """A process holds a lease of permits at 100/s when another process on the machine is
    told to wait a second: its next caller sends only after that second, on a permit
    leased then (the governor has voided the old ones by then), not on the ones it held."""
    t = FakeTime()
    here = NodeEndpoint("k", directory=str(tmp_path), clock=t.clock)
    there = NodeEndpoint("k", directory=str(tmp_path), clock=t.clock)
    leased_at: list[float] = []

    async def lease(n: int) -> Grant:
        leased_at.append(t.now)
        return Grant(len(leased_at), 0, tuple(i / 100 for i in range(n)), 100.0)

    async def run() -> list[float]:
        bucket = PermitBucket(
            lease, batch=8, clock=t.clock, sleep=t.sleep, paused_for_s=here.paused_for_s
        )
        sent = []
        for _ in range(2):
            await bucket.acquire()
            sent.append(t.now)
        there.pause(1.0)
        await bucket.acquire()
        sent.append(t.now)
        assert bucket.stats()["paused"] == 1 and bucket.stats()["dropped"] == 5
        return sent

    try:
        sent = asyncio.run(run())
    finally:
        here.close()
        there.close()
    assert sent == pytest.approx([0.0, 0.01, 1.01])
    assert leased_at == pytest.approx([0.0, 1.01])


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


def test_a_pause_is_read_while_another_process_reads_it(tmp_path: Path) -> None:
    """Every permit reads the pause: readers share the file's lock, so one reading (or
    stalled mid-read) does not hold the rest."""
    endpoint = NodeEndpoint("k", directory=str(tmp_path))
    endpoint.pause(30.0)
    other = os.open(endpoint.path, os.O_RDONLY)  # another reader, holding its shared lock
    fcntl.flock(other, fcntl.LOCK_SH)
    read: list[float] = []
    reader = threading.Thread(target=lambda: read.append(endpoint.paused_for_s()), daemon=True)
    try:
        reader.start()
        reader.join(timeout=5.0)
        assert read and 29.0 < read[0] <= 30.0, "the read waited for another reader"
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
        reader.join(timeout=5.0)
        endpoint.close()

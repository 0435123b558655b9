"""Two processes sending to nginx ``limit_req`` without ``burst`` through the production
trace hook (:func:`~driver_review.limiter.on_time`) keep a gap between all their requests
(:class:`~driver_review.limiter.NodeEndpoint`), whichever process sends: side by side
with the same two processes unspaced, whose requests land in pairs that nginx refuses."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

import httpx
import pytest

from driver_review.limiter import SEND_GAP, NodeEndpoint, on_time
from driver_review.sim import SimSettings
from jobs.bench.limiters import NginxLimiter, missing_binary

LIMIT = 30  # nginx: requests at least ceil(1000/30) = 34 ms apart
PACE = 20.0  # each process's own schedule: 50 ms apart, the second 5 ms behind the first
N = 30  # requests per process


def _send(
    url: str, offset: float, spaced: bool, directory: str, ready: Any, out: multiprocessing.Queue
) -> None:
    spacing = NodeEndpoint(url, directory=directory)

    async def nothing() -> None:
        return None

    async def space() -> None:
        await spacing.space(SEND_GAP / PACE)

    async def run() -> list[int]:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
            await client.get("/v1/drivers?limit=1")  # the connection, before the schedule
            ready.wait(30)  # both processes connected: their schedules start together
            start = time.monotonic() + 0.05 + offset
            statuses = []
            for i in range(N):
                await asyncio.sleep(max(0.0, start + i / PACE - time.monotonic()))
                ext = {"trace": on_time(nothing, space if spaced else None)}
                statuses.append(
                    (await client.get("/v1/drivers?limit=1", extensions=ext)).status_code
                )
            return statuses

    try:
        out.put(asyncio.run(run()))
    finally:
        spacing.close()


def _refused(url: str, spaced: bool, directory: str) -> tuple[int, int]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    ready = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_send, args=(url, offset, spaced, directory, ready, out))
        for offset in (0.0, 0.005)
    ]
    for p in procs:
        p.start()
    statuses = out.get(timeout=60) + out.get(timeout=60)
    for p in procs:
        p.join(timeout=10)
    return sum(1 for s in statuses if s == 429), len(statuses)


@pytest.mark.timeout(120)
def test_two_processes_keep_their_requests_apart_where_nginx_refuses_pairs(
    sim_factory, tmp_path
) -> None:
    if why := missing_binary("nginx"):
        pytest.skip(why)
    sim = sim_factory(SimSettings(drivers=20, seed=14, latency_ms=2))
    with NginxLimiter(sim.url, rate=LIMIT) as leaky:
        unspaced = _refused(leaky.url, False, str(tmp_path))
        spaced = _refused(leaky.url, True, str(tmp_path))
    print(f"429s unspaced {unspaced}, spaced {spaced}")
    assert unspaced[1] == spaced[1] == 2 * N
    assert unspaced[0] >= N // 2  # the second of most pairs
    assert spaced[0] <= 1  # 48.5 ms apart against 34: one at most, from a stall of nginx

"""The governor actor's class without Ray: successes are reported with their requests'
ages (the meter sees them when the server did), those before a 429 travel with it, and an
idle process's reach it on their own; a send that fails is logged once."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest

from driver_review.config import GovernorConfig
from driver_review.runtime.governor_actor import REPORT_AFTER_S, GovernorService, RemoteLimiter

KEY = "http://127.0.0.1:9"


def test_successes_count_whether_reported_as_ages_or_a_count() -> None:
    async def run() -> dict:
        service = GovernorService(GovernorConfig(), instance="t")
        await service.lease(KEY, 1, 3)
        await service.lease(KEY, 1, [0.5, 0.2, 99.0])  # a stalled report: clamped, counted
        await service.observe(KEY, 503, {"Retry-After": "1"}, [0.1, 0.0])
        return (await service.stats())[KEY]

    stats = asyncio.run(run())
    assert stats["ok"] == 8 and stats["503s"] == 1 and stats["paused_for_s"] > 0


def test_the_successes_before_a_429_reach_the_governor_with_it() -> None:
    """The caller's unreported successes travel with the 429 (not at its next lease), so
    the meter the 429 is judged by holds what the server served just before it."""

    async def run() -> dict:
        service = GovernorService(GovernorConfig(), instance="t")
        await service.lease(KEY, 1)
        await service.observe(KEY, 429, {}, [1.0 - i / 40 for i in range(40)])
        return (await service.stats())[KEY]  # before any further lease

    at_429 = asyncio.run(run())
    assert at_429["ok"] == 40 and at_429["429s"] == 1


class _Counting(GovernorService):
    """The service in-process, counting the reports that came on their own."""

    reports = 0

    async def report(self, key: str, successes) -> None:  # type: ignore[no-untyped-def]
        self.reports += 1
        await super().report(key, successes)


def test_an_idle_process_reports_its_successes_on_its_own() -> None:
    """A process that stops leasing (its work paused with the endpoint, or ran out) still
    has its successes reach the meter within REPORT_AFTER_S, at the ages they came; one
    that keeps leasing sends them with its leases and nothing else."""

    async def run() -> tuple[float, dict, int, dict]:
        idle_service = _Counting(GovernorConfig(), instance="t")
        idle = RemoteLimiter(idle_service, KEY, batch=4)  # type: ignore[arg-type]
        await idle.acquire()
        for _ in range(3):
            idle.observe(200, {})
        noted = time.monotonic()
        waited_s = 0.0
        while (await idle_service.stats())[KEY]["ok"] < 3 and waited_s < 5.0:
            await asyncio.sleep(0.01)
            waited_s = time.monotonic() - noted
        idle_stats = (await idle_service.stats())[KEY]

        busy_service = _Counting(GovernorConfig(initial_rate=200.0), instance="t")
        busy = RemoteLimiter(busy_service, KEY, batch=4)  # type: ignore[arg-type]
        for _ in range(100):  # about 0.5 s at 200/s: a lease every 20 ms takes them
            await busy.acquire()
            busy.observe(200, {})
        busy_reports = busy_service.reports
        await busy.aclose()  # what is left goes with the close
        return waited_s, idle_stats, busy_reports, (await busy_service.stats())[KEY]

    waited_s, idle, busy_reports, busy = asyncio.run(run())
    assert idle["ok"] == 3 and REPORT_AFTER_S - 0.05 <= waited_s < 5.0, waited_s
    assert busy_reports == 0 and busy["ok"] == 100


class _Down(GovernorService):
    """The service whose 429 calls fail while ``down`` (the actor restarting)."""

    down = True

    async def observe(self, key, status, headers, successes=(), age_s=0.0):  # type: ignore[no-untyped-def]
        if self.down:
            raise ConnectionError("actor restarting")
        return await super().observe(key, status, headers, successes, age_s)


def test_a_failed_call_sent_without_waiting_is_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """429s are sent to the governor without waiting. While it is down each send fails:
    one warning says so (not one per 429, and no 'Task exception was never retrieved'),
    and one more after a call went through and the next failed."""

    async def run() -> None:
        service = _Down(GovernorConfig(), instance="t")
        limiter = RemoteLimiter(service, KEY, batch=4)  # type: ignore[arg-type]

        async def sent() -> None:  # the sends so far done (their callbacks run first)
            await asyncio.gather(*list(limiter._pending), return_exceptions=True)

        for _ in range(5):
            limiter.observe(429, {})
        await sent()
        service.down = False
        limiter.observe(429, {})
        await sent()
        service.down = True
        limiter.observe(429, {})
        await sent()
        assert not limiter._pending  # every task done and its outcome read
        await limiter.aclose()

    with caplog.at_level("WARNING", logger="driver_review.runtime.governor_actor"):
        asyncio.run(run())
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert (
        failed
        == ["governor call for http://127.0.0.1:9 failed: ConnectionError: actor restarting"] * 2
    )
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


class _Recording(GovernorService):
    """The service in-process, keeping what each 429 call carried."""

    def __init__(self) -> None:
        super().__init__(GovernorConfig(), instance="t")
        self.calls: list[tuple[int, list[float], float]] = []

    async def observe(self, key, status, headers, successes=(), age_s=0.0):  # type: ignore[no-untyped-def]
        self.calls.append((status, list(successes), age_s))
        return await super().observe(key, status, headers, successes, age_s)


def test_answers_are_placed_when_their_requests_were_sent() -> None:
    """A limiter admits or refuses a request when it arrives; its 429 comes back at once,
    a success only after the server's latency. Both reach the governor as the age of their
    request, so a success sent before a 429 counts before it however late it came back."""

    async def run() -> list[tuple[int, list[float], float]]:
        service = _Recording()
        limiter = RemoteLimiter(service, KEY, batch=4)  # type: ignore[arg-type]
        await limiter.acquire()
        limiter.observe(200, {}, elapsed_s=0.3)  # sent 0.3 s ago, its answer came just now
        limiter.observe(429, {}, elapsed_s=0.002)
        await limiter.aclose()
        return service.calls

    (status, successes, age_s), *_ = asyncio.run(run())
    assert status == 429
    assert len(successes) == 1 and 0.3 <= successes[0] < 0.4
    assert 0.002 <= age_s < 0.1


def test_a_429_drops_held_permits_only_where_the_governor_voids_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The governor keeps the permits out after a small step back (voiding them would bunch
    other processes' with the new schedule), so a process that saw the 429 keeps its own
    too; it drops them when the governor's answer says they were voided, and at once where
    a Retry-After says a pause is coming."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its pause is this test's own

    async def held_after(status_headers: dict[str, str], *, warm: bool) -> tuple[int, int]:
        service = GovernorService(GovernorConfig(initial_rate=100.0), instance="t")
        gov = service._get(KEY)
        if warm:  # a limit known and trusted: a 429 without Retry-After steps back 3%
            gov.warm_start({"limit_estimate": 102.0, "learnt_at": time.time()}, time.monotonic())
        limiter = RemoteLimiter(service, KEY, batch=8)  # type: ignore[arg-type]
        await limiter.acquire()
        limiter.observe(429, status_headers)
        at_once = limiter.stats()["held"]
        await asyncio.gather(*list(limiter._pending))
        answered = limiter.stats()["held"]
        await limiter.aclose()
        return at_once, answered

    # A small step back: kept.
    assert asyncio.run(held_after({}, warm=True)) == (7, 7)
    # Slow start ended far above the reading: voided, dropped once the answer came.
    assert asyncio.run(held_after({}, warm=False)) == (7, 0)
    # A Retry-After: dropped before any answer.
    assert asyncio.run(held_after({"Retry-After": "1"}, warm=True)) == (0, 0)


def test_a_retry_after_one_process_was_told_holds_the_others_here_before_the_governor_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes hold permits at 100/s; a 429 with Retry-After comes to one. The other
    hears of the pause from the governor only when it leases again, up to a lease horizon
    of permits later, each sure to be refused: it sends next only after the pause."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the machine's shared files

    async def run() -> tuple[float, float, int]:
        service = GovernorService(GovernorConfig(initial_rate=100.0), instance="t")
        told = RemoteLimiter(service, KEY, batch=8)  # type: ignore[arg-type]
        other = RemoteLimiter(service, KEY, batch=8)  # type: ignore[arg-type]
        await told.acquire()
        await other.acquire()  # holds the rest of its lease
        told.observe(429, {"Retry-After": "1"})
        paused = other.paused_for_s()
        began = time.monotonic()
        await other.acquire()
        waited = time.monotonic() - began
        stats = other.stats()
        for limiter in (told, other):
            await limiter.aclose()
        return paused, waited, stats["paused"]

    paused, waited, held_by_pause = asyncio.run(run())
    assert 0.9 < paused <= 1.0
    assert waited >= 0.9 and held_by_pause == 1

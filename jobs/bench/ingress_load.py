"""The load of scenario 5: signed pings, and the client that sends them.

``wrk`` (:mod:`.wrk_load`) when it is installed: N pings signed beforehand, each with a
fresh ``webhook-id``, sent over C connections for a bounded time; N is sized from a short
warm-up so that no thread runs out (a run that did says so: ``exhausted_threads``). Without
wrk, the Python client the scenario had before: one asyncio httpx process sending a fixed
number of pings, C at a time (``client`` in the settings says which one ran).

The pings are about drivers that are already published, so intake records them and
queues no review: only the ingress is measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from driver_review.catalog.models import PingData, WebhookPing
from driver_review.sim.ports import free_port
from driver_review.webhooks import signed_headers
from jobs.bench.wrk_load import WrkLoad, run_wrk, wrk_binary, wrk_version

WEBHOOK_PATH = "/webhooks/drivers"
START_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 120.0  # the Python client, per endpoint and round
WARMUP_S = 2.0
WARMUP_PINGS = 3000
#: Pings signed per wrk run: this many times the warm-up's rate, so none runs out.
HEADROOM = 4.0
MAX_PINGS = 300_000  # ~150 MB of requests at most; far above what 2 cores answer


def signed_pings(secret: str, count: int, tag: str) -> list[tuple[bytes, dict[str, str]]]:
    """``count`` thin pings about published drivers, each signed with its own id."""
    now = datetime.now(UTC)
    out = []
    for i in range(count):
        ping = WebhookPing(
            type="driver.updated",
            timestamp=now,
            data=PingData(
                id=f"bench-{tag}-{i:07d}",
                version="1.0.0",
                stage=None,
                status="published",
                updated_at=now,
            ),
        )
        body = ping.model_dump_json(exclude={"data": {"record"}}).encode()
        headers = {
            "content-type": "application/json",
            **signed_headers(secret, f"msg_{uuid.uuid4().hex}", body),
        }
        out.append((body, headers))
    return out


async def python_load(
    url: str, pings: list[tuple[bytes, dict[str, str]]], concurrency: int, timeout_s: float
) -> dict[str, Any]:
    """Send every ping from this process, ``concurrency`` at a time (the fallback client)."""
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    todo: Iterator[tuple[bytes, dict[str, str]]] = iter(pings)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:

        async def worker() -> None:
            for body, headers in todo:
                sent = time.perf_counter()
                try:
                    resp = await client.post(url, content=body, headers=headers)
                    statuses[str(resp.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                latencies.append(time.perf_counter() - sent)

        started = time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(worker() for _ in range(concurrency))), timeout_s
            )
        elapsed_s = time.perf_counter() - started
    accepted = statuses.get("202", 0)
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {
        "pings": len(pings),
        "answered": len(latencies),
        "accepted": accepted,
        "elapsed_s": elapsed_s,
        "accepted_per_s": accepted / elapsed_s,
        "statuses": dict(statuses),
        "p50_latency_s": float(np.percentile(lat, 50)),
        "p99_latency_s": float(np.percentile(lat, 99)),
    }


class Loader:
    """Loads one endpoint per call, with wrk when installed, else with :func:`python_load`."""

    def __init__(
        self, secret: str, *, concurrency: int, duration_s: float, pings: int, scratch: Path
    ) -> None:
        self.secret = secret
        self.concurrency = concurrency
        self.duration_s = duration_s
        self.pings = pings  # the Python client's count per run
        self.scratch = scratch
        self.wrk = wrk_binary()
        self.runs = 0

    def describe(self) -> str:
        if self.wrk is None:
            return (
                f"one asyncio httpx process (this one), {self.pings} pings per run, "
                f"{self.concurrency} at a time: wrk not found"
            )
        return (
            f"{wrk_version(self.wrk)}: 1 thread, {self.concurrency} connections, "
            f"{self.duration_s:g} s per run, pings signed beforehand (unique ids)"
        )

    def _tag(self, name: str) -> str:
        self.runs += 1
        return f"{name}-{self.runs}-{uuid.uuid4().hex[:6]}"

    def python(self, url: str, name: str, pings: int | None = None) -> dict[str, Any]:
        batch = signed_pings(self.secret, pings or self.pings, self._tag(name))
        got = asyncio.run(python_load(url, batch, self.concurrency, LOAD_TIMEOUT_S))
        return {**got, "client": "httpx"}

    def run(self, url: str, name: str) -> dict[str, Any]:
        """Warm ``url`` up, then load it; the second run's figures."""
        if self.wrk is None:
            warm = self.python(url, f"w-{name}", WARMUP_PINGS // 10)
            return {**self.python(url, name), "warmup_accepted": warm["accepted"]}
        warm = self._wrk(url, f"w-{name}", WARMUP_PINGS, WARMUP_S)
        rate = warm["answered"] / max(warm["elapsed_s"], 1e-3)
        if warm["exhausted_threads"]:
            rate *= 2  # it ran out: the rate was higher than seen
        count = min(MAX_PINGS, math.ceil(HEADROOM * rate * self.duration_s) + 1000)
        got = self._wrk(url, name, count, self.duration_s)
        return {**got, "warmup_accepted": warm["accepted"]}

    def _wrk(self, url: str, name: str, count: int, duration_s: float) -> dict[str, Any]:
        assert self.wrk is not None
        # Signed right before the run: a signature holds for the tolerance (5 min) only.
        batch = signed_pings(self.secret, count, self._tag(name))
        load = WrkLoad(connections=self.concurrency, duration_s=duration_s)
        return {**run_wrk(self.wrk, url, batch, load, self.scratch / name), "client": "wrk"}


def _wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"plain ASGI server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError("plain ASGI server did not start")


@contextlib.contextmanager
def plain_server() -> Iterator[str]:
    """The ceiling (:mod:`.plain_asgi`) in a process of its own; yields its webhook URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.bench.plain_asgi", "--port", str(port)],
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
        yield f"http://127.0.0.1:{port}{WEBHOOK_PATH}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

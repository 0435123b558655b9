"""Scenario 5, ingress: signed pings per second accepted by three endpoints, loaded the
same way, one after the other, in rounds:

- ``plain``: the same verification and validation in one uvicorn process, no Ray
  (:mod:`.plain_asgi`) — the ceiling;
- ``serve_noop``: a Serve deployment that reads the body and answers 202 — what the
  engine itself costs (the floor of any Serve ingress);
- ``ingress``: the product's Serve ingress, into the orchestrator's intake.

The load is a bounded asyncio httpx client in this process: N pings, C at a time, every
one signed beforehand with a fresh id. The pings are about drivers that are already
published, so intake records them and queues no review: only the ingress is measured.

No ``from __future__ import annotations`` here: FastAPI reads the no-op route's signature.
"""


import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from ray import serve

from driver_review.bench.common import free_port, ratio, say, target
from driver_review.catalog.models import PingData, WebhookPing
from driver_review.service import SECRET_ENV
from driver_review.webhooks import signed_headers

NOOP_APP = "bench-noop"
NOOP_PREFIX = "/bench-noop"
WEBHOOK_PATH = "/webhooks/drivers"
WARMUP_PINGS = 100
LOAD_TIMEOUT_S = 120.0  # per endpoint and round
START_TIMEOUT_S = 60.0

_noop_api = FastAPI(docs_url=None, redoc_url=None)


@serve.deployment(name="BenchNoop", max_ongoing_requests=512, ray_actor_options={"num_cpus": 0})
@serve.ingress(_noop_api)
class BenchNoop:
    @_noop_api.post(WEBHOOK_PATH)
    async def webhook(self, request: Request) -> Response:
        await request.body()
        return Response(status_code=202)


def signed_pings(secret: str, count: int, tag: str) -> list[tuple[bytes, dict[str, str]]]:
    """``count`` thin pings about published drivers, each signed with its own id."""
    now = datetime.now(UTC)
    out = []
    for i in range(count):
        ping = WebhookPing(type="driver.updated", timestamp=now, data=PingData(
            id=f"bench-{tag}-{i:07d}", version="1.0.0", stage=None, status="published",
            updated_at=now))
        body = ping.model_dump_json(exclude={"data": {"record"}}).encode()
        headers = {"content-type": "application/json",
                   **signed_headers(secret, f"msg_{uuid.uuid4().hex}", body)}
        out.append((body, headers))
    return out


async def _load(url: str, pings: list[tuple[bytes, dict[str, str]]], concurrency: int,
                timeout_s: float) -> dict[str, Any]:
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
            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))),
                                   timeout_s)
        elapsed_s = time.perf_counter() - started
    accepted = statuses.get("202", 0)
    lat = np.array(latencies) if latencies else np.zeros(1)
    return {"pings": len(pings), "answered": len(latencies), "accepted": accepted,
            "elapsed_s": elapsed_s, "accepted_per_s": accepted / elapsed_s,
            "statuses": dict(statuses), "p50_latency_s": float(np.percentile(lat, 50)),
            "p99_latency_s": float(np.percentile(lat, 99))}


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
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "driver_review.bench.plain_asgi",
                             "--port", str(port)], env=dict(os.environ),
                            stdin=subprocess.DEVNULL)
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


def measure(serve_port: int, *, pings: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Load the three endpoints (the product's ingress must already serve on ``serve_port``)."""
    secret = os.environ[SECRET_ENV]
    serve.run(BenchNoop.bind(), name=NOOP_APP, route_prefix=NOOP_PREFIX, blocking=False)
    base = f"http://127.0.0.1:{serve_port}"
    urls = {"serve_noop": f"{base}{NOOP_PREFIX}{WEBHOOK_PATH}", "ingress": f"{base}{WEBHOOK_PATH}"}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in ("plain", "serve_noop", "ingress")}
    try:
        with plain_server() as plain_url:
            urls["plain"] = plain_url
            for name, url in urls.items():  # warm every path before measuring any
                asyncio.run(_load(url, signed_pings(secret, WARMUP_PINGS, f"w-{name}"), 8, 30))
            for r in range(rounds):
                for name in runs:
                    batch = signed_pings(secret, pings, f"{r}-{name}")
                    got = asyncio.run(_load(urls[name], batch, concurrency, LOAD_TIMEOUT_S))
                    runs[name].append(got)
                    say(f"  ingress round {r + 1}: {name} {got['accepted_per_s']:.0f} pings/s "
                        f"({got['statuses']})")
    finally:
        with contextlib.suppress(Exception):
            serve.delete(NOOP_APP)
    best = {name: max(r["accepted_per_s"] for r in rs) for name, rs in runs.items()}
    return {
        "what": "signed pings/s accepted (202) by the product's Serve ingress, against a plain "
                "uvicorn endpoint doing the same verification without Ray (ceiling) and a "
                "Serve no-op deployment (the engine's own cost)",
        "settings": {"pings_per_round": pings, "concurrency": concurrency, "rounds": rounds,
                     "client": "one asyncio httpx process (this one)", "high_water": "10M"},
        "accepted_per_s": best,
        "ingress_to_plain_ratio": ratio(best["ingress"], best["plain"]),
        "ingress_to_serve_noop_ratio": ratio(best["ingress"], best["serve_noop"]),
        "serve_noop_to_plain_ratio": ratio(best["serve_noop"], best["plain"]),
        "runs": runs,
        "targets": {
            "ingress_to_serve_noop_ratio": target(
                ratio(best["ingress"], best["serve_noop"]), ">=", 0.5,
                "the product's work costs at most half of what Serve itself allows"),
            "all_accepted": target(
                ratio(sum(r["accepted"] for r in runs["ingress"]),
                      sum(r["pings"] for r in runs["ingress"])), ">=", 1.0,
                "every ping answered 202 (intake never refused)"),
        },
    }

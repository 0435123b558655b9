"""A paced client: how much of a limiter's rate any client gets at <= 1% 429s, here.

It is told the limit and sends one cheap GET on a fixed schedule at a share of it, from one
asyncio process with one ``httpx`` client, never waiting for an answer before the next
send, and holding none back: the arrivals of a plain paced client on this machine (a
client that holds a request bunched against the last, as driver-review's sweeps do where
an endpoint keeps strict spacing, comes closer). Shares are tried
from the highest down (``FRACTIONS``), each for ``step_s``, with a pause between for the
limiter to forget the last; the first share with at most ``MAX_SHARE_429`` 429s is the
ceiling. It is a reference for a sweep's figure, not a peer: it knows what the sweep has to
find, and reviews nothing.

nginx ``limit_req`` without ``burst=`` refuses any request closer than ``ceil(1000/R)`` ms
to the last it passed, so how close to the limit a client gets depends on how steady its
arrivals are, not on what it knows: that is what this measures.

Run in a child process (``python -m jobs.bench.paced URL --limit R``, JSON on stdout), so
that the simulator serving the benchmark's process does not share its interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx

FRACTIONS = (0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5)
MAX_SHARE_429 = 0.01
FORGET_S = 1.5  # between steps: the longest window of the limiters measured is 1 s
PATH = "/v1/drivers?limit=1"


async def _step(client: httpx.AsyncClient, rate: float, step_s: float) -> dict[str, Any]:
    statuses: list[int] = []
    errors = 0

    async def one() -> None:
        nonlocal errors
        try:
            statuses.append((await client.get(PATH)).status_code)
        except httpx.HTTPError:
            errors += 1

    loop = asyncio.get_running_loop()
    n = max(1, round(rate * step_s))
    start = loop.time() + 0.05
    tasks = []
    for i in range(n):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    refused = sum(1 for s in statuses if s == 429)
    return {
        "rate_per_s": rate,
        "calls": len(statuses),
        "rate_limited_calls": refused,
        "rate_limited_share": refused / len(statuses) if statuses else None,
        "transport_errors": errors,
    }


def best(steps: list[dict[str, Any]], limit: float) -> float | None:
    """The served share of ``limit`` at the fastest step with at most ``MAX_SHARE_429``
    429s (and no transport errors); ``None`` if none was."""
    for s in sorted(steps, key=lambda s: -s["rate_per_s"]):
        share = s["rate_limited_share"]
        if share is not None and share <= MAX_SHARE_429 and not s["transport_errors"]:
            return s["rate_per_s"] * (1.0 - share) / limit
    return None


async def ladder(url: str, limit: float, step_s: float) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10.0) as client:
        for fraction in FRACTIONS:
            await asyncio.sleep(FORGET_S)
            steps.append({"fraction": fraction, **await _step(client, fraction * limit, step_s)})
            if best(steps[-1:], limit) is not None:
                break
    return {"step_s": step_s, "steps": steps, "utilization_ratio": best(steps, limit)}


def measure(url: str, limit: float, step_s: float, timeout_s: float = 120.0) -> dict[str, Any]:
    """:func:`ladder` in a child process; its one-line error if it failed."""
    started = time.monotonic()
    command = [sys.executable, "-m", "jobs.bench.paced", url, "--limit", str(limit)]
    try:
        done = subprocess.run(
            [*command, "--step-s", str(step_s)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"paced client: no answer in {timeout_s:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"paced client exited {done.returncode}: {tail}"[:300]}
    try:
        out: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        return {"error": f"paced client: not JSON: {done.stdout[:100]!r}"}
    out["wall_s"] = time.monotonic() - started
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.paced")
    parser.add_argument("url")
    parser.add_argument("--limit", type=float, required=True)
    parser.add_argument("--step-s", type=float, default=6.0)
    args = parser.parse_args(argv)
    if not args.limit > 0 or not args.step_s > 0:
        parser.error("--limit and --step-s must be > 0")
    print(json.dumps(asyncio.run(ladder(args.url, args.limit, args.step_s))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

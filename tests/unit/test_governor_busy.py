"""The governor's record of when demand kept its schedule full: the spans a benchmark (or
an operator) reads to ask "at its limit while it was the constraint?"."""

from __future__ import annotations

import pytest

from driver_review.config import GovernorConfig
from driver_review.governor import RateGovernor
from tests.support.rate_sim import TokenBucketServer, simulate


def test_saturating_demand_is_busy_almost_throughout_in_one_merged_span() -> None:
    run = simulate(TokenBucketServer(40.0, 8), duration_s=30.0)
    spans = run.gov.busy_spans()
    busy_s = sum(end - start for start, end in spans)
    # Busy throughout but for slow start (~2.5 s) and each 429's pause (Retry-After: 1,
    # and the interval it cut short).
    assert busy_s >= 30.0 - 2.5 - 1.2 * run.gov.stats()["decreases"], spans
    assert run.gov.stats()["busy_s"] == pytest.approx(busy_s)
    assert len(spans) <= 8  # contiguous intervals merge; a pause splits them


def test_demand_below_the_rate_is_never_busy() -> None:
    gov = RateGovernor(GovernorConfig(initial_rate=50.0))
    now = 0.0
    for _ in range(200):  # one call every 0.1 s against a schedule of 50/s
        grant = gov.lease(1, now)
        gov.give_back(grant, 0, now)
        gov.observe(200, {}, now + 0.01)
        now += 0.1
    assert gov.busy_spans() == [] and gov.stats()["busy_s"] == 0.0

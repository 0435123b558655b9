"""Token buckets that hold far more than a second of their rate, on the fake clock, as
vendors set them: a bucket of 40 refilled at 2/s (Shopify's REST limits), 100 at 10/s.

Slow start runs through such a burst at many times the rate before the first 429. Each
later 429 with Retry-After was read as a pace at most 15% over the limit, and at 2/s no
second holds enough successes to read a count: the rate came down 15% a pause, then 2%,
and drew 12% 429s over five minutes. A bucket refused at one 429 is empty then: what it
served since, over the time since, bounds its rate (unless it filled up in the pause and
spilled, which a count shows where there is one).
"""

from __future__ import annotations

import pytest

from tests.support.rate_sim import TokenBucketServer, simulate

DURATION_S = 300.0
COLD_S = 20.0  # slow start's overshoot into the burst, and the first readings after it

#: (rate, burst) -> (most 429s after the first COLD_S, most in all), each a share of calls.
#: At 2/s one 429 in 40 s is 1.25%: the probe above the limit, which finds it if it rose.
#: Today 1.24% and 3.5% (the old reading: 10.1% and 12.1%); 0.43% and 1.6% at 10/s, where
#: a count is read (10 a second across a 1-s pause, as a window of 10 would serve) and
#: the floor still steps the rate back 15% a pause after slow start.
CASES = {
    (2.0, 40): (0.015, 0.04),
    (10.0, 100): (0.01, 0.02),
}


@pytest.mark.parametrize(
    ("rate", "burst"),
    [pytest.param(rate, burst, id=f"{rate:g}-per-s-holding-{burst}") for rate, burst in CASES],
)
def test_a_big_burst_is_not_read_as_the_rate(rate: float, burst: int) -> None:
    run = simulate(
        TokenBucketServer(rate, burst),
        duration_s=DURATION_S,
        latency_s=0.02,
        jitter_s=0.001,
        processes=3,
    )
    after, whole = run.share_429(COLD_S, DURATION_S), run.share_429(0.0, DURATION_S)
    used = run.served_rate(COLD_S, DURATION_S) / rate
    print(f"{rate:g}/s holding {burst}: 429s {after:.2%} after {COLD_S:g} s, {whole:.2%} in all;")
    print(f"  utilization after {COLD_S:g} s {used:.3f}")
    most_after, most = CASES[rate, burst]
    assert after <= most_after and whole <= most
    # Still near the rate: not bought with a rate far under it.
    assert used >= 0.95
    # Every 429 that was news is counted by what decided it; at 2/s no count is read, and
    # the bucket emptied at the 429 before read the rate.
    stats = run.gov.stats()
    print(f"  decided: {stats['decided']}")
    assert sum(stats["decided"].values()) == stats["decreases"]
    if rate < 5:
        assert stats["decided"].get("emptied bucket", 0) >= 1

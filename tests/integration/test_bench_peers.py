"""Each benchmark peer runs on a tiny catalog in a real local Ray and reaches the truth
(every driver in its true final state), and a peer that cannot is scored as an error."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from jobs.bench.common import QUICK, Context
from jobs.bench.peers import measure_point

pytestmark = [pytest.mark.ray]

TINY = dataclasses.replace(QUICK, sweep_drivers=24, rate_limit=100.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "setting"),
    [
        ("fanout", {"concurrency": 8}),
        ("adaptive", {"concurrency": 16}),
        ("ray_data", {"pool": 2, "batch_size": 8}),
    ],
)
def test_peer_reaches_the_truth(
    ray_session: None, tmp_path: Path, name: str, setting: dict[str, int]
) -> None:
    if name == "ray_data" and importlib.util.find_spec("pandas") is None:
        pytest.skip("Ray Data needs pandas (the bench extra)")
    point = measure_point(Context(TINY, tmp_path, quick=True), name, setting, bound_s=60.0)
    assert "error" not in point, point
    assert point["converged_drivers"] == point["drivers"] == 24
    assert point["active_s"] > 0 and point["decisions"] >= 24
    assert point["setting"] == setting
    # The PUT's answer is used: each driver is fetched about once, not once per stage.
    assert point["detail"]["fetches"] <= point["drivers"] + point["detail"].get("conflicts", 0)


@pytest.mark.timeout(60)
def test_a_peer_out_of_time_is_an_error_not_a_result(ray_session: None, tmp_path: Path) -> None:
    point = measure_point(
        Context(TINY, tmp_path, quick=True), "fanout", {"concurrency": 1}, bound_s=0.5
    )
    assert point["error"].startswith(("did not reach the truth", "missed the truth")), point

"""Bad catalog rows end to end: real local Ray, the simulator on loopback rendering a
share of its listing and changes rows bad (``bad_rows``) while its truth is unchanged."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from driver_review.config import PipelineConfig
from driver_review.report import build_report
from driver_review.runtime.system import start_system, stop_system
from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from tests.support.configs import service_config
from tests.support.truth import off_truth

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def _config(url: str) -> PipelineConfig:
    return service_config(url, catalog={"timeout_s": 5.0, "page_size": 100}, batch_size=32)


@pytest.mark.timeout(180)
def test_a_sweep_with_a_tenth_of_its_rows_bad_finishes_and_reports_them(
    sim_factory, tmp_path
) -> None:
    sim = sim_factory(SimSettings(drivers=400, seed=11, bad_rows=0.1))
    data_dir = str(tmp_path / "data")
    started = time.monotonic()
    summary = run_sweep(_config(sim.url), SweepOptions(data_dir=data_dir, timeout_s=120))
    bad = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()["bad_rows"]
    rendered, lost = sum(bad["rendered"].values()), set(bad["unresolvable"])
    q = summary["quarantined"]
    report = build_report(data_dir)["quarantined"]
    print(
        f"sweep with bad rows: {rendered} rendered bad {bad['rendered']}; resolved by id "
        f"{q['resolved']}, quarantined {q['total']} {q['by_kind']}; report {report['rows']}; "
        f"{time.monotonic() - started:.1f}s"
    )
    assert not summary["timed_out"]
    assert rendered >= 20 and len(bad["rendered"]) == 9  # every kind was thrown at it
    # Every bad row of every listing was either resolved to its good record or set aside,
    # none lost; each distinct row set aside is counted once.
    assert q["resolved"] + q["listed_bad"] == rendered
    assert summary["listings"] >= 2  # the feed, and the listing that confirmed it
    assert q["total"] == len(lost) and q["by_kind"] == {"bad_id": len(lost)}
    good, wrong = off_truth(sim.url, skip=lost)
    assert good == 400 - len(lost) and wrong == [], f"{len(wrong)} differ: {wrong[:5]}"
    # ... and reported: the Parquet dataset under <data-dir>/quarantine/, ids shown safely.
    assert report["rows"] == q["total"] and report["by_kind"] == q["by_kind"]
    assert all(r["driver_id"] == "'..'" for r in report["latest"])


@pytest.mark.timeout(180)
def test_the_poller_advances_its_watermark_past_bad_rows_in_its_changes(
    sim_factory, tmp_path
) -> None:
    """Before: one bad row failed its whole changes page, so every poll failed at the same
    row and the watermark never moved again."""
    sim = sim_factory(SimSettings(drivers=120, seed=5, bad_rows=0.3))
    system = start_system(
        _config(sim.url),
        instance=f"qpoll-{uuid.uuid4().hex[:6]}",
        data_dir=str(tmp_path),
        poll=True,
        poll_interval_s=1.0,
    )

    async def scenario() -> tuple[list[float], dict, dict]:
        marks: list[float] = []
        while (await system.orchestrator.call("watermark"))[0] <= 0:  # the bootstrap
            await asyncio.sleep(0.5)
        for _ in range(12):  # bounded: 12 rounds of 10 changes, about 1 s apart
            for _ in range(10):
                sim.state.generate_change()
            await asyncio.sleep(1.0)
            marks.append((await system.orchestrator.call("watermark"))[0])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lost = set(httpx.get(f"{sim.url}/_sim/stats").json()["bad_rows"]["unresolvable"])
            if not off_truth(sim.url, skip=lost)[1]:
                break
            await asyncio.sleep(1.0)
        poller = await system.poller.call("stats")
        orch = await system.orchestrator.call("stats")
        await stop_system(system)
        return marks, poller, orch

    marks, poller, orch = asyncio.run(scenario())
    bad = httpx.get(f"{sim.url}/_sim/stats", timeout=30).json()["bad_rows"]
    lost = set(bad["unresolvable"])
    print(
        f"poller with bad rows: {poller['polls']} polls, {poller['failures']} failed, "
        f"rows {poller['rows']}; rendered bad {sum(bad['rendered'].values())}; "
        f"orchestrator quarantined {orch['quarantined']}; watermarks {marks[0]:.1f} → "
        f"{marks[-1]:.1f}"
    )
    assert sum(bad["rendered"].values()) >= 30
    assert poller["failures"] == 0
    # The watermark kept moving with the changes, and never ahead of our clock.
    assert marks[-1] > marks[len(marks) // 2] > marks[0] > 0
    assert marks[-1] <= time.time() + 1
    assert orch["quarantined"]["total"] >= 1 or not lost
    good, wrong = off_truth(sim.url, skip=lost)
    assert wrong == [], f"{len(wrong)} of {good} drivers differ from truth: {wrong[:5]}"

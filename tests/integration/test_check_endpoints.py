"""A check service on its own port with its own, lower, undisclosed limit and OAuth2
credentials whose tokens expire mid-run, beside a catalog that wants a bearer token and has
a limit of its own: a sweep through real Ray paces each endpoint near its limit, apart, with
few 429s at each (at most 2%; at the catalog, at most 1% after slow start's first
overshoot), and no secret shows in stdout, logs, the status document, the metrics, the sweep
summary or Parquet."""

from __future__ import annotations

import json
import os
import pathlib
import secrets
from typing import Any

import pytest

from driver_review.config import load_config, parse_config
from driver_review.identifiers import endpoint_key
from driver_review.results import read_results
from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions
from jobs.bench.common import CallLog
from tests.support.check_server import CheckServer
from tests.support.observe import watched_sweep
from tests.support.truth import off_truth

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

# Set at import, i.e. at collection, before the session's Ray starts: Ray's worker
# processes inherit the environment the local cluster started with, as a deployment's
# workers inherit the one their nodes run with. Fresh per run, so a scan can look for them.
CLIENT_ID = "pacing-client-" + secrets.token_hex(4)
CLIENT_SECRET = "pacing-secret-" + secrets.token_urlsafe(18)
CATALOG_TOKEN = "pacing-catalog-" + secrets.token_urlsafe(18)
os.environ.setdefault("DRIVER_REVIEW_TEST_SCAN_ID", CLIENT_ID)
os.environ.setdefault("DRIVER_REVIEW_TEST_SCAN_SECRET", CLIENT_SECRET)
os.environ.setdefault("DRIVER_REVIEW_TEST_CATALOG_TOKEN", CATALOG_TOKEN)

CHECK_RATE = 15.0
CATALOG_RATE = 150
DRIVERS = 1000  # about a minute at the check service: a fixed cost of cold discovery weighs little
# Slow start's first overshoot: the 429s within this long of the first.
OVERSHOOT_S = 1.0


def _config(catalog_url: str, check_url: str) -> Any:
    data = load_config().model_dump(exclude_none=True)
    data["catalog"].update(
        url=catalog_url,
        timeout_s=5.0,
        auth={"kind": "bearer", "token_env": "DRIVER_REVIEW_TEST_CATALOG_TOKEN"},
    )
    data["window"].update(lease_s=30.0, batch_size=16)
    data["results"].update(rollover_s=2.0)
    for stage in data["stages"]:
        if stage["name"] == "compatibility":
            # The telemetry check moves to the third-party service (which answers what the
            # catalog would, so the truth still holds).
            stage["checks"] = ["telemetry_api", "hwid_conflicts"]
    data["checks"]["telemetry_api"] = {
        "kind": "http",
        "url": f"{check_url}/check?tenant=t1",
        "max_wait_s": 30.0,
        "auth": {
            "kind": "oauth2_client_credentials",
            "token_url": f"{check_url}/token",
            "client_id_env": "DRIVER_REVIEW_TEST_SCAN_ID",
            "client_secret_env": "DRIVER_REVIEW_TEST_SCAN_SECRET",
            "scope": "scan",
        },
    }
    return parse_config(data, source="test")


def _sims_answer(sim: Any) -> Any:
    """The simulator's own telemetry answer, asked in-process: the check service takes
    nothing from the catalog's limit, and the sweep still ends at the simulator's truth."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        got = sim.state.run_check("crash_telemetry", body["driver_id"], body["version"])
        return {"passed": got.passed, "reason": got.reason or ""}

    return answer


def _ray_logs() -> list[pathlib.Path]:
    import ray

    logs = pathlib.Path(ray._private.worker._global_node.get_logs_dir_path())
    return [p for p in logs.rglob("*") if p.is_file()]


@pytest.mark.timeout(480)
def test_a_scarce_authenticated_check_endpoint_is_paced_apart_from_the_catalog(
    sim_factory, tmp_path, capfd
) -> None:
    if os.environ["DRIVER_REVIEW_TEST_SCAN_SECRET"] != CLIENT_SECRET:
        pytest.skip("credentials were set by someone else before this module loaded")
    sim = sim_factory(
        SimSettings(
            drivers=DRIVERS,
            seed=12,
            rate_limit=CATALOG_RATE,
            auth="bearer",
            auth_token=CATALOG_TOKEN,
        )
    )
    checks = CheckServer(
        rate=CHECK_RATE,
        burst=3,
        client=(CLIENT_ID, CLIENT_SECRET),
        token_ttl_s=6.0,
        answer=_sims_answer(sim),
    ).start()
    catalog_log = CallLog.install(sim)
    try:
        data_dir = str(tmp_path / "data")
        watched = watched_sweep(
            _config(sim.url, checks.url), SweepOptions(data_dir=data_dir, timeout_s=300)
        )
    finally:
        checks.stop()
    summary = watched.summary
    errors = [r for r in read_results(data_dir).to_pylist() if r["verdict"] == "error"]
    assert not summary["timed_out"], (summary["decisions"], checks.statuses, errors[:3])
    total, wrong = off_truth(sim.url)
    assert total == DRIVERS and wrong == [], f"{len(wrong)} differ from truth: {wrong[:5]}"

    # The catalog: its token accepted every time, few 429s (bounded below).
    stats = sim.state.stats.as_dict()
    catalog_calls = sum(sum(by.values()) for by in stats["requests"].values())
    catalog_401s = sum(by.get("401", 0) for by in stats["requests"].values())
    log = zip(catalog_log.times, catalog_log.statuses, strict=True)
    refused_at = [t for t, status in log if status == "429"]
    overshoot = [t for t in refused_at if t - refused_at[0] <= OVERSHOOT_S]
    catalog_gov = summary["governor"][endpoint_key(sim.url)]
    figures = (
        f"catalog: {catalog_calls} calls, {stats['rate_limited']} 429s ({len(overshoot)} in "
        f"slow start's overshoot), {catalog_401s} 401s, governor at {catalog_gov['rate']:.1f}/s, "
        f"decided {catalog_gov['decided']}, last decisions {catalog_gov['decisions']}; "
    )
    assert catalog_401s == 0, stats["requests"]
    assert len(refused_at) == stats["rate_limited"], figures
    # At most 1% after slow start's first overshoot, the benchmark's target. The overshoot
    # itself varies with how late each process hears of it: eleven cold sweeps through the
    # simulator's bucket at 150/s on a 2-core machine drew 2 to 78 429s in it (median 14),
    # and a CI run of this test 63 in all (1.2% of 5,334 calls); the sweep is bounded at 2%.
    assert len(refused_at) - len(overshoot) <= 0.01 * catalog_calls, figures
    assert len(refused_at) <= 0.02 * catalog_calls, figures

    # The check service: few 429s, run near its limit while it had work, tokens refreshed
    # as they expired.
    calls = sum(checks.statuses.values()) - checks.tokens_issued
    refused = checks.statuses[429]
    admitted = checks.admitted_at
    busy_s = admitted[-1] - admitted[0]
    # The middle 80% of admissions: the check stage had a backlog then (the first drivers
    # reach it one by one, the last leave it one by one).
    lo, hi = len(admitted) // 10, len(admitted) * 9 // 10
    steady = (hi - lo) / (admitted[hi] - admitted[lo])
    figures += (
        f"check service: {calls} calls, {refused} 429s, {len(admitted)} admitted in "
        f"{busy_s:.1f}s ({steady:.1f}/s steady, limit {CHECK_RATE:.0f}/s), "
        f"{checks.tokens_issued} tokens; sweep {summary['wall_s']}s"
    )
    assert checks.statuses[401] == 0 and checks.tokens_issued >= 2, figures
    per_s = [0] * (int(busy_s) + 1)
    for t in admitted:
        per_s[int(t - admitted[0])] += 1
    gov = summary["governor"][endpoint_key(checks.url)]
    figures += (
        f"; admitted per second {per_s}; governor at {gov['rate']:.1f}/s, limit "
        f"estimate {gov['limit_estimate']}, busy {gov['busy_s']:.1f}s; 429s at "
        f"{[round(t - admitted[0], 2) for t in checks.refused_at]} s, tokens at "
        f"{[round(t - admitted[0], 2) for t in checks.tokens_at]} s"
    )
    # Few: at most 2%. Cold, over a minute at 15/s with a burst of 3 and a Retry-After of a
    # second, runs here drew 4 429s in 766 calls (0.52%), three times in a row: the first
    # overshoot of slow start, one or two while the bracket closes, and the probe crossing
    # the limit once a minute. In full runs, the machine busy, 9 in 771 and 10 in 772: five
    # of those ten came back within 50 ms of the first overshoot (requests already sent by
    # several workers when the bucket ran dry), four more while the rate came down one
    # Retry-After at a time. The 1% target is the benchmark's (endpoints, 0.13% in the
    # committed run); on the fake clock this bucket draws 2.4 a minute, at most 4 in 36 runs.
    assert refused <= 0.02 * calls, figures
    # Near the limit (the benchmark's run: 0.995 of it while busy). Runs here: 0.90 and
    # 0.92 of it over a minute; 0.82 to 0.85 over the half-minute of 500 drivers, also with
    # two busy loops hogging both cores. One 429 judged from a handful of answers can still
    # set the estimate low, and the probe takes over a minute to leave a low estimate: full
    # suite runs on a loaded machine settled at 6.0/s and 8.2/s (0.40, 0.55). Bounded at a
    # third here, a guard against a governor stuck at its floor; nearness is the benchmark's.
    assert steady >= CHECK_RATE / 3, figures

    # A separate governor key for the check endpoint, apart from the catalog's.
    governor = summary["governor"]
    check_key, catalog_key = endpoint_key(checks.url), endpoint_key(sim.url)
    assert {check_key, catalog_key} <= set(governor), list(governor)
    assert governor[check_key]["429s"] == refused

    # The other stages went at the catalog's pace: intake was done long before the last
    # compatibility decision, the check service being the slow part.
    rows = read_results(data_dir).select(["stage", "verdict", "reviewed_at", "reasons"])
    last: dict[str, float] = {}
    for row in rows.to_pylist():
        at = row["reviewed_at"].timestamp()
        last[row["stage"]] = max(last.get(row["stage"], 0.0), at)
    figures += f"; last decision after intake at {last['intake'] - min(last.values()):.1f}s, "
    assert last["intake"] < last["compatibility"] - 2.0, last
    assert not errors, errors[:3]

    # No secret anywhere: summary, status, metrics, Parquet, stdout/stderr, Ray logs.
    secrets_ = [CLIENT_SECRET, CATALOG_TOKEN, *checks.issued]
    out, err = capfd.readouterr()
    assert watched.statuses and "driver_review_governor_rate" in watched.metrics
    # Each endpoint's answers are a series of their own (Grafana's 429 share per endpoint).
    assert f'key="{check_key}"' in "".join(
        ln for ln in watched.metrics.splitlines() if "driver_review_endpoint_answers" in ln
    ), "no answers series for the check endpoint"
    assert any(check_key in (doc.get("governor") or {}) for doc in watched.statuses)
    surfaces = {
        "summary": json.dumps(summary),
        "stdout": out,
        "stderr": err,
        "status": json.dumps(watched.statuses),
        "metrics": watched.metrics,
        "parquet": json.dumps(read_results(data_dir).to_pylist(), default=str),
    }
    for path in _ray_logs():
        surfaces[str(path)] = path.read_text(errors="replace")
    for where, text in surfaces.items():
        for secret in secrets_:
            assert secret not in text, f"a secret shows in {where}"
    print(figures, f"{len(surfaces)} surfaces scanned for {len(secrets_)} secrets")

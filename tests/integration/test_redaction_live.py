"""A short sweep whose catalog URL (and an http check's URL) carry ``user:secret@`` and
``?token=secret``: the secret reaches the servers, and nowhere else — not a governor key,
the status document, the sweep summary, a metric label, a log line or a Parquet row."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
import ray

from driver_review.config import load_config, parse_config
from driver_review.results import read_results
from driver_review.sweep import Progress, SweepOptions
from tests.support.observe import watched_sweep

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class _CheckServer(BaseHTTPRequestHandler):
    """An http check on loopback: answers 503 to a driver's first call, then passes, so
    every driver leaves an ``error`` row (with the check's URL in its reason) and the sweep
    still finishes. Records what the check was sent."""

    seen: ClassVar[dict[str, int]] = {}
    tokens: ClassVar[list[str]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with self.lock:
            self.tokens.extend(parse_qs(urlsplit(self.path).query).get("token", []))
            n = self.seen[body["driver_id"]] = self.seen.get(body["driver_id"], 0) + 1
        status, answer = (503, {"detail": "warming up"}) if n == 1 else (200, {"passed": True})
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # quiet: the test reads logs for secrets
        pass


def _with_secrets(url: str, password: str, token: str, path: str = "") -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://reviewer:{password}@{parts.netloc}{path}?token={token}"


@pytest.mark.timeout(300)
def test_no_secret_leaves_the_urls_during_a_sweep(sim_factory, tmp_path, caplog) -> None:
    password, token = f"secret-{uuid.uuid4().hex}", f"secret-{uuid.uuid4().hex}"
    secrets = (password, token)
    sim = sim_factory(drivers=20, seed=5)
    checks = ThreadingHTTPServer(("127.0.0.1", 0), _CheckServer)
    threading.Thread(target=checks.serve_forever, daemon=True).start()
    check_url = _with_secrets(f"http://127.0.0.1:{checks.server_port}", password, token, "/check")

    data = load_config().model_dump()
    data["catalog"]["url"] = _with_secrets(sim.url, password, token)
    data["checks"]["legal_api"] = {"kind": "http", "url": check_url, "timeout_s": 5}
    data["stages"][2]["checks"].append("legal_api")
    data["results"]["rollover_s"] = 1.0
    config = parse_config(data, source="test")
    data_dir, instance = str(tmp_path / "data"), f"redact-{uuid.uuid4().hex[:6]}"

    caplog.set_level(logging.DEBUG)
    with open(tmp_path / "progress.txt", "w") as progress:
        watched = watched_sweep(
            config,
            SweepOptions(data_dir=data_dir, instance=instance, timeout_s=180),
            Progress(out=progress, every_s=0.5),
            deadline_s=240,
        )
    checks.shutdown()
    summary, statuses, metrics = watched.summary, watched.statuses, watched.metrics

    rows = read_results(data_dir).to_pylist()
    errors = [r for r in rows if r["verdict"] == "error"]
    governor_keys = sorted({k for doc in statuses for k in (doc.get("governor") or {})})
    rate_lines = [ln for ln in metrics.splitlines() if "driver_review_governor_rate{" in ln]
    session_logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    log_lines = 0
    leaks: list[str] = []
    for path in session_logs.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            log_lines += text.count("\n")
            leaks += [f"{path.name}: {s}" for s in secrets if s in text]
    leaks += [f"driver log: {s}" for s in secrets if s in caplog.text]
    leaks += [f"progress: {s}" for s in secrets if s in (tmp_path / "progress.txt").read_text()]
    print(
        f"sweep: {summary['drivers']} drivers in {summary['wall_s']:.1f}s, {len(rows)} result "
        f"rows ({len(errors)} errors), {len(statuses)} status documents, "
        f"governor keys {governor_keys}, "
        f"{len(rate_lines)} governor metric lines, {log_lines} log lines searched; "
        f"the check server was sent the token {len(_CheckServer.tokens)} times"
    )

    # The secrets went where they belong.
    assert token in _CheckServer.tokens
    assert not summary["timed_out"] and summary["drivers"] == 20
    # ... and nowhere else.
    # One key per endpoint (the catalog, the check service), each scheme://host:port.
    assert governor_keys == sorted([sim.url, f"http://127.0.0.1:{checks.server_port}"])
    assert statuses and all(s not in json.dumps(doc) for doc in statuses for s in secrets)
    assert all(s not in json.dumps(summary) for s in secrets)
    assert rate_lines, "the governor's rate metric was never exported"
    assert all(s not in ln and "reviewer" not in ln for ln in rate_lines for s in secrets)
    assert errors and any("POST http://127.0.0.1" in json.dumps(r["reasons"]) for r in errors)
    assert all(s not in json.dumps(r, default=str) for r in rows for s in secrets)
    assert not leaks, leaks

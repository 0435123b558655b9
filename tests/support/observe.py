"""Watching a sweep from outside while it runs, as an operator would: the status document
(the admin endpoint's, collected the same way) and the metrics Ray exports."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import ray

from driver_review.config import PipelineConfig
from driver_review.runtime.system import System
from driver_review.status import collect_status
from driver_review.sweep import Progress, SweepOptions, run_sweep


def metrics_text() -> str:
    """What the session's Ray exports in Prometheus' text format ("" if not reachable)."""
    node = ray._private.worker._global_node
    url = f"http://127.0.0.1:{node.metrics_export_port}/metrics"
    try:
        return httpx.get(url, timeout=5).text
    except httpx.HTTPError:
        return ""


@dataclass
class Watched:
    summary: dict[str, Any]
    statuses: list[dict[str, Any]] = field(default_factory=list)
    metrics: str = ""


#: Series the metrics text is read again until it holds (Ray exports every few seconds).
WATCHED_SERIES = ("driver_review_governor_rate", "driver_review_endpoint_answers")
METRICS_EVERY_S = 5.0  # ... and then again this often, so late series show too


def watched_sweep(
    config: PipelineConfig,
    options: SweepOptions,
    progress: Progress | None = None,
    *,
    every_s: float = 0.5,
    deadline_s: float = 300.0,
) -> Watched:
    """Run a sweep in a thread; meanwhile collect its status every ``every_s`` and the
    metrics until the governor's rate shows in them. Bounded by ``deadline_s``."""
    if options.instance is None:  # the status is read by instance name
        options = dataclasses.replace(options, instance=f"watched-{uuid.uuid4().hex[:6]}")
    instance = options.instance
    result: dict[str, Any] = {}

    def sweep() -> None:
        try:
            result["summary"] = run_sweep(config, options, progress)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=sweep, name="watched-sweep")
    thread.start()
    statuses: list[dict[str, Any]] = []
    metrics, read_at = "", 0.0
    deadline = time.monotonic() + deadline_s
    while thread.is_alive() and time.monotonic() < deadline:
        time.sleep(every_s)
        try:
            doc = asyncio.run(collect_status(System.attach(config, instance), timeout_s=2))
        except Exception:  # not started yet, or already stopped
            continue
        statuses.append(doc)
        missing = not all(name in metrics for name in WATCHED_SERIES)
        if doc.get("governor") and (missing or time.monotonic() - read_at >= METRICS_EVERY_S):
            text, read_at = metrics_text(), time.monotonic()
            if missing or all(name in text for name in WATCHED_SERIES):
                metrics = text  # the newest reading that still holds every watched series
    thread.join(timeout=60)
    if "error" in result:
        raise result["error"]
    return Watched(result["summary"], statuses, metrics)

"""One status document of a running instance, gathered from its actors.

Shared by ``GET /status`` of the admin endpoint and the ``driver-review status`` CLI
(``asyncio.run(collect_status(System.attach(config, instance)))``). Every part is asked
at once and given ``timeout_s``: a part that does not answer in time (restarting, busy)
is listed under ``unavailable`` instead of holding up the rest. The orchestrator answers
from the stats of its last tick (``status``), so the cost of a call does not grow with
the ledger; so does each pool, so a worker busy on a slow check does not hold it up.
URLs are shown redacted (no credentials, no query).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable
from typing import Any

from driver_review.config import PipelineConfig
from driver_review.identifiers import redact_url
from driver_review.runtime.system import System

DEFAULT_TIMEOUT_S = 2.0


async def _ask(answer: Awaitable[Any], timeout_s: float) -> Any:
    return await asyncio.wait_for(answer, timeout=timeout_s)


async def collect_status(system: System, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """Window, watermark, backlog per stage, leases, workers per stage, governor rates,
    cache hit ratio and the oldest review age of ``system``, as plain JSON values."""
    # The orchestrator answers from its last tick's stats (``status``), the others live.
    parts: dict[str, Awaitable[Any]] = {
        "orchestrator": system.orchestrator.status(),
        "cache": system.cache.stats(),
        "governor": system.governor.stats(),
        # A pool answers from its last tick, never held up by a busy worker.
        **{f"pool/{stage}": pool.status() for stage, pool in system.pools.items()},
    }
    *answers, poller = await asyncio.gather(
        *(_ask(answer, timeout_s) for answer in parts.values()),
        # Asked alongside; only a service has a poller, so its absence is not a fault.
        _ask(system.poller.stats(), timeout_s),
        return_exceptions=True,
    )
    got: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for name, answer in zip(parts, answers, strict=True):
        if isinstance(answer, BaseException):
            unavailable[name] = type(answer).__name__
        else:
            got[name] = answer
    orch = got.get("orchestrator") or {}
    cache = got.get("cache") or {}
    status: dict[str, Any] = {
        "instance": system.instance,
        "at": time.time(),
        # The configured order: ``pools`` lacks a pool that did not answer in time.
        "stages": list(system.config.stage_names),
        "ok": not unavailable and not orch.get("refused"),
        "unavailable": unavailable,
        "refused": orch.get("refused"),  # why the orchestrator takes no work, or None
        "window": orch.get("window"),
        "watermark": orch.get("watermark"),
        "high_water": orch.get("high_water"),
        "backlog": {s: b for s, b in (orch.get("backlog") or {}).items()},
        "leases": orch.get("leases"),
        "leased": orch.get("leased_items"),
        "leased_by_stage": orch.get("leased_by_stage"),
        "quarantined": orch.get("quarantined"),
        "ledger": orch.get("ledger"),
        "oldest_review_age_s": orch.get("oldest_review_age_s"),
        "counters": orch.get("counters"),
        "workers": {},
        "pools": {},
        "governor": _governor(got.get("governor")),
        "cache": {
            k: cache.get(k)
            for k in (
                "entries",
                "bytes",
                "hits",
                "misses",
                "stale",
                "fills",
                "fetches",
                "not_modified",
                "hit_ratio",
            )
        }
        if cache
        else None,
    }
    for stage in system.pools:
        pool = got.get(f"pool/{stage}")
        if pool is None:
            continue
        status["workers"][stage] = pool.get("workers")
        status["pools"][stage] = {
            k: pool.get(k)
            for k in (
                "workers",
                "min_workers",
                "max_workers",
                "peak_workers",
                "in_flight",
                "not_answering",
                "waiting_for_permit",
                "backlog",
                "last_reason",
                "held_by",
                "stats_age_s",
            )
        }
    status["poller"] = poller if isinstance(poller, dict) else None
    return json_safe(status)


def json_safe(value: Any) -> Any:
    """Plain JSON values: strict JSON (and Starlette's encoder) has no inf/nan, and actor
    stats may hold numpy scalars."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()  # numpy scalar
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _governor(stats: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Per endpoint key: the rate in force and what it was learnt from."""
    if stats is None:
        return None
    keep = (
        "state",
        "rate",
        "limit_estimate",
        "safe_rate",
        "header_rate",
        "paused_for_s",
        "pause_reason",
        "quota",
        "quota_window_s",
        "warm_start",
        "busy_s",
        "ok",
        "429s",
        "503s",
        "decreases",
        "echo_pauses",
        "shut_pauses",
        "window_s",
        # Which reading decided each 429 that was news: where a run lost its share.
        "decided",
        # The last few of them, with what each read: why the rate is where it is.
        "decisions",
    )
    # Keys are endpoint URLs (or rate_key names): never show the credentials of one.
    return {_shown_key(key): {k: gov.get(k) for k in keep} for key, gov in stats.items()}


def _shown_key(key: str) -> str:
    return redact_url(key) if "://" in key else key


def read_status(config: PipelineConfig, instance: str) -> dict[str, Any]:
    """The status document of a running instance, from any shell on the cluster."""
    import ray

    from driver_review.runtime.names import NAMESPACE
    from driver_review.runtime.system import System

    if not ray.is_initialized():
        ray.init(
            address=os.environ.get("RAY_ADDRESS") or "auto",
            namespace=NAMESPACE,
            log_to_driver=False,
        )
    return asyncio.run(collect_status(System.attach(config, instance)))


def governor_line(gov: dict[str, Any]) -> str:
    """One endpoint's pacing in a line: state, rate against what it has learnt of the
    limit, 429s, and why it is paused (a quota names its window) or where it started from."""
    line = f"{gov.get('state')} at {gov.get('rate') or 0:.1f}/s"
    limit = gov.get("limit_estimate") or gov.get("header_rate")
    if limit:
        line += f" (limit ~{limit:.1f}/s)"
    line += f", {gov.get('429s', 0)} 429s"
    if gov.get("echo_pauses"):
        line += f", {gov['echo_pauses']} echo pauses"
    if gov.get("shut_pauses"):
        line += f", {gov['shut_pauses']} pauses while shut"
    if gov.get("window_s"):
        line += f", window ~{gov['window_s']:.0f}s"
    if gov.get("paused_for_s"):
        why = gov.get("pause_reason") or "paused"
        if gov.get("quota_window_s"):
            why += f", window {gov['quota_window_s']:.0f}s"
        line += f"; paused {gov['paused_for_s']:.0f}s more: {why}"
    warm = gov.get("warm_start")
    if warm:
        line += f"; warm start from a limit learnt {warm.get('age_s', 0):.0f}s before"
    return line


def format_status(status: dict[str, Any]) -> list[str]:
    lines = [f"instance {status['instance']}: {'ok' if status['ok'] else 'DEGRADED'}"]
    if status.get("refused"):
        lines.append(f"  refusing work: {status['refused']}")
    if status.get("unavailable"):
        lines.append(
            "  unavailable: " + ", ".join(f"{k} ({v})" for k, v in status["unavailable"].items())
        )
    ledger = status.get("ledger") or {}
    if ledger:
        lines.append(
            f"  drivers {ledger.get('drivers')}: in review {ledger.get('in_review')}, "
            f"published {ledger.get('published')}, rejected {ledger.get('rejected')}"
        )
    lines.append(
        f"  watermark {status.get('watermark')}, oldest review "
        f"{(status.get('oldest_review_age_s') or 0):.0f}s ago, "
        f"{status.get('leased') or 0} items leased"
    )
    lines.append(f"  {'stage':<14}{'queued':>8}{'workers':>9}{'in flight':>11}{'held':>6}")
    for stage, pool in (status.get("pools") or {}).items():
        queued = (status.get("backlog") or {}).get(stage, {}).get("queued", 0)
        silent = pool.get("not_answering") or 0
        lines.append(
            f"  {stage:<14}{queued:>8}{pool['workers']:>9}{pool['in_flight']:>11}"
            f"{pool['waiting_for_permit']:>6}"
            + (f"  ({silent} not answering: a check blocks its loop?)" if silent else "")
        )
    for key, gov in (status.get("governor") or {}).items():
        lines.append(f"  governor {key}: {governor_line(gov)}")
    cache = status.get("cache") or {}
    if cache:
        lines.append(
            f"  cache: {cache.get('entries')} entries, hit ratio "
            f"{(cache.get('hit_ratio') or 0):.2f}"
        )
    return lines

"""The shapes of what actors answer, as the typed clients (:mod:`.handles`) return them.

Ray hands back plain dicts and tuples; these TypedDicts name the fields callers read, so a
typo is caught by a type checker instead of as a ``KeyError`` on a live cluster. The big
stats documents are ``total=False``: they carry more than is listed, and the list grows
with what callers need, not with everything the actors say. Small fixed answers are
total or a NamedTuple. Dataclass answers (``Lease``, ``Grant``, ``ItemResult``) live with
their pure cores.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

#: What the cache answers per item of ``get_many``: ``([ObjectRef of the record], None)``,
#: or ``(None, error class name)``. A list so Ray does not resolve the ref in transit.
CacheItem = tuple[list[Any] | None, str | None]


class Watermark(NamedTuple):
    """The orchestrator's watermark and the incarnation that holds what it covers."""

    mark: float
    incarnation: str


class SweepProgress(TypedDict):
    """What a sweep polls, in one call (see ``OrchestratorService.progress``)."""

    incarnation: str
    quiescent: bool
    drivers: int
    in_review: int
    queued: int
    leased: int
    invalid: int
    parked: int
    verdicts: dict[str, int]


class LedgerEntry(TypedDict):
    """One driver's ledger row as plain values (``GET /drivers/{id}``)."""

    driver_id: str
    version: str
    stage: str
    status: str
    changed_at: float
    decided_version: str
    decided_stage: str
    verdict: str
    reviewed_at: float
    work: str
    errors: int


class OrchestratorStats(TypedDict, total=False):
    window: dict[str, Any]
    backlog: dict[str, dict[str, int]]
    leases: int
    leased_items: int
    leased_by_stage: dict[str, int]
    ledger: dict[str, int]
    ledger_bytes: int
    oldest_review_age_s: float
    high_water: int
    watermark: float
    quarantined: dict[str, Any]
    counters: dict[str, Any]
    memory: dict[str, int]
    restored_from: str | None
    started_at: float
    snapshots_written: int
    incarnation: str
    stale_advances: int
    node_id: str
    refused: str | None


class DecisionEntry(TypedDict, total=False):
    """One of an endpoint's last decisions (oldest first in ``EndpointStats.decisions``):
    the 429's pace, what the meter read before it (successes in its last second, the
    bucket reading; 0: none), what it concluded, and the rate it set. ``first``: the
    reading it made before the late reports were in, when that differed."""

    ago_s: float
    why: str
    first: str
    pace: float
    served: float
    bucket: float
    estimate: float
    ceiling: float
    rate: float
    costly: bool


#: One endpoint key's governor, as ``GovernorService.stats`` answers per key. Functional
#: form: the status counters ``429s`` and ``503s`` are no identifiers.
EndpointStats = TypedDict(
    "EndpointStats",
    {
        "key": str,
        "state": str,
        "rate": float,
        "limit_estimate": float | None,
        "safe_rate": float | None,
        "header_rate": float | None,
        "paused_for_s": float,
        "pause_reason": str | None,
        "quota": str | None,
        "quota_window_s": float | None,
        "epoch": int,
        "strict_spacing": bool,
        "warm_start": dict[str, Any] | None,
        "busy_s": float,
        "ok": int,
        "429s": int,
        "503s": int,
        "decreases": int,
        "echo_pauses": int,
        "shut_pauses": int,
        "window_s": float | None,
        "decided": dict[str, int],
        "decisions": list[DecisionEntry],
    },
    total=False,
)


class CacheStats(TypedDict, total=False):
    entries: int
    bytes: int
    hits: int
    misses: int
    stale: int
    evictions: int
    fills: int
    hit_ratio: float
    fetches: int
    not_modified: int
    calls: dict[str, dict[str, int]]
    in_flight: int
    waiting_for_permit: int


class WorkerStats(TypedDict, total=False):
    name: str
    stage: str
    node_id: str
    in_flight: int
    max_in_flight: int
    waiting_for_permit: int
    held_by: str | None
    endpoints: dict[str, dict[str, Any]]
    counts: dict[str, int]
    calls: dict[str, dict[str, int]]
    results_buffered: int
    results_written: int
    draining: bool
    #: Set by its pool, ``False``: it did not answer in time (its event loop is held); the
    #: other figures are as last seen, with every slot counted in use.
    answering: bool


class PoolStats(TypedDict, total=False):
    stage: str
    workers: int
    peak_workers: int
    min_workers: int
    max_workers: int
    last_reason: str
    in_flight: int
    not_answering: int
    waiting_for_permit: int
    backlog: int
    held_by: list[str]
    worker_stats: dict[str, WorkerStats]
    retired: dict[str, int]
    events: list[dict[str, Any]]
    #: Only in what ``status`` answers: how old its workers' figures are (``None``: not
    #: looked at yet).
    stats_age_s: float | None
    #: Only in what ``stop`` answers: call counts of every drained worker.
    retired_calls: dict[str, dict[str, int]]


class PollerStats(TypedDict, total=False):
    interval_s: float
    polls: int
    bootstraps: int
    changes_read: int
    queued: int
    intake_full_waits: int
    quarantined: int
    rows: dict[str, Any]
    failures: int
    last_poll: dict[str, Any]

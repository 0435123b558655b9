"""Counters of the simulator, served at ``GET /_sim/stats`` and reset by
``POST /_sim/reset_stats`` (the catalog itself is not reset).

Written only from the server's event loop; reads from other threads see a consistent
enough picture for tests and benchmarks (each counter is a single int or dict update).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

WEBHOOK_COUNTERS = (
    "queued",  # accepted into the send queue
    "overflow",  # not accepted: the queue was full
    "dropped",  # dropped on purpose (webhook_drop_rate)
    "sent",  # HTTP attempts made
    "delivered",  # messages acknowledged with a 2xx
    "retried",  # attempts after the first
    "rate_limited",  # 429 answers received (Retry-After honoured)
    "rejected",  # a 4xx other than 408/425/429: not retried
    "gave_up",  # attempts exhausted
)


@dataclass
class SimStats:
    requests: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    rate_limited: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    decisions: int = 0
    duplicate_decisions: int = 0
    decisions_by_verdict: Counter[str] = field(default_factory=Counter)
    conflicts: int = 0
    packages_served: int = 0
    package_bytes: int = 0
    driver_fetches: int = 0
    driver_not_modified: int = 0
    fetches_by_version: Counter[tuple[str, str]] = field(default_factory=Counter)
    listing_pages: Counter[str] = field(default_factory=Counter)
    listing_scans: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    changes_generated: int = 0
    new_drivers_generated: int = 0
    webhooks: Counter[str] = field(default_factory=Counter)
    webhook_rejections: Counter[str] = field(default_factory=Counter)  # by status code
    tokens: Counter[str] = field(default_factory=Counter)  # token endpoint answers by status
    since: float = field(default_factory=time.time)

    def reset(self) -> None:
        fresh = SimStats()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))

    def count_request(self, route: str, status: str) -> None:
        self.requests[route][status] += 1
        if status == "429":
            self.rate_limited += 1

    def count_fetch(self, driver_id: str, version: str) -> None:
        self.driver_fetches += 1
        self.fetches_by_version[(driver_id, version)] += 1

    def count_listing(self, kind: str, *, first_page: bool) -> None:
        self.listing_pages[kind] += 1
        if first_page:
            self.listing_scans[kind] += 1

    def as_dict(self) -> dict[str, Any]:
        per_version = self.fetches_by_version
        return {
            "since": self.since,
            "requests": {route: dict(by) for route, by in sorted(self.requests.items())},
            "rate_limited": self.rate_limited,
            "faults": dict(self.faults),
            "decisions": self.decisions,
            "duplicate_decisions": self.duplicate_decisions,
            "decisions_by_verdict": dict(self.decisions_by_verdict),
            "decision_conflicts": self.conflicts,
            "packages_served": self.packages_served,
            "package_bytes": self.package_bytes,
            "driver_fetches": self.driver_fetches,
            "driver_not_modified": self.driver_not_modified,
            "versions_fetched": len(per_version),
            "max_fetches_per_version": max(per_version.values(), default=0),
            # "full": GET /v1/drivers, "changes": GET /v1/drivers/changes. A scan is a
            # first page (no cursor); pages counts every page.
            "listing_pages": {k: self.listing_pages[k] for k in ("full", "changes")},
            "listing_scans": {k: self.listing_scans[k] for k in ("full", "changes")},
            "checks": dict(self.checks),
            "changes_generated": self.changes_generated,
            "new_drivers_generated": self.new_drivers_generated,
            "webhooks": {k: self.webhooks[k] for k in WEBHOOK_COUNTERS},
            "webhook_rejections": dict(self.webhook_rejections),
            "tokens": dict(self.tokens),
        }

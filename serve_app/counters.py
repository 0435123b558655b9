"""What one ingress replica did with the requests it got: kept in the replica (its
``stats()``, shown by the admin ``GET /status`` under ``ingress``) and exported as the Ray
metrics ``driver_review_webhooks{instance, outcome}`` and, for well-signed pings whose
data cannot be taken, ``driver_review_quarantined{instance, source="webhook", kind}``.

Counts are per replica: with several replicas, each ``/status`` answer shows the replica
that served it; the Ray metric is the one to sum over replicas.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ray.util import metrics

from driver_review.runtime.metrics import quarantined
from serve_app.webhook import QUARANTINE_KINDS

#: Outcomes of a webhook request; ``refused_<status>`` for every 4xx but 429.
OUTCOMES = (
    "accepted",
    "duplicate",
    "refused_400",
    "refused_401",
    "refused_413",
    "refused_422",
    "intake_full",
    "unavailable",
    "lookup_failed",
)


@cache
def _webhooks_metric() -> metrics.Counter:
    # Created lazily: a metric belongs to the process that records it (the replica).
    return metrics.Counter(
        "driver_review_webhooks", "Webhook requests by outcome", tag_keys=("instance", "outcome")
    )


class IngressCounters:
    def __init__(self, instance: str, *, export: bool = True) -> None:
        self.instance = instance
        self.export = export
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.quarantined = dict.fromkeys(QUARANTINE_KINDS, 0)
        self.batches = 0  # intake calls made: one per micro-batch
        self.batched_events = 0
        self.largest_batch = 0
        self.thin = 0  # thin pings, whose driver was looked up before intake

    def count(self, outcome: str, n: int = 1) -> None:
        self.outcomes[outcome] += n
        if self.export:
            _webhooks_metric().inc(n, tags={"instance": self.instance, "outcome": outcome})

    def quarantine(self, kind: str) -> None:
        """One well-signed message whose data cannot be taken (counted once per id)."""
        self.quarantined[kind] = self.quarantined.get(kind, 0) + 1
        if self.export:
            quarantined().inc(
                1, tags={"instance": self.instance, "source": "webhook", "kind": kind}
            )

    def looked_up(self, n: int) -> None:
        self.thin += n

    def batch(self, size: int) -> None:
        self.batches += 1
        self.batched_events += size
        self.largest_batch = max(self.largest_batch, size)

    def snapshot(self) -> dict[str, Any]:
        o = self.outcomes
        return {
            "accepted": o["accepted"],
            "duplicates": o["duplicate"],
            "refused": {code: o[f"refused_{code}"] for code in ("400", "401", "413", "422")},
            "quarantined": dict(self.quarantined),
            "intake_full": o["intake_full"],
            "unavailable": o["unavailable"],
            "thin": self.thin,
            "lookup_failed": o["lookup_failed"],
            "batches": self.batches,
            "batched_events": self.batched_events,
            "largest_batch": self.largest_batch,
        }

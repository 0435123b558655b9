"""Ray metrics (``ray.util.metrics``), exported by every node to Prometheus and shown in
the Ray dashboard's Metrics view. All names start with ``driver_review_``.

Created lazily in the process that records them (metrics belong to a worker process),
and each is tagged with the instance so several instances can share a cluster.
"""

from __future__ import annotations

from functools import cache

from ray.util import metrics as m

_LATENCY_BOUNDS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]


@cache
def backlog() -> m.Gauge:
    return m.Gauge(
        "driver_review_backlog",
        "Items queued per stage and lane",
        tag_keys=("instance", "stage", "lane"),
    )


@cache
def leased() -> m.Gauge:
    return m.Gauge(
        "driver_review_leased", "Items handed to workers under a lease", tag_keys=("instance",)
    )


@cache
def oldest_review_age() -> m.Gauge:
    return m.Gauge(
        "driver_review_oldest_review_age_seconds",
        "Age of the least recently reviewed driver",
        tag_keys=("instance",),
    )


@cache
def workers() -> m.Gauge:
    return m.Gauge("driver_review_workers", "Workers per stage", tag_keys=("instance", "stage"))


@cache
def decisions() -> m.Counter:
    return m.Counter(
        "driver_review_decisions",
        "Decisions by stage and verdict",
        tag_keys=("instance", "stage", "verdict"),
    )


@cache
def external_calls() -> m.Counter:
    return m.Counter(
        "driver_review_external_calls",
        "Catalog calls by route and status",
        tag_keys=("instance", "route", "status"),
    )


@cache
def external_latency() -> m.Histogram:
    return m.Histogram(
        "driver_review_external_call_seconds",
        "Catalog call latency",
        boundaries=_LATENCY_BOUNDS_S,
        tag_keys=("instance", "route"),
    )


@cache
def cache_hit_ratio() -> m.Gauge:
    return m.Gauge(
        "driver_review_cache_hit_ratio", "Driver cache hits / lookups", tag_keys=("instance",)
    )


@cache
def governor_rate() -> m.Gauge:
    return m.Gauge(
        "driver_review_governor_rate",
        "Permits per second the governor issues",
        tag_keys=("instance", "key"),
    )


@cache
def governor_limit() -> m.Gauge:
    # What the governor has learnt the endpoint allows (0 while it is still finding out):
    # the live page and the Grafana dashboard draw the rate against it.
    return m.Gauge(
        "driver_review_governor_limit",
        "Learnt request limit per second",
        tag_keys=("instance", "key"),
    )


@cache
def endpoint_answers() -> m.Counter:
    # Every answer the rate governor hears of, per endpoint key (ok, 429, 503): the catalog's
    # routes are also in external_calls, a check service's answers only here.
    return m.Counter(
        "driver_review_endpoint_answers",
        "Answers per external endpoint, as the rate governor heard them",
        tag_keys=("instance", "key", "answer"),
    )


@cache
def quarantined() -> m.Counter:
    # source: webhook, listing, changes, record ...; kind: why it could not be taken.
    # Catalog rows count once per distinct row; pings once per message id.
    return m.Counter(
        "driver_review_quarantined",
        "Rows and pings set aside as bad input",
        tag_keys=("instance", "source", "kind"),
    )


def call_recorder(instance: str):  # -> ResponseHook
    """An ``on_response`` hook for :class:`~driver_review.catalog.http.HttpCatalog`."""
    calls, latency = external_calls(), external_latency()

    def record(route: str, status: int | None, elapsed_s: float) -> None:
        tags = {"instance": instance, "route": route}
        calls.inc(1, {**tags, "status": str(status) if status is not None else "error"})
        latency.observe(elapsed_s, tags)

    return record

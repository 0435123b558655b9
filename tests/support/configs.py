"""Pipeline configs for tests: the shipped default with a few sections changed, so a small
simulated catalog is swept (or served) in seconds rather than at production pace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from driver_review.config import PipelineConfig, load_config, parse_config


def config_for(
    url: str,
    *,
    catalog: Mapping[str, Any] | None = None,
    window: Mapping[str, Any] | None = None,
    results: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """The shipped default pointed at the catalog at ``url``, with the given fields of
    each section replaced (validated again, as a pipeline file would be)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"config_for: url must be http(s)://..., got {url!r}")
    data = load_config().model_dump()
    data["catalog"].update(url=url, **(catalog or {}))
    data["window"].update(window or {})
    data["results"].update(results or {})
    return parse_config(data, source="test")


def fast_config(url: str, **window: float) -> PipelineConfig:
    """A live service's pace: one-second buckets, short leases, snapshots every second and
    results rolled over every second, so kills and restarts show within a test."""
    return config_for(
        url,
        catalog={"timeout_s": 3.0},
        window=dict(
            bucket_s=1.0,
            lease_s=10.0,
            batch_size=16,
            skew_overlap_s=2.0,
            snapshot_s=1.0,
            freshness_s=3600.0,
        )
        | window,
        results={"rollover_s": 1.0},
    )


def sweep_config(url: str) -> PipelineConfig:
    """A one-shot sweep's pace: 30 s leases, batches of 32, results rolled every 2 s."""
    return config_for(
        url,
        catalog={"timeout_s": 5.0},
        window={"lease_s": 30.0, "batch_size": 32},
        results={"rollover_s": 2.0},
    )


def service_config(
    url: str, *, catalog: Mapping[str, Any] | None = None, **window: Any
) -> PipelineConfig:
    """A served pipeline's pace: one-second buckets, 30 s leases, batches of 16, results
    rolled over every second."""
    return config_for(
        url,
        catalog=catalog,
        window=dict(bucket_s=1.0, lease_s=30.0, batch_size=16, skew_overlap_s=2.0) | window,
        results={"rollover_s": 1.0},
    )

"""Catalog clients inside the cluster: every one paces through the governor actor."""

from __future__ import annotations

from driver_review.catalog.adapter import build_catalog
from driver_review.catalog.base import Catalog
from driver_review.config import PipelineConfig
from driver_review.identifiers import endpoint_key
from driver_review.runtime.governor_actor import RemoteLimiter
from driver_review.runtime.handles import GovernorClient
from driver_review.runtime.metrics import call_recorder

__all__ = ["endpoint_key", "make_catalog"]


def make_catalog(config: PipelineConfig, instance: str) -> tuple[Catalog, RemoteLimiter]:
    """The configured catalog adapter, paced by the governor under the catalog's key."""
    governor = GovernorClient(instance)
    limiter = RemoteLimiter(
        governor,
        endpoint_key(config.catalog.url, config.catalog.rate_key),
        batch=config.governor.lease_size,
    )
    catalog = build_catalog(
        config.catalog,
        limiter=limiter,
        on_response=call_recorder(instance),
        stages=config.stage_names,
    )
    return catalog, limiter

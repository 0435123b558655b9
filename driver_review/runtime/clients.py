"""Catalog clients inside the cluster: every one paces through the governor actor."""

from __future__ import annotations

from urllib.parse import urlsplit

from driver_review.catalog.http import HttpCatalog
from driver_review.config import PipelineConfig
from driver_review.identifiers import redact_url
from driver_review.runtime.governor_actor import RemoteLimiter
from driver_review.runtime.metrics import call_recorder
from driver_review.runtime.names import ActorRef, actor_name


def endpoint_key(url: str) -> str:
    """One governor per endpoint key: the catalog's scheme, host and port. Never the
    credentials or query of the URL: the key is shown in status, logs and metric labels."""
    parts = urlsplit(redact_url(url))
    return f"{parts.scheme}://{parts.netloc}"


def make_catalog(config: PipelineConfig, instance: str) -> tuple[HttpCatalog, RemoteLimiter]:
    governor = ActorRef(actor_name(instance, "governor"))
    limiter = RemoteLimiter(
        governor, endpoint_key(config.catalog.url), batch=config.governor.lease_size
    )
    catalog = HttpCatalog(config.catalog, limiter=limiter, on_response=call_recorder(instance))
    return catalog, limiter

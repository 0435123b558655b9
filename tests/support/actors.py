"""Named actors of the Ray this process is connected to, as a test sees them."""

from __future__ import annotations

from typing import Any

import ray

from driver_review.backlog import Lane
from driver_review.runtime.names import NAMESPACE


def named_actor(name: str) -> Any | None:
    """The handle of the actor holding ``name`` (alive or restarting), or ``None``: the
    name was never taken, or its actor is dead for good and the name released."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def actor_exists(name: str) -> bool:
    return named_actor(name) is not None


async def feed_catalog(system: Any) -> int:
    """Queue every driver of ``system``'s catalog, as the poller's bootstrap does (stale
    lane); how many."""
    from driver_review.runtime.clients import make_catalog
    from driver_review.wire import change_of

    catalog, _ = make_catalog(system.config, system.instance)
    changes = [change_of(system.config.stage_names, s) async for s in catalog.iter_drivers()]
    await catalog.aclose()
    await system.orchestrator.call("intake", changes, int(Lane.STALE))
    return len(changes)

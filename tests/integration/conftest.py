"""Integration fixtures: one real local Ray instance for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import ray

from driver_review.runtime.names import NAMESPACE


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray (never mocked), started once; CI has 2 cores, so ask for 4 logical
    CPUs: the actors ask for none and the few tasks that do are short."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        ray.init(num_cpus=4, namespace=NAMESPACE, include_dashboard=False,
                 log_to_driver=False, object_store_memory=512 * 1024 * 1024)
    yield
    ray.shutdown()

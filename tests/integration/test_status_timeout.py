"""A status call gives up on what does not answer within its timeout, and leaves nothing
behind that outlives it: asked of an instance that does not exist (a sweep has no
poller, a service not started yet has nothing), it returns in about the timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from driver_review.config import load_config
from driver_review.runtime.system import System
from driver_review.status import collect_status

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.mark.timeout(60)
def test_status_of_missing_actors_returns_within_its_timeout() -> None:
    started = time.monotonic()
    doc = asyncio.run(
        collect_status(System.attach(load_config(), "no-such-instance"), timeout_s=1.0)
    )
    took_s = time.monotonic() - started
    print(f"status of a missing instance in {took_s:.1f}s: unavailable {doc['unavailable']}")
    assert not doc["ok"] and set(doc["unavailable"]) >= {"orchestrator", "governor", "cache"}
    # No pool answered, yet the document names the stages in their configured order
    # (the live page draws them from it).
    assert doc["pools"] == {} and doc["stages"] == load_config().stage_names
    assert took_s < 10.0  # the actor lookup's own timeout is 60 s

"""Whether the simulated catalog ended where its truth says every driver ends."""

from __future__ import annotations

import httpx


def off_truth(url: str, skip: set[str] | frozenset[str] = frozenset()) -> tuple[int, list[str]]:
    """``(drivers counted, ids not in their true final status and stage)`` of the simulator
    at ``url``, leaving out ``skip`` (e.g. drivers whose rows were made bad on purpose)."""
    truth = httpx.get(f"{url}/_sim/truth", timeout=30).json()["drivers"]
    state = httpx.get(f"{url}/_sim/state", timeout=30).json()["drivers"]
    wrong = [
        d
        for d, t in truth.items()
        if d not in skip and (state[d]["status"], state[d]["stage"]) != (t["status"], t["stage"])
    ]
    return len(truth) - len(skip & set(truth)), wrong

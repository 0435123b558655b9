"""Kills actors of a separate ``ray start`` cluster for a fault test, on command.

The test process holds the session's local Ray, so it cannot join another cluster; this
runs as ``python -m tests.faults.actor_killer`` with ``RAY_ADDRESS`` set to that cluster
and takes one command a line on stdin, answering one JSON line each on stdout:

- ``kill NAME`` (or ``kill PREFIX*``: the first live actor whose name starts so):
  ``ray.kill(..., no_restart=False)`` — Ray restarts it — then waits until a new process
  answers for the actor (``stats`` too): ``{"killed": NAME, "back_s": s}``, or
  ``{"missing": NAME}``, or ``"back_s": null`` when none did within ``BACK_TIMEOUT_S``
  (at once, with ``"gone": true``, when the name is released: retired for good meanwhile).
- ``quit``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from driver_review.runtime.names import NAMESPACE
from tests.support.actors import actor_exists, named_actor

BACK_TIMEOUT_S = 90.0


def _say(answer: dict[str, Any]) -> None:
    print(json.dumps(answer), flush=True)


def _resolve(pattern: str) -> str | None:
    if not pattern.endswith("*"):
        return pattern
    names = sorted(n for n in ray.util.list_named_actors() if n.startswith(pattern[:-1]))
    return names[0] if names else None


def kill(pattern: str) -> dict[str, Any]:
    name = _resolve(pattern)
    handle = named_actor(name) if name else None
    if handle is None:
        return {"missing": pattern}
    pid = _pid(handle)
    ray.kill(handle, no_restart=False)
    killed = time.monotonic()
    deadline = killed + BACK_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            # Back when a new process answers: the old one may answer until the kill lands.
            if _pid(handle) != pid:
                ray.get(handle.stats.remote(), timeout=5)
                return {"killed": name, "back_s": round(time.monotonic() - killed, 2)}
        except (RayActorError, GetTimeoutError):
            if not actor_exists(name):
                # Retired by its owner meanwhile (a pool kills an idle worker for good):
                # it never comes back, and waiting the whole timeout starves the next kill.
                return {"killed": name, "back_s": None, "gone": True}
        time.sleep(0.1)
    return {"killed": name, "back_s": None}


def _pid(handle: Any) -> int:
    return int(ray.get(handle.__ray_call__.remote(lambda _self: os.getpid()), timeout=5))


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], namespace=NAMESPACE, log_to_driver=False)
    _say({"ready": True})
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "kill":
            _say(kill(arg))
        elif command == "quit":
            break
        else:
            _say({"error": f"unknown command {command!r}"})
    ray.shutdown()


if __name__ == "__main__":
    main()

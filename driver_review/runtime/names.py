"""Actor names, the namespace, connecting to Ray, and lookups that survive restarts.

Every actor of one running instance is named ``<instance>/<role>[/<part>…]`` in the
``driver_review`` namespace, so the dashboard lists them by role and a second process
(``driver-review status``, the Serve app, a sweep job) finds them by name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from driver_review.config import DEFAULT_INSTANCE  # noqa: F401  (re-exported)

NAMESPACE = "driver_review"
LOOKUP_TIMEOUT_S = 60.0
# RayActorError covers ActorDiedError and ActorUnavailableError (restarting, unreachable).
_RETRYABLE = (RayActorError, GetTimeoutError)

log = logging.getLogger(__name__)


def actor_name(instance: str, role: str, *parts: str) -> str:
    return "/".join((instance, role, *parts))


def connect(*, num_cpus: int | None = None, quiet: bool = True) -> None:
    """Join the cluster named by ``RAY_ADDRESS`` when set, else start a local one."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": not quiet}
    if not os.environ.get("RAY_ADDRESS"):
        # "local": start one, never join whatever `ray start` left running on this machine.
        kwargs["address"] = "local"
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(**kwargs)


def _backoff(attempt: int) -> float:
    return random.uniform(0, min(2.0, 0.05 * 2**attempt))


def lookup(name: str, *, timeout_s: float = LOOKUP_TIMEOUT_S) -> Any:
    """``ray.get_actor`` that waits for an actor being (re)started."""
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(_backoff(attempt))
        attempt += 1


def _by_name(cls: type[ActorRef], name: str, timeout_s: float) -> ActorRef:
    ref = cls.__new__(cls)
    ActorRef.__init__(ref, name, timeout_s=timeout_s)
    return ref


class ActorRef:
    """A handle by name: calls retry on a dead or restarting actor and look it up again.

    Calls are idempotent on the receiving side (intake of news only, reports applied when
    still news, leases re-queued on expiry), so a retried call never does harm.
    """

    def __init__(
        self, name: str, *, timeout_s: float = LOOKUP_TIMEOUT_S, handle: Any = None
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        # Given by whoever just created the actor, so the first call needs no lookup.
        self._handle: Any = handle

    def __reduce__(self):
        # By name only (a handle may be stale where it lands), as the same class: the typed
        # clients of :mod:`.handles` build their names in their constructors.
        return (_by_name, (type(self), self.name, self.timeout_s))

    @property
    def handle(self) -> Any:
        if self._handle is None:
            self._handle = lookup(self.name, timeout_s=self.timeout_s)
        return self._handle

    async def _ahandle(self) -> Any:
        """The handle, looked up as :func:`lookup` does but waiting on the event loop: a
        caller that gives up (``asyncio.wait_for``) leaves no thread behind still looking
        (``asyncio.run`` would wait for it at exit, e.g. a status call to a sweep, which
        has no poller, took the whole lookup timeout)."""
        if self._handle is None:
            deadline = time.monotonic() + self.timeout_s
            attempt = 0
            while True:
                try:
                    self._handle = await asyncio.to_thread(
                        ray.get_actor, self.name, namespace=NAMESPACE
                    )
                    break
                except ValueError:
                    if time.monotonic() >= deadline:
                        raise
                await asyncio.sleep(_backoff(attempt))
                attempt += 1
        return self._handle

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            handle = await self._ahandle()
            try:
                return await getattr(handle, method).remote(*args, **kwargs)
            except _RETRYABLE as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("%s.%s: %s; looking it up again", self.name, method, type(exc).__name__)
                self._handle = None
            await asyncio.sleep(_backoff(attempt))
            attempt += 1

    def call_sync(self, method: str, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                return ray.get(getattr(self.handle, method).remote(*args, **kwargs))
            except _RETRYABLE:
                if time.monotonic() >= deadline:
                    raise
                self._handle = None
            time.sleep(_backoff(attempt))
            attempt += 1

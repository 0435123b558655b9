"""The rate governor as one named actor holding a :class:`~driver_review.governor.RateGovernor`
per endpoint key, and the client-side :class:`RemoteLimiter` that leases from it.

Workers lease permits a few at a time (``GovernorConfig.lease_size``) so pacing is not a
round trip per call; successes are noted locally (how long ago each request was sent) and
travel with the next lease, so the governor's meter sees them when the server did, and
only 429s and rate-limit headers are sent at once, since those change the schedule. A
process that does not lease again soon (its work paused with the endpoint, or ran out)
reports its successes on their own after ``REPORT_AFTER_S``: the governor reads a 429
against what the server served just before it, from every process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import httpx

from driver_review.config import GovernorConfig
from driver_review.governor import Grant, RateGovernor
from driver_review.limiter import NodeEndpoint, PermitBucket
from driver_review.retry import parse_retry_after
from driver_review.runtime import metrics
from driver_review.runtime.handles import GovernorClient
from driver_review.warmstart import LearntStore

log = logging.getLogger(__name__)


#: A request reported older than this (a success, or a 429 sent at once) counts as this
#: old: a stalled caller's report.
MAX_AGE_S = 5.0
SAVE_EVERY_S = 10.0  # learnt limits reach the data dir this often (and at stop)
MAX_UNREPORTED = 10_000  # successes kept for the next report (a lease comes long before)
#: A success no lease took this long after it came is reported on its own (under the
#: governor's ``REPORTED_S``, when it reads a 429 again; over the time a busy process
#: takes between leases, so that only an idle one sends reports).
REPORT_AFTER_S = 0.4


class GovernorService:
    def __init__(
        self, config: GovernorConfig, *, instance: str, data_dir: str | None = None
    ) -> None:
        self.config = config
        self.instance = instance
        self._clock = node_clock()
        self._governors: dict[str, RateGovernor] = {}
        # Warm start: what earlier runs learnt, per endpoint key, from the data dir.
        self._store = LearntStore(data_dir) if data_dir and config.warm_start_s > 0 else None
        self._earlier = self._store.load() if self._store else {}
        self._saved: dict[str, dict[str, Any]] = {}
        self._saved_at = time.monotonic()
        self._saving: asyncio.Task | None = None

    def _get(self, key: str) -> RateGovernor:
        gov = self._governors.get(key)
        if gov is None:
            gov = self._governors[key] = RateGovernor(self.config, key=key)
            earlier = self._earlier.get(key)
            if earlier is not None and gov.warm_start(earlier, time.monotonic()):
                log.info(
                    "governor %s: warm start from a limit learnt %.0f s ago",
                    key,
                    gov.stats()["warm_start"]["age_s"],
                )
        return gov

    def _served(self, gov: RateGovernor, key: str, ages: Sequence[float], now: float) -> None:
        """Successes at their requests' ages in seconds: when they were sent, not when
        they were reported (at a few requests a second a lease spans seconds, and the
        meter reads served rates over one)."""
        for age in ages:
            gov.observe(200, {}, now - min(max(0.0, age), MAX_AGE_S))
        if ages:
            tags = {"instance": self.instance, "key": key, "answer": "ok"}
            metrics.endpoint_answers().inc(len(ages), tags)

    async def lease(self, key: str, n: int, successes: int | Sequence[float] = 0) -> Grant:
        """Permits for ``key``. ``successes``: the caller's answers other than 429 since its
        last lease, as their requests' ages in seconds (or a count, taken as sent now)."""
        gov = self._get(key)
        now = time.monotonic()
        self._served(gov, key, [0.0] * successes if isinstance(successes, int) else successes, now)
        grant = dataclasses.replace(gov.lease(n, now), issued_at=now, clock=self._clock)
        tags = {"instance": self.instance, "key": key}
        metrics.governor_rate().set(gov.rate, tags)
        metrics.governor_limit().set(gov.stats(now)["limit_estimate"] or 0.0, tags)
        if self._store and now - self._saved_at >= SAVE_EVERY_S and self._saving is None:
            self._saved_at = now
            self._saving = asyncio.get_running_loop().create_task(self.flush())
        return grant

    async def flush(self) -> int:
        """Write what changed of the learnt limits to the data dir; returns how many
        endpoints were written. Never raises: a store that fails costs a warm start only."""
        try:
            if self._store is None:
                return 0
            learnt = {
                key: entry
                for key, gov in self._governors.items()
                if (entry := gov.learnt()) is not None
            }
            changed = {
                k: v
                for k, v in learnt.items()
                if _without_time(v) != _without_time(self._saved.get(k))
            }
            if changed:
                await asyncio.to_thread(self._store.save, changed)
                self._saved.update(changed)
            return len(changed)
        except Exception as exc:
            log.warning("saving learnt limits: %s", exc)
            return 0
        finally:
            self._saving = None

    async def give_back(self, key: str, grant: Grant, unused: int) -> None:
        self._get(key).give_back(grant, unused, time.monotonic())

    async def observe(
        self,
        key: str,
        status: int,
        headers: dict[str, str],
        successes: Sequence[float] = (),
        age_s: float = 0.0,
    ) -> int:
        """One answer that changes the schedule (a 429, a pause, RateLimit headers) to a
        request sent ``age_s`` ago, after the caller's successes not yet reported (the
        ages of their requests in seconds): a 429 is judged against what the server
        served before it."""
        gov = self._get(key)
        now = time.monotonic()
        self._served(gov, key, successes, now)
        tags = {"instance": self.instance, "key": key}
        answer = str(status) if status in (429, 503) else "ok"
        metrics.endpoint_answers().inc(1, {**tags, "answer": answer})
        sent_at = now - min(max(0.0, age_s), MAX_AGE_S)
        return gov.observe(status, headers, now, sent_at=sent_at)

    async def report(self, key: str, successes: Sequence[float]) -> None:
        """Successes (ages in seconds) of a caller that is not leasing again soon."""
        self._served(self._get(key), key, successes, time.monotonic())

    async def busy_spans(self) -> dict[str, list[tuple[float, float]]]:
        """Per key, when demand kept its schedule full (``time.monotonic`` of this node)."""
        return {key: gov.busy_spans() for key, gov in self._governors.items()}

    async def stats(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        return {key: gov.stats(now) for key, gov in self._governors.items()}


def node_clock() -> str | None:
    """The name of this process's ``time.monotonic``: one per node (processes on a node
    share it), None outside Ray."""
    import ray

    if not ray.is_initialized():
        return None
    return f"monotonic@{ray.get_runtime_context().get_node_id()}"


def _without_time(entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An entry without its timestamp, rounded: a limit re-learnt unchanged needs no write."""
    if entry is None:
        return None
    return {
        k: (round(v, 1) if isinstance(v, float) else v)
        for k, v in entry.items()
        if k != "learnt_at"
    }


class RemoteLimiter:
    """:class:`~driver_review.catalog.base.Limiter` over the governor actor."""

    def __init__(self, governor: GovernorClient, key: str, *, batch: int) -> None:
        self.governor = governor
        self.key = key
        self._node = NodeEndpoint(key)
        self._bucket = PermitBucket(
            self._lease,
            batch=batch,
            give_back=self._give_back,
            clock_name=node_clock(),
            paused_for_s=self._node.paused_for_s,
        )
        # When the requests of answers other than 429 were sent, unreported.
        self._successes: list[float] = []
        self.waiting = 0
        #: The endpoint's rate as of the last lease (None before one): workers size their
        #: demand by it.
        self.rate: float | None = None
        self._paused_until = 0.0  # monotonic, as of the last lease or Retry-After seen
        self._pending: set[asyncio.Task] = set()
        self._send_failing = False  # a call sent without waiting failed: logged once
        self._report_timer: asyncio.TimerHandle | None = None

    async def _lease(self, n: int) -> Grant:
        grant = await self.governor.lease(self.key, n, self._ages())
        self._bucket.note_epoch(grant.epoch)
        self.rate = grant.rate
        self._paused_until = time.monotonic() + grant.paused_for_s
        return grant

    def _ages(self) -> list[float]:
        """The unreported successes as their requests' ages in seconds (clocks differ
        between processes; durations do not), and forget them."""
        now = time.monotonic()
        ages = [now - t for t in self._successes]
        self._successes = []
        return ages

    def paused_for_s(self) -> float:
        """How much longer the endpoint is paused, as this process last heard or any
        process on this machine was told."""
        return max(0.0, self._paused_until - time.monotonic(), self._node.paused_for_s())

    async def _give_back(self, grant: Grant, unused: int) -> None:
        await self.governor.give_back(self.key, grant, unused)

    async def acquire(self) -> None:
        self.waiting += 1
        try:
            await self._bucket.acquire()
        finally:
            self.waiting -= 1

    @property
    def strict_spacing(self) -> bool:
        return self._bucket.strict_spacing

    async def space(self) -> None:
        if gap_s := self._bucket.send_gap_s:
            await self._node.space(gap_s)

    def observe(self, status: int, headers: Mapping[str, str], *, elapsed_s: float = 0.0) -> None:
        pause_s = None
        if status in (429, 503):
            pause_s = parse_retry_after(httpx.Headers(headers).get("retry-after"), time.time())
        has_policy = (
            status == 429
            or pause_s is not None
            or any(k.lower().startswith("ratelimit") for k in headers)
        )
        if not has_policy:
            if len(self._successes) < MAX_UNREPORTED:
                self._successes.append(time.monotonic() - max(0.0, elapsed_s))
            if self._report_timer is None:
                self._report_timer = asyncio.get_running_loop().call_later(
                    REPORT_AFTER_S, self._report
                )
            return
        if pause_s is not None:
            # Known here at once, before the governor's answer: demand stops for it, in
            # every process on this machine (the others would spend what they hold until
            # their next lease), and the permits held here are not spent.
            self._paused_until = max(self._paused_until, time.monotonic() + pause_s)
            self._node.pause(pause_s)
            self._bucket.drop()
        self._send(
            self.governor.observe(self.key, status, dict(headers), self._ages(), elapsed_s),
            epoch=True,
        )

    def _report(self, *, closing: bool = False) -> None:
        """Report the successes no lease took within ``REPORT_AFTER_S``; if a lease took
        the older ones, wait for the oldest left to come of that age."""
        self._report_timer = None
        if not self._successes:
            return
        wait_s = self._successes[0] + REPORT_AFTER_S - time.monotonic()
        if wait_s > 0.001 and not closing:
            self._report_timer = asyncio.get_running_loop().call_later(wait_s, self._report)
            return
        self._send(self.governor.report(self.key, self._ages()))

    def _send(self, call: Coroutine[Any, Any, Any], *, epoch: bool = False) -> None:
        """Send a 429 or a report without waiting; a failure (the governor restarting) is
        logged once until a call goes through again: the next lease carries on. With
        ``epoch`` the answer is the governor's epoch: the permits held here are dropped
        if it voided them."""
        task = asyncio.get_running_loop().create_task(call)
        self._pending.add(task)
        task.add_done_callback(functools.partial(self._sent, epoch=epoch))

    def _sent(self, task: asyncio.Task, *, epoch: bool = False) -> None:
        self._pending.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            self._send_failing = False
            if epoch:
                self._bucket.note_epoch(task.result())
        elif not self._send_failing:
            self._send_failing = True
            first_line = next(iter(str(error).splitlines()), "")  # Ray's carry tracebacks
            log.warning(
                "governor call for %s failed: %s: %s", self.key, type(error).__name__, first_line
            )

    async def aclose(self) -> None:
        if self._report_timer is not None:
            self._report_timer.cancel()
        self._report(closing=True)
        await self._bucket.aclose()
        self._node.close()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {
            "waiting": self.waiting,
            "rate": self.rate,
            "paused_for_s": self.paused_for_s(),
            **self._bucket.stats(),
            "spacing_held": self._node.held,
        }

"""The rate governor on a fake clock: a small discrete-event loop in which clients spend
leased permits exactly on time, each request takes ``latency_s``, and every answer is
reported back as the real client would; the servers answer as a token bucket or as one of
the simulator's limiter shapes would. Pure Python: no Ray, no sockets, no sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from driver_review.config import GovernorConfig
from driver_review.discovery import SETTLE
from driver_review.governor import RateGovernor
from driver_review.sim.limiters import make_shape

WALL0 = 1_750_000_000.0


class TokenBucketServer:
    """``rate`` tokens/s, ``burst`` banked; a 429 says ``Retry-After: ceil(wait)`` (≥ 1),
    as the simulator does. With ``headers`` it also advertises its policy."""

    def __init__(self, rate: float, burst: int, *, headers: bool = False) -> None:
        self.rate, self.burst, self.headers = rate, burst, headers
        self.tokens, self.at = float(burst), 0.0

    def handle(self, t: float) -> tuple[int, dict[str, str]]:
        self.tokens = min(self.burst, self.tokens + (t - self.at) * self.rate)
        self.at = t
        out: dict[str, str] = {}
        status = 200 if self.tokens >= 1 else 429
        if status == 200:
            self.tokens -= 1
        else:
            out["Retry-After"] = str(max(1, math.ceil((1 - self.tokens) / self.rate)))
        if self.headers:
            window_s = max(1, round(self.burst / self.rate))
            out["RateLimit-Policy"] = f'"default";q={round(self.rate * window_s)};w={window_s}'
            out["RateLimit"] = f'"default";r={math.floor(self.tokens)};t=1'
        return status, out


class Server(Protocol):
    def handle(self, t: float) -> tuple[Any, ...]:
        """``(status, headers)`` or ``(status, headers, delay_s)`` for a request at ``t``."""


class GlitchServer:
    """``inner``, except that the first request at or after ``at`` is refused with
    ``Retry-After: 1`` whatever the limit: a moment's hiccup at the vendor, or what a
    client's stall looks like (the requests it held back arrive as one burst)."""

    def __init__(self, inner: Server, at: float) -> None:
        self.inner, self.at, self.glitched = inner, at, False

    def handle(self, t: float) -> tuple[Any, ...]:
        if not self.glitched and t >= self.at:
            self.glitched = True
            return 429, {"Retry-After": "1"}
        return self.inner.handle(t)


@dataclass
class Run:
    gov: RateGovernor
    log: list[tuple[float, int]] = field(default_factory=list)  # (answered at, status)
    rates: list[tuple[float, float, str]] = field(default_factory=list)

    def served_rate(self, start: float, end: float) -> float:
        return sum(1 for t, s in self.log if start <= t < end and s != 429) / (end - start)

    def share_429(self, start: float, end: float) -> float:
        window = [s for t, s in self.log if start <= t < end]
        return sum(1 for s in window if s == 429) / max(1, len(window))


def simulate(
    server: Server,
    *,
    duration_s: float,
    start_s: float = 0.0,
    workers: int = 16,
    latency_s: float = 0.02,
    config: GovernorConfig | None = None,
    governor: RateGovernor | None = None,
    jitter_s: float = 0.0,
    seed: int = 0,
    processes: int = 0,
    refuse_latency_s: float | None = None,
) -> Run:
    """Saturating demand: ``workers`` clients share one bucket of leased permits. With
    ``jitter_s`` each request leaves up to that much after its permit (uniform, seeded):
    an event loop waking late, a connection being set up.

    ``processes`` > 0 splits the workers into that many processes, as Ray's workers are:
    each leases its own permits and learns of a voided schedule only when it next hears
    from the governor, and reports its successes as the real client does, with its next
    lease (or with its next 429), so the governor hears of them late. With 0 every answer
    is heard at once and one bucket serves all (the ideal client).

    ``refuse_latency_s``: how long a 429 takes to come back (default ``latency_s``); a
    limiter in front of the server refuses at once, while what it admits takes the
    server's time. Clients report every answer with when its request was sent, as the
    real ones do."""
    rng = random.Random(seed)
    run = Run(governor or RateGovernor(config or GovernorConfig(), wall_clock=lambda: WALL0))
    gov, events, seq = run.gov, [], itertools.count()
    n_buckets = max(1, processes)
    held: list[deque[float]] = [deque() for _ in range(n_buckets)]
    unreported: list[list[float]] = [[] for _ in range(n_buckets)]
    generation = [0] * n_buckets
    epoch = [-1] * n_buckets

    def push(t: float, *what: object) -> None:
        heapq.heappush(events, (t, next(seq), *what))

    def report(p: int) -> None:
        for at in unreported[p]:
            gov.observe(200, {}, at)
        unreported[p].clear()

    def note_epoch(p: int, now_epoch: int) -> None:
        if now_epoch != epoch[p]:
            held[p].clear()
            generation[p] += 1
            epoch[p] = now_epoch

    def acquire(w: int, now: float) -> None:
        p = w % n_buckets
        if not held[p]:
            report(p)
            grant = gov.lease(8, now)
            note_epoch(p, grant.epoch)
            if not grant.delays_s:
                push(now + grant.retry_in_s, "acquire", w)
                return
            held[p].extend(now + d for d in grant.delays_s)
        late_s = rng.uniform(0.0, jitter_s) if jitter_s else 0.0
        push(max(held[p].popleft(), now) + late_s, "send", w, generation[p])

    for w in range(workers):
        push(start_s, "acquire", w)
    while events:
        t, _, kind, w, *rest = heapq.heappop(events)
        if t > duration_s:
            break
        p = w % n_buckets
        if kind == "acquire":
            acquire(w, t)
        elif kind == "send":
            if rest[0] != generation[p]:  # voided while waiting: take a fresh one
                acquire(w, t)
                continue
            # A server may hold an admitted request before serving it (nginx's delay).
            status, headers, *delay_s = server.handle(t)
            took_s = latency_s if status != 429 or refuse_latency_s is None else refuse_latency_s
            push(t + took_s + sum(delay_s), "answer", w, status, headers, t)
        else:
            status, headers, sent = rest
            if processes and status == 200 and not headers:
                unreported[p].append(sent)  # told with the next lease
            else:
                if processes:
                    report(p)
                note_epoch(p, gov.observe(status, headers, t, sent_at=sent))
            run.log.append((t, status))
            run.rates.append((t, gov.rate, gov.state(t)))
            acquire(w, t)
    return run


class ShapeServer:
    """A shape answering as its server would: 200 (perhaps held), or 429 with or without
    ``Retry-After`` (whole seconds, at least 1, as the simulator says it)."""

    def __init__(self, name: str, rate: float, *, retry_after: bool) -> None:
        self.shape = make_shape(name, rate)
        self.retry_after = retry_after

    def handle(self, t: float) -> tuple[int, dict[str, str], float]:
        v = self.shape.admit(t)
        if v.admitted:
            return 200, {}, v.delay_s
        told = {"Retry-After": str(max(1, math.ceil(v.wait_s)))} if self.retry_after else {}
        return 429, told, 0.0


class KnowingGovernor(RateGovernor):
    """A reference, not a policy: slow start as the governor's, then, from its first 429
    on (and its Retry-After honoured), the rate held at ``SETTLE`` of the true ``limit``
    for good. What cold discovery could get at best with that start on a shape: the cost
    of slow start and of one 429 is paid by any client that does not know the limit."""

    def __init__(self, limit: float, config: GovernorConfig | None = None) -> None:
        super().__init__(config or GovernorConfig(), wall_clock=lambda: WALL0)
        self.limit = limit
        self._knows = False

    def on_429(
        self,
        retry_after_s: float | None,
        now: float,
        *,
        header_mode: bool = False,
        sent_at: float | None = None,
    ) -> int:
        epoch = super().on_429(retry_after_s, now, header_mode=header_mode, sent_at=sent_at)
        self._knows = True
        self._rate = SETTLE * self.limit
        return epoch

    def _tick(self, now: float) -> None:
        super()._tick(now)
        if self._knows:
            self._rate = SETTLE * self.limit


def knowing_utilization(server: Server, limit: float, *, duration_s: float, **kw: Any) -> float:
    """The utilization :class:`KnowingGovernor` gets from ``server`` (see it)."""
    run = simulate(server, duration_s=duration_s, governor=KnowingGovernor(limit), **kw)
    return run.served_rate(0, duration_s) / limit


def best_paced_utilization(
    name: str,
    limit: float,
    *,
    jitter_s: float,
    duration_s: float,
    max_share: float = 0.01,
    seed: int = 0,
) -> float:
    """The most of ``limit`` a client sending at a fixed pace serves from the limiter shape
    ``name`` when each request leaves up to ``jitter_s`` after its slot (uniform, seeded,
    as :func:`simulate` jitters), with at most ``max_share`` of its requests refused: the
    best pace from 0.70 to 1.00 of the limit, in steps of 0.01, chosen knowing the limit
    and the jitter. A bound for any client with that jitter, not a policy."""
    best = 0.0
    for hundredths in range(70, 101):
        pace = limit * hundredths / 100
        shape, rng = make_shape(name, limit), random.Random(seed)
        sent = int(pace * duration_s)
        served = sum(
            shape.admit(k / pace + rng.uniform(0.0, jitter_s)).admitted for k in range(sent)
        )
        if sent - served <= max_share * sent:
            best = max(best, served / duration_s / limit)
    return best

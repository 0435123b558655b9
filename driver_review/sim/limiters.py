"""Rate-limiter shapes as real servers implement them, pure and on the caller's clock.

Every shape answers ``admit(now)`` with a :class:`Verdict`: admitted or not, how long until
a request would be admitted (what a ``Retry-After`` would say), and for an admitted request
how long the server holds it before serving (nginx ``limit_req`` with ``burst`` and no
``nodelay`` delays instead of refusing). The unit tests drive them on a fake clock; the
simulator serves them (``driver-review sim --limiter …``); the benchmark names them.

- :class:`TokenBucket` — ``rate`` tokens/s, ``burst`` banked (the simulator's default).
- :class:`NginxLeaky` — ``ngx_http_limit_req_module``: per key an ``excess`` in
  thousandths of a request, drained at ``rate`` per second in whole milliseconds; a request
  adds 1000 and is refused (nothing recorded) when the excess would pass ``burst * 1000``.
  Without ``nodelay`` an admitted request waits ``excess / rate`` before it is served.
- :class:`FixedWindow` — at most ``limit`` admitted per aligned window.
- :class:`SlidingLog` — at most ``limit`` admitted in any trailing window.
- :class:`SlidingCounter` — the two-bucket estimate (the previous window weighted by how
  much of it still overlaps the trailing window); only admitted requests count.
- :class:`HaproxyRate` — a stick table's ``http_req_rate(period)`` read by
  ``sc_http_req_rate(0) gt R``: HAProxy's ``freq_ctr`` over whole-millisecond periods,
  ``curr + prev * remaining / period``, and it counts *every* request tracked, denied ones
  included ("every started request, valid or not"), so sending above the limit keeps it shut.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol

ShapeName = Literal[
    "token", "leaky", "leaky-burst", "leaky-delay", "fixed", "sliding", "sliding-log", "haproxy"
]
#: The shapes that count over a window (``window_s`` long; ``make_shape``'s default 1 s).
WINDOWED: tuple[str, ...] = ("fixed", "sliding", "sliding-log", "haproxy")
SHAPES: tuple[str, ...] = (
    "token",
    "leaky",
    "leaky-burst",
    "leaky-delay",
    "fixed",
    "sliding",
    "sliding-log",
    "haproxy",
)


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    wait_s: float = 0.0  # refused: until a request would be admitted (>= 0)
    delay_s: float = 0.0  # admitted: how long the server holds it before serving


class Shape(Protocol):
    rate: float  # the sustained limit, requests/s

    def admit(self, now: float) -> Verdict: ...


def _check(rate: float, burst: int) -> None:
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"limiter rate must be a positive number, got {rate!r}")
    if burst < 0:
        raise ValueError(f"limiter burst must be >= 0, got {burst!r}")


class TokenBucket:
    def __init__(self, rate: float, burst: int) -> None:
        _check(rate, burst)
        self.rate, self.burst = rate, max(1, burst)
        self._tokens = float(self.burst)
        self._at: float | None = None

    def admit(self, now: float) -> Verdict:
        at = now if self._at is None else self._at
        self._tokens = min(self.burst, self._tokens + max(0.0, now - at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return Verdict(True)
        return Verdict(False, (1.0 - self._tokens) / self.rate)


class NginxLeaky:
    """nginx's arithmetic, integers and all: ``rate`` is kept in thousandths per second
    (``rate=60r/s`` is 60000), time in whole milliseconds, ``burst`` in thousandths."""

    def __init__(self, rate: float, burst: int = 0, *, nodelay: bool = True) -> None:
        _check(rate, burst)
        self.rate = rate
        self.burst, self.nodelay = burst, nodelay
        self._rate_m = int(rate * 1000)
        self._excess = 0
        self._last_ms: int | None = None

    def admit(self, now: float) -> Verdict:
        now_ms = math.floor(now * 1000)
        if self._last_ms is None:  # a new node: nothing in excess
            self._last_ms = now_ms
            return Verdict(True)
        ms = now_ms - self._last_ms
        ms = 1 if ms < -60000 else max(0, ms)
        excess = max(0, self._excess - self._rate_m * ms // 1000 + 1000)
        if excess > self.burst * 1000:
            # Nothing is recorded for a refused request. When one would pass: once the
            # excess drained to burst*1000 (ms of drain, rounded up to whole ms).
            wait_ms = math.ceil((excess - self.burst * 1000) * 1000 / self._rate_m)
            return Verdict(False, wait_ms / 1000)
        self._excess = excess
        if ms:
            self._last_ms = now_ms
        delay_ms = 0 if self.nodelay else excess * 1000 // self._rate_m
        return Verdict(True, 0.0, delay_ms / 1000)


class FixedWindow:
    def __init__(self, rate: float, window_s: float = 1.0) -> None:
        _check(rate, 0)
        self.rate, self.window_s = rate, window_s
        self.limit = max(1, round(rate * window_s))
        self._start: float | None = None
        self._used = 0

    def admit(self, now: float) -> Verdict:
        start = math.floor(now / self.window_s) * self.window_s  # aligned to the clock
        if start != self._start:
            self._start, self._used = start, 0
        if self._used < self.limit:
            self._used += 1
            return Verdict(True)
        return Verdict(False, start + self.window_s - now)


class SlidingLog:
    def __init__(self, rate: float, window_s: float = 1.0) -> None:
        _check(rate, 0)
        self.rate, self.window_s = rate, window_s
        self.limit = max(1, round(rate * window_s))
        self._log: deque[float] = deque()

    def admit(self, now: float) -> Verdict:
        while self._log and self._log[0] + self.window_s <= now + 1e-9:  # float slack
            self._log.popleft()
        if len(self._log) < self.limit:
            self._log.append(now)
            return Verdict(True)
        return Verdict(False, self._log[0] + self.window_s - now)


class SlidingCounter:
    def __init__(self, rate: float, window_s: float = 1.0) -> None:
        _check(rate, 0)
        self.rate, self.window_s = rate, window_s
        self.limit = max(1, round(rate * window_s))
        self._start = -math.inf
        self._curr = self._prev = 0

    def _roll(self, now: float) -> float:
        start = math.floor(now / self.window_s) * self.window_s
        if start != self._start:
            self._prev = self._curr if start - self._start == self.window_s else 0
            self._start, self._curr = start, 0
        return self._prev * (1.0 - (now - start) / self.window_s) + self._curr

    def admit(self, now: float) -> Verdict:
        if self._roll(now) + 1 <= self.limit:
            self._curr += 1
            return Verdict(True)
        # The estimate falls as the previous window slides out (if it can fall far enough).
        room = self._curr + 1 - self.limit
        start = self._start
        if self._prev and room <= 0:
            wait = start + self.window_s * (1 + room / self._prev) - now
        else:
            wait = start + self.window_s - now
        return Verdict(False, max(0.0, wait))


class HaproxyRate:
    """``http_req_rate(period)`` with ``deny if { sc_http_req_rate(0) gt limit }``."""

    def __init__(self, rate: float, period_s: float = 1.0) -> None:
        _check(rate, 0)
        self.rate = rate
        self.period_ms = max(1, round(period_s * 1000))
        self.limit = max(1, round(rate * period_s))
        self._tick: int | None = None
        self._curr = self._prev = 0

    def admit(self, now: float) -> Verdict:
        now_ms = math.floor(now * 1000)
        if self._tick is None:
            self._tick = now_ms
        elapsed = now_ms - self._tick
        if elapsed >= self.period_ms:
            self._prev = self._curr if elapsed < 2 * self.period_ms else 0
            self._curr = 0
            self._tick += self.period_ms
            if now_ms - self._tick >= self.period_ms:  # missed two periods or more
                self._tick = now_ms
            elapsed = now_ms - self._tick
        self._curr += 1  # track-sc0 counts the request before the rule reads the rate
        remain = self.period_ms - elapsed
        rate = self._curr + (self._prev * remain) // self.period_ms
        if rate > self.limit:
            return Verdict(False, remain / 1000)
        return Verdict(True)


def make_shape(name: str, rate: float, *, burst: int | None = None, window_s: float = 1.0) -> Shape:
    """A shape by its ``--limiter`` name; ``burst`` defaults to ``ceil(rate / 5)`` where a
    shape has one (``leaky`` has none: nginx without ``burst=``); a window shape counts
    ``rate * window_s`` requests per ``window_s`` (a quota per minute: 60)."""
    default_burst = max(1, math.ceil(rate / 5))
    b = default_burst if burst is None else burst
    if name == "token":
        return TokenBucket(rate, b)
    if name == "leaky":
        return NginxLeaky(rate, 0)
    if name == "leaky-burst":
        return NginxLeaky(rate, b, nodelay=True)
    if name == "leaky-delay":
        return NginxLeaky(rate, b, nodelay=False)
    if name == "fixed":
        return FixedWindow(rate, window_s)
    if name == "sliding":
        return SlidingCounter(rate, window_s)
    if name == "sliding-log":
        return SlidingLog(rate, window_s)
    if name == "haproxy":
        return HaproxyRate(rate, window_s)
    raise ValueError(f"unknown limiter shape {name!r} (shapes: {', '.join(SHAPES)})")

"""One token bucket for all ``/v1`` routes, and the headers that describe it.

Header syntax follows draft-ietf-httpapi-ratelimit-headers (-10/-11)::

    RateLimit-Policy: "default";q=<quota>;w=<window seconds>
    RateLimit: "default";r=<remaining>;t=<seconds>

The policy advertises the sustained rate as ``q`` requests per ``w`` seconds (``q/w`` is
the bucket's refill rate, ``w`` is the time to refill a full bucket rounded to whole
seconds, at least 1), so a client that paces at ``q/w`` never sees a 429. ``r`` is the
number of whole tokens left; ``t`` is how long until a request will be admitted again
when ``r`` is 0, otherwise how long until the bucket is full again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Literal

POLICY_NAME = "default"


@dataclass(frozen=True)
class Admission:
    admitted: bool
    remaining: int  # whole tokens left after this request
    wait_s: float  # until one token is available (0 when one already is)
    reset_s: float  # until the bucket is full


class TokenBucket:
    """``rate`` tokens per second, at most ``capacity`` banked; starts full."""

    def __init__(
        self, rate: float, capacity: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or capacity < 1:
            raise ValueError("rate must be > 0 and capacity >= 1")
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = float(capacity)
        self._at = clock()

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def try_acquire(self) -> Admission:
        tokens = self._refill()
        admitted = tokens >= 1.0
        if admitted:
            tokens = self._tokens = tokens - 1.0
        wait_s = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
        reset_s = (self.capacity - tokens) / self.rate
        return Admission(admitted, math.floor(tokens), wait_s, reset_s)

    def policy(self) -> tuple[int, int]:
        """``(q, w)``: the sustained rate as a quota per whole-second window."""
        window_s = max(1, round(self.capacity / self.rate))
        return max(1, round(self.rate * window_s)), window_s


def retry_after(
    wait_s: float, fmt: Literal["seconds", "http-date"], *, now: float | None = None
) -> str:
    """The ``Retry-After`` value: whole seconds rounded up (at least 1), or the HTTP-date
    of that moment (rounded up to the next whole second, so waiting until it is enough)."""
    seconds = max(1, math.ceil(wait_s))
    if fmt == "seconds":
        return str(seconds)
    at = math.ceil((time.time() if now is None else now) + seconds)
    return formatdate(at, usegmt=True)


def ratelimit_headers(bucket: TokenBucket, admission: Admission) -> dict[str, str]:
    quota, window_s = bucket.policy()
    until_s = admission.wait_s if admission.remaining == 0 else admission.reset_s
    return {
        "RateLimit-Policy": f'"{POLICY_NAME}";q={quota};w={window_s}',
        "RateLimit": f'"{POLICY_NAME}";r={admission.remaining};t={math.ceil(until_s)}',
    }


class QuotaWindow:
    """``quota`` requests per fixed window of ``window_s`` (a daily quota, say): once spent,
    everything waits for the next window, however slowly it is asked."""

    def __init__(
        self,
        quota: int,
        window_s: float,
        *,
        name: str = "quota",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if quota < 1 or window_s <= 0:
            raise ValueError("quota must be >= 1 and window_s > 0")
        self.quota = quota
        self.window_s = window_s
        self.name = name
        self._clock = clock
        self._start = clock()
        self._used = 0

    def try_acquire(self, *, consume: bool = True) -> Admission:
        now = self._clock()
        elapsed = now - self._start
        if elapsed >= self.window_s:  # a new window: the quota is whole again
            self._start += (elapsed // self.window_s) * self.window_s
            self._used = 0
        reset_s = self._start + self.window_s - now
        admitted = self._used < self.quota
        if admitted and consume:
            self._used += 1
        remaining = self.quota - self._used
        return Admission(admitted, remaining, 0.0 if remaining else reset_s, reset_s)

    def headers(self, admission: Admission) -> dict[str, str]:
        return {
            "RateLimit-Policy": f'"{self.name}";q={self.quota};w={math.ceil(self.window_s)}',
            "RateLimit": f'"{self.name}";r={admission.remaining};t={math.ceil(admission.reset_s)}',
        }


def merge_headers(*parts: dict[str, str]) -> dict[str, str]:
    """Several policies in one field each, as structured-field lists (``a, b``)."""
    merged: dict[str, str] = {}
    for part in parts:
        for name, value in part.items():
            merged[name] = f"{merged[name]}, {value}" if name in merged else value
    return merged

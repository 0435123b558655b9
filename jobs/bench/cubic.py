"""The AWS SDK's adaptive retry mode, ported from botocore for the benchmark's third peer.

A faithful port of botocore's client-side rate limiting (``botocore/retries/``, read at
commit 0e6e2404b85d of boto/botocore):

- :class:`CubicCalculator` — ``throttling.py``: the CUBIC window as a send rate,
  ``rate(t) = SCALE * (t - last_fail - K)**3 + W_max`` with ``K = cbrt(W_max * (1 - BETA)
  / SCALE)``; on a throttle, ``W_max`` becomes the rate in use and the new rate is
  ``BETA * W_max``. ``_SCALE_CONSTANT = 0.4``, ``_BETA = 0.7``.
- :class:`TokenBucket` — ``bucket.py``: fill rate = the CUBIC rate (``_MIN_RATE = 0.5``
  floor), capacity = the rate (at least 1), starts empty; ``acquire`` waits for a token.
- :class:`RateClocker` — ``adaptive.py``: the measured send rate, counted in buckets of
  ``_TIME_BUCKET_RANGE = 0.5`` s and smoothed with ``_DEFAULT_SMOOTHING = 0.8``.
- :class:`ClientRateLimiter` — ``adaptive.py``: off until the first throttle; on every
  response, a success asks CUBIC for the rate at that time and a throttle asks it to back
  off from ``min(measured, current)``; the bucket's rate is then capped at
  ``_MAX_RATE_ADJUST_SCALE = 2.0`` x the measured rate.
- :func:`standard_delay_s` — ``standard.py`` ``ExponentialBackoff``: ``rand * min(scale *
  2**(attempt-1), 20)``, scale 1 for throttles and 0.05 otherwise, and a server's
  retry-after taken as ``max(t, min(retry_after, t + 5))``.

botocore blocks a thread on a condition variable; here the same arithmetic runs under an
asyncio wait (one event loop per peer process, so no lock is needed). The clock is
injected, so the unit tests follow the algorithm step by step on hand-computed values.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable, Mapping

# throttling.py: CubicCalculator._SCALE_CONSTANT, CubicCalculator._BETA
SCALE = 0.4
BETA = 0.7
# bucket.py: TokenBucket._MIN_RATE
MIN_FILL_RATE = 0.5
# adaptive.py: RateClocker._DEFAULT_SMOOTHING, RateClocker._TIME_BUCKET_RANGE,
# ClientRateLimiter._MAX_RATE_ADJUST_SCALE
SMOOTHING = 0.8
TIME_BUCKET_S = 0.5
MAX_RATE_ADJUST_SCALE = 2.0
# standard.py: ExponentialBackoff._BASE, _MAX_BACKOFF, _RETRY_AFTER_MAX_ADDITIONAL and
# _DEFAULT_BACKOFF_CONFIG (throttling_base_scale 1, non_throttling_base_scale 0.05)
BACKOFF_BASE = 2
MAX_BACKOFF_S = 20.0
RETRY_AFTER_MAX_ADDITIONAL_S = 5.0
THROTTLING_SCALE = 1.0
NON_THROTTLING_SCALE = 0.05

Clock = Callable[[], float]


class CubicCalculator:
    """``throttling.CubicCalculator``."""

    def __init__(self, starting_max_rate: float, start_time: float) -> None:
        self.w_max = starting_max_rate
        self.k = self._zero_point()
        self.last_fail = start_time

    def _zero_point(self) -> float:
        return float((self.w_max * (1 - BETA)) / SCALE) ** (1 / 3.0)

    def success_received(self, timestamp: float) -> float:
        dt = timestamp - self.last_fail
        return SCALE * (dt - self.k) ** 3 + self.w_max

    def error_received(self, current_rate: float, timestamp: float) -> float:
        # The rate in use when the throttle came is the new maximum.
        self.w_max = current_rate
        self.k = self._zero_point()
        self.last_fail = timestamp
        return current_rate * BETA


class TokenBucket:
    """``bucket.TokenBucket``: refill arithmetic; :meth:`acquire` waits without blocking
    the event loop and wakes early when the rate changes (botocore's ``notify``)."""

    def __init__(self, max_rate: float, clock: Clock) -> None:
        self._clock = clock
        self.fill_rate = MIN_FILL_RATE
        self.max_capacity = 1.0
        self.capacity = 0.0
        self._last: float | None = None
        self._changed = asyncio.Event()
        self.set_max_rate(max_rate)

    @property
    def max_rate(self) -> float:
        return self.fill_rate

    def set_max_rate(self, value: float) -> None:
        # Tokens earned so far at the old rate are banked before the rate changes.
        self.refill()
        self.fill_rate = max(value, MIN_FILL_RATE)
        self.max_capacity = value if value >= 1 else 1.0
        self.capacity = min(self.capacity, self.max_capacity)
        self._changed.set()

    def refill(self) -> None:
        now = self._clock()
        if self._last is None:
            self._last = now
            return
        self.capacity = min(self.max_capacity, self.capacity + (now - self._last) * self.fill_rate)
        self._last = now

    def try_acquire(self, amount: float = 1.0) -> float:
        """Take ``amount`` tokens and return 0, or return the seconds to wait for them."""
        self.refill()
        if amount <= self.capacity:
            self.capacity -= amount
            return 0.0
        return (amount - self.capacity) / self.fill_rate

    async def acquire(self, amount: float = 1.0) -> None:
        while (wait_s := self.try_acquire(amount)) > 0:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):  # the wait is up: try again
                await asyncio.wait_for(self._changed.wait(), wait_s)


class RateClocker:
    """``adaptive.RateClocker``: requests per second, in 0.5 s buckets, smoothed."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.measured_rate = 0.0
        # As botocore: the first bucket starts at the whole second, not the half second.
        self._last_bucket = float(math.floor(clock()))
        self._scale = 1 / TIME_BUCKET_S
        self._count = 0

    def record(self, amount: int = 1) -> float:
        t = self._clock()
        bucket = math.floor(t * self._scale) / self._scale
        self._count += amount
        if bucket > self._last_bucket:
            current = self._count / float(bucket - self._last_bucket)
            self.measured_rate = current * SMOOTHING + self.measured_rate * (1 - SMOOTHING)
            self._count = 0
            self._last_bucket = bucket
        return self.measured_rate


class ClientRateLimiter:
    """``adaptive.ClientRateLimiter`` as a :class:`~driver_review.catalog.base.Limiter`:
    ``acquire`` before every attempt (botocore's ``before-send``), ``observe`` after every
    response (``needs-retry``); a 429 is the throttling error."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.cubic = CubicCalculator(starting_max_rate=0, start_time=clock())
        self.bucket = TokenBucket(max_rate=1, clock=clock)
        self.clocker = RateClocker(clock)
        self.enabled = False  # no pacing at all until the first throttle
        self.throttles = 0
        self.strict_spacing = False  # botocore sends when its token comes, however late

    async def acquire(self) -> None:
        if self.enabled:
            await self.bucket.acquire()

    async def space(self) -> None:
        """Never called: botocore keeps no spacing (``strict_spacing`` is False)."""

    def observe(
        self, status: int, headers: Mapping[str, str] | None = None, *, elapsed_s: float = 0.0
    ) -> None:
        self.on_response(throttled=status == 429)

    def on_response(self, *, throttled: bool) -> float:
        """The new send rate (also the bucket's, unless capped at twice the measured)."""
        measured = self.clocker.record()
        now = self._clock()
        if not throttled:
            new_rate = self.cubic.success_received(now)
        else:
            self.throttles += 1
            rate = measured if not self.enabled else min(measured, self.bucket.max_rate)
            new_rate = self.cubic.error_received(rate, now)
            self.enabled = True
        self.bucket.set_max_rate(min(new_rate, MAX_RATE_ADJUST_SCALE * measured))
        return new_rate

    def stats(self) -> dict[str, float | int | bool]:
        return {
            "enabled": self.enabled,
            "rate_per_s": self.bucket.max_rate,
            "measured_rate_per_s": self.clocker.measured_rate,
            "w_max": self.cubic.w_max,
            "throttles": self.throttles,
        }


def standard_delay_s(
    attempt: int,
    *,
    throttled: bool,
    retry_after_s: float | None,
    rand: Callable[[], float] = random.random,
) -> float:
    """``standard.ExponentialBackoff.delay_amount`` for the 1-based ``attempt`` that failed."""
    scale = THROTTLING_SCALE if throttled else NON_THROTTLING_SCALE
    t = rand() * min(scale * BACKOFF_BASE ** (attempt - 1), MAX_BACKOFF_S)
    if retry_after_s is not None:
        return max(t, min(retry_after_s, RETRY_AFTER_MAX_ADDITIONAL_S + t))
    return t

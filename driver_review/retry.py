"""What a server says about when to come back, and how long to wait when it says nothing.

- :func:`parse_retry_after` reads ``Retry-After`` (RFC 9110 §10.2.3): delay-seconds or an
  HTTP-date; anything else is ignored (``None``), as the RFC asks of a recipient. It is
  the one reader of the header (clients, governor, probe, the simulator's webhook
  sender); a caller that honours less than a day passes its own ``max_s``.
- :class:`Backoff` is exponential backoff with *full jitter*
  (``uniform(0, min(cap, base * 2**attempt))``): spreading retries over the whole interval
  keeps many clients that failed together from retrying together.
- :func:`parse_ratelimit` reads the IETF RateLimit fields
  (draft-ietf-httpapi-ratelimit-headers-10/11, Structured-Field lists)::

      RateLimit-Policy: "default";q=100;w=1          quota q per window w seconds
      RateLimit: "default";r=42;t=1                  r left, for the next t seconds

  and, because servers still send it, the older trio ``RateLimit-Limit`` /
  ``RateLimit-Remaining`` / ``RateLimit-Reset`` (drafts ≤ 06). Malformed fields are ignored
  (the draft says MUST), never an error.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# delay-seconds is 1*DIGIT; a decimal is accepted too because some servers send "0.5" and
# reading it is harmless.
_DELTA_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
# RFC 850 and asctime dates, the two obsolete forms RFC 9110 says a recipient MUST accept.
_RFC850 = "%A, %d-%b-%y %H:%M:%S GMT"
_ASCTIME = "%a %b %d %H:%M:%S %Y"
# A server that asks for a day's pause is either broken or means "stop": cap what we honour.
MAX_RETRY_AFTER_S = 86_400.0


def parse_retry_after(
    value: str | None, now: float, *, max_s: float = MAX_RETRY_AFTER_S
) -> float | None:
    """Seconds to wait from ``now`` (Unix time, for HTTP-dates); ``None`` if unusable.

    A date in the past gives ``0.0``; a value beyond ``max_s`` (a day unless the caller
    honours less) is capped at ``max_s``. Negative, exponent, ``inf``/``nan`` forms are
    not delay-seconds: ignored like any other unreadable value.
    """
    if not max_s > 0:  # also refuses nan
        raise ValueError(f"max_s must be > 0 seconds, got {max_s!r}")
    if value is None:
        return None
    m = _DELTA_SECONDS.match(value)
    if m is not None:
        return min(float(m.group(1)), max_s)
    when = _parse_http_date(value.strip())
    if when is None:
        return None
    return min(max(0.0, when - now), max_s)


def _parse_http_date(value: str) -> float | None:
    if not value or len(value) > 64:
        return None
    try:
        dt = parsedate_to_datetime(value)  # IMF-fixdate
    except (TypeError, ValueError, IndexError):
        dt = None
    if dt is None:
        for fmt in (_RFC850, _ASCTIME):
            try:
                dt = datetime.strptime(" ".join(value.split()), fmt)
                break
            except ValueError:
                continue
    if dt is None:
        return None
    if dt.tzinfo is None:  # HTTP-dates are always GMT
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@dataclass
class Backoff:
    """Exponential backoff with full jitter; ``rng`` is injectable so tests are exact."""

    base_s: float
    cap_s: float
    rng: random.Random

    def delay_s(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (0 for the first retry)."""
        ceiling = self.cap_s if attempt >= 64 else min(self.cap_s, self.base_s * 2**attempt)
        return self.rng.uniform(0.0, ceiling)


# --- RateLimit fields -------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaPolicy:
    """One item of ``RateLimit-Policy``: ``quota`` units per ``window_s`` (if given)."""

    name: str
    quota: int
    window_s: float | None


@dataclass(frozen=True)
class ServiceLimit:
    """One item of ``RateLimit``: ``remaining`` units for the next ``reset_s`` (if given)."""

    name: str
    remaining: int
    reset_s: float | None


@dataclass(frozen=True)
class RateLimitInfo:
    policies: tuple[QuotaPolicy, ...]
    limits: tuple[ServiceLimit, ...]

    def rate_per_s(self) -> float | None:
        """The sustained rate the strictest windowed policy allows, if any is advertised."""
        rates = [p.quota / p.window_s for p in self.policies if p.window_s]
        return min(rates) if rates else None

    def tightest(self) -> ServiceLimit | None:
        """The service limit with the least remaining quota."""
        return min(self.limits, key=lambda s: s.remaining, default=None)

    def plan(self, long_window_s: float) -> HeaderPlan:
        """How to pace by these fields; windows longer than ``long_window_s`` are quotas.

        - A *short* window (``w <= long_window_s``) paces at ``q / w``: the sustained
          rate it allows. Its ``r`` only says where a burst stands, not the rate.
        - A *long* window (a daily quota, say) is a budget, not a rate: pacing it at
          ``q / w`` would slow the endpoint to ``5000 / 86400`` per second however much
          is left. It limits the pace to ``r / t`` (what is left over the time left)
          when that is slower than the short windows, so the budget lasts to its reset
          instead of running dry hours early; when demand was low the budget left grows
          per second and so does the pace. A long window without a ``RateLimit`` item
          limits nothing: what is left of it is unknown until a 429 or ``r=0`` says so.
        - Any window with ``r=0`` pauses until its ``t`` (the longest such ``t``: all
          exhausted windows must have reset before a request can pass).
        - Items without a windowed policy pace at ``r / t`` when nothing else does
          (servers that send only ``RateLimit``).
        """
        windows = {p.name: p.window_s for p in self.policies}
        rates = [
            p.quota / p.window_s
            for p in self.policies
            if p.window_s and p.window_s <= long_window_s
        ]
        fallback: list[float] = []
        pause: ServiceLimit | None = None
        for limit in self.limits:
            window_s = windows.get(limit.name)
            if limit.remaining == 0 and limit.reset_s:
                if pause is None or limit.reset_s > (pause.reset_s or 0.0):
                    pause = limit
            elif not limit.reset_s:
                continue
            elif window_s is not None and window_s > long_window_s:
                rates.append(limit.remaining / limit.reset_s)
            elif window_s is None:
                fallback.append(limit.remaining / limit.reset_s)
        rate = min(rates or fallback) if (rates or fallback) else None
        if pause is None:
            return HeaderPlan(rate)
        return HeaderPlan(rate, pause.reset_s, pause.name, windows.get(pause.name))


@dataclass(frozen=True)
class HeaderPlan:
    """What the RateLimit fields of one response ask of a client (see ``plan``)."""

    rate_per_s: float | None
    pause_s: float | None = None  # an exhausted window resets in this long
    quota: str | None = None  # the name of the exhausted window ("" when unnamed)
    window_s: float | None = None  # its length, when its policy was advertised


_Param = str | int | float | bool | bytes
# One bare item of RFC 9651: string, byte sequence, boolean, integer/decimal, or token.
_BARE = re.compile(
    r'"(?:[^"\\]|\\.)*"|:[A-Za-z0-9+/=]*:|\?[01]|-?\d{1,15}(?:\.\d{1,3})?|[A-Za-z*][\w:/.*!#$%&\'+^`|~-]*'
)
_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")


def _split(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside double quotes."""
    parts: list[str] = []
    buf: list[str] = []
    quoted = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    parts.append("".join(buf))
    return parts


def _bare(token: str) -> _Param | None:
    token = token.strip()
    if not _BARE.fullmatch(token):
        return None
    if token.startswith('"'):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    if token.startswith(":"):
        return token[1:-1].encode()
    if token.startswith("?"):
        return token == "?1"
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if re.fullmatch(r"-?\d+\.\d+", token):
        return float(token)
    return token


def parse_sf_list(value: str) -> list[tuple[_Param, dict[str, _Param]]] | None:
    """A Structured-Field List of Items with parameters (RFC 9651), enough for RateLimit.

    Inner lists are not supported (RateLimit does not use them). ``None`` if malformed.
    """
    if not value.strip():
        return None
    items: list[tuple[_Param, dict[str, _Param]]] = []
    for member in _split(value, ","):
        head, *raw_params = _split(member, ";")
        item = _bare(head)
        if item is None:
            return None
        params: dict[str, _Param] = {}
        for raw in raw_params:
            key, eq, val = raw.strip().partition("=")
            if not _KEY.fullmatch(key):
                return None
            parsed = _bare(val) if eq else True
            if parsed is None:
                return None
            params[key] = parsed
        items.append((item, params))
    return items


def _nonneg_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _nonneg_s(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v) if v >= 0 else None


def _positive_s(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v) if v > 0 else None


def parse_ratelimit(headers: Mapping[str, str]) -> RateLimitInfo | None:
    """The RateLimit information of a response, or ``None`` if it carries none usable."""
    h = {k.lower(): v for k, v in headers.items()}
    policies: list[QuotaPolicy] = []
    limits: list[ServiceLimit] = []
    for value, params in parse_sf_list(h.get("ratelimit-policy", "")) or []:
        if isinstance(value, str):  # current form: "name";q=..;w=..
            quota, name = _nonneg_int(params.get("q")), value
        else:  # draft ≤ 06: 100;w=60
            quota, name = _nonneg_int(value), ""
        # A quota in bytes or concurrent requests says nothing about a request rate.
        if quota is not None and params.get("qu", "requests") in ("requests", "request"):
            policies.append(QuotaPolicy(name, quota, _positive_s(params.get("w"))))
    for value, params in parse_sf_list(h.get("ratelimit", "")) or []:
        remaining = _nonneg_int(params.get("r"))
        if isinstance(value, str) and remaining is not None:
            limits.append(ServiceLimit(value, remaining, _nonneg_s(params.get("t"))))
    if not limits and "ratelimit-remaining" in h:
        _legacy(h, policies, limits)
    if not policies and not limits:
        return None
    return RateLimitInfo(tuple(policies), tuple(limits))


def _legacy(h: dict[str, str], policies: list[QuotaPolicy], limits: list[ServiceLimit]) -> None:
    """``RateLimit-Limit: 100`` (maybe ``100, 100;w=60``), ``-Remaining: 42``, ``-Reset: 1``."""
    remaining = _first_int(h.get("ratelimit-remaining"))
    if remaining is None:
        return
    reset = _first_int(h.get("ratelimit-reset"))
    limits.append(ServiceLimit("", remaining, _nonneg_s(reset)))
    if policies:
        return
    parsed = parse_sf_list(h.get("ratelimit-limit", "")) or []
    windows = [_positive_s(p.get("w")) for _, p in parsed if _positive_s(p.get("w"))]
    quota = _nonneg_int(parsed[0][0]) if parsed else None
    if quota is not None:
        # Without a w parameter the window is unknown; the reset time bounds it from below
        # only, so no sustained rate is claimed.
        policies.append(QuotaPolicy("", quota, windows[0] if windows else None))


def _first_int(value: str | None) -> int | None:
    parsed = parse_sf_list(value or "")
    return _nonneg_int(parsed[0][0]) if parsed else None

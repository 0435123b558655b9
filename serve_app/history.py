"""The last minutes of the status, for the live page's charts.

The admin samples its status document every couple of seconds, whether or not anyone
watches, so a page opened now already shows the last ten minutes. Each point is small
(a few numbers per stage and per endpoint) and the ring is bounded by age and count.
Rates — decisions/s per stage, answers/s and 429s/s per endpoint — are the difference of
the orchestrator's and governor's counters between two status documents; a counter that
went down (a restarted actor starts from zero) counts from zero, never as a negative rate.
"""

from __future__ import annotations

from collections import deque
from typing import Any

DEFAULT_WINDOW_S = 600.0
SAMPLE_EVERY_S = 2.0
#: Bound on points whatever the timing: ten minutes at one a second, and some.
MAX_POINTS = 720


def _raw(doc: dict[str, Any]) -> dict[str, Any]:
    """The counters of one status document that rates are taken from."""
    by_stage = ((doc.get("counters") or {}).get("verdicts_by_stage")) or {}
    endpoints = doc.get("governor") or {}
    return {
        "decided": {s: sum(v.values()) for s, v in by_stage.items()},
        "answers": {
            k: (g.get("ok") or 0) + (g.get("429s") or 0) + (g.get("503s") or 0)
            for k, g in endpoints.items()
        },
        "429s": {k: g.get("429s") or 0 for k, g in endpoints.items()},
    }


def _rate(now: float, before: float, dt_s: float) -> float:
    grown = now - before if now >= before else now  # restarted from zero
    return round(grown / dt_s, 3)


class StatusHistory:
    """Points derived from successive status documents, oldest first."""

    def __init__(self, *, window_s: float = DEFAULT_WINDOW_S, max_points: int = MAX_POINTS):
        if window_s <= 0 or max_points <= 0:
            raise ValueError("window_s and max_points must be > 0")
        self.window_s = window_s
        self.points: deque[dict[str, Any]] = deque(maxlen=max_points)
        self._last_at: float | None = None
        self._last_raw: dict[str, Any] | None = None

    def add(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        """Add the point of ``doc``; None when it is the one already added (a cached
        document) or older."""
        at = doc.get("at")
        if not isinstance(at, int | float) or (self._last_at is not None and at <= self._last_at):
            return None
        raw = _raw(doc)
        prev, prev_at = self._last_raw, self._last_at
        self._last_raw, self._last_at = raw, at
        if prev is None or prev_at is None:  # the first point has no rates yet
            prev, dt_s = raw, 1.0
        else:
            dt_s = at - prev_at
        backlog = doc.get("backlog") or {}
        pools = doc.get("pools") or {}
        point = {
            "t": at,
            "backlog": {s: [b.get("fresh", 0), b.get("stale", 0)] for s, b in backlog.items()},
            "workers": {s: p.get("workers") for s, p in pools.items()},
            "leased": doc.get("leased"),
            "decisions_per_s": {
                s: _rate(n, prev["decided"].get(s, 0), dt_s) for s, n in raw["decided"].items()
            },
            "endpoints": {
                k: {
                    "rate": g.get("rate"),
                    "limit": g.get("limit_estimate"),
                    "answers_per_s": _rate(raw["answers"][k], prev["answers"].get(k, 0), dt_s),
                    "r429_per_s": _rate(raw["429s"][k], prev["429s"].get(k, 0), dt_s),
                    "paused": bool(g.get("paused_for_s")),
                }
                for k, g in (doc.get("governor") or {}).items()
            },
        }
        self.points.append(point)
        while self.points and self.points[0]["t"] < at - self.window_s:
            self.points.popleft()
        return point

    def since(self, t: float) -> list[dict[str, Any]]:
        """Points newer than ``t`` (epoch seconds), oldest first."""
        return [p for p in self.points if p["t"] > t]

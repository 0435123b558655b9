"""How the peers scenario scores a run: pure functions, unit-tested without Ray.

- :func:`run_error`: whether one run of a peer reached the truth. A run that crashed,
  timed out, gave drivers up, or left any driver away from its true final state is an
  error — its figures are kept for the record but never scored.
- :func:`pick_best`: a peer is the best of its small grid of settings: the fastest
  (shortest active wall) run that reached the truth. No such run → the peer is an error.
- :func:`peer_targets`: the targets a peer is compared on, only when it has a best run;
  an errored peer gets none (it is listed under the scenario's ``errors`` instead), so a
  crash can never be scored at a bound or counted as a met target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobs.bench.common import ratio, target

#: Counters in a run's detail that mean some driver was not followed to its end.
FAILURE_COUNTS = ("abandoned", "crashed", "gave_up", "unfinished")


def run_error(detail: Mapping[str, Any], converged: int, drivers: int) -> str | None:
    """Why this run does not count (one line), or None when it reached the truth."""
    if "failed" in detail:
        return f"crashed: {detail['failed']}"
    bad = {k: int(detail[k]) for k in FAILURE_COUNTS if detail.get(k)}
    if bad:
        what = ", ".join(f"{n} {k}" for k, n in bad.items())
        return f"did not reach the truth: {what}; {converged}/{drivers} drivers final"
    if converged != drivers:
        return f"missed the truth: {converged}/{drivers} drivers in their true final state"
    return None


def pick_best(points: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The grid point with the shortest ``active_s`` among those without an ``error``."""
    good = [p for p in points if not p.get("error") and p.get("active_s") is not None]
    return min(good, key=lambda p: p["active_s"], default=None)


def peer_error(name: str, points: Sequence[Mapping[str, Any]]) -> str:
    """The one line an errored peer is reported with: every grid point's reason."""
    reasons = "; ".join(f"{p.get('setting')}: {p.get('error') or 'no active wall'}" for p in points)
    return f"peer {name} reached the truth at no grid point ({reasons})"[:500]


def peer_targets(
    name: str, best: Mapping[str, Any], reference: Mapping[str, Any]
) -> dict[str, Any]:
    """Targets of a peer that has a best run, as ratios to driver-review's sweep."""
    wall = ratio(best["active_s"], reference["active_s"])
    share = (
        None
        if best.get("rate_limited_share") is None or reference.get("rate_limited_share") is None
        else best["rate_limited_share"] - reference["rate_limited_share"]
    )
    return {
        f"{name}.wall_to_driver_review_ratio": target(
            wall, ">=", 1.0, "driver-review at least as fast as the peer's best setting"
        ),
        f"{name}.rate_limited_share_minus_driver_review": target(
            share, ">=", 0.0, "driver-review draws no more 429s"
        ),
    }

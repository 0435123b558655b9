"""The simulator's bad-row switch (``--bad-rows F``): a share F of listing and changes
rows is rendered bad, in every way a vendor's feed goes wrong, while the catalog's truth
is unchanged. A bad row is a rendering of a good driver: ``GET /v1/drivers/{id}`` still
answers the good record, so a client resolves every bad row whose id is intact; only
``dot_id`` rows (the id itself is ``..``) cannot be resolved.

Which rows and how is a pure function of the seed and the row's content apart from its
time (id, version, stage, status): the same unchanged row is rendered the same way on every
read, a changed row is drawn again, and a run is the same whenever it starts.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from typing import Any

from driver_review.catalog.models import DriverSummary, Page

#: How a row is spoiled, one kind drawn per bad row.
KINDS = (
    "unknown_stage",
    "long_version",
    "malformed_version",
    "dot_id",
    "dot_version",
    "future_time",
    "pre_1970",
    "wrong_type",
    "missing_field",
)
#: Kinds whose row cannot be resolved by id (the id itself is what is wrong).
UNRESOLVABLE = frozenset({"dot_id"})
_SCALE = 1_000_000


def _spoil(row: dict[str, Any], kind: str) -> dict[str, Any]:
    row = dict(row)
    if kind == "unknown_stage":
        row["stage"] = "legal_review"  # a stage the vendor added, unknown to the pipeline
    elif kind == "long_version":
        row["version"] = f"{row['version']}-build.{'7' * 40}"
    elif kind == "malformed_version":
        row["version"] = f"{row['version']}\n\x1b[2J"
    elif kind == "dot_id":
        row["id"] = ".."
    elif kind == "dot_version":
        row["version"] = ".."
    elif kind == "future_time":
        row["updated_at"] = "2999-01-01T00:00:00Z"
    elif kind == "pre_1970":
        row["updated_at"] = "1969-07-20T20:17:40Z"
    elif kind == "wrong_type":
        row["version"] = 12345
    elif kind == "missing_field":
        del row["status"]
    return row


class BadRows:
    """Renders pages with a share of bad rows and counts what it rendered."""

    def __init__(self, share: float, seed: int) -> None:
        self.share = share
        self.seed = seed
        self._lock = threading.Lock()
        self.rendered: Counter[str] = Counter()
        self.unresolvable: set[str] = set()  # real ids of drivers shown only as dot_id rows

    def kind_of(self, summary: DriverSummary) -> str | None:
        if self.share <= 0:
            return None
        key = "/".join(
            map(str, (self.seed, summary.id, summary.version, summary.stage, summary.status))
        ).encode()
        h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
        if (h % _SCALE) / _SCALE >= self.share:
            return None
        return KINDS[(h // _SCALE) % len(KINDS)]

    def render(self, page: Page) -> dict[str, Any]:
        """The page as JSON, a share of its rows spoiled."""
        items = []
        for summary in page.items:
            row = summary.model_dump(mode="json")
            kind = self.kind_of(summary)
            if kind is not None:
                row = _spoil(row, kind)
                with self._lock:
                    self.rendered[kind] += 1
                    if kind in UNRESOLVABLE:
                        self.unresolvable.add(summary.id)
            items.append(row)
        return {"items": items, "next_cursor": page.next_cursor}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "share": self.share,
                "rendered": dict(self.rendered),
                "unresolvable": sorted(self.unresolvable),
            }

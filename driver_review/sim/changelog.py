"""The change log behind ``GET /v1/drivers/changes``: every change as ``(updated_at, id)``,
appended in time order, so "changed after T" is a binary search and a scan.

A driver that changes again leaves its older entry behind; readers skip entries that are
no longer the driver's latest (``is_live``), and the log is compacted once stale entries
outnumber live ones. Entries are never reordered, so a cursor holding the
``(updated_at, id)`` of the last row returned stays valid across compaction.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable

#: Compaction runs when the log is longer than twice the live entries plus this slack.
COMPACT_SLACK = 1024


class ChangeLog:
    def __init__(self) -> None:
        self._ts: list[int] = []
        self._ids: list[str] = []

    def __len__(self) -> int:
        return len(self._ts)

    def append(self, ts: int, driver_id: str) -> None:
        if self._ts and ts <= self._ts[-1]:
            raise ValueError("change times must be strictly increasing")
        self._ts.append(ts)
        self._ids.append(driver_id)

    def maybe_compact(self, live: Callable[[], Iterable[tuple[int, str]]], count: int) -> bool:
        """Rebuild from ``live()`` (the latest entry of every driver) when mostly stale."""
        if len(self._ts) <= 2 * count + COMPACT_SLACK:
            return False
        entries = sorted(live())
        self._ts = [ts for ts, _ in entries]
        self._ids = [driver_id for _, driver_id in entries]
        return True

    def scan(
        self,
        after_ts: int,
        after_id: str | None,
        is_live: Callable[[int, str], bool],
        limit: int,
    ) -> tuple[list[str], bool]:
        """Up to ``limit`` live driver ids after ``(after_ts, after_id)`` in log order, and
        whether more follow. ``after_id=None`` skips every entry at ``after_ts``."""
        found: list[str] = []
        i = bisect_left(self._ts, after_ts)
        while i < len(self._ts):
            ts, driver_id = self._ts[i], self._ids[i]
            i += 1
            if ts == after_ts and (after_id is None or driver_id <= after_id):
                continue
            if not is_live(ts, driver_id):
                continue
            if len(found) == limit:
                return found, True
            found.append(driver_id)
        return found, False

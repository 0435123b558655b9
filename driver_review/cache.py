"""Driver cache policy: versioned entries, LRU bounded by entries and bytes.

Pure logic; the Ray actor (:mod:`driver_review.runtime.cache_actor`) stores ObjectRefs as
the values and adds single-flight fetching. A driver's data for one version never changes
except for its stage/status, which callers take from the work item, not from the cache:
so an entry of the right version is a hit without asking the catalog again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Entry:
    version: str
    etag: str | None
    value: Any
    size: int


class CacheCore:
    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.stale = 0
        self.evictions = 0
        self.fills = 0  # entries filled without a fetch (fat pings)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, driver_id: str, version: str | None) -> Entry | None:
        """The entry when it holds ``version`` (any version when None); counts the outcome."""
        entry = self._entries.get(driver_id)
        if entry is not None and (version is None or entry.version == version):
            self._entries.move_to_end(driver_id)
            self.hits += 1
            return entry
        if entry is None:
            self.misses += 1
        else:
            self.stale += 1
        return None

    def etag_of(self, driver_id: str) -> str | None:
        """The ETag of what we hold, for a conditional GET."""
        entry = self._entries.get(driver_id)
        return entry.etag if entry else None

    def peek(self, driver_id: str) -> Entry | None:
        return self._entries.get(driver_id)

    def store(self, driver_id: str, entry: Entry) -> None:
        old = self._entries.pop(driver_id, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[driver_id] = entry
        self.bytes += entry.size
        while self._entries and (
            len(self._entries) > self.max_entries or self.bytes > self.max_bytes
        ):
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.size
            self.evictions += 1

    def stats(self) -> dict[str, float]:
        lookups = self.hits + self.misses + self.stale
        return {
            "entries": len(self._entries),
            "bytes": self.bytes,
            "hits": self.hits,
            "misses": self.misses,
            "stale": self.stale,
            "evictions": self.evictions,
            "fills": self.fills,
            "hit_ratio": self.hits / lookups if lookups else 0.0,
        }

"""What the rate governor learnt of each endpoint, kept under the data dir for the next run.

Layout: ``<data-dir>/governor/endpoints.json``::

    {"version": 1, "endpoints": {"https://api.vendor.example:443":
        {"safe_rate": 58.2, "limit_estimate": 60.1, "header_rate": null,
         "window_s": null, "strict_spacing": true, "learnt_at": 1764550000.0}}}

Keys are governor keys (``scheme://host:port`` or a configured ``rate_key``): never a
credential. The file is small and written whole (temporary name and rename on a local
disk; a single PUT on object stores). Writers merge by key, newest ``learnt_at`` winning,
so two instances sharing a data dir keep each other's endpoints. A file that cannot be read
or parsed is a warning and a cold start, never a failure: it is only a head start.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from driver_review.results import resolve

log = logging.getLogger(__name__)

DIR = "governor"
FILE = "endpoints.json"
VERSION = 1
#: ``window_s``: a long window the endpoint showed (a quota per minute; absent: none).
RATES = ("safe_rate", "limit_estimate", "header_rate", "window_s", "learnt_at")
#: Whether the endpoint's 429s came without Retry-After (absent in older files: false).
FLAGS = ("strict_spacing",)
FIELDS = RATES + FLAGS


class LearntStore:
    def __init__(self, data_dir: str) -> None:
        self.fs, root = resolve(data_dir)
        self.dir = f"{root.rstrip('/')}/{DIR}"
        self.path = f"{self.dir}/{FILE}"
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    def load(self) -> dict[str, dict[str, Any]]:
        """Every endpoint's learnt state; empty when there is none or it is unreadable."""
        try:
            with self.fs.open_input_stream(self.path) as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("learnt limits at %s unreadable, starting cold: %s", self.path, exc)
            return {}
        return parse(doc, where=self.path)

    def save(self, learnt: Mapping[str, Mapping[str, Any]]) -> None:
        """Merge ``learnt`` into the file (newest per key wins) and write it whole."""
        merged = self.load()
        for key, entry in learnt.items():
            old = merged.get(key)
            if old is None or float(entry["learnt_at"]) >= float(old["learnt_at"]):
                merged[key] = {f: entry.get(f) for f in FIELDS}
        data = json.dumps({"version": VERSION, "endpoints": merged}, indent=1).encode()
        self.fs.create_dir(self.dir, recursive=True)
        target = f"{self.path}.{uuid.uuid4().hex}.tmp" if self._local else self.path
        with self.fs.open_output_stream(target) as out:
            out.write(data)
        if target != self.path:
            self.fs.move(target, self.path)


def parse(doc: Any, *, where: str) -> dict[str, dict[str, Any]]:
    """The entries of a document that are well formed; the others are dropped with a
    warning naming them (a hand-edited file must not stop a run)."""
    endpoints = doc.get("endpoints") if isinstance(doc, dict) else None
    if not isinstance(endpoints, dict) or doc.get("version") != VERSION:
        log.warning("learnt limits at %s: not a version-%d document, ignored", where, VERSION)
        return {}
    good: dict[str, dict[str, Any]] = {}
    for key, entry in endpoints.items():
        if _well_formed(entry):
            good[str(key)] = {f: entry.get(f) for f in FIELDS}
        else:
            log.warning("learnt limits at %s: entry %.80r malformed, ignored", where, key)
    return good


def _well_formed(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    if any(not isinstance(entry.get(f), bool | None) for f in FLAGS):
        return False
    for field in RATES:
        value = entry.get(field)
        if value is None and field != "learnt_at":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value) or value < 0:
            return False
    return True

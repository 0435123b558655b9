"""Stages by name across pipeline changes: what a snapshot's stages mean in the pipeline
that loads it.

The ledger keeps a driver's stage as a small integer, its position in the pipeline's stage
list: cheap in memory, but only meaningful with that list. A snapshot therefore stores the
stage columns as dictionary-encoded strings (the positions plus the list of names), and a
load maps each name onto the *current* pipeline's position:

- a stage that moved in the list stays the same stage (a driver at ``security`` is still
  at ``security``); a stage added to the list simply has nobody there yet;
- a stage that left the list is refused, with one line naming it and how many drivers sit
  there, unless a migration (``window.migrate_stages`` / ``--migrate-stage OLD=NEW``) says
  which current stage takes them;
- a snapshot written before names were stored (integer columns) is read as positions in
  the current pipeline, as it always was; a position beyond the list is refused too.

Pure logic: no Ray, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from driver_review.errors import ConfigError

NO_STAGE = -1  # the ledger's "no stage" (a published driver); a null in the snapshot
UNKNOWN = -2  # a stage the current pipeline does not have (not a value the ledger keeps)
MIGRATE_FLAG = "--migrate-stage"
MIGRATE_FIELD = "window.migrate_stages"


class StagesRemoved(ConfigError):
    """A snapshot has drivers at stages the pipeline no longer has, and no migration for
    them. ``removed`` counts the drivers per removed stage."""

    def __init__(self, removed: Mapping[str, int], *, where: str, stages: Sequence[str]):
        self.removed = dict(removed)
        super().__init__(refusal(self.removed, where=where, stages=stages))

    def __reduce__(self):  # keep the counts when the error crosses a process boundary
        return (_rebuild, (str(self), self.removed))


def _rebuild(message: str, removed: dict[str, int]) -> StagesRemoved:
    exc = StagesRemoved.__new__(StagesRemoved)
    ConfigError.__init__(exc, message)
    exc.removed = removed
    return exc


def refusal(removed: Mapping[str, int], *, where: str, stages: Sequence[str]) -> str:
    """The one line that refuses a start: what is gone, how many drivers sit there, and
    both ways out."""
    gone = sorted(removed)
    if len(gone) == 1:
        what = f"stage {_show(gone[0])} but {where} has {_drivers(removed[gone[0]])} there"
    else:
        counts = ", ".join(f"{_show(name)} ({_drivers(removed[name])})" for name in gone)
        what = f"stages {counts} but {where} has drivers there"
    example = gone[0] if not gone[0].startswith("#") else "OLD"
    return (
        f"pipeline no longer has {what}; add it back, or migrate them with "
        f"{MIGRATE_FLAG} {example}=STAGE (or {MIGRATE_FIELD} in the pipeline file), "
        f"STAGE one of {', '.join(stages)}"
    )


def _show(name: str) -> str:
    if name.startswith("#"):  # a position from a snapshot that predates stage names
        return f"at position {name[1:]} (a snapshot without stage names)"
    return repr(name)


def _drivers(n: int) -> str:
    return f"{n} driver{'' if n == 1 else 's'}"


def migration_problem(migrate: Mapping[str, str], stages: Sequence[str]) -> str | None:
    """Why a migration cannot apply to a pipeline with ``stages``, or None."""
    for old, new in migrate.items():
        if old in stages:
            return (
                f"{MIGRATE_FIELD}: stage {old!r} is still in the pipeline; only a "
                "removed stage can be migrated"
            )
        if new not in stages:
            return (
                f"{MIGRATE_FIELD}: {old}={new}: {new!r} is not a stage of the pipeline "
                f"({', '.join(stages)})"
            )
    return None


def parse_migration(text: str) -> tuple[str, str]:
    """``OLD=NEW`` from the command line."""
    old, sep, new = text.partition("=")
    old, new = old.strip(), new.strip()
    if not sep or not old or not new:
        raise ConfigError(f"{MIGRATE_FLAG} {text!r}: expected OLD=NEW (two stage names)")
    return old, new


def encode(positions: np.ndarray, stages: Sequence[str]) -> pa.DictionaryArray:
    """Ledger positions as names: ``stages`` is the dictionary, ``NO_STAGE`` a null."""
    indices = np.asarray(positions, dtype=np.int16)
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, mask=indices < 0), pa.array(list(stages), pa.string())
    )


def is_named(column: pa.ChunkedArray | pa.Array) -> bool:
    return not pa.types.is_integer(column.type)


def decode(
    column: pa.ChunkedArray | pa.Array,
    stages: Sequence[str],
    migrate: Mapping[str, str] | None = None,
) -> tuple[np.ndarray, Counter[str]]:
    """Positions in ``stages`` for a snapshot's stage column, and the drivers per stage
    name the pipeline lacks (those rows hold ``UNKNOWN``). ``migrate`` maps removed names
    onto current ones. An integer column (an older snapshot) is positions already; one
    beyond the list is counted as ``#<position>``."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not is_named(column):
        values = (
            np.concatenate([c.to_numpy(zero_copy_only=False) for c in chunks])
            if chunks
            else np.zeros(0, np.int64)
        )
        out = values.astype(np.int16)
        beyond = out >= len(stages)
        beyond_list: Counter[str] = Counter(f"#{int(p)}" for p in out[beyond])
        out[beyond] = UNKNOWN
        out[out < NO_STAGE] = UNKNOWN
        return out, beyond_list
    position = {name: i for i, name in enumerate(stages)}
    for old, new in (migrate or {}).items():
        if new in position:  # the config refuses any other migration before this runs
            position.setdefault(old, position[new])
    parts: list[np.ndarray] = []
    missing: Counter[str] = Counter()
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):  # plain strings: encode them here
            chunk = chunk.dictionary_encode()
        names = chunk.dictionary.to_pylist()
        # Per name in the chunk's dictionary, its current position; one more slot for null.
        lookup = np.array([position.get(n, UNKNOWN) for n in names] + [NO_STAGE], np.int16)
        idx = chunk.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)
        mapped = lookup[idx]
        parts.append(mapped)
        for k in np.unique(idx[mapped == UNKNOWN]):
            missing[names[int(k)]] += int(np.count_nonzero(idx == k))
    out = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    return out, missing


def check(
    column: pa.ChunkedArray | pa.Array,
    stages: Sequence[str],
    migrate: Mapping[str, str] | None = None,
    *,
    where: str = "the snapshot",
) -> None:
    """Raise :class:`StagesRemoved` when drivers sit at a stage the pipeline lacks."""
    _, missing = decode(column, stages, migrate)
    if missing:
        raise StagesRemoved(missing, where=where, stages=stages)

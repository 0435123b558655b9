"""Wire values <-> domain values: the one place they are converted.

The catalog, the webhooks, the results and the status pages speak strings: a stage name
(``"security"``, or none for a published driver), a status (``"in_review"``), a verdict
(``"approved"``), a lane (``"fresh"``). The ledger and the orchestrator keep small
integers: a stage's position in the pipeline's stage list (``NO_STAGE`` for none) and the
``Status`` / ``Verdict`` / ``Lane`` enums. Every crossing goes through here, so an unknown
value is refused the same way (``ValueError``, one line naming it) wherever it comes from.

The wire form of an enum is its member name in lower case; the ledger's ``entry()``
renders it that way itself (this module builds on the ledger, not the other way round).

Pure logic: no Ray, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from driver_review.backlog import Lane
from driver_review.identifiers import shown
from driver_review.ledger import NO_STAGE, Change, Status, Verdict

_E = TypeVar("_E", Status, Verdict, Lane)


def stage_index(stages: Sequence[str], name: str | None) -> int:
    """The position of stage ``name`` in the pipeline's ``stages``; ``NO_STAGE`` for none."""
    if name is None:
        return NO_STAGE
    try:
        return list(stages).index(name)
    except ValueError:
        raise ValueError(
            f"unknown stage {shown(name)} (the pipeline has {', '.join(stages)})"
        ) from None


def stage_name(stages: Sequence[str], index: int) -> str | None:
    """The name of the stage at ``index``; ``None`` for ``NO_STAGE``."""
    if index == NO_STAGE:
        return None
    if not 0 <= index < len(stages):
        raise ValueError(f"stage index {index} out of range (the pipeline has {len(stages)})")
    return stages[index]


def status_of(text: str) -> Status:
    """``"in_review"`` -> ``Status.IN_REVIEW``."""
    return _member(Status, text, "status")


def verdict_of(text: str) -> Verdict:
    """``"approved"`` -> ``Verdict.APPROVED``."""
    return _member(Verdict, text, "verdict")


def lane_of(text: str) -> Lane:
    """``"fresh"`` -> ``Lane.FRESH``."""
    return _member(Lane, text, "lane")


def text_of(value: Status | Verdict | Lane | int, kind: type[Status | Verdict | Lane]) -> str:
    """The wire form of an enum value (or of the integer a column holds): ``"in_review"``."""
    try:
        return kind(int(value)).name.lower()
    except ValueError:
        raise ValueError(f"{value!r} is not a {kind.__name__.lower()}") from None


def change_of(stages: Sequence[str], summary: Any) -> Change:
    """A :class:`Change` from anything shaped like a catalog summary: a ``DriverSummary``
    (listing, changes), a ping's data, a ``DriverRecord``, a decision's answer (``id`` or
    ``driver_id``). Judging it (id, version, time) is the caller's: see
    :func:`driver_review.quarantine.to_change`."""
    driver_id = getattr(summary, "id", None) or summary.driver_id
    return Change(
        driver_id,
        summary.version,
        stage_index(stages, summary.stage),
        status_of(summary.status),
        summary.updated_at.timestamp(),
    )


def _member(kind: type[_E], text: str, what: str) -> _E:
    member = kind.__members__.get(text.upper()) if isinstance(text, str) else None
    if member is None or member.name.lower() != text:
        known = ", ".join(m.name.lower() for m in kind)
        raise ValueError(f"unknown {what} {shown(text)} (known: {known})")
    return member

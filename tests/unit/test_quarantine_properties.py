"""Property-based: generated malformed pages thrown at the catalog client, generated bad
changes thrown at intake. Never an exception escapes; every good row is taken exactly
(nothing truncated); every bad row is quarantined. Bounded in examples and time; each
test prints how many inputs it tried (``pytest -s``)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver_review.catalog.http import HttpCatalog
from driver_review.catalog.models import DriverSummary
from driver_review.config import CatalogConfig, load_config
from driver_review.ledger import Change, Status
from driver_review.orchestrator import OrchestratorCore
from driver_review.quarantine import BadRow, fingerprint

NOW = 1_750_000_000.0
STAGES = ["intake", "security", "compatibility"]
# No per-example deadline: a loaded CI machine is slow, not wrong; the count bounds it.
BOUNDED = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
tried: dict[str, int] = {"client_pages": 0, "client_rows": 0, "intake_changes": 0}

# --- rows: good ones, and ones spoiled in exactly one guaranteed-bad way -----------------

versions = st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,4}){0,3}(-[a-z0-9]{1,6})?", fullmatch=True)
times = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2025, 6, 1), timezones=st.just(UTC)
)
control = st.sampled_from(["\n", "\x00", "\x1b[2J", "\r", "\u2028"])
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
not_str = json_scalars.filter(lambda v: not isinstance(v, str))
bad_ids = st.one_of(
    not_str,
    st.sampled_from(["", ".", "..", "a/b", "a\\b", " x", "x "]),
    st.builds(lambda a, c: f"drv{c}{a}", st.text(max_size=5), control),
    st.text(min_size=129, max_size=300, alphabet="xyz"),
)
bad_versions = st.one_of(
    not_str,
    st.sampled_from(["", ".", "..", "1/2", " 1"]),
    st.builds(lambda a, c: f"{a}{c}", versions, control),
    st.text(min_size=33, max_size=200, alphabet="0123456789."),
    st.just("é" * 17),
)
bad_stages = st.one_of(
    not_str.filter(lambda v: v is not None),
    st.text(min_size=1, max_size=20).filter(lambda s: s not in STAGES),
)
bad_statuses = st.one_of(
    not_str, st.text(max_size=12).filter(lambda s: s not in ("in_review", "published", "rejected"))
)
bad_times = st.one_of(
    st.sampled_from(
        [
            "2999-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "1900-01-01T00:00:00Z",
            "2025-01-01T00:00:00",
            "9999-12-31T23:59:59+00:00",
        ]
    ),
    st.text(max_size=20).map(lambda t: "x" + t),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
SPOILERS = {
    "id": bad_ids,
    "version": bad_versions,
    "stage": bad_stages,
    "status": bad_statuses,
    "updated_at": bad_times,
}


@st.composite
def good_row(draw: st.DrawFn, i: int) -> dict[str, Any]:
    status = draw(st.sampled_from(["in_review", "published", "rejected"]))
    return {
        "id": f"drv-{i}",
        "version": draw(versions),
        # A driver in review is at a stage; a decided one may name none.
        "stage": draw(st.sampled_from(STAGES if status == "in_review" else [*STAGES, None])),
        "status": status,
        "updated_at": draw(times).isoformat().replace("+00:00", "Z"),
        # extra fields from a newer catalog are ignored, not a reason to refuse
        **draw(
            st.dictionaries(st.sampled_from(["vendor", "note"]), st.text(max_size=5), max_size=1)
        ),
    }


@st.composite
def bad_row_of(draw: st.DrawFn, i: int) -> Any:
    how = draw(st.sampled_from([*SPOILERS, "missing", "not_object", "in_review_nowhere"]))
    if how == "not_object":
        return draw(st.one_of(json_scalars, st.text(max_size=10)))
    row = draw(good_row(i))
    if how == "in_review_nowhere":
        row.update(status="in_review", stage=None)
    elif how == "missing":
        del row[draw(st.sampled_from(list(SPOILERS)))]
    else:
        row[how] = draw(SPOILERS[how])
    return row


@st.composite
def pages(draw: st.DrawFn) -> list[list[tuple[bool, Any]]]:
    out, i = [], 0
    for _ in range(draw(st.integers(1, 3))):
        page = []
        for good in draw(st.lists(st.booleans(), max_size=12)):
            page.append((good, draw(good_row(i) if good else bad_row_of(i))))
            i += 1
        out.append(page)
    return out


def _serve(pages_: list[list[tuple[bool, Any]]]):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/drivers":
            return httpx.Response(404, json={"detail": "no such driver"})
        k = int(request.url.params.get("cursor", "0"))
        nxt = str(k + 1) if k + 1 < len(pages_) else None
        return httpx.Response(200, json={"items": [r for _, r in pages_[k]], "next_cursor": nxt})

    return handler


@BOUNDED
@given(pages())
def test_the_client_takes_every_good_row_and_sets_aside_every_bad_one(pages_) -> None:
    async def main() -> list[DriverSummary | BadRow]:
        catalog = HttpCatalog(
            CatalogConfig(url="http://catalog.test", max_attempts=1),
            transport=httpx.MockTransport(_serve(pages_)),
            wall_clock=lambda: NOW,
            stages=STAGES,
        )
        try:
            return [item async for item in catalog.iter_drivers()]
        finally:
            await catalog.aclose()

    got = asyncio.run(main())  # never raises
    rows = [pair for page in pages_ for pair in page]
    tried["client_pages"] += 1
    tried["client_rows"] += len(rows)
    assert len(got) == len(rows)
    for (good, raw), item in zip(rows, got, strict=True):
        if good:
            assert isinstance(item, DriverSummary)
            assert (item.id, item.version, item.stage) == (
                raw["id"],
                raw["version"],
                raw["stage"],
            )  # nothing cut
        else:
            assert isinstance(item, BadRow), raw
            assert item.kind and "\n" not in item.reason and "\n" not in item.shown_id


# --- intake --------------------------------------------------------------------------


@st.composite
def good_change(draw: st.DrawFn, i: int) -> Change:
    status = draw(st.sampled_from(list(Status)))
    lowest = 0 if status == Status.IN_REVIEW else -1  # in review at a stage; decided: any
    return Change(
        f"drv-{i}",
        draw(versions),
        draw(st.integers(lowest, len(STAGES) - 1)),
        status,
        draw(st.floats(min_value=0, max_value=NOW)),
    )


@st.composite
def bad_change(draw: st.DrawFn, i: int) -> Change:
    c = draw(good_change(i))
    field = draw(
        st.sampled_from(["driver_id", "version", "stage", "status", "changed_at", "nowhere"])
    )
    if field == "nowhere":  # in review at no stage
        return dataclasses.replace(c, driver_id=f"bad-{i}", stage=-1, status=Status.IN_REVIEW)
    value = draw(
        {
            "driver_id": bad_ids,
            "version": bad_versions,
            "stage": st.one_of(
                st.integers(max_value=-2),
                st.integers(min_value=len(STAGES)),
                st.text(max_size=3),
                st.none(),
            ),
            "status": st.one_of(
                st.integers(min_value=3), st.integers(max_value=-1), st.text(max_size=3)
            ),
            "changed_at": st.one_of(
                st.floats(max_value=-1e-3),
                st.floats(min_value=NOW + 301),
                st.just(float("nan")),
                st.text(max_size=3),
            ),
        }[field]
    )
    values = {
        "driver_id": f"bad-{i}",
        "version": c.version,
        "stage": c.stage,
        "status": c.status,
        "changed_at": c.changed_at,
        field: value,
    }
    return Change(**values)


@st.composite
def change_batches(draw: st.DrawFn) -> list[tuple[bool, Change]]:
    flags = draw(st.lists(st.booleans(), max_size=40))
    return [(good, draw(good_change(i) if good else bad_change(i))) for i, good in enumerate(flags)]


@BOUNDED
@given(change_batches())
def test_intake_takes_every_good_change_and_quarantines_every_bad_one(batch) -> None:
    cfg = load_config().with_overrides(window={"high_water": 10_000})
    core = OrchestratorCore(cfg, clock=lambda: NOW)
    core.intake([c for _, c in batch])  # never raises
    core.intake([c for _, c in batch])  # re-read: nothing counted twice
    tried["intake_changes"] += len(batch)
    bad = [c for good, c in batch if not good]
    for good, c in batch:
        if good:
            row = core.ledger.row(c.driver_id)
            assert core.ledger.target(row) == (c.version, c.stage, c.status)
        else:
            assert not isinstance(c.driver_id, str) or c.driver_id not in core.ledger
    stats = core.stats()["quarantined"]
    # Each distinct bad change once, however often it is read.
    assert stats["total"] == len({fingerprint(dataclasses.asdict(c)) for c in bad})
    assert stats["held"] == stats["total"]


def test_zz_print_how_many_inputs_were_tried() -> None:
    print(f"\nhypothesis tried: {tried}")

"""The webhook edge's pure parts on hostile input: every malformed header or body is a
:class:`Refused` with a 4xx and one line naming the problem; dedupe follows the signed
timestamp; the status document is computed once per period, however large the ledger."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from driver_review.backlog import Lane
from driver_review.config import load_config
from driver_review.errors import SignatureError
from driver_review.ledger import Change, Status
from driver_review.orchestrator import OrchestratorCore
from driver_review.statcache import AsyncCachedValue, CachedValue
from driver_review.webhooks import Verifier, sign, signed_headers
from serve_app.admin import admin_token, bearer_ok, is_loopback
from serve_app.dedupe import SeenIds
from serve_app.webhook import Refused, parse_ping, read_body, verify

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 bytes
STAGES = ("intake", "security", "compatibility")
NOW = 1_800_000_000.0


def body(**data: Any) -> bytes:
    ping = {
        "type": "driver.updated",
        "timestamp": "2027-01-15T08:00:00Z",
        "data": {
            "id": "drv-1",
            "version": "1.2.3",
            "stage": "intake",
            "status": "in_review",
            "updated_at": "2027-01-15T08:00:00Z",
            **data,
        },
    }
    return json.dumps(ping).encode()


def headers(msg_id: str = "msg_1", raw: bytes = b"", ts: int = int(NOW)) -> dict[str, str]:
    return signed_headers(SECRET, msg_id, raw, timestamp=ts)


def refused(call: Any) -> Refused:
    with pytest.raises(Refused) as err:
        call()
    assert 400 <= err.value.status < 500 and "\n" not in err.value.detail
    return err.value


# -- headers -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("webhook-timestamp", "9" * 400, "digits, over"),
        ("webhook-timestamp", "-17", "ASCII digits"),
        ("webhook-timestamp", "1800000000.5", "ASCII digits"),
        ("webhook-timestamp", "soon", "ASCII digits"),
        ("webhook-timestamp", "\u0661\u0668" * 5, "ASCII digits"),  # Arabic-Indic digits
        ("webhook-timestamp", " 1800000000", "ASCII digits"),
        ("webhook-timestamp", "0", "outside the tolerance"),
        ("webhook-signature", "v1,\u00e9t\u00e9", "no 'v1,' entry"),
        ("webhook-signature", "v1,!!!not-base64!!!", "no 'v1,' entry"),
        ("webhook-signature", "v2," + "A" * 43 + "=", "no 'v1,' entry"),
        ("webhook-signature", "v1," + "A" * 43 + "=", "no valid v1 signature"),
        ("webhook-id", "m" * 10 * 1024, "over the 256 limit"),
        ("webhook-id", "msg\x00x", "printable ASCII"),
        ("webhook-id", "msg\u00e9", "printable ASCII"),
        ("webhook-id", "", "missing"),
        ("webhook-signature", "", "missing"),
    ],
)
def test_malformed_headers_get_401_naming_the_problem(name: str, value: str, says: str) -> None:
    verifier = Verifier([SECRET])
    raw = body()
    sent = {**headers(raw=raw), name: value}
    with pytest.raises(SignatureError, match=r"webhook|signature|missing") as direct:
        verifier.verify_message(sent, raw, now=NOW)
    assert says in str(direct.value)
    # What the ingress calls (with the real clock: the timestamp is re-signed for now).
    if name != "webhook-timestamp":
        sent = {**headers(raw=raw, ts=int(time.time())), name: value}
    got = refused(lambda: verify(verifier, sent, raw))
    assert got.status == 401 and got.kind is None


def test_a_good_signature_passes_with_its_timestamp_among_garbage_entries() -> None:
    verifier = Verifier([SECRET])
    raw = body()
    good = sign(SECRET, "msg_1", int(NOW), raw)
    sent = {**headers(raw=raw), "webhook-signature": f"v1,\u00e9 junk v1,!! {good}"}
    got = verifier.verify_message(sent, raw, now=NOW)
    assert (got.msg_id, got.timestamp) == ("msg_1", int(NOW))


# -- bodies --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "status", "kind", "starts"),
    [
        (b"{not json", 400, "not_json", "body is not valid JSON"),
        (b"[]", 422, "shape", "(top level)"),
        (body(id=".."), 422, "id", "data.id: id '..' is a path segment"),
        (body(id="a/b"), 422, "id", "data.id"),
        (body(id="x" * 200), 422, "id", "data.id"),
        (body(id="bad\x07id"), 422, "id", "data.id"),
        (body(version=".."), 422, "version", "data.version"),
        (body(version="9" * 40), 422, "version", "data.version"),
        (body(stage="legal_review"), 422, "stage", "data.stage: unknown stage 'legal_review'"),
        (body(stage="\x1b[31mred"), 422, "stage", "data.stage: unknown stage '\\x1b[31mred'"),
        (body(status="lost"), 422, "shape", "data.status"),
        (body(updated_at="2999-01-01T00:00:00Z"), 422, "time", "data.updated_at: time is"),
        (body(updated_at="1969-12-31T23:59:59Z"), 422, "time", "data.updated_at: time is before"),
        (body(updated_at="not a time"), 422, "time", "data.updated_at"),
        (body(record={"id": "other"}), 422, "record", "data.record"),
    ],
)
def test_bad_bodies_are_refused_with_their_kind(
    raw: bytes, status: int, kind: str, starts: str
) -> None:
    got = refused(lambda: parse_ping("msg_1", raw, STAGES, now=NOW))
    assert (got.status, got.kind) == (status, kind)
    assert got.detail.startswith(starts), got.detail
    assert got.detail.isprintable()


def test_a_good_ping_becomes_a_change() -> None:
    ping = parse_ping("msg_1", body(stage="security"), STAGES, now=NOW)
    assert ping.change == Change("drv-1", "1.2.3", 1, Status.IN_REVIEW, ping.change.changed_at)
    assert parse_ping("msg_2", body(stage=None, status="published"), STAGES, now=NOW).record is None


def test_a_thin_ping_names_only_its_driver_and_is_looked_up() -> None:
    thin = json.dumps(
        {"type": "driver.updated", "timestamp": "2027-01-15T08:00:00Z", "data": {"id": "drv-7"}}
    ).encode()
    ping = parse_ping("msg_1", thin, STAGES, now=NOW)
    assert ping.change is None and ping.driver_id == "drv-7" and ping.record is None
    # Part of a summary is still thin (what changed is not all there); its id is checked.
    partial = json.dumps(
        {
            "type": "driver.updated",
            "timestamp": "2027-01-15T08:00:00Z",
            "data": {"id": "drv-7", "version": "2.0"},
        }
    ).encode()
    assert parse_ping("msg_2", partial, STAGES, now=NOW).change is None
    dots = json.dumps(
        {"type": "driver.updated", "timestamp": "2027-01-15T08:00:00Z", "data": {"id": ".."}}
    ).encode()
    assert refused(lambda: parse_ping("msg_3", dots, STAGES, now=NOW)).kind == "id"


def test_read_body_caps_size_and_refuses_a_bad_length() -> None:
    async def chunks(*parts: bytes):  # type: ignore[no-untyped-def]
        for part in parts:
            yield part

    assert asyncio.run(read_body({}, chunks(b"ab", b"c"), 3)) == b"abc"
    assert refused(lambda: asyncio.run(read_body({}, chunks(b"ab", b"cd"), 3))).status == 413
    for bad in ("ten", "-1x", "9" * 5000):
        got = refused(lambda b=bad: asyncio.run(read_body({"content-length": b}, chunks(b"x"), 3)))
        assert got.status in (400, 413)


# -- dedupe --------------------------------------------------------------------------------
def test_seen_ids_live_until_timestamp_plus_tolerance_and_are_bounded() -> None:
    now = [1000.0]
    seen = SeenIds(max_size=3, clock=lambda: now[0])
    # A future-dated message (timestamp now + 200, tolerance 300) stays valid until
    # now + 500: it must be remembered that long, not 300 s after acceptance.
    seen.add("future", 1000 + 200 + 300)
    seen.add("now", 1000 + 300)
    now[0] = 1000 + 301
    assert "future" in seen and "now" not in seen
    now[0] = 1000 + 501
    assert "future" not in seen and len(seen) == 0
    for i in range(5):  # full: the one expiring soonest goes first
        seen.add(f"m{i}", now[0] + 100 + i)
    assert len(seen) == 3
    assert [f"m{i}" in seen for i in range(5)] == [False, False, True, True, True]
    seen.add("past", now[0] - 1)  # could not verify again: not kept
    assert "past" not in seen


# -- status cost ---------------------------------------------------------------------------
def test_status_is_computed_once_per_period_however_large_the_ledger() -> None:
    cfg = load_config().with_overrides(window={"high_water": 1_000_000})
    core = OrchestratorCore(cfg, clock=lambda: NOW)
    core.intake(
        [Change(f"drv-{i:07d}", "1.0", 0, Status.IN_REVIEW, 1.0) for i in range(200_000)],
        Lane.STALE,
    )
    started = time.perf_counter()
    core.stats()
    walk_s = time.perf_counter() - started
    now = [0.0]
    cached = CachedValue(core.stats, max_age_s=2.0, clock=lambda: now[0])
    cached.refresh()  # the tick
    started = time.perf_counter()
    for _ in range(1000):
        assert cached.get()["ledger"]["drivers"] == 200_000
    answer_s = (time.perf_counter() - started) / 1000
    print(
        f"\nstatus with 200,000 drivers: a ledger walk {walk_s * 1e3:.1f} ms, "
        f"a cached answer {answer_s * 1e6:.2f} us, computed {cached.computed}x for 1000"
    )
    assert cached.computed == 1
    assert answer_s < walk_s / 100
    now[0] = 2.5
    cached.get()
    assert cached.computed == 2


def test_concurrent_status_callers_share_one_computation() -> None:
    runs = []

    async def build() -> dict[str, int]:
        runs.append(1)
        await asyncio.sleep(0.05)
        return {"n": len(runs)}

    async def main() -> list[dict[str, int]]:
        cached = AsyncCachedValue(build, max_age_s=1.0)
        return await asyncio.gather(*(cached.get() for _ in range(50)))

    assert asyncio.run(main()) == [{"n": 1}] * 50 and len(runs) == 1


# -- admin token ---------------------------------------------------------------------------
def test_admin_token_rules() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("admin.example")
    assert admin_token("127.0.0.1", {}) is None
    with pytest.raises(ValueError, match="DRIVER_REVIEW_ADMIN_TOKEN is not set") as err:
        admin_token("0.0.0.0", {})
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="at least 16"):
        admin_token("0.0.0.0", {"DRIVER_REVIEW_ADMIN_TOKEN": "short"})
    token = admin_token("0.0.0.0", {"DRIVER_REVIEW_ADMIN_TOKEN": "t" * 32})
    assert token is not None and "t" * 32 not in repr(token)
    secret = ("t" * 32).encode()
    assert bearer_ok("Bearer " + "t" * 32, secret) and bearer_ok("bearer  " + "t" * 32, secret)
    for bad in (
        None,
        "",
        "t" * 32,
        "Basic " + "t" * 32,
        "Bearer " + "t" * 31,
        "Bearer \u00e9" + "t" * 31,
    ):
        assert not bearer_ok(bad, secret)

"""Property-based tests of the webhook edge's pure parts (``hypothesis``): generated
malformed headers and bodies only ever give :class:`Refused`/:class:`SignatureError`
with a 4xx and a one-line detail, never another exception; correctly signed good pings
are always accepted. Each property prints how many inputs it tried (``-s`` or ``-rA``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver_review.errors import SignatureError
from driver_review.webhooks import Verifier, signed_headers
from serve_app.dedupe import SeenIds
from serve_app.webhook import Refused, parse_ping, read_body, verify

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STAGES = ("intake", "security", "compatibility")
NOW = 1_800_000_000
EXAMPLES = 300
FAST = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

tried: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nwebhook edge properties, inputs tried: {dict(tried)}")


# Header values as a server hands them over: any text, also non-ASCII (latin-1 decoded).
header_text = st.one_of(
    st.text(max_size=64),
    st.text(alphabet=st.characters(max_codepoint=255), max_size=512),
    st.from_regex(r"-?[0-9]{1,500}(\.[0-9]+)?", fullmatch=True),
    st.builds(lambda s: "v1," + s, st.text(max_size=60)),
)
header_names = st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature"])


@FAST
@given(st.dictionaries(header_names, header_text), st.binary(max_size=256))
def test_any_headers_give_a_signature_error_or_pass(headers: dict[str, str], body: bytes) -> None:
    tried["headers"] += 1
    verifier = Verifier([SECRET])
    try:
        verifier.verify_message(headers, body, now=NOW)
    except SignatureError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 200
        return
    raise AssertionError(f"unsigned headers passed: {headers!r}")


@FAST
@given(st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature"]), header_text)
def test_one_hostile_header_beside_good_ones_is_a_401(name: str, value: str) -> None:
    tried["one hostile header"] += 1
    body = b'{"type": "driver.updated"}'
    headers = {**signed_headers(SECRET, "msg_1", body, timestamp=NOW), name: value}
    try:
        verifier = Verifier([SECRET], tolerance_s=float("inf"))  # no clock in the way
        verify(verifier, headers, body)
    except Refused as refused:
        assert refused.status == 401 and "\n" not in refused.detail


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40)
)
json_values = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
good_data = {
    "id": "drv-1",
    "version": "1.2.3",
    "stage": "intake",
    "status": "in_review",
    "updated_at": "2027-01-15T08:00:00Z",
}


def _ping(data: dict[str, Any]) -> bytes:
    return json.dumps(
        {"type": "driver.updated", "timestamp": "2027-01-15T08:00:00Z", "data": data}
    ).encode()


bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    # a good ping with one field replaced by anything, or removed
    st.tuples(st.sampled_from(sorted(good_data)), json_values).map(
        lambda kv: _ping({**good_data, kv[0]: kv[1]})
    ),
    st.sampled_from(sorted(good_data)).map(
        lambda k: _ping({f: v for f, v in good_data.items() if f != k})
    ),
)


@FAST
@given(bodies)
def test_any_body_is_a_ping_or_a_4xx_naming_the_problem(body: bytes) -> None:
    tried["bodies"] += 1
    try:
        ping = parse_ping("msg_1", body, STAGES, now=NOW)
    except Refused as refused:
        assert refused.status in (400, 422) and refused.kind is not None
        assert "\n" not in refused.detail and refused.detail.isprintable()
        return
    driver_id = json.loads(body)["data"]["id"]
    # A ping that leaves out what changed is thin: its driver is looked up before intake.
    assert ping.driver_id == driver_id
    assert ping.change is None or ping.change.driver_id == driver_id


ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,100}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
versions = st.from_regex(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,30}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
msg_ids = st.from_regex(r"msg_[A-Za-z0-9_-]{1,200}", fullmatch=True)


@FAST
@given(
    msg_ids,
    ids,
    versions,
    st.sampled_from([*STAGES, None]),
    st.integers(0, NOW + 200),
    st.integers(-300, 300),
)
def test_correctly_signed_good_pings_are_always_accepted(
    msg_id: str, driver_id: str, version: str, stage: str | None, updated: int, skew: int
) -> None:
    tried["good pings"] += 1
    status = "published" if stage is None else "in_review"
    from datetime import UTC, datetime

    body = _ping(
        {
            "id": driver_id,
            "version": version,
            "stage": stage,
            "status": status,
            "updated_at": datetime.fromtimestamp(updated, UTC).isoformat(),
        }
    )
    headers = signed_headers(SECRET, msg_id, body, timestamp=NOW + skew)
    got = Verifier([SECRET]).verify_message(headers, body, now=NOW)
    assert got.msg_id == msg_id
    ping = parse_ping(got.msg_id, body, STAGES, now=NOW)
    assert (ping.change.driver_id, ping.change.version) == (driver_id, version)


@FAST
@given(
    st.lists(st.binary(max_size=64), max_size=8),
    st.one_of(st.none(), st.text(max_size=30), st.integers(-10, 10**30).map(str)),
)
def test_read_body_returns_the_bytes_or_a_4xx(chunks: list[bytes], length: str | None) -> None:
    tried["read_body"] += 1

    async def stream():  # type: ignore[no-untyped-def]
        for chunk in chunks:
            yield chunk

    headers = {} if length is None else {"content-length": length}
    try:
        got = asyncio.run(read_body(headers, stream(), 128))
    except Refused as refused:
        assert refused.status in (400, 413)
        return
    assert got == b"".join(chunks) and len(got) <= 128


@FAST
@given(st.lists(st.tuples(st.text(max_size=8), st.floats(0, 2000), st.floats(0, 50)), max_size=60))
def test_seen_ids_stay_bounded_and_never_keep_an_expired_id(
    steps: list[tuple[str, float, float]],
) -> None:
    tried["dedupe steps"] += len(steps)
    now = [0.0]
    seen = SeenIds(max_size=10, clock=lambda: now[0])
    expiry: dict[str, float] = {}
    for msg_id, expires_at, advance in steps:
        now[0] += advance
        seen.add(msg_id, expires_at)
        if expires_at > now[0]:
            expiry[msg_id] = max(expires_at, expiry.get(msg_id, 0.0))
        assert len(seen) <= 10
        for known, at in expiry.items():
            if at < now[0]:
                assert known not in seen

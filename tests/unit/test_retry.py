"""Retry-After (RFC 9110), full-jitter backoff, and the IETF RateLimit fields."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest

from driver_review.retry import (
    MAX_RETRY_AFTER_S,
    Backoff,
    QuotaPolicy,
    ServiceLimit,
    parse_ratelimit,
    parse_retry_after,
    parse_sf_list,
)

# Sun, 06 Nov 1994 08:49:37 GMT, the RFC's own example date.
RFC_DATE_TS = 784111777.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 10.0),  # IMF-fixdate
        ("Sunday, 06-Nov-94 08:49:37 GMT", 10.0),  # obsolete RFC 850
        ("Sun Nov  6 08:49:37 1994", 10.0),  # obsolete asctime
        ("Sun, 06 Nov 1994 08:49:00 GMT", 0.0),  # in the past: go now
        ("99999999", MAX_RETRY_AFTER_S),
    ],
)
def test_retry_after_forms(value: str, expected: float) -> None:
    assert parse_retry_after(value, RFC_DATE_TS - 10) == pytest.approx(expected)


@pytest.mark.parametrize("value", [None, "", "-1", "soon", "1e3", "Sun, 99 Nov 1994", "x" * 100])
def test_retry_after_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value, RFC_DATE_TS) is None


def test_retry_after_http_date_round_trip() -> None:
    now = 1_750_000_000.0
    assert parse_retry_after(formatdate(now + 42, usegmt=True), now) == pytest.approx(42)


def test_full_jitter_backoff_is_seeded_and_capped() -> None:
    a = Backoff(0.1, 2.0, random.Random(7))
    b = Backoff(0.1, 2.0, random.Random(7))
    delays = [a.delay_s(i) for i in range(10)]
    assert delays == [b.delay_s(i) for i in range(10)]
    assert all(0 <= d <= min(2.0, 0.1 * 2**i) for i, d in enumerate(delays))
    assert Backoff(0.1, 2.0, random.Random(1)).delay_s(10_000) <= 2.0


def test_sf_list_items_and_parameters() -> None:
    assert parse_sf_list('"burst";q=100;w=60, "daily";q=1000;w=86400') == [
        ("burst", {"q": 100, "w": 60}),
        ("daily", {"q": 1000, "w": 86400}),
    ]
    assert parse_sf_list('"a,b";x="1;2";flag') == [("a,b", {"x": "1;2", "flag": True})]
    assert parse_sf_list('"p";pk=:cHsdsRa894==:') == [("p", {"pk": b"cHsdsRa894=="})]
    for bad in ("", '"open', "a;=1", "a;Q=1", "@"):
        assert parse_sf_list(bad) is None


def test_current_ratelimit_fields() -> None:
    info = parse_ratelimit(
        {"ratelimit-policy": '"default";q=100;w=1', "RateLimit": '"default";r=42;t=1'}
    )
    assert info is not None
    assert info.policies == (QuotaPolicy("default", 100, 1.0),)
    assert info.limits == (ServiceLimit("default", 42, 1.0),)
    assert info.rate_per_s() == 100.0


def test_strictest_policy_wins_and_non_request_quotas_are_ignored() -> None:
    info = parse_ratelimit(
        {
            "RateLimit-Policy": '"permin";q=600;w=60, "perhr";q=3600;w=3600, '
            '"bytes";q=65535;qu="content-bytes";w=1',
            "RateLimit": '"permin";r=5;t=30, "perhr";r=900;t=1200',
        }
    )
    assert info is not None and info.rate_per_s() == 1.0
    assert info.tightest() == ServiceLimit("permin", 5, 30.0)


def test_legacy_trio() -> None:
    info = parse_ratelimit(
        {"RateLimit-Limit": "100", "RateLimit-Remaining": "7", "RateLimit-Reset": "3"}
    )
    assert info is not None and info.rate_per_s() is None  # no window: no sustained rate
    assert info.tightest() == ServiceLimit("", 7, 3.0)
    info = parse_ratelimit({"RateLimit-Limit": "10, 10;w=1", "RateLimit-Remaining": "0"})
    assert info is not None and info.rate_per_s() == 10.0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"RateLimit": "nonsense;;"},
        {"RateLimit-Policy": '"p";w=10'},  # no quota
        {"RateLimit": '"p";r=-1'},
        {"RateLimit-Remaining": "lots"},
    ],
)
def test_malformed_ratelimit_fields_are_ignored(headers: dict[str, str]) -> None:
    assert parse_ratelimit(headers) is None

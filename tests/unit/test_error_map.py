"""The one status map, the one Retry-After reader and the one validation-error line, and
that every client that used to keep a copy now gives the same answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from driver_review.checks.base import CheckContext
from driver_review.checks.http_check import HttpCheck
from driver_review.config import parse_config
from driver_review.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    MalformedResponse,
    NotFound,
    RateLimited,
    ServerError,
    error_for_status,
    first_error,
    one_line,
)
from driver_review.retry import MAX_RETRY_AFTER_S, parse_retry_after
from driver_review.sim.settings import SettingError, SimSettings
from tests.support.fakes import make_driver


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, RateLimited),
        (500, ServerError),
        (503, ServerError),
        (599, ServerError),
        (404, NotFound),
        (409, Conflict),
        (400, BadRequest),
        (422, BadRequest),
        (302, MalformedResponse),
        (100, MalformedResponse),
    ],
)
def test_status_map(status: int, kind: type) -> None:
    err = error_for_status(status, "GET /x: boom", route="driver", retry_after_s=2.0)
    assert type(err) is kind and err.status == status and err.route == "driver"
    assert str(err).startswith("GET /x: boom")
    if kind in (RateLimited, ServerError):  # these keep the server's hint
        assert err.retry_after_s == 2.0  # type: ignore[attr-defined]


DRIVER = make_driver()


def _check_answering(status: int, headers: dict[str, str] | None = None) -> Exception:
    """What an http check raises for one answer of ``status`` (no limiter: no pacing)."""
    transport = httpx.MockTransport(lambda _: httpx.Response(status, headers=headers))
    check = HttpCheck("scan", "http://127.0.0.1:1/scan", 2.0, max_attempts=1, max_wait_s=0.5)

    async def go() -> Exception:
        async with httpx.AsyncClient(transport=transport) as client:
            ctx: Any = CheckContext(catalog=None, http=client)  # type: ignore[arg-type]
            try:
                await check(DRIVER, ctx)
            except Exception as exc:  # the exception is the answer here
                return exc
        raise AssertionError("the check answered")

    return asyncio.run(go())


def test_a_409_from_a_check_endpoint_is_a_conflict_as_from_the_catalog() -> None:
    # It used to be BadRequest here while the catalog client said Conflict.
    err = _check_answering(409)
    assert type(err) is Conflict and err.status == 409  # type: ignore[attr-defined]


def test_a_check_endpoints_503_that_says_when_is_waited_like_a_429() -> None:
    assert type(_check_answering(503, {"retry-after": "30"})) is RateLimited
    assert type(_check_answering(503)) is ServerError


def test_retry_after_cap_is_the_callers() -> None:
    assert parse_retry_after("90000", 0.0) == MAX_RETRY_AFTER_S
    assert parse_retry_after("90000", 0.0, max_s=60.0) == 60.0
    assert parse_retry_after("Thu, 01 Jan 1970 00:02:00 GMT", 0.0, max_s=60.0) == 60.0
    assert parse_retry_after("Thu, 01 Jan 1970 00:00:30 GMT", 0.0, max_s=60.0) == 30.0
    with pytest.raises(ValueError, match="max_s must be > 0"):
        parse_retry_after("1", 0.0, max_s=0.0)


@pytest.mark.parametrize("value", ["-5", "1e3", "inf", "nan", "", "  ", "soon"])
def test_retry_after_forms_that_are_not_delay_seconds_are_ignored(value: str) -> None:
    # The simulator's sender once read these with float(): "nan" became a nan wait.
    assert parse_retry_after(value, 0.0, max_s=60.0) is None


class _Inner(BaseModel):
    n: int


class _Model(BaseModel):
    name: str
    inner: _Inner
    tags: dict[str, int] = {}


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Model.model_validate(data)
    return info.value


def test_one_line_names_the_field_and_counts_the_rest() -> None:
    exc = _error({"inner": {"n": "x"}})
    assert one_line(exc) == "name: Field required (and 1 more)"
    assert one_line(exc, where="pipeline.yaml").startswith("pipeline.yaml: name: ")
    first = first_error(_error({"name": "a", "inner": {"n": "x"}}))
    assert (first.path, first.type, first.loc) == ("inner.n", "int_parsing", ("inner", "n"))


def test_one_line_never_echoes_the_input_and_stays_one_line() -> None:
    exc = _error({"name": "a", "inner": {"n": 1}, "tags": {"\x1b[31m\nkey": "SECRET" * 1000}})
    line = one_line(exc)
    assert "\n" not in line and "\x1b" not in line and "SECRET" not in line
    assert line.startswith("tags.'\\x1b[31m\\nkey': ")
    assert one_line(_error([1]), top="body").startswith("body: ")


def test_every_former_copy_now_says_the_same() -> None:
    with pytest.raises(ConfigError) as config:
        parse_config({"window": {"high_water": "lots"}, "stages": 3}, source="p.yaml")
    assert str(config.value).startswith("p.yaml: ") and "(and " in str(config.value)
    with pytest.raises(SettingError) as setting:
        SimSettings(drivers="many")  # type: ignore[arg-type]
    assert setting.value.field == "drivers" and "Value error" not in setting.value.problem

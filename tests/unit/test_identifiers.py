"""The rules every id, version and catalog time passes before anything takes it."""

from __future__ import annotations

import pytest

from driver_review.identifiers import (
    MAX_ID_CHARS,
    MAX_VERSION_BYTES,
    id_problem,
    instance_problem,
    redact_url,
    shown,
    time_problem,
    version_problem,
)


@pytest.mark.parametrize(
    "good", ["drv-0001", "PCI_VEN_10DE", "a" * MAX_ID_CHARS, "nvidia:gfx.535", "ü-driver"]
)
def test_ordinary_ids_pass(good: str) -> None:
    assert id_problem(good) is None


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("", "empty"),
        (".", "path segment"),
        ("..", "path segment"),
        ("a/b", "slash"),
        ("a\\b", "slash"),
        ("a\nb", "control"),
        ("a\x00", "control"),
        (" a", "whitespace"),
        ("a" * (MAX_ID_CHARS + 1), "longer than"),
        (17, "int, not a string"),
        (None, "NoneType"),
    ],
)
def test_bad_ids_are_named(bad: object, says: str) -> None:
    problem = id_problem(bad)
    assert problem is not None and says in problem
    assert "\n" not in problem and "\x00" not in problem


def test_versions_are_limited_in_bytes_not_characters() -> None:
    assert version_problem("1" * MAX_VERSION_BYTES) is None
    assert "longer than" in (version_problem("1" * (MAX_VERSION_BYTES + 1)) or "")
    # 11 characters, 33 bytes: refused, never cut to fit
    assert version_problem("é" * 16 + "1") is not None
    assert version_problem("..") is not None


def test_times_before_1970_or_beyond_the_skew_allowance_are_refused() -> None:
    now = 1_800_000_000.0
    assert time_problem(now, now) is None
    assert time_problem(now + 299, now) is None
    assert "future" in (time_problem(now + 301, now) or "")
    assert "1970" in (time_problem(-1.0, now) or "")
    assert time_problem(float("nan"), now) is not None


def test_shown_escapes_control_characters_and_says_the_length() -> None:
    assert shown("a\nb\x1b[2J") == "'a\\nb\\x1b[2J'"
    long = shown("x" * 10_000)
    assert long.endswith("(10000 chars)") and len(long) < 120
    assert "\n" not in shown(b"\n\x00")


def test_redact_url_drops_userinfo_and_query() -> None:
    assert redact_url("https://user:pa55@catalog.example:8443/v1?token=abc#x") == (
        "https://catalog.example:8443/v1"
    )
    assert redact_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    assert redact_url("http://u:p@[::1]:81/") == "http://[::1]:81/"


@pytest.mark.parametrize("bad", [".", "..", "a/b", "", "-x", "a b", "x" * 65, "ü"])
def test_instance_names_that_could_leave_their_folder_are_refused(bad: str, tmp_path) -> None:
    from driver_review.errors import ConfigError
    from driver_review.snapshot import SnapshotStore

    assert instance_problem(bad) is not None
    with pytest.raises(ConfigError, match="instance name"):
        SnapshotStore(str(tmp_path), bad)
    assert list(tmp_path.iterdir()) == []


def test_instance_names_are_checked_by_the_cli_and_the_serve_app_args() -> None:
    from pydantic import ValidationError

    from driver_review.cli import build_parser
    from serve_app.app import IngressArgs

    assert instance_problem("sweep-1a2b_c") is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["status", "--instance", ".."])
    with pytest.raises(ValidationError, match="instance name"):
        IngressArgs(instance="..")

"""The ingress benchmark's pure parts: the signed requests wrk sends (unique ids, dealt
to threads without overlap, valid HTTP framing), wrk's result line, and the choice of the
proxy in front of the webhook port."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from driver_review.errors import ConfigError
from driver_review.webhooks import Verifier
from jobs.bench.ingress_load import signed_pings
from jobs.bench.wrk_load import (
    RESULT_MARK,
    WrkError,
    WrkLoad,
    parse_result,
    raw_request,
    script_text,
    write_requests,
)
from serve_app import proxies

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
URL = "http://127.0.0.1:8123/webhooks/drivers"


def _records(data: bytes) -> list[bytes]:
    """The length-prefixed records of a request file, read as the Lua script reads them."""
    out, pos = [], 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        n = int(data[pos:nl])
        out.append(data[nl + 1 : nl + 1 + n])
        pos = nl + 1 + n
    return out


def test_requests_are_dealt_to_threads_without_overlap_and_verify(tmp_path: Path) -> None:
    pings = signed_pings(SECRET, 101, "t")
    write_requests(tmp_path, URL, pings, threads=3)
    files = [_records((tmp_path / f"requests-{k}.bin").read_bytes()) for k in range(3)]
    assert [len(f) for f in files] == [34, 34, 33]
    verifier = Verifier([SECRET])
    ids = []
    for raw in (r for f in files for r in f):
        head, body = raw.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /webhooks/drivers HTTP/1.1"
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert headers["Host"] == "127.0.0.1:8123"
        assert int(headers["Content-Length"]) == len(body)
        ids.append(verifier.verify(headers, body))
    assert len(set(ids)) == 101  # every request its own webhook-id: none deduplicated


def test_raw_request_refuses_what_is_not_plain_http() -> None:
    with pytest.raises(ValueError, match="http://"):
        raw_request("https://127.0.0.1/x", b"{}", {})


def test_script_points_each_thread_at_its_own_file(tmp_path: Path) -> None:
    text = script_text(tmp_path)
    assert f'local dir = "{tmp_path}"' in text
    assert '"/requests-" .. thread_k .. ".bin"' in text
    assert "%%" not in text and RESULT_MARK in text
    with pytest.raises(ValueError, match="quote"):
        script_text(Path('/tmp/a"b'))


def test_result_line_is_found_among_wrk_output() -> None:
    out = f'Running 5s test\n{RESULT_MARK}{{"accepted": 3}}\nRequests/sec: 1\n'
    assert parse_result(out) == {"accepted": 3}
    with pytest.raises(WrkError, match="no result"):
        parse_result("Running 5s test\n")


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"connections": 1, "duration_s": 5, "threads": 2}, "threads <= connections"),
        ({"connections": 8, "duration_s": 0}, "duration_s"),
        ({"connections": 8, "duration_s": 601}, "duration_s"),
    ],
)
def test_bad_wrk_loads_are_one_line_errors(kwargs: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        WrkLoad(**kwargs)


def test_auto_falls_back_to_serves_proxy_with_one_line_without_haproxy(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(proxies.HAPROXY_BINARY_ENV, "/nonexistent/haproxy")
    assert proxies.haproxy_binary() is None
    with caplog.at_level(logging.WARNING):
        assert proxies.resolve_proxy("auto") == "default"
    assert len(caplog.records) == 1 and "HAProxy not found" in caplog.records[0].message
    with pytest.raises(ConfigError, match="--proxy haproxy: no HAProxy binary"):
        proxies.resolve_proxy("haproxy")
    assert proxies.resolve_proxy("default") == "default"
    with pytest.raises(ConfigError, match="'nginx' is not one of"):
        proxies.resolve_proxy("nginx")


def test_an_explicit_haproxy_binary_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = tmp_path / "haproxy"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv(proxies.HAPROXY_BINARY_ENV, str(binary))
    assert proxies.resolve_proxy("auto") == "haproxy"
    env = proxies.controller_env("haproxy")
    assert env[proxies.HAPROXY_BINARY_ENV] == str(binary)


def test_haproxy_files_are_private_and_the_socket_path_fits() -> None:
    a, b = proxies.controller_env("haproxy"), proxies.controller_env("haproxy")
    assert a["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert a["RAY_SERVE_HAPROXY_SOCKET_PATH"] != b["RAY_SERVE_HAPROXY_SOCKET_PATH"]
    assert a["RAY_SERVE_HAPROXY_STATS_PORT"] != "8404"
    # Ray nests the socket one directory deeper (a 56-character node id); HAProxy takes
    # at most 97 characters.
    socket = Path(a["RAY_SERVE_HAPROXY_SOCKET_PATH"])
    assert len(str(socket.parent / ("f" * 56) / socket.name)) <= 97
    assert proxies.controller_env("default") == {}
    assert proxies.replica_env(False) == {}
    assert proxies.replica_env(True)["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert proxies.replica_env(True)["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1"

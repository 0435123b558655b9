"""Signed webhook load from ``wrk``, a C load generator that stays out of the way of the
server it measures on a 2-core machine (a Python client in this process was the
bottleneck of the ingress scenario).

Every request is signed here beforehand (Standard Webhooks, a unique ``webhook-id`` each,
so the ingress's dedupe never answers 200 "duplicate"): :func:`write_requests` writes
them as raw HTTP/1.1 requests, one file per wrk thread, and the Lua script below hands
them out in order, one per request, and stops its thread when its share runs out rather
than send one twice. Its ``response`` hook counts 202 (accepted), other 2xx, 429 and
everything else; ``done`` prints one JSON line that :func:`run_wrk` parses.

The signatures hold for the receiver's tolerance (5 minutes), so requests are written
right before each run, and a run is bounded by ``duration_s``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RESULT_MARK = "WRK_RESULT "
#: wrk gives up on a request after this long (counted as a timeout, not an answer).
REQUEST_TIMEOUT_S = 10
#: Beyond ``duration_s``, how long wrk may take to start and stop before it is killed.
EXIT_GRACE_S = 30.0

# Each thread reads its own file (``<dir>/requests-<k>.bin``, records written as
# "<length>\n<raw request>") in init(), so no request is sent by two threads.
_SCRIPT = r"""
local dir = "%(dir)s"
local threads = {}
local next_k = 0

-- setup() runs in wrk's main Lua state; thread:set() makes a global of each thread's own.
function setup(thread)
  thread:set("thread_k", next_k)
  next_k = next_k + 1
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(dir .. "/requests-" .. thread_k .. ".bin", "rb"))
  local data = f:read("*a")
  f:close()
  reqs = {}
  local pos = 1
  while pos <= #data do
    local nl = string.find(data, "\n", pos, true)
    local len = tonumber(string.sub(data, pos, nl - 1))
    table.insert(reqs, string.sub(data, nl + 1, nl + len))
    pos = nl + 1 + len
  end
  i = 0
  sent = 0
  c202, c2xx, c429, other, exhausted = 0, 0, 0, 0, 0
end

function request()
  i = i + 1
  if i > #reqs then
    -- Never send a signed request twice (it would be a duplicate, not new load): stop
    -- this thread; what it writes meanwhile is a health check, not counted.
    exhausted = 1
    wrk.thread:stop()
    return wrk.format("GET", "/healthz")
  end
  sent = sent + 1
  return reqs[i]
end

function response(status, headers, body)
  if exhausted == 1 then return end
  if status == 202 then c202 = c202 + 1
  elseif status >= 200 and status < 300 then c2xx = c2xx + 1
  elseif status == 429 then c429 = c429 + 1
  else other = other + 1 end
end

function done(summary, latency, requests)
  local t = {accepted = 0, other_2xx = 0, rate_limited = 0, other = 0, sent = 0,
             exhausted = 0}
  for _, th in ipairs(threads) do
    t.accepted = t.accepted + th:get("c202")
    t.other_2xx = t.other_2xx + th:get("c2xx")
    t.rate_limited = t.rate_limited + th:get("c429")
    t.other = t.other + th:get("other")
    t.sent = t.sent + th:get("sent")
    t.exhausted = t.exhausted + th:get("exhausted")
  end
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"duration_us": %%d, "answered": %%d, "accepted": %%d, "other_2xx": %%d, ' ..
    '"rate_limited": %%d, "other": %%d, "sent": %%d, "exhausted_threads": %%d, ' ..
    '"errors": {"connect": %%d, "read": %%d, "write": %%d, "timeout": %%d}, ' ..
    '"p50_latency_us": %%d, "p99_latency_us": %%d}\n',
    summary.duration, summary.requests, t.accepted, t.other_2xx, t.rate_limited, t.other,
    t.sent, t.exhausted, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


class WrkError(RuntimeError):
    """wrk did not run to the end or printed no result."""


@dataclass(frozen=True)
class WrkLoad:
    """One wrk run: ``connections`` kept open, ``threads`` event loops, ``duration_s``."""

    connections: int
    duration_s: float
    threads: int = 1

    def __post_init__(self) -> None:
        if self.threads < 1 or self.connections < self.threads:
            raise ValueError(
                f"wrk: need 1 <= threads <= connections, got threads="
                f"{self.threads}, connections={self.connections}"
            )
        if not 0 < self.duration_s <= 600:
            raise ValueError(f"wrk: duration_s must be in (0, 600], got {self.duration_s}")


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def wrk_version(binary: str) -> str:
    # `wrk -v` prints its banner and usage, and exits 1.
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
    first = (out.stdout or out.stderr).splitlines()
    return first[0].split(" Copyright")[0].strip() if first else "wrk"


def raw_request(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    """One HTTP/1.1 POST of ``body`` to ``url``, as bytes on the wire (keep-alive)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"wrk target must be an http:// URL, got {url!r}")
    lines = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {parts.netloc}",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() != "content-length"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def write_requests(
    directory: Path, url: str, pings: Sequence[tuple[bytes, dict[str, str]]], threads: int
) -> None:
    """Deal the signed pings round-robin into one request file per wrk thread."""
    files = [bytearray() for _ in range(threads)]
    for n, (body, headers) in enumerate(pings):
        raw = raw_request(url, body, headers)
        files[n % threads] += b"%d\n" % len(raw) + raw
    for k, data in enumerate(files):
        (directory / f"requests-{k}.bin").write_bytes(bytes(data))


def script_text(directory: Path) -> str:
    if '"' in str(directory) or "\\" in str(directory):
        raise ValueError(f"wrk scratch directory has a quote or backslash: {directory}")
    return _SCRIPT % {"dir": str(directory), "mark": RESULT_MARK}


def parse_result(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    raise WrkError(f"wrk printed no result: {stdout[-500:]!r}")


def run_wrk(
    binary: str,
    url: str,
    pings: Sequence[tuple[bytes, dict[str, str]]],
    load: WrkLoad,
    scratch: Path,
) -> dict[str, Any]:
    """Send ``pings`` (pre-signed, ids unique) to ``url`` with wrk for ``load.duration_s``
    at most; returns the counts and rates. Loopback only: the benchmark's own servers."""
    host = urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"wrk: loopback targets only, got {host!r}")
    scratch.mkdir(parents=True, exist_ok=True)
    write_requests(scratch, url, pings, load.threads)
    script = scratch / "signed.lua"
    script.write_text(script_text(scratch))
    duration = max(1, math.ceil(load.duration_s))
    cmd = [
        binary,
        "-t",
        str(load.threads),
        "-c",
        str(load.connections),
        "-d",
        f"{duration}s",
        "--timeout",
        f"{REQUEST_TIMEOUT_S}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=duration + EXIT_GRACE_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise WrkError(f"wrk ran over {duration + EXIT_GRACE_S:.0f}s") from exc
    if proc.returncode != 0:
        raise WrkError(f"wrk exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    got = parse_result(proc.stdout)
    elapsed_s = got["duration_us"] / 1e6
    return {
        "pings": len(pings),
        "sent": got["sent"],
        "answered": got["answered"],
        "accepted": got["accepted"],
        "elapsed_s": elapsed_s,
        "accepted_per_s": got["accepted"] / elapsed_s if elapsed_s > 0 else 0.0,
        "statuses": {
            "202": got["accepted"],
            "other_2xx": got["other_2xx"],
            "429": got["rate_limited"],
            "other": got["other"],
        },
        "socket_errors": got["errors"],
        # A thread that ran out of requests stopped early: the rate is then a floor.
        "exhausted_threads": got["exhausted_threads"],
        "p50_latency_s": got["p50_latency_us"] / 1e6,
        "p99_latency_s": got["p99_latency_us"] / 1e6,
    }

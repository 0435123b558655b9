"""Real rate limiters on loopback: nginx ``limit_req`` and an HAProxy stick table, each a
reverse proxy in front of an upstream URL (the simulator, unlimited), started from the
distribution's binaries in a temporary directory and stopped cleanly.

    with NginxLimiter(sim.url, rate=60, burst=12) as proxy:
        ... point the catalog client at proxy.url ...
        statuses = proxy.log()  # (time, status) of every request the limiter answered

Both pass every method, header and body through (GET/PUT, ETag/If-None-Match, 304), and
refuse with 429, an HTML body and no ``Retry-After``, as they do out of the box. Each logs
one line per request in a file of its own, so what they refused is counted where it
happened (the upstream never sees it). A missing binary raises :class:`LimiterError`
naming it; so does a proxy that does not come up (with the tail of its log).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from driver_review.errors import DriverReviewError
from driver_review.sim.ports import free_port

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class LimiterError(DriverReviewError):
    """A real limiter could not be started (missing binary, bad config, no port)."""


def _upstream(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise LimiterError(f"upstream: want http://HOST:PORT, got {url!r}")
    return f"{parts.hostname}:{parts.port}"


class _Proxy:
    """A child process serving ``url``; subclasses write the config and the command."""

    binary = ""
    kind = ""

    def __init__(self, upstream_url: str, *, rate: float) -> None:
        if not rate > 0:
            raise LimiterError(f"{self.kind}: rate must be > 0, got {rate!r}")
        self.upstream = _upstream(upstream_url)
        self.rate = rate
        self.port = 0
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self) -> dict[str, object]:
        return {"kind": self.kind, "rate_per_s": self.rate}

    def _config(self, d: Path) -> list[str]:
        raise NotImplementedError

    def start(self) -> _Proxy:
        exe = shutil.which(self.binary) or shutil.which(self.binary, path="/usr/sbin:/sbin")
        if exe is None:
            raise LimiterError(f"{self.kind}: binary {self.binary!r} not found on PATH")
        self.dir = Path(tempfile.mkdtemp(prefix=f"driver-review-{self.binary}-"))
        self.port = free_port()
        argv = [exe, *self._config(self.dir)]
        out = open(self.dir / "stdout.log", "wb")  # noqa: SIM115 - the child keeps it
        self._proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.stop()
                raise LimiterError(f"{self.kind}: exited at start ({self._tail()})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise LimiterError(
            f"{self.kind}: not listening after {START_TIMEOUT_S:g}s ({self._tail()})"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # both stop at once on TERM
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)

    def cleanup(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log(self) -> list[tuple[float, int]]:
        """``(unix time, status)`` of every request answered so far."""
        path = self._log_path()
        if path is None or not path.exists():
            return []
        out = []
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                try:
                    out.append((float(parts[0]), int(parts[1])))
                except ValueError:
                    continue  # a start-up notice, not a request
        return out

    def _log_path(self) -> Path | None:
        raise NotImplementedError

    def _tail(self) -> str:
        if self.dir is None:
            return "no log"
        text = " | ".join(
            p.read_text(errors="replace").strip().replace("\n", " | ")[-400:]
            for p in sorted(self.dir.glob("*.log"))
            if p.stat().st_size
        )
        return text or "no log"

    def __enter__(self) -> _Proxy:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.cleanup()


class NginxLimiter(_Proxy):
    """``limit_req_zone $binary_remote_addr … rate=R; limit_req zone=… [burst=N [nodelay]]``.

    ``burst=0`` is nginx without ``burst=`` (every request closer than 1/R to the last is
    refused); ``nodelay=False`` queues the burst instead of passing it at once."""

    binary = "nginx"
    kind = "nginx"

    def __init__(
        self, upstream_url: str, *, rate: float, burst: int = 0, nodelay: bool = True
    ) -> None:
        super().__init__(upstream_url, rate=rate)
        if burst < 0:
            raise LimiterError(f"nginx: burst must be >= 0, got {burst}")
        self.burst, self.nodelay = burst, nodelay

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "burst": self.burst,
            "nodelay": self.nodelay,
            "directive": self._limit_req(),
        }

    def _limit_req(self) -> str:
        burst = f" burst={self.burst}" + (" nodelay" if self.nodelay else "") if self.burst else ""
        return f"limit_req zone=catalog{burst};"

    def _rate(self) -> str:
        # nginx takes whole requests per second or per minute.
        if float(self.rate).is_integer():
            return f"{int(self.rate)}r/s"
        return f"{round(self.rate * 60)}r/m"

    def _config(self, d: Path) -> list[str]:
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (d / sub).mkdir()
        # Root would hand the workers to "nobody", who cannot write here; unprivileged,
        # nginx ignores ``user`` and keeps the caller's.
        user = f"user {pwd.getpwuid(0).pw_name};" if os.geteuid() == 0 else ""
        conf = f"""
{user}
worker_processes 1;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format tiny '$msec $status';
    access_log {d}/access.log tiny;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    client_max_body_size 256m;
    limit_req_zone $binary_remote_addr zone=catalog:1m rate={self._rate()};
    limit_req_status 429;
    upstream catalog {{ server {self.upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            {self._limit_req()}
            proxy_pass http://catalog;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_read_timeout 120s;
        }}
    }}
}}
"""
        (d / "nginx.conf").write_text(conf)
        return ["-p", f"{d}/", "-c", f"{d}/nginx.conf", "-g", f"daemon off; pid {d}/nginx.pid;"]

    def _log_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "access.log"


class HaproxyLimiter(_Proxy):
    """``stick-table … store http_req_rate(1s)``, ``track-sc0 src``, and ``deny
    deny_status 429 if { sc_http_req_rate(0) gt R }``: a sliding estimate over the last
    second that counts denied requests too."""

    binary = "haproxy"
    kind = "haproxy"

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "rule": f"sc_http_req_rate(0) gt {self._limit()}",
            "period_s": 1,
        }

    def _limit(self) -> int:
        return max(1, round(self.rate))

    def _config(self, d: Path) -> list[str]:
        conf = f"""
global
    maxconn 4096
    log stdout format raw local0
defaults
    mode http
    log global
    option dontlognull
    log-format "%Ts.%ms %ST"
    option http-keep-alive
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 60s
frontend catalog
    bind 127.0.0.1:{self.port}
    stick-table type ip size 10k expire 30s store http_req_rate(1s)
    http-request track-sc0 src
    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {self._limit()} }}
    default_backend upstream
backend upstream
    http-reuse always
    server catalog {self.upstream}
"""
        (d / "haproxy.cfg").write_text(conf)
        return ["-db", "-f", f"{d}/haproxy.cfg"]

    def _log_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "stdout.log"


def missing_binary(name: str) -> str | None:
    """``None`` when ``name`` can run here, else why not (for a test's skip)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    return (
        None
        if found
        else f"{name} not installed (apt-get install {name}"
        + ("-light)" if name == "nginx" else ")")
    )

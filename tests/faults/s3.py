"""A real S3-compatible server on loopback for the storage tests: moto in server mode, in a
process (and session) of its own, so Ray workers and ``driver-review serve`` subprocesses
reach it over HTTP exactly as they would reach a real object store.

The ``s3://`` URIs handed to the product carry everything pyarrow needs — credentials as
the URI's user info, ``endpoint_override``, ``scheme`` and ``region`` as query parameters
(``pyarrow.fs.FileSystem.from_uri``) — so a process that gets the URI needs no
environment of its own (Ray workers started before the test still can write).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pyarrow.fs as pafs

from tests.support.net import free_port

HOST = "127.0.0.1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing-secret"
REGION = "us-east-1"
READY_TIMEOUT_S = 60.0


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def filesystem(self, *, allow_bucket_creation: bool = False) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            scheme="http",
            endpoint_override=f"{HOST}:{self.port}",
            allow_bucket_creation=allow_bucket_creation,
            allow_bucket_deletion=True,
        )

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"dr-{uuid.uuid4().hex[:12]}"
        self.filesystem(allow_bucket_creation=True).create_dir(name)
        return name

    def uri(self, bucket: str, prefix: str, *, credentials: bool = True) -> str:
        """``s3://key:secret@bucket/prefix?endpoint_override=…&scheme=http&region=…``;
        without ``credentials`` the reader needs :meth:`env` (the usual AWS variables)."""
        auth = f"{quote(ACCESS_KEY, safe='')}:{quote(SECRET_KEY, safe='')}@" if credentials else ""
        return (
            f"s3://{auth}{bucket}/{prefix.strip('/')}"
            f"?endpoint_override={quote(self.endpoint, safe='')}&scheme=http&region={REGION}"
        )

    def env(self) -> dict[str, str]:
        """The same credentials the usual way, for tools that read the environment."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def _wait_ready(server: S3Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"moto server exited with {server.proc.returncode}:\n{server.log_tail()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.endpoint}/moto-api/", timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise TimeoutError(f"moto server not ready after {READY_TIMEOUT_S}s:\n{server.log_tail()}")


@contextlib.contextmanager
def moto_server() -> Iterator[S3Server]:
    """Start ``python -m moto.server`` on a free loopback port; stop its process group."""
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise RuntimeError("moto is missing: pip install -e '.[test]'") from exc
    log_dir = tempfile.mkdtemp(prefix="drmoto-")
    log_path = Path(log_dir) / "moto.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    server = S3Server(port, proc, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(OSError):
            log_path.unlink()
            os.rmdir(log_dir)

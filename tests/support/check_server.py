"""A small third-party check service on loopback, for the tests: its own rate limit (a
token bucket: 429 with ``Retry-After``, as scanners answer), optional credentials (a bearer
token, or OAuth2 client credentials with tokens that expire), and answers either ``passed``
or what ``answer`` says (e.g. the simulated catalog's own answer for a check, asked
in-process), so a sweep that uses it still ends equal to the simulator's truth.
"""

from __future__ import annotations

import base64
import json
import math
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from driver_review.sim.ratelimit import TokenBucket


class CheckServer:
    """``POST /check`` answers ``{passed, reason}``; ``POST /token`` issues OAuth2 tokens."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int = 1,
        bearer: str | None = None,
        client: tuple[str, str] | None = None,
        token_ttl_s: float = 60.0,
        answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.bucket = TokenBucket(rate, burst)
        self.bearer = bearer
        self.client = client
        self.token_ttl_s = token_ttl_s
        # What a check answers (default: passed); e.g. the simulator's own answer, asked
        # in-process so the check service takes nothing from the catalog's rate limit.
        self.answer = answer
        self.statuses: Counter[int] = Counter()
        self.admitted_at: list[float] = []
        self.refused_at: list[float] = []  # when each 429 was answered (monotonic)
        self.tokens_at: list[float] = []  # when each token was issued (monotonic)
        self.tokens_issued = 0
        self.issued: list[str] = []  # every token handed out (tests scan for them)
        self._tokens: dict[str, float] = {}  # token -> expiry (monotonic)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> CheckServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- handlers (called on the server's threads) ----------------------------------------
    def issue_token(self, authorization: str | None) -> tuple[int, dict[str, Any]]:
        expected = "Basic " + base64.b64encode(":".join(self.client or ("", "")).encode()).decode()
        if self.client is None or authorization != expected:
            return 401, {"error": "invalid_client"}
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = time.monotonic() + self.token_ttl_s
            self.tokens_issued += 1
            self.tokens_at.append(time.monotonic())
            self.issued.append(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl_s}

    def authorized(self, authorization: str | None) -> bool:
        if self.bearer is None and self.client is None:
            return True
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        if self.bearer is not None:
            return secrets.compare_digest(value, self.bearer)
        with self._lock:
            return self._tokens.get(value, 0.0) > time.monotonic()

    def check(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            admission = self.bucket.try_acquire()
            (self.admitted_at if admission.admitted else self.refused_at).append(time.monotonic())
        if not admission.admitted:
            return 429, {}, {"Retry-After": str(max(1, math.ceil(admission.wait_s)))}
        if self.answer is None:
            return 200, {"passed": True}, {}
        try:
            return 200, self.answer(body), {}
        except Exception as exc:  # e.g. the simulator's 404/409, with its status
            return getattr(exc, "status", 500), {"detail": str(exc)}, {}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: CheckServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers: dict[str, str] = {}
        if self.path == "/token":
            form = parse_qs(raw.decode())
            if form.get("grant_type") != ["client_credentials"]:
                status, payload = 400, {"error": "unsupported_grant_type"}
            else:
                status, payload = owner.issue_token(self.headers.get("Authorization"))
        elif not owner.authorized(self.headers.get("Authorization")):
            status, payload = 401, {"detail": "unauthorized"}
        else:
            status, payload, headers = owner.check(json.loads(raw))
        with owner._lock:
            owner.statuses[status] += 1
        data = json.dumps(payload).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

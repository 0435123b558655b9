"""A small Chrome DevTools Protocol client: the distribution's headless ``chromium`` driven
over its websocket (``websockets``, already in the venv through Ray Serve's uvicorn).

It records what the browser reports as wrong — uncaught exceptions, ``console.error``,
and log entries of level error (failed loads, CSP violations) — so a test can assert
there were none.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless chromium with one page; ``close()`` ends the process it started."""

    def __init__(
        self, binary: str, profile_dir: Path, *, width: int = 1680, height: int = 1050
    ) -> None:
        args = [
            binary,
            "--headless=new",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={profile_dir}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            # Chromium's sandbox refuses to run as root (CI containers run tests as root);
            # the pages it loads here are our own, on loopback.
            args.insert(1, "--no-sandbox")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.errors: list[str] = []
        self._id = 0
        try:
            port = self._devtools_port(profile_dir)
            pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page = next(p for p in pages if p.get("type") == "page")
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=10)
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, profile_dir: Path) -> int:
        # With port 0, chromium writes the port it chose into DevToolsActivePort.
        marker = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if marker.exists() and (text := marker.read_text().split()):
                return int(text[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def _event(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(
                "exception: "
                + str(details.get("exception", {}).get("description") or details.get("text"))
            )
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(
                "console.error: "
                + " ".join(
                    str(a.get("value", a.get("description"))) for a in params.get("args", [])
                )
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        ident = self._id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{method}: no answer in {CALL_TIMEOUT_S} s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def pump(self, seconds: float) -> None:
        """Let the page run for ``seconds``, collecting its events."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._event(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def eval(self, expression: str) -> Any:
        out = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in out:
            raise RuntimeError(f"evaluate {expression[:60]!r}: {out['exceptionDetails']}")
        return out.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """Poll ``expression`` until it is truthy (bounded); returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            self.pump(0.2)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

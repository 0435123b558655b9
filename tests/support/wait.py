"""Bounded waits: poll a condition until it holds or a deadline passes. Every wait in the
tests has a deadline, so a regression fails with a message instead of hanging the suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    *,
    every_s: float = 0.5,
    context: Callable[[], str] = lambda: "",
) -> Any:
    """The first truthy value of ``predicate()``; an ``AssertionError`` naming ``what`` (and
    ``context()``, e.g. a log tail) when none comes within ``timeout_s``."""
    if timeout_s <= 0 or every_s <= 0:
        raise ValueError(
            f"wait_until({what!r}): timeout_s and every_s must be > 0, "
            f"got {timeout_s} and {every_s}"
        )
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = context()
            raise AssertionError(
                f"timed out after {timeout_s}s waiting for {what}"
                + (f"\n{detail}" if detail else "")
            )
        time.sleep(every_s)


def poll_until(predicate: Callable[[], Any], timeout_s: float, every_s: float = 0.5) -> bool:
    """Whether ``predicate()`` held within ``timeout_s``: for callers that decide what a
    timeout means themselves (an assert with their own diagnosis, or carrying on)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True

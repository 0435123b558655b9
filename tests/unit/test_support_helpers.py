"""The shared test helpers themselves: bounded waits say what they waited for, and port
pickers hand out distinct ports that can be bound."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.net import free_port, free_ports, port_free
from tests.support.wait import poll_until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, [], {"ok": 1}])
    assert wait_until(lambda: next(answers), 5, "an answer", every_s=0.001) == {"ok": 1}


def test_wait_until_names_what_it_waited_for_and_the_context_on_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError) as info:
        wait_until(
            lambda: False,
            0.05,
            "the sweep to finish",
            every_s=0.01,
            context=lambda: "log tail: boom",
        )
    assert time.monotonic() - started < 2
    assert str(info.value) == (
        "timed out after 0.05s waiting for the sweep to finish\nlog tail: boom"
    )


def test_wait_until_refuses_a_wait_without_a_bound() -> None:
    with pytest.raises(ValueError, match="timeout_s and every_s must be > 0"):
        wait_until(lambda: True, 0, "anything")


def test_poll_until_says_whether_the_condition_held_in_time() -> None:
    flips = iter([False, False, True])
    assert poll_until(lambda: next(flips), 5, every_s=0.001) is True
    assert poll_until(lambda: False, 0.02, every_s=0.005) is False


def test_free_ports_are_distinct_and_bindable_on_loopback() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(port_free(p, "127.0.0.1") for p in ports)
    assert 0 < free_port() < 65536


def test_a_bound_port_is_not_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not port_free(s.getsockname()[1], "127.0.0.1")


def test_free_ports_refuses_a_count_below_one() -> None:
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        free_ports(0)

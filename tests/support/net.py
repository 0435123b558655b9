"""Free TCP ports for servers a test starts (picked at random, never a fixed number, so
parallel tests and other engineers' runs on the same machine do not collide; see
:mod:`driver_review.sim.ports`), and whether a port is free."""

from __future__ import annotations

import socket

from driver_review.sim.ports import LOOPBACK, free_port, free_ports

__all__ = ["LOOPBACK", "free_port", "free_ports", "port_free"]


def port_free(port: int, host: str = "") -> bool:
    """Whether ``port`` can be bound on ``host`` (every interface unless told) right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

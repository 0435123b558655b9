"""Free TCP ports for servers a test starts (the kernel picks them, so parallel tests and
other engineers' runs on the same machine never collide on a fixed number)."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct ports the kernel says are free on ``host`` right now (all held open
    together while picked, so none is handed out twice). ``host=""`` asks for ports free
    on every interface, as a Ray node binding ``0.0.0.0`` needs."""
    if n < 1:
        raise ValueError(f"free_ports: n must be at least 1, got {n}")
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = LOOPBACK) -> int:
    """One port free on ``host`` (loopback unless told) right now."""
    return free_ports(1, host)[0]


def port_free(port: int, host: str = "") -> bool:
    """Whether ``port`` can be bound on ``host`` (every interface unless told) right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

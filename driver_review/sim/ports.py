"""Free TCP ports for the servers a local run starts and names a port for before they
listen (the simulator, Serve's proxy, a limiter in front of the simulator).

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the same range
every outgoing connection takes its local port from: between picking such a port and a
server binding it, one of the many connections a Ray node opens can take it (seen here:
Serve's proxy could not bind a port picked a few seconds before). Ports are picked from
below that range instead, and above Ray's default worker ports (10002-19999), so neither
an outgoing connection nor a Ray worker lands on them; each is bound once to see that it
is free. Where the ephemeral range leaves too little room below it, the kernel picks.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
ABOVE_RAY_WORKERS = 20000  # Ray's default max_worker_port is 19999
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
MIN_ROOM = 2000  # fewer candidate ports than this: let the kernel pick


def ephemeral_low(path: Path = EPHEMERAL_RANGE) -> int | None:
    """The lowest port of the kernel's ephemeral range, or None where it cannot be read."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_ports(n: int, host: str = LOOPBACK, *, low: int | None = None) -> list[int]:
    """``n`` distinct ports free on ``host`` right now (all held open together while
    picked, so none is handed out twice). ``host=""`` asks for ports free on every
    interface, as a Ray node binding ``0.0.0.0`` needs. ``low`` is the ephemeral range's
    lowest port (read from the kernel unless given)."""
    if n < 1:
        raise ValueError(f"free_ports: n must be at least 1, got {n}")
    low = ephemeral_low() if low is None else low
    room = range(ABOVE_RAY_WORKERS, low) if low is not None else range(0)
    socks: list[socket.socket] = []
    try:
        if len(room) >= MIN_ROOM:
            for port in random.sample(room, min(len(room), 50 * n)):  # bounded tries
                sock = _bound(host, port)
                if sock is not None:
                    socks.append(sock)
                    if len(socks) == n:
                        break
        while len(socks) < n:  # too little room, or most of it taken: the kernel picks
            sock = _bound(host, 0)
            if sock is None:
                raise OSError(f"free_ports: cannot bind any port on {host or 'every interface'}")
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = LOOPBACK) -> int:
    """One port free on ``host`` (loopback unless told) right now."""
    return free_ports(1, host)[0]


def _bound(host: str, port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    return sock

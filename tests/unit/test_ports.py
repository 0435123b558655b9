"""Ports for servers a local run starts later (:mod:`driver_review.sim.ports`): picked
below the kernel's ephemeral range, where no outgoing connection takes its local port,
and above Ray's worker ports."""

from __future__ import annotations

import socket
from pathlib import Path

from driver_review.sim.ports import ABOVE_RAY_WORKERS, ephemeral_low, free_ports


def test_ports_are_picked_between_rays_workers_and_the_ephemeral_range() -> None:
    ports = free_ports(20, low=40000)
    assert len(set(ports)) == 20
    assert all(ABOVE_RAY_WORKERS <= p < 40000 for p in ports), ports


def test_with_too_little_room_below_the_ephemeral_range_the_kernel_picks() -> None:
    ports = free_ports(3, low=ABOVE_RAY_WORKERS + 10)
    assert len(set(ports)) == 3
    kernels = ephemeral_low() or 1024
    assert all(p >= kernels for p in ports), ports  # from the kernel's own range


def test_a_picked_port_can_be_bound_and_listened_on() -> None:
    (port,) = free_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_the_ephemeral_range_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    good, bad, missing = tmp_path / "good", tmp_path / "bad", tmp_path / "missing"
    good.write_text("32768\t60999\n")
    bad.write_text("none\n")
    assert ephemeral_low(good) == 32768
    assert ephemeral_low(bad) is None and ephemeral_low(missing) is None

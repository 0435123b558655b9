"""Subcommands that live above the library, found by entry point.

The library (``driver_review``) never imports the Serve app (``serve_app``) or the
benchmark (``jobs.bench``): they import it. So ``driver-review serve``, ``demo`` and
``bench`` are contributed by those packages through the ``driver_review.commands`` entry
point group (``pyproject.toml``), each a :class:`Command`; the CLI lists what is installed.
A command whose package cannot be imported is still listed, and running it says why in
one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

GROUP = "driver_review.commands"


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def installed() -> list[Command]:
    """Every command of the group, by name; one that fails to load explains itself."""
    found: list[Command] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            command = ep.load()
            if not isinstance(command, Command):
                raise TypeError(f"{ep.value} is not a driver_review.commands.Command")
        except Exception as exc:
            command = _broken(ep.name, ep.value, exc)
        found.append(command)
    return found


def _broken(name: str, where: str, exc: Exception) -> Command:
    reason = f"cannot load {where}: {type(exc).__name__}: {exc}".splitlines()[0]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(_: argparse.Namespace) -> int:
        raise CommandUnavailable(f"{name}: {reason}")

    return Command(name, f"(unavailable: {reason})", add_arguments, run)


class CommandUnavailable(Exception):
    """An installed command whose package cannot be imported here."""

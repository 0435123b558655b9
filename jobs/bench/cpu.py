"""CPU seconds spent by the local Ray node's processes, read from ``/proc`` (Linux).

The ceiling scenario divides decisions by the CPU the Ray node spent on them: the raylet,
the GCS and every process under the raylet (workers, actors, tasks). Both approaches run
in that node, so the same instrument measures both.

A process that exits takes its CPU with it: the raylet does not add the workers it reaps
to its own ``cutime`` (an actor that burnt 2 s and was killed leaves 0.08 s behind), so a
reading after a sweep stopped its actors misses them. :class:`TreeCpu` reads the tree
every ``interval_s`` while the run lasts and counts each process up to its last reading.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
READ_EVERY_S = 0.25  # TreeCpu's default: a reading costs about 1 ms


def _stat(pid: int) -> tuple[int, float, float] | None:
    """``(ppid, own cpu_s, reaped children's cpu_s)`` of one process, or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    # After the command: state ppid ... utime(11) stime(12) cutime(13) cstime(14).
    own = (int(fields[11]) + int(fields[12])) * _TICK_S
    reaped = (int(fields[13]) + int(fields[14])) * _TICK_S
    return int(fields[1]), own, reaped


def local_ray_pids() -> list[int] | None:
    """PIDs of the raylet and GCS this process started (``ray.init`` of a local Ray);
    None when it joined a cluster it did not start (the processes are not its to read)."""
    try:
        from ray._private import worker
    except ImportError:
        return None
    node = getattr(worker, "_global_node", None)
    procs = getattr(node, "all_processes", None) or {}
    pids = [
        info.process.pid
        for key in ("raylet", "gcs_server")
        for info in procs.get(key, [])
        if getattr(info, "process", None) is not None
    ]
    return pids or None


def tree_cpu_s(roots: list[int]) -> dict[int, float]:
    """CPU seconds so far per process of the trees under ``roots`` (roots include what
    their reaped children spent)."""
    if not Path("/proc").is_dir():
        return {}
    stats: dict[int, tuple[int, float, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, float] = {}
    todo = [r for r in roots if r in stats]
    for root in todo:
        out[root] = stats[root][1] + stats[root][2]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in out:
                out[child] = stats[child][1]
                todo.append(child)
    return out


def spent_s(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`tree_cpu_s` readings (processes that started
    in between count from zero)."""
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())


class TreeCpu:
    """CPU seconds the trees under ``roots`` spend inside the ``with`` block, read every
    ``interval_s`` (from a thread) so that a process exiting meanwhile counts up to its
    last reading: at most ``interval_s`` of its CPU is missed."""

    def __init__(self, roots: list[int], *, interval_s: float = READ_EVERY_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.roots = roots
        self.interval_s = interval_s
        self.before: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.readings = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _read(self) -> None:
        now = tree_cpu_s(self.roots)
        with self._lock:
            for pid, cpu_s in now.items():
                # max: a pid reused by a newer process does not undo the older one's
                self.last[pid] = max(self.last.get(pid, 0.0), cpu_s)
            self.readings += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> TreeCpu:
        self.before = tree_cpu_s(self.roots)
        self.last = dict(self.before)
        self._thread = threading.Thread(target=self._loop, name="tree-cpu", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()

    @property
    def spent_s(self) -> float:
        with self._lock:
            return spent_s(self.before, self.last)

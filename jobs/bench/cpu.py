"""CPU seconds spent by the local Ray node's processes, read from ``/proc`` (Linux).

The ceiling scenario divides decisions by the CPU the Ray node spent on them: the raylet,
the GCS and every process under the raylet (workers, actors, tasks), plus what the
raylet's children that exited meanwhile spent (``cutime``/``cstime`` of the raylet, which
reaps them). Both approaches run in that node, so the same instrument measures both.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


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

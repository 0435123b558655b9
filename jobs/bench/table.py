"""The README's benchmark table, rendered from a ``bench.json`` — never typed by hand.

``python -m jobs.bench.table docs/bench.json --readme README.md`` rewrites the
part of the README between ``<!-- bench:start -->`` and ``<!-- bench:end -->``;
without ``--readme`` it prints the table. A test keeps the README equal to the rendering
of the committed ``docs/bench.json``, so a figure in the README is always one a run wrote.

Every target of every scenario becomes a row (scenario, figure, value, target, met), and
the heading says which run it was: full or quick, when, on what machine, how loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def render(doc: dict[str, Any]) -> str:
    bench, machine = doc.get("bench", {}), doc.get("machine", {})
    load = machine.get("load_average_start") or []
    kind = "quick" if bench.get("quick") else "full"
    lines = [
        f"From `docs/bench.json`: a {kind} run of {_scenarios(bench)} started "
        f"{str(bench.get('started_at', '?'))[:16]}"
        f" UTC, {_num(bench.get('elapsed_s'))} s, on {machine.get('cores', '?')} cores "
        f"(load average {_num(load[0]) if load else '?'} at the start; Python "
        f"{machine.get('python', '?')}, Ray {machine.get('ray', '?')}). "
        f"{doc.get('summary', {}).get('targets_met', 0)} targets met, "
        f"{doc.get('summary', {}).get('targets_missed', 0)} missed.",
        "",
        "| scenario | figure | value | target | met |",
        "|---|---|---|---|---|",
    ]
    for name, scenario in doc.get("scenarios", {}).items():
        if "error" in scenario:
            lines.append(f"| {name} | (did not run) | {_cell(scenario['error'])} | | no |")
            continue
        first = True
        for key, t in scenario.get("targets", {}).items():
            note = f" ({t['note']})" if t.get("note") else ""
            lines.append(
                f"| {name if first else ''} | `{key}`{_cell(note)} | "
                f"{_value(key, t.get('value'))} | {_target(key, t.get('target', ''))} | "
                f"{'yes' if t.get('met') else '**no**'} |"
            )
            first = False
        for error in scenario.get("errors", []):
            lines.append(f"| {name if first else ''} | error | {_cell(str(error))} | | no |")
            first = False
    for line in doc.get("summary", {}).get("errors", []):
        lines.append(f"\nError: {_cell(line)}")
    return "\n".join(lines) + "\n"


def _scenarios(bench: dict[str, Any]) -> str:
    only = bench.get("only") or []
    return ", ".join(only) if only else "every scenario"


def _value(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and key.endswith("_share"):
        return f"{value:.2%}"
    return _num(value)


def _target(key: str, text: str) -> str:
    """``">= 0.95"`` as ``≥ 0.95``; a share's threshold in percent (``<= 0.01`` → ``≤ 1%``)."""
    op, _, threshold = text.partition(" ")
    shown = {">=": "≥", "<=": "≤"}.get(op, op)
    if key.endswith("_share"):
        try:
            return f"{shown} {float(threshold) * 100:g}%"
        except ValueError:
            pass
    return f"{shown} {threshold}".strip()


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def replace_section(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README: markers {START} ... {END} not found in order")
    return readme[: start + len(START)] + "\n" + table + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.table")
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--readme", type=Path, help="rewrite this README's benchmark table")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.bench_json.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.bench_json}: {exc}", file=sys.stderr)
        return 2
    table = render(doc)
    if args.readme is None:
        sys.stdout.write(table)
        return 0
    try:
        args.readme.write_text(replace_section(args.readme.read_text(), table))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

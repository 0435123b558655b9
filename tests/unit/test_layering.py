"""Dependencies point one way: ``jobs`` (sweeps, the benchmark) → ``serve_app`` (the Serve
app) → ``driver_review`` (the library). Read from the code's syntax tree, imports inside
functions included, so a lazy import cannot hide a wrong-way dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: package -> the packages it must never import
FORBIDDEN = {"driver_review": ("serve_app", "jobs"), "serve_app": ("jobs",)}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 5
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in _imports(path)
        if name.split(".")[0] in FORBIDDEN[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_each_environment_variable_is_named_once() -> None:
    from driver_review import env

    names = [v for k, v in vars(env).items() if k.isupper()]
    for package in ("driver_review", "serve_app", "jobs"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "env.py" and path.parent.name == "driver_review":
                continue
            text = path.read_text()
            for name in names:
                assert f'"{name}"' not in text and f"'{name}'" not in text, (
                    f"{path.relative_to(ROOT)} spells {name}: use driver_review.env"
                )

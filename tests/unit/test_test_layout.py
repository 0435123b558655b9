"""The test tree's own layering: shared helpers live in ``tests/support`` and every layer
imports them from there. No test module imports another test module, no layer imports
another layer's files, and ``tests/support`` imports nothing from the layers, so a layer
can be moved, run or deleted alone. Parsed with ``ast``: nothing is imported to check."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "integration", "faults")
SHARED = "support"


def _files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _local_names() -> set[str]:
    """Basenames of every module in the tree: pytest's rootdir insertion makes a bare
    ``import cluster`` or ``from test_governor import …`` work, which hides a dependency."""
    return {p.stem for p in _files()} - {"__init__"}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` for every import anywhere in the file (also inside functions)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: the layers have no packages to be relative in
                found.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def violations(where: str, source: str, local: set[str]) -> list[str]:
    """Why each import of the file at ``where`` (a path relative to ``tests/``) breaks the
    layering, one line each; ``local`` holds the tree's module basenames."""
    parts = where.split("/")
    layer = parts[0] if len(parts) > 1 else None
    out: list[str] = []
    for line, module in _imported(ast.parse(source, filename=where)):
        names = module.split(".")
        why = None
        if module.startswith("."):
            why = "a relative import; import shared helpers from tests.support"
        elif names[0] in local and names[0] != "tests":
            why = "a bare import of a module in tests/ (it works only through pytest's sys.path)"
        elif names[0] != "tests" or len(names) == 1:
            continue
        elif any(n.startswith("test_") or n == "conftest" for n in names[1:]):
            why = "imports a test module; move what it needs into tests/support"
        elif names[1] == SHARED:
            continue
        elif layer == SHARED:
            why = "tests/support imports a layer's file; it must stand alone"
        elif names[1] not in LAYERS:
            why = "imports a file outside tests/support; move it into tests/support"
        elif names[1] != layer:
            why = f"imports another layer's file ({names[1]}); move it into tests/support"
        if why:
            out.append(f"{where}:{line}: {module}: {why}")
    return out


def test_no_test_file_imports_a_test_module_or_another_layers_helpers() -> None:
    local = _local_names()
    found = [
        v
        for path in _files()
        for v in violations(path.relative_to(TESTS).as_posix(), path.read_text(), local)
    ]
    assert not found, "\n".join(found)


def test_module_basenames_are_unique_across_the_tree() -> None:
    """tests/unit and tests/integration have no ``__init__.py``: two files of the same name
    make pytest refuse to collect the whole suite."""
    names = Counter(p.stem for p in _files() if p.stem not in ("__init__", "conftest"))
    twice = sorted(n for n, c in names.items() if c > 1)
    assert not twice, f"module basenames used more than once in tests/: {twice}"


def test_the_layers_and_support_are_where_this_test_looks() -> None:
    for name in (*LAYERS, SHARED):
        assert (TESTS / name).is_dir(), name
    assert len(_files()) > 50


LOCAL = {"test_governor", "test_checks", "cluster", "check_server", "other_vendor", "s3"}


@pytest.mark.parametrize(
    ("where", "source", "why"),
    [
        ("unit/test_a.py", "from test_governor import simulate", "bare import"),
        (
            "unit/test_a.py",
            "from tests.unit.test_governor import simulate",
            "imports a test module",
        ),
        ("unit/test_a.py", "import tests.unit.test_checks", "imports a test module"),
        ("integration/test_a.py", "from cluster import Cluster", "bare import"),
        ("faults/test_a.py", "from tests.integration.cluster import Cluster", "another layer's"),
        ("integration/test_a.py", "from tests.faults.helpers import start_live", "another layer's"),
        ("unit/test_a.py", "from tests.check_server import CheckServer", "outside tests/support"),
        (
            "integration/test_a.py",
            "from tests.conftest import ray_session",
            "imports a test module",
        ),
        ("support/live.py", "from tests.faults.s3 import S3Server", "must stand alone"),
        ("unit/test_a.py", "from .helpers import x", "relative import"),
        ("unit/test_a.py", "def f():\n    from tests.faults import helpers\n", "another layer's"),
    ],
)
def test_a_forbidden_import_is_named_with_its_reason(where: str, source: str, why: str) -> None:
    (found,) = violations(where, source, LOCAL)
    assert found.startswith(f"{where}:") and why in found, found


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("unit/test_a.py", "from tests.support.fakes import FakeCatalog"),
        ("integration/test_a.py", "from tests.integration.other_vendor import HubServer"),
        ("faults/test_a.py", "from tests.faults.s3 import S3Server"),
        ("support/live.py", "from tests.support.net import free_port"),
        ("conftest.py", "from tests.support.serve import shutdown_serve"),
        ("unit/test_a.py", "import ray\nfrom driver_review.config import load_config"),
    ],
)
def test_allowed_imports_pass(where: str, source: str) -> None:
    assert violations(where, source, LOCAL) == []

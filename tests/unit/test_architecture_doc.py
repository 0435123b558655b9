"""ARCHITECTURE.md cannot rot silently: every file path and every dotted code name it puts
in backticks must still exist in the tree.

Names are resolved from the source with ``ast`` (no imports, so no Ray): a module path
(``driver_review.runtime.system.start_system``, or ``module:attr``), a module's short name
(``system.start_system``), a class or function defined anywhere in the project
(``OrchestratorCore.intake``), or a pipeline-file key (``window.lease_s``, walked through
the pydantic models of :mod:`driver_review.config`). A span whose first part is a library
outside the project (``ray.kill``) is left alone.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
PACKAGES = ("driver_review", "serve_app", "jobs", "tests")
#: First parts that name libraries, not this code: spans starting so are not checked.
EXTERNAL = frozenset(
    {"ray", "serve", "asyncio", "pyarrow", "httpx", "uvicorn", "numpy", "pydantic", "fastapi"}
)
_SKIP_DIRS = frozenset({".git", ".venv", "__pycache__", "node_modules", "data"})

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[\w.-]+(?:/[\w.-]+)*\.(?:py|yaml|yml|md|json|toml)$|^[\w.-]+(?:/[\w.-]+)*/$")
_NAME = re.compile(r"^[A-Za-z_]\w*(?:[.:][A-Za-z_]\w*)+(?:\(\))?$")
#: A lone identifier that can only be code: ``CamelCase``, ``CONSTANT``, ``_private``.
_IDENT = re.compile(r"^_?[A-Z][a-z0-9]+[A-Za-z0-9]*$|^_?[A-Z][A-Z0-9_]{2,}$|^_[a-z]\w*$")
#: Environment variables are named as strings in the code, not as identifiers.
_ENV_PREFIX = "DRIVER_REVIEW_"


def spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks (a diagram's backticks pair with nothing)."""
    return _SPAN.findall(_FENCE.sub("", text))


# -- the project's source, indexed ------------------------------------------------------
@functools.cache
def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages (but this
    one: the names it makes up to fail on must not resolve)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(_modules()[module].read_text())


def _members(body: list[ast.stmt]) -> dict[str, ast.AST | str | None]:
    """Names a module or class body defines: a def or class (its node), an import (the
    dotted name it came from), anything assigned (None: nothing further to walk)."""
    out: dict[str, ast.AST | str | None] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _class_members(cls: ast.ClassDef) -> dict[str, ast.AST | str | None]:
    """A class's body, plus the attributes its methods set on ``self``."""
    out = _members(cls.body)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            out.setdefault(node.attr, None)
    return out


def _walk(scope: ast.AST | str | None, parts: list[str]) -> bool:
    """Whether ``parts`` resolve, one attribute at a time, from ``scope``."""
    if not parts:
        return True
    if isinstance(scope, str):  # an imported name, followed to where it is defined
        return _resolve_dotted(scope.split(".") + parts)
    if isinstance(scope, ast.Module):
        members = _members(scope.body)
    elif isinstance(scope, ast.ClassDef):
        members = _class_members(scope)
    else:
        return False
    return parts[0] in members and _walk(members[parts[0]], parts[1:])


def _resolve_dotted(parts: list[str]) -> bool:
    """A full module path, then attributes within it (the longest module prefix first)."""
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in _modules():
            return _walk(_tree(module), parts[cut:])
    return False


@functools.cache
def _by_short_name() -> dict[str, list[ast.AST]]:
    """Modules by their last dotted part, and top-level classes/functions by name."""
    index: dict[str, list[ast.AST]] = {}
    for module in _modules():
        tree = _tree(module)
        index.setdefault(module.rsplit(".", 1)[-1], []).append(tree)
        for name, node in _members(tree.body).items():
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                index.setdefault(name, []).append(node)
    return index


def _config_key(parts: list[str]) -> bool:
    """A pipeline-file key such as ``window.lease_s``, through the pydantic models."""
    from pydantic import BaseModel

    from driver_review.config import PipelineConfig

    model: object = PipelineConfig
    for part in parts:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        annotation = fields[part].annotation
        candidates = getattr(annotation, "__args__", ()) or (annotation,)
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return True


def name_problem(span: str) -> str | None:
    """Why a dotted span names nothing in the code, or None when it resolves."""
    text = span.removesuffix("()")
    if ":" in text:  # module:attr, as in pipeline files and `serve run`
        module, _, attr = text.partition(":")
        ok = _resolve_dotted([*module.split("."), *attr.split(".")])
        return None if ok else f"`{span}`: no such module attribute"
    parts = text.split(".")
    if parts[0] in EXTERNAL:
        return None
    if _resolve_dotted(parts) or _config_key(parts):
        return None
    if any(_walk(scope, parts[1:]) for scope in _by_short_name().get(parts[0], [])):
        return None
    return f"`{span}`: names nothing in the code (module, class, function or config key)"


@functools.cache
def _all_names() -> frozenset[str]:
    """Every name defined (or imported) by a module or class body, or set on ``self``."""
    names: set[str] = set()
    for module in _modules():
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Module):
                names.update(_members(node.body))
            elif isinstance(node, ast.ClassDef):
                names.update(_class_members(node))
    return frozenset(names)


def ident_problem(span: str) -> str | None:
    """Why a lone identifier names nothing in the code (an environment variable: why no
    code reads it), or None."""
    if span.startswith(_ENV_PREFIX):
        quoted = (f'"{span}"', f"'{span}'")
        for path in _modules().values():
            if any(q in path.read_text() for q in quoted):
                return None
        return f"`{span}`: no code names this environment variable"
    return None if span in _all_names() else f"`{span}`: defined nowhere in the code"


def path_problem(span: str) -> str | None:
    """Why a path span names no file or directory, or None when it exists: from the root
    or from a package (``runtime/pool.py``); a bare file name (no ``/``) anywhere."""
    if "/" in span:
        bases = (ROOT, *(ROOT / package for package in PACKAGES))
        found = any((base / span).exists() for base in bases)
        return None if found else f"`{span}`: no such path"
    for _dir, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        if span in files:
            return None
    return f"`{span}`: no file of that name"


def problems(text: str) -> tuple[list[str], int, int]:
    """Every broken reference of ``text``, and how many paths and names were checked."""
    found: list[str] = []
    paths = names = 0
    for span in dict.fromkeys(spans(text)):
        if _PATH.match(span):
            paths += 1
            problem = path_problem(span)
        elif _NAME.match(span):
            names += 1
            problem = name_problem(span)
        elif _IDENT.match(span):
            names += 1
            problem = ident_problem(span)
        else:
            continue
        if problem:
            found.append(problem)
    return found, paths, names


# -- tests ------------------------------------------------------------------------------
def test_every_reference_in_architecture_md_exists() -> None:
    found, paths, names = problems(DOC.read_text())
    assert not found, "ARCHITECTURE.md names what is not there:\n" + "\n".join(found)
    # The document is a map of the code: it must go on naming it, or this checks nothing.
    assert paths >= 20 and names >= 40, (paths, names)


@pytest.mark.parametrize(
    "span",
    [
        "driver_review/runtime/no_such_module.py",
        "driver_review/runtime/",  # exists: the directory form
        "runtime/pool.py",  # exists: relative to a package
        "runtime/no_such_module.py",
    ],
)
def test_paths_are_checked(span: str) -> None:
    expected = "no_such" in span
    assert (path_problem(span) is not None) is expected


@pytest.mark.parametrize(
    ("span", "resolves"),
    [
        ("driver_review.runtime.system.start_system", True),
        ("system.start_system", True),
        ("OrchestratorCore.intake", True),
        ("OrchestratorService.core", True),  # set on self in __init__
        ("driver_review.checks.run_stage", True),  # re-exported by the package
        ("driver_review.catalog.http:HttpCatalog", True),
        ("window.lease_s", True),
        ("ray.kill", True),  # a library: not this document's to check
        ("driver_review.runtime.system.start_systems", False),
        ("system.stop_everything", False),
        ("OrchestratorCore.no_such_method", False),
        ("NoSuchClass.intake", False),
        ("window.no_such_key", False),
        ("driver_review.catalog.http:NoSuchCatalog", False),
    ],
)
def test_names_are_resolved(span: str, resolves: bool) -> None:
    assert (name_problem(span) is None) is resolves


@pytest.mark.parametrize(
    ("span", "resolves"),
    [
        ("OrchestratorCore", True),
        ("DEMAND_WAIT_S", True),
        ("_keep_alive", True),
        ("DRIVER_REVIEW_HEAD_RESOURCE", True),
        ("OrchestratorKernel", False),
        ("DEMAND_WAIT_MS", False),
        ("_keep_dead", False),
        ("DRIVER_REVIEW_NO_SUCH_SETTING", False),
    ],
)
def test_identifiers_are_resolved(span: str, resolves: bool) -> None:
    assert _IDENT.match(span)
    assert (ident_problem(span) is None) is resolves


def test_fenced_blocks_are_not_read_as_spans() -> None:
    text = "a `system.start_system`\n```\n `not.checked` ``` \n```\nand `x/y.py`"
    assert spans(text) == ["system.start_system", "x/y.py"]

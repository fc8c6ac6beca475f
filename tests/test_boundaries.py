"""The package's import boundaries, read from the source with ``ast`` (nothing is imported).

Every import counts wherever it sits (module level, inside a function, under ``TYPE_CHECKING``):
a function-local import is still a dependency. Each rule is also run on a small synthetic package
that breaks it, so a checker that silently finds nothing fails here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "phenoforge"

HIGHER_THAN_ENGINE = ("phenoforge.agent", "phenoforge.athena", "phenoforge.eval", "phenoforge.dashboard")
DATABASE_MODULES = ("duckdb", "sqlite3", "phenoforge.engine", "phenoforge.app_state")
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. phenoforge.engine.curated
    targets: tuple[str, ...]  # what it imports, absolute and dotted (``from a import b``: a, a.b)
    line: int
    guarded: bool  # inside a try whose handlers catch ImportError


def module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        for name in names:
            if isinstance(name, ast.Name) and name.id in IMPORT_ERRORS:
                return True
            if isinstance(name, ast.Attribute) and name.attr in IMPORT_ERRORS:
                return True
    return False


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute dotted names a node imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        return [source] + [f"{source}.{alias.name}" for alias in node.names if alias.name != "*"]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def imports_of(path: Path, package_dir: Path) -> Iterator[Import]:
    module = module_name(path, package_dir)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, guarded: bool) -> Iterator[Import]:
        targets = _targets(node, module, is_package)
        if targets:
            yield Import(module, tuple(targets), getattr(node, "lineno", 0), guarded)
        if isinstance(node, ast.Try):
            inner = guarded or _catches_import_error(node)
            for child in node.body:
                yield from walk(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from walk(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, guarded)

    yield from walk(tree, False)


def _within(names: tuple[str, ...], prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for name in names for prefix in prefixes)


def boundary_violations(package_dir: Path) -> list[str]:
    """Every broken layering rule in the package at ``package_dir``, as ``module:line: why``."""
    root = package_dir.name
    problems: list[str] = []
    for path in sorted(package_dir.rglob("*.py")):
        for found in imports_of(path, package_dir):
            where, what = f"{found.module}:{found.line}", found.targets[0]
            if _within(found.targets, ("streamlit",)):
                problems.append(f"{where}: imports {what} (the package never imports streamlit)")
            if found.module == f"{root}.eval.metrics" and _within(
                found.targets, tuple(name.replace("phenoforge", root) for name in DATABASE_MODULES)
            ):
                problems.append(f"{where}: imports {what} (metrics import no database)")
            if _within((found.module,), (f"{root}.engine",)) and _within(
                found.targets, tuple(name.replace("phenoforge", root) for name in HIGHER_THAN_ENGINE)
            ):
                problems.append(f"{where}: imports {what} (the engine imports no higher layer)")
            if found.guarded and _within(found.targets, (root,)):
                problems.append(
                    f"{where}: imports {what} inside try/except ImportError "
                    "(import the package's own modules normally, so a typo fails loudly)"
                )
    return problems


def test_the_package_keeps_its_boundaries() -> None:
    assert boundary_violations(PACKAGE_DIR) == []


def test_the_checker_reads_the_real_package() -> None:
    """Guards against a checker that passes because it parsed nothing."""
    found = {t for path in PACKAGE_DIR.rglob("*.py") for i in imports_of(path, PACKAGE_DIR) for t in i.targets}
    assert {"duckdb", "phenoforge.engine.curated", "pydantic"} <= found


def _write(root: Path, relative: str, source: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        init = root / parent / "__init__.py"
        if parent != Path(".") and not init.exists():
            init.write_text("")
    path.write_text(source)


@pytest.fixture
def clean_package(tmp_path: Path) -> Path:
    """A tiny package with the real layout and only allowed imports."""
    package = tmp_path / "phenoforge"
    _write(tmp_path, "phenoforge/__init__.py", "")
    _write(tmp_path, "phenoforge/engine/curated.py", "import duckdb\nfrom phenoforge.engine import models\n")
    _write(tmp_path, "phenoforge/engine/models.py", "from pydantic import BaseModel\n")
    _write(tmp_path, "phenoforge/eval/metrics.py", "import math\nfrom collections.abc import Sequence\n")
    _write(tmp_path, "phenoforge/athena/loader.py", "from phenoforge.engine.curated import load\n")
    _write(tmp_path, "phenoforge/engine/dense.py", "try:\n    import torch\nexcept ImportError:\n    torch = None\n")
    return package


def test_a_clean_synthetic_package_passes(clean_package: Path) -> None:
    assert boundary_violations(clean_package) == []


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        ("phenoforge/dashboard/page.py", "import streamlit as st\n", "never imports streamlit"),
        ("phenoforge/agent/x.py", "def f():\n    from streamlit import session_state\n", "never imports streamlit"),
        ("phenoforge/eval/metrics.py", "import duckdb\n", "metrics import no database"),
        ("phenoforge/eval/metrics.py", "from phenoforge.engine.db import connect\n", "metrics import no database"),
        ("phenoforge/eval/metrics.py", "import sqlite3\n", "metrics import no database"),
        ("phenoforge/engine/curated.py", "from phenoforge.athena.mapping import f\n", "imports no higher layer"),
        ("phenoforge/engine/curated.py", "def f():\n    from ..athena import mapping\n", "imports no higher layer"),
        ("phenoforge/engine/hybrid.py", "from phenoforge import eval\n", "imports no higher layer"),
        ("phenoforge/engine/hybrid.py", "import phenoforge.agent.nodes\n", "imports no higher layer"),
        (
            "phenoforge/engine/hybrid.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from phenoforge.dashboard import x\n",
            "imports no higher layer",
        ),
        (
            "phenoforge/cli.py",
            "def f():\n    try:\n        from phenoforge.engine import libraries\n"
            "    except ImportError:\n        pass\n",
            "inside try/except ImportError",
        ),
        (
            "phenoforge/dashboard/resources.py",
            "import importlib\ntry:\n    m = importlib.import_module('phenoforge.engine.dense')\n"
            "except (ModuleNotFoundError, ValueError):\n    m = None\n",
            "inside try/except ImportError",
        ),
    ],
)
def test_a_synthetic_violation_is_caught(clean_package: Path, relative: str, source: str, expected: str) -> None:
    _write(clean_package.parent, relative, source)
    problems = boundary_violations(clean_package)
    assert len(problems) == 1, problems
    assert expected in problems[0]
    assert problems[0].startswith(module_name(clean_package.parent / relative, clean_package))


def test_relative_imports_resolve_against_the_importing_module(tmp_path: Path) -> None:
    _write(tmp_path, "phenoforge/engine/__init__.py", "from . import curated\nfrom ..eval import metrics\n")
    init = tmp_path / "phenoforge/engine/__init__.py"
    targets = {t for i in imports_of(init, tmp_path / "phenoforge") for t in i.targets}
    assert {"phenoforge.engine.curated", "phenoforge.eval.metrics"} <= targets


# --- the layer order and the absence of import circles ----------------------------------------------

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "phenoforge",
            "phenoforge.errors",
            "phenoforge.config",
            "phenoforge.storage",
            "phenoforge.locks",
            "phenoforge.memory",
            "phenoforge.trusted",
            "phenoforge.csv_safe",
            "phenoforge.console",
        ),
    ),
    ("engine", ("phenoforge.engine",)),
    ("libraries", ("phenoforge.libraries",)),
    ("scoring", ("phenoforge.eval",)),
    ("set building", ("phenoforge.setbuild",)),
    ("methods", ("phenoforge.methods",)),
    (
        "runs",
        (
            "phenoforge.eval.harness",
            "phenoforge.eval.sweep",
            "phenoforge.app_state",
            "phenoforge.prune",
            "phenoforge.artifacts",
            "phenoforge.lists.store",
            "phenoforge.lists.signing",
        ),
    ),
    ("agent", ("phenoforge.agent",)),
    ("lists", ("phenoforge.lists",)),
    ("decomposition", ("phenoforge.eval.decomposition", "phenoforge.eval.decomposition_cases")),
    ("athena", ("phenoforge.athena",)),
    ("cli", ("phenoforge.cli", "phenoforge.__main__")),
    ("dashboard", ("phenoforge.dashboard",)),
)
"""From the bottom: a module imports only its own layer and the layers below. A module belongs to the layer
of its longest listed prefix (``phenoforge.eval`` is the scoring core; the reference API's runners
``eval.harness`` and ``eval.decomposition`` stand above the methods and the agent they run)."""


def layer_of(module: str, root: str = "phenoforge") -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for rank, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            prefix = prefix.replace("phenoforge", root, 1)
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def import_graph(package_dir: Path) -> dict[str, dict[str, int]]:
    """Module -> the package's modules it imports (each with the first line that does)."""
    paths = sorted(package_dir.rglob("*.py"))
    modules = {module_name(path, package_dir) for path in paths}
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for path in paths:
        for found in imports_of(path, package_dir):
            for target in found.targets:
                parts = target.split(".")
                while parts and ".".join(parts) not in modules:
                    parts.pop()
                resolved = ".".join(parts)
                if resolved and resolved != found.module:
                    graph[found.module].setdefault(resolved, found.line)
    return graph


def layer_violations(package_dir: Path) -> list[str]:
    root = package_dir.name
    problems = []
    for module, targets in sorted(import_graph(package_dir).items()):
        mine = layer_of(module, root)
        for target, line in sorted(targets.items()):
            theirs = layer_of(target, root)
            if mine is None or theirs is None:
                problems.append(f"{module}:{line}: {module if mine is None else target} is in no layer")
            elif theirs > mine:
                problems.append(f"{module}:{line}: imports {target} ({LAYERS[theirs][0]}, above {LAYERS[mine][0]})")
    return problems


def import_cycles(package_dir: Path) -> list[list[str]]:
    """Every group of modules that import each other, directly or round a circle (Tarjan's algorithm)."""
    graph = import_graph(package_dir)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_every_module_imports_only_its_layer_and_below() -> None:
    assert layer_violations(PACKAGE_DIR) == []


def test_the_package_has_no_import_circle() -> None:
    assert import_cycles(PACKAGE_DIR) == []


def test_the_layer_order_reads_the_real_package() -> None:
    graph = import_graph(PACKAGE_DIR)
    assert "phenoforge.engine.curated" in graph["phenoforge.eval.harness"] or any(
        target.startswith("phenoforge.engine") for target in graph["phenoforge.eval.harness"]
    )
    assert layer_of("phenoforge.eval.metrics") == 3 and layer_of("phenoforge.eval.harness") == 6


def test_a_synthetic_circle_is_caught(clean_package: Path) -> None:
    _write(clean_package.parent, "phenoforge/engine/models.py", "from phenoforge.engine import curated\n")
    assert import_cycles(clean_package) == [["phenoforge.engine.curated", "phenoforge.engine.models"]]


def test_a_longer_circle_inside_functions_is_caught(clean_package: Path) -> None:
    _write(clean_package.parent, "phenoforge/eval/a.py", "def f():\n    from phenoforge.eval import b\n")
    _write(clean_package.parent, "phenoforge/eval/b.py", "from phenoforge.eval.c import thing\n")
    _write(clean_package.parent, "phenoforge/eval/c.py", "import phenoforge.eval.a\n")
    assert import_cycles(clean_package) == [["phenoforge.eval.a", "phenoforge.eval.b", "phenoforge.eval.c"]]


def test_an_import_from_a_higher_layer_is_caught(clean_package: Path) -> None:
    _write(clean_package.parent, "phenoforge/setbuild/api.py", "from phenoforge.methods.base import Method\n")
    _write(clean_package.parent, "phenoforge/methods/base.py", "")
    problems = layer_violations(clean_package)
    assert problems == ["phenoforge.setbuild.api:1: imports phenoforge.methods.base (methods, above set building)"]

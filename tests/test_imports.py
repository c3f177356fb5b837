"""The product's import graph goes one way: analyzer -> dissectors -> reassembly.

A static scan (``ast``, nothing imported): every module of ``analyzer``, ``dissectors``
and ``reassembly`` (compiled extensions included, as leaves), and the imports each one
makes.  Two rules (docs/architecture.md, "Who may import whom"):

* no cycle among module-level imports (those that run when the module is imported;
  ``if TYPE_CHECKING:`` blocks excluded, imports inside functions too: they run later);
* the lower floors never reach up: ``reassembly`` imports neither ``dissectors`` nor
  ``analyzer``, ``dissectors`` does not import ``analyzer`` -- anywhere in the module
  (function-level imports included), nor by naming such a module in a string (a lazy
  ``importlib`` import, or ``python -m analyzer.cli`` in a subprocess).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analyzer", "dissectors", "reassembly")
# package -> the packages it must never import (or name as a module to run)
FORBIDDEN = {"reassembly": ("dissectors", "analyzer"), "dissectors": ("analyzer",)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    stem = parts[-1].split(".", 1)[0]  # x.py, x.cpython-311-...so
    names = [*parts[:-1]] + ([] if stem == "__init__" else [stem])
    return ".".join(names)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.suffix in (".py", ".so") and "__pycache__" not in path.parts:
                found.setdefault(_module_name(path), path)
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The product module ``name`` denotes (``pkg.mod.attr`` -> ``pkg.mod``), or None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        targets = [f"{base}.{a.name}" for a in node.names]
    for target in targets:
        found = _resolve(target)
        if found is not None and found != module:
            yield found


def _imports(module: str, path: Path, *, module_level: bool) -> set[str]:
    """What ``module`` imports: at module level only, or anywhere in it."""
    if path.suffix != ".py":
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    is_package = path.name == "__init__.py"

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.update(_imported(node, module, is_package))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
            elif module_level and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue  # runs when called, not when the module is imported
            else:  # compound statements (if, try, with, for, class, def): their bodies
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(inner)
                for handler in getattr(node, "handlers", ()):
                    visit(handler.body)

    visit(tree.body)
    return out


def _named_modules(path: Path) -> set[str]:
    """Product modules named by a string of the code (not a docstring): a lazy
    ``importlib.import_module("x.y")`` or ``python -m x.y``."""
    if path.suffix != ".py":
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    word = re.compile(r"(?:analyzer|dissectors|reassembly)(?:\.\w+)*\Z")
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings and word.match(n.value)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_scan_sees_the_product() -> None:
    assert {"analyzer.cli", "dissectors.api", "reassembly.engine",
            "dissectors.sdk.testing", "analyzer.testing"} <= set(MODULES)
    deps = _imports("analyzer.pipeline", MODULES["analyzer.pipeline"], module_level=True)
    assert {"dissectors.api", "reassembly.engine"} <= deps


def test_no_import_cycle() -> None:
    graph = {m: _imports(m, p, module_level=True) for m, p in MODULES.items()}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("lower", sorted(FORBIDDEN))
def test_lower_floors_never_import_upper_ones(lower: str) -> None:
    bad = []
    for module, path in MODULES.items():
        if module.split(".")[0] != lower:
            continue
        reached = _imports(module, path, module_level=False) | _named_modules(path)
        bad += [f"{module} -> {r}" for r in sorted(reached)
                if r.split(".")[0] in FORBIDDEN[lower]]
    assert bad == []


def test_the_api_does_not_import_the_test_helpers() -> None:
    path = MODULES["dissectors.api"]
    reached = _imports("dissectors.api", path, module_level=False) | _named_modules(path)
    assert not {m for m in reached if m.startswith("dissectors.sdk")}

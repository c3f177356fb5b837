"""No module under ``analyzer/`` reaches into a ``reassembly`` class's private members:
what a caller may change (a clock, which once-per-capture anomalies are reported, a
byte range) is a public parameter or hook, so ``reassembly`` can change its insides.

An AST scan, so it needs no types: a class of ``analyzer/`` whose base is imported from
``reassembly`` may not define or use (``self._x``, ``super()._x``) an underscore name
it did not assign or define itself, and no ``analyzer/`` module may call ``obj._m(...)`` where
``_m`` is a private method of a ``reassembly`` class and ``obj`` is not ``self``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _reassembly_private_methods() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "reassembly").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names |= {f.name for f in node.body
                          if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                          and _private(f.name)}
    return names


def _imported_from_reassembly(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reassembly"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _violations(path: Path, private_methods: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    ours = _imported_from_reassembly(tree)
    rel = path.relative_to(ROOT)
    found: list[str] = []
    subclass_nodes: set[int] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
        if not bases & ours:
            continue
        own = {t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign | ast.AnnAssign)
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
               if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
               and t.value.id == "self"}
        own |= {n.name for n in cls.body if isinstance(n, ast.FunctionDef)
                and n.name not in private_methods}
        for n in ast.walk(cls):
            subclass_nodes.add(id(n))
            if isinstance(n, ast.FunctionDef) and _private(n.name) and n.name in private_methods:
                found.append(f"{rel}:{n.lineno} {cls.name} overrides {n.name}")
            elif isinstance(n, ast.Attribute) and _private(n.attr) and n.attr not in own:
                target = n.value
                is_self = isinstance(target, ast.Name) and target.id == "self"
                is_super = (isinstance(target, ast.Call) and isinstance(target.func, ast.Name)
                            and target.func.id == "super")
                # ``self.network._x``: a private member of a reassembly part it holds
                is_held = isinstance(target, ast.Attribute) and _root(target) == "self"
                if is_self or is_super or is_held:
                    found.append(f"{rel}:{n.lineno} {cls.name} uses inherited {n.attr}")
    for n in ast.walk(tree):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in private_methods and id(n) not in subclass_nodes
                and not (isinstance(n.func.value, ast.Name)
                         and n.func.value.id in ("self", "cls"))):
            found.append(f"{rel}:{n.lineno} calls {n.func.attr}")
    return found


def test_analyzer_uses_no_private_member_of_reassembly() -> None:
    private_methods = _reassembly_private_methods()
    assert "_frames" in private_methods  # the scan sees reassembly's classes
    found = [v for path in sorted((ROOT / "analyzer").rglob("*.py"))
             for v in _violations(path, private_methods)]
    assert found == []


def test_the_scan_catches_an_override(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from reassembly.engine import Reassembler\n"
        "class R(Reassembler):\n"
        "    def _tick(self, ts):\n"
        "        self._out.append(ts)\n"
        "def f(net):\n"
        "    net._truncated(None, '')\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        got = _violations(bad, {"_tick", "_truncated"})
    finally:
        ROOT = saved
    assert got == ["bad.py:3 R overrides _tick", "bad.py:4 R uses inherited _out",
                   "bad.py:6 calls _truncated"]

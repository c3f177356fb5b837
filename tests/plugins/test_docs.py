"""docs/custom-dissectors.md: the generated API reference is current, and the tutorial's
code (its ``# step N`` blocks, in order) is a working dissector whose tests pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer import apidoc
from dissectors import registry as registry_module
from dissectors.api import Dissector, Field, TableSpec, Verdict
from dissectors.registry import Registry
from dissectors.schema import load_all_tables

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "custom-dissectors.md"


def test_api_reference_is_current() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert apidoc.splice(page, apidoc.render_reference()) == page, (
        "docs/custom-dissectors.md is stale: python -m analyzer.apidoc --write")


def test_apidoc_check_cli(tmp_path) -> None:
    stale = tmp_path / "page.md"
    stale.write_text(f"intro\n{apidoc.BEGIN}\nSTALE-CONTENT\n{apidoc.END}\noutro\n")
    assert apidoc.main(["--check", str(stale)]) == 1
    assert apidoc.main(["--write", str(stale)]) == 0
    assert apidoc.main(["--check", str(stale)]) == 0
    text = stale.read_text()
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "STALE-CONTENT" not in text
    with pytest.raises(ValueError, match="markers"):
        apidoc.splice("no markers", "x")


def test_every_export_is_documented() -> None:
    ref = apidoc.render_reference()
    import dissectors.api as api

    for name in api.__all__:
        assert f"#### `{name}`" in ref


def _tutorial() -> dict:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(# step \d+.*?)```", page, flags=re.S)
    assert [b.split("\n", 1)[0] for b in blocks] == [f"# step {i}" + b.split("\n", 1)[0][8:]
                                                     for i, b in enumerate(blocks, 1)]
    assert len(blocks) == 5
    ns: dict = {"__name__": "tutorial_memcached"}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), ns)
    return ns


def test_tutorial_code_runs_and_its_tests_pass() -> None:
    ns = _tutorial()
    tests = [k for k in ns if k.startswith("test_")]
    assert tests
    for name in tests:
        ns[name]()


# ----------------------------------------- docs/tables.md shows our own tables only


class _ForeignDissector(Dissector):
    name = "zz_foreign"
    tables = (TableSpec("zz_foreign_table", 1, "A plugin's table.",
                        (Field("x", __import__("pyarrow").int32(), "x"),)),)

    @classmethod
    def probe(cls, direction, prefix):
        return Verdict.NO

    @classmethod
    def session(cls, options):
        raise NotImplementedError


def test_load_all_tables_ignores_installed_plugins(monkeypatch) -> None:
    real = registry_module.discover

    def with_plugin() -> Registry:
        reg = real()
        reg.add(_ForeignDissector, "zz_foreign:X", "some-plugin")
        return reg

    monkeypatch.setattr(registry_module, "discover", with_plugin)
    try:
        ours = {s.name for s in load_all_tables()}
        assert "zz_foreign_table" not in ours and {"flows", "anomalies", "nats"} <= ours
        assert "zz_foreign_table" in {s.name for s in load_all_tables(plugins=True)}
        # registered by the call above, yet still not in our docs
        assert "zz_foreign_table" not in {s.name for s in load_all_tables()}
    finally:
        from dissectors.tables import unregister_table

        unregister_table("zz_foreign_table")

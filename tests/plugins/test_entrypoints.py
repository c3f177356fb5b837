"""dissectors.entrypoints against importlib.metadata, the definition it follows: the
same entry points in the same order, the same distribution names and versions, on the
installed environment and on crafted ``*.dist-info`` / ``*.egg-info`` trees (duplicate
and differently spelled names, comments, no entry points, a zip handed to the
reference)."""

from __future__ import annotations

import importlib
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from dissectors import entrypoints

GROUPS = ("msgcap.dissectors", "msgcap.payload_decoders", "console_scripts", "zz.test")


def _reference(group: str) -> list[tuple[str, str, str, str]]:
    return [(ep.name, ep.value, ep.group, (ep.dist.name or "") if ep.dist else "")
            for ep in metadata.entry_points(group=group)]


def _ours(group: str) -> list[tuple[str, str, str, str]]:
    return [(ep.name, ep.value, ep.group, ep.distribution)
            for ep in entrypoints.entry_points(group)]


def _dist(root: Path, dirname: str, name: str, version: str, eps: str | None) -> None:
    d = root / dirname
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    if eps is not None:
        (d / "entry_points.txt").write_text(eps)


@pytest.fixture
def crafted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _dist(one, "zz_Demo-1.0.dist-info", "zz-Demo", "1.0",
          "# a comment\n[zz.test]\n b =  pkg.mod:Obj.attr \n\n[other]\nx=y\n[zz.test]\na = m\n")
    _dist(one, "zz.demo-0.9.egg-info", "zz.demo", "0.9", "[zz.test]\nshadowed = m\n")
    _dist(one, "zz_plain-2.dist-info", "zz_plain", "2", None)
    _dist(two, "zz_demo-3.0.dist-info", "zz_demo", "3.0", "[zz.test]\nlater = m\n")
    _dist(two, "zz_other-1.dist-info", "zz_other", "1", "[zz.test]\na = other:X\n")
    for entry in (str(two), str(one)):
        monkeypatch.syspath_prepend(entry)
    importlib.invalidate_caches()
    return tmp_path


def test_installed_environment_reads_the_same() -> None:
    for group in GROUPS:
        assert _ours(group) == _reference(group), group
    for name in ("msgcap", "pyarrow", "numpy", "no-such-distribution-zz"):
        try:
            expected: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            expected = None
        assert entrypoints.version(name) == expected


def test_crafted_distributions_read_the_same(crafted: Path) -> None:
    ours = _ours("zz.test")
    assert ours == _reference("zz.test")
    # one's first zz_demo (in listing order) hides its other one and two's
    assert "later" not in [ep[0] for ep in ours] and ("a", "other:X") in [ep[:2] for ep in ours]
    for name in ("zz-demo", "ZZ_Demo", "zz_plain", "zz_other"):
        assert entrypoints.version(name) == metadata.version(name)


def test_a_zip_on_the_path_is_read_by_the_reference(
        crafted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = crafted / "dists.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zz_zipped-1.dist-info/METADATA", "Name: zz_zipped\nVersion: 1\n\n")
        z.writestr("zz_zipped-1.dist-info/entry_points.txt", "[zz.test]\nz = zipped\n")
    monkeypatch.syspath_prepend(str(archive))
    importlib.invalidate_caches()
    assert ("z", "zipped", "zz.test", "zz_zipped") in _ours("zz.test")
    assert _ours("zz.test") == _reference("zz.test")
    assert entrypoints.version("zz_zipped") == "1"


@pytest.mark.parametrize("value", [
    "a.b:C", "a.b : C.d ", "a", "a.b.c", "a:b[extra]", "a:b [x, y]", "a:", ":b", "a..b:c",
    "1a:b", "a-b:c", "a:b:c", "a:b.", "é.ü:ß", "a b", "",
])
def test_value_parts_read_as_the_pattern(value: str) -> None:
    match = metadata.EntryPoint.pattern.match(value.strip())
    expected = None if match is None else (match.group("module"), match.group("attr") or "")
    assert entrypoints.value_parts(value.strip()) == expected


def test_load_follows_the_value() -> None:
    ep = entrypoints.EntryPoint("x", "dissectors.entrypoints:EntryPoint.load", "g", "")
    assert ep.load() is entrypoints.EntryPoint.load
    assert entrypoints.EntryPoint("x", "dissectors.entrypoints", "g", "").load() is \
        sys.modules["dissectors.entrypoints"]


@pytest.mark.parametrize("metadata_text", [
    # a header line the email parser stops at (a space in its name): Name is then absent
    "Metadata-Version: 2.1\nSome Thing: x\nName: zz_odd\nVersion: 1\n\n",
    # a form feed inside a value: the email parser splits lines only at CR/LF
    "Metadata-Version: 2.1\nName: zz_odd\nVersion: 1\x0c2\n\n",
])
def test_odd_metadata_reads_as_the_reference_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata_text: str) -> None:
    d = tmp_path / "zz_odd-1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(metadata_text)
    (d / "entry_points.txt").write_text("[zz.test]\nodd = m\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert _ours("zz.test") == _reference("zz.test")
    assert entrypoints.version("zz_odd") == metadata.version("zz_odd")

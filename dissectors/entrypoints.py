"""Installed entry points and distribution versions, read without ``importlib.metadata``.

Why: every ``msgcap`` run reads the ``msgcap.dissectors`` group (and the payload decoders'
group when it decodes) and msgcap's own version.  ``importlib.metadata`` imports email,
zipfile, csv, importlib.resources and more, and walks the metadata through pathlib: ~25 ms
of CPU per run on this machine, ~7% of a small capture's whole ``dissect``.  This reader
follows the same rules for the plain case, directories on ``sys.path``: the
``*.dist-info`` / ``*.egg-info`` entries of each path entry grouped by normalized name in
listing order, path entries in ``sys.path`` order, the first distribution of a normalized
name wins, ``entry_points.txt`` split into ``[group]`` sections and ``name = value``
lines.  Anything else (a zip or an ``.egg`` on ``sys.path``, another finder that finds
distributions, a line or header it would have to guess about) goes to
``importlib.metadata`` itself, which stays the definition: the answer is the same
either way (``tests/plugins/test_entrypoints.py`` compares the two).
"""

from __future__ import annotations

import os
import re
import sys
from importlib import import_module
from typing import Any, NamedTuple

_INFO_SUFFIXES = (".dist-info", ".egg-info")
_SEPARATORS = re.compile(r"[-_.]+")
_LINES = re.compile(r"\r\n|\r|\n")
# a header line this reader is sure of: a name of printable ASCII but ':' (RFC 5322), then ':'
_HEADER = re.compile(r"[\x21-\x39\x3b-\x7e]+:")
# the syntax importlib.metadata accepts for a value (its EntryPoint.pattern)
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class EntryPoint(NamedTuple):
    """One entry point, with the name of the distribution that declares it ("" when
    the distribution has no Name)."""

    name: str
    value: str
    group: str
    distribution: str

    def load(self) -> Any:  # noqa: ANN401 - whatever the value names (as importlib's)
        """The object the value names (a module, or an attribute path in it)."""
        parts = value_parts(self.value)
        if parts is None:  # importlib.metadata fails the same way (None.group)
            raise AttributeError(f"malformed entry point value {self.value!r}")
        obj: Any = import_module(parts[0])
        for attr in filter(None, parts[1].split(".")):
            obj = getattr(obj, attr)
        return obj


def value_parts(value: str) -> tuple[str, str] | None:
    """(module, attribute path or "") of an entry point's value, None when malformed.
    The common ``module.path:attr.path`` of identifiers is split by hand; anything else
    goes to importlib.metadata's pattern (compiling it costs every run ~1 ms)."""
    module, colon, attrs = (part.strip() for part in value.partition(":"))
    if "[" not in value and value.isascii() and all(
            p.isidentifier() for p in module.split(".")) and (
            not colon or all(p.isidentifier() for p in attrs.split("."))):
        return module, attrs
    match = re.match(_VALUE, value)
    return None if match is None else (match.group("module"), match.group("attr") or "")


class _Unsure(Exception):
    """This reader would have to guess: ``importlib.metadata`` answers instead."""


def _normalize(name: str) -> str:
    """PEP 503 normalization with dashes as underscores (importlib.metadata's)."""
    return _SEPARATORS.sub("-", name).lower().replace("-", "_")


def _infos(entry: str) -> dict[str, list[str]]:
    """The metadata paths in one ``sys.path`` entry, by normalized name, in listing
    order."""
    try:
        children = os.listdir(entry or ".")
    except OSError:
        if os.path.isfile(entry):  # a zip on sys.path: importlib.metadata reads those
            raise _Unsure from None
        return {}
    if os.path.basename(entry).lower().endswith(".egg"):
        raise _Unsure
    found: dict[str, list[str]] = {}
    for child in children:
        low = child.lower()
        if low.endswith(_INFO_SUFFIXES):
            if not child.endswith(_INFO_SUFFIXES):  # its name then comes from METADATA
                raise _Unsure
            key = _normalize(low.rpartition(".")[0].partition("-")[0])
            if not key:  # no name before the version: importlib reads it from METADATA
                raise _Unsure
            found.setdefault(key, []).append(os.path.join(entry, child))
    return found


def _check_finders() -> None:
    """Only the standard path finder may find distributions (it is the one read here)."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None):
            raise _Unsure


def _read(path: str, name: str) -> str | None:
    """A metadata file's text, None when it cannot be read (as importlib.metadata)."""
    try:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None


def _header(path: str, key: str) -> str | None:
    """One header of the distribution's METADATA (or PKG-INFO); None when absent."""
    text = _read(path, "METADATA") or _read(path, "PKG-INFO")
    if not text:
        raise _Unsure  # an egg-info file, or no metadata at all
    want = key.lower() + ":"
    lines = _LINES.split(text)  # (the email parser's line ends: not str.splitlines')
    for i, line in enumerate(lines):
        if not line:
            break  # the end of the headers
        if line[:1] in (" ", "\t"):
            continue  # the rest of a folded header
        if not _HEADER.match(line):
            raise _Unsure  # not a plain header line: the email parser's business
        if line[:len(want)].lower() == want:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt[:1] in (" ", "\t"):
                raise _Unsure  # a folded header
            return line[len(want):].lstrip(" \t")  # (the email parser keeps the end)
    raise _Unsure


def _pairs(text: str, group: str) -> list[tuple[str, str]]:
    """The ``name = value`` lines of ``group`` in one ``entry_points.txt``."""
    section = None
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        if "=" not in line:
            raise _Unsure  # importlib.metadata fails on it: let it say how
        if section == group:
            name, value = line.split("=", 1)
            found.append((name.strip(), value.strip()))
    return found


def _plain_entry_points(group: str) -> list[EntryPoint]:
    _check_finders()
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        for key, paths in _infos(entry).items():
            for path in paths:
                if key in seen:
                    continue
                seen.add(key)
                pairs = _pairs(_read(path, "entry_points.txt") or "", group)
                if pairs:
                    dist = _header(path, "Name") or ""
                    found.extend(EntryPoint(n, v, group, dist) for n, v in pairs)
    return found


def entry_points(group: str) -> list[EntryPoint]:
    """Every installed entry point of ``group``, in ``importlib.metadata.entry_points``'
    order (callers sort them by name)."""
    try:
        return _plain_entry_points(group)
    except _Unsure:
        from importlib.metadata import entry_points as reference

        return [
            EntryPoint(ep.name, ep.value, ep.group,
                       (ep.dist.name or "") if ep.dist is not None else "")
            for ep in reference(group=group)
        ]


def version(distribution: str) -> str | None:
    """The Version of the first installed distribution named ``distribution`` (as
    ``importlib.metadata.version``), None when none is installed."""
    try:
        _check_finders()
        key = _normalize(distribution)
        for entry in sys.path:
            for path in _infos(entry).get(key, ()):
                return _header(path, "Version")
        return None
    except _Unsure:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as reference

        try:
            return reference(distribution)
        except PackageNotFoundError:
            return None

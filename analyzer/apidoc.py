"""Generate the API reference of ``dissectors.api`` from its docstrings.

Usage::

    python -m analyzer.apidoc --write   # refresh the reference in docs/custom-dissectors.md
    python -m analyzer.apidoc --check   # exit 1 if the committed reference is stale
    python -m analyzer.apidoc --print   # the reference alone, on stdout

Strategy: the reference is a pure function of the code (``render_reference``): every name
in ``dissectors.api.__all__``, in the groups below, with its signature, docstring and
public members, so a test can compare the committed page with a fresh rendering.  The
page's hand-written tutorial stays outside the two marker comments; only the text between
them is replaced.  Module constants have no runtime docstring, so the string literal that
follows their assignment in the source is used (the convention of Sphinx autodoc).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "DEFAULT_PATH", "END", "GROUPS", "main", "render_reference", "splice"]

DEFAULT_PATH = "docs/custom-dissectors.md"
BEGIN = "<!-- BEGIN API REFERENCE (python -m analyzer.apidoc --write; do not edit by hand) -->"
END = "<!-- END API REFERENCE -->"

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Dissectors and sessions", (
        "API_VERSION", "Dissector", "Session", "FramedSession", "Span", "Verdict",
        "Direction", "Transport", "SessionOptions", "session_option", "DEFAULT_PAYLOAD_CAP",
    )),
    ("Rows and anomalies", (
        "Record", "record_from", "anomaly_from", "Provenance", "payload_values", "decode_text",
    )),
    ("Tables", ("TableSpec", "Field", "payload_fields", "register_table")),
    ("Framing", (
        "LineFramer", "LengthPrefixedFramer", "NEED_MORE", "Line", "Block", "Pdu",
        "Oversize", "Invalid", "Resynced", "Dropped", "TrailerStatus", "ResyncFn",
        "resync_after_lf",
    )),
    ("Protocols carried inside NATS messages", (
        "PayloadDissector", "CarriedMessage", "Bindings", "CarrierSession", "CarrierScope",
        "MAX_VERDICTS",
    )),
    ("Columnar fast paths", (
        "ColumnarSession", "ColumnBatch", "ColumnFormat", "ColumnAccumulator",
    )),
)
# The test helpers are not part of the API: ``dissectors.sdk.testing`` (and
# ``analyzer.testing.dissect_with_cli``), described by the page's hand-written part.

_OURS = ("dissectors.", "reassembly.", "analyzer.")

# Names whose definition carries no docstring of its own (dataclasses get a generated one).
_NOTES = {
    "TableSpec": "A table, declared once: name (`[a-z][a-z0-9_]*`), version (raise it when "
    "columns change meaning), description, and its protocol columns.  With `envelope` "
    "(the default) the envelope columns (capture, flow, record ids, direction, endpoints, "
    "times, offsets, frames) are put in front.  Immutable; invalid declarations raise at "
    "construction.",
    "Field": "One column: name, Arrow type (one fixed type; text and bytes are two "
    "columns), a description (required: it becomes the docs and the Spark column "
    "comment), and whether it may be null.",
    "Transport": "The transport a `Dissector` reads: TCP byte streams or UDP datagrams.",
}


def _anchor(title: str) -> str:
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _doc(obj: Any) -> str:
    if isinstance(obj, type):
        doc = obj.__dict__.get("__doc__")  # not a base class's text
        if doc and doc.startswith(obj.__name__ + "("):
            doc = None  # the signature dataclasses write when there is no docstring
        doc = doc or _NOTES.get(obj.__name__)
    else:
        doc = inspect.getdoc(obj)  # methods inherit the overridden method's text
    return inspect.cleandoc(doc) if doc else ""


def _default(value: Any) -> str:
    if value is dataclasses.MISSING:
        return ""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, type) or inspect.isfunction(value):
        return value.__name__
    return repr(value)


def _annotation(ann: Any) -> str:
    if isinstance(ann, str):
        return ann
    if hasattr(ann, "__forward_arg__"):
        return ann.__forward_arg__
    return inspect.formatannotation(ann)


def _signature(obj: Any, returns: bool = True) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text = "*" + text
            star_done = True
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + text
        elif p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            default = p.default
            shown = "<factory>" if repr(default) == "<factory>" else _default(default)
            text += f" = {shown}"
        parts.append(text)
    out = f"({', '.join(parts)})"
    if returns and sig.return_annotation is not sig.empty:
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


@cache
def _module_attr_docs(module_name: str) -> dict[str, str]:
    """``NAME = ...`` followed by a string literal: that literal, per name."""
    module = sys.modules[module_name]
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body
    for node, nxt in zip(body, body[1:], strict=False):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            for t in targets:
                if isinstance(t, ast.Name):
                    docs[t.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _defining_module(name: str, obj: Any) -> str:
    import dissectors.api as api

    lazy = getattr(api, "_LAZY", {})
    if name in lazy:
        return lazy[name]
    mod = getattr(obj, "__module__", None)
    if isinstance(mod, str) and mod.startswith(_OURS):
        return mod
    # a constant has no __module__: the module ``dissectors.api`` imported it from
    for node in ast.parse(inspect.getsource(api)).body:
        if (isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith(_OURS) and node.module in sys.modules
                and any(a.name == name for a in node.names)):
            return node.module
    return api.__name__


def _class_vars(cls: type) -> list[str]:
    lines = []
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith(_OURS):
            continue
        for attr, ann in getattr(klass, "__annotations__", {}).items():
            if "ClassVar" not in str(ann) or attr.startswith("_"):
                continue
            value = cls.__dict__.get(attr, getattr(cls, attr, dataclasses.MISSING))
            shown = _default(value)
            lines.append((attr, f"- `{attr}: {ann}`" + (f" = `{shown}`" if shown else "")))
    seen: dict[str, str] = {}
    for attr, line in lines:
        seen[attr] = line
    return list(seen.values())


def _members(cls: type) -> list[tuple[str, Any, str]]:
    """Public methods / properties defined by ``cls`` or its bases in our packages."""
    out: dict[str, tuple[str, Any, str]] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith(_OURS):
            continue
        for attr, raw in klass.__dict__.items():
            if attr.startswith("_") or attr in out:
                continue
            if isinstance(raw, property):
                out[attr] = (attr, raw, "property")
            elif isinstance(raw, classmethod):
                out[attr] = (attr, raw.__func__, "classmethod")
            elif isinstance(raw, staticmethod):
                out[attr] = (attr, raw.__func__, "staticmethod")
            elif inspect.isfunction(raw):
                out[attr] = (attr, raw, "method")
    return sorted(out.values(), key=lambda m: m[0])


def _render_class(name: str, cls: type) -> list[str]:
    lines: list[str] = []
    is_enum = issubclass(cls, enum.Enum)
    is_tuple = issubclass(cls, tuple) and hasattr(cls, "_fields")
    is_dc = dataclasses.is_dataclass(cls)
    bases = [b.__name__ for b in cls.__bases__ if b not in (object,) and b.__name__ != "Generic"]
    if is_enum or is_tuple or is_dc or getattr(cls, "_is_protocol", False):
        head = f"class {name}{_signature(cls, False) if (is_tuple or is_dc) else ''}"
    else:
        init = cls.__dict__.get("__init__")
        head = f"class {name}{_signature(init, False) if init else ''}"
    kind = "NamedTuple" if is_tuple else ", ".join(bases) if bases else ""
    lines += [f"#### `{name}`", "", "```python", head, "```", ""]
    if kind:
        lines += [f"*{'dataclass; ' if is_dc else ''}bases: {kind}*", ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    if is_enum:
        lines += [f"- `{m.name}` = `{m.value!r}`" for m in cls] + [""]
    cvars = _class_vars(cls)
    if cvars:
        lines += ["Class attributes:", "", *cvars, ""]
    members = _members(cls)
    if members:
        lines += ["Members:", ""]
    for attr, obj, how in members:
        if how == "property":
            ann = obj.fget.__annotations__.get("return", "") if obj.fget else ""
            lines.append(f"- `{attr}`{f' → `{ann}`' if ann else ''} (property)"
                         + (f": {_one_paragraph(_doc(obj))}" if _doc(obj) else ""))
            continue
        prefix = "" if how == "method" else f"{how} "
        sig = _signature(obj)
        text = _doc(getattr(cls, attr))
        lines.append(f"- {prefix}`{attr}{sig}`" + (f": {_one_paragraph(text)}" if text else ""))
    if lines[-1] != "":
        lines.append("")
    return lines


def _one_paragraph(text: str) -> str:
    """Keep a member's docstring in one list item: paragraphs joined by spaces."""
    return " ".join(text.split())


def _render_name(name: str) -> list[str]:
    import dissectors.api as api

    obj = getattr(api, name)
    if isinstance(obj, type) and not _is_alias(obj):
        return _render_class(name, obj)
    if inspect.isfunction(obj):
        lines = [f"#### `{name}`", "", "```python", f"def {name}{_signature(obj)}", "```", ""]
        doc = _doc(obj)
        return lines + ([doc, ""] if doc else [])
    module = _defining_module(name, obj)
    doc = _module_attr_docs(module).get(name, "")
    value = repr(obj) if not _is_alias(obj) else str(obj).replace("typing.", "")
    lines = [f"#### `{name}`", "", "```python", f"{name} = {value}", "```", ""]
    return lines + ([doc, ""] if doc else [])


def _is_alias(obj: Any) -> bool:
    return type(obj).__module__ in ("typing", "types", "collections.abc") and not isinstance(
        obj, type)


def render_reference() -> str:
    """The Markdown API reference of ``dissectors.api`` (between the markers)."""
    import dissectors.api as api

    grouped = [n for _, names in GROUPS for n in names]
    missing = sorted(set(api.__all__) - set(grouped))
    extra = sorted(set(grouped) - set(api.__all__))
    if missing or extra or len(grouped) != len(set(grouped)):
        raise ValueError(
            f"analyzer.apidoc GROUPS out of step with dissectors.api.__all__: "
            f"missing {missing}, not exported {extra}"
        )
    out = [
        BEGIN,
        "",
        f"## API reference (`dissectors.api`, `API_VERSION = {api.API_VERSION}`)",
        "",
        "Everything below is importable from `dissectors.api`; nothing else is promised. "
        "Within a major version names are only added.",
        "",
    ]
    for title, _ in GROUPS:
        out.append(f"- [{title}](#{_anchor(title)})")
    out.append("")
    for title, names in GROUPS:
        out += [f"### {title}", ""]
        for name in names:
            out += _render_name(name)
    out.append(END)
    return "\n".join(out)


def splice(page: str, reference: str) -> str:
    """``page`` with the text between the markers (inclusive) replaced by ``reference``."""
    try:
        start = page.index(BEGIN)
        end = page.index(END, start) + len(END)
    except ValueError:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} markers") from None
    return page[:start] + reference + page[end:]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analyzer.apidoc",
                                description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="PATH", nargs="?", const=DEFAULT_PATH)
    g.add_argument("--check", metavar="PATH", nargs="?", const=DEFAULT_PATH)
    g.add_argument("--print", action="store_true", dest="show")
    args = p.parse_args(argv)
    reference = render_reference()
    if args.show:
        sys.stdout.write(reference + "\n")
        return 0
    path = Path(args.write or args.check)
    page = path.read_text(encoding="utf-8")
    fresh = splice(page, reference)
    if args.write:
        path.write_text(fresh, encoding="utf-8")
        return 0
    if fresh != page:
        print(f"{path} is stale: run `python -m analyzer.apidoc --write {path}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

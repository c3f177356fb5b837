"""A payload row's values straight from a clean protobuf message (issue 22).

Why: per STAN or Liftbridge message, the tolerant reader (``wire.decode``) built a
``Decoded`` and the dissector's per-type plan (``wire.planned_values``) copied its
fields to their columns, with defaults, renames and enum names: about half of the
~24 µs each message cost in Python.  The C walk (``_walk.values``) reads the wire once
and fills the values dict itself, per a ``WalkPlan`` made once per message type from
the same plan the reference uses.

What stays the definition: ``wire``.  ``walk`` answers None whenever the message is not
one the reader decodes cleanly with nothing to report (an unknown, repeated or nested
field, a map field its plan does not take, a wrong wire type, a cut or over-long varint,
invalid UTF-8, an unsigned value a column flagged int64-only cannot hold): the caller
then decodes it with the reader, as before.  Without the compiled module (not built) or
with ``MSGCAP_PROTO_WALK=0`` it always answers None.  ``tests/stan/test_walk.py`` checks
the walk against the reader under hypothesis; the dissectors' own tests check their
rows either way.

``tree`` is the walk of a whole nested message (repeated fields, packed lists, messages
inside messages, enums by name): Liftbridge's PropagatedRequest operations and internal
stream values, which a row shows as JSON, cost ~60 µs each in the reader and the JSON
conversion after it; Liftbridge's PropagatedResponse (two nested messages) takes it too.
It answers what ``Decoded.to_plain()`` of a clean message holds, with enums as a JSON
column names them, or None (the reader's, as above).

``message_set_parser`` hands out the same extension's parse of Liftbridge's
ReplicationResponse message set (big-endian, not protobuf), for
``dissectors.liftbridge.envelope``.

``capper`` sets a payload's columns (its length, SHA-256 hex, the bytes kept under the
payload cap, whether they were cut), as STAN's ``data`` and Liftbridge's ``value`` show
them: ``capped_py`` is the definition, ``_walk.capped`` the same in one C call.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple

from dissectors.proto.wire import ABSENT, MAX_DEPTH, FieldSpec, Kind, MessageSchema

__all__ = ["SWITCH", "Capper", "Walk", "WalkPlan", "available", "capped_py", "capper",
           "compiled_column_row", "compiled_move_row", "compiled_walk", "message_set_parser",
           "present_fields", "tree", "tree_plan", "walk", "walk_plan"]

SWITCH = "MSGCAP_PROTO_WALK"

try:
    from dissectors.proto import _walk  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the extension is optional (setup.py)
    _walk = None

_SIMPLE = frozenset({Kind.STRING, Kind.BYTES, Kind.INT32, Kind.INT64, Kind.UINT32,
                     Kind.UINT64, Kind.BOOL, Kind.ENUM})
_MAX_NUMBER = 128  # field numbers a plan may name (_walk.c's MAX_NUMBER)


class WalkPlan(NamedTuple):
    """``_walk.values``'s arguments for one message type (see ``walk_plan``)."""

    table: list[tuple[str, int, Any] | None]
    base: dict[str, Any]
    defaults: tuple[tuple[int, str, Any], ...]
    # STAN's step after the fields (``_walk.values``' post: the MsgProto CRC check or the
    # PubMsg digest status, and the data's ``capped`` columns); None: none
    post: tuple[Any, ...] | None = None


def available() -> bool:
    """Whether ``walk`` may answer (the extension is built and not switched off)."""
    return _walk is not None and os.environ.get(SWITCH) != "0"


def walk_plan(entries: Iterable[tuple[FieldSpec, str, object, Any]], base: dict[str, Any],
              always: Iterable[tuple[str, Any]] = (), maps: bool = False
              ) -> WalkPlan | None:
    """The plan of one message type: ``entries`` are (field, column, value when absent
    (``ABSENT``: none), extra), extra being an enum field's names (number -> name; the
    number as text when it has none), True for an unsigned 64-bit field whose column
    must fit int64, else None.  ``base``: the values every row starts with; ``always``:
    (column, value) set on every row (a list value is copied per row).  A repeated,
    nested or map field stays out of the table (a message holding one goes to the
    reader; ``tree`` serves such types) but keeps its value when absent.  None when the
    walk cannot serve the type (a field number over 127, or a column that is also a
    ``base`` key), and when the walk is not ``available`` (asked here, once per plan,
    not per message).
    With ``maps``, a map field of plain keys and values is walked too: its value is
    the list of its (key, value) items, as ``list(d.items())`` of the reader's dict."""
    if not available():
        return None
    table: list[tuple[str, int, Any] | None] = []
    defaults: list[tuple[int, str, Any]] = [(0, col, v) for col, v in always]
    for spec, column, absent, extra in entries:
        if spec.number >= _MAX_NUMBER or column in base:
            return None
        if spec.kind in _SIMPLE and not spec.repeated:
            while len(table) <= spec.number:
                table.append(None)
            table[spec.number] = (column, int(spec.kind), extra)
        elif maps and spec.kind is Kind.MAP and (kinds := _map_kinds(spec)) is not None:
            while len(table) <= spec.number:
                table.append(None)
            table[spec.number] = (column, int(Kind.MAP), kinds)
        if absent is not ABSENT:
            defaults.append((spec.number, column, absent))
    table.append(None)  # (at least one slot past field 0)
    return WalkPlan(table, dict(base), tuple(defaults))


def _map_kinds(spec: FieldSpec) -> tuple[int, int] | None:
    """(key kind, value kind) of a map field the walk takes: an entry of "key" = 1 and
    "value" = 2 (the names the reader reads), both plain (not a message); else None."""
    entry = spec.message.fields if spec.message is not None else {}
    key, value = entry.get(1), entry.get(2)
    if len(entry) != 2 or key is None or value is None or key.name != "key" \
            or value.name != "value":
        return None
    if key.kind not in _SIMPLE or value.kind not in _SIMPLE or key.repeated or value.repeated:
        return None
    return int(key.kind), int(value.kind)


def tree_plan(sch: MessageSchema, names: bool = True, _depth: int = 0) -> list[Any] | None:
    """``tree``'s node of ``sch``: each field by number as (name, kind, enum names or
    None, repeated, node of a message field); enums named (when ``names``, the top
    level's only: nested ones always are).  None when the tree cannot serve the type
    (a map or bytes field anywhere in it, which a JSON column renders otherwise; a field
    number over 127; nesting past the reader's bound), or the walk is not
    ``available``."""
    if not available() or _depth >= MAX_DEPTH:
        return None
    node: list[Any] = [None] * (max(sch.fields, default=0) + 2)
    if len(node) > _MAX_NUMBER:
        return None
    for spec in sch.fields.values():
        sub: list[Any] | None = None
        if spec.kind is Kind.MESSAGE:
            if spec.message is None:
                return None
            sub = tree_plan(spec.message, True, _depth + 1)
            if sub is None:
                return None
        elif spec.kind not in _SIMPLE or spec.kind is Kind.BYTES:
            return None
        enum = spec.enum or None if names and spec.kind is Kind.ENUM else None
        node[spec.number] = (spec.name, int(spec.kind), enum, spec.repeated, sub)
    return node


def tree(data: bytes, pos: int, node: list[Any]) -> dict[str, Any] | None:
    """The fields of the clean message ``data[pos:]`` per ``node`` (``tree_plan``), as
    nested dicts and lists, or None: the reader must decode it (module docstring)."""
    got: dict[str, Any] | None = _walk.tree(data, pos, node)
    return got


def walk(data: bytes, pos: int, plan: WalkPlan, base: dict[str, Any] | None = None
         ) -> tuple[dict[str, Any], int] | None:
    """(values, the field numbers present as bits of an int) of the message
    ``data[pos:]`` per ``plan`` (made while the walk was ``available``), or None: the
    reader must decode it (module docstring).  ``base``: the values to start from
    instead of the plan's (copied; the message's fields and defaults overwrite them)."""
    got: tuple[dict[str, Any], int] | None = _walk.values(
        data, pos, plan.table, plan.base if base is None else base, plan.defaults)
    return got


# (data, pos, table, base, defaults[, post, cap]) -> (values, present) or None
Walk = Callable[..., "tuple[dict[str, Any], int] | None"]


def _no_walk(*args: object) -> None:
    """The walk when the extension is not built: every message to the reader."""
    return None


def compiled_walk() -> Walk:
    """``walk`` without its Python frame, for callers that walk per message (STAN,
    Liftbridge): called as ``compiled_walk()(data, pos, *plan, cap)`` (``cap``: the
    payload cap of the plan's ``post`` step), or with another base in ``plan.base``'s
    place.  Why: the wrapper was ~17 bytecodes a message.  (A plan exists only while
    the walk was ``available``: a caller holding one walks the same with either.)"""
    if _walk is None:
        return _no_walk
    got: Walk = _walk.values
    return got


def present_fields(values: dict[str, Any], present: int,
                   columns: tuple[tuple[int, str, str], ...]) -> dict[str, Any]:
    """The fields a walked message held, by field name, as the reader's
    ``Decoded.values`` holds them (for code that asks what was on the wire, not what the
    row shows): ``columns`` are (field number, name, column) of the plan's fields."""
    return {name: values[col] for number, name, col in columns if present >> number & 1}


def compiled_column_row() -> Callable[..., Any] | None:
    """``_walk.column_row``, ``columns.RowsFormat``'s record in C (its ``record_py`` is
    the definition), or None when the extension is not built."""
    return None if _walk is None else _walk.column_row


def compiled_move_row() -> Callable[..., None] | None:
    """``_walk.move_row``, ``columns.PayloadRows``' move in C (its ``move_py`` is the
    definition), or None when the extension is not built."""
    return None if _walk is None else _walk.move_row


def message_set_parser() -> Callable[..., tuple[Any, ...] | None] | None:
    """Liftbridge's compiled ReplicationResponse message-set parse (``_walk.message_set``,
    not protobuf: ``dissectors.liftbridge.envelope.parse_entries`` says what it takes),
    or None when the walk is not ``available`` (asked once, by the caller)."""
    return _walk.message_set if available() else None


# (values, data, cap) -> the SHA-256 digest of data, its columns set in values
Capper = Callable[[dict[str, Any], bytes, "int | None"], bytes]


def capped_py(columns: tuple[str, str, str, str], values: dict[str, Any], data: bytes,
              cap: int | None) -> bytes:
    """Sets ``columns`` = (length, SHA-256 hex, kept, truncated) of ``data`` in ``values``:
    kept is ``data`` itself unless ``cap`` (>= 0: ``read_payload_cap``) cuts it, then its
    first ``cap`` bytes.  Returns the digest (a STAN PubMsg checks it against its own)."""
    digest = hashlib.sha256(data).digest()
    size = len(data)
    length, sha256, kept, truncated = columns
    values[length] = size
    values[sha256] = digest.hex()
    if cap is not None and size > cap:
        values[kept] = data[:cap]
        values[truncated] = True
    else:
        values[kept] = data
        values[truncated] = False
    return digest


def capper(columns: tuple[str, str, str, str], compiled: bool = True) -> Capper:
    """``capped_py`` with ``columns`` bound: the compiled ``_walk.capped`` when the
    extension is built (and ``compiled``), whether or not the walk is switched off (it
    decides no row, only does the same stores in C).  Why: per message, the digest, its
    hex and four stores were ~14 bytecodes and three calls in Python."""
    fn = _walk.capped if compiled and _walk is not None else capped_py
    got: Capper = partial(fn, columns)
    return got

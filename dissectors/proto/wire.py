"""A tolerant protobuf wire-format reader driven by our own schemas.

Strategy: the official runtime is all-or-nothing (``DecodeError`` and no fields) and
rejects proto3 strings that are not UTF-8, while the Go peers we dissect (gogoproto
for STAN, golang/protobuf for Liftbridge) accept such strings and skip unknown fields.
A forensic dissector needs more than a yes/no: the fields decoded before the damage,
where the damage is, which field numbers it did not know, and whether a string was
not UTF-8.  So this module walks the wire format itself (protobuf encoding spec,
"Message Structure"): tag varint → wire type → value, with every read bounds-checked,
and never raises on input bytes.

Semantics follow the Go decoders: for a scalar field the last occurrence wins;
repeated scalars are accepted packed (wire type 2) and unpacked; an unknown field is
skipped (groups included); a known field with the wrong wire type, a field number 0,
wire types 6/7 or a varint longer than 10 bytes stop decoding with an error, as
gogoproto's generated ``Unmarshal`` does.  ``int32``/``enum`` keep the low 32 bits as
a signed value and ``uint32`` the low 32 bits, like Go's conversions; ``int64`` is
two's complement; ``uint64`` stays unsigned (the caller decides what to do with values
above ``2**63 - 1``).  Nesting is bounded by ``MAX_DEPTH``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, TypeVar

__all__ = [
    "ABSENT",
    "MAX_DEPTH",
    "Decoded",
    "FieldSpec",
    "Kind",
    "MessageSchema",
    "decode",
    "field_keys",
    "planned_values",
    "scan",
    "zero_value",
]

# Nested messages deeper than this are reported, not followed (our schemas nest at most
# 4 levels; the bound only protects the stack against crafted input).
MAX_DEPTH = 32

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1


class Kind(IntEnum):
    """Field value kinds the schemas use, with their expected wire type."""

    STRING = 0
    BYTES = 1
    INT32 = 2
    INT64 = 3
    UINT32 = 4
    UINT64 = 5
    BOOL = 6
    ENUM = 7
    MESSAGE = 8
    MAP = 9  # map<K, V>: a repeated entry message {1: key, 2: value}


_VARINT_KINDS = frozenset({Kind.INT32, Kind.INT64, Kind.UINT32, Kind.UINT64, Kind.BOOL, Kind.ENUM})


@dataclass(frozen=True, slots=True)
class FieldSpec:
    number: int
    name: str
    kind: Kind
    repeated: bool = False
    message: MessageSchema | None = None  # MESSAGE: the sub-schema; MAP: the entry schema
    enum: dict[int, str] | None = None  # ENUM: number → name

    @property
    def wire_type(self) -> int:
        return 0 if self.kind in _VARINT_KINDS else 2


@dataclass(slots=True)
class MessageSchema:
    """Field number → spec for one message type (filled after construction so that
    schemas can refer to each other)."""

    full_name: str
    fields: dict[int, FieldSpec] = field(default_factory=dict)
    # (len(fields), one-byte tag -> (name, kind, repeated)): wire.py's inline reading
    # of simple fields, built on first use (``_simple_tags``)
    simple: tuple[int, dict[int, tuple[str, Kind, bool]]] | None = field(
        default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.full_name.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return f"MessageSchema({self.full_name!r}, {len(self.fields)} fields)"


@dataclass(slots=True)
class Decoded:
    """What one message decoded to.

    ``values`` holds only fields present on the wire (repeated → list, map → dict,
    message → ``Decoded``).  ``error`` is the first fatal problem (decoding stopped
    there; ``values`` holds what came before), ``truncated`` says that problem was
    running past the end, ``error_offset`` is where it happened (relative to the
    outermost buffer).  ``unknown`` lists the numbers of fields not in the schema
    (dotted with the field name for nested messages, e.g. ``stream.7``);
    ``bad_utf8`` the (dotted) names of string fields that were not valid UTF-8 (their
    value is shown with ``\\xNN`` escapes).
    """

    schema: MessageSchema
    values: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    bad_utf8: list[str] = field(default_factory=list)
    error: str | None = None
    truncated: bool = False
    error_offset: int | None = None

    @property
    def clean(self) -> bool:
        """Decoded to the end with no error, no unknown field and valid UTF-8, nested
        messages included."""
        return self.error is None and not self.unknown and not self.bad_utf8

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def to_plain(self) -> dict[str, Any]:
        """Nested ``Decoded`` values turned into dicts (for JSON columns)."""
        out: dict[str, Any] = {}
        for k, v in self.values.items():
            if isinstance(v, Decoded):
                out[k] = v.to_plain()
            elif isinstance(v, list):
                out[k] = [x.to_plain() if isinstance(x, Decoded) else x for x in v]
            else:
                out[k] = v
        return out


class _Stop(Exception):
    """Internal: decoding cannot go on (never escapes ``decode``)."""

    def __init__(self, detail: str, offset: int, truncated: bool) -> None:
        self.detail = detail
        self.offset = offset
        self.truncated = truncated


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _Stop("varint runs past the end", start, True)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise _Stop("varint longer than 10 bytes", start, False)


def _skip(buf: bytes, pos: int, end: int, wire_type: int, number: int, depth: int) -> int:
    """Position after an unknown field's value."""
    if wire_type == 0:
        return _varint(buf, pos, end)[1]
    if wire_type == 1:
        if pos + 8 > end:
            raise _Stop(f"fixed64 field {number} runs past the end", pos, True)
        return pos + 8
    if wire_type == 5:
        if pos + 4 > end:
            raise _Stop(f"fixed32 field {number} runs past the end", pos, True)
        return pos + 4
    if wire_type == 2:
        n, p = _varint(buf, pos, end)
        if n > end - p:
            raise _Stop(
                f"field {number}: length {n} runs past the end ({end - p} bytes left)", pos, True
            )
        return p + n
    if wire_type == 3:  # group: skip to the matching end-group tag
        if depth >= MAX_DEPTH:
            raise _Stop(f"groups nested deeper than {MAX_DEPTH}", pos, False)
        while True:
            tag_at = pos
            tag, pos = _varint(buf, pos, end)
            wt = tag & 7
            num = tag >> 3
            if wt == 4:
                if num != number:
                    raise _Stop(f"end-group {num} closes group {number}", tag_at, False)
                return pos
            if num == 0:
                raise _Stop("field number 0", tag_at, False)
            pos = _skip(buf, pos, end, wt, num, depth + 1)
    raise _Stop(f"invalid wire type {wire_type} for field {number}", pos, False)


def _scalar(kind: Kind, v: int) -> int | bool:
    if kind is Kind.INT32 or kind is Kind.ENUM:
        v &= _U32
        return v - (1 << 32) if v >= 1 << 31 else v
    if kind is Kind.INT64:
        return v - (1 << 64) if v >= 1 << 63 else v
    if kind is Kind.UINT32:
        return v & _U32
    if kind is Kind.BOOL:
        return v != 0
    return v  # UINT64


def decode(buf: bytes, schema: MessageSchema, *, base: int = 0, depth: int = 0) -> Decoded:
    """Decode ``buf`` as ``schema``; never raises on input bytes.

    ``base`` is added to reported offsets (used for nested messages)."""
    out = Decoded(schema)
    try:
        _decode_into(out, buf, 0, len(buf), base, depth)
    except _Stop as stop:
        out.error = stop.detail if depth else f"{stop.detail} (at offset {stop.offset})"
        out.truncated = stop.truncated
        out.error_offset = stop.offset
    return out


def _decode_into(out: Decoded, buf: bytes, pos: int, end: int, base: int, depth: int) -> None:
    """The fields of ``buf[pos:end]`` into ``out``.

    Why two readers: nearly every field of a real message is a scalar, string or bytes
    field under its expected one-byte tag; those are read inline here (``_simple_tags``),
    which halves the cost of a typical STAN or Liftbridge message against one call of
    the general reader per field.  Everything else (nested messages, maps, packed lists,
    unknown or malformed fields, a varint or length cut short) goes through ``_field``,
    the general reader, which defines the semantics and owns every error message (a
    test checks that both give the same ``Decoded``)."""
    simple = _simple_tags(out.schema)
    values = out.values
    while pos < end:
        tag = buf[pos]
        entry = simple.get(tag) if tag < 0x80 else None
        if entry is None:
            pos = _field(out, buf, pos, end, base, depth)
            continue
        name, kind, repeated = entry
        # the varint after the tag (the value, or the length): as _varint reads it
        p = pos + 1
        n = shift = 0
        while p < end:
            b = buf[p]
            p += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift >= 70:
                p = end + 1
                break
        else:
            p = end + 1
        if p > end:  # cut short or too long: the general reader says so
            pos = _field(out, buf, pos, end, base, depth)
            continue
        v: Any
        if kind is Kind.STRING:
            if n > end - p:
                pos = _field(out, buf, pos, end, base, depth)  # reports the overrun
                continue
            chunk = buf[p : p + n]
            try:
                v = chunk.decode("utf-8")
            except UnicodeDecodeError:
                v = chunk.decode("utf-8", "backslashreplace")
                out.bad_utf8.append(name)
            pos = p + n
        elif kind is Kind.BYTES:
            if n > end - p:
                pos = _field(out, buf, pos, end, base, depth)
                continue
            v = bytes(buf[p : p + n])
            pos = p + n
        else:  # a varint kind
            n &= _U64
            v = n if kind is Kind.UINT64 else _scalar(kind, n)
            pos = p
        if repeated:
            values.setdefault(name, []).append(v)
        else:
            values[name] = v


def _simple_tags(schema: MessageSchema) -> dict[int, tuple[str, Kind, bool]]:
    """One-byte tag → (name, kind, repeated) of the fields ``_decode_into`` reads inline:
    scalars under wire type 0, strings and bytes under wire type 2 (cached per schema,
    rebuilt if its fields changed)."""
    cached = schema.simple
    if cached is not None and cached[0] == len(schema.fields):
        return cached[1]
    tags: dict[int, tuple[str, Kind, bool]] = {}
    for spec in schema.fields.values():
        if spec.kind is Kind.MESSAGE or spec.kind is Kind.MAP:
            continue
        tag = (spec.number << 3) | spec.wire_type
        if tag < 0x80:
            tags[tag] = (spec.name, spec.kind, spec.repeated)
    schema.simple = (len(schema.fields), tags)
    return tags


def _field(out: Decoded, buf: bytes, pos: int, end: int, base: int, depth: int) -> int:
    """Read the one field at ``pos`` (any field, well-formed or not) into ``out``; the
    position after it.  Raises ``_Stop`` where decoding cannot go on."""
    fields = out.schema.fields
    values = out.values
    tag_at = pos
    try:
        tag, pos = _varint(buf, pos, end)
    except _Stop as stop:
        detail = stop.detail.replace("varint", "tag")
        raise _Stop(detail, base + tag_at, stop.truncated) from None
    number = tag >> 3
    wt = tag & 7
    if number == 0:
        raise _Stop("field number 0", base + tag_at, False)
    if wt > 5 or wt == 4:
        what = "end-group tag" if wt == 4 else f"invalid wire type {wt}"
        raise _Stop(f"{what} for field {number}", base + tag_at, False)
    spec = fields.get(number)
    if spec is None:
        try:
            pos = _skip(buf, pos, end, wt, number, depth)
        except _Stop as stop:
            raise _Stop(stop.detail, base + stop.offset, stop.truncated) from None
        out.unknown.append(str(number))
        return pos
    kind = spec.kind
    if wt == 0 and kind in _VARINT_KINDS:
        try:
            raw, pos = _varint(buf, pos, end)
        except _Stop as stop:
            raise _Stop(
                f"{spec.name}: {stop.detail}", base + stop.offset, stop.truncated
            ) from None
        scalar = _scalar(kind, raw)
        if spec.repeated:
            values.setdefault(spec.name, []).append(scalar)
        else:
            values[spec.name] = scalar
        return pos
    if wt != 2:
        raise _Stop(
            f"{spec.name} (field {number}) has wire type {wt}, expected {spec.wire_type}",
            base + tag_at, False,
        )
    len_at = pos
    try:
        n, pos = _varint(buf, pos, end)
    except _Stop as stop:
        raise _Stop(f"{spec.name}: {stop.detail}", base + stop.offset, stop.truncated) from None
    if n > end - pos:
        raise _Stop(
            f"{spec.name} (field {number}): length {n} runs past the end "
            f"({end - pos} bytes left)", base + len_at, True,
        )
    chunk = buf[pos : pos + n]
    start = pos
    pos += n
    v: str | bytes
    if kind is Kind.STRING:
        try:
            v = chunk.decode("utf-8")
        except UnicodeDecodeError:
            v = chunk.decode("utf-8", "backslashreplace")
            out.bad_utf8.append(spec.name)
    elif kind is Kind.BYTES:
        v = bytes(chunk)
    elif kind is Kind.MESSAGE or kind is Kind.MAP:
        if depth + 1 > MAX_DEPTH:
            raise _Stop(f"messages nested deeper than {MAX_DEPTH}", base + start, False)
        sub_schema = spec.message
        assert sub_schema is not None  # FieldSpec: MESSAGE and MAP fields have one
        sub = decode(chunk, sub_schema, base=base + start, depth=depth + 1)
        _merge_child(out, spec.name, sub)
        if kind is Kind.MAP:
            entry = values.setdefault(spec.name, {})
            key = sub.values.get("key")
            if key is None:
                key = "" if sub_schema.fields[1].kind is Kind.STRING else 0
            val = sub.values.get("value")
            if val is None:
                val = _default(sub_schema.fields[2])
            entry[key] = val
        elif spec.repeated:
            values.setdefault(spec.name, []).append(sub)
        else:
            values[spec.name] = sub
        if sub.error is not None:
            at = sub.error_offset if sub.error_offset is not None else base + start
            raise _Stop(f"{spec.name}.{sub.error}", at, sub.truncated)
        return pos
    else:  # packed repeated varints
        if not spec.repeated:
            raise _Stop(
                f"{spec.name} (field {number}) has wire type 2, expected 0",
                base + tag_at, False,
            )
        items = values.setdefault(spec.name, [])
        p, e = 0, len(chunk)
        while p < e:
            try:
                raw, p = _varint(chunk, p, e)
            except _Stop as stop:
                raise _Stop(
                    f"{spec.name}: packed {stop.detail}", base + start + stop.offset,
                    stop.truncated,
                ) from None
            items.append(_scalar(kind, raw))
        return pos
    if spec.repeated:
        values.setdefault(spec.name, []).append(v)
    else:
        values[spec.name] = v
    return pos


def _merge_child(out: Decoded, name: str, sub: Decoded) -> None:
    out.unknown.extend(f"{name}.{u}" for u in sub.unknown)
    out.bad_utf8.extend(f"{name}.{b}" for b in sub.bad_utf8)


# a field that stays null when absent, where a plan would otherwise give its zero value
ABSENT: Final = object()

_Entry = TypeVar("_Entry", bound=tuple[Any, ...])


def planned_values(got: Mapping[str, Any], plan: Iterable[_Entry], clean_end: bool
                   ) -> Iterator[tuple[_Entry, Any]]:
    """Each entry of a payload dissector's per-type ``plan`` (field name first, value
    when absent third) with its value in a decoded message: the decoded value; else,
    when the message ended cleanly, the value when absent (proto3 reads an absent field
    as its zero value; ``ABSENT`` leaves it null); else nothing (a cut message says
    nothing of the fields after the cut), and the entry is skipped."""
    for entry in plan:
        name = entry[0]
        if name in got:
            yield entry, got[name]
        elif clean_end and entry[2] is not ABSENT:
            yield entry, entry[2]


def zero_value(kind: Kind) -> str | bytes | bool | int:
    """proto3's default of a scalar field of this kind (what an absent field reads as):
    "", b"", False, else 0 (numbers and enums)."""
    if kind is Kind.STRING:
        return ""
    if kind is Kind.BYTES:
        return b""
    if kind is Kind.BOOL:
        return False
    return 0


def _default(spec: FieldSpec) -> str | bytes | bool | int | None:
    return None if spec.kind in (Kind.MESSAGE, Kind.MAP) else zero_value(spec.kind)


def scan(buf: bytes) -> frozenset[tuple[int, int]] | None:
    """The (field number, wire type) pairs of a well-formed top-level message, or None.

    A cheap schema-free pass for probes: wire types 0, 1, 2 and 5 only (no groups),
    every length inside the buffer, the last field ending exactly at the end."""
    pos, end = 0, len(buf)
    seen = set()
    try:
        while pos < end:
            tag, pos = _varint(buf, pos, end)
            wt = tag & 7
            number = tag >> 3
            if number == 0 or wt not in (0, 1, 2, 5):
                return None
            seen.add((number, wt))
            if wt == 0:
                pos = _varint(buf, pos, end)[1]
            elif wt == 2:
                n, pos = _varint(buf, pos, end)
                pos += n
            else:
                pos += 8 if wt == 1 else 4
            if pos > end:
                return None
    except _Stop:
        return None
    return frozenset(seen)


def field_keys(schema: MessageSchema) -> frozenset[tuple[int, int]]:
    """The (field number, wire type) pairs a clean message of ``schema`` may contain
    (repeated varints may also be packed)."""
    keys = set()
    for spec in schema.fields.values():
        keys.add((spec.number, spec.wire_type))
        if spec.repeated and spec.wire_type == 0:
            keys.add((spec.number, 2))
    return frozenset(keys)

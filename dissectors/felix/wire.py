"""Felix client wire protocol: pure functions over frame bytes (protocol-facts §5).

Every frame is a 12-byte header -- magic ``FLX1``, version u16 (1), flags u16, payload
length u32, all big-endian (§5.3) -- and the payload.  Flags 0 mean the payload is a
UTF-8 JSON object tagged by ``"type"`` (§5.6); otherwise the flag bits select one of the
binary layouts of §5.5 (publish batch, acked / keyed / idempotent publish, publish ack,
per-subscriber and shared event batches) and the modifiers that extend them (§5.4).

Decoding follows the newest known superset (flags up to 0x4000, ``KNOWN_FLAGS`` 0x7FFF):
every extension is gated by a flag or a feature negotiated in ``auth``, so older peers
send byte-identical frames.  A bit outside the superset is reported, and the payload is
kept undecoded: flag bits change the layout, so guessing would misparse (Felix's own
reader refuses such frames the same way).

Nothing here raises on input bytes: problems come back as ``(kind, detail)`` pairs, the
values decoded before a problem are kept.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag, StrEnum
from typing import Any, NoReturn

from dissectors.felix.magic import MAGIC, probe  # re-exported (probe: see magic)

__all__ = [
    "ACK_MODES",
    "ACK_STATUS",
    "DEFAULT_MAX_FRAME_BYTES",
    "ERROR_CODES",
    "FEATURES",
    "HEADER",
    "HEADER_BYTES",
    "KNOWN_FLAGS",
    "MAGIC",
    "RETRY_CLASSES",
    "VERSION",
    "AckMode",
    "AckStatus",
    "Decoded",
    "ErrorCode",
    "FelixAnomaly",
    "Flag",
    "Kind",
    "Message",
    "RetryClass",
    "classify",
    "decode_binary",
    "decode_json",
    "feature_names",
    "flag_names",
    "make_pdu_length",
    "probe",
    "resync",
]

class FelixAnomaly(StrEnum):
    """Anomaly kinds of the Felix dissector (``anomalies.kind``; values are the
    documented strings)."""

    BAD_ACK_MODE = "felix.bad_ack_mode"
    BAD_ACK_STATUS = "felix.bad_ack_status"
    BAD_BINARY = "felix.bad_binary"
    BAD_FIELD = "felix.bad_field"
    BAD_FLAGS = "felix.bad_flags"
    BAD_JSON = "felix.bad_json"
    BAD_MAGIC = "felix.bad_magic"
    BAD_UTF8 = "felix.bad_utf8"
    BAD_VERSION = "felix.bad_version"
    EOF_IN_FRAME = "felix.eof_in_frame"
    GAP_IN_FRAME = "felix.gap_in_frame"
    NO_AUTH = "felix.no_auth"
    OVERSIZE_FRAME = "felix.oversize_frame"
    RESYNC = "felix.resync"
    TRAILING_BYTES = "felix.trailing_bytes"
    UNKNOWN_FLAGS = "felix.unknown_flags"
    WRONG_DIRECTION = "felix.wrong_direction"


VERSION = 1  # "anything else is rejected" (§5.3)
HEADER = struct.Struct(">4sHHI")
HEADER_BYTES = HEADER.size  # 12

# The broker's default `max_frame_bytes` (FELIX_MAX_FRAME_BYTES) and the client runtime's:
# 16 MiB of payload.  A longer declared length makes Felix's reader error and close the
# stream, so it is no frame a peer would accept: we report it and resynchronise on the next
# magic.  Option `max_frame_bytes` for brokers configured higher.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64_LIMIT = 1 << 63
_U64_LIMIT = 1 << 64


class Flag(IntFlag):
    """Frame header flag bits (§5.4), newest tree."""

    BINARY_PUBLISH_BATCH = 0x0001
    BINARY_EVENT_BATCH = 0x0002
    BINARY_EVENT_BATCH_SHARED = 0x0004
    BINARY_PUBLISH_ACKED = 0x0008
    BINARY_PUBLISH_ACK = 0x0010
    EVENT_BATCH_OFFSETS = 0x0020
    BINARY_PUBLISH_KEYED = 0x0040
    BINARY_PUBLISH_ACK_OWNER = 0x0080
    BINARY_PUBLISH_IDEMPOTENT = 0x0100
    BINARY_PUBLISH_ACK_CODE = 0x0200
    BINARY_PUBLISH_ACK_DETAIL = 0x0400
    EVENT_BATCH_SKIPPED = 0x0800
    BINARY_PUBLISH_ACK_OFFSET = 0x1000
    EVENT_BATCH_PUBLISHER = 0x2000
    EVENT_BATCH_TIMESTAMPS = 0x4000


KNOWN_FLAGS = 0x7FFF  # snapshot 0x003F, then 0x03FF, 0x0FFF, 0x3FFF; 0x7FFF per CHANGELOG
# plain ints for the hot paths (IntFlag arithmetic goes through enum machinery)
_ACKED = int(Flag.BINARY_PUBLISH_ACKED)
_KEYED = int(Flag.BINARY_PUBLISH_KEYED)
_IDEMPOTENT = int(Flag.BINARY_PUBLISH_IDEMPOTENT)
_ACK_OWNER = int(Flag.BINARY_PUBLISH_ACK_OWNER)
_ACK_CODE = int(Flag.BINARY_PUBLISH_ACK_CODE)
_ACK_DETAIL = int(Flag.BINARY_PUBLISH_ACK_DETAIL)
_ACK_OFFSET = int(Flag.BINARY_PUBLISH_ACK_OFFSET)
_OFFSETS = int(Flag.EVENT_BATCH_OFFSETS)
_SKIPPED = int(Flag.EVENT_BATCH_SKIPPED)
_PUBLISHER = int(Flag.EVENT_BATCH_PUBLISHER)
_TIMESTAMPS = int(Flag.EVENT_BATCH_TIMESTAMPS)
# (str(): typeshed types a Flag member's name ``str | None``, for unnamed combinations)
_FLAG_BITS = tuple((int(f.value), str(f.name)) for f in Flag)
_LAYOUT_BITS = (Flag.BINARY_PUBLISH_BATCH | Flag.BINARY_EVENT_BATCH
                | Flag.BINARY_EVENT_BATCH_SHARED | Flag.BINARY_PUBLISH_ACK)


class Kind:
    """What a frame's payload is, from its flags (the ``kind`` column)."""

    JSON = "json"
    PUBLISH_BATCH = "binary_publish_batch"
    ACKED_PUBLISH_BATCH = "binary_acked_publish_batch"
    PUBLISH_ACK = "binary_publish_ack"
    EVENT_BATCH = "binary_event_batch"
    SHARED_EVENT_BATCH = "binary_shared_event_batch"
    UNKNOWN = "unknown"  # unknown bits, an invalid combination, or a version other than 1


# modifier bits each layout accepts, and the bit a modifier needs besides its layout bit
_MODIFIERS = {
    Flag.BINARY_PUBLISH_BATCH: Flag.BINARY_PUBLISH_ACKED | Flag.BINARY_PUBLISH_KEYED
    | Flag.BINARY_PUBLISH_IDEMPOTENT,
    Flag.BINARY_PUBLISH_ACK: Flag.BINARY_PUBLISH_ACK_OWNER | Flag.BINARY_PUBLISH_ACK_CODE
    | Flag.BINARY_PUBLISH_ACK_DETAIL | Flag.BINARY_PUBLISH_ACK_OFFSET,
    Flag.BINARY_EVENT_BATCH: Flag.EVENT_BATCH_OFFSETS | Flag.EVENT_BATCH_SKIPPED
    | Flag.EVENT_BATCH_PUBLISHER | Flag.EVENT_BATCH_TIMESTAMPS,
}
_MODIFIERS[Flag.BINARY_EVENT_BATCH_SHARED] = _MODIFIERS[Flag.BINARY_EVENT_BATCH]
_NEEDS = {
    Flag.BINARY_PUBLISH_IDEMPOTENT: Flag.BINARY_PUBLISH_ACKED,
    Flag.BINARY_PUBLISH_ACK_DETAIL: Flag.BINARY_PUBLISH_ACK_CODE,
    Flag.EVENT_BATCH_SKIPPED: Flag.EVENT_BATCH_OFFSETS,
}


class AckMode(IntEnum):
    """ack_mode byte of an acked binary publish (§5.5)."""

    PER_MESSAGE = 1
    PER_BATCH = 2


class ErrorCode(IntEnum):
    """Binary publish ack ``code`` (§5.5); 0 is never sent."""

    UNAUTHENTICATED = 1
    FORBIDDEN = 2
    NOT_FOUND = 3
    INVALID_REQUEST = 4
    SHARD_UNAVAILABLE = 5
    NOT_LEADER = 6
    QUORUM_TIMEOUT = 7
    LEADERSHIP_LOST = 8
    UNACKNOWLEDGED = 9
    OVERLOADED = 10
    LIMIT_EXCEEDED = 11
    DRAINING = 12
    INTERNAL = 13
    STORAGE = 14


class RetryClass(IntEnum):
    """Binary publish ack ``retry`` class; Felix treats an unknown value as fatal."""

    RETRY = 1
    RETRY_AFTER = 2
    REDIRECT = 3
    OUTCOME_UNKNOWN = 4
    FATAL = 5


class AckStatus(IntEnum):
    """Binary publish ack ``status`` byte."""

    OK = 0
    ERROR = 1


def _names(codes: type[IntEnum]) -> dict[int, str]:
    """Wire number -> column text (the member name in lower case)."""
    return {int(c): c.name.lower() for c in codes}


ACK_MODES = _names(AckMode)  # 1 per_message, 2 per_batch
ERROR_CODES = _names(ErrorCode)
RETRY_CLASSES = _names(RetryClass)
ACK_STATUS = _names(AckStatus)

# feature bits of auth.client_features / auth_ok.server_features (§5.6)
FEATURES = {
    0x1: "TOPOLOGY", 0x2: "REDIRECT", 0x4: "CACHE_DELETE", 0x8: "CONSUMER_GROUP",
    0x10: "GROUP_DEAD_LETTERS", 0x20: "STREAM_SHARDS", 0x40: "CACHE_WATCH",
    0x80: "CACHE_WATCH_RETAINED", 0x100: "COUNTERS", 0x200: "IDEMPOTENT_PRODUCER",
    0x400: "CACHE_SHARDS", 0x800: "ERROR_CODES", 0x1000: "SHARD_MOVED", 0x2000: "UNSUPPORTED",
    0x4000: "SEQUENCE_REUSED", 0x8000: "PUBLISH_PIPELINE", 0x1_0000: "ATOMIC_COMMIT",
    0x2_0000: "STREAM_PUBLISH_WINDOW", 0x4_0000: "SHARD_OWNERS", 0x8_0000: "ACK_ON_COMMIT",
    0x10_0000: "GROUP_SKIPPED", 0x80_0000: "GROUP_PUBLISHER", 0x400_0000: "RECORD_TIMESTAMPS",
    0x8000_0000: "EXTENDED",
}


# ----------------------------------------------------------------------- framing


def make_pdu_length(max_frame_bytes: int) -> Callable[[memoryview], int | None]:
    """The ``pdu_length`` rule for ``LengthPrefixedFramer``: header + payload length,
    ``None`` for need-more, 0 when no acceptable frame starts here (no magic, or a length
    above ``max_frame_bytes``).  Any version is accepted: the magic identifies the
    header, and a version-2 frame is reported as such, not resynchronised through."""

    def pdu_length(view: memoryview) -> int | None:
        n = len(view)
        if n < 4:
            return None if MAGIC.startswith(bytes(view)) else 0
        if view[:4] != MAGIC:
            return 0
        if n < HEADER_BYTES:
            return None
        length: int = _U32.unpack_from(view, 8)[0]
        if length > max_frame_bytes:
            return 0
        return HEADER_BYTES + length

    return pdu_length


def resync(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """Resync rule: the next ``FLX1``.  A tail that may be the start of the magic is left
    undecided (the framer asks again with more bytes)."""
    i = buf.find(MAGIC)
    if i >= 0:
        return i, True
    for keep in (3, 2, 1):
        if len(buf) >= keep and buf.endswith(MAGIC[:keep]):
            return len(buf) - keep, False
    return len(buf), False


# ----------------------------------------------------------------------- flags


def flag_names(flags: int) -> list[str]:
    """Names of the known bits set in ``flags``, lowest bit first."""
    return list(_flag_names(flags))


@functools.lru_cache(maxsize=4096)
def _flag_names(flags: int) -> tuple[str, ...]:
    return tuple(name for bit, name in _FLAG_BITS if flags & bit)


def feature_names(features: int) -> list[str]:
    """Names of the feature bits set (unknown bits as ``0x...``), lowest bit first."""
    out = []
    for bit in range(32):
        v = 1 << bit
        if features & v:
            out.append(FEATURES.get(v) or f"0x{v:x}")
    return out


@functools.lru_cache(maxsize=4096)
def classify(flags: int) -> tuple[str, tuple[str, str] | None]:
    """The payload kind the flags select, and a problem when they select none (§5.4)."""
    if flags == 0:
        return Kind.JSON, None
    unknown = flags & ~KNOWN_FLAGS & 0xFFFF
    if unknown:
        return Kind.UNKNOWN, (
            FelixAnomaly.UNKNOWN_FLAGS,
            f"flags 0x{flags:04x} carry bits 0x{unknown:04x} outside the newest known set "
            f"0x{KNOWN_FLAGS:04x}; the payload layout is unknown, kept undecoded (a broker "
            "answers error \"unsupported frame flags\")",
        )
    layout = flags & _LAYOUT_BITS
    if layout == 0 or layout & (layout - 1):
        what = "no layout bit" if layout == 0 else "several layout bits"
        return Kind.UNKNOWN, (
            FelixAnomaly.BAD_FLAGS,
            f"flags 0x{flags:04x} ({'|'.join(flag_names(flags))}) set {what} (exactly one of "
            "BINARY_PUBLISH_BATCH, BINARY_EVENT_BATCH, BINARY_EVENT_BATCH_SHARED, "
            "BINARY_PUBLISH_ACK); payload kept undecoded",
        )
    base = Flag(layout)
    stray = flags & ~layout & ~_MODIFIERS[base]
    if stray:
        return Kind.UNKNOWN, (
            FelixAnomaly.BAD_FLAGS,
            f"flags 0x{flags:04x}: {'|'.join(flag_names(stray))} do not modify "
            f"{base.name}; payload kept undecoded",
        )
    for bit, need in _NEEDS.items():
        if flags & bit and not flags & need:
            return Kind.UNKNOWN, (
                FelixAnomaly.BAD_FLAGS,
                f"flags 0x{flags:04x}: {bit.name} is invalid without {need.name}; payload kept "
                "undecoded",
            )
    if base is Flag.BINARY_PUBLISH_BATCH:
        acked = flags & _ACKED
        return (Kind.ACKED_PUBLISH_BATCH if acked else Kind.PUBLISH_BATCH), None
    if base is Flag.BINARY_PUBLISH_ACK:
        return Kind.PUBLISH_ACK, None
    if base is Flag.BINARY_EVENT_BATCH:
        return Kind.EVENT_BATCH, None
    return Kind.SHARED_EVENT_BATCH, None


# ----------------------------------------------------------------------- results


@dataclass(slots=True)
class Message:
    """One application message of a frame (a ``felix_messages`` row).  ``payload`` is
    None when its bytes could not be recovered (bad base64)."""

    payload: bytes | None
    offset: int | None = None
    append_time_us: int | None = None


@dataclass(slots=True)
class Decoded:
    """What a payload decoder found: column values, messages, problems.

    ``single`` is the one payload / value of a frame that carries exactly one outside a
    batch (publish, event, cache_put / cache_value value): the ``payload*`` columns.
    ``common`` are the values every message row of this frame repeats."""

    values: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    single: bytes | None = None
    has_single: bool = False
    common: dict[str, Any] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None  # why decoding stopped early (decode_error column)


def _s64(v: int) -> int:
    """A u64 as the int64 column stores it (two's complement, like Rust's `as i64`)."""
    return v - _U64_LIMIT if v >= _I64_LIMIT else v


# ----------------------------------------------------------------------- binary


class _Short(Exception):
    """Internal: the layout needs more bytes than the payload has."""


class _Cursor:
    """Bounds-checked big-endian reader over one payload (after aioquic's Buffer)."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.buf) - self.pos

    def _take(self, st: struct.Struct, what: str) -> int:
        if self.left < st.size:
            raise _Short(f"{what}: {st.size} bytes needed at payload byte {self.pos}, "
                         f"{self.left} left")
        v: int = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def u8(self, what: str) -> int:
        return self._take(_U8, what)

    def u16(self, what: str) -> int:
        return self._take(_U16, what)

    def u32(self, what: str) -> int:
        return self._take(_U32, what)

    def u64(self, what: str) -> int:
        return self._take(_U64, what)

    def raw(self, n: int, what: str) -> bytes:
        if self.left < n:
            raise _Short(f"{what}: {n} bytes declared at payload byte {self.pos}, "
                         f"{self.left} left")
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(v)


def _text(raw: bytes, what: str, out: Decoded) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        out.problems.append((FelixAnomaly.BAD_UTF8, f"{what} is not valid UTF-8 (shown with \\x "
                                               "escapes; Felix would reject the frame)"))
        return raw.decode("utf-8", "backslashreplace")


def _str16(cur: _Cursor, what: str, out: Decoded) -> str:
    n = cur.u16(f"{what} length")
    return _text(cur.raw(n, what), what, out)


def _payloads(cur: _Cursor, out: Decoded, *, timestamps: bool = False,
              base_offset: int | None = None) -> None:
    """count u32, then count x ([append_time u64], len u32, bytes)."""
    count = cur.u32("count")
    out.values["payload_count"] = count
    if count > cur.left // 4:  # the anti-DoS rule of Felix's decoder (§5.5)
        raise _Short(f"count {count} exceeds the {cur.left} bytes left / 4")
    buf, pos, end = cur.buf, cur.pos, len(cur.buf)
    msgs = out.messages
    unpack_u32, unpack_u64 = _U32.unpack_from, _U64.unpack_from
    try:
        for i in range(count):
            ts = None
            if timestamps:
                if end - pos < 8:
                    raise _Short(f"append time of message {i}: 8 bytes needed at payload "
                                 f"byte {pos}, {end - pos} left")
                ts = unpack_u64(buf, pos)[0]
                pos += 8
            if end - pos < 4:
                raise _Short(f"length of message {i}: 4 bytes needed at payload byte {pos}, "
                             f"{end - pos} left")
            n = unpack_u32(buf, pos)[0]
            pos += 4
            if end - pos < n:
                raise _Short(f"message {i}: {n} bytes declared at payload byte {pos}, "
                             f"{end - pos} left")
            off = None if base_offset is None else _s64((base_offset + i) % _U64_LIMIT)
            msgs.append(Message(bytes(buf[pos : pos + n]), off, ts))
            pos += n
    finally:
        cur.pos = pos


def _publish_body(cur: _Cursor, flags: int, out: Decoded) -> None:
    v = out.values
    if flags & _KEYED:
        v["key"] = _str16(cur, "key", out)
    v["tenant_id"] = _str16(cur, "tenant", out)
    v["namespace"] = _str16(cur, "namespace", out)
    v["stream"] = _str16(cur, "stream", out)
    _payloads(cur, out)


def _acked_prefix(cur: _Cursor, flags: int, out: Decoded) -> None:
    v = out.values
    v["request_id"] = _s64(cur.u64("request_id"))
    mode = cur.u8("ack_mode")
    v["ack_mode"] = ACK_MODES.get(mode) or str(mode)
    if mode not in ACK_MODES:
        out.problems.append((FelixAnomaly.BAD_ACK_MODE,
                             f"ack_mode {mode} is neither 1 (per_message) nor 2 (per_batch)"))
    if flags & _IDEMPOTENT:
        v["producer_id"] = _s64(cur.u64("producer_id"))
        v["sequence"] = _s64(cur.u64("sequence"))


def _publish_ack(cur: _Cursor, flags: int, out: Decoded) -> None:
    v = out.values
    status = cur.u8("status")
    v["ack_status"] = ACK_STATUS.get(status) or str(status)
    if status not in ACK_STATUS:
        out.problems.append((FelixAnomaly.BAD_ACK_STATUS,
                             f"publish ack status {status} is neither 0 (ok) nor 1 (error)"))
    v["request_id"] = _s64(cur.u64("request_id"))
    message = _str16(cur, "message", out)
    if message or status != AckStatus.OK:
        v["error_message"] = message
    if flags & _ACK_CODE:
        code = cur.u16("code")
        retry = cur.u8("retry")
        v["error_code"] = ERROR_CODES.get(code) or str(code)
        v["retry"] = RETRY_CLASSES.get(retry) or str(retry)
    if flags & _ACK_DETAIL:
        reason = _str16(cur, "reason", out)
        after = cur.u64("retry_after_ms")
        v["reason"] = reason or None  # 0 / empty on the wire: "not said"
        v["retry_after_ms"] = _s64(after) if after else None
    if flags & _ACK_OWNER:
        v["node_id"] = _str16(cur, "owner node_id", out)
        v["addr"] = _str16(cur, "owner addr", out) or None  # empty: not published
        v["generation"] = _s64(cur.u64("owner generation"))
    if flags & _ACK_OFFSET:
        v["offset"] = _s64(cur.u64("offset"))


def _event_batch(cur: _Cursor, flags: int, shared: bool, out: Decoded) -> None:
    v = out.values
    if not shared:
        v["subscription_id"] = _s64(cur.u64("subscription_id"))
    base = None
    if flags & _OFFSETS:
        base = cur.u64("base_offset")
        v["offset"] = _s64(base)
    if flags & _SKIPPED:
        v["skipped_before"] = _s64(cur.u64("skipped_before"))
    if flags & _PUBLISHER:
        n = cur.u8("publisher length")
        v["publisher"] = _text(cur.raw(n, "publisher"), "publisher", out)
    for k in ("subscription_id", "publisher"):
        if k in v:
            out.common[k] = v[k]
    _payloads(cur, out, timestamps=bool(flags & _TIMESTAMPS), base_offset=base)


def decode_binary(kind: str, flags: int, payload: bytes) -> Decoded:
    """Decode a binary payload of ``kind`` (from ``classify``) per §5.5."""
    out = Decoded()
    cur = _Cursor(payload)
    try:
        if kind == Kind.PUBLISH_BATCH:
            _publish_body(cur, flags, out)
        elif kind == Kind.ACKED_PUBLISH_BATCH:
            _acked_prefix(cur, flags, out)
            _publish_body(cur, flags, out)
        elif kind == Kind.PUBLISH_ACK:
            _publish_ack(cur, flags, out)
        elif kind in (Kind.EVENT_BATCH, Kind.SHARED_EVENT_BATCH):
            _event_batch(cur, flags, kind == Kind.SHARED_EVENT_BATCH, out)
    except _Short as exc:
        out.error = str(exc)
        out.problems.append((FelixAnomaly.BAD_BINARY, f"{kind}: {exc}; the payload does not "
                                                       "hold the layout its flags select"))
    else:
        if cur.left:
            out.problems.append((
                FelixAnomaly.TRAILING_BYTES,
                f"{kind}: {cur.left} bytes after the layout's end (payload byte {cur.pos} "
                f"of {len(payload)})",
            ))
    if kind in (Kind.PUBLISH_BATCH, Kind.ACKED_PUBLISH_BATCH):
        for k in ("tenant_id", "namespace", "stream", "key", "request_id", "ack_mode",
                  "producer_id", "sequence"):
            if k in out.values:
                out.common[k] = out.values[k]
    return out


# ----------------------------------------------------------------------- JSON

# JSON field -> (column, expected kind): "str", "u64" (u64 as int64), "text" (string or
# number as text), "b64" handled apart
_JSON_FIELDS: dict[str, tuple[str, str]] = {
    "tenant_id": ("tenant_id", "str"),
    "namespace": ("namespace", "str"),
    "stream": ("stream", "str"),
    "cache": ("cache", "str"),
    "request_id": ("request_id", "u64"),
    "subscription_id": ("subscription_id", "u64"),
    "ttl_ms": ("ttl_ms", "u64"),
    "ack": ("ack_mode", "str"),
    "offset": ("offset", "u64"),
    "base_offset": ("offset", "u64"),
    "resume_from": ("offset", "u64"),
    "producer_id": ("producer_id", "u64"),
    "sequence": ("sequence", "u64"),
    "message": ("error_message", "str"),
    "code": ("error_code", "text"),
    "retry": ("retry", "text"),
    "node_id": ("node_id", "text"),
    "addr": ("addr", "str"),
    "generation": ("generation", "u64"),
    "client_flags": ("advertised_flags", "u16"),
    "server_flags": ("advertised_flags", "u16"),
    "client_features": ("features", "u32"),
    "server_features": ("features", "u32"),
    "client_features_hi": ("features_hi", "u32"),
    "server_features_hi": ("features_hi", "u32"),
}
# types whose `key` is base64 bytes (publish routing keys); elsewhere it is a string
_BYTES_KEY_TYPES = frozenset({"publish", "publish_batch", "publish_idempotent"})
# types whose `value` is base64 bytes (elsewhere, e.g. counter_value, a number)
_BYTES_VALUE_TYPES = frozenset({"cache_put", "cache_value", "cache_event"})
# values every message row of a JSON frame repeats
_COMMON = ("tenant_id", "namespace", "stream", "key", "request_id", "ack_mode",
           "producer_id", "sequence", "subscription_id")
_LIMITS = {"u16": 1 << 16, "u32": 1 << 32, "u64": _U64_LIMIT}


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _b64(s: str) -> bytes | None:
    """Standard base64 with padding, as Felix writes it; None if it is not."""
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def _compact(v: object) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"),
                                                   ensure_ascii=False)


def decode_json(payload: bytes) -> Decoded:
    """Decode a flags-0 payload: a UTF-8 JSON object tagged by ``"type"`` (§5.6).  Any
    type is accepted and labelled; the fields users filter on become columns."""
    out = Decoded()
    try:
        text = payload.decode("utf-8")
        obj = json.loads(text, parse_constant=_no_constant)
    except Exception as exc:  # UnicodeDecodeError, ValueError, RecursionError
        out.error = f"not a JSON text: {type(exc).__name__}: {exc}"[:300]
        out.problems.append((FelixAnomaly.BAD_JSON, f"flags 0 but the payload is {out.error}"))
        return out
    if not isinstance(obj, dict):
        out.error = f"JSON {type(obj).__name__}, not an object"
        out.problems.append((FelixAnomaly.BAD_JSON, f"flags 0 but the payload is a {out.error}"))
        return out
    typ = obj.get("type")
    if not isinstance(typ, str):
        out.error = "JSON object without a string \"type\""
        out.problems.append((FelixAnomaly.BAD_JSON, out.error))
        typ = None
    v = out.values
    v["type"] = typ
    bad: list[str] = []
    for name, raw in obj.items():
        spec = _JSON_FIELDS.get(name)
        if spec is None or raw is None:
            continue
        col, how = spec
        if how == "str":
            if isinstance(raw, str):
                v[col] = raw
            else:
                bad.append(f"{name} ({type(raw).__name__}, want string)")
        elif how == "text":
            if isinstance(raw, str | int) and not isinstance(raw, bool):
                v[col] = str(raw)
            else:
                v[col] = _compact(raw)
        else:  # unsigned integers
            if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < _LIMITS[how]:
                v[col] = _s64(raw) if how == "u64" else raw
            else:
                bad.append(f"{name} ({_compact(raw)[:40]}, want u{how[1:]})")
    if "features" in v:
        v["feature_names"] = feature_names(v["features"])
    # fields whose meaning depends on the type
    key = obj.get("key")
    if isinstance(key, str):
        if typ in _BYTES_KEY_TYPES:
            raw = _b64(key)
            if raw is None:
                bad.append("key (not base64)")
            else:
                v["key"] = raw.decode("utf-8", "backslashreplace")
        else:
            v["key"] = key
    elif key is not None:
        bad.append(f"key ({type(key).__name__}, want string)")
    start = obj.get("start")
    if start is not None:
        v["start"] = _compact(start)
    reason = obj.get("reason")
    if reason is not None:
        v["reason"] = _compact(reason)
    detail = obj.get("detail")
    if isinstance(detail, dict):
        if isinstance(detail.get("reason"), str):
            v["reason"] = detail["reason"]
        after = detail.get("retry_after_ms")
        if isinstance(after, int) and not isinstance(after, bool) and 0 <= after < _U64_LIMIT:
            v["retry_after_ms"] = _s64(after)
    if typ in ("publish_ok", "publish_error"):
        v["ack_status"] = "ok" if typ == "publish_ok" else "error"
    # message bytes
    base = obj.get("offset") if "payload" in obj else obj.get("base_offset")
    base = base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < (
        _U64_LIMIT) else None
    payload_b64 = obj.get("payload")
    if "payload" in obj:
        if isinstance(payload_b64, str):
            data = _b64(payload_b64)
            if data is None:
                bad.append("payload (not base64)")
            out.single, out.has_single = data, True
            out.messages.append(Message(data, None if base is None else _s64(base)))
            v["payload_count"] = 1
        elif payload_b64 is not None:
            bad.append(f"payload ({type(payload_b64).__name__}, want base64 string)")
    payloads = obj.get("payloads")
    if isinstance(payloads, list):
        v["payload_count"] = len(payloads)
        n_bad = 0
        for i, item in enumerate(payloads):
            data = _b64(item) if isinstance(item, str) else None
            n_bad += data is None
            off = None if base is None else _s64((base + i) % _U64_LIMIT)
            out.messages.append(Message(data, off))
        if n_bad:
            bad.append(f"payloads ({n_bad} of {len(payloads)} not base64 strings)")
    elif payloads is not None:
        bad.append(f"payloads ({type(payloads).__name__}, want a list)")
    value = obj.get("value")
    if typ in _BYTES_VALUE_TYPES and "value" in obj:
        if isinstance(value, str):
            data = _b64(value)
            if data is None:
                bad.append("value (not base64)")
            out.single, out.has_single = data, True
        elif value is None:
            out.has_single = True  # an explicit null: no value (a cache miss)
        else:
            bad.append(f"value ({type(value).__name__}, want base64 string or null)")
    if bad:
        out.problems.append((FelixAnomaly.BAD_FIELD,
                             f"{typ or 'JSON'}: fields of an unexpected form, left out of the "
                             f"columns: {', '.join(bad)}"))
    for k in _COMMON:
        if k in v:
            out.common[k] = v[k]
    return out

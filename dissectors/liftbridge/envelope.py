"""Liftbridge envelope and message-set layouts (pure functions, never raise on input).

Envelope (protocol-facts §3.1): magic B9 0E 43 B4, version u8, HeaderLen u8, flags u8
(bit 0: CRC-32C present), MsgType u8, then — only with the flag — a big-endian CRC-32C
of the payload ``data[HeaderLen:]``.  The Go reader requires HeaderLen = 12 when the
flag is set and otherwise just uses HeaderLen as the payload offset; we require
``8 ≤ HeaderLen ≤ len`` and report any HeaderLen other than 8 / 12 as a mismatch.

ReplicationResponse body (§3.4, ``server/replicator.go``): leaderEpoch u64, HW i64,
then entries until the end: offset i64, timestamp i64, leaderEpoch u64, size u32, and
``size`` bytes of a commit-log message: crc u32 (CRC-32C of every following byte of
the message), magic i8, attributes i8, key (i32 length, -1 = null), value (i32
length, -1 = null), header count i16, each header key (i16 length) and value (i32
length).  All big-endian.

``parse_entries`` takes the compiled parse (``dissectors.proto.walk.message_set_parser``)
when it answers, which it does only for a body the reference ``_parse_entries`` reads
with nothing to report (every entry whole, its CRC matching, nothing left over, header
keys valid UTF-8), giving the same answer: ~29 µs of Python a ReplicationResponse (the
costliest Liftbridge type, ~2 entries each) was the struct reads, slices and the
exceptions of the blob reader.  tests/liftbridge/test_liftbridge.py checks the two
under hypothesis.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from dissectors.checksum import crc32c  # (re-exported: the CRC the envelope stores)
from dissectors.liftbridge.magic import MAGIC  # re-exported
from dissectors.proto.walk import message_set_parser

__all__ = [
    "FLAG_CRC",
    "MAGIC",
    "Entry",
    "Header",
    "crc32c",
    "parse_entries",
    "parse_header",
]

FLAG_CRC = 0x01
HEADER_LEN = 8
HEADER_LEN_CRC = 12
VERSION = 0

_U32 = struct.Struct(">I")
_RR_HEAD = struct.Struct(">Qq")  # leaderEpoch, HW
_ENTRY_HEAD = struct.Struct(">qqQI")  # offset, timestamp, leaderEpoch, size (28 bytes)
_MSG_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass(slots=True)
class Header:
    """What the envelope header says, and where the payload is (``payload_at`` is None
    when it cannot be located)."""

    version: int | None = None
    header_len: int | None = None
    flags: int | None = None
    msg_type: int | None = None
    crc: int | None = None
    payload_at: int | None = None
    crc_status: str | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)  # (anomaly kind, detail)
    fatal: str | None = None  # why the payload is not decoded


def parse_header(data: bytes) -> Header:
    """Parse an envelope header (``data`` starts with ``MAGIC``)."""
    h = Header()
    n = len(data)
    if n > 4:
        h.version = data[4]
    if n > 5:
        h.header_len = data[5]
    if n > 6:
        h.flags = data[6]
    if n > 7:
        h.msg_type = data[7]
    if n < HEADER_LEN:
        h.fatal = f"envelope of {n} bytes is shorter than the 8-byte header"
        h.problems.append(("liftbridge.truncated_header", h.fatal))
        return h
    if h.version != VERSION:
        h.fatal = f"unknown envelope version {h.version} (0 is the only one); payload not decoded"
        h.problems.append(("liftbridge.unknown_version", h.fatal))
    flags = h.flags or 0
    if flags & ~FLAG_CRC:
        h.problems.append(
            ("liftbridge.unknown_flags", f"flags 0x{flags:02x} has bits other than CRC (0x01)")
        )
    hl = h.header_len or 0
    has_crc = bool(flags & FLAG_CRC)
    if has_crc:
        if n < HEADER_LEN_CRC:
            h.fatal = f"CRC flag set but the envelope has only {n} bytes (header needs 12)"
            h.problems.append(("liftbridge.truncated_header", h.fatal))
            return h
        h.crc = _U32.unpack_from(data, 8)[0]
        if hl != HEADER_LEN_CRC:
            h.fatal = (
                f"CRC flag set but HeaderLen is {hl}, not 12: Liftbridge rejects this as an "
                "incorrect envelope header size; payload not decoded"
            )
            h.problems.append(("liftbridge.header_len_mismatch", h.fatal))
            return h
    elif hl != HEADER_LEN:
        h.problems.append((
            "liftbridge.header_len_mismatch",
            f"HeaderLen is {hl} without a CRC flag (expected 8); payload taken from there",
        ))
    if hl < HEADER_LEN or hl > n:
        h.fatal = f"HeaderLen {hl} outside 8..{n} (envelope length): payload cannot be located"
        h.problems.append(("liftbridge.bad_header_len", h.fatal))
        return h
    h.payload_at = hl
    if h.crc is not None:
        got = crc32c(data[hl:])
        if got == h.crc:
            h.crc_status = "ok"
        else:
            h.crc_status = "mismatch"
            h.problems.append((
                "liftbridge.crc_mismatch",
                f"envelope CRC-32C 0x{h.crc:08x}, computed over the {n - hl} payload bytes: "
                f"0x{got:08x}",
            ))
    else:
        h.crc_status = "absent"
    return h


@dataclass(slots=True)
class Entry:
    index: int
    offset: int | None = None
    timestamp_ns: int | None = None
    leader_epoch: int | None = None
    size: int | None = None
    crc: int | None = None
    crc_status: str | None = None
    magic: int | None = None
    attributes: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: dict[str, bytes | None] | None = None
    error: str | None = None


# (the switch MSGCAP_PROTO_WALK is read once, here)
_COMPILED = message_set_parser()


def parse_entries(
    body: bytes, base: int
) -> tuple[int | None, int | None, list[Entry], list[tuple[str, str]]]:
    """ReplicationResponse body → (leader epoch, HW, entries, problems).  ``base`` is
    the body's offset in the NATS payload (for error offsets).  The compiled parse's
    answer when it gives one, else the reference's (module docstring)."""
    if _COMPILED is not None:
        got = _COMPILED(body, Entry, crc32c, "ok")
        if got is not None:
            return got  # (its documented shape)
    return _parse_entries(body, base)


def _parse_entries(
    body: bytes, base: int
) -> tuple[int | None, int | None, list[Entry], list[tuple[str, str]]]:
    """``parse_entries``, the reference: every body, whatever it holds."""
    problems: list[tuple[str, str]] = []
    if len(body) < _RR_HEAD.size:
        problems.append((
            "liftbridge.bad_message_set",
            f"ReplicationResponse body of {len(body)} bytes is shorter than leader epoch + "
            "high watermark (16)",
        ))
        return None, None, [], problems
    epoch, hw = _RR_HEAD.unpack_from(body, 0)
    pos = _RR_HEAD.size
    entries: list[Entry] = []
    end = len(body)
    while pos < end:
        e = Entry(len(entries))
        if end - pos < _ENTRY_HEAD.size:
            e.error = (
                f"entry header at offset {base + pos} cut short: {end - pos} of 28 bytes"
            )
            entries.append(e)
            problems.append(("liftbridge.bad_message_set", e.error))
            break
        e.offset, e.timestamp_ns, e.leader_epoch, e.size = _ENTRY_HEAD.unpack_from(body, pos)
        pos += _ENTRY_HEAD.size
        msg = body[pos : pos + e.size]
        msg_at = base + pos
        pos += e.size
        entries.append(e)
        if len(msg) < e.size:
            e.error = (
                f"entry {e.index} message at offset {msg_at} declares {e.size} bytes, "
                f"{len(msg)} present"
            )
            problems.append(("liftbridge.bad_message_set", e.error))
            _parse_message(e, msg, msg_at, complete=False)
            break
        _parse_message(e, msg, msg_at, complete=True)
        if e.error is not None:
            problems.append(("liftbridge.bad_message_set", e.error))
        if e.crc_status == "mismatch":
            problems.append((
                "liftbridge.entry_crc_mismatch",
                f"entry {e.index} (offset {e.offset}): stored CRC-32C 0x{e.crc:08x}, computed "
                f"0x{crc32c(msg[4:]):08x}",
            ))
    return epoch, hw, entries, problems


def _parse_message(e: Entry, msg: bytes, at: int, complete: bool) -> None:
    n = len(msg)
    if n < _MSG_HEAD.size:
        e.error = e.error or f"entry {e.index} message at offset {at}: {n} bytes, header needs 6"
        return
    e.crc, e.magic, e.attributes = _MSG_HEAD.unpack_from(msg, 0)
    if complete:
        e.crc_status = "ok" if crc32c(msg[4:]) == e.crc else "mismatch"
    pos = _MSG_HEAD.size
    try:
        e.key, pos = _blob(msg, pos, _I32, "key")
        e.value, pos = _blob(msg, pos, _I32, "value")
        if pos + 2 > n:
            raise _Cut("header count", pos)
        count = _I16.unpack_from(msg, pos)[0]
        pos += 2
        if count < 0:
            raise _Bad(f"negative header count {count}", pos - 2)
        headers: dict[str, bytes | None] = {}
        e.headers = headers
        for _ in range(count):
            k, pos = _blob(msg, pos, _I16, "header key")
            v, pos = _blob(msg, pos, _I32, "header value")
            headers[(k or b"").decode("utf-8", "backslashreplace")] = v
        if pos != n:
            raise _Bad(f"{n - pos} bytes left after the headers", pos)
    except _Cut as c:
        e.error = e.error or f"entry {e.index}: {c.what} cut short at offset {at + c.pos}"
    except _Bad as b:
        e.error = e.error or f"entry {e.index}: {b.what} at offset {at + b.pos}"


class _Cut(Exception):
    def __init__(self, what: str, pos: int) -> None:
        self.what = what
        self.pos = pos


class _Bad(_Cut):
    pass


def _blob(msg: bytes, pos: int, length: struct.Struct, what: str) -> tuple[Any, int]:
    if pos + length.size > len(msg):
        raise _Cut(f"{what} length", pos)
    n = length.unpack_from(msg, pos)[0]
    pos += length.size
    if n == -1:
        return None, pos
    if n < 0:
        raise _Bad(f"{what} length {n}", pos - length.size)
    if pos + n > len(msg):
        raise _Cut(f"{what} ({n} bytes)", pos)
    return msg[pos : pos + n], pos + n

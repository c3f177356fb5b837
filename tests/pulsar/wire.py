"""Hand-built Pulsar frames for tests (protocol-facts §4.1), encoded with protobuf
classes from our own pulsar.proto, and a tiny driver that feeds a session."""

from __future__ import annotations

import hashlib
import struct

import crc32c

from dissectors.api import Direction, Record, Span
from dissectors.pulsar import PulsarDissector
from dissectors.pulsar.pb import message_class

BaseCommand = message_class("BaseCommand")
MessageMetadata = message_class("MessageMetadata")
SingleMessageMetadata = message_class("SingleMessageMetadata")
BrokerEntryMetadata = message_class("BrokerEntryMetadata")
C, S = Direction.C2S, Direction.S2C


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def cmd(type_name: str, partial: bool = False, **fields) -> bytes:
    """A serialized BaseCommand of ``type_name`` with its sub-command ``fields``."""
    t = BaseCommand.Type.Value(type_name)
    sub = BaseCommand.DESCRIPTOR.fields_by_number[t].name
    c = BaseCommand(type=t)
    target = getattr(c, sub)
    if hasattr(target, "SetInParent"):
        target.SetInParent()
        for k, v in fields.items():
            _set(target, k, v)
    else:  # 70-81: raw bytes
        setattr(c, sub, fields.get("raw", b""))
    return c.SerializePartialToString() if partial else c.SerializeToString()


def _set(msg, k, v) -> None:
    f = msg.DESCRIPTOR.fields_by_name[k]
    if getattr(f, "is_repeated", None) or getattr(f, "label", 1) == 3:
        field = getattr(msg, k)
        for x in v:
            if isinstance(x, dict):
                field.add(**x)
            else:
                field.append(x)
    elif isinstance(v, dict):
        sub = getattr(msg, k)
        sub.SetInParent()
        for kk, vv in v.items():
            _set(sub, kk, vv)
    else:
        setattr(msg, k, v)


def metadata(**fields) -> bytes:
    m = MessageMetadata()
    for k, v in fields.items():
        _set(m, k, v)
    return m.SerializePartialToString()


def batch(entries: list[tuple[bytes, dict]]) -> bytes:
    """The uncompressed payload of a batch: [u32 size, SingleMessageMetadata, payload]."""
    out = b""
    for payload, fields in entries:
        s = SingleMessageMetadata(payload_size=len(payload))
        for k, v in fields.items():
            _set(s, k, v)
        b = s.SerializeToString()
        out += struct.pack(">I", len(b)) + b + payload
    return out


def frame(command: bytes, md: bytes | None = None, payload: bytes = b"", *,
          checksum: bool | int = True, bem: bytes | None = None) -> bytes:
    """A whole frame; with ``md`` a payload command section follows.  ``checksum``: True
    (correct CRC-32C), False (no 0x0e01 magic) or an int (that value, e.g. a wrong one)."""
    section = b""
    if md is not None:
        hp = struct.pack(">I", len(md)) + md + payload
        if bem is not None:
            section += struct.pack(">HI", 0x0E02, len(bem)) + bem
        if checksum is not False:
            crc = crc32c.crc32c(hp) if checksum is True else checksum
            section += struct.pack(">HI", 0x0E01, crc)
        section += hp
    return struct.pack(">II", 4 + len(command) + len(section), len(command)) + command + section


class Run:
    """Feed a conversation into one session; checks byte accounting at close."""

    def __init__(self, options: dict | None = None) -> None:
        self.session = PulsarDissector.session(options or {})
        self.off = [0, 0]
        self.fed = [0, 0]
        self.records: list[Record] = []
        self.frame_no = 0

    def feed(self, direction: Direction, data: bytes, cuts=()) -> Run:
        bounds = sorted({0, len(data), *[c for c in cuts if 0 < c < len(data)]})
        for a, b in zip(bounds, bounds[1:], strict=False):
            self.frame_no += 1
            sp = Span(self.off[direction], self.frame_no * 1000, self.frame_no * 1000,
                      self.frame_no, self.frame_no)
            self.records += self.session.feed(direction, data[a:b], sp)
            self.off[direction] += b - a
            self.fed[direction] += b - a
        return self

    def gap(self, direction: Direction, nbytes: int) -> Run:
        self.records += self.session.gap(direction, self.off[direction], nbytes, 0)
        self.off[direction] += nbytes
        return self

    def close(self) -> Run:
        self.records += self.session.close(0)
        s = self.session
        for d in (0, 1):
            assert s.decoded_bytes[d] + s.undecoded_bytes[d] == self.fed[d]
        return self

    def all_records(self) -> list[Record]:
        out: list[Record] = []

        def walk(rs):
            for r in rs:
                out.append(r)
                walk(r.children)

        walk(self.records)
        return out

    def rows(self, table: str = "pulsar_commands") -> list[dict]:
        return [nonnull(r.values) for r in self.all_records() if r.table == table]

    def messages(self) -> list[dict]:
        return self.rows("pulsar_messages")

    def anomalies(self) -> list[str]:
        return [r.values["kind"] for r in self.all_records() if r.table == "anomalies"]

    def shape(self) -> list[tuple]:
        return [(r.table, int(r.direction), r.offset_start, r.offset_end, nonnull(r.values))
                for r in self.all_records()]


def nonnull(values: dict) -> dict:
    return {k: v for k, v in values.items() if v is not None}

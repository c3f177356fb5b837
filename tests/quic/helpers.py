"""Helpers for the QUIC tests: synthetic flows and packets, event collection, captures."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from reassembly.events import (
    Anomaly,
    Datagram,
    Direction,
    Endpoint,
    FlowInfo,
    QuicHandshake,
    QuicPacket,
    QuicStreamEnd,
    RoleSource,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.limits import Limits
from reassembly.quic.buffer import varint_size
from reassembly.quic.crypto import PacketProtection
from reassembly.quic.keylog import KeyLog
from reassembly.quic.layer import QuicLayer, read_quic_events
from tests.conftest import SHARED

CAPTURES = SHARED / "captures"
EXPECTED = json.loads((CAPTURES / "expected.json").read_text())
T0 = 1_700_000_000_000_000_000


def make_flow(
    flow_id: int = 0, client: tuple[str, int] = ("10.0.0.1", 50000),
    server: tuple[str, int] = ("10.0.0.2", 443),
) -> FlowInfo:
    return FlowInfo(
        flow_id, Transport.UDP, Endpoint(*client), Endpoint(*server), RoleSource.PORT,
        T0, T0, 1, 1,
    )


def varint(v: int) -> bytes:
    n = varint_size(v)
    prefix = {1: 0, 2: 1, 4: 2, 8: 3}[n] << (8 * n - 2)
    return (prefix | v).to_bytes(n, "big")


# -- frames ---------------------------------------------------------------------------


def stream_frame(sid: int, off: int, data: bytes, fin: bool = False) -> bytes:
    return bytes([0x0E | int(fin)]) + varint(sid) + varint(off) + varint(len(data)) + data


def crypto_frame(off: int, data: bytes) -> bytes:
    return b"\x06" + varint(off) + varint(len(data)) + data


def reset_frame(sid: int, err: int, final: int) -> bytes:
    return b"\x04" + varint(sid) + varint(err) + varint(final)


def new_cid_frame(seq: int, cid: bytes) -> bytes:
    return b"\x18" + varint(seq) + varint(0) + bytes([len(cid)]) + cid + bytes(16)


def close_frame(code: int, reason: bytes) -> bytes:
    return b"\x1c" + varint(code) + varint(0) + varint(len(reason)) + reason


# -- packets --------------------------------------------------------------------------


def _protect(prot: PacketProtection, header: bytes, pn_off: int, pn: int, pn_len: int,
             payload: bytes, long: bool) -> bytes:
    need = 4 - pn_len  # the header-protection sample starts 4 bytes after the pn
    if len(payload) < need:
        payload += bytes(need - len(payload))
    ct = prot.seal(pn, header, payload)
    sample = ct[4 - pn_len : 4 - pn_len + 16]
    mask = prot.mask(sample)
    out = bytearray(header + ct)
    out[0] ^= mask[0] & (0x0F if long else 0x1F)
    for i in range(pn_len):
        out[pn_off + i] ^= mask[1 + i]
    return bytes(out)


def seal_short(prot: PacketProtection, dcid: bytes, pn: int, payload: bytes,
               key_phase: int = 0, pn_len: int = 2) -> bytes:
    first = 0x40 | (key_phase << 2) | (pn_len - 1)
    pn_bytes = (pn & ((1 << (8 * pn_len)) - 1)).to_bytes(pn_len, "big")
    header = bytes([first]) + dcid + pn_bytes
    return _protect(prot, header, 1 + len(dcid), pn, pn_len, payload, False)


def seal_long(prot: PacketProtection, type_bits: int, dcid: bytes, scid: bytes, pn: int,
              payload: bytes, version: int = 1, token: bytes | None = None,
              pn_len: int = 2) -> bytes:
    if len(payload) < 4 - pn_len:
        payload += bytes(4 - pn_len - len(payload))
    first = 0xC0 | (type_bits << 4) | (pn_len - 1)
    head = bytes([first]) + version.to_bytes(4, "big") + bytes([len(dcid)]) + dcid
    head += bytes([len(scid)]) + scid
    if token is not None:
        head += varint(len(token)) + token
    head += varint(pn_len + len(payload) + 16)
    pn_off = len(head)
    header = head + (pn & ((1 << (8 * pn_len)) - 1)).to_bytes(pn_len, "big")
    return _protect(prot, header, pn_off, pn, pn_len, payload, True)


# -- collection -----------------------------------------------------------------------


@dataclass
class Run:
    """A layer fed by hand; ``events`` collects everything it emits."""

    limits: Limits = field(default_factory=Limits)
    keylog: KeyLog | None = None
    events: list = field(default_factory=list)
    frame: int = 0

    def __post_init__(self) -> None:
        self.layer = QuicLayer(self.limits, self.events.append, self.keylog)

    def send(self, flow: FlowInfo, direction: Direction, data: bytes) -> bool:
        self.frame += 1
        # what the flow table does before it emits a Datagram
        flow.packets[direction] += 1
        flow.payload_bytes[direction] += len(data)
        flow.stream_bytes[direction] += len(data)
        return self.layer.datagram(
            Datagram(flow, direction, data, T0 + self.frame * 1000, self.frame)
        )

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def packets(self) -> list[QuicPacket]:
        return self.of(QuicPacket)

    def kinds(self) -> Counter:
        return Counter(a.kind for a in self.of(Anomaly))

    def streams(self) -> dict[tuple[int, int, int], bytes]:
        return stream_bytes(self.events)


def stream_bytes(events) -> dict[tuple[int, int, int], bytes]:
    """(flow id, direction, stream id) -> bytes, gaps rendered as [N missing]; checks
    offsets are contiguous per stream direction."""
    out: dict[tuple[int, int, int], bytearray] = {}
    for ev in events:
        if isinstance(ev, StreamData | StreamGap) and ev.stream_id is not None:
            key = (ev.flow.flow_id, int(ev.direction), ev.stream_id)
            buf = out.setdefault(key, bytearray())
            assert ev.offset == len(buf) or b"missing]" in buf, (key, ev.offset, len(buf))
            if isinstance(ev, StreamData):
                buf += ev.data
            else:
                buf += b"[%d missing]" % ev.nbytes
    return {k: bytes(v) for k, v in out.items()}


@dataclass
class CaptureRun:
    events: list
    packets: list[QuicPacket]
    handshakes: dict[int, QuicHandshake]
    anomalies: list[Anomaly]
    stream_ends: list[QuicStreamEnd]
    datagrams: list[Datagram]

    @property
    def frames(self) -> set[int]:
        return {p.frame for p in self.packets}

    def stream_packets(self) -> int:
        return sum("STREAM" in p.frame_types for p in self.packets)


def run_capture(name: str, keylog: KeyLog | None = None, limits: Limits | None = None
                ) -> CaptureRun:
    events = list(read_quic_events(CAPTURES / name, limits, keylog))
    hs: dict[int, QuicHandshake] = {}
    for e in events:
        if isinstance(e, QuicHandshake):
            hs[e.flow.flow_id] = e
    return CaptureRun(
        events,
        [e for e in events if isinstance(e, QuicPacket)],
        hs,
        [e for e in events if isinstance(e, Anomaly)],
        [e for e in events if isinstance(e, QuicStreamEnd)],
        [e for e in events if isinstance(e, Datagram)],
    )


def keylog_file(path: Path) -> KeyLog:
    return KeyLog.from_file(path)

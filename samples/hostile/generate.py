"""Hostile captures for the robustness suite (``tests/hostile``, ``docs/robustness.md``).

Every capture is written with ``struct`` straight to disk (scapy is far too slow for
millions of packets) and nothing large is committed: the tests generate what they need
in a temporary directory.  Each ``write_*`` function returns the facts the generator
knows by construction (bytes dropped, declared sizes, ...) so the tests compare msgcap's
output with the truth, not with itself.

Run ``python samples/hostile/generate.py OUTDIR`` to write every case (about 400 MB,
most of it the 100 MB NATS line and the 2 GB sequence jump's tail) for a look with
``msgcap dissect`` or Wireshark.

Cases (see ``CASES``): a SYN flood of half-open flows; a flow whose segments arrive out
of order with holes that never fill; a 2 GiB sequence jump; overlapping segments with
different bytes in every arrangement; a NATS control line of 100 MB without a newline;
PUB/HPUB declaring 4 GB (and 1 GB); a Pulsar frame declaring 4 GB; decompression bombs
in a Pulsar batch (zstd 4 GiB from 128 KiB, zlib, lz4, snappy); protobuf with deep
nesting and huge length prefixes (Pulsar, STAN, Liftbridge); QUIC with garbage after
valid headers; pcap records with caplen above the snaplen, the sanity limit and the
file; pcapng blocks with bad lengths.
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.reassembly.synth import (  # noqa: E402 - after the sys.path line above
    ACK,
    PSH,
    SYN,
    PcapWriter,
    tcp_frame,
    write_sequence_jump,
    write_syn_flood,
)

FIN = 0x01
RST = 0x04
T0_US = 1_700_000_000_000_000
CLIENT = bytes([10, 0, 0, 1])
SERVER = bytes([10, 0, 0, 2])

_ETH_IP = struct.Struct("!6s6sHBBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def udp_frame(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    total = 20 + 8 + len(data)
    eth_ip = _ETH_IP.pack(
        b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, total, 1, 0, 64, 17, 0, src, dst
    )
    return eth_ip + _UDP.pack(sport, dport, 8 + len(data), 0) + data


class Conversation:
    """One TCP connection written segment by segment (handshake, data, FIN).

    Sequence numbers are tracked per direction; ``send_at`` places bytes at any stream
    offset (out of order, overlapping) without moving the in-order cursor."""

    def __init__(self, w: PcapWriter, sport: int, dport: int, *, client: bytes = CLIENT,
                 server: bytes = SERVER, t_us: int = T0_US, seg: int = 1400) -> None:
        self.w = w
        self.ends = ((client, sport), (server, dport))
        self.isn = [1000, 50_000]
        self.off = [0, 0]  # next in-order offset per direction
        self.t = t_us
        self.seg = seg

    def _write(self, d: int, rel_seq: int, flags: int, data: bytes = b"") -> None:
        (src, sport), (dst, dport) = self.ends[d], self.ends[1 - d]
        ack = self.isn[1 - d] + 1 + self.off[1 - d]
        self.t += 1
        self.w.write(self.t, tcp_frame(src, dst, sport, dport, self.isn[d] + rel_seq, ack,
                                       flags, data))

    def handshake(self) -> Conversation:
        c, s = self.ends
        self.t += 1
        self.w.write(self.t, tcp_frame(c[0], s[0], c[1], s[1], self.isn[0], 0, SYN))
        self.t += 1
        self.w.write(self.t, tcp_frame(s[0], c[0], s[1], c[1], self.isn[1], self.isn[0] + 1,
                                       SYN | ACK))
        self._write(0, 1, ACK)
        return self

    def send(self, d: int, data: bytes) -> Conversation:
        """In order, cut into segments of ``seg`` bytes."""
        for i in range(0, len(data), self.seg):
            piece = data[i : i + self.seg]
            self._write(d, 1 + self.off[d], ACK | PSH, piece)
            self.off[d] += len(piece)
        return self

    def send_at(self, d: int, offset: int, data: bytes) -> Conversation:
        """One segment at stream ``offset`` (anywhere: out of order, overlapping)."""
        self._write(d, 1 + offset, ACK | PSH, data)
        return self

    def reset(self, d: int) -> Conversation:
        """A RST from direction ``d`` at its next in-order offset."""
        self._write(d, 1 + self.off[d], RST)
        return self

    def fin(self, length: tuple[int, int] | None = None) -> Conversation:
        """FIN both ways; ``length`` overrides where each direction's stream ends."""
        for d in (0, 1):
            end = self.off[d] if length is None else length[d]
            self._write(d, 1 + end, FIN | ACK)
        return self


# -------------------------------------------------------------------------------- TCP


def write_half_open_flows(path: Path, flows: int) -> dict[str, Any]:
    """``flows`` half-open connections (one SYN each) to the NATS port."""
    write_syn_flood(path, flows)
    return {"flows": flows}


NATS_OP = b"PUB s 3\r\nabc\r\n"  # 14 bytes, one whole NATS operation


def write_nats_connections(path: Path, connections: int, close: bool = False
                           ) -> dict[str, Any]:
    """``connections`` NATS client connections, each set up (handshake, INFO, CONNECT,
    PING, PONG) and then left open (``close`` False: every one holds its flow and its
    dissector session to the end of the capture, as the clients of a busy server do
    between messages) or closed with a FIN each way.  Each has a client address of its
    own (10.1.0.0 upwards), 1 ms after the one before."""
    w = PcapWriter(path)
    info = b'INFO {"server_id":"NBUSY","version":"2.10.22","max_payload":1048576}\r\n'
    for i in range(connections):
        client = bytes([10, 1 + (i >> 16), (i >> 8) & 255, i & 255])
        conv = Conversation(w, 40000 + i % 20000, 4222, client=client, t_us=T0_US + i * 1000)
        conv.handshake().send(1, info).send(0, b"CONNECT {}\r\nPING\r\n").send(1, b"PONG\r\n")
        if close:
            conv.fin()
    w.close()
    return {"flows": connections}


def write_endless_out_of_order(path: Path, blocks: int, block: int = 8,
                               ops_per_segment: int = 10) -> dict[str, Any]:
    """A NATS publisher whose segments arrive in reverse order, block by block, and the
    first segment of every block is never captured (no ACK tells the reassembler), so
    the reorder buffer always waits for holes that never fill."""
    seg = NATS_OP * ops_per_segment
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 4222, seg=len(seg)).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":1048576}\r\n')
    for b in range(blocks):
        base = b * block
        for k in range(block - 1, 0, -1):  # k = 0 is the lost segment
            conv.send_at(0, (base + k) * len(seg), seg)
    total = blocks * block * len(seg)
    conv.off[0] = total
    conv.fin()
    w.close()
    return {
        "segment_bytes": len(seg),
        "lost_bytes": blocks * len(seg),
        "stream_bytes": total,
        "delivered_ops": blocks * (block - 1) * ops_per_segment,
        "holes": blocks,
    }


def write_sequence_jump_case(path: Path, segments_after: int) -> dict[str, Any]:
    jump = 2 * 1024**3 - 10_000
    write_sequence_jump(path, jump=jump, segments_after=segments_after)
    return {"jump": jump, "after_bytes": segments_after * 1400}


# Overlap patterns: a buffered piece B = [100, 200) waits behind a hole at [0, 50)…; the
# new segment N carries different bytes.  ``pre`` are segments sent before N (with the
# original bytes), ``new`` the conflicting ones; expected conflicts as (offset, nbytes).
OVERLAP_BODY = 300
OVERLAP_HEAD = b"PUB s 300\r\n"  # the body starts at stream offset 11


@dataclass
class OverlapPattern:
    name: str
    pre: list[tuple[int, int]]  # [start, end) body offsets sent first, original bytes
    new: list[tuple[int, int]]  # [start, end) body offsets then sent with other bytes
    conflicts: list[tuple[int, int]]  # (body offset, nbytes) reported
    delivered_first: int = 0  # body bytes delivered in order before anything else
    same_bytes: bool = False  # control: the "new" segment repeats the original bytes


OVERLAP_PATTERNS: tuple[OverlapPattern, ...] = (
    OverlapPattern("equal", [(100, 200)], [(100, 200)], [(100, 100)]),
    OverlapPattern("inside", [(100, 200)], [(120, 180)], [(120, 60)]),
    OverlapPattern("covering", [(100, 200)], [(80, 220)], [(100, 100)]),
    OverlapPattern("left", [(100, 200)], [(80, 150)], [(100, 50)]),
    OverlapPattern("right", [(100, 200)], [(150, 250)], [(150, 50)]),
    OverlapPattern("same_start_shorter", [(100, 200)], [(100, 150)], [(100, 50)]),
    OverlapPattern("same_start_longer", [(100, 200)], [(100, 250)], [(100, 100)]),
    OverlapPattern("same_end_shorter", [(100, 200)], [(150, 200)], [(150, 50)]),
    OverlapPattern("same_end_longer", [(100, 200)], [(50, 200)], [(100, 100)]),
    OverlapPattern("spanning_two", [(100, 200), (250, 280)], [(150, 270)],
                   [(150, 50), (250, 20)]),
    OverlapPattern("two_new_on_one", [(100, 200)], [(90, 130), (170, 210)],
                   [(100, 30), (170, 30)]),
    OverlapPattern("retransmit_delivered", [], [(100, 150)], [(100, 50)],
                   delivered_first=200),
    OverlapPattern("retransmit_straddling", [], [(100, 250)], [(100, 50)],
                   delivered_first=150),
    OverlapPattern("identical_bytes", [(100, 200)], [(120, 180)], [], same_bytes=True),
    OverlapPattern("adjacent", [(100, 200)], [(200, 250)], []),
)


def overlap_reference(p: OverlapPattern, policy: str) -> bytes:
    """The NATS payload the flow must show under ``policy`` ("first"/"last"): a byte
    model of the reassembler's contract (delivered bytes are never taken back)."""
    orig = _overlap_original()
    total = len(OVERLAP_HEAD) + OVERLAP_BODY + 2
    store: dict[int, int] = {}
    nxt = 0

    def put(start: int, data: bytes) -> None:
        nonlocal nxt
        for i, b in enumerate(data):
            pos = start + i
            if pos < nxt:
                continue
            if pos not in store or policy == "last":
                store[pos] = b
        while nxt in store:
            nxt += 1

    for start, data in _overlap_segments(p, orig):
        put(start, data)
    stream = bytes(store[i] for i in range(total))
    return stream[len(OVERLAP_HEAD) : len(OVERLAP_HEAD) + OVERLAP_BODY]


def _overlap_original() -> bytes:
    body = bytes(0x61 + i % 26 for i in range(OVERLAP_BODY))  # abc...
    return OVERLAP_HEAD + body + b"\r\n"


def _overlap_segments(p: OverlapPattern, orig: bytes) -> list[tuple[int, bytes]]:
    """(stream offset, bytes) in arrival order."""
    h = len(OVERLAP_HEAD)
    total = len(orig)
    segs: list[tuple[int, bytes]] = []
    covered = bytearray(total)
    if p.delivered_first:
        segs.append((0, orig[: h + p.delivered_first]))
        covered[: h + p.delivered_first] = b"\x01" * (h + p.delivered_first)
    for a, b in p.pre:
        segs.append((h + a, orig[h + a : h + b]))
        covered[h + a : h + b] = b"\x01" * (b - a)
    for a, b in p.new:
        data = orig[h + a : h + b] if p.same_bytes else b"X" * (b - a)
        segs.append((h + a, data))
        covered[h + a : h + b] = b"\x01" * (b - a)
    # then fill every byte not yet sent, in order, with the original bytes
    i = 0
    while i < total:
        if covered[i]:
            i += 1
            continue
        j = i
        while j < total and not covered[j]:
            j += 1
        segs.append((i, orig[i:j]))
        i = j
    return segs


def write_overlaps(path: Path) -> dict[str, Any]:
    """One NATS flow per overlap pattern (client ports 41000 + i)."""
    w = PcapWriter(path)
    orig = _overlap_original()
    flows = []
    for i, p in enumerate(OVERLAP_PATTERNS):
        conv = Conversation(w, 41000 + i, 4222).handshake()
        conv.send(1, b'INFO {"server_id":"x"}\r\n')
        for off, data in _overlap_segments(p, orig):
            conv.send_at(0, off, data)
        conv.off[0] = len(orig)
        conv.fin()
        h = len(OVERLAP_HEAD)
        flows.append({
            "port": 41000 + i,
            "pattern": p.name,
            "conflicts": [(h + a, n) for a, n in p.conflicts],
            "first": overlap_reference(p, "first"),
            "last": overlap_reference(p, "last"),
        })
    w.close()
    return {"flows": flows}


# ------------------------------------------------------------------------------- NATS


def write_nats_long_line(path: Path, megabytes: int) -> dict[str, Any]:
    """A client sends ``PUB `` and then ``megabytes`` MiB without ever a newline."""
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x"}\r\n')
    chunk = b"PUB " + b"x" * (1400 - 4)
    conv.send(0, chunk)
    body = b"y" * 1400
    n = (megabytes * 1024 * 1024) // 1400
    for _ in range(n):
        conv.send(0, body)
    conv.fin()
    w.close()
    return {"line_bytes": 1400 * (n + 1)}


def write_nats_huge_declared(path: Path, follow_mb: int) -> dict[str, Any]:
    """Three NATS flows: PUB declaring 4 GiB (10 digits: not a NATS size), HPUB
    declaring 4 GiB of headers, and PUB declaring 999,999,999 bytes (the largest NATS
    size) followed by ``follow_mb`` MiB and the end of the stream."""
    w = PcapWriter(path)
    junk = b"z" * (1024 * 1024)
    # 1: PUB 4294967296 -> rejected line, then a valid op after the junk
    conv = Conversation(w, 40001, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":1048576}\r\n')
    conv.send(0, b"CONNECT {}\r\nPUB big 4294967296\r\n" + junk + b"\r\nPING\r\n")
    conv.fin()
    # 2: HPUB with 4 GiB of headers
    conv = Conversation(w, 40002, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":1048576}\r\n')
    conv.send(0, b"CONNECT {}\r\nHPUB big 4294967295 4294967296\r\n" + junk + b"\r\nPING\r\n")
    conv.fin()
    # 3: PUB 999999999 and the stream ends long before
    conv = Conversation(w, 40003, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":1048576}\r\n')
    conv.send(0, b"CONNECT {}\r\nPUB big 999999999\r\n")
    for _ in range(follow_mb):
        conv.send(0, junk)
    conv.fin()
    w.close()
    return {"follow_bytes": follow_mb * len(junk), "ports": (40001, 40002, 40003)}


# ----------------------------------------------------------------------------- Pulsar


def _pulsar():
    from tests.pulsar import wire

    return wire


def write_pulsar_huge_frame(path: Path, follow_mb: int) -> dict[str, Any]:
    """A Pulsar client whose second frame declares 4 GiB - 1, then ``follow_mb`` MiB."""
    wire = _pulsar()
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 6650).handshake()
    conv.send(0, wire.frame(wire.cmd("CONNECT", client_version="x", protocol_version=19)))
    conv.send(1, wire.frame(wire.cmd("CONNECTED", server_version="y", protocol_version=19)))
    ping = wire.frame(wire.cmd("PING"))
    conv.send(0, struct.pack(">II", 0xFFFFFFFF, len(ping) - 8) + ping[8:])
    junk = b"\x00" * (1024 * 1024)
    for _ in range(follow_mb):
        conv.send(0, junk)
    conv.fin()
    w.close()
    return {"declared": 0xFFFFFFFF, "follow_bytes": follow_mb * len(junk)}


def zstd_rle_bomb(nbytes: int) -> bytes:
    """A zstd frame of ``nbytes`` zero bytes made of RLE blocks (4 bytes per 128 KiB):
    4 GiB out of 128 KiB in, written without running a compressor."""
    block = 128 * 1024
    assert nbytes % block == 0
    out = bytearray(b"\x28\xb5\x2f\xfd")  # magic
    out += b"\x00"  # frame header descriptor: no content size, no checksum, no dict
    out += bytes([(17 - 10) << 3])  # window descriptor: 2**17 = 128 KiB
    n = nbytes // block
    for i in range(n):
        last = 1 if i == n - 1 else 0
        hdr = (block << 3) | (1 << 1) | last  # RLE block
        out += hdr.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def zlib_zeros(nbytes: int) -> bytes:
    c = zlib.compressobj(9)
    chunk = bytes(1024 * 1024)
    parts = [c.compress(chunk) for _ in range(nbytes // len(chunk))]
    parts.append(c.flush())
    return b"".join(parts)


def _snappy_len_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@dataclass
class Bomb:
    name: str
    compression: str  # CompressionType name
    payload: bytes
    uncompressed_size: int | None
    kind: str  # the anomaly expected


def pulsar_bombs(zlib_mb: int = 256) -> list[Bomb]:
    return [
        Bomb("zstd_4gib_undeclared", "ZSTD", zstd_rle_bomb(4 * 1024**3), None,
             "pulsar.decompression_bomb"),
        Bomb("zstd_4gib_declared_small", "ZSTD", zstd_rle_bomb(4 * 1024**3), 100,
             "pulsar.uncompressed_size_mismatch"),
        Bomb("zstd_declared_4gib", "ZSTD", zstd_rle_bomb(128 * 1024), 0xFFFFFFFF,
             "pulsar.decompression_bomb"),
        Bomb(f"zlib_{zlib_mb}mib_undeclared", "ZLIB", zlib_zeros(zlib_mb * 1024**2), None,
             "pulsar.decompression_bomb"),
        Bomb("lz4_declared_4gib", "LZ4", b"\x00" * 64, 0xFFFFFFFF,
             "pulsar.decompression_bomb"),
        Bomb("snappy_block_says_1gib", "SNAPPY", _snappy_len_varint(1024**3) + b"\x00" * 8,
             None, "pulsar.decompression_bomb"),
    ]


def write_pulsar_bombs(path: Path, zlib_mb: int = 256) -> dict[str, Any]:
    """A Pulsar producer sends one batch (1000 messages declared) per bomb."""
    wire = _pulsar()
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 6650).handshake()
    conv.send(0, wire.frame(wire.cmd("CONNECT", client_version="x", protocol_version=19)))
    conv.send(1, wire.frame(wire.cmd("CONNECTED", server_version="y", protocol_version=19)))
    conv.send(0, wire.frame(wire.cmd("PRODUCER", topic="persistent://public/default/t",
                                     producer_id=1, request_id=1)))
    bombs = pulsar_bombs(zlib_mb)
    ctype = wire.MessageMetadata.DESCRIPTOR.fields_by_name["compression"].enum_type
    for seq, b in enumerate(bombs):
        md: dict[str, Any] = {
            "producer_name": "p", "sequence_id": seq, "publish_time": 1,
            "compression": ctype.values_by_name[b.compression].number,
            "num_messages_in_batch": 1000,
        }
        if b.uncompressed_size is not None:
            md["uncompressed_size"] = b.uncompressed_size
        conv.send(0, wire.frame(wire.cmd("SEND", producer_id=1, sequence_id=seq,
                                         num_messages=1000),
                                wire.metadata(**md), b.payload))
    conv.fin()
    w.close()
    return {"bombs": [(b.name, b.kind, len(b.payload)) for b in bombs]}


# --------------------------------------------------------------------------- protobuf


def varint(v: int) -> bytes:
    return _snappy_len_varint(v & ((1 << 64) - 1))


def deep_groups(depth: int, number: int = 1000) -> bytes:
    """An unknown field ``number`` made of ``depth`` nested groups (wire types 3/4)."""
    start = varint((number << 3) | 3)
    end = varint((number << 3) | 4)
    return start * depth + end * depth


def deep_messages(depth: int, number: int = 1) -> bytes:
    """``depth`` length-delimited messages nested in each other (field ``number``)."""
    inner = b""
    for _ in range(depth):
        inner = varint((number << 3) | 2) + varint(len(inner)) + inner
    return inner


HUGE_LENGTH = (1 << 64) - 1


def huge_length_field(number: int) -> bytes:
    """Field ``number``, wire type 2, declaring 2**64 - 1 bytes (then 4 bytes)."""
    return varint((number << 3) | 2) + varint(HUGE_LENGTH) + b"abcd"


def write_protobuf_bombs(path: Path, depth: int = 100_000) -> dict[str, Any]:
    """Deep nesting and huge length prefixes in Pulsar BaseCommands, STAN PubMsgs (over
    NATS) and Liftbridge envelopes (over NATS)."""
    wire = _pulsar()
    w = PcapWriter(path)
    # Pulsar: BaseCommand{type=CONNECT, connect={...}} with the hostile parts inside
    connect = wire.cmd("CONNECT", client_version="x", protocol_version=19)
    sub_ok = wire.BaseCommand.FromString(connect).connect.SerializeToString()
    cases = {
        "groups": sub_ok + deep_groups(depth),
        "messages": sub_ok + deep_messages(depth // 100, 1000),
        "huge_length": sub_ok + huge_length_field(1),
    }
    conv = Conversation(w, 40000, 6650).handshake()
    conv.send(0, wire.frame(connect))
    for body in cases.values():
        command = varint(1 << 3) + varint(2) + varint((2 << 3) | 2) + varint(len(body)) + body
        conv.send(0, wire.frame(command))
    # a BaseCommand whose connect field itself declares 2**64 - 1 bytes
    conv.send(0, wire.frame(varint(1 << 3) + varint(2) + huge_length_field(2)))
    conv.fin()
    # STAN PubMsg (field 1 client_id, 2 guid, 3 subject, 5 data) over NATS
    stan = {
        "groups": deep_groups(depth),
        "messages": deep_messages(depth // 100, 99),
        "huge_length": huge_length_field(5),
    }
    conv = Conversation(w, 40001, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":8388608}\r\n')
    conv.send(0, b"CONNECT {}\r\n")
    for body in stan.values():
        pubmsg = (varint((1 << 3) | 2) + b"\x01c" + varint((2 << 3) | 2) + b"\x01g" + body)
        conv.send(0, b"PUB _STAN.pub.cluster.orders %d\r\n" % len(pubmsg) + pubmsg + b"\r\n")
    # Liftbridge envelope (magic, version 0, header len 8, no CRC, type 0 = PublishRequest)
    for body in (deep_groups(depth), deep_messages(depth // 100, 1), huge_length_field(2)):
        env = b"\xb9\x0e\x43\xb4" + bytes([0, 8, 0, 0]) + body
        conv.send(0, b"PUB lb.request %d\r\n" % len(env) + env + b"\r\n")
    conv.fin()
    w.close()
    return {"depth": depth, "pulsar_frames": 5, "stan_msgs": 3, "liftbridge_msgs": 3}


# ------------------------------------------------------------------------------- QUIC


def quic_initial_datagram() -> bytes:
    """The client Initial of ja4/quic-tls-handshake.pcapng (a real Chrome ClientHello),
    or a built one when the shared captures are not there."""
    from tests.conftest import SHARED

    src = SHARED / "captures/ja4/quic-tls-handshake.pcapng"
    if src.exists():
        from reassembly.capture import open_capture
        from reassembly.limits import Limits
        from reassembly.network import NetworkDecoder

        with open_capture(src) as reader:
            for frame in reader:
                pkt = NetworkDecoder(Limits(), lambda ev: None).decode(frame)
                if pkt is not None and pkt.proto == 17:
                    return bytes(pkt.payload)[8:]  # after the UDP header
    from tests.quic import vectors

    return vectors.V1_CLIENT_PACKET


def write_quic_garbage(path: Path, repeat: int = 1) -> dict[str, Any]:
    """UDP 443: a real Initial with garbage appended (coalesced garbage); a valid long
    header over a garbage payload; a Length running past the datagram; a short header
    with garbage; a Version Negotiation packet with a ragged version list."""
    initial = quic_initial_datagram()
    dcid_len = initial[5]
    dcid = initial[6 : 6 + dcid_len]
    garbage = bytes((i * 37 + 11) % 256 for i in range(600))
    # a long header (Initial, v1) with a plausible Length over garbage
    long_hdr = bytes([0xC3]) + b"\x00\x00\x00\x01" + bytes([8]) + b"\x11" * 8 + b"\x00"
    long_hdr += b"\x00" + bytes([0x42, 0x58]) + garbage  # token length 0, Length 600
    past_end = bytes([0xC3]) + b"\x00\x00\x00\x01" + bytes([8]) + b"\x22" * 8 + b"\x00"
    past_end += b"\x00" + bytes([0x7F, 0xFF]) + garbage[:100]  # Length 16383, 100 follow
    short = bytes([0x43]) + dcid + garbage[:200]
    vn = bytes([0x80]) + b"\x00\x00\x00\x00" + bytes([8]) + b"\x33" * 8 + bytes([8]) + b"\x44" * 8
    vn += b"\x00\x00\x00\x01\xab"  # one version and a ragged byte
    datagrams = [
        (0, 50000, initial + garbage),
        (0, 50001, long_hdr),
        (0, 50002, past_end),
        (0, 50000, short),
        (1, 50003, vn),
    ]
    w = PcapWriter(path)
    t = T0_US
    for _ in range(repeat):
        for d, port, data in datagrams:
            t += 1
            if d == 0:
                w.write(t, udp_frame(CLIENT, SERVER, port, 443, data))
            else:
                w.write(t, udp_frame(SERVER, CLIENT, 443, port, data))
    w.close()
    return {"datagrams": len(datagrams) * repeat, "initial_bytes": len(initial)}


# ------------------------------------------------------------------------- pcap/pcapng

_PCAP_GLOBAL = struct.Struct("<IHHiIII")
_PCAP_REC = struct.Struct("<IIII")


def _eth_frame(n: int) -> bytes:
    """A small Ethernet/IPv4/UDP frame of ``n`` bytes (n >= 42)."""
    return udp_frame(CLIENT, SERVER, 1234, 5678, b"\x00" * (n - 42))


@dataclass
class PcapCase:
    name: str
    data: bytes
    packets: int  # frames msgcap must read before the damage
    damage: str | None  # substring of the damage reason, None: no damage
    at_frame: int | None = None  # the frame the damage names, if not ``packets`` (non-fatal)


def pcap_caplen_cases() -> list[PcapCase]:
    good = _eth_frame(60)
    head = _PCAP_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, 64, 1)  # snaplen 64
    rec = _PCAP_REC.pack(1_700_000_000, 0, len(good), len(good)) + good
    cases = []
    big = _eth_frame(100)  # caplen 100 > snaplen 64, below the 256 KiB sanity limit
    cases.append(PcapCase("caplen_above_snaplen", head + rec
                          + _PCAP_REC.pack(1_700_000_000, 1, 100, 100) + big + rec, 3, None))
    cases.append(PcapCase("caplen_above_limit", head + rec
                          + _PCAP_REC.pack(1_700_000_000, 1, 300_000, 300_000) + b"\x00" * 64,
                          1, "claims caplen 300000"))
    cases.append(PcapCase("caplen_4gib", head + rec
                          + _PCAP_REC.pack(1_700_000_000, 1, 0xFFFFFFFF, 0xFFFFFFFF) + good,
                          1, "claims caplen 4294967295"))
    cases.append(PcapCase("caplen_past_eof", head + rec + rec
                          + _PCAP_REC.pack(1_700_000_000, 1, 200_000, 200_000) + b"\x00" * 10,
                          2, "truncated record body (10 of 200000"))
    big_snap = _PCAP_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, 0xFFFFFFFF, 1)  # snaplen 4 GiB
    cases.append(PcapCase("snaplen_4gib_caplen_1gib", big_snap + rec
                          + _PCAP_REC.pack(1_700_000_000, 1, 1 << 30, 1 << 30) + good,
                          1, "claims caplen 1073741824"))
    cases.append(PcapCase("record_header_cut", head + rec + rec[:7], 1,
                          "truncated record header (7 of 16"))
    return cases


_BLK = struct.Struct("<II")


def _block(btype: int, body: bytes, length: int | None = None,
           trailer: int | None = None) -> bytes:
    n = 12 + len(body)
    return (_BLK.pack(btype, n if length is None else length) + body
            + struct.pack("<I", n if trailer is None else trailer))


def _shb() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb() -> bytes:
    return _block(1, struct.pack("<HHI", 1, 0, 0))


def _epb(frame: bytes, caplen: int | None = None, units: int = 1) -> bytes:
    pad = (-len(frame)) % 4
    body = struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF,
                       len(frame) if caplen is None else caplen,
                       len(frame)) + frame + b"\x00" * pad
    return _block(6, body)


def pcapng_bad_length_cases() -> list[PcapCase]:
    good = _eth_frame(60)
    ok = _shb() + _idb() + _epb(good) + _epb(good)
    epb = _epb(good)
    n = len(epb)
    cases = [
        PcapCase("length_zero", ok + _BLK.pack(6, 0) + epb[8:], 2, "invalid total length 0"),
        PcapCase("length_not_multiple_of_4", ok + _BLK.pack(6, n + 1) + epb[8:] + b"\x00",
                 2, f"invalid total length {n + 1}"),
        PcapCase("length_4gib", ok + _BLK.pack(6, 0xFFFFFFFC) + epb[8:], 2,
                 "invalid total length 4294967292"),
        PcapCase("length_below_minimum", ok + _BLK.pack(6, 16) + b"\x00" * 4
                 + struct.pack("<I", 16), 2, "invalid total length 16"),
        PcapCase("trailer_mismatch", ok + epb[:-4] + struct.pack("<I", n + 4), 2,
                 f"!= trailing copy {n + 4}"),
        PcapCase("caplen_beyond_block", ok + _epb(good, caplen=4096), 2,
                 "captured length 4096 exceeds block length"),
        PcapCase("length_past_eof", ok + _BLK.pack(6, 1 << 20) + epb[8:], 2,
                 "truncated block type 0x6"),
        PcapCase("shb_too_short", ok + _BLK.pack(0x0A0D0D0A, 8) + b"\x4d\x3c\x2b\x1a"
                 + b"\x00" * 16, 2, "invalid total length 8"),
        PcapCase("idb_too_short", ok + _block(1, b""), 2, "invalid total length 12"),
        PcapCase("unknown_block_huge_length", ok + _BLK.pack(0x1234, 0x7FFFFFFC) + b"\x00" * 8,
                 2, "invalid total length 2147483644"),
        # a time past int64 nanoseconds (microsecond units: year ~586,000): the frame is
        # read with the previous frame's time, reading goes on
        PcapCase("timestamp_beyond_2262", ok + _epb(good, units=(1 << 64) - 1) + _epb(good),
                 4, "outside the years 1677-2262", at_frame=2),
    ]
    return cases


def write_bytes(path: Path, data: bytes) -> None:
    path.write_bytes(data)


# ------------------------------------------------------------------------------- CLI


def _all(outdir: Path) -> Iterable[tuple[str, Any]]:
    yield "half_open.pcap", write_half_open_flows(outdir / "half_open.pcap", 1_000_000)
    yield "out_of_order.pcap", write_endless_out_of_order(outdir / "out_of_order.pcap", 20_000)
    yield "seq_jump.pcap", write_sequence_jump_case(outdir / "seq_jump.pcap", 200_000)
    yield "overlaps.pcap", write_overlaps(outdir / "overlaps.pcap")
    yield "nats_long_line.pcap", write_nats_long_line(outdir / "nats_long_line.pcap", 100)
    yield "nats_huge_declared.pcap", write_nats_huge_declared(
        outdir / "nats_huge_declared.pcap", 20)
    yield "pulsar_huge_frame.pcap", write_pulsar_huge_frame(outdir / "pulsar_huge_frame.pcap", 20)
    yield "pulsar_bombs.pcap", write_pulsar_bombs(outdir / "pulsar_bombs.pcap")
    yield "protobuf_bombs.pcap", write_protobuf_bombs(outdir / "protobuf_bombs.pcap")
    yield "quic_garbage.pcap", write_quic_garbage(outdir / "quic_garbage.pcap")
    for c in pcap_caplen_cases():
        write_bytes(outdir / f"pcap_{c.name}.pcap", c.data)
        yield f"pcap_{c.name}.pcap", {"packets": c.packets, "damage": c.damage}
    for c in pcapng_bad_length_cases():
        write_bytes(outdir / f"pcapng_{c.name}.pcapng", c.data)
        yield f"pcapng_{c.name}.pcapng", {"packets": c.packets, "damage": c.damage}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        print("usage: python samples/hostile/generate.py OUTDIR")
        return 2
    outdir = Path(argv[0])
    outdir.mkdir(parents=True, exist_ok=True)
    for name, facts in _all(outdir):
        print(f"{name}: {facts if not isinstance(facts, dict) or len(str(facts)) < 200 else '...'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

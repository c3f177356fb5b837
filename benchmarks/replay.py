"""A large capture made of a small recorded one, repeated: the STAN / Liftbridge bench input.

Why: the STAN and Liftbridge recorders (``samples/record_stan.py``,
``samples/record_liftbridge.py``) emulate both ends of a protocol that cannot be
installed here and record a fixed, feature-covering workload of a few dozen kB, with no
scale option.  Their captures are real bytes through a real ``nats-server``, so the
benchmark repeats one of them until it reaches the wanted size: round ``r`` replays every
packet with each connection's *client* address moved to ``10.r.r.r`` (the server keeps
its address and port, so what a dissector learns about the server carries over, as with
a long-running server and new clients), and its time shifted past the previous round.
The IPv4 header checksum is recomputed and the TCP checksum adjusted for the new address
(RFC 1624), so other tools (tshark, tcpflow) read the file as a normal capture.

Only what those recorders write is handled: classic pcap, Ethernet, IPv4, TCP.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import Any

_REC = struct.Struct("<IIII")  # ts_sec, ts_usec, caplen, len (little-endian pcap)
_ETH_IPV4 = b"\x08\x00"


def _records(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(ts_sec, ts_usec, frame)`` of a little-endian classic pcap (µs, Ethernet)."""
    if data[:4] != b"\xd4\xc3\xb2\xa1" or struct.unpack_from("<I", data, 20)[0] != 1:
        raise ValueError("not a little-endian microsecond pcap of Ethernet frames")
    out, p = [], 24
    while p + 16 <= len(data):
        sec, usec, caplen, _ = _REC.unpack_from(data, p)
        out.append((sec, usec, data[p + 16 : p + 16 + caplen]))
        p += 16 + caplen
    return out


def _tcp_ports(frame: bytes) -> tuple[int, int, int] | None:
    """``(IP header offset, source port, destination port)`` of an IPv4 TCP frame."""
    if frame[12:14] != _ETH_IPV4 or frame[23] != 6:
        return None
    ihl = (frame[14] & 0x0F) * 4
    sport, dport = struct.unpack_from("!HH", frame, 14 + ihl)
    return 14, sport, dport


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _ip_checksum(header: bytes) -> int:
    return ~_fold(sum(struct.unpack(f"!{len(header) // 2}H", header))) & 0xFFFF


def _adjust(csum: int, old: bytes, new: bytes) -> int:
    """RFC 1624 eqn. 3: the checksum after 16-bit words ``old`` became ``new``."""
    total = ~csum & 0xFFFF
    for (o,), (n,) in zip(struct.iter_unpack("!H", old), struct.iter_unpack("!H", new),
                          strict=True):
        total += (~o & 0xFFFF) + n
    return ~_fold(total) & 0xFFFF


def server_port(frames: list[tuple[int, int, bytes]]) -> int:
    """The port every connection of the recording shares (the ``nats-server``'s)."""
    ports: Counter[int] = Counter()
    for _, _, frame in frames:
        tcp = _tcp_ports(frame)
        if tcp:
            ports.update(tcp[1:])
    return ports.most_common(1)[0][0]


def _moved(frame: bytes, port: int, addr: bytes) -> bytes:
    tcp = _tcp_ports(frame)
    if tcp is None:
        return frame
    ip, sport, dport = tcp
    at = ip + 12 if dport == port else ip + 16 if sport == port else None
    if at is None:
        return frame
    buf = bytearray(frame)
    old = bytes(buf[at : at + 4])
    buf[at : at + 4] = addr
    ihl = (buf[ip] & 0x0F) * 4
    buf[ip + 10 : ip + 12] = b"\0\0"
    buf[ip + 10 : ip + 12] = _ip_checksum(bytes(buf[ip : ip + ihl])).to_bytes(2, "big")
    tcs = ip + ihl + 16
    if len(buf) >= tcs + 2:
        csum = int.from_bytes(buf[tcs : tcs + 2], "big")
        buf[tcs : tcs + 2] = _adjust(csum, old, addr).to_bytes(2, "big")
    return bytes(buf)


def replicate(src: Path, dst: Path, target_bytes: int,
              max_rounds: int | None = None) -> dict[str, Any]:
    """Write ``dst``: ``src`` repeated (see the module doc) until it holds at least
    ``target_bytes`` or ``max_rounds`` rounds; what was written."""
    data = src.read_bytes()
    frames = _records(data)
    port = server_port(frames)
    first = frames[0][0] * 1_000_000 + frames[0][1]
    span = frames[-1][0] * 1_000_000 + frames[-1][1] - first + 1_000_000
    size, rounds, packets = 24, 0, 0
    with dst.open("wb") as out:
        out.write(data[:24])
        while size < target_bytes and (max_rounds is None or rounds < max_rounds):
            rounds += 1
            addr = bytes((10, (rounds >> 16) & 0xFF, (rounds >> 8) & 0xFF, rounds & 0xFF))
            chunk = bytearray()
            for sec, usec, frame in frames:
                ts = sec * 1_000_000 + usec + rounds * span
                moved = _moved(frame, port, addr)
                chunk += _REC.pack(ts // 1_000_000, ts % 1_000_000, len(moved), len(moved))
                chunk += moved
            out.write(chunk)
            size += len(chunk)
            packets += len(frames)
    return {"source": str(src), "bytes": size, "rounds": rounds, "packets": packets,
            "server_port": port}

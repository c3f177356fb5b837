"""Writes large synthetic pcaps straight with ``struct`` (scapy is far too slow here).

Used by the bounded-memory tests; each writer streams packets to disk so the test
process itself stays small.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_ETH_IP = struct.Struct("!6s6sHBBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
SYN, ACK, PSH = 0x02, 0x10, 0x08


def tcp_frame(
    src: bytes,
    dst: bytes,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    data: bytes = b"",
) -> bytes:
    total = 20 + 20 + len(data)
    eth_ip = _ETH_IP.pack(
        b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, total, 1, 0, 64, 6, 0, src, dst
    )
    return eth_ip + _TCP.pack(sport, dport, seq % (1 << 32), ack, 5 << 4, flags, 65535, 0, 0) + data


class PcapWriter:
    def __init__(self, path: Path) -> None:
        self._f = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._f.write(_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.frames = 0

    def write(self, ts_us: int, frame: bytes) -> None:
        self._f.write(_RECORD.pack(ts_us // 1_000_000, ts_us % 1_000_000, len(frame), len(frame)))
        self._f.write(frame)
        self.frames += 1

    def write_records(self, records: np.ndarray) -> None:
        """Records built whole (``repeat_records``), written from the array's memory."""
        self._f.write(np.ascontiguousarray(records).data)
        self.frames += len(records)

    def close(self) -> None:
        self._f.close()


def repeat_records(frame: bytes, count: int) -> np.ndarray:
    """``count`` pcap records of ``frame`` (at time 0) as a ``(count, record size)`` byte
    array: fields that change from packet to packet are then written into it column by
    column (``stamp``, ``stamp_times``) and the whole written out at once
    (``PcapWriter.write_records``).  Far faster than packing each packet in Python when a
    capture has hundreds of thousands of packets that differ in a few fields."""
    record = np.frombuffer(_RECORD.pack(0, 0, len(frame), len(frame)) + frame, np.uint8)
    out = np.empty((count, record.size), np.uint8)
    out[:] = record
    return out


def stamp(records: np.ndarray, offset: int, fmt: str, values: np.ndarray | int) -> None:
    """Write ``values`` (one per record, or one for all) as numpy type ``fmt`` (such as
    ``">u4"``) at ``offset`` bytes into each record's frame."""
    at = _RECORD.size + offset
    dtype = np.dtype(fmt)
    records[:, at : at + dtype.itemsize].view(dtype)[:, 0] = values


def stamp_times(records: np.ndarray, ts_us: np.ndarray) -> None:
    """Each record's time: ``ts_us`` microseconds since the epoch."""
    records[:, 0:4].view("<u4")[:, 0] = ts_us // 1_000_000
    records[:, 4:8].view("<u4")[:, 0] = ts_us % 1_000_000


_SYN_CHUNK = 1 << 16  # records built at a time: ~4.6 MB, whatever ``flows`` is


def write_syn_flood(path: Path, flows: int) -> None:
    """``flows`` half-open connections: one SYN each, from distinct address/port pairs.

    Flow ``i`` is a SYN from ``10.x.y.z`` (the low 24 bits of ``i``), port
    ``1024 + i % 50000``, sequence ``i``, to 10.9.9.9:4222, at 1,700,000,000 s + ``i`` µs:
    the same bytes as writing ``tcp_frame`` one flow at a time, built a chunk at a time
    (``repeat_records``) because the bounded-memory tests write up to a million."""
    w = PcapWriter(path)
    syn = tcp_frame(bytes(4), bytes([10, 9, 9, 9]), 0, 4222, 0, 0, SYN)
    for start in range(0, flows, _SYN_CHUNK):
        i = np.arange(start, min(start + _SYN_CHUNK, flows), dtype=np.int64)
        records = repeat_records(syn, len(i))
        stamp_times(records, 1_700_000_000_000_000 + i)
        stamp(records, 26, ">u4", (10 << 24) | (i & 0xFFFFFF))  # IPv4 source
        stamp(records, 34, ">u2", 1024 + i % 50000)  # TCP source port
        stamp(records, 38, ">u4", i % (1 << 32))  # TCP sequence number
        w.write_records(records)
    w.close()


def write_sequence_jump(path: Path, jump: int, segments_after: int, seg_bytes: int = 1400) -> None:
    """One connection that jumps ``jump`` bytes ahead, then keeps sending in order."""
    w = PcapWriter(path)
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    isn = 1000
    t = 1_700_000_000_000_000
    w.write(t, tcp_frame(c, s, 40000, 4222, isn, 0, SYN))
    payload = b"x" * seg_bytes
    w.write(t + 1, tcp_frame(c, s, 40000, 4222, isn + 1, 0, ACK | PSH, payload))
    seq = isn + 1 + seg_bytes + jump
    for i in range(segments_after):
        w.write(t + 2 + i, tcp_frame(c, s, 40000, 4222, seq, 0, ACK | PSH, payload))
        seq += seg_bytes
    w.close()

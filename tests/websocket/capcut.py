"""Cut a real recording so that it starts late: for the late-join tests.

A capture that begins after a connection started is the classic pcap of the recording
minus its first packets (``cut``).  Loopback recordings put every NATS operation at the
start of a TCP segment, so a capture started between two packets always begins at an
operation; to start a direction inside one, ``cut`` can also drop the first ``k`` payload
bytes of the first packet kept (its sequence number moves on by ``k``): what the capture
would hold had the sender split its bytes there, which TCP is free to do.

Only what the samples use is read: classic little-endian pcap, Ethernet, IPv4, TCP.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

_GLOBAL_HEADER = 24
_RECORD_HEADER = struct.Struct("<IIII")
_ETHERNET = 14


class Packet(NamedTuple):
    number: int  # 1-based, as tshark and the ``frame_*`` columns count
    record: bytes  # the 16-byte record header
    data: bytes  # the frame

    @property
    def _tcp_at(self) -> int:
        return _ETHERNET + (self.data[_ETHERNET] & 0x0F) * 4

    @property
    def ports(self) -> tuple[int, int]:
        at = self._tcp_at
        return struct.unpack("!HH", self.data[at : at + 4])  # type: ignore[return-value]

    @property
    def payload(self) -> bytes:
        at = self._tcp_at
        return self.data[at + (self.data[at + 12] >> 4) * 4 :]

    def trimmed(self, k: int) -> Packet:
        """This packet without the first ``k`` bytes of its TCP payload."""
        d = bytearray(self.data)
        at = self._tcp_at
        start = at + (d[at + 12] >> 4) * 4
        assert 0 < k < len(d) - start, (k, len(d) - start)
        del d[start : start + k]
        ip_len = struct.unpack_from("!H", d, _ETHERNET + 2)[0]
        struct.pack_into("!H", d, _ETHERNET + 2, ip_len - k)
        seq = struct.unpack_from("!I", d, at + 4)[0]
        struct.pack_into("!I", d, at + 4, (seq + k) % (1 << 32))
        ts_s, ts_us, incl, orig = _RECORD_HEADER.unpack(self.record)
        return Packet(self.number, _RECORD_HEADER.pack(ts_s, ts_us, incl - k, orig - k),
                      bytes(d))


def read(path: Path) -> tuple[bytes, list[Packet]]:
    """The global header and the packets of a classic pcap."""
    raw = path.read_bytes()
    assert raw[:4] == b"\xd4\xc3\xb2\xa1", "classic little-endian pcap only"
    out, i, n = [], _GLOBAL_HEADER, 0
    while i < len(raw):
        incl = _RECORD_HEADER.unpack_from(raw, i)[2]
        n += 1
        out.append(Packet(n, raw[i : i + 16], raw[i + 16 : i + 16 + incl]))
        i += 16 + incl
    return raw[:_GLOBAL_HEADER], out


def cut(src: Path, dst: Path, keep: Callable[[Packet], bool],
        trim: dict[int, int] | None = None) -> Path:
    """``src`` without the packets ``keep`` refuses; ``trim`` maps packet numbers to the
    payload bytes cut from their front."""
    header, packets = read(src)
    with dst.open("wb") as f:
        f.write(header)
        for p in packets:
            if not keep(p):
                continue
            if trim and p.number in trim:
                p = p.trimmed(trim[p.number])
            f.write(p.record + p.data)
    return dst

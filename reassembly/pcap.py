"""Classic libpcap files: µs and ns magic, both byte orders, the "modified" variant.

Strategy: the 24-byte file header is parsed when the reader is created (so
``info.link_types`` is known before iteration); records are then sliced out of a
large buffer with one precompiled ``struct`` unpack per record.

Format facts handled here:

* magic ``a1b2c3d4`` (µs) / ``a1b23c4d`` (ns), stored in either byte order;
* magic ``a1b2cd34``: Alexey Kuznetzov's "modified" format, 24-byte record headers
  (the usual 16 bytes + ifindex u32, protocol u16, pkt_type u8, pad u8; the extra
  fields are ignored), µs timestamps;
* header version < 2.3 stores the record's ``len`` before ``caplen`` (swapped); for
  exactly 2.3 both orders exist in the wild, so they are swapped only when the
  "caplen" field exceeds the "len" field (the libpcap rule);
* only the low 16 bits of the link-type field are the link type (the upper bits carry
  FCS information);
* ``thiszone`` is ignored (timestamps are UTC); an out-of-range µs/ns field is kept
  as-is (added to the seconds), nothing is reported;
* a caplen above ``max(snaplen, 262144)`` (the snaplen part capped at 64 MiB) is
  corrupt: reading stops there with a damage entry.  EOF inside a record header or
  body is a "truncated" damage.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .capture import (
    MAX_RECORD,
    MIN_CAPLEN_LIMIT,
    CaptureInfo,
    CaptureReader,
    Frame,
)
from .compression import ByteSource

# magic bytes as stored -> (byte order prefix, resolution, variant)
PCAP_MAGICS: dict[bytes, tuple[str, str, str]] = {
    b"\xd4\xc3\xb2\xa1": ("<", "us", "standard"),
    b"\xa1\xb2\xc3\xd4": (">", "us", "standard"),
    b"\x4d\x3c\xb2\xa1": ("<", "ns", "standard"),
    b"\xa1\xb2\x3c\x4d": (">", "ns", "standard"),
    b"\x34\xcd\xb2\xa1": ("<", "us", "modified"),
    b"\xa1\xb2\xcd\x34": (">", "us", "modified"),
}

FILE_HEADER_LEN = 24
_FILE_HDR = {e: struct.Struct(e + "4xHHiIII") for e in "<>"}
_REC_HDR = {e: struct.Struct(e + "IIII") for e in "<>"}

# caplen/len order of the record header
_NOT_SWAPPED, _SWAPPED, _MAYBE_SWAPPED = 0, 1, 2

_new_tuple = tuple.__new__


class PcapReader(CaptureReader):
    def __init__(self, source: ByteSource, info: CaptureInfo, buf: bytes) -> None:
        super().__init__(source, info, buf)
        endian, res, variant = PCAP_MAGICS[buf[:4]]
        info.format = "pcap"
        info.byte_order = "little-endian" if endian == "<" else "big-endian"
        info.ts_resolution = res
        info.variant = variant
        info.section_byte_orders.append(info.byte_order)
        self._endian = endian
        self._rec_len = 24 if variant == "modified" else 16
        self._mult = 1000 if res == "us" else 1
        self._header_ok = len(buf) >= FILE_HEADER_LEN
        self.version = (0, 0)
        self.snaplen = 0
        self.linktype_field = 0
        self.linktype = 0
        if not self._header_ok:
            return
        major, minor, _zone, _sigfigs, snaplen, network = _FILE_HDR[endian].unpack_from(buf, 0)
        self.version = (major, minor)
        self.snaplen = snaplen
        self.linktype_field = network
        self.linktype = network & 0xFFFF
        if (major, minor) < (2, 3):
            self._swap = _SWAPPED
        elif (major, minor) == (2, 3):
            self._swap = _MAYBE_SWAPPED
        else:
            self._swap = _NOT_SWAPPED
        self._limit = max(MIN_CAPLEN_LIMIT, min(snaplen, MAX_RECORD))
        info.link_types.append(self.linktype)
        info.interface_ts_resolutions.append(res)

    def _frames(self) -> Iterator[Frame]:
        info = self.info
        if not self._header_ok:
            self._damage(
                0,
                f"truncated pcap file header ({len(self._buf)} of {FILE_HEADER_LEN} bytes)",
                0,
            )
            self._finish()
            return

        buf = self._buf
        pos = FILE_HEADER_LEN
        size = len(buf)
        hlen = self._rec_len
        unpack = _REC_HDR[self._endian].unpack_from
        mult = self._mult
        swap = self._swap
        limit = self._limit
        linktype = self.linktype
        new = _new_tuple
        frame_cls = Frame
        number = 0

        while True:
            body = pos + hlen
            if body > size:
                buf = self._fill(buf, pos, hlen)
                pos = 0
                size = len(buf)
                if size < hlen:
                    if size:
                        self._damage(
                            self._base,
                            f"truncated record header ({size} of {hlen} bytes) at EOF",
                            number,
                        )
                    break
                continue
            sec, frac, incl, orig = unpack(buf, pos)
            if swap and (swap == _SWAPPED or incl > orig):
                incl, orig = orig, incl
            if incl > limit:
                self._damage(
                    self._base + pos,
                    f"record header claims caplen {incl} > {limit} limit",
                    number,
                )
                break
            end = body + incl
            if end > size:
                buf = self._fill(buf, pos, hlen + incl)
                pos = 0
                size = len(buf)
                if size < hlen + incl:
                    self._damage(
                        self._base,
                        f"truncated record body ({size - hlen} of {incl} bytes) at EOF",
                        number,
                    )
                    break
                continue
            number += 1
            info.packets = number
            yield new(
                frame_cls,
                (number, sec * 1_000_000_000 + frac * mult, linktype, buf[body:end], orig, 0),
            )
            pos = end

        self._finish()

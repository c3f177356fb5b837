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

A reader may also cover a byte range of the file only (``reassembly.ranges``): its
stream then starts at ``base``, a record boundary, with the file header given apart,
and it stops before the first record that starts at or after ``stop``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from .capture import (
    MAX_RECORD,
    MIN_CAPLEN_LIMIT,
    ByteStream,
    CaptureInfo,
    CaptureReader,
    Frame,
)

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
NOT_SWAPPED, SWAPPED, MAYBE_SWAPPED = 0, 1, 2

_new_tuple = tuple.__new__


@dataclass(frozen=True)
class PcapHeader:
    """What the 24-byte file header says about every record of the file."""

    endian: str  # struct byte-order prefix of every field
    resolution: str  # "us" | "ns"
    variant: str  # "standard" | "modified"
    version: tuple[int, int]
    snaplen: int
    linktype_field: int  # link type in the low 16 bits, FCS information above

    @property
    def linktype(self) -> int:
        return self.linktype_field & 0xFFFF

    @property
    def rec_len(self) -> int:
        """Bytes of one record header."""
        return 24 if self.variant == "modified" else 16

    @property
    def mult(self) -> int:
        """Nanoseconds per unit of the record's fraction field."""
        return 1000 if self.resolution == "us" else 1

    @property
    def swap(self) -> int:
        """Order of caplen/len in the record header: ``NOT_SWAPPED``, ``SWAPPED`` or
        ``MAYBE_SWAPPED`` (swapped when "caplen" exceeds "len")."""
        if self.version < (2, 3):
            return SWAPPED
        return MAYBE_SWAPPED if self.version == (2, 3) else NOT_SWAPPED

    @property
    def limit(self) -> int:
        """Largest caplen taken for a record rather than for corruption."""
        return max(MIN_CAPLEN_LIMIT, min(self.snaplen, MAX_RECORD))

    def record(self, buf: bytes, pos: int) -> tuple[int, int, int, int]:
        """``(sec, frac, caplen, len)`` of the record header at ``buf[pos:]``."""
        sec, frac, incl, orig = _REC_HDR[self.endian].unpack_from(buf, pos)
        swap = self.swap
        if swap and (swap == SWAPPED or incl > orig):
            incl, orig = orig, incl
        return sec, frac, incl, orig


def read_header(head: bytes) -> PcapHeader | None:
    """The file header at the start of ``head`` (whose first 4 bytes are one of
    ``PCAP_MAGICS``); None when ``head`` is shorter than a file header."""
    endian, res, variant = PCAP_MAGICS[head[:4]]
    if len(head) < FILE_HEADER_LEN:
        return None
    major, minor, _zone, _sigfigs, snaplen, network = _FILE_HDR[endian].unpack_from(head, 0)
    return PcapHeader(endian, res, variant, (major, minor), snaplen, network)


class PcapReader(CaptureReader):
    """Records of a pcap file, or of the range ``[base, stop)`` of it (see the module
    docstring): ``header`` is the file header when ``buf`` does not start with it, and
    frames are numbered from ``number + 1``."""

    def __init__(
        self,
        source: ByteStream,
        info: CaptureInfo,
        buf: bytes,
        *,
        header: bytes | None = None,
        base: int = 0,
        stop: int | None = None,
        number: int = 0,
    ) -> None:
        super().__init__(source, info, buf)
        head = buf if header is None else header
        endian, res, variant = PCAP_MAGICS[head[:4]]
        info.format = "pcap"
        info.byte_order = "little-endian" if endian == "<" else "big-endian"
        info.ts_resolution = res
        info.variant = variant
        info.section_byte_orders.append(info.byte_order)
        self._base = base
        self._stop = sys.maxsize if stop is None else stop
        self._number = number
        self._head_len = len(head)
        self.header = read_header(head)
        self.version = (0, 0)
        self.snaplen = 0
        self.linktype_field = 0
        self.linktype = 0
        self.offset = max(base, FILE_HEADER_LEN)  # offset of the next record to read
        if self.header is None:
            return
        self.version = self.header.version
        self.snaplen = self.header.snaplen
        self.linktype_field = self.header.linktype_field
        self.linktype = self.header.linktype
        info.link_types.append(self.linktype)
        info.interface_ts_resolutions.append(res)

    def _frames(self) -> Iterator[Frame]:
        info = self.info
        hdr = self.header
        if hdr is None:
            self._damage(
                0,
                f"truncated pcap file header ({self._head_len} of {FILE_HEADER_LEN} bytes)",
                0,
            )
            self._finish()
            return

        buf = self._buf
        pos = max(FILE_HEADER_LEN - self._base, 0)
        size = len(buf)
        stop = self._stop - self._base  # records start before it (relative to buf)
        hlen = hdr.rec_len
        unpack = _REC_HDR[hdr.endian].unpack_from
        mult = hdr.mult
        swap = hdr.swap
        limit = hdr.limit
        linktype = hdr.linktype
        new = _new_tuple
        frame_cls = Frame
        number = self._number

        while pos < stop:
            body = pos + hlen
            if body > size:
                buf = self._fill(buf, pos, hlen)
                stop -= pos
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
            if swap and (swap == SWAPPED or incl > orig):
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
                stop -= pos
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

        self.offset = self._base + pos
        self._finish()

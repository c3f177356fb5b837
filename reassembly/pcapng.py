"""pcapng files: sections of either byte order, interfaces, packet and secrets blocks.

Strategy: blocks are sliced out of a large buffer.  Enhanced Packet Blocks, by far the
most common block, take a fast path that only runs when the block is complete in the
buffer and fully valid; every other case (other block types, a block crossing the
buffer end, anything invalid) goes through the general path, which refills the buffer,
validates and reports.

Format facts handled here:

* Section Header Block (``0a0d0d0a``, a palindrome) with its byte-order magic decides
  the byte order of every block of its section; several sections, of mixed byte order,
  are supported.  Interface ids restart at 0 in every section, ``Frame.interface`` is
  a global index counted across sections (``info.link_types`` is in that order).
* Interface Description Block: link type, snaplen, ``if_tsresol`` (10^-N, or 2^-N
  when the high bit is set; default 10^-6) and ``if_tsoffset`` (seconds added to every
  timestamp of the interface).
* Enhanced Packet Block (6) and the obsolete Packet Block (2) carry interface id and a
  64-bit timestamp in interface units.
* Simple Packet Block (3) belongs to the section's first interface and has no
  timestamp: it gets the timestamp of the previous frame in the file (``0`` if there is
  none).  The previous frame, not the previous frame of the section, so that a section
  starting with SPBs does not jump back to 1970.  Its captured length is
  ``min(orig_len, IDB snaplen (if non-zero), room in the block)``.
* Decryption Secrets Block (0x0a): ``(secrets_type, data)`` into ``info.secrets``.
* Name Resolution, Interface Statistics, systemd journal and custom blocks are skipped;
  blocks of any other type are skipped and counted in ``info.unknown_blocks``.

Every block's total length must be a multiple of 4, at least 12, at most 64 MiB, and
equal to its trailing copy; a block violating this (or whose fixed fields do not fit,
or an SHB with a bad byte-order magic or a major version other than 1) is corruption:
reading stops there with a damage entry.  A packet block that is well formed but names
an interface that does not exist is skipped with a non-fatal damage entry; a packet
block whose time falls outside int64 nanoseconds (the years 1677-2262) keeps the previous
frame's time, with a non-fatal damage entry.

A reader may also cover a byte range of the file only (``reassembly.ranges``): it then
starts at ``base``, a block boundary, in the ``SectionState`` in force there, stops
before the first block that starts at or after ``stop``, and leaves the state it
reached in ``state``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, cast

from .capture import (
    MAX_RECORD,
    TS_NS_MAX,
    TS_NS_MIN,
    ByteStream,
    CaptureInfo,
    CaptureReader,
    Frame,
)

SHB_MAGIC = b"\x0a\x0d\x0d\x0a"
_BOM_LE = b"\x4d\x3c\x2b\x1a"
_BOM_BE = b"\x1a\x2b\x3c\x4d"

BT_SHB = 0x0A0D0D0A
BT_IDB = 0x00000001
BT_PB = 0x00000002
BT_SPB = 0x00000003
BT_NRB = 0x00000004
BT_ISB = 0x00000005
BT_EPB = 0x00000006
BT_SYSTEMD = 0x00000009
BT_DSB = 0x0000000A
BT_CB = 0x00000BAD
BT_DCB = 0x40000BAD
_SKIPPED = frozenset({BT_NRB, BT_ISB, BT_SYSTEMD, BT_CB, BT_DCB})

OPT_ENDOFOPT = 0
OPT_IF_TSRESOL = 9
OPT_IF_TSOFFSET = 14

MAX_BLOCK = MAX_RECORD + 4096

_EPB_MIN = 32  # 8 header + 20 fixed + 4 trailer
_PB_MIN = 32
_SPB_MIN = 16
_IDB_MIN = 20
_SHB_MIN = 28
_DSB_MIN = 20
_MIN_LEN = {BT_EPB: _EPB_MIN, BT_PB: _PB_MIN, BT_SPB: _SPB_MIN, BT_IDB: _IDB_MIN, BT_DSB: _DSB_MIN}

_new_tuple = tuple.__new__


class _Structs:
    __slots__ = ("hdr", "u32", "epb", "pb", "idb", "shb", "opt", "dsb", "i64")

    def __init__(self, e: str) -> None:
        self.hdr = struct.Struct(e + "II").unpack_from
        self.u32 = struct.Struct(e + "I").unpack_from
        self.epb = struct.Struct(e + "IIIII").unpack_from
        self.pb = struct.Struct(e + "HHIIII").unpack_from
        self.idb = struct.Struct(e + "HHI").unpack_from
        self.shb = struct.Struct(e + "HHq").unpack_from
        self.opt = struct.Struct(e + "HH").unpack_from
        self.dsb = struct.Struct(e + "II").unpack_from
        self.i64 = struct.Struct(e + "q").unpack_from


_LE = _Structs("<")
_BE = _Structs(">")


def section_structs(bom: bytes) -> _Structs | None:
    """The byte order of a section from its header's byte-order magic (None: bad)."""
    return _LE if bom == _BOM_LE else _BE if bom == _BOM_BE else None

_RES_NAMES = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def tsresol_to_scale(value: int) -> tuple[int, int, str]:
    """``if_tsresol`` byte -> (mul, div, name) so that ``ns = units * mul // div``."""
    exp = value & 0x7F
    if value & 0x80:
        return 1_000_000_000, 1 << exp, f"2^-{exp}"
    name = _RES_NAMES.get(exp, f"10^-{exp}")
    if exp <= 9:
        return 10 ** (9 - exp), 1, name
    return 1, 10 ** (exp - 9), name


def _options(buf: bytes, start: int, stop: int, s: _Structs) -> dict[int, bytes]:
    """First value of every option in ``buf[start:stop]``; stops quietly on garbage."""
    out: dict[int, bytes] = {}
    opt = s.opt
    while start + 4 <= stop:
        code, length = opt(buf, start)
        if code == OPT_ENDOFOPT:
            break
        vstart = start + 4
        vend = vstart + length
        if vend > stop:
            break
        out.setdefault(code, buf[vstart:vend])
        start = vstart + ((length + 3) & ~3)
    return out


# One interface of the current section: (link type, mul, div, offset ns, global index,
# snaplen), with ``ns = units * mul // div + offset``.
Interface = tuple[int, int, int, int, int, int]


def read_interface(buf: bytes, pos: int, end: int, s: _Structs, gidx: int
                   ) -> tuple[Interface, str]:
    """The Interface Description Block ``buf[pos:end]`` as the ``gidx``-th interface of
    the file, and the name of its timestamp resolution."""
    linktype, _reserved, snaplen = s.idb(buf, pos + 8)
    opts = _options(buf, pos + 16, end - 4, s)
    resol = opts.get(OPT_IF_TSRESOL)
    mul, div, rname = tsresol_to_scale(resol[0] if resol else 6)
    off_raw = opts.get(OPT_IF_TSOFFSET)
    off = s.i64(off_raw)[0] * 1_000_000_000 if off_raw and len(off_raw) == 8 else 0
    return (linktype, mul, div, off, gidx, snaplen), rname


class WalkedRun(Protocol):
    """What a bulk walk (``reassembly._engine.walk_pcapng``'s batch) says of the run of
    packet blocks it took: how many frames, the last one's number and where it
    stopped in the buffer."""

    @property
    def end(self) -> int: ...

    @property
    def number(self) -> int: ...

    def __len__(self) -> int: ...


# ``walk(buf, pos, stop, big_endian, interfaces, number, last_ts) -> (run, last_ts)``:
# the packet blocks from ``buf[pos:]`` (starting before ``stop``) the reader would yield
# as frames with no damage entry, numbered from ``number + 1``, up to the first it
# would not (``PcapngReader.walked``).
Walk = Callable[[bytes, int, int, bool, list[Interface], int, int], tuple[WalkedRun, int]]
_WALKED = frozenset({BT_EPB, BT_SPB, BT_PB})


@dataclass
class SectionState:
    """What reading needs to know of the blocks before a block boundary: whether a
    section began, its byte order and interfaces, the number of interfaces of the file
    so far and the previous frame's time (a Simple Packet Block's time)."""

    in_section: bool = False
    little_endian: bool = True
    interfaces: list[Interface] = field(default_factory=list)
    next_interface: int = 0  # global index of the next interface
    last_ts: int = 0

    def apply(self, btype: int, raw: bytes) -> str | None:
        """Take in a whole SHB or IDB block ``raw`` (other blocks change nothing) as the
        reader would; a reason when the reader would stop there as damaged."""
        if btype == BT_SHB:
            s = section_structs(raw[8:12])
            if s is None:
                return "bad byte-order magic"
            major = s.shb(raw, 12)[0]
            if major != 1:
                return f"unsupported pcapng version {major}"
            self.in_section, self.little_endian, self.interfaces = True, s is _LE, []
            return None
        if not self.in_section:
            return "block before the first section header"
        if btype == BT_IDB:
            s = _LE if self.little_endian else _BE
            entry, _name = read_interface(raw, 0, len(raw), s, self.next_interface)
            self.interfaces.append(entry)
            self.next_interface += 1
        return None


class PcapngReader(CaptureReader):
    """Blocks of a pcapng file, or of the range ``[base, stop)`` of it from ``state``
    (see the module docstring); frames are numbered from ``number + 1``."""

    def __init__(
        self,
        source: ByteStream,
        info: CaptureInfo,
        buf: bytes,
        *,
        base: int = 0,
        stop: int | None = None,
        number: int = 0,
        state: SectionState | None = None,
    ) -> None:
        super().__init__(source, info, buf)
        self._base = base
        self._stop = sys.maxsize if stop is None else stop
        self._number = number
        self.state = SectionState() if state is None else state
        self.offset = base  # offset of the next block to read
        info.format = "pcapng"
        info.ts_resolution = "per-interface"
        info.variant = ""
        bom = buf[8:12] if not base else _BOM_LE if self.state.little_endian else _BOM_BE
        if bom == _BOM_LE:
            info.byte_order = "little-endian"
        elif bom == _BOM_BE:
            info.byte_order = "big-endian"
        else:
            info.byte_order = "unknown"

    def _bad_time(self, offset: int, hi: int, lo: int, number: int) -> None:
        """A packet block whose timestamp (with its interface's resolution and offset)
        is not an int64 nanosecond time: the frame keeps the previous frame's time, as a
        Simple Packet Block does, and a non-fatal damage entry says so."""
        self._damage(
            offset,
            f"packet block timestamp {(hi << 32) | lo} (interface units) is outside the"
            f" years 1677-2262; frame {number + 1} takes the previous frame's time",
            number,
            fatal=False,
        )

    def _frames(self) -> Iterator[Frame]:
        return cast(Iterator[Frame], self._read(None))  # no walk: frames only

    def walked(self, walk: Walk) -> Iterator[Frame | WalkedRun | None]:
        """The capture read as iterating the reader reads it (not started yet; it is
        done after), but with the runs of packet blocks ``walk`` takes (a C walk) as
        one item each instead of their frames; ``None`` comes before a Decryption
        Secrets Block is taken into ``info.secrets`` (the frames before it must reach
        the layers first).  Every other block, and every block the walk leaves (one it
        would not yield as a frame, or that crosses the buffer's end), is the reader's
        own reading: sections, interfaces, damage, the digest are as without it."""
        if self._iter is not None:
            raise RuntimeError("the reader is being iterated already")
        self._iter = iter(())
        return self._read(walk)

    def _read(self, walk: Walk | None) -> Iterator[Frame | WalkedRun | None]:
        info = self.info
        link_types = info.link_types
        resolutions = info.interface_ts_resolutions
        buf = self._buf
        pos = 0
        size = len(buf)
        stop = self._stop - self._base  # blocks start before it (relative to buf)
        st = self.state
        s = _LE if st.little_endian else _BE
        hdr = s.hdr
        u32 = s.u32
        epb = s.epb
        ifs = list(st.interfaces)
        nifs = len(ifs)
        gidx_next = st.next_interface
        number = self._number
        last_ts = st.last_ts
        new = _new_tuple
        frame_cls = Frame
        seen_shb = st.in_section

        while pos < stop:
            if pos + 12 > size:
                buf = self._fill(buf, pos, 12)
                stop -= pos
                pos = 0
                size = len(buf)
                if size < 12:
                    if size:
                        self._damage(
                            self._base,
                            f"truncated block header ({size} bytes) at EOF",
                            number,
                        )
                    break
                continue

            btype, blen = hdr(buf, pos)

            if walk is not None and btype in _WALKED:
                run, ts = walk(buf, pos, stop, s is _BE, ifs, number, last_ts)
                if len(run):
                    last_ts = ts
                    number = info.packets = run.number
                    pos = run.end
                    yield run
                    continue

            # ---- fast path: complete, valid EPB on a known interface --------------------
            if btype == 6:
                end = pos + blen
                if (
                    end <= size
                    and _EPB_MIN <= blen <= MAX_BLOCK
                    and not blen & 3
                    and u32(buf, end - 4)[0] == blen
                ):
                    iface, hi, lo, caplen, olen = epb(buf, pos + 8)
                    if caplen <= blen - _EPB_MIN and iface < nifs:
                        lt, mul, div, off, gidx, _snap = ifs[iface]
                        if div == 1:
                            ts = ((hi << 32) | lo) * mul + off
                        else:
                            ts = ((hi << 32) | lo) * mul // div + off
                        if TS_NS_MIN <= ts <= TS_NS_MAX:
                            last_ts = ts
                        else:
                            self._bad_time(self._base + pos, hi, lo, number)
                        number += 1
                        info.packets = number
                        yield new(
                            frame_cls,
                            (number, last_ts, lt, buf[pos + 28 : pos + 28 + caplen], olen, gidx),
                        )
                        pos = end
                        continue

            # ---- general path ------------------------------------------------------------
            offset = self._base + pos
            if btype == BT_SHB:
                bom = buf[pos + 8 : pos + 12]
                found = section_structs(bom)
                if found is None:
                    self._damage(
                        offset, f"section header with bad byte-order magic {bom.hex()}", number
                    )
                    break
                new_s = found
                blen = new_s.u32(buf, pos + 4)[0]
                min_len = _SHB_MIN
            elif not seen_shb:
                self._damage(
                    offset, f"first block is type {btype:#x}, not a section header", number
                )
                break
            else:
                new_s = s
                min_len = _MIN_LEN.get(btype, 12)

            if blen & 3 or blen < min_len or blen > MAX_BLOCK:
                self._damage(
                    offset,
                    f"block type {btype:#x} has invalid total length {blen}"
                    f" (need a multiple of 4, >= {min_len}, <= {MAX_BLOCK})",
                    number,
                )
                break
            end = pos + blen
            if end > size:
                buf = self._fill(buf, pos, blen)
                stop -= pos
                pos = 0
                size = len(buf)
                if size < blen:
                    self._damage(
                        self._base,
                        f"truncated block type {btype:#x} ({size} of {blen} bytes) at EOF",
                        number,
                    )
                    break
                continue
            trailer = new_s.u32(buf, end - 4)[0]
            if trailer != blen:
                self._damage(
                    offset,
                    f"block type {btype:#x} total length {blen} != trailing copy {trailer}",
                    number,
                )
                break

            if btype == BT_SHB:
                major, minor, _section_len = new_s.shb(buf, pos + 12)
                if major != 1:
                    self._damage(offset, f"unsupported pcapng version {major}.{minor}", number)
                    break
                seen_shb = True
                s = new_s
                hdr, u32, epb = s.hdr, s.u32, s.epb
                ifs = []
                nifs = 0
                info.section_byte_orders.append("little-endian" if s is _LE else "big-endian")
            elif btype == BT_IDB:
                entry, rname = read_interface(buf, pos, end, s, gidx_next)
                gidx_next += 1
                ifs.append(entry)
                nifs = len(ifs)
                link_types.append(entry[0])
                resolutions.append(rname)
            elif btype in (BT_EPB, BT_PB):
                if btype == BT_EPB:
                    iface, hi, lo, caplen, olen = epb(buf, pos + 8)
                    data_at = pos + 28
                else:
                    iface, _drops, hi, lo, caplen, olen = s.pb(buf, pos + 8)
                    data_at = pos + 28
                if caplen > blen - 32:
                    self._damage(
                        offset,
                        f"packet block captured length {caplen} exceeds block length {blen}",
                        number,
                    )
                    break
                if iface >= nifs:
                    self._damage(
                        offset,
                        f"packet block names interface {iface}, section has {nifs}; block skipped",
                        number,
                        fatal=False,
                    )
                else:
                    lt, mul, div, off, gidx, _snap = ifs[iface]
                    ts = ((hi << 32) | lo) * mul // div + off
                    if TS_NS_MIN <= ts <= TS_NS_MAX:
                        last_ts = ts
                    else:
                        self._bad_time(offset, hi, lo, number)
                    number += 1
                    info.packets = number
                    yield new(
                        frame_cls,
                        (number, last_ts, lt, buf[data_at : data_at + caplen], olen, gidx),
                    )
            elif btype == BT_SPB:
                if not nifs:
                    self._damage(
                        offset,
                        "simple packet block before any interface in its section; block skipped",
                        number,
                        fatal=False,
                    )
                else:
                    olen = s.u32(buf, pos + 8)[0]
                    lt, _mul, _div, _off, gidx, snaplen = ifs[0]
                    caplen = min(olen, blen - _SPB_MIN)
                    if snaplen and snaplen < caplen:
                        caplen = snaplen
                    number += 1
                    info.packets = number
                    yield new(
                        frame_cls,
                        (number, last_ts, lt, buf[pos + 12 : pos + 12 + caplen], olen, gidx),
                    )
            elif btype == BT_DSB:
                stype, slen = s.dsb(buf, pos + 8)
                if slen > blen - _DSB_MIN:
                    self._damage(
                        offset,
                        f"decryption secrets length {slen} exceeds block length {blen};"
                        " block skipped",
                        number,
                        fatal=False,
                    )
                else:
                    if walk is not None:
                        yield None  # the frames before the keys go first
                    info.secrets.append((stype, buf[pos + 16 : pos + 16 + slen]))
            elif btype not in _SKIPPED:
                info.unknown_blocks += 1
            pos = end

        self.offset = self._base + pos
        self.state = SectionState(seen_shb, s is _LE, ifs, gidx_next, last_ts)
        self._finish()

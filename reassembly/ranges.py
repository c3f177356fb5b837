"""Reading a byte range of an uncompressed capture file: the seekable record reader.

A capture file is a chain of records (pcap) or blocks (pcapng); a range ``[start,
stop)`` owns the records that *start* inside it.  ``open_range`` reads one range with
the very readers of ``reassembly.pcap`` / ``reassembly.pcapng`` (a whole-file read is
the same reader over ``[0, EOF)``), so a range's frames are the whole-file reader's
frames, numbered from the frame number given, and anything the whole-file reader
would report as damage is damage of the range too.  The reader reports where it
stopped (``offset``) and, for pcapng, the ``SectionState`` it reached there.

Where a range starts is known only for the first range.  For the others,
``find_boundary`` *re-synchronises*: a candidate offset is accepted when a chain of
``RESYNC_CHAIN`` consecutive record headers starting there is plausible (pcap: caplen
within the file's limit and not above the wire length, fraction below one second in the
file's unit, seconds near the first record's; pcapng: a known block type, a valid length
and a matching trailing length copy, in either byte order).  That is a heuristic: bytes
inside a packet may look like a chain of headers.  ``walk_range`` then walks the range
from the boundary, reporting where its records end; a caller that checks that every
range starts where the previous one ended (``analyzer.spark.split``) never rests on
the heuristic.

Compressed files have no seekable record boundaries; they are read whole.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import IO

from .capture import CaptureInfo, Frame
from .pcap import FILE_HEADER_LEN, PCAP_MAGICS, PcapHeader, PcapReader, read_header
from .pcapng import (
    _BE,
    _LE,
    _MIN_LEN,
    _SHB_MIN,
    _SKIPPED,
    BT_DSB,
    BT_EPB,
    BT_IDB,
    BT_PB,
    BT_SHB,
    BT_SPB,
    MAX_BLOCK,
    SHB_MAGIC,
    PcapngReader,
    SectionState,
    _Structs,
    section_structs,
)

__all__ = [
    "RESYNC_CHAIN",
    "FileFormat",
    "RangeSource",
    "RangeWalk",
    "Window",
    "find_boundary",
    "open_range",
    "probe_format",
    "walk_range",
]

WINDOW = 4 << 20  # bytes read at a time by ``Window``
RESYNC_CHAIN = 8  # consecutive plausible headers needed to accept a boundary
_MAX_WIRE = 16 << 20  # largest plausible on-the-wire length of one packet (TSO/GRO)
_TS_SLACK_S = 90 * 86400  # a record's seconds within this of the first record's
_PACKET_BLOCKS = (BT_EPB, BT_PB, BT_SPB)
_KNOWN_BLOCKS = frozenset({BT_SHB, BT_IDB, BT_PB, BT_SPB, BT_EPB, BT_DSB, *_SKIPPED})
_SECOND_FRACTION = {1000: 1_000_000, 1: 1_000_000_000}  # pcap mult -> units per second


@dataclass(frozen=True)
class FileFormat:
    """What the first bytes of a capture file say: enough to read any range of it."""

    format: str  # "pcap" | "pcapng"
    header: bytes = b""  # pcap: the file header
    first_sec: int | None = None  # pcap: seconds of the first record (plausibility)

    @property
    def data_start(self) -> int:
        """Offset of the first record."""
        return FILE_HEADER_LEN if self.format == "pcap" else 0

    @cached_property
    def pcap(self) -> PcapHeader:
        hdr = read_header(self.header)
        assert hdr is not None  # probe_format accepts only a whole header
        return hdr


def probe_format(head: bytes) -> FileFormat | None:
    """The format of a file from its first ``FILE_HEADER_LEN + 4`` bytes or more; None
    when ranges of it cannot be read (not an uncompressed pcap/pcapng, or cut short)."""
    magic = head[:4]
    if magic == SHB_MAGIC:
        return FileFormat("pcapng")
    if magic not in PCAP_MAGICS or len(head) < FILE_HEADER_LEN:
        return None
    endian = PCAP_MAGICS[magic][0]
    first_sec = None
    if len(head) >= FILE_HEADER_LEN + 4:
        first_sec = struct.unpack_from(endian + "I", head, FILE_HEADER_LEN)[0]
    return FileFormat("pcap", bytes(head[:FILE_HEADER_LEN]), first_sec)


class Window:
    """Random access to a seekable file through one read-ahead window (the caller
    opened ``f`` and closes it)."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self.f = f
        self.size = size
        self.base = 0
        self.buf = b""

    def get(self, off: int, n: int) -> tuple[bytes, int] | None:
        """``(buffer, position)`` with ``buffer[position:position + n]`` the file bytes
        at ``off``; None when the file ends first."""
        if off < 0 or off + n > self.size:
            return None
        rel = off - self.base
        if rel < 0 or rel + n > len(self.buf):
            self.f.seek(off)
            self.buf = self.f.read(max(n, WINDOW))
            self.base = off
            rel = 0
            if len(self.buf) < n:
                return None
        return self.buf, rel


class RangeSource:
    """The byte source of a range reader: the caller's seekable file, read from where
    it stands (the range start).  Not hashed; a read error ends the stream and is kept
    in ``error`` (reported as damage), as ``compression.ByteSource`` does."""

    compression = "none"

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.error: str | None = None
        self.bytes_read = 0
        self.file_size = 0

    def read_at_least(self, size: int, chunk: int) -> bytes:
        """Read until ``size`` bytes are collected or the file ends (may return less)."""
        parts = []
        have = 0
        while have < size and self.error is None:
            try:
                data = self._f.read(max(chunk, size - have))
            except OSError as exc:
                self.error = f"read error: {type(exc).__name__}: {exc}"
                break
            if not data:
                break
            parts.append(data)
            have += len(data)
        self.bytes_read += have
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish_hash(self) -> str:
        return ""  # a range is not the file: no digest

    def close(self) -> None:
        return None  # the caller's file


def open_range(
    f: IO[bytes],
    fmt: FileFormat,
    start: int,
    stop: int | None = None,
    *,
    number: int = 0,
    state: SectionState | None = None,
    path: str = "",
) -> PcapReader | PcapngReader:
    """The reader of the records starting in ``[start, stop)`` (``stop`` None: to the
    end of the file) of the uncompressed capture open as ``f``.

    ``start`` must be a record boundary (or 0); frames are numbered from ``number + 1``;
    pcapng: ``state`` is the section state in force at ``start`` (``SectionState``).
    Iterate it for frames; afterwards ``info.damage`` holds what the whole-file reader
    would report for these records, ``offset`` where reading stopped (``stop``'s record
    boundary when nothing was damaged) and, for pcapng, ``state`` the state there.
    ``info.packets`` is the number of the last frame read."""
    info = CaptureInfo(path=path, format="", byte_order="", ts_resolution="",
                       compression="none", variant="")
    if fmt.format == "pcap":
        at = max(start, fmt.data_start)
        f.seek(at)
        return PcapReader(RangeSource(f), info, b"", header=fmt.header, base=at, stop=stop,
                          number=number)
    f.seek(start)
    return PcapngReader(RangeSource(f), info, b"", base=start, stop=stop, number=number,
                        state=state)


# ------------------------------------------------------------------------------ pcap


def _pcap_record(hdr: PcapHeader, win: Window, off: int) -> tuple[int, int, int, int] | None:
    got = win.get(off, hdr.rec_len)
    return None if got is None else hdr.record(*got)


def _pcap_plausible(fmt: FileFormat, rec: tuple[int, int, int, int]) -> bool:
    sec, frac, incl, orig = rec
    hdr = fmt.pcap
    if incl > hdr.limit or incl > orig or orig > _MAX_WIRE:
        return False
    if frac >= _SECOND_FRACTION[hdr.mult]:
        return False
    return fmt.first_sec is None or abs(sec - fmt.first_sec) <= _TS_SLACK_S


def _pcap_chain_ok(fmt: FileFormat, win: Window, off: int) -> bool:
    hdr = fmt.pcap
    for _ in range(RESYNC_CHAIN):
        if off == win.size:
            return True  # the chain ends exactly at the end of the file
        rec = _pcap_record(hdr, win, off)
        if rec is None or not _pcap_plausible(fmt, rec):
            return False
        off += hdr.rec_len + rec[2]
        if off > win.size:
            return False
    return True


# ------------------------------------------------------------------------------ pcapng


def _block_at(win: Window, off: int, s: _Structs) -> tuple[int, int] | None:
    got = win.get(off, 12)
    return None if got is None else s.hdr(*got)


def _section_order(win: Window, off: int) -> _Structs | None:
    got = win.get(off, 12)
    return None if got is None else section_structs(got[0][got[1] + 8 : got[1] + 12])


def _block_ok(win: Window, off: int, s: _Structs, known_only: bool = True) -> int | None:
    """Length of a plausible block at ``off`` in byte order ``s``, else None (with
    ``known_only`` only block types the reader knows count as plausible)."""
    hdr = _block_at(win, off, s)
    if hdr is None:
        return None
    btype, blen = hdr
    if btype == BT_SHB:
        s2 = _section_order(win, off)
        if s2 is None:
            return None
        s = s2
        blen = s.hdr(*win.get(off, 12))[1]  # type: ignore[misc]
        min_len = _SHB_MIN
    elif btype in _KNOWN_BLOCKS or not known_only:
        min_len = _MIN_LEN.get(btype, 12)
    else:
        return None
    if blen & 3 or blen < min_len or blen > MAX_BLOCK or off + blen > win.size:
        return None
    got = win.get(off + blen - 4, 4)
    if got is None or s.u32(*got)[0] != blen:
        return None
    return blen


def _pcapng_chain_ok(win: Window, off: int, s: _Structs) -> bool:
    for _ in range(RESYNC_CHAIN):
        if off == win.size:
            return True
        blen = _block_ok(win, off, s)
        if blen is None:
            return False
        off += blen
    return True


# ------------------------------------------------------------------------------ ranges


def find_boundary(win: Window, fmt: FileFormat, start: int, end: int) -> int | None:
    """The first plausible record boundary in ``[start, end)`` (see the module
    docstring), ``fmt.data_start`` for a range at the start of the file; None when the
    range holds none."""
    if start <= fmt.data_start:
        return fmt.data_start
    if fmt.format == "pcap":
        hdr = fmt.pcap
        for off in range(start, end):
            rec = _pcap_record(hdr, win, off)
            if rec is not None and _pcap_plausible(fmt, rec) and _pcap_chain_ok(fmt, win, off):
                return off
        return None
    off = (start + 3) & ~3  # blocks are 4-byte aligned from the file start
    while off < end:
        for s in (_LE, _BE):
            if _block_ok(win, off, s) is not None and _pcapng_chain_ok(win, off, s):
                return off
        off += 4
    return None


@dataclass
class RangeWalk:
    """The records starting in ``[first, end)``, from their headers."""

    first: int
    stop: int  # offset after the last record starting before ``end``
    frames: int  # packet records in [first, stop)
    damage: str | None = None  # why the whole-file reader would report damage here
    # pcapng: (offset, block type, raw block bytes) of SHB / IDB blocks, in order
    structure: list[tuple[int, int, bytes]] = field(default_factory=list)
    spb: int = 0  # simple packet blocks seen (pcapng)


# A counter of a run of packet blocks (``_walk_pcapng``'s ``run``): ``(buf, pos,
# starts_before, big_endian) -> (pos, packets, spb)``, as ``_engine.pcapng_count``
PacketRun = Callable[[bytes, int, int, bool], tuple[int, int, int]]


def walk_range(win: Window, fmt: FileFormat, first: int, end: int,
               run: PacketRun | None = None) -> RangeWalk:
    """Walk the records starting in ``[first, end)``; ``first`` is a boundary (found
    or verified).  pcap: the range reader itself.  pcapng: block headers in the byte
    order the first blocks validate in (a range may start inside a section whose
    interfaces it does not know), collecting the SHB/IDB blocks a caller turns into
    the ``SectionState`` of the next range (``SectionState.apply``).  A Decryption
    Secrets Block counts as damage: its keys apply from where it appears in the file,
    so such a capture is read whole.  ``run``: counts runs of packet blocks in one call
    (``native.walk_range``: the C walk), this loop checking every other block."""
    if fmt.format == "pcap":
        reader = open_range(win.f, fmt, first, end)
        frames = sum(1 for _ in reader)
        damage = reader.info.damage
        return RangeWalk(first, reader.offset, frames, damage[0].reason if damage else None)
    return _walk_pcapng(win, first, end, run)


def _walk_pcapng(win: Window, first: int, end: int, run: PacketRun | None = None
                 ) -> RangeWalk:
    walk = RangeWalk(first, first, 0)
    s = None
    if (_block_at(win, first, _LE) or (0, 0))[0] == BT_SHB:
        s = _section_order(win, first)
    else:
        s = next((c for c in (_LE, _BE) if _block_ok(win, first, c) is not None), None)
    if s is None:
        walk.damage = f"no valid pcapng block at offset {first}"
        return walk
    off, n = first, 0
    while off < end:
        hdr = _block_at(win, off, s)
        if run is not None and hdr is not None and hdr[0] in _PACKET_BLOCKS:
            got = win.get(off, min(WINDOW, win.size - off))
            if got is not None:
                buf, pos = got
                moved, count, spb = run(buf, pos, pos + end - off, s is _BE)
                if count:  # (a block it left, this loop checks: damage or not)
                    n += count
                    walk.spb += spb
                    off += moved - pos
                    continue
        if hdr is not None and hdr[0] == BT_SHB:
            s2 = _section_order(win, off)
            if s2 is None:
                walk.damage = f"section header with a bad byte-order magic at {off}"
                break
            s = s2
        blen = _block_ok(win, off, s, known_only=False)
        if blen is None or hdr is None:
            walk.damage = f"invalid or truncated pcapng block at offset {off}"
            break
        btype = hdr[0]
        if btype in _PACKET_BLOCKS:
            n += 1
            if btype == BT_SPB:
                walk.spb += 1
        elif btype == BT_DSB:
            walk.damage = f"decryption secrets block at offset {off}"
            break
        elif btype in (BT_SHB, BT_IDB):
            buf, pos = win.get(off, blen)  # type: ignore[misc]
            walk.structure.append((off, btype, bytes(buf[pos : pos + blen])))
        off += blen
    walk.stop, walk.frames = off, n
    return walk


def read_frames(reader: PcapReader | PcapngReader, problems: list[str],
                stop: int | None = None) -> Iterator[Frame]:
    """The frames of a range reader, then ``note_problems``."""
    yield from reader
    note_problems(reader, problems, stop)


def note_problems(reader: PcapReader | PcapngReader, problems: list[str],
                  stop: int | None = None) -> None:
    """What a range reader that was read met, into ``problems``: what it reported as
    damage (with the offset it names) and, given the range's ``stop``, a stop short of
    it (the caller then reads the capture whole)."""
    for d in reader.info.damage:
        problems.append(f"{d.reason} (offset {d.offset})")
    if stop is not None and reader.offset != stop:
        problems.append(f"range read to offset {reader.offset}, planned to {stop}")

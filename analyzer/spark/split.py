"""One capture file cut into byte ranges that Spark tasks read on their own.

Strategy (plain Python, no Spark here, so it is tested on its own):

1. ``probe_layout`` reads the file header: classic pcap (any magic / byte order / the
   "modified" variant) and pcapng can be split; a compressed file cannot (a gzip or
   zstd stream has no seekable record boundaries) and is dissected whole.
2. ``scan_range`` (pass 1, one task per range) finds the first record boundary at or
   after the range start by **re-synchronising**: a candidate offset is accepted when a
   chain of consecutive record headers starting there is plausible (pcap: caplen within
   the file's limit and not above the wire length, fraction below one second in the
   file's unit, seconds near the first record's; pcapng: a known block type, a valid
   length and a matching trailing length copy, in either byte order).  From there it
   walks record headers only (no packet bytes) to the first record that starts at or
   after the range end.  A range owns the records that *start* inside it.
3. ``verify_chain`` (driver) checks that each range ends exactly where the next one
   starts.  A range whose re-synchronisation picked a false boundary (bytes inside a
   packet that happen to look like a chain of headers) is re-scanned from the end of
   its predecessor, so correctness never rests on the heuristic; it also computes the
   global frame number of each range's first record and, for pcapng, the section and
   interface state in force at its start.
4. ``iter_range_frames`` (passes 2 and 3) yields the range's frames exactly as the
   whole-file readers in ``reassembly`` would (same numbers, timestamps, link types,
   bytes, interfaces).

Anything the whole-file reader would report as damage (a bad or truncated record, an
unknown interface, a simple packet block whose timestamp would come from another
range) makes the scan say ``fallback``: such a capture is dissected by the local path
in one task, which reports the damage exactly as ``msgcap dissect`` does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from analyzer.spark.storage import open_input
from reassembly.capture import MAX_RECORD, MIN_CAPLEN_LIMIT, Frame
from reassembly.compression import GZIP_MAGIC, ZSTD_MAGIC
from reassembly.pcap import FILE_HEADER_LEN, PCAP_MAGICS
from reassembly.pcapng import (
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
    OPT_IF_TSOFFSET,
    OPT_IF_TSRESOL,
    SHB_MAGIC,
    _options,
    _Structs,
    tsresol_to_scale,
)

__all__ = [
    "Layout",
    "RangeScan",
    "iter_range_frames",
    "plan_ranges",
    "probe_layout",
    "scan_range",
    "verify_chain",
]

_WINDOW = 4 << 20  # bytes read at a time
RESYNC_CHAIN = 8  # consecutive plausible headers needed to accept a boundary
_MAX_WIRE = 16 << 20  # largest plausible on-the-wire length of one packet (TSO/GRO)
_TS_SLACK_S = 90 * 86400  # a record's seconds within this of the first record's
_PACKET_BLOCKS = (BT_EPB, BT_PB, BT_SPB)
_KNOWN_BLOCKS = frozenset({BT_SHB, BT_IDB, BT_PB, BT_SPB, BT_EPB, BT_DSB, *_SKIPPED})


@dataclass(frozen=True)
class Layout:
    """What the file header says: enough for any task to parse any range."""

    path: str
    size: int
    format: str  # "pcap" | "pcapng"
    # pcap only
    endian: str = "<"
    rec_len: int = 16
    mult: int = 1000
    swap: int = 0  # 0 never, 1 always (version < 2.3), 2 when caplen > len (2.3)
    limit: int = MIN_CAPLEN_LIMIT
    linktype: int = 0
    first_sec: int | None = None  # seconds of the first record (resync plausibility)
    data_start: int = FILE_HEADER_LEN


def probe_layout(path: str, size: int) -> Layout | None:
    """The file's layout, or None when it cannot be split (compressed, unknown, tiny)."""
    f = open_input(path)  # a local path or a URI (analyzer.spark.storage)
    try:
        head = f.read(FILE_HEADER_LEN + 24)
    finally:
        f.close()
    if head[:2] == GZIP_MAGIC or head[:4] == ZSTD_MAGIC:
        return None
    magic = head[:4]
    if magic == SHB_MAGIC:
        return Layout(path, size, "pcapng", data_start=0)
    if magic not in PCAP_MAGICS or len(head) < FILE_HEADER_LEN:
        return None
    endian, res, variant = PCAP_MAGICS[magic]
    major, minor, _zone, _sig, snaplen, network = struct.unpack_from(endian + "4xHHiIII", head)
    if (major, minor) < (2, 3):
        swap = 1
    elif (major, minor) == (2, 3):
        swap = 2
    else:
        swap = 0
    first_sec = None
    if len(head) >= FILE_HEADER_LEN + 4:
        first_sec = struct.unpack_from(endian + "I", head, FILE_HEADER_LEN)[0]
    return Layout(
        path,
        size,
        "pcap",
        endian=endian,
        rec_len=24 if variant == "modified" else 16,
        mult=1000 if res == "us" else 1,
        swap=swap,
        limit=max(MIN_CAPLEN_LIMIT, min(snaplen, MAX_RECORD)),
        linktype=network & 0xFFFF,
        first_sec=first_sec,
    )


def plan_ranges(layout: Layout, split_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges of about ``split_bytes`` covering the records."""
    split_bytes = max(int(split_bytes), 64)
    start, size = layout.data_start, layout.size
    out = []
    while start < size:
        end = min(size, start + split_bytes)
        out.append((start, end))
        start = end
    return out or [(layout.data_start, size)]


class _Reader:
    """Random access to the file through one read-ahead window."""

    def __init__(self, path: str, size: int) -> None:
        self.f = open_input(path)  # a local path or a URI; closed by close()
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
            self.buf = self.f.read(max(n, _WINDOW))
            self.base = off
            rel = 0
            if len(self.buf) < n:
                return None
        return self.buf, rel

    def close(self) -> None:
        self.f.close()


# ------------------------------------------------------------------------------ pcap


def _pcap_record(layout: Layout, rd: _Reader, off: int) -> tuple[int, int, int, int] | None:
    """(sec, frac, caplen, orig) at ``off`` as the reader interprets them, or None."""
    got = rd.get(off, layout.rec_len)
    if got is None:
        return None
    buf, pos = got
    sec, frac, incl, orig = struct.unpack_from(layout.endian + "IIII", buf, pos)
    if layout.swap and (layout.swap == 1 or incl > orig):
        incl, orig = orig, incl
    return sec, frac, incl, orig


def _pcap_plausible(layout: Layout, rec: tuple[int, int, int, int]) -> bool:
    sec, frac, incl, orig = rec
    if incl > layout.limit or incl > orig or orig > _MAX_WIRE:
        return False
    if frac >= (1_000_000 if layout.mult == 1000 else 1_000_000_000):
        return False
    return layout.first_sec is None or abs(sec - layout.first_sec) <= _TS_SLACK_S


def _pcap_chain_ok(layout: Layout, rd: _Reader, off: int) -> bool:
    for _ in range(RESYNC_CHAIN):
        if off == layout.size:
            return True  # the chain ends exactly at the end of the file
        rec = _pcap_record(layout, rd, off)
        if rec is None or not _pcap_plausible(layout, rec):
            return False
        off += layout.rec_len + rec[2]
        if off > layout.size:
            return False
    return True


# ------------------------------------------------------------------------------ pcapng


def _block_at(rd: _Reader, off: int, s: _Structs) -> tuple[int, int] | None:
    got = rd.get(off, 12)
    if got is None:
        return None
    buf, pos = got
    return s.hdr(buf, pos)


def _pcapng_block_ok(rd: _Reader, off: int, s: _Structs, known_only: bool = True
                     ) -> int | None:
    """Length of a plausible block at ``off`` in byte order ``s``, else None (with
    ``known_only`` only block types the reader knows count as plausible)."""
    hdr = _block_at(rd, off, s)
    if hdr is None:
        return None
    btype, blen = hdr
    if btype == BT_SHB:
        got = rd.get(off, 12)
        bom = got[0][got[1] + 8 : got[1] + 12] if got else b""
        s2 = _LE if bom == b"\x4d\x3c\x2b\x1a" else _BE if bom == b"\x1a\x2b\x3c\x4d" else None
        if s2 is None:
            return None
        blen = _block_at(rd, off, s2)[1]
        s = s2
        min_len = _SHB_MIN
    elif btype in _KNOWN_BLOCKS or not known_only:
        min_len = _MIN_LEN.get(btype, 12)
    else:
        return None
    if blen & 3 or blen < min_len or blen > MAX_BLOCK or off + blen > rd.size:
        return None
    got = rd.get(off + blen - 4, 4)
    if got is None or s.u32(got[0], got[1])[0] != blen:
        return None
    return blen


def _pcapng_chain_ok(rd: _Reader, off: int, s: _Structs) -> bool:
    for _ in range(RESYNC_CHAIN):
        if off == rd.size:
            return True
        blen = _pcapng_block_ok(rd, off, s)
        if blen is None:
            return False
        off += blen
    return True


# ------------------------------------------------------------------------------ pass 1


@dataclass
class RangeScan:
    """What pass 1 learned about one range."""

    index: int
    start: int  # requested range
    end: int
    first: int | None  # offset of the first record starting in the range (None: none)
    stop: int  # offset after the last record starting in the range
    frames: int  # packet records in [first, stop)
    fallback: str | None = None  # why this capture must be read whole
    # pcapng: (offset, block type, raw block bytes) of SHB / IDB blocks, in order
    structure: list[tuple[int, int, bytes]] = field(default_factory=list)
    spb: int = 0  # simple packet blocks seen (pcapng)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _resync(layout: Layout, rd: _Reader, start: int, end: int) -> int | None:
    if start <= layout.data_start:
        return layout.data_start
    if layout.format == "pcap":
        for off in range(start, end):
            rec = _pcap_record(layout, rd, off)
            if rec is not None and _pcap_plausible(layout, rec) and _pcap_chain_ok(
                layout, rd, off
            ):
                return off
        return None
    off = (start + 3) & ~3  # blocks are 4-byte aligned from the file start
    while off < end:
        for s in (_LE, _BE):
            if _pcapng_block_ok(rd, off, s) is not None and _pcapng_chain_ok(rd, off, s):
                return off
        off += 4
    return None


def scan_range(layout: Layout, index: int, start: int, end: int, first: int | None = None
               ) -> RangeScan:
    """Pass 1 over ``[start, end)``: re-synchronise (unless ``first`` is given, the
    verified boundary) and walk the record headers of the range."""
    rd = _Reader(layout.path, layout.size)
    try:
        if first is None:
            first = _resync(layout, rd, start, end)
        if first is None:
            return RangeScan(index, start, end, None, end, 0)
        if layout.format == "pcap":
            return _scan_pcap(layout, rd, index, start, end, first)
        return _scan_pcapng(layout, rd, index, start, end, first)
    finally:
        rd.close()


def _scan_pcap(layout: Layout, rd: _Reader, index: int, start: int, end: int, first: int
               ) -> RangeScan:
    off, n = first, 0
    scan = RangeScan(index, start, end, first, first, 0)
    while off < end:
        rec = _pcap_record(layout, rd, off)
        if rec is None:
            scan.fallback = f"truncated pcap record header at offset {off}"
            break
        incl = rec[2]
        if incl > layout.limit:
            scan.fallback = f"pcap record at offset {off} claims caplen {incl}"
            break
        if off + layout.rec_len + incl > layout.size:
            scan.fallback = f"truncated pcap record body at offset {off}"
            break
        off += layout.rec_len + incl
        n += 1
    scan.stop, scan.frames = off, n
    return scan


def _section_order(rd: _Reader, off: int) -> _Structs | None:
    got = rd.get(off, 12)
    if got is None:
        return None
    bom = got[0][got[1] + 8 : got[1] + 12]
    return _LE if bom == b"\x4d\x3c\x2b\x1a" else _BE if bom == b"\x1a\x2b\x3c\x4d" else None


def _scan_pcapng(layout: Layout, rd: _Reader, index: int, start: int, end: int, first: int
                 ) -> RangeScan:
    """Walk blocks.  The byte order of a range that starts inside a section is the one
    its first blocks validate in; the driver checks it against the real section."""
    scan = RangeScan(index, start, end, first, first, 0)
    off, n = first, 0
    s = None
    if (_block_at(rd, first, _LE) or (0, 0))[0] == BT_SHB:
        s = _section_order(rd, first)
    else:
        for cand in (_LE, _BE):
            if _pcapng_block_ok(rd, first, cand) is not None:
                s = cand
                break
    if s is None:
        scan.fallback = f"no valid pcapng block at offset {first}"
        return scan
    while off < end:
        hdr = _block_at(rd, off, s)
        if hdr is not None and hdr[0] == BT_SHB:
            s2 = _section_order(rd, off)
            if s2 is None:
                scan.fallback = f"section header with a bad byte-order magic at {off}"
                break
            s = s2
        blen = _pcapng_block_ok(rd, off, s, known_only=False)
        if blen is None:
            scan.fallback = f"invalid or truncated pcapng block at offset {off}"
            break
        btype = _block_at(rd, off, s)[0]
        if btype in _PACKET_BLOCKS:
            n += 1
            if btype == BT_SPB:
                scan.spb += 1
        elif btype == BT_DSB:
            # keys become usable where they appear in the file: read such a capture whole
            scan.fallback = f"decryption secrets block at offset {off}"
            break
        elif btype in (BT_SHB, BT_IDB):
            buf, pos = rd.get(off, blen)
            scan.structure.append((off, btype, bytes(buf[pos : pos + blen])))
        off += blen
    scan.stop, scan.frames = off, n
    return scan


# ------------------------------------------------------------------------------ driver


@dataclass
class RangePlan:
    """A verified range: where its records start and end, its first global frame
    number (1-based) and, for pcapng, the state in force at its first block."""

    index: int
    first: int
    stop: int
    frames: int
    frame_base: int  # number of frames before this range
    state: dict[str, Any] | None = None  # pcapng section/interface state


def _apply_structure(state: dict[str, Any], btype: int, raw: bytes) -> str | None:
    """Update pcapng section state with an SHB/IDB block (as the reader does)."""
    if btype == BT_SHB:
        bom = raw[8:12]
        s = _LE if bom == b"\x4d\x3c\x2b\x1a" else _BE if bom == b"\x1a\x2b\x3c\x4d" else None
        if s is None:
            return "bad byte-order magic"
        major, _minor, _len = s.shb(raw, 12)
        if major != 1:
            return f"unsupported pcapng version {major}"
        state["endian"] = "<" if s is _LE else ">"
        state["ifs"] = []
        state["seen_shb"] = True
        return None
    if not state.get("seen_shb"):
        return "block before the first section header"
    s = _LE if state["endian"] == "<" else _BE
    linktype, _res, snaplen = s.idb(raw, 8)
    opts = _options(raw, 16, len(raw) - 4, s)
    resol = opts.get(OPT_IF_TSRESOL)
    mul, div, _name = tsresol_to_scale(resol[0] if resol else 6)
    off_raw = opts.get(OPT_IF_TSOFFSET)
    off = s.i64(off_raw)[0] * 1_000_000_000 if off_raw and len(off_raw) == 8 else 0
    state["ifs"].append((linktype, mul, div, off, len(state["link_types"]), snaplen))
    state["link_types"].append(linktype)
    return None


def verify_chain(
    layout: Layout, scans: list[RangeScan], rescan
) -> tuple[list[RangePlan], str | None]:
    """Check and repair the chain of ranges; returns the plans and a fallback reason.

    ``rescan(index, start, end, first)`` re-runs pass 1 for one range from a known
    boundary (the driver does it locally: it is rare)."""
    plans: list[RangePlan] = []
    expect = layout.data_start
    base = 0
    state: dict[str, Any] | None = None
    if layout.format == "pcapng":
        state = {"endian": "<", "ifs": [], "link_types": [], "seen_shb": False}
    spb_ranges = 0
    for scan in scans:
        if expect >= scan.end:
            continue  # the previous range's last record covers this whole range
        if scan.first != expect:
            scan = rescan(scan.index, scan.start, scan.end, expect)
        if scan.fallback:
            return plans, scan.fallback
        snap = None
        if state is not None:
            snap = {
                "endian": state["endian"],
                "ifs": list(state["ifs"]),
                "gidx": len(state["link_types"]),
                "seen_shb": state["seen_shb"],
            }
            for _off, btype, raw in scan.structure:
                why = _apply_structure(state, btype, raw)
                if why:
                    return plans, why
            if scan.spb:
                spb_ranges += 1
        plans.append(RangePlan(scan.index, expect, scan.stop, scan.frames, base, snap))
        base += scan.frames
        expect = scan.stop
    if expect != layout.size:
        return plans, f"records end at {expect}, the file at {layout.size}"
    if spb_ranges and len([p for p in plans if p.frames]) > 1:
        # an SPB takes the previous frame's time, possibly from another range
        return plans, "simple packet blocks in a capture split into several ranges"
    return plans, None


def link_types(layout: Layout, scans: list[RangeScan]) -> list[int]:
    """Link type of every interface in global order (``CaptureInfo.link_types``)."""
    if layout.format == "pcap":
        return [layout.linktype]
    state: dict[str, Any] = {"endian": "<", "ifs": [], "link_types": [], "seen_shb": False}
    for scan in scans:
        for _off, btype, raw in scan.structure:
            _apply_structure(state, btype, raw)
    return list(state["link_types"])


# ------------------------------------------------------------------------------ frames


def iter_range_frames(layout: Layout, plan: RangePlan, problems: list[str] | None = None
                      ) -> Iterator[Frame]:
    """The frames of one verified range, numbered globally, exactly as the whole-file
    reader yields them.  Anything the reader would report as damage is appended to
    ``problems`` (the caller then falls back to the local path)."""
    problems = problems if problems is not None else []
    rd = _Reader(layout.path, layout.size)
    try:
        if layout.format == "pcap":
            yield from _pcap_frames(layout, plan, rd, problems)
        else:
            yield from _pcapng_frames(layout, plan, rd, problems)
    finally:
        rd.close()


def _pcap_frames(layout: Layout, plan: RangePlan, rd: _Reader, problems: list[str]
                 ) -> Iterator[Frame]:
    off, number = plan.first, plan.frame_base
    hlen, mult, lt = layout.rec_len, layout.mult, layout.linktype
    new = tuple.__new__
    while off < plan.stop:
        rec = _pcap_record(layout, rd, off)
        if rec is None:
            problems.append(f"record header at {off} unreadable")
            return
        sec, frac, incl, orig = rec
        got = rd.get(off + hlen, incl)
        if got is None or incl > layout.limit:
            problems.append(f"record body at {off} unreadable")
            return
        buf, pos = got
        number += 1
        yield new(Frame, (number, sec * 1_000_000_000 + frac * mult, lt,
                          buf[pos : pos + incl], orig, 0))
        off += hlen + incl


def _pcapng_frames(layout: Layout, plan: RangePlan, rd: _Reader, problems: list[str]
                   ) -> Iterator[Frame]:
    st = plan.state or {}
    s = _LE if st.get("endian", "<") == "<" else _BE
    ifs = list(st.get("ifs", []))
    gidx = st.get("gidx", 0)
    seen_shb = st.get("seen_shb", False)
    number = plan.frame_base
    last_ts = 0
    off = plan.first
    new = tuple.__new__
    while off < plan.stop:
        hdr = _block_at(rd, off, s)
        if hdr is None:
            problems.append(f"block header at {off} unreadable")
            return
        btype, blen = hdr
        if btype == BT_SHB:
            s2 = _section_order(rd, off)
            if s2 is None:
                problems.append(f"bad section header at {off}")
                return
            s = s2
            blen = _block_at(rd, off, s)[1]
        elif not seen_shb:
            problems.append(f"first block at {off} is not a section header")
            return
        got = rd.get(off, blen) if 12 <= blen <= MAX_BLOCK else None
        if got is None:
            problems.append(f"block at {off} unreadable")
            return
        buf, pos = got
        end = pos + blen
        if blen & 3 or s.u32(buf, end - 4)[0] != blen:
            problems.append(f"block at {off} has a bad length")
            return
        if btype == BT_SHB:
            major = s.shb(buf, pos + 12)[0]
            if major != 1:
                problems.append(f"unsupported pcapng version at {off}")
                return
            seen_shb = True
            ifs = []
        elif btype == BT_IDB:
            linktype, _res, snaplen = s.idb(buf, pos + 8)
            opts = _options(buf, pos + 16, end - 4, s)
            resol = opts.get(OPT_IF_TSRESOL)
            mul, div, _n = tsresol_to_scale(resol[0] if resol else 6)
            off_raw = opts.get(OPT_IF_TSOFFSET)
            tsoff = s.i64(off_raw)[0] * 1_000_000_000 if off_raw and len(off_raw) == 8 else 0
            ifs.append((linktype, mul, div, tsoff, gidx, snaplen))
            gidx += 1
        elif btype in (BT_EPB, BT_PB):
            if blen < 32:
                problems.append(f"packet block at {off} too short")
                return
            if btype == BT_EPB:
                iface, hi, lo, caplen, olen = s.epb(buf, pos + 8)
            else:
                iface, _drops, hi, lo, caplen, olen = s.pb(buf, pos + 8)
            if caplen > blen - 32 or iface >= len(ifs):
                problems.append(f"packet block at {off} is damaged or names no interface")
                return
            lt, mul, div, tsoff, g, _snap = ifs[iface]
            last_ts = ((hi << 32) | lo) * mul // div + tsoff
            number += 1
            data_at = pos + 28
            yield new(Frame, (number, last_ts, lt, buf[data_at : data_at + caplen], olen, g))
        elif btype == BT_SPB:
            if not ifs:
                problems.append(f"simple packet block at {off} before any interface")
                return
            olen = s.u32(buf, pos + 8)[0]
            lt, _mul, _div, _off, g, snaplen = ifs[0]
            caplen = min(olen, blen - 16)
            if snaplen and snaplen < caplen:
                caplen = snaplen
            number += 1
            yield new(Frame, (number, last_ts, lt, buf[pos + 12 : pos + 12 + caplen], olen, g))
        elif btype == BT_DSB:
            _stype, slen = s.dsb(buf, pos + 8)
            if slen > blen - 20:
                problems.append(f"decryption secrets block at {off} is damaged")
                return
        off += blen

"""One capture file cut into byte ranges that Spark tasks read on their own.

Strategy (plain Python, no Spark here, so it is tested on its own); the reading itself is
``reassembly.ranges``, the seekable record reader of the whole-file path:

1. ``probe_layout`` reads the file header: classic pcap (any magic / byte order / the
   "modified" variant) and pcapng can be split; a compressed file cannot (a gzip or
   zstd stream has no seekable record boundaries) and is dissected whole.
2. ``scan_range`` (pass 1, one task per range) finds the first record boundary at or
   after the range start by re-synchronising (``reassembly.ranges.find_boundary``) and
   walks the range's records to the first one that starts at or after the range end
   (``walk_range``).  A range owns the records that *start* inside it.
3. ``verify_chain`` (driver) checks that each range ends exactly where the next one
   starts.  A range whose re-synchronisation picked a false boundary (bytes inside a
   packet that happen to look like a chain of headers) is re-scanned from the end of
   its predecessor, so correctness never rests on the heuristic; it also computes the
   global frame number of each range's first record and, for pcapng, the
   ``SectionState`` in force at its start.
4. ``iter_range_frames`` (passes 2 and 3) yields the range's frames with the whole-file
   reader itself (``reassembly.ranges.open_range``): same numbers, timestamps, link
   types, bytes, interfaces; ``range_batches`` gives the same frames as the native
   engine's C batches (a classic pcap range walked in C).

Anything the whole-file reader would report as damage (a bad or truncated record, an
unknown interface, a simple packet block whose timestamp would come from another
range) makes the scan say ``fallback``: such a capture is dissected by the local path
in one task, which reports the damage exactly as ``msgcap dissect`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.spark.storage import open_input
from reassembly import native
from reassembly.capture import Frame
from reassembly.compression import GZIP_MAGIC, ZSTD_MAGIC
from reassembly.pcap import FILE_HEADER_LEN
from reassembly.pcapng import BT_IDB, SectionState
from reassembly.ranges import (
    FileFormat,
    Window,
    find_boundary,
    open_range,
    probe_format,
    read_frames,
)

if TYPE_CHECKING:
    from reassembly._engine import Batch

__all__ = [
    "Layout",
    "RangePlan",
    "RangeScan",
    "iter_range_frames",
    "range_batches",
    "link_types",
    "plan_ranges",
    "probe_layout",
    "scan_range",
    "verify_chain",
]


@dataclass(frozen=True)
class Layout:
    """Where a capture is and what its file header says: enough for any task to read
    any range of it."""

    path: str
    size: int
    file: FileFormat

    @property
    def format(self) -> str:  # "pcap" | "pcapng"
        return self.file.format

    @property
    def data_start(self) -> int:
        return self.file.data_start


def probe_layout(path: str, size: int) -> Layout | None:
    """The file's layout, or None when it cannot be split (compressed, unknown, tiny)."""
    f = open_input(path)  # a local path or a URI (analyzer.spark.storage)
    try:
        head = f.read(FILE_HEADER_LEN + 24)
    finally:
        f.close()
    if head[:2] == GZIP_MAGIC or head[:4] == ZSTD_MAGIC:
        return None
    fmt = probe_format(head)
    return None if fmt is None else Layout(path, size, fmt)


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


def scan_range(layout: Layout, index: int, start: int, end: int, first: int | None = None
               ) -> RangeScan:
    """Pass 1 over ``[start, end)``: re-synchronise (unless ``first`` is given, the
    verified boundary) and walk the records of the range."""
    f = open_input(layout.path)
    try:
        win = Window(f, layout.size)
        if first is None:
            first = find_boundary(win, layout.file, start, end)
        if first is None:
            return RangeScan(index, start, end, None, end, 0)
        walk = native.walk_range(win, layout.file, first, end)
    finally:
        f.close()
    return RangeScan(index, start, end, first, walk.stop, walk.frames, walk.damage,
                     walk.structure, walk.spb)


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
    state: SectionState | None = None  # pcapng: the state at ``first``


def verify_chain(
    layout: Layout, scans: list[RangeScan],
    rescan: Callable[[int, int, int, int], RangeScan],
) -> tuple[list[RangePlan], str | None]:
    """Check and repair the chain of ranges; returns the plans and a fallback reason.

    ``rescan(index, start, end, first)`` re-runs pass 1 for one range from a known
    boundary (the driver does it locally: it is rare)."""
    plans: list[RangePlan] = []
    expect = layout.data_start
    base = 0
    state = SectionState() if layout.format == "pcapng" else None
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
            snap = dataclasses.replace(state, interfaces=list(state.interfaces))
            for _off, btype, raw in scan.structure:
                why = state.apply(btype, raw)
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
        return [layout.file.pcap.linktype]
    state = SectionState()
    out: list[int] = []
    for scan in scans:
        for _off, btype, raw in scan.structure:
            if state.apply(btype, raw) is None and btype == BT_IDB:
                out.append(state.interfaces[-1][0])
    return out


# ------------------------------------------------------------------------------ frames


def iter_range_frames(layout: Layout, plan: RangePlan, problems: list[str] | None = None
                      ) -> Iterator[Frame]:
    """The frames of one verified range, numbered globally, exactly as the whole-file
    reader yields them (it is that reader, over the range).  Anything the reader reports
    as damage, or a stop short of the range's end, is appended to ``problems`` (the
    caller then falls back to the local path)."""
    problems = problems if problems is not None else []
    f = open_input(layout.path)
    try:
        reader = open_range(f, layout.file, plan.first, plan.stop, number=plan.frame_base,
                            state=plan.state, path=layout.path)
        yield from read_frames(reader, problems, plan.stop)
    finally:
        f.close()


def range_batches(layout: Layout, plan: RangePlan, problems: list[str] | None = None,
                  max_records: int = native.BATCH_RECORDS) -> Iterator[Batch]:
    """``iter_range_frames`` as the native engine's C batches (``native.range_batches``:
    the same frames and problems)."""
    problems = problems if problems is not None else []
    f = open_input(layout.path)
    try:
        yield from native.range_batches(f, layout.file, plan.first, plan.stop, problems,
                                        number=plan.frame_base, state=plan.state,
                                        path=layout.path, max_records=max_records)
    finally:
        f.close()

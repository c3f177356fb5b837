"""The native packet engine (issue 22): the common path of reassembly in C.

Strategy (docs/performance.md, "Native engine (issue 22): design"): ``reassembly._engine``
walks pcap records in a buffer and decodes them into a batch (``pcap_batches``); a
``NativeReassembler`` keeps the Python ``Reassembler`` as the reference and lets the C
core *take* only the packets whose effect on that reference is plain bookkeeping and
at most one in-order delivery (a registered flow's ACK, with or without in-order data).
Every other frame is handed to the reference, after the C side wrote what it took back
into the reference's objects (``_sync``), so every decision that depends on more than
that (new flows, handshakes, closes, reordering, overlaps, limits, the memory budget,
idle sweeps) is the reference's own.  Taken payloads that are adjacent in the event
order come out as one ``CoalescedData`` whose ``split()`` gives the reference's
``StreamData`` events.

Wired into ``reassembly.engine.capture_events`` (``engine_for``) for whole classic pcap
and pcapng files, on unless ``MSGCAP_NATIVE_ENGINE=0``: the C walk reads the reader's
own buffer and stream (``reader_batches``), so the digest and damage stay the reader's.  The C
core still reads and writes the reference's flow state (``FlowTable``/``_Tcp``/
``TcpHalfStream`` attributes); the differential test compares every one of them.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from itertools import groupby
from typing import IO, Any, NamedTuple, TypeGuard, TypeVar, cast

from reassembly import ranges
from reassembly.capture import CaptureReader, Frame, open_capture
from reassembly.engine import CaptureClock, Reassembler
from reassembly.events import (
    DIRECTIONS,
    Event,
    FlowInfo,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.flows import UNKNOWN_WSCALE, _Tcp
from reassembly.limits import SECOND_NS, TIER_BUFFERS, TIER_WINDOWS, Limits, MemoryHolder
from reassembly.pcap import FILE_HEADER_LEN, PcapHeader
from reassembly.pcapng import (
    _EPB_MIN,
    _PB_MIN,
    _SPB_MIN,
    MAX_BLOCK,
    Interface,
    PcapngReader,
    SectionState,
)
from reassembly.provenance import SEGMENT, CoalescedData
from reassembly.ranges import (
    FileFormat,
    RangeWalk,
    Window,
    note_problems,
    open_range,
    read_frames,
)
from reassembly.tcp import (
    OOW_SLACK_BYTES,
    PIECE_OVERHEAD_BYTES,
    TcpHalfStream,
    TcpHalfTracker,
    _Piece,
    _Window,
)

try:
    from reassembly import _engine
except ImportError:  # no C compiler at install time: the reference runs alone
    _engine = None  # type: ignore[assignment]

AVAILABLE = _engine is not None
_T = TypeVar("_T")


def maker(cls: type[_T]) -> Callable[..., _T]:
    """A constructor of ``cls`` taking the same positional values and making an equal
    object: ``_engine.Maker`` (C) where making one only stores its fields — a
    NamedTuple, or a slots dataclass without ``__post_init__`` whose fields all come from
    its generated ``__init__`` (defaults allowed, no factories) — else ``cls`` itself.
    Why: the engine makes a ``StreamData`` per segment and the conveyor a ``Span``; a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (~2 us for ``StreamData``), a NamedTuple's ``__new__`` is a Python function (~0.5 us);
    the C one takes ~0.15 and ~0.05 us (``tests/perf/test_engine_native.py`` compares)."""
    make = getattr(_engine, "Maker", None)
    if make is None:  # (no C compiler, or a module built before it had Maker)
        return cls
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        tup: Any = cls
        names, defaults = tup._fields, tuple(tup._field_defaults.values())
    elif (dataclasses.is_dataclass(cls) and "__slots__" in vars(cls)
          and not hasattr(cls, "__post_init__")
          and _generated(cls.__init__)):
        fields = dataclasses.fields(cls)
        if any(not f.init or f.default_factory is not dataclasses.MISSING for f in fields):
            return cls
        names = tuple(f.name for f in fields)
        defaults = tuple(f.default for f in fields if f.default is not dataclasses.MISSING)
    else:
        return cls
    try:
        return cast(Callable[..., _T], make(cls, names, defaults))
    except TypeError:  # a layout Maker does not take (e.g. slots inherited from a base)
        return cls


def _generated(init: object) -> bool:
    """Whether ``init`` is a dataclass's generated ``__init__`` (not one of the class)."""
    code = getattr(init, "__code__", None)
    return code is not None and code.co_qualname.startswith("__create_fn__")


_stream_data = maker(StreamData)
_chunk = maker(CoalescedData)
_stream_gap = maker(StreamGap)
# ``NativeReassembler._slide_windows`` and ``process``'s loop over a stretch's runs in C
# (None: a module built before it had them)
_slide = getattr(_engine, "slide", None)
_events = getattr(_engine, "events", None)
# ``NativeReassembler._write_back`` in C (None: a module built before it had it)
_write_back = getattr(_engine, "write_back", None)
# ``NativeReassembler._effects`` in C (None: a module built before it had it)
_apply_effects = getattr(_engine, "apply_effects", None)

# Records per batch: bounds the batch's row array (~100 bytes a record) and how long
# the reference waits for the events of a stretch of taken packets.
BATCH_RECORDS = 16384
# Bytes read from the capture at a time (as reassembly.capture.CHUNK).
READ_CHUNK = 1 << 20
# Bytes of a range read at a time (``range_batches``): a few C batches' worth
RANGE_CHUNK = 8 << 20
_PACKET_MINS = (_EPB_MIN, _PB_MIN, _SPB_MIN)  # smallest Enhanced, obsolete, Simple block

TCP = 6
# ``MSGCAP_NATIVE_ENGINE=0``: capture_events runs the reference alone (``enabled``).
ENV_SWITCH = "MSGCAP_NATIVE_ENGINE"
_ONE_SEGMENT = SEGMENT.size
# ``Engine.sync``'s effects (reassembly/_engine.c FX_*)
_FX_PIECE, _FX_WINDOW, _FX_DRAIN, _FX_RELEASE = range(4)
_NEVER = (1 << 63) - 1  # the sweep interval of a clock that never ticks (``_tell_clock``)
_unpack_segment = SEGMENT.unpack
_pack_segment = SEGMENT.pack
_unpack_segment_from = SEGMENT.unpack_from
_unpack_ports = struct.Struct("!HH").unpack_from  # a TCP header's source and destination ports


class DecodedRow(NamedTuple):
    """A record the C core decodes exactly as ``NetworkDecoder.decode`` would."""

    ip_version: int
    src: bytes
    dst: bytes
    proto: int  # 6 or 17
    l4_offset: int  # transport header, in the frame's data
    l4_len: int  # transport header + data, trimmed to the IP length
    vlans: tuple[int, ...]
    sport: int
    dport: int
    seq: int  # TCP only (0 for UDP)
    ack: int
    flags: int
    window: int
    header_len: int  # TCP data offset in bytes; 8 for UDP


def decode(linktype: int, data: bytes) -> DecodedRow | None:
    """One frame through the C decode; None when the reference must decode it (slow)."""
    row = _engine.decode(linktype, data)
    return None if row is None else DecodedRow(*row)


# -- record reading ------------------------------------------------------------------


def reader_batches(reader: CaptureReader, max_records: int = BATCH_RECORDS
                   ) -> Iterator[_engine.Batch]:
    """The records of a classic pcap or pcapng file (gzip/zstd too) open as ``reader``
    (by ``open_capture``, not iterated yet) as C batches, in order.

    Classic pcap: the C walk parses the reader's own buffer, grown from the reader's own
    byte stream (``CaptureReader.read_more``), so the file digest is the reader's; where
    the walk stops (a record the reader would report as damage, or the end), the rest
    goes back to the reader (``CaptureReader.resume``), which reports the damage and
    finishes the digest; any frame it still yields comes in batches too.  pcapng:
    ``_pcapng_batches``.  Raises ValueError for a reader that is not of a whole file
    (a range of a file, a cut pcap file header: ``_whole_pcap``, ``_whole_pcapng``)."""
    if _whole_pcapng(reader):
        yield from _pcapng_batches(reader, max_records)
        return
    header = _whole_pcap(reader)
    if header is None:
        raise ValueError(f"{reader.info.path}: not a whole classic pcap or pcapng file")
    big, rec_len = header.endian == ">", header.rec_len
    swap, mult, limit, linktype = header.swap, header.mult, header.limit, header.linktype
    buf, _ = reader.unread()
    pos, number = FILE_HEADER_LEN, 0
    while True:
        batch = _engine.walk_pcap(buf, pos, big, rec_len, swap, mult, limit, linktype, number,
                                  max_records)
        if len(batch):
            number = batch.number
            reader.info.packets = number
            yield batch
        pos = batch.end
        if batch.stop:
            break
        if len(batch) == max_records:
            continue
        have = len(buf) - pos
        need = rec_len
        if have >= rec_len:
            need += header.record(buf, pos)[2]
        buf = reader.read_more(buf, pos, max(need, have + 1))
        pos = 0
        if len(buf) == have:  # the stream ended
            break
    reader.resume(buf, pos, number)
    yield from frame_batches(reader, max_records)


def _whole_pcap(reader: CaptureReader) -> PcapHeader | None:
    """The file header of a reader of a whole classic pcap file, not iterated yet
    (None for anything else: a range reader starts past the file header)."""
    header = getattr(reader, "header", None)
    if (reader.info.format != "pcap" or not isinstance(header, PcapHeader)
            or reader.unread()[1] != 0 or reader.info.packets):
        return None
    return header


def _whole_pcapng(reader: CaptureReader) -> TypeGuard[PcapngReader]:
    """Whether ``reader`` reads a whole pcapng file and is not iterated yet, and the
    built engine has the pcapng walk (a module built before it had not)."""
    return (isinstance(reader, PcapngReader) and reader.unread()[1] == 0
            and not reader.info.packets and hasattr(_engine, "walk_pcapng"))


def _pcapng_batches(reader: PcapngReader, max_records: int) -> Iterator[_engine.Batch]:
    """The frames of a whole pcapng file as C batches: the runs of packet blocks the
    C walk takes as they are, the frames the reader reads itself (blocks the walk left:
    reassembly/_pcapng_walk.c) gathered as ``frame_batches`` does.  A batch never holds
    frames from both sides of a Decryption Secrets Block: the reader marks one before
    taking it in (``PcapngReader.walked``), so the frames before it reach the layers
    before its keys do (``reassembly.engine.capture_events`` hands the keys over as it
    asks for each batch)."""
    walk_pcapng = _engine.walk_pcapng

    def walk(buf: bytes, pos: int, stop: int, big: bool, interfaces: list[Interface],
             number: int, last_ts: int) -> tuple[_engine.Batch, int]:
        return walk_pcapng(buf, pos, stop, big, interfaces, number, last_ts, max_records)

    for frames, items in groupby(reader.walked(walk), _is_frame):
        if frames:
            yield from frame_batches(cast(Iterator[Frame], items), max_records)
        else:  # runs, and the marks (None) that end a group of frames
            yield from (cast(_engine.Batch, run) for run in items if run is not None)


def _is_frame(item: object) -> bool:
    return item.__class__ is Frame


def pcap_batches(path: str | os.PathLike[str], max_records: int = BATCH_RECORDS
                 ) -> Iterator[_engine.Batch]:
    """The records of a classic pcap file (gzip/zstd too) as C batches, in order
    (``reader_batches`` over ``open_capture(path, digest=False)``).  Raises ValueError
    for a capture that is not classic pcap (``reader_batches`` takes pcapng too; the
    tests that call this one compare the walk with the classic pcap reader)."""
    with open_capture(path, digest=False) as reader:
        if reader.info.format != "pcap":
            raise ValueError(f"{reader.info.path}: not a classic pcap file")
        yield from reader_batches(reader, max_records)


def frame_batches(frames: Iterable[Frame], max_records: int = BATCH_RECORDS
                  ) -> Iterator[_engine.Batch]:
    """Frames from any reader (pcapng, a range of a file) as C batches of up to
    ``max_records``: their bytes are copied once and decoded by the same C code."""
    pending: list[Frame] = []
    for frame in frames:
        pending.append(frame)
        if len(pending) == max_records:
            yield _engine.batch_of(pending)
            pending = []
    if pending:
        yield _engine.batch_of(pending)


def range_batches(f: IO[bytes], fmt: FileFormat, start: int, stop: int, problems: list[str],
                  *, number: int = 0, state: SectionState | None = None, path: str = "",
                  max_records: int = BATCH_RECORDS) -> Iterator[_engine.Batch]:
    """The records of ``[start, stop)`` of the uncompressed capture open as ``f`` (a
    range ``analyzer.spark.split`` verified: ``start`` a record boundary, ``stop`` where
    its last record ends) as C batches: the frames ``ranges.open_range`` reads there,
    numbered from ``number + 1``.

    Classic pcap: walked by ``_engine.walk_pcap`` straight from the file's bytes (as
    ``reader_batches`` walks a whole file); should the walk stop short of ``stop`` (the
    file changed since it was verified), the range reader reads the rest, reporting its
    damage into ``problems`` as ``ranges.read_frames`` does.  pcapng: the range reader
    with its runs of packet blocks walked in C (``_pcapng_batches``, as for a whole
    file).  Why: Spark's split ingest read every frame of a range through the Python
    reader twice (passes 2 and 3)."""
    if fmt.format == "pcap":
        at, number = yield from _walk_pcap_range(f, fmt.pcap, max(start, fmt.data_start),
                                                 stop, number, max_records)
        if at == stop:
            return
        start, state = at, None
    reader = open_range(f, fmt, start, stop, number=number, state=state, path=path)
    if isinstance(reader, PcapngReader) and hasattr(_engine, "walk_pcapng"):
        yield from _pcapng_batches(reader, max_records)
        note_problems(reader, problems, stop)
    else:
        yield from frame_batches(read_frames(reader, problems, stop), max_records)


def _walk_pcap_range(f: IO[bytes], header: PcapHeader, at: int, stop: int, number: int,
                     max_records: int, starts_before: int | None = None
                     ) -> Generator[_engine.Batch, None, tuple[int, int]]:
    """``range_batches`` of a classic pcap range: yields the batches the C walk makes of
    ``[at, stop)`` (``starts_before``: of the records that start before it) and returns
    where it stopped and the number of the last frame."""
    big, rec_len = header.endian == ">", header.rec_len
    swap, mult, limit, linktype = header.swap, header.mult, header.limit, header.linktype
    before = stop if starts_before is None else starts_before
    f.seek(at)
    buf, pos = b"", 0  # ``buf`` holds the file's bytes from ``at``
    while True:
        batch = _engine.walk_pcap(buf, pos, big, rec_len, swap, mult, limit, linktype, number,
                                  max_records, before - at)
        if len(batch):
            number = batch.number
            yield batch
        pos = batch.end
        if batch.stop or at + pos >= before:  # (a caplen over the limit: the reader says)
            break
        if len(batch) == max_records:
            continue
        have = len(buf) - pos  # the start of a record the buffer does not hold whole
        want = min(stop - at - pos, max(RANGE_CHUNK, 2 * have))
        if want <= have:
            break
        if have:  # read again with what follows (cheaper than joining the buffers)
            f.seek(at + pos)
        at, buf, pos = at + pos, f.read(want), 0
        if len(buf) <= have:  # the file ended
            break
    return at + pos, number


def _pcapng_count(buf: bytes, pos: int, starts_before: int, big: bool
                  ) -> tuple[int, int, int]:
    return _engine.pcapng_count(buf, pos, starts_before, big, _PACKET_MINS, MAX_BLOCK)


def walk_range(win: Window, fmt: FileFormat, first: int, end: int) -> RangeWalk:
    """``ranges.walk_range`` (pass 1 of Spark's split ingest), a classic pcap range's
    records counted by the C walk (``_walk_pcap_range``: those starting before ``end``)
    and, from where that walk stops short (damage, the end of the file), by
    ``ranges.walk_range``, which says what it met; a pcapng range's runs of packet
    blocks counted by ``_engine.pcapng_count``, ``ranges.walk_range`` checking every
    other block; the same result.  Why: the Python walk was ~1 CPU s a GB of classic
    pcap, ~2.4 of pcapng, the largest of the passes before the dissection."""
    if not enabled():
        return ranges.walk_range(win, fmt, first, end)
    if fmt.format != "pcap":  # (pcapng: its runs of packet blocks counted in C)
        return ranges.walk_range(win, fmt, first, end, _pcapng_count)
    walk = _walk_pcap_range(win.f, fmt.pcap, max(first, fmt.data_start), win.size, 0,
                            BATCH_RECORDS, end)
    while True:
        try:
            next(walk)
        except StopIteration as done:
            at, frames = done.value
            break
    rest = ranges.walk_range(win, fmt, at, end)
    return RangeWalk(first, rest.stop, frames + rest.frames, rest.damage)


# -- the engine ------------------------------------------------------------------------


def _sync_light(conn: _Tcp, info: FlowInfo, deltas: tuple[_engine.HalfDelta, ...]) -> None:
    """What ``FlowTable.tcp`` did for the packets the C core took of a flow another
    process reassembles (``register_light``): counters and each tracker's ``last_end``."""
    for direction, delta in enumerate(deltas):
        packets, nbytes, mid, last_end = delta[0], delta[1], delta[2], delta[5]
        info.packets[direction] += packets
        if nbytes:
            info.payload_bytes[direction] += nbytes
            if mid:
                info.mid_stream[direction] = True
        half = conn.s2c if direction else conn.c2s
        assert half is not None
        half.last_end = last_end


def _half_state(half: TcpHalfStream, ack_shift: int) -> _engine.HalfState:
    """What the C core keeps of one direction (``_engine.Engine.register``)."""
    recent = half.recent
    held = recent.held if isinstance(recent, _Window) else 0
    assert half.base is not None  # a condition of registration (``_clean``)
    pieces = half.pieces
    return (half.base, half.ref_off, half.next_off, half.acked_off, half.win_edge,
            half.win_size, half.last_end, half.syn_seen, half.keep, len(recent), held,
            ack_shift, len(pieces), half.buffered, pieces[0].start if pieces else 0,
            pieces[-1].end if pieces else 0)


def _stream(conn: _Tcp, direction: int) -> TcpHalfStream:
    """A registered flow's direction: a ``TcpHalfStream`` (a condition of ``_clean``)."""
    half = conn.s2c if direction else conn.c2s
    assert isinstance(half, TcpHalfStream)
    return half


def _ack_shifts(conn: _Tcp) -> tuple[int, int]:
    """The shift ``_Tcp.window_bytes`` applies to each direction's window (no SYN)."""
    c2s, s2c = conn.c2s, conn.s2c
    if c2s is None or s2c is None or not (c2s.syn_seen and s2c.syn_seen):
        return UNKNOWN_WSCALE, UNKNOWN_WSCALE
    pair = conn.wscale
    if None in pair:
        return 0, 0
    return pair[0], pair[1]  # type: ignore[return-value]


COALESCE_MODES = ("adjacent", "flow", "none")


class NativeReassembler:
    """``Reassembler.process`` over C batches, with the common path taken by the C core.

    ``coalesce``: ``"adjacent"`` (default) yields the reference's events in the
    reference's order, a ``CoalescedData`` standing for ``StreamData`` of one flow
    direction that follow each other there; ``"none"`` yields those ``StreamData`` one
    by one; ``"flow"`` also joins the taken payloads of a flow direction that follow
    each other in *their flow's* events, among packets taken in one stretch (no frame
    of the reference in between), while the stretch's payloads fit in the memory
    budget's room: each flow's events are the reference's, in its order, each run placed
    where its last segment was, but two flows' events may interleave otherwise (what a
    consumer with no state shared across flows cannot tell apart; round-robin bulk
    traffic coalesces only so).  ``movable`` (``flow_id << 1 | direction`` keys, a set
    the caller keeps up to date; None: all): only those flow directions' runs move among
    other flows', the others' keep the reference's order among themselves.  ``reorder``:
    asked before a stretch's runs in another order than the reference's are yielded
    (``Engine.mixed``), with those runs: True takes them, False yields the stretch in
    the reference's order (``Engine.regroup``), None also for every later stretch
    (``coalesce`` becomes ``"adjacent"``)."""

    # whether the C core takes segments ahead of a hole into the reorder buffer
    # (``Engine.reorder``); False: the reference places every one (for comparisons)
    take_pieces = True
    # whether ``process`` makes a stretch's events in C (``_engine.events``); False: its
    # Python loop, the definition (for comparisons)
    compiled_events = True
    # whether ``_sync`` writes the taken flows and their effects back in C
    # (``_engine.write_back``, ``_engine.apply_effects``); False: ``_write_back`` and
    # ``_effects``, the definitions (for comparisons)
    compiled_sync = True
    # whether the record a stretch stopped at, when it is a plain ACK (the C core did not
    # take it: a short flow's third handshake ACK, its first data, its final ACK), goes to
    # the flow table as a decoded row (``_handshakes``: no ``Frame``, no Python decode)
    # rather than through ``Reassembler.step``; False: through ``step`` (for comparisons)
    lead_rows = True

    def __init__(self, limits: Limits | None = None, owns: Callable[[int], bool] | None = None,
                 coalesce: str = "adjacent", *, reference: Reassembler | None = None,
                 **options: object) -> None:
        """``options``: the reference ``Reassembler``'s keyword options; ``reference``:
        a reference made already (a Spark task's, ``analyzer.spark.task``) instead."""
        if coalesce not in COALESCE_MODES:
            raise ValueError(f"coalesce must be one of {COALESCE_MODES}, not {coalesce!r}")
        self.ref = reference if reference is not None else Reassembler(
            limits, owns, **options)  # type: ignore[arg-type]
        # the C core keeps the capture clock's rule (``CaptureClock``), or takes frames
        # whatever their time under a clock whose tick does nothing (``ticks = False``;
        # its sweeps come between frames, the caller handing those frames back:
        # ``hand_back``); under any other clock it takes nothing (``_tell_clock``)
        self._capture_clock = type(self.ref.clock) is CaptureClock
        self._tickless = getattr(self.ref.clock, "ticks", True) is False
        self.core = _engine.Engine()
        limits = self.ref.limits
        if self.take_pieces:
            # segments ahead of a hole go into the reorder buffer in C too (``_sync``)
            self.core.reorder(limits.max_buffered_bytes, limits.max_buffered_segments,
                              PIECE_OVERHEAD_BYTES, OOW_SLACK_BYTES)
        # the memory budget's charges of what the C core took, (frame, holder, bytes,
        # tier), made as the runs before them are yielded (``_hold_pieces``)
        self._piece_holds: list[tuple[int, MemoryHolder, int, int]] = []
        # the flows a sweep slept or ended, reviewed after it (``_review_after``)
        self.ref.flows.swept = []
        # a flow whose roles swap (a layer above learned them) leaves the C core: its key
        # changes
        self.ref.flows.on_roles_swapped = lambda info, key: self.core.unregister(
            *key, info.flow_id)
        self.coalesce = coalesce
        self.movable: set[int] | None = None
        self.reorder: Callable[[list[_engine.Run]], bool | None] | None = None
        self.counters = {"taken": 0, "reference": 0}
        # the ids of the flows ``register`` was given (a superset of the C core's owned
        # ones: it drops a flow under a key given to another, or whose roles swapped),
        # so an ended flow it never held needs no review (``_review_flow``); an owned
        # flow's end always emits an event that discards it, so it holds live flows only
        self._owned_ids: set[int] = set()
        self._ticks_base = 0

    # -- registration -------------------------------------------------------------------

    def _clean(self, conn: _Tcp) -> bool:
        """Whether the reference would treat the flow's next in-order ACK/data packet
        as plain bookkeeping (the C core's condition to take it).  A direction may have
        a reorder buffer: the C core knows its extent (``_half_state``) and hands back
        what would fill or flush it."""
        if not conn.owned:
            return False
        # (the halves first: a handshake's flow, reviewed after each of its packets, has
        # a tracker on one side until data flows, so this rejects it with no lookup)
        for half in (conn.c2s, conn.s2c):
            if (half.__class__ is not TcpHalfStream or half.base is None
                    or half.held or half.fin_seq_off is not None or half.alt_base is not None
                    or half.stream_id is not None):
                return False
        return self._open_alone(conn)

    def _open_alone(self, conn: _Tcp) -> bool:
        """The flow table's side of both registrations: open, not closing, the flow its
        key leads to, and no other flow under the reversed key (lookups must not mix)."""
        flows = self.ref.flows
        if (conn.closing or conn.rst or flows._tcp_keys.get(conn.key) is not conn
                or conn.info.flow_id not in flows._open):
            return False
        src, sport, dst, dport = conn.key
        return (dst, dport, src, sport) not in flows._tcp_keys

    def _light_halves(self, conn: _Tcp) -> tuple[_engine.LightHalf, _engine.LightHalf] | None:
        """What the C core keeps of a flow this table does not own (``register_light``),
        None unless its ACKs are plain bookkeeping for the reference: both directions
        ``TcpHalfTracker``s with a sequence base and no conflicting ISN pending."""
        if conn.owned or not self._open_alone(conn):
            return None
        c2s, s2c = conn.halves
        if not (isinstance(c2s, TcpHalfTracker) and isinstance(s2c, TcpHalfTracker)):
            return None
        if None in (c2s.base, s2c.base) or c2s.alt_base is not None or s2c.alt_base is not None:
            return None
        return ((c2s.last_end, c2s.syn_seen, c2s.had_data),
                (s2c.last_end, s2c.syn_seen, s2c.had_data))

    def _review(self, conn: _Tcp) -> None:
        """Register the flow with its current state when clean (or light when it is
        another process's: ``_light_halves``), else drop it."""
        src, sport, dst, dport = conn.key
        info = conn.info
        if not self._clean(conn):
            light = self._light_halves(conn)
            if light is None:
                # (an owned flow ``register`` was never given is not in the C core: a
                # handshake's, a new flow's; a light one may be)
                if not conn.owned or info.flow_id in self._owned_ids:
                    self.core.unregister(src, sport, dst, dport, info.flow_id)
                    self._owned_ids.discard(info.flow_id)
            else:
                self.core.register_light(len(src) == 16, src, sport, dst, dport, info.flow_id,
                                         conn, info, info.ts_last_ns, info.frame_last,
                                         self.ref.limits.tcp_idle_timeout_ns, *light)
            return
        shifts = _ack_shifts(conn)
        self._owned_ids.add(info.flow_id)
        self.core.register(len(src) == 16, src, sport, dst, dport, info.flow_id, conn, info,
                           info.ts_last_ns, info.frame_last, self.ref.limits.tcp_idle_timeout_ns,
                           _half_state(conn.c2s, shifts[0]),  # type: ignore[arg-type]
                           _half_state(conn.s2c, shifts[1]))  # type: ignore[arg-type]

    def _review_all(self) -> None:
        for _, conn in self.core.registered():
            self._review(conn)

    # -- sync ---------------------------------------------------------------------------

    def _sync(self, runs: list[_engine.Run]) -> None:
        """Write what the C core took into the reference's objects (module docstring)."""
        frames, v4, v6, now_ns, flows, effects = self.core.sync()
        if not frames:
            return
        ref = self.ref
        counters = ref.network.counters
        counters["frames"] += frames
        counters["ipv4"] += v4
        counters["ipv6"] += v6
        counters["l4_packets"] += frames
        if self._capture_clock:
            ref.clock.now_ns = now_ns  # type: ignore[attr-defined]
        table = ref.flows
        base = table._ticks
        table._ticks = base + frames
        self.counters["taken"] += frames
        move = table._open.move_to_end
        if _write_back is not None and self.compiled_sync:
            light = _write_back(flows, move, base)
        else:
            light = self._write_back(flows, move, base)
        for conn, info, c2s, s2c in light:
            _sync_light(conn, info, (c2s, s2c))
        if effects:  # (before the windows slide: a drain forgets its direction's)
            if _apply_effects is not None and self.compiled_sync:
                _apply_effects(effects, self._piece_holds, _Window, _Piece, TIER_BUFFERS,
                               TIER_WINDOWS)
            else:
                self._effects(effects)
        if runs:
            if _slide is not None:  # (``_slide_windows`` in C)
                _slide(runs, _Window)
            else:
                self._slide_windows(runs)

    @staticmethod
    def _write_back(flows: list[_engine.SyncFlow], move: Callable[[int], None], base: int
                    ) -> list[tuple[_Tcp, FlowInfo, _engine.HalfDelta, _engine.HalfDelta]]:
        """What ``FlowTable.tcp`` did for the packets the C core took, per flow of
        ``Engine.sync`` in its order: the flow's time and frame, its place among the open
        flows (``move``: their ``move_to_end``) and tick (``base`` + its ordinal), and
        each direction's counters and ``TcpHalfStream`` fields; returns the flows this
        table does not own (``_sync_light`` is theirs).  ``_engine.write_back`` does this
        in C (``_sync``; this stays its definition, ``tests/perf/test_engine_native.py``
        compares them)."""
        light = []
        for conn, info, ts_last, frame_last, ordinal, c2s, s2c in flows:
            info.ts_last_ns = ts_last
            info.frame_last = frame_last
            move(info.flow_id)
            conn.tick = base + ordinal
            if not conn.owned:
                light.append((conn, info, c2s, s2c))
                continue
            for direction, (packets, nbytes, mid, next_off, ref_off, last_end, acked, edge,
                            wsize, _rlen, buffered, drained) in enumerate((c2s, s2c)):
                # (``_stream`` written out: this is per flow and sync)
                half: TcpHalfStream = conn.s2c if direction else conn.c2s  # type: ignore[assignment]
                info.packets[direction] += packets
                if nbytes or buffered or drained:
                    info.payload_bytes[direction] += nbytes + buffered
                    info.stream_bytes[direction] += nbytes + drained
                    half.next_off = next_off
                    half.ref_off = ref_off
                    half.started = half.had_data = True
                    if mid:
                        info.mid_stream[direction] = True
                half.last_end = last_end
                half.acked_off = acked
                half.win_edge = edge
                half.win_size = wsize
        return light

    def _effects(self, effects: list[_engine.Effect]) -> None:
        """What the C core did to buffers and windows, into the reference's objects in
        its order: an overlap-check window grew (``_hold_window``), a segment went into a
        reorder buffer (``TcpHalfStream._insert`` appending it: none overlaps or precedes
        the last), a buffer was drained (``_flush_hole``: a gap of ``held`` bytes, the
        window forgotten, every piece delivered; the gap and the pieces are among the
        runs) and its charge given back.  The budget's charges wait for
        ``_hold_pieces`` (the C core took them only while the budget had room: no
        reclaim can have happened).  ``_engine.apply_effects`` does this in C (``_sync``;
        this stays its definition, ``tests/perf/test_engine_native.py`` compares them)."""
        later = self._piece_holds
        for kind, conn, direction, offset, data, ts, frame, held in effects:
            half = _stream(conn, direction)
            if kind == _FX_PIECE:
                assert data is not None
                buf, starts = half.pieces, half.starts
                if not buf or not starts:  # (both or neither, as in ``_insert``)
                    buf, starts = half.pieces, half.starts = [], []
                buf.append(_Piece(offset, data, ts, frame))
                starts.append(offset)
                half.buffered += len(data)
                later.append((frame, half, held, TIER_BUFFERS))
            elif kind == _FX_WINDOW:
                window = half.recent
                if not isinstance(window, _Window):  # the first bytes, or the first after a gap
                    window = half.recent = _Window()
                    window.half = half
                window.held = held
                later.append((frame, window, held, TIER_WINDOWS))
            elif kind == _FX_DRAIN:
                conn.info.gap_bytes[direction] += held
                window = half.recent
                if isinstance(window, _Window):  # (``forget_recent``)
                    half.recent = b""
                    later.append((frame, window, 0, TIER_WINDOWS))
                del half.pieces[:], half.starts[:]
                half.buffered = 0
            else:  # _FX_RELEASE
                later.append((frame, half, 0, TIER_BUFFERS))

    def _hold_pieces(self, before: int | None) -> None:
        """The budget charges of what the C core took (``_effects``), as the reference
        made them, for the packets up to frame ``before`` (None: all): made as the runs
        of a stretch are yielded, each before the first run that ends past its packet,
        so the budget's holders (the consumer's among them) stand in the reference's
        order."""
        holds = self._piece_holds
        if not holds:  # (after every stretch; a stretch of segments that grew no window)
            return
        budget = self.ref.limits.budget
        n = 0
        for frame, holder, held, tier in holds:
            if before is not None and frame > before:
                break
            n += 1
            if budget is not None:
                budget.hold(holder, held, tier)
        del holds[:n]

    @staticmethod
    def _slide_windows(runs: list[_engine.Run]) -> None:
        """Each direction's overlap-check window ends with the bytes delivered: once per
        direction and sync (the reference slides it a segment at a time; the bytes kept
        are the same).  ``_engine.slide`` does this in C (``_sync``; this stays its
        definition, ``tests/perf/test_engine_native.py`` compares them)."""
        # the runs' bytes per flow direction (by the flow's ``_Tcp``, hashed by identity,
        # and the direction: no lookup of the direction's state per run)
        # (a gap, data None, forgot the window: only the bytes after it count)
        taken: dict[tuple[_Tcp, int], list[bytes]] = {}
        for _info, conn, direction, _off, data, _segs in runs:
            key = (conn, direction)
            parts = taken.get(key)
            if parts is None or data is None:
                taken[key] = [] if data is None else [data]
            else:
                parts.append(data)
        for (conn, direction), parts in taken.items():
            # (``_stream`` written out: a registered flow's direction is a TcpHalfStream)
            half: TcpHalfStream = conn.s2c if direction else conn.c2s  # type: ignore[assignment]
            keep = half.keep
            if not keep or not parts:
                continue
            recent = half.recent
            if not isinstance(recent, _Window):  # the first bytes, or the first after a gap
                recent = half.recent = _Window()
                recent.half, recent.held = half, 0
            if len(parts) == 1:
                new = parts[0]
            else:  # only the parts that reach into the last ``keep`` bytes are joined
                size, first = 0, len(parts)
                while first and size < keep:
                    first -= 1
                    size += len(parts[first])
                new = b"".join(parts[first:])
            if len(new) >= keep:
                recent[:] = memoryview(new)[len(new) - keep:]  # (no slice copy first)
            else:
                excess = len(recent) + len(new) - keep
                if excess > 0:
                    del recent[:excess]
                recent += new

    # -- frames the reference handles -------------------------------------------------

    def _reference_frame(self, frame: Frame) -> None:
        """One frame through the reference (``Reassembler.step``), then the flows it
        may have changed are reviewed."""
        ref = self.ref
        first = len(ref.pending)
        clock = ref.clock
        now = None
        if self._capture_clock or self._tickless:
            now = clock.now_ns  # type: ignore[attr-defined]
        pkt = ref.step(frame)
        self.counters["reference"] += 1
        if pkt is not None and pkt.proto == TCP and len(pkt.payload) >= 4:
            self._review_after(first, now, pkt.src, pkt.dst, pkt.payload)
        else:
            self._review_after(first, now)
        self._tell_clock()

    def _handshakes(self, rows: list[_engine.Handshake]) -> Iterator[None]:
        """``_reference_frame`` for records the C core decoded but never takes
        (``Engine.handshakes``: a SYN flood's, a scan's, many short connections'
        handshakes and closes): each goes to the flow table as ``Reassembler.step``
        would pass it, without a ``Frame``, the Python decode or a hand-back to the C
        core per record; pauses (yields) after a record that emitted events, the C core
        told the clock first, as after a frame ``_reference_frame`` handled.  The
        counters are added before each pause and at the end (no one reads them between:
        a per-row dict update was a fifth of this loop's bytecodes)."""
        ref = self.ref
        out, tcp = ref.pending, ref.flows.tcp
        clock = ref.clock
        timed = self._capture_clock or self._tickless  # (handshakes come under these only)
        told = True
        n = v4 = 0  # rows fed and IPv4 ones among them, not yet counted
        for src, dst, transport, ts_ns, number, vlans in rows:
            first = len(out)
            now = clock.now_ns if timed else None  # type: ignore[attr-defined]
            n += 1
            if len(src) == 4:
                v4 += 1
            tcp(src, dst, transport, ts_ns, number, vlans, 0)
            clock.tick(ref, ts_ns)
            self._review_after(first, now, src, dst, transport)
            told = False
            if len(out) > first:
                self._count_rows(n, v4)
                n = v4 = 0
                self._tell_clock()
                told = True
                yield
        if n:
            self._count_rows(n, v4)
        if not told:
            self._tell_clock()

    def _count_rows(self, n: int, v4: int) -> None:
        """What ``NetworkDecoder.decode`` counts for ``n`` frames the C walk decoded
        (``v4`` of them IPv4), and this engine's count of frames the reference handled."""
        counters = self.ref.network.counters
        counters["frames"] += n
        counters["ipv4"] += v4
        counters["ipv6"] += n - v4
        counters["l4_packets"] += n
        self.counters["reference"] += n

    def _review_after(self, first: int, now: int | None,
                      src: bytes | None = None, dst: bytes = b"", transport: bytes = b""
                      ) -> None:
        """After the reference handled a frame: the flows it may have changed are
        reviewed: all of them after a restamp or under a clock the C core does not
        follow (``now``: the clock's time before it; None: such a clock),
        else the flows a sweep slept or ended (``FlowTable.swept``: an ended flow another
        process dissects, or one put to sleep, emits no event), those named by its
        events (from ``first`` in the pending list) and the TCP flow of its packet
        (``src``, ``dst`` and its ``transport`` header, if any).  Why not every flow
        after a sweep, as before: a sweep comes every second of capture time, so a
        capture with thousands of open connections and a handshake now and then
        reviewed all of them every second (5,000 open connections and 600 short ones
        over 600 s took 7.4 s, the same packets over 60 s 2.8 s)."""
        ref = self.ref
        clock = ref.clock
        swept = ref.flows.swept
        if now is None or (clock.now_ns and not now):  # type: ignore[attr-defined]
            self._review_all()  # a restamp may change any flow
        else:
            if swept:
                for gone in swept:
                    self._review(gone)
            out = ref.pending
            if len(out) > first:
                seen = set()
                for event in out[first:]:
                    flow = getattr(event, "flow", None)
                    if flow is not None and flow.flow_id not in seen:
                        seen.add(flow.flow_id)
                        self._review_flow(flow)
        if swept:
            swept.clear()
        if src is not None:
            # the flow the packet touched (a new flow's SYN: none in ``_tcp_keys``, as
            # it is held young, ``reassembly.flows``)
            sport, dport = _unpack_ports(transport)
            keys = ref.flows._tcp_keys
            conn = keys.get((src, sport, dst, dport)) or keys.get((dst, dport, src, sport))
            if conn is not None:
                self._review(conn)

    def _tell_clock(self) -> None:
        """The reference's clock and link type, for the C core's tick rule."""
        clock, lt_cur = self.ref.clock, self.ref.network._lt_cur
        if self._capture_clock:
            self.core.clock(clock.now_ns, clock.last_sweep_ns, SECOND_NS, lt_cur,  # type: ignore[attr-defined]
                            self._headroom())
        elif self._tickless:  # no frame's tick is special: 1 ns, no sweep until 2**63 - 1
            self.core.clock(1, 0, _NEVER, lt_cur, self._headroom())
        else:
            self.hand_back()

    def hand_back(self) -> None:
        """The C core takes nothing until the reference handled a frame (whose
        ``_tell_clock`` lets it take again): for a caller that knows the first frame of
        the next batch must go to the reference (a Spark task's schedule).  ``process``
        asks for a batch once the previous one is all taken or handled."""
        self.core.clock(0, None, SECOND_NS, None, 0)

    def _headroom(self) -> int:
        """What the run's memory budget can still grant before it reclaims anything."""
        budget = self.ref.limits.budget
        return 1 << 62 if budget is None else budget.limit_bytes - budget.used
    def _review_flow(self, info: FlowInfo) -> None:
        """Review the TCP flow an event named (a close, an eviction, a budget anomaly)."""
        if info.transport != Transport.TCP or (
                info.close_reason and info.flow_id not in self._owned_ids):
            # an ended flow the C core does not hold: one evicted or closed young (a SYN
            # flood's), or one never clean; no key to rebuild from its text, no lookup
            return
        key = (_packed(info.client.ip), info.client.port, _packed(info.server.ip),
               info.server.port)
        conn = self.ref.flows._tcp_keys.get(key)
        if conn is not None and conn.info is info:
            self._review(conn)
        else:
            self.core.unregister(*key, info.flow_id)
            self._owned_ids.discard(info.flow_id)

    # -- driving ------------------------------------------------------------------------

    def _emit(self, runs: list[_engine.Run]) -> Iterator[Event | CoalescedData]:
        """The events of a stretch's runs, each ``CoalescedData`` split when the caller
        takes ``StreamData`` only (``coalesce="none"``; ``_stretch_loop`` has this loop written
        out for the others, and ``_engine.events`` in C)."""
        split = self.coalesce == "none"
        pending = self._piece_holds
        for info, _conn, direction, offset, data, segs in runs:
            if pending:
                self._hold_pieces(_last_frame(segs))
            if data is None:
                yield _gap(info, direction, offset, segs)
                continue
            if len(segs) == _ONE_SEGMENT:
                _, ts, frame = _unpack_segment(segs)
                yield _stream_data(info, DIRECTIONS[direction], offset, data, ts, ts, frame, frame)
                continue
            chunk = CoalescedData(info, DIRECTIONS[direction], offset, data, segs)
            if split:
                yield from chunk.split()
            else:
                yield chunk

    def _hand_over(self, batch: _engine.Batch, i: int
                   ) -> Generator[Event | CoalescedData, None, int]:
        """The records from ``i`` that the reference handles: a run of handshakes
        (``_handshakes``, the record at ``i`` whatever its flags: ``lead_rows``) or one
        frame; yields their events (a record's as ``_reference_frame``'s: joined by
        ``_frame_events``), returns the next index."""
        rows = self.core.handshakes(batch, i, self.lead_rows)
        out = self.ref.pending
        if rows:  # records only the reference handles, decoded already
            for _ in self._handshakes(rows):
                yield from self._frame_events()
            return i + len(rows)
        self._reference_frame(Frame(*batch.frame(i)))
        if out:
            yield from self._frame_events()
        return i + 1

    def _frame_events(self) -> Iterator[Event | CoalescedData]:
        """The events the reference made of a frame (taken from its pending list),
        ``StreamData`` that follow each other joined (``_joined``) unless the caller
        takes them one by one (``coalesce="none"``)."""
        out = self.ref.pending
        yield from out if self.coalesce == "none" or len(out) < 2 else _joined(out)
        out.clear()

    def events(self, batches: Iterable[_engine.Batch]) -> Iterator[Event]:
        """``process`` with every ``CoalescedData`` split into the reference's
        ``StreamData`` (what consumers of ``reassembly.events`` take)."""
        for event in self.process(batches):
            if isinstance(event, CoalescedData):
                yield from event.split()
            else:
                yield event

    def _stretch(self, runs: list[_engine.Run], per_flow: bool
                 ) -> Iterable[Event | CoalescedData]:
        """The events of a stretch's runs, each budget charge the C core took made before
        the first event that ends past its packet (``_hold_pieces``): the list
        ``_engine.events`` made when no charge comes among them (the usual case: the
        caller's ``yield from`` walks it with no generator of this method in between),
        else a generator (``_cut``; ``_stretch_loop`` without the C one)."""
        if self.coalesce == "none":
            return self._emit(runs)
        # (a run of one segment as ``StreamData`` unless the runs are joined per flow with
        # movable flow directions, those the layers pass: a layer says it passes one when a
        # run of it comes, ``reassembly.passing``)
        single = not per_flow or self.movable is None
        if _events is None or not self.compiled_events:
            return self._stretch_loop(runs, single)
        # the loop of ``_stretch_loop`` in C: the events at once, and where the charges
        # come among them
        events, cuts = _events(runs, single, self._piece_holds, _stream_data, _chunk,
                               _stream_gap, DIRECTIONS)
        if cuts and not cuts[0][0]:  # (due before the first event: now, as a generator would)
            self._hold_pieces(cuts[0][1])
            del cuts[0]
        return self._cut(events, cuts) if cuts else events

    def _cut(self, events: list[Event | CoalescedData], cuts: list[tuple[int, int]]
             ) -> Iterator[Event | CoalescedData]:
        """``events`` with the charges due by each cut's frame made at its index."""
        start = 0
        for at, frame in cuts:
            yield from events[start:at]
            self._hold_pieces(frame)
            start = at
        yield from events[start:]

    def _stretch_loop(self, runs: list[_engine.Run], single: bool
                      ) -> Iterator[Event | CoalescedData]:
        """``_stretch``'s events made in Python (the definition of ``_engine.events``)."""
        pending = self._piece_holds
        for info, _conn, direction, offset, data, segs in runs:  # (``_emit``, not split)
            if single and data is not None and len(segs) == _ONE_SEGMENT:
                _, ts, frame = _unpack_segment(segs)
                # (``_hold_pieces`` only when a charge is due by this frame)
                if pending and pending[0][0] <= frame:
                    self._hold_pieces(frame)
                yield _stream_data(info, DIRECTIONS[direction], offset, data, ts, ts, frame,
                                   frame)
                continue
            if pending:
                self._hold_pieces(_last_frame(segs))
            if data is None:
                yield _gap(info, direction, offset, segs)
            else:
                yield CoalescedData(info, DIRECTIONS[direction], offset, data, segs)

    def process(self, batches: Iterable[_engine.Batch]) -> Iterator[Event | CoalescedData]:
        """The events of the batches' records, then the end-of-capture flush."""
        core = self.core
        for batch in batches:
            n = len(batch)
            i = 0
            while i < n:
                per_flow = self.coalesce == "flow"
                if per_flow:  # the room the stretch's payloads must fit in, as of now
                    core.headroom(self._headroom())
                i, runs = core.run(batch, i, per_flow, self.movable)
                self._sync(runs)
                if per_flow and core.mixed and self.reorder is not None:
                    verdict = self.reorder(runs)
                    if not verdict:
                        runs = core.regroup()
                        if verdict is None:
                            self.coalesce = "adjacent"
                yield from self._stretch(runs, per_flow)
                self._hold_pieces(None)
                if i < n:
                    i = yield from self._hand_over(batch, i)
        self._sync([])
        self._hold_pieces(None)
        yield from self.ref.finish()


def _last_frame(segments: bytes) -> int:
    """The frame of a run's last segment (``SEGMENT``), or of a gap's ACK."""
    return cast(int, _unpack_segment_from(segments, len(segments) - _ONE_SEGMENT)[2])


def _gap(info: FlowInfo, direction: int, offset: int, packed: bytes) -> StreamGap:
    """The ``StreamGap`` of a gap run, ``packed`` its size, time and frame as one
    ``SEGMENT`` (the C core took the ACK that proved a hole: ``TcpHalfStream._flush_hole``,
    reason ``acked-unseen``)."""
    nbytes, ts, frame = _unpack_segment(packed)
    return StreamGap(info, DIRECTIONS[direction], offset, nbytes, ts, frame, "acked-unseen")


def _joined(events: list[Event]) -> Iterator[Event | CoalescedData]:
    """``events`` (a frame's, from the reference) with each stretch of ``StreamData`` of
    one TCP flow direction that follow each other, offsets adjoining, one packet each,
    as one ``CoalescedData`` (what ``split`` gives back).  Why: when an ACK proves a
    capture's hole, the reference delivers the segments buffered behind it one event
    each (~7 a hole on a bulk recording with drops); the conveyor takes a run whole.
    (The list is read as it stands at each step: an event a consumer's call adds while
    this generator is paused is yielded too, as a plain ``yield from`` would.)"""
    i = 0
    while i < len(events):
        ev = events[i]
        i += 1
        if ev.__class__ is not StreamData or ev.stream_id is not None:
            yield ev
            continue
        flow, direction = ev.flow, ev.direction
        end = ev.offset + len(ev.data)
        j = i
        while j < len(events):
            nxt = events[j]
            if (nxt.__class__ is not StreamData or nxt.flow is not flow
                    or nxt.direction is not direction or nxt.offset != end
                    or nxt.stream_id is not None):
                break
            end += len(nxt.data)
            j += 1
        if j == i or not _one_packet(events, i - 1, j):
            yield ev
            continue
        parts = cast(list[StreamData], events[i - 1:j])
        yield CoalescedData(flow, direction, ev.offset, b"".join([p.data for p in parts]),
                            b"".join([_pack_segment(p.offset + len(p.data), p.ts_first_ns,
                                                    p.frame_first) for p in parts]))
        i = j


def _one_packet(events: list[Event], start: int, stop: int) -> bool:
    """Whether each ``StreamData`` of ``events[start:stop]`` came in one packet (what a
    ``CoalescedData`` segment records) and carries bytes."""
    for k in range(start, stop):
        ev = cast(StreamData, events[k])
        if ev.ts_first_ns != ev.ts_last_ns or ev.frame_first != ev.frame_last or not ev.data:
            return False
    return True


def enabled() -> bool:
    """Whether ``capture_events`` uses the engine: built, and not switched off by
    ``MSGCAP_NATIVE_ENGINE=0``."""
    return AVAILABLE and os.environ.get(ENV_SWITCH, "1") != "0"


def engine_for(reader: CaptureReader, limits: Limits | None,
               owns: Callable[[int], bool] | None, server_ports: Collection[int],
               coalesce: str = "none") -> NativeReassembler | None:
    """The engine for the capture ``reader`` is open on (not iterated yet), with the
    reference ``Reassembler``'s options; None when the reference must run alone: the
    engine is off (``enabled``), or the capture is not a whole classic pcap or pcapng
    file (a range of one, a cut pcap file header).  ``coalesce``: as for
    ``NativeReassembler`` (``"none"`` for a consumer of ``StreamData`` only)."""
    if not enabled() or (_whole_pcap(reader) is None and not _whole_pcapng(reader)):
        return None
    return NativeReassembler(limits, owns, coalesce=coalesce, server_ports=server_ports)


def _packed(ip: str) -> bytes:
    """An address's bytes from its text (``Endpoint.ip``): ``inet_pton``, ~10x faster
    than ``ipaddress`` and needing no cache (a SYN flood names a new address per flow, so
    a bounded cache was cleared before it helped)."""
    return socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)

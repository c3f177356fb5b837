"""Provenance of stream bytes, and the one byte buffer that keeps it.

Why this module: a unit cut out of a byte stream (a NATS line, a Pulsar frame, a TLS
record) must say where it came from: its stream offsets and the first and last packet
(capture time, frame number) that carried its bytes.  The framer
(``dissectors.framing``), the TLS record layer (``reassembly.tls``) and the WebSocket
layer each kept a byte buffer of their own that remembered this per fed chunk, with
three bookkeepings that drifted apart.  This module is the one bookkeeping, on the
lower floor (``reassembly``) so the layers can use it without importing ``dissectors``.

* ``Span``: where a fed chunk starts and which packets carried it (what
  ``Session.feed`` gets; re-exported by ``dissectors.api``).
* ``Extent``: where a unit is, ``[start, end)``, with the time and frame of the packet
  that carried its first byte and of the one that carried its last byte.  It has the
  attributes of ``dissectors.api.Provenance``, so it can go to ``record_from``.
* ``ProvenanceBuffer``: the bytes of one stream direction fed but not yet resolved, and
  per fed chunk its packets.  When the pipeline merged several packets into one chunk
  the per-byte packet is unknown: the chunk's first/last values then bracket it.  A
  feed of several packets' bytes that knows where each packet's bytes end
  (``CoalescedData.chunks``) hands the buffer one chunk record per packet, so nothing
  is bracketed.
* ``CoalescedData``: in-order bytes of several TCP segments of one flow direction with
  the time and frame of each (what the native engine, ``reassembly.native``, hands on
  instead of one ``StreamData`` per segment).  It lives here, not in ``native``, because
  the layers (``reassembly.tls``, ``reassembly.websocket``) pass it on and
  ``reassembly.native`` imports them through ``reassembly.engine``.

Cost model (the framer is on the NATS hot path): bytes live in one ``bytearray`` with a
read index; the resolved prefix is dropped at the next ``feed`` (CPython deletes a
bytearray's front in O(1) amortised), so a unit costs one slice, not a buffer copy.
Chunk records are plain 5-tuples in a deque, looked up front to back and forgotten once
wholly resolved, so a lookup is amortised O(1); bytes held that all came in one chunk
(the usual case) need no deque at all (``ProvenanceBuffer``).  The attributes ``data``, ``pos``,
``base`` and ``chunks`` are public on purpose: a compiled scanner parses in place from
them (``dissectors.framing.LineFramer.scan_view``, ``dissectors/nats/_speedups.c``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, cast

from reassembly.events import Direction, FlowInfo, StreamData

__all__ = ["Chunk", "CoalescedData", "Extent", "ProvenanceBuffer", "Span", "SpanLike"]

Chunk = tuple[int, int, int, int, int]
"""One fed chunk as the buffer remembers it: ``(end, ts_first_ns, ts_last_ns,
frame_first, frame_last)``, ``end`` its exclusive stream offset.  A plain tuple in this
order is a contract: the NATS scanner (``_speedups.c``) reads it as five integers."""

_NO_CHUNK: Chunk = (0, 0, 0, 0, 0)
# ``ProvenanceBuffer.chunks`` until it first holds a record: empty, and never written to
# (the buffer makes its own deque then, ``_deque``); typed as the deque it stands for
_NO_CHUNKS = cast("deque[Chunk]", ())
_tuple_new = tuple.__new__


class Span(NamedTuple):
    """Provenance of a chunk of stream bytes handed to ``Session.feed``."""

    offset: int  # stream offset of data[0] in this direction
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class SpanLike(Protocol):
    """What ``ProvenanceBuffer.feed`` reads of a chunk's provenance: a ``Span``, or a
    TCP ``reassembly.events.StreamData`` as it is (no copy made per chunk)."""

    @property
    def offset(self) -> int: ...
    @property
    def ts_first_ns(self) -> int: ...
    @property
    def ts_last_ns(self) -> int: ...
    @property
    def frame_first(self) -> int: ...
    @property
    def frame_last(self) -> int: ...


class Extent(NamedTuple):
    """Stream bytes ``[start, end)`` and the packets that carried them: times and frames
    of the packet holding the first byte (``*_first``) and the last byte (``*_last``)."""

    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int

    def through(self, last: Extent) -> Extent:
        """From this extent's first byte through ``last``'s last byte (a unit read in
        pieces: its first piece, then its last)."""
        return _tuple_new(Extent, (self[0], last[1], self[2], last[3], self[4], last[5]))

    @staticmethod
    def of(start: int, end: int, first: Chunk, last: Chunk) -> Extent:
        """``[start, end)`` whose first byte came in chunk ``first``, its last in ``last``."""
        return _tuple_new(Extent, (start, end, first[1], last[2], first[3], last[4]))


class ProvenanceBuffer:
    """The bytes of one stream direction fed but not yet resolved, with their packets.

    ``data[pos:]`` is unresolved; ``base`` is the stream offset of ``data[0]``;
    ``last`` is the most recent fed chunk (see ``Chunk``; it outlives ``clear``: the
    provenance of an offset past everything held), ``chunks`` the fed chunks not yet
    forgotten, ``last`` among them, when the bytes held came in more than one; empty
    when they all came in ``last`` (or none are held).  Why: the usual feed, one
    packet's bytes into a buffer whose units were all resolved, then costs no deque
    work at all, nor does asking for its chunk (``chunks or (last,)`` is the list in
    either case).  ``started`` is False until a ``feed`` or ``reset`` says where the stream is
    (a buffer made with ``base=None``: the first feed's offset is taken).  Feeds must
    be contiguous; a caller that skips bytes says so with ``reset``.
    """

    __slots__ = ("data", "pos", "base", "chunks", "last", "started")

    def __init__(self, base: int | None = None) -> None:
        self.data = bytearray()
        self.pos = 0
        self.started = base is not None
        self.base = base or 0
        # (made when first needed: an empty deque is 760 bytes, and most buffers, one
        # a direction of every flow for its whole life, never hold two packets' bytes)
        self.chunks: deque[Chunk] = _NO_CHUNKS
        self.last: Chunk = _NO_CHUNK

    def _deque(self) -> deque[Chunk]:
        """``chunks`` as a deque, made now if it is not one yet."""
        ch = self.chunks
        if ch is _NO_CHUNKS:
            ch = self.chunks = deque()
        return ch

    # ---- where things are ------------------------------------------------------------

    @property
    def held(self) -> int:
        """Unresolved bytes held (what the run's memory budget is told about)."""
        return len(self.data) - self.pos

    @property
    def offset(self) -> int:
        """Stream offset of the read position (the next unresolved byte)."""
        return self.base + self.pos

    @property
    def end(self) -> int | None:
        """Stream offset the next ``feed`` must start at (None before the first one)."""
        return self.base + len(self.data) if self.started else None

    # ---- input -----------------------------------------------------------------------

    def feed(self, data: bytes, span: SpanLike, chunks: Sequence[Chunk] | None = None) -> int:
        """Append ``data`` (it starts at ``span.offset``), first dropping the resolved
        prefix.  Returns how many resolved bytes were dropped (the caller's own
        buffer-relative positions move back by that much).  A feed that does not start
        where the bytes held end is a caller bug: ``ValueError``.

        ``chunks``: the bytes of several packets at once, with one record per packet
        (``Chunk``s in stream order, the last one ending where ``data`` ends: what
        ``CoalescedData.chunks`` gives), taken as they are; the buffer then holds what
        one ``feed`` per packet would have left in it.  None: one record from ``span``."""
        if self.started and span.offset != self.base + len(self.data):
            raise ValueError(f"non-contiguous feed at {span.offset}, expected "
                             f"{self.base + len(self.data)} (announce missing bytes with a gap)")
        return self.append(data, span, chunks)

    def append(self, data: bytes, span: SpanLike, chunks: Sequence[Chunk] | None = None) -> int:
        """``feed`` for a caller that checked already that ``span.offset`` is where the
        bytes held end (``end``; the framer does, with its own message): the same, without
        checking it again on the hot path."""
        buf = self.data
        pos = self.pos
        if pos:  # (bytes were fed: the buffer has started)
            self.compact()
        elif not self.started:
            self.base = span.offset
            self.started = True
        end = span.offset + len(data)  # (where the bytes held end: the contract)
        if chunks is None:
            chunk = (end, span.ts_first_ns, span.ts_last_ns, span.frame_first, span.frame_last)
            ch = self.chunks
            if ch:
                ch.append(chunk)
            elif buf:  # (bytes held that came in ``last``: two records now)
                self._deque().extend((self.last, chunk))
        else:
            chunk = chunks[-1]
            if chunk[0] != end:
                raise ValueError(f"the chunk records end at {chunk[0]}, the bytes at {end}")
            ch = self.chunks
            if ch or buf or len(chunks) > 1:  # (else one record: it is ``last``)
                if not ch:
                    ch = self._deque()
                    if buf:
                        ch.append(self.last)
                ch.extend(chunks)
        buf += data
        self.last = chunk
        return pos

    def passed(self, nbytes: int, last: Chunk) -> None:
        """The next ``nbytes`` of the stream were resolved straight from the caller's
        bytes, never fed here (``LineFramer.took``: the compiled NATS scan read a whole
        segment), with nothing held before them; ``last`` is the record of their last
        packet.  The buffer then answers as after ``append`` of them and a read position
        at their end: empty at the offset where they end, ``last`` the provenance of what
        comes next.  (Here, not in the framer: the one-chunk rule of ``chunks`` is this
        class's to keep.)"""
        pos = self.pos
        if pos:  # (the resolved bytes of the feed before: ``append`` would drop them)
            del self.data[:pos]
            self.pos = 0
        self.base += pos + nbytes
        if self.chunks:
            self.chunks.clear()
        self.last = last

    def compact(self) -> int:
        """Drop the resolved prefix now (``feed`` does it anyway), and the chunks wholly
        inside it; returns its length."""
        pos = self.pos
        if pos:
            del self.data[:pos]
            self.base = base = self.base + pos
            self.pos = 0
            if self.chunks:
                self._forget(base)
        return pos

    def _forget(self, offset: int) -> None:
        """Forget the chunks that end at or before ``offset`` (``chunk_at``'s rule; the
        latest stays ``last``).  Chunk ends only grow, so when the one before the last
        ends there too all go at once (a scanner that consumed every whole unit of a run
        of packets: the usual case), leaving the held bytes to ``last``."""
        ch = self.chunks
        if len(ch) > 1 and ch[0][0] <= offset:
            if ch[-2][0] <= offset:
                ch.clear()
            else:
                popleft = ch.popleft
                popleft()
                while ch[0][0] <= offset:  # (stops before the last: ch[-2] ends later)
                    popleft()

    def clear(self) -> None:
        """Give up everything held (its bytes count as resolved): the buffer is empty at
        the offset where the held bytes ended.  ``last`` is kept."""
        self.base += len(self.data)
        self.data = bytearray()
        self.pos = 0
        if self.chunks:
            self.chunks.clear()

    def reset(self, offset: int) -> None:
        """Empty, with the next ``feed`` expected at ``offset`` (after bytes that were
        never captured, or that the caller skips without buffering)."""
        self.clear()
        self.base = offset
        self.started = True

    # ---- output ----------------------------------------------------------------------

    def chunk_at(self, offset: int) -> Chunk:
        """The chunk holding stream ``offset``, or the latest one when ``offset`` is past
        everything fed.  Chunks wholly before ``offset`` are forgotten: ask in order."""
        ch = self.chunks
        if ch and ch[0][0] <= offset:  # (none: the held bytes came in ``last``)
            self._forget(offset)
        return ch[0] if ch else self.last

    def extent(self, start: int, end: int) -> Extent:
        """Provenance of the stream bytes ``[start, end)`` (an empty range: that of the
        byte at ``start``)."""
        # (``chunk_at`` written out: this runs once per unit)
        ch = self.chunks
        if not ch:
            c1 = c2 = self.last
        else:
            c1 = ch[0]
            while c1[0] <= start and len(ch) > 1:
                ch.popleft()
                c1 = ch[0]
            c2 = c1
            while c2[0] < end and len(ch) > 1:
                ch.popleft()
                c2 = ch[0]
        return _tuple_new(Extent, (start, end, c1[1], c2[2], c1[3], c2[4]))

    def take(self, n: int) -> tuple[bytes, Extent]:
        """The next ``n`` unresolved bytes (fewer if fewer are held) and their
        provenance; they are resolved."""
        pos = self.pos
        data = bytes(self.data[pos : pos + n])
        return data, self.skip(len(data))

    def skip(self, n: int) -> Extent:
        """Resolve the next ``n`` held bytes (fewer if fewer are held) without copying
        them; returns their provenance."""
        pos = self.pos
        avail = len(self.data) - pos
        if n > avail:
            n = avail
        self.pos = pos + n
        start = self.base + pos
        return self.extent(start, start + n)

    def discard_to(self, offset: int) -> int:
        """Resolve every held byte before stream ``offset`` (none if it is behind the read
        position, all if past the end); returns how many were resolved."""
        pos = self.pos
        n = min(max(offset - self.base - pos, 0), len(self.data) - pos)
        self.pos = pos + n
        return n


# -- coalesced segments -----------------------------------------------------------------

SEGMENT = struct.Struct("=qqq")
"""One segment of a ``CoalescedData`` segment table: its end offset, time and frame
(the layout the C core, ``reassembly/_engine.c``, writes)."""


@dataclass(slots=True)
class CoalescedData:
    """In-order bytes of one flow direction that the reference reassembler would have
    delivered as one ``StreamData`` per segment, back to back in its event order (the
    native engine's output, ``reassembly.native``).  ``segments`` packs, per segment,
    its end offset, time and frame (``SEGMENT``).  A value: nobody changes one once
    made (not ``frozen`` only because a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, ~4x the cost, and one is made per run of segments).

    A consumer takes it whole (``chunks``: one provenance record per segment, for a
    ``ProvenanceBuffer``) or as the reference's events (``split``); a layer that does not
    own the flow passes it on as it is."""

    flow: FlowInfo
    direction: Direction
    offset: int
    data: bytes
    segments: bytes

    def split(self) -> list[StreamData]:
        """The reference's events for these bytes, one per segment."""
        out = []
        start, data, base = self.offset, self.data, self.offset
        for end, ts, frame in SEGMENT.iter_unpack(self.segments):
            out.append(StreamData(self.flow, self.direction, start,
                                  data[start - base:end - base], ts, ts, frame, frame))
            start = end
        return out

    def chunks(self) -> list[Chunk]:
        """The segments as ``ProvenanceBuffer`` chunk records: ``(end, ts, ts, frame,
        frame)`` each (what feeding the segments' ``StreamData`` one by one records)."""
        # (not the table's columns as strided memoryviews zipped in C: no bytecode per
        # segment, but callgrind counts ~11,000 instructions for a run of one segment
        # against ~3,400 for this, and more up to ~30 segments a run)
        return [(end, ts, ts, frame, frame)
                for end, ts, frame in SEGMENT.iter_unpack(self.segments)]

    def span(self) -> Span:
        """Where the bytes start and the first and last packet that carried them."""
        segs = self.segments
        _, ts0, frame0 = SEGMENT.unpack_from(segs, 0)
        _, ts1, frame1 = SEGMENT.unpack_from(segs, len(segs) - SEGMENT.size)
        return Span(self.offset, ts0, ts1, frame0, frame1)

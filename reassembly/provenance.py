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
  the per-byte packet is unknown: the chunk's first/last values then bracket it.

Cost model (the framer is on the NATS hot path): bytes live in one ``bytearray`` with a
read index; the resolved prefix is dropped at the next ``feed`` (CPython deletes a
bytearray's front in O(1) amortised), so a unit costs one slice, not a buffer copy.
Chunk records are plain 5-tuples in a deque, looked up front to back and forgotten once
wholly resolved, so a lookup is amortised O(1).  The attributes ``data``, ``pos``,
``base`` and ``chunks`` are public on purpose: a compiled scanner parses in place from
them (``dissectors.framing.LineFramer.scan_view``, ``dissectors/nats/_speedups.c``).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

__all__ = ["Chunk", "Extent", "ProvenanceBuffer", "Span"]

Chunk = tuple[int, int, int, int, int]
"""One fed chunk as the buffer remembers it: ``(end, ts_first_ns, ts_last_ns,
frame_first, frame_last)``, ``end`` its exclusive stream offset.  A plain tuple in this
order is a contract: the NATS scanner (``_speedups.c``) reads it as five integers."""

_NO_CHUNK: Chunk = (0, 0, 0, 0, 0)
_tuple_new = tuple.__new__


class Span(NamedTuple):
    """Provenance of a chunk of stream bytes handed to ``Session.feed``."""

    offset: int  # stream offset of data[0] in this direction
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


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

    ``data[pos:]`` is unresolved; ``base`` is the stream offset of ``data[0]`` (None
    before the first ``feed``/``reset``); ``chunks`` the fed chunks not yet forgotten
    (see ``Chunk``), ``last`` the most recent one (it outlives ``clear``: the
    provenance of an offset past everything held).  Feeds must be contiguous; a caller
    that skips bytes says so with ``reset``.
    """

    __slots__ = ("data", "pos", "base", "chunks", "last")

    def __init__(self, base: int | None = None) -> None:
        self.data = bytearray()
        self.pos = 0
        self.base = base
        self.chunks: deque[Chunk] = deque()
        self.last: Chunk = _NO_CHUNK

    # ---- where things are ------------------------------------------------------------

    @property
    def held(self) -> int:
        """Unresolved bytes held (what the run's memory budget is told about)."""
        return len(self.data) - self.pos

    @property
    def offset(self) -> int:
        """Stream offset of the read position (the next unresolved byte)."""
        return (self.base or 0) + self.pos

    @property
    def end(self) -> int | None:
        """Stream offset the next ``feed`` must start at (None before the first one)."""
        return None if self.base is None else self.base + len(self.data)

    # ---- input -----------------------------------------------------------------------

    def feed(self, data: bytes, span: Span) -> int:
        """Append ``data`` (it starts at ``span.offset``), first dropping the resolved
        prefix.  Returns how many resolved bytes were dropped (the caller's own
        buffer-relative positions move back by that much).  A feed that does not start
        where the bytes held end is a caller bug: ``ValueError``."""
        base = self.base
        buf = self.data
        if base is None:
            self.base = base = span.offset
        elif span.offset != base + len(buf):
            raise ValueError(f"non-contiguous feed at {span.offset}, expected "
                             f"{base + len(buf)} (announce missing bytes with a gap)")
        pos = self.pos
        if pos:
            del buf[:pos]
            self.base = base = base + pos
            self.pos = 0
        buf += data
        chunk = (base + len(buf), span.ts_first_ns, span.ts_last_ns, span.frame_first,
                 span.frame_last)
        self.chunks.append(chunk)
        self.last = chunk
        return pos

    def compact(self) -> int:
        """Drop the resolved prefix now (``feed`` does it anyway); returns its length."""
        pos = self.pos
        if pos:
            del self.data[:pos]
            self.base = (self.base or 0) + pos
            self.pos = 0
        return pos

    def clear(self) -> None:
        """Give up everything held (its bytes count as resolved): the buffer is empty at
        the offset where the held bytes ended.  ``last`` is kept."""
        if self.base is not None:
            self.base += len(self.data)
        self.data = bytearray()
        self.pos = 0
        self.chunks.clear()

    def reset(self, offset: int) -> None:
        """Empty, with the next ``feed`` expected at ``offset`` (after bytes that were
        never captured, or that the caller skips without buffering)."""
        self.clear()
        self.base = offset

    # ---- output ----------------------------------------------------------------------

    def chunk_at(self, offset: int) -> Chunk:
        """The chunk holding stream ``offset``, or the latest one when ``offset`` is past
        everything fed.  Chunks wholly before ``offset`` are forgotten: ask in order."""
        ch = self.chunks
        while len(ch) > 1 and ch[0][0] <= offset:
            ch.popleft()
        return ch[0] if ch else self.last

    def extent(self, start: int, end: int) -> Extent:
        """Provenance of the stream bytes ``[start, end)`` (an empty range: that of the
        byte at ``start``)."""
        c1 = self.chunk_at(start)
        c2 = c1 if end - 1 < c1[0] else self.chunk_at(end - 1)
        return _tuple_new(Extent, (start, end, c1[1], c2[2], c1[3], c2[4]))

    def take(self, n: int) -> tuple[bytes, Extent]:
        """The next ``n`` unresolved bytes (fewer if fewer are held) and their
        provenance; they are resolved."""
        pos = self.pos
        n = min(n, len(self.data) - pos)
        start = (self.base or 0) + pos
        self.pos = pos + n
        return bytes(self.data[pos : pos + n]), self.extent(start, start + n)

    def skip(self, n: int) -> Extent:
        """Resolve the next ``n`` held bytes (fewer if fewer are held) without copying
        them; returns their provenance."""
        pos = self.pos
        n = min(n, len(self.data) - pos)
        start = (self.base or 0) + pos
        self.pos = pos + n
        return self.extent(start, start + n)

    def discard_to(self, offset: int) -> int:
        """Resolve every held byte before stream ``offset`` (none if it is behind the read
        position, all if past the end); returns how many were resolved."""
        pos = self.pos
        n = min(max(offset - (self.base or 0) - pos, 0), len(self.data) - pos)
        self.pos = pos + n
        return n

"""One direction of a TCP connection rebuilt into a byte stream.

Strategy: sequence numbers are turned into absolute 64-bit stream offsets (offset 0 is
the first byte after the SYN, or the first byte we could place when the SYN is missing)
by unwrapping each 32-bit value to the candidate nearest the end of the last segment
placed (where the sender is now); so wraparound costs nothing and the stream may jump
ahead by up to 2 GiB at a time.  In-order data is delivered at once.  Data ahead of the next
expected offset waits in a sorted list of non-overlapping pieces (only real bytes, never
a zero-filled range, so a sequence jump of gigabytes costs nothing).  A hole becomes an
explicit ``StreamGap`` when we know it will never fill: the peer acknowledged past it,
the buffer limit was reached, or the stream ended.

Overlaps are resolved by ``Limits.overlap_policy`` for bytes not yet delivered.  Bytes
already delivered cannot be taken back; a retransmission of them is compared with the
last ``overlap_check_bytes`` delivered and a difference is reported either way
(``tcp.overlap_conflict``) — that difference is the classic evasion signal.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from reassembly.events import Anomaly, Direction, Event, FlowInfo, StreamData, StreamGap
from reassembly.limits import TIER_WINDOWS, Limits, OverlapPolicy

_MOD = 1 << 32
_HALF = 1 << 31
# What one buffered piece costs beyond its bytes (the _Piece, its bytes object header,
# its start in ``starts``, list slots), for the run's memory budget.
PIECE_OVERHEAD_BYTES = 200
_NO_PIECES: tuple[()] = ()  # shared by every direction with nothing buffered (most of them)
# Window rule: data may start this far past the receiver's advertised right edge (or a
# whole window further, when the window is larger) before it is out of window -- room
# for window updates the capture missed.  Out-of-window anomalies show this many bytes.
OOW_SLACK_BYTES = 64 * 1024
OOW_SHOWN_BYTES = 256
# Out-of-window segments held per direction until a later ACK may vindicate them; past
# it the oldest is reported (and dropped) at once.
OOW_HELD_SEGMENTS = 16


class _Window(bytearray):
    """The overlap-check window of one direction (the tail of delivered bytes), a holder
    of the run's memory budget in its own tier (``TIER_WINDOWS``), given up after the
    buffers and before any flow: without it only the comparison of later retransmissions
    is lost, no byte.
    Charged in powers of two from 256 bytes, so a growing window calls the budget about
    eight times, not once a segment."""

    __slots__ = ("half", "held")
    half: TcpHalfStream  # the direction whose window this is
    held: int  # bytes charged to the budget (a power of two)

    # a budget key by identity (a bytearray hashes by nothing and compares by content)
    __hash__ = object.__hash__  # type: ignore[assignment]  # typeshed: bytearray's is None

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def release_memory(self, need: int) -> None:
        self.half.drop_window()


class _Piece:
    """A buffered out-of-order piece; ``end`` is cached for bisecting."""

    __slots__ = ("start", "end", "data", "ts_ns", "frame")

    def __init__(self, start: int, data: bytes, ts_ns: int, frame: int) -> None:
        self.start = start
        self.end = start + len(data)
        self.data = data
        self.ts_ns = ts_ns
        self.frame = frame


class TcpHalfStream:
    """Reassembles the bytes sent in one direction of one flow."""

    __slots__ = (
        "flow",
        "direction",
        "limits",
        "emit",
        "base",
        "next_off",
        "pieces",
        "starts",
        "buffered",
        "recent",
        "fin_off",
        "acked_off",
        "started",
        "syn_seen",
        "ref_off",
        "stream_id",
        "kind_prefix",
        "win_edge",
        "win_size",
        "held",
        "alt_base",
        "had_data",
        "fin_seq_off",
        "last_end",
        "keep",
    )

    def __init__(
        self,
        flow: FlowInfo,
        direction: Direction,
        limits: Limits,
        emit: Callable[[Event], None],
        stream_id: int | None = None,
        kind_prefix: str = "tcp",
    ) -> None:
        """``stream_id``/``kind_prefix`` let a QUIC stream reuse this machinery: its
        events carry the stream id and its anomalies are named ``quic.*``."""
        self.stream_id = stream_id
        self.kind_prefix = kind_prefix
        self.flow = flow
        self.direction = direction
        self.limits = limits
        self.emit = emit
        self.base: int | None = None  # 32-bit sequence number of stream offset 0
        self.next_off = 0  # next offset we expect to deliver
        # out-of-order pieces and their starts (parallel, for bisect); the shared empty
        # tuple until something is buffered, so a direction that never reorders (or a
        # half-open flow) allocates no list
        self.pieces: list[_Piece] | tuple[()] = _NO_PIECES
        self.starts: list[int] | tuple[()] = _NO_PIECES
        self.buffered = 0
        # tail of delivered bytes, ends at next_off (a _Window once data came), at most
        # ``keep`` bytes (0 once the memory budget took the window away)
        self.recent: _Window | bytes = b""
        self.keep = limits.overlap_check_bytes
        self.fin_off: int | None = None
        self.acked_off: int | None = (
            None  # highest offset known to have been sent (ACKed or cut by snaplen)
        )
        self.started = False  # any data or SYN placed yet
        self.syn_seen = False
        self.ref_off = 0  # end of the most recently placed segment: unwrapping reference
        # receiver's window: right edge (offset) of the largest window it advertised and
        # the size of its latest one; None until the peer sent an ACK with a window
        self.win_edge: int | None = None
        self.win_size = 0
        # out-of-window segments awaiting an ACK or the end (a list once one is held)
        self.held: list[_Piece] | tuple[()] = _NO_PIECES
        self.alt_base: int | None = None  # ISN + 1 of a conflicting second SYN
        self.had_data = False  # a segment reached offset 0 or beyond (placed or held)
        self.fin_seq_off: int | None = None  # offset of the first FIN's sequence number
        # seq + len of this direction's latest packet, set by the flow table: tells
        # whether a packet after an idle pause continues the connection
        self.last_end: int | None = None

    def adopt(self, tracker: TcpHalfTracker) -> None:
        """Take over what a ``TcpHalfTracker`` kept while this direction needed no more
        (the flow table starts each direction with one: a half-open flow stays lean)."""
        self.base = tracker.base
        self.started = tracker.started
        self.syn_seen = tracker.syn_seen
        self.alt_base = tracker.alt_base
        self.had_data = tracker.had_data
        self.last_end = tracker.last_end

    # -- sequence space ---------------------------------------------------------------
    # ``base``, ``started`` and ``syn_seen`` are read by the flow table (port reuse,
    # mid-stream): ``TcpHalfTracker`` below keeps exactly them for flows it does not
    # reassemble, and must follow any change made here.

    def set_isn(self, isn: int, ts_ns: int = 0, frame: int = 0) -> None:
        """The SYN fixes offset 0 at ISN + 1 (unless data was already placed).  A later
        SYN with another ISN does not move it: it is reported, and remembered in case
        this direction's first data follows it instead (``on_segment``)."""
        first = self.syn_seen
        self.syn_seen = True
        if not self.started:
            self.base = (isn + 1) % _MOD
            self.started = True
        elif first and (isn + 1) % _MOD != self.base:
            self.alt_base = (isn + 1) % _MOD
            self.emit(
                Anomaly(
                    f"{self.kind_prefix}.isn_conflict",
                    f"a second SYN with ISN {isn} conflicts with the first handshake's ISN "
                    f"{(self.base - 1) % _MOD}; the first is kept",  # type: ignore[operator]
                    ts_ns,
                    frame,
                    self.flow,
                    self.direction,
                )
            )

    def _seq_off(self, seq: int) -> int:
        """Stream offset of a sequence number: the 32-bit number unwrapped to the offset
        nearest ``ref_off``.  A FIN consumes a sequence number, not a byte: numbers after
        this direction's first FIN are one offset lower, so data sent after a FIN
        follows the bytes before it with no phantom 1-byte gap.  (One function, not an
        unwrap helper called by it: two to four calls per segment in the reference.)"""
        ref = self.ref_off
        off = (ref - (ref % _MOD)) + (seq - self.base) % _MOD  # type: ignore[operator]
        diff = off - ref
        if diff > _HALF:
            off -= _MOD
        elif diff < -_HALF:
            off += _MOD
        fin = self.fin_seq_off
        return off - 1 if fin is not None and off > fin else off

    def _sent_end(self) -> int:
        """The end of the highest byte seen so far (delivered or buffered)."""
        return max(self.next_off, self.pieces[-1].end) if self.pieces else self.next_off

    def _after_fin(self, off: int, data: bytes, ts_ns: int, frame: int) -> None:
        """Data past this direction's FIN is delivered like any other, but flagged: a
        host that closed its side does not send more.  (Its consumer decodes it, unless
        it ended the flow's decoding at a ``StreamDone``: then it says so itself.)"""
        self.emit(
            Anomaly(
                f"{self.kind_prefix}.data_after_fin",
                f"{len(data)} bytes at offset {off} sent after this direction's FIN (at "
                f"offset {self.fin_seq_off}); a closed side sends no data",
                ts_ns,
                frame,
                self.flow,
                self.direction,
                off,
                len(data),
            )
        )

    # -- input ------------------------------------------------------------------------

    def on_ack(self, ack: int, ts_ns: int, frame: int) -> None:
        """Bytes below ``ack`` were sent (the peer acknowledged them, or the snaplen cut
        them): holes below it will never fill.  Before any byte of ours was seen, the
        peer's ACK tells where a mid-stream capture picks the stream up."""
        if self.base is None:
            self.base = ack
            return
        off = self._seq_off(ack)
        if self.acked_off is None or off > self.acked_off:
            self.acked_off = off
        if self.pieces and self.pieces[0].start <= off and self.next_off < self.pieces[0].start:
            self._flush_hole(self.pieces[0].start, ts_ns, frame, "acked-unseen")
            self._hold_budget()

    def on_window(self, ack: int, window_bytes: int) -> None:
        """The peer (our receiver) acknowledged up to ``ack`` and advertised a window
        of ``window_bytes`` (already scaled): we may not send past ``ack + window``.
        Segments held as out of window that this window (or ACK) now covers were
        accepted after all (a capture that missed packets): they are placed."""
        if self.base is None:
            return
        edge = self._seq_off(ack) + window_bytes
        if self.win_edge is None or edge > self.win_edge:
            self.win_edge = edge
        self.win_size = window_bytes
        if self.held:
            held, self.held = self.held, []
            for p in held:
                if self._far_beyond(p.start):
                    self.held.append(p)
                else:
                    self.place(p.start, p.data, p.ts_ns, p.frame)

    def _far_beyond(self, off: int) -> bool:
        """Window rule (docs/transport.md): data starting more than one window (at least
        ``OOW_SLACK_BYTES``) beyond the right edge of the largest window the receiver
        advertised, and as far beyond the highest byte this side was seen sending,
        cannot have been accepted -- unless a later ACK or window says it was.  (The
        second test keeps a sender whose receiver's ACKs the capture lost, sending on.)
        Until the receiver advertised a window nothing is judged."""
        edge = self.win_edge
        if edge is None:
            return False
        slack = max(self.win_size, OOW_SLACK_BYTES)
        return off > edge + slack and off > self._sent_end() + slack

    def _out_of_window(self, p: _Piece) -> None:
        """Report a segment set aside as out of window, with its bytes."""
        shown = p.data[:OOW_SHOWN_BYTES].hex()
        more = "..." if len(p.data) > OOW_SHOWN_BYTES else ""
        self.emit(
            Anomaly(
                f"{self.kind_prefix}.out_of_window",
                f"{len(p.data)} bytes at offset {p.start} start {p.start - self.win_edge} "  # type: ignore[operator]
                f"bytes beyond the receiver's window (ACK + window reach offset "
                f"{self.win_edge}) and no later ACK or window covered them; set aside, not "
                f"placed: {shown}{more}",
                p.ts_ns,
                p.frame,
                self.flow,
                self.direction,
                p.start,
                len(p.data),
            )
        )

    def on_cut(self, end_seq: int) -> None:
        """The snaplen cut a segment that ends at ``end_seq``: those bytes were sent, so
        the stream reaches at least that far (a tail the capture never shows becomes a
        gap at the end).  Unlike an ACK it says nothing of the holes below: the sender
        may still retransmit them in full, and those captured bytes must be placed, not
        thrown away as given up (issue 18, bug 1)."""
        if self.base is None:
            return
        off = self._seq_off(end_seq)
        if self.acked_off is None or off > self.acked_off:
            self.acked_off = off

    def on_fin(self, seq: int, data_len: int) -> None:
        if self.base is None:
            self.base = seq
        off = self._seq_off(seq) + data_len
        if self.fin_off is None or off > self.fin_off:
            self.fin_off = off
        if self.fin_seq_off is None:
            self.fin_seq_off = off

    def on_segment(self, seq: int, data: bytes, ts_ns: int, frame: int) -> None:
        if not data:
            return
        if self.base is None:
            self.base = seq
        off = self._seq_off(seq)
        if len(data) == 1 and off + 1 == self._sent_end():
            # a keepalive (Windows: 1 byte at snd.nxt - 1): a byte already sent, resent
            # only to draw an ACK and often not the original; never a conflict
            return
        if self.fin_seq_off is not None and off + len(data) > self.fin_seq_off:
            self._after_fin(off, data, ts_ns, frame)
        if self.alt_base is not None:
            off = self._rebase_to_conflicting_isn(seq, off, ts_ns, frame)
        if off + len(data) > 0:
            self.had_data = True
        if self._far_beyond(off):
            # held until an ACK or window covers it (then placed) or the stream ends
            held = self.held
            if not held:
                held = self.held = []
            held.append(_Piece(off, data, ts_ns, frame))
            if len(held) > OOW_HELD_SEGMENTS:
                self._out_of_window(held.pop(0))
            return
        self.place(off, data, ts_ns, frame)

    def _rebase_to_conflicting_isn(self, seq: int, off: int, ts_ns: int, frame: int) -> int:
        """The first data of a direction that saw two SYNs with different ISNs: if it
        follows the conflicting ISN better (it would precede the first ISN, or start
        closer to the other), that handshake was the real one and offsets count from
        it -- the data is kept, not dropped as preceding the stream."""
        alt, self.alt_base = self.alt_base, None
        if self.had_data:
            return off
        alt_off = (seq - alt) % _MOD  # type: ignore[operator]
        if not (off < 0 or alt_off < off) or alt_off >= _HALF:
            return off
        self.emit(
            Anomaly(
                f"{self.kind_prefix}.isn_conflict",
                f"the first data follows the conflicting ISN {(alt - 1) % _MOD}, not the first "  # type: ignore[operator]
                f"handshake's; stream offsets count from it",
                ts_ns,
                frame,
                self.flow,
                self.direction,
                0,
            )
        )
        self.base = alt
        self.ref_off = 0
        self.acked_off = self.win_edge = None
        return alt_off

    def place(self, off: int, data: bytes, ts_ns: int, frame: int) -> None:
        """Put bytes at an absolute stream offset (QUIC streams call this directly)."""
        if not data:
            return
        self.started = True
        if off < 0:
            # bytes from before the point where we started the stream (mid-stream start)
            cut = min(-off, len(data))
            self.emit(
                Anomaly(
                    f"{self.kind_prefix}.data_before_start",
                    f"{cut} bytes precede the first byte placed in this stream",
                    ts_ns,
                    frame,
                    self.flow,
                    self.direction,
                    off,
                    cut,
                )
            )
            data = data[cut:]
            off += cut
            if not data:
                return
        end = off + len(data)
        self.ref_off = end
        nxt = self.next_off
        if off < nxt:
            self._check_delivered(off, data, ts_ns, frame)
            if end <= nxt:
                return
            data = data[nxt - off :]
            off = nxt
        if off == nxt and not self.pieces:
            self._deliver(off, data, ts_ns, ts_ns, frame, frame)
            return
        self._insert(off, data, ts_ns, frame)
        self._drain()
        self._enforce_limits(ts_ns, frame)
        self._hold_budget()

    # -- delivery ---------------------------------------------------------------------

    def _deliver(
        self, off: int, data: bytes, ts_first: int, ts_last: int, f1: int, f2: int
    ) -> None:
        self.emit(
            StreamData(
                self.flow, self.direction, off, data, ts_first, ts_last, f1, f2, self.stream_id
            )
        )
        self.next_off = off + len(data)
        self.flow.stream_bytes[self.direction] += len(data)
        keep = self.keep
        if keep:
            recent = self.recent
            if recent.__class__ is not _Window:  # b"": the first data, or after a gap
                self.recent = recent = _Window()
                recent.half, recent.held = self, 0
            recent += data
            if len(recent) > keep:
                del recent[: len(recent) - keep]
            if len(recent) > recent.held:
                self._hold_window(recent)

    def _drain(self) -> None:
        """Deliver buffered pieces that became contiguous."""
        pieces, starts = self.pieces, self.starts
        # (``starts`` is empty exactly when ``pieces`` is: tested for the type checker)
        while pieces and starts and pieces[0].start <= self.next_off:
            p = pieces.pop(0)
            starts.pop(0)
            self.buffered -= len(p.data)
            if p.end <= self.next_off:
                continue
            data = p.data[self.next_off - p.start :]
            self._deliver(self.next_off, data, p.ts_ns, p.ts_ns, p.frame, p.frame)

    def _gap(self, nbytes: int, ts_ns: int, frame: int, reason: str) -> None:
        self.emit(
            StreamGap(
                self.flow,
                self.direction,
                self.next_off,
                nbytes,
                ts_ns,
                frame,
                reason,
                self.stream_id,
            )
        )
        self.flow.gap_bytes[self.direction] += nbytes
        self.next_off += nbytes
        self.forget_recent()

    def _flush_hole(self, upto: int, ts_ns: int, frame: int, reason: str) -> None:
        if upto > self.next_off:
            self._gap(upto - self.next_off, ts_ns, frame, reason)
        self._drain()

    def _enforce_limits(self, ts_ns: int, frame: int) -> None:
        lim = self.limits
        pieces = self.pieces
        if not pieces or (
            self.buffered <= lim.max_buffered_bytes and len(pieces) <= lim.max_buffered_segments
        ):
            return
        self.emit(
            Anomaly(
                "limit.reorder_buffer",
                f"{self.buffered} bytes in {len(pieces)} out-of-order pieces exceed the "
                f"limit ({lim.max_buffered_bytes} bytes / {lim.max_buffered_segments} pieces); "
                "the hole before them is declared a gap",
                ts_ns,
                frame,
                self.flow,
                self.direction,
                self.next_off,
                pieces[0].start - self.next_off,
            )
        )
        while self.pieces and (
            self.buffered > lim.max_buffered_bytes or len(self.pieces) > lim.max_buffered_segments
        ):
            self._flush_hole(self.pieces[0].start, ts_ns, frame, "reorder-limit")

    def finish(self, ts_ns: int, frame: int) -> None:
        """End of stream: every remaining hole is a gap; then the tail we know was sent.
        Segments still held as out of window were never vindicated: reported."""
        for p in self.held:
            self._out_of_window(p)
        self.held = _NO_PIECES
        while self.pieces:
            self._flush_hole(self.pieces[0].start, ts_ns, frame, "end-of-stream")
        self._hold_budget()
        end = self.fin_off if self.fin_off is not None else self.acked_off
        if end is not None and end > self.next_off:
            self._gap(end - self.next_off, ts_ns, frame, "missing-tail")
        self.forget_recent()

    # -- memory budget ----------------------------------------------------------------

    def _hold_budget(self) -> None:
        """Tell the run's memory budget what this direction's reorder buffer holds."""
        budget = self.limits.budget
        if budget is not None:
            pieces = self.pieces
            budget.hold(self, self.buffered + len(pieces) * PIECE_OVERHEAD_BYTES if pieces else 0)

    def _hold_window(self, window: _Window) -> None:
        n = len(window)
        held = 256
        while held < n:
            held <<= 1
        window.held = held
        budget = self.limits.budget
        if budget is not None:
            budget.hold(window, held, TIER_WINDOWS)

    def forget_recent(self) -> None:
        """Free the overlap-check window (a gap, an idle flow, the end of the stream):
        a retransmission of bytes delivered before now is no longer compared."""
        window = self.recent
        if window.__class__ is _Window:
            self.recent = b""
            budget = self.limits.budget
            if budget is not None:
                budget.hold(window, 0, TIER_WINDOWS)

    def drop_window(self) -> None:
        """The run's memory budget is reached and this direction's overlap-check window is
        the least recently grown: give it up for good (one row per direction, never a
        flood), and say so."""
        size = len(self.recent)
        self.forget_recent()
        self.keep = 0
        flow = self.flow
        budget = self.limits.budget
        self.emit(
            Anomaly(
                "limit.memory",
                f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: "
                f"dropped the overlap-check window of this direction, the least recently "
                f"grown ({size} bytes); from here on, retransmissions of bytes already "
                "delivered in this direction are not compared",
                flow.ts_last_ns,
                flow.frame_last,
                flow,
                self.direction,
                self.next_off,
                0,
            )
        )

    def release_memory(self, need: int) -> None:
        """The run's memory budget is reached and this is the oldest buffer: flush it.
        Its holes become gaps (``memory-limit``) and the pieces are delivered, as when
        the per-direction limit is reached; stamped with the flow's own last packet."""
        if self.pieces:
            flow = self.flow
            ts_ns, frame = flow.ts_last_ns, flow.frame_last
            budget = self.limits.budget
            self.emit(
                Anomaly(
                    "limit.memory",
                    f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: "
                    f"flushed the out-of-order buffer of this direction, the least recently "
                    f"active ({self.buffered} bytes in {len(self.pieces)} pieces); the holes "
                    "before them are gaps",
                    ts_ns,
                    frame,
                    flow,
                    self.direction,
                    self.next_off,
                    self.pieces[0].start - self.next_off,
                )
            )
            while self.pieces:
                self._flush_hole(self.pieces[0].start, ts_ns, frame, "memory-limit")
        self._hold_budget()

    # -- overlaps ---------------------------------------------------------------------

    def _conflict(self, off: int, nbytes: int, ts_ns: int, frame: int, what: str) -> None:
        self.flow.overlap_conflicts[self.direction] += 1
        self.emit(
            Anomaly(
                f"{self.kind_prefix}.overlap_conflict",
                f"{nbytes} overlapping bytes at offset {off} differ from the {what} copy "
                f"({self.limits.overlap_policy.value} copy kept)",
                ts_ns,
                frame,
                self.flow,
                self.direction,
                off,
                nbytes,
            )
        )

    def _check_delivered(self, off: int, data: bytes, ts_ns: int, frame: int) -> None:
        """Compare a retransmission of delivered bytes with what we delivered."""
        recent_start = self.next_off - len(self.recent)
        lo = max(off, recent_start)
        hi = min(off + len(data), self.next_off)
        if lo >= hi:
            return
        old = self.recent[lo - recent_start : hi - recent_start]
        new = data[lo - off : hi - off]
        if old != new:
            self._conflict(lo, hi - lo, ts_ns, frame, "already delivered")

    def _insert(self, off: int, data: bytes, ts_ns: int, frame: int) -> None:
        end = off + len(data)
        pieces, starts = self.pieces, self.starts
        if not pieces or not starts:  # (both or neither: the type checker needs the two)
            pieces, starts = self.pieces, self.starts = [], []
        i = bisect_right(starts, off)
        if i and pieces[i - 1].end > off:
            i -= 1
        last_wins = self.limits.overlap_policy is OverlapPolicy.LAST
        new: list[_Piece] = []
        kept: list[_Piece] = []
        cur = off
        j = i
        while j < len(pieces) and pieces[j].start < end:
            p = pieces[j]
            lo, hi = max(off, p.start), min(end, p.end)
            if data[lo - off : hi - off] != p.data[lo - p.start : hi - p.start]:
                self._conflict(lo, hi - lo, ts_ns, frame, "buffered")
            if last_wins:
                if p.start < off:
                    kept.append(_Piece(p.start, p.data[: off - p.start], p.ts_ns, p.frame))
                if p.end > end:
                    kept.append(_Piece(end, p.data[end - p.start :], p.ts_ns, p.frame))
            else:
                if cur < p.start:
                    new.append(_Piece(cur, data[cur - off : p.start - off], ts_ns, frame))
                cur = max(cur, p.end)
            j += 1
        if last_wins:
            new = [_Piece(off, data, ts_ns, frame)]
            replaced = pieces[i:j]
            self.buffered -= sum(len(p.data) for p in replaced)
            merged = sorted(kept + new, key=lambda p: p.start)
        else:
            if cur < end:
                new.append(_Piece(cur, data[cur - off :], ts_ns, frame))
            merged = pieces[i:j] + new
            merged.sort(key=lambda p: p.start)
        pieces[i:j] = merged
        starts[i:j] = [p.start for p in merged]
        self.buffered += sum(len(p.data) for p in new) + sum(len(p.data) for p in kept)


class TcpHalfTracker:
    """One direction of a flow whose stream another process reassembles
    (``FlowTable(owns=...)``): no bytes are kept and no event is emitted; only what the
    flow table's own decisions read is kept, exactly as ``TcpHalfStream`` sets it —
    ``base`` (a bare SYN repeating the first one is a retransmission, any other starts
    a new connection), ``started`` (which decides whether a SYN moves ``base``) and
    ``syn_seen`` (mid-stream direction).  Same methods as ``TcpHalfStream``."""

    __slots__ = ("base", "started", "syn_seen", "alt_base", "had_data", "last_end")

    def __init__(self) -> None:
        self.base: int | None = None
        self.started = False
        self.syn_seen = False
        self.alt_base: int | None = None
        self.had_data = False
        self.last_end: int | None = None

    def set_isn(self, isn: int, ts_ns: int = 0, frame: int = 0) -> None:
        first = self.syn_seen
        self.syn_seen = True
        if not self.started:
            self.base = (isn + 1) % _MOD
            self.started = True
        elif first and (isn + 1) % _MOD != self.base:
            self.alt_base = (isn + 1) % _MOD

    def on_ack(self, ack: int, ts_ns: int, frame: int) -> None:
        if self.base is None:
            self.base = ack

    def on_cut(self, end_seq: int) -> None:
        pass

    def on_window(self, ack: int, window_bytes: int) -> None:
        pass

    def on_fin(self, seq: int, data_len: int) -> None:
        if self.base is None:
            self.base = seq

    def on_segment(self, seq: int, data: bytes, ts_ns: int, frame: int) -> None:
        if data:
            if self.base is None:
                self.base = seq
            rel = (seq - self.base) % _MOD
            off = rel - _MOD if rel > _HALF else rel
            if not self.started and len(data) == 1 and off == -1:
                # ``TcpHalfStream.on_segment``'s keepalive (one byte ending where the
                # bytes sent end: at offset 0 while nothing was placed) places nothing
                return
            self.started = True
            # the conflicting-ISN choice of ``TcpHalfStream._rebase_to_conflicting_isn``
            if self.alt_base is not None:
                alt, self.alt_base = self.alt_base, None
                alt_off = (seq - alt) % _MOD
                if not self.had_data and (off < 0 or alt_off < off) and alt_off < _HALF:
                    self.base, off = alt, alt_off
            if off + len(data) > 0:
                self.had_data = True

    def finish(self, ts_ns: int, frame: int) -> None:
        pass

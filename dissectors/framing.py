"""Shared framing: turn one direction of a byte stream into protocol data units.

Strategy (Wireshark's ``tcp_dissect_pdus`` idea, written sans-IO like h11): a framer owns
the bytes of one stream direction that have been fed but not yet resolved into a unit.
The protocol only answers "how long is the unit that starts here" (``LengthPrefixedFramer``)
or reads control lines and asks for "exactly N more bytes" after one (``LineFramer``).
Everything else is done once, here, and tested once:

* **need more** is a first-class answer: ``next_event()`` returns ``NEED_MORE``;
* **bounded memory**: bytes live in one ``reassembly.provenance.ProvenanceBuffer`` (a
  ``bytearray`` with a read index; the consumed prefix is dropped on the next ``feed``).
  Oversize units and long bodies stream past without being buffered; a body keeps at most
  ``keep_bytes`` and hashes the rest incrementally;
* **provenance**: the same buffer remembers every buffered chunk's ``Span``.  A unit gets
  ``ts_first``/``frame_first`` of the chunk holding its first byte and ``ts_last``/
  ``frame_last`` of the chunk holding its last byte.  When the pipeline merged several
  packets into one chunk, the per-byte packet is unknown; these values then bracket it.
  A unit read in pieces (a streamed body, a resync episode, an oversize unit skipped)
  keeps the ``Extent`` of its first piece and joins it to its last (``Extent.through``);
* **gaps**: ``gap()`` drops the partial unit (reported as a ``Dropped`` event, its bytes
  counted undecoded).  If that unit's end was known (declared length), parsing resumes
  exactly there, skipping the rest of it; otherwise the framer resynchronises with the
  protocol's rule (``ResyncFn``), and the skipped bytes are reported (``Resynced``);
* **byte accounting** (DESIGN §7): at any time ``decoded_bytes + undecoded_bytes +
  pending_bytes == fed_bytes``; after ``close()`` ``pending_bytes == 0``.  Bytes handed to
  the protocol in a ``Line``/``Block``/``Pdu`` count as decoded; the protocol moves them to
  undecoded with ``reject(n)`` when it cannot make sense of them.

Contract with the caller: drain ``next_event()`` until ``NEED_MORE`` before calling
``feed``, ``gap`` or ``close`` again; ``feed`` spans must be contiguous (a hole is
announced with ``gap``).  Breaking the contract is a caller bug and raises ``ValueError``;
no input byte ever makes a framer raise.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from hashlib import _Hash

from reassembly.provenance import Chunk, Extent, ProvenanceBuffer, Span

__all__ = [
    "NEED_MORE",
    "Block",
    "Dropped",
    "Invalid",
    "LengthPrefixedFramer",
    "Line",
    "LineFramer",
    "Oversize",
    "Pdu",
    "Released",
    "ResyncFn",
    "Resynced",
    "TrailerStatus",
    "resync_after_lf",
]

# How many leading bytes of an oversize / invalid unit are kept for the anomaly detail.
HEAD_BYTES = 64
# Resync may leave an undecided tail in the buffer (a candidate start that needs more
# bytes); past this many undecided bytes one byte is forced out so memory stays bounded.
MAX_RESYNC_HOLD_BYTES = 64 * 1024
# First window of buffered bytes a resync rule is shown (``_Framer._resync_scan``); it
# grows 4x per look while nothing is found.
RESYNC_FIRST_WINDOW = 1024
# provenance of a unit not begun yet
_NOWHERE = Extent(0, 0, 0, 0, 0, 0)


class _NeedMore:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_MORE"


NEED_MORE = _NeedMore()
"""Returned by ``next_event`` when no further event can be produced without more bytes."""

ResyncFn = Callable[[bytes, "int | None"], "tuple[int, bool]"]
"""``resync(buf, prev_byte) -> (skip, found)``: find a plausible unit start in ``buf``.

``prev_byte`` is the stream byte just before ``buf[0]`` (``None`` if unknown, i.e. right
after a gap or at the start of the stream).  Return ``(k, True)`` if a unit plausibly
starts at ``buf[k]``; ``(k, False)`` if ``buf[:k]`` holds no start and the rest cannot be
decided yet (the framer calls again when more bytes arrive).  ``k`` is clamped to
``[0, len(buf)]``; ``found`` with ``k == len(buf)`` is treated as not found.
"""


class TrailerStatus(IntEnum):
    """What followed a ``Block`` where the protocol expects a fixed trailer (NATS: CRLF)."""

    NONE = 0  # no trailer was asked for
    OK = 1  # the expected trailer, consumed
    LENIENT = 2  # one of the tolerated alternatives (NATS: bare LF), consumed
    BAD = 3  # something else: nothing consumed, ``trailer_found`` shows what was there
    MISSING = 4  # a gap or the end of the stream came first


class Line(NamedTuple):
    """A control line.  ``data`` excludes the LF and a CR right before it."""

    data: bytes
    bare_lf: bool  # ended with LF alone (no CR)
    start: int
    end: int  # exclusive, includes the terminator
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Block(NamedTuple):
    """The exact-bytes follow-up asked for with ``LineFramer.read_exact``.

    ``data`` holds the first ``min(nbytes, keep_bytes)`` bytes; ``sha256`` (hex) covers all
    ``nbytes`` when hashing was asked for.  ``end`` includes the trailer if one was consumed.
    """

    data: bytes
    nbytes: int
    sha256: str | None
    trailer: TrailerStatus
    trailer_found: bytes
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Pdu(NamedTuple):
    """One whole length-prefixed unit (header included)."""

    data: bytes
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Oversize(NamedTuple):
    """A unit longer than the framer's limit, skipped without buffering.

    ``nbytes`` is the unit's length (declared, or measured for a line); ``head`` its first
    bytes.  The skipped bytes count as undecoded.
    """

    nbytes: int
    head: bytes
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Invalid(NamedTuple):
    """``pdu_length`` rejected the bytes at ``start``; the framer resynchronises from
    ``start + 1``.  Not repeated while a resync is already under way."""

    head: bytes
    start: int
    end: int  # start + 1: the one byte known not to start a unit
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Resynced(NamedTuple):
    """Bytes ``[start, end)`` were skipped while looking for a unit start.

    ``found`` is False when the range was cut by a gap or the end of the stream.
    """

    found: bool
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Dropped(NamedTuple):
    """A partial unit lost to a gap (or left over at close).

    ``kind``: ``line``, ``long_line`` (an oversize line being skipped), ``block``, ``pdu``,
    ``oversize`` (an oversize PDU being skipped).  ``[start, end)`` are the bytes received
    (``end`` is where the gap or the stream end began).  ``declared_end`` is the unit's end
    when it was known; ``resume_at`` is where parsing resumes without guessing after a gap
    (the rest of the unit is skipped as undecoded), or None when the framer resynchronises
    instead (always None at close).
    """

    kind: str
    declared_end: int | None
    resume_at: int | None
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Released(NamedTuple):
    """The run's memory budget was reached and this framer's buffer was the least
    recently fed: the partial unit it held, ``[start, end)``, was given up (undecoded)
    and the rest of the unit is skipped as it streams past.  ``kind``: ``pdu`` (a
    length-prefixed unit ending at ``declared_end``) or ``line`` (a control line whose
    LF had not come: ``declared_end`` is None, parsing resumes after that LF).
    ``limit_bytes`` is the budget's size.  A session reports it as a ``limit.memory``
    anomaly (``FramedSession`` does)."""

    limit_bytes: int
    declared_end: int | None
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    kind: str = "pdu"

    def detail(self) -> str:
        """The ``limit.memory`` anomaly's text."""
        head = (f"memory budget of {self.limit_bytes} bytes reached: dropped the "
                f"{self.end - self.start} bytes buffered of ")
        if self.declared_end is None:
            return (head + "an unfinished line (this direction's framer buffer, the least "
                    "recently fed); the rest of the line is skipped, parsing resumes after "
                    "its LF")
        return (head + f"a {self.declared_end - self.start}-byte unit (this direction's "
                "framer buffer, the least recently fed); the rest of the unit is skipped, "
                "parsing resumes where it ends")


Event = Line | Block | Pdu | Oversize | Invalid | Resynced | Dropped | Released
"""What ``next_event``, ``gap`` and ``close`` hand out."""


def resync_after_lf(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """Default line resync rule: a line starts at the stream start, or after an LF."""
    if prev_byte == 0x0A:
        return 0, True
    i = buf.find(b"\n")
    if i < 0:
        return len(buf), False
    return i + 1, True


def _op_trie(items: list[tuple[bytes, bytes]]) -> bytes:
    """A regular expression matching any ``op`` + one of its separator bytes, written as
    a trie (shared prefixes tested once: the regex engine then rejects a junk line after
    one or two byte tests)."""
    groups: dict[bytes, list[tuple[bytes, bytes]]] = {}
    alts = []
    for rest, seps in items:
        if rest:
            groups.setdefault(rest[:1], []).append((rest[1:], seps))
        else:
            alts.append(_byte_class(seps))
    alts += [re.escape(ch) + _op_trie(sub) for ch, sub in sorted(groups.items())]
    return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"


@functools.lru_cache(maxsize=64)
def _byte_class(seps: bytes) -> bytes:
    """``[...]`` matching one byte of ``seps``, consecutive bytes written as ranges: the
    NATS cluster ops allow any byte after them, and 256 bytes written out one by one took
    ~9 ms to compile.  Remembered: every op of a rule usually allows the same bytes (the
    cluster rule's ~20 ops all 256, ~99,000 bytecodes to make anew; since the
    expressions are compiled at a rule's first resync, ``line_op_resync``, that is paid
    by the runs that resynchronise, not by every start-up)."""
    out, values, i = [], sorted(set(seps)), 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        first, last = re.escape(bytes([values[i]])), re.escape(bytes([values[j]]))
        out.append(first if i == j else first + b"-" + last)
        i = j + 1
    return b"[" + b"".join(out) + b"]"


def line_op_resync(ops: dict[bytes, bytes]) -> ResyncFn:
    """A line resync rule: the next line that starts with one of ``ops`` (ASCII case
    ignored) followed by one of the bytes ``ops[op]`` allows after it.

    A line starts at ``buf[0]`` when the previous byte was LF or is unknown (right after
    a gap: TCP segments usually begin at an operation), and after every LF.  The search
    is one upper-casing copy and one compiled regular expression over it, so a flood of
    short lines (``\\r\\n`` × millions) costs a C-level scan, not a Python step per
    line (issue 17: NATS resync ran at ~0.5 MB/s on such a flood; this runs at ≥ 40 MB/s
    on the worst junk measured, ``P\\n`` repeated).  The last line is left undecided
    while it may still grow into an op.

    The expressions are compiled at the first resync, not here: modules build their rule
    at import, and most runs never resynchronise (compiling the NATS and cluster rules
    was ~177,000 bytecodes, ~12 ms, of every run's start-up)."""
    ops = dict(ops)
    prefixes = frozenset(op.upper()[:k] for op in ops for k in range(len(op) + 1))
    longest = max(len(op) for op in ops)
    compiled: list[re.Pattern[bytes]] = []

    def patterns() -> list[re.Pattern[bytes]]:
        trie = _op_trie([(op.upper(), seps) for op, seps in ops.items()])
        firsts = re.escape(bytes(sorted({op.upper()[0] for op in ops})))
        # the look-ahead on the first byte lets most line starts fail in one test
        compiled[:] = re.compile(trie), re.compile(b"\n(?=[" + firsts + b"])" + trie)
        return compiled

    def resync(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
        at_start, after_lf = compiled or patterns()
        n = len(buf)
        up = buf.upper()
        last: int | None = None
        if prev_byte is None or prev_byte == 0x0A:
            if at_start.match(up):
                return 0, True
            last = 0
        m = after_lf.search(up)
        if m is not None:
            return m.start() + 1, True
        lf = up.rfind(b"\n")
        if lf >= 0:
            last = lf + 1
        # undecided: the last line is still short enough to become ``op`` + separator
        if last is not None and n - last <= longest and up[last:] in prefixes:
            return last, False
        return n, False

    return resync


# ------------------------------------------------------------------------------ base

# modes shared by both framers (each framer adds its own "normal" modes)
_RESYNC = 10
_SKIP = 11
_DEAD = 12  # abandoned or closed: every byte is undecoded, no events


class _Framer:
    """Buffer, provenance, accounting, resync/skip/abandon: everything but the unit rule.

    Slotted, as its subclasses here: a session keeps one framer a direction for the
    whole life of its flow, and their instance dicts (~0.8 KB each) were a tenth of what
    an idle NATS connection held (a capture of 20,000 open connections: ~20 KB each);
    a subclass of one's own without ``__slots__`` still gets a dict."""

    __slots__ = ("_b", "_scan", "_prev_byte", "_events", "_resync", "_mode", "_normal",
                 "_closed", "_rs", "_rs_prev", "_skip_end", "fed_bytes", "decoded_bytes",
                 "undecoded_bytes", "budget", "_told", "_waiting")

    def __init__(self, resync: ResyncFn | None, start_offset: int | None) -> None:
        # the unresolved bytes and their packets (base: None until the first feed/gap)
        self._b = ProvenanceBuffer(start_offset)
        self._scan = 0  # LineFramer: where the LF search resumes inside a partial line
        self._prev_byte: int | None = None  # stream byte before _b.data[0]
        # (a list, not a deque: it holds an event or two at a time, and an empty deque
        # is 760 bytes, for every direction of every flow)
        self._events: list[Event] = []
        self._resync = resync
        self._mode = 0
        self._normal = 0
        self._closed = False
        # resync episode: the bytes skipped so far (None: no episode open)
        self._rs: Extent | None = None
        self._rs_prev: int | None = None
        # skip-to-known-end after a gap
        self._skip_end = 0
        self.fed_bytes = 0
        self.decoded_bytes = 0
        self.undecoded_bytes = 0
        # the run's memory budget (``reassembly.limits.MemoryBudget``, a session sets it
        # from ``options["memory_budget"]``): told what is left buffered once the
        # framer needs more (``next_event``, ``hold_budget``)
        self.budget: Any = None
        self._told = 0  # what the budget was last told this framer holds (``_tell``)
        self._waiting = False  # idle since it answered NEED_MORE (or hold_budget)

    # ---- public helpers ------------------------------------------------------------

    @property
    def next_offset(self) -> int | None:
        """Stream offset the next ``feed`` must start at (None before the first call)."""
        return self._b.end

    @property
    def offset(self) -> int:
        """Stream offset of the next unresolved byte."""
        return self._b.offset

    @property
    def buffered_bytes(self) -> int:
        return self._b.held

    @property
    def pending_bytes(self) -> int:
        """Fed bytes not yet counted decoded or undecoded."""
        return self._b.held + self._inflight()

    @property
    def abandoned(self) -> bool:
        return self._mode == _DEAD

    def peek(self, n: int) -> bytes:
        """Up to ``n`` unresolved bytes at the read position (no copy kept)."""
        b = self._b
        return bytes(b.data[b.pos : b.pos + n])

    def feed(self, data: bytes, span: Span, chunks: Sequence[Chunk] | None = None) -> None:
        """The next bytes of the direction, starting at ``span.offset``.  ``chunks``: the
        bytes of several packets at once with one provenance record per packet
        (``ProvenanceBuffer.feed``), so units get the packets one ``feed`` per packet
        would have given them."""
        if self._closed:
            raise ValueError("feed after close")
        b = self._b
        started = b.started
        if started and span.offset != b.base + len(b.data):
            raise ValueError(
                f"non-contiguous feed at {span.offset}, expected {b.end}"
                " (announce missing bytes with gap())"
            )
        self._waiting = False
        n = len(data)
        if not n:
            if not started:
                b.reset(span.offset)  # (the stream starts here)
            return
        self.fed_bytes += n
        pos = b.pos
        if pos:
            self._prev_byte = b.data[pos - 1]
            self._scan -= pos  # (the buffer drops the resolved prefix)
        if self._mode == _DEAD:
            self.undecoded_bytes += n
            b.reset(span.offset + n)
            return
        b.append(data, span, chunks)  # (contiguity checked above)

    def _forget_resolved(self) -> None:
        """Drop the resolved prefix of the buffer now (``feed`` does it anyway)."""
        pos = self._b.pos
        if pos:
            self._prev_byte = self._b.data[pos - 1]
            self._scan -= pos
            self._b.compact()

    def release_memory(self, need: int) -> None:
        """The run's memory budget is reached and this buffer is the oldest holder: give
        back the bytes already resolved (nothing is lost); a framer that can (see
        ``LengthPrefixedFramer``) also gives up the partial unit it holds."""
        if self._mode != _DEAD:
            self._forget_resolved()
        self._release_partial()
        if self.budget is not None:
            self._tell(self._budget_bytes())

    def _tell(self, nbytes: int) -> None:
        """``budget.hold(self, nbytes)``, unless it would change nothing: 0 again while
        the budget holds nothing of this framer and is within its limit (a hold past the
        limit asks for a reclaim).  Why: a scanner that consumed every whole unit tells
        0 after each feed (a STAN capture: once per segment)."""
        budget = self.budget
        if nbytes or self._told or budget.used > budget.limit_bytes:
            self._told = nbytes
            budget.hold(self, nbytes)

    def _release_partial(self) -> None:
        """Give up the partial unit buffered, for the memory budget (if the framer can)."""

    def _budget_bytes(self) -> int:
        """What this framer tells the budget it holds: the bytes left buffered."""
        return self._b.held

    def hold_budget(self) -> None:
        """Tell the run's budget what this framer holds now.  ``next_event`` does it when
        it answers ``NEED_MORE``; a scanner working in place (``scan_view``) calls it
        when it stops for more bytes."""
        self._waiting = True
        if self.budget is not None:
            self._tell(self._budget_bytes())

    def next_event(self) -> Event | _NeedMore:
        """The next event, or ``NEED_MORE`` (then what is left buffered is what the run's
        budget is told)."""
        ev = self._next_event()
        if ev is NEED_MORE:
            self._waiting = True
            if self.budget is not None:
                self._tell(self._budget_bytes())
        else:
            self._waiting = False
        return ev

    def _next_event(self) -> Event | _NeedMore:
        raise NotImplementedError

    def reject(self, nbytes: int) -> None:
        """Move ``nbytes`` already handed out as decoded to undecoded."""
        nbytes = min(nbytes, self.decoded_bytes)
        self.decoded_bytes -= nbytes
        self.undecoded_bytes += nbytes

    def start_resync(self) -> None:
        """Look for the next plausible unit start with the resync rule (from here)."""
        if self._mode == _DEAD:
            return
        self._mode = _RESYNC
        self._rs_prev = self._b.data[self._b.pos - 1] if self._b.pos else self._prev_byte

    def abandon(self) -> None:
        """Give up on this direction: everything from here on is undecoded, silently."""
        if self._mode == _DEAD:
            return
        self._drop_partial()
        self.undecoded_bytes += self._b.held
        self._clear()
        self._events.clear()
        self._rs = None
        self._mode = _DEAD
        if self.budget is not None:
            self._tell(0)

    def gap(self, offset: int, nbytes: int) -> list[Event]:
        """``nbytes`` at ``offset`` were never captured.  Returns the events this causes."""
        if self._closed:
            raise ValueError("gap after close")
        expected = self._b.end
        if expected is None:
            self._b.reset(offset + nbytes)
            self._prev_byte = None
            if self._mode != _DEAD:
                self._mode = _RESYNC
                self._rs_prev = None
            return []
        if offset != expected:
            raise ValueError(f"gap at {offset}, expected {expected}")
        out = list(self._events)
        self._events.clear()
        gap_end = offset + nbytes
        if self._mode == _DEAD:
            self._b.reset(gap_end)
            return out
        known_end = self._flush_partial(out, offset)
        self.undecoded_bytes += self._b.held
        self._clear()
        if self.budget is not None:
            self._tell(0)
        self._b.reset(gap_end)
        self._prev_byte = None
        if known_end is not None and known_end > gap_end:
            self._mode = _SKIP
            self._skip_end = known_end
        elif known_end is not None and known_end == gap_end:
            self._mode = self._normal
        else:
            self._mode = _RESYNC
            self._rs_prev = None
        return out

    def close(self) -> list[Event]:
        """End of stream: report what is left; everything still pending is undecoded."""
        if self._closed:
            return []
        out = list(self._events)
        self._events.clear()
        if self._mode != _DEAD:
            self._flush_partial(out, self.next_offset or 0)
            self.undecoded_bytes += self._b.held
            out = [ev._replace(resume_at=None) if type(ev) is Dropped else ev for ev in out]
        self._clear()
        self._mode = _DEAD
        self._closed = True
        if self.budget is not None:
            self._tell(0)
        return out

    # ---- internals -----------------------------------------------------------------

    def _clear(self) -> None:
        """Give up every byte buffered (the caller counts them)."""
        self._b.clear()
        self._scan = 0

    def _inflight(self) -> int:
        return 0

    def _drop_partial(self) -> None:
        """Forget a partial unit whose bytes are no longer buffered (abandon)."""

    def _flush_partial(self, out: list[Event], end: int) -> int | None:
        """Report the partial unit at a gap/close; return its known end, if any.

        Base version handles the shared modes (resync and skip)."""
        if self._mode == _RESYNC:
            self._resync_flush(out, end)
        elif self._mode == _SKIP:
            # skipping the rest of a unit already reported: a second gap keeps its end
            return self._skip_end
        return None

    def _resync_flush(self, out: list[Event], end: int) -> None:
        """Close a resync episode cut by a gap/close (the undecided tail counts too)."""
        pending = self._b.held
        if pending:
            self._note_skip(self._b.pos, pending)
            self._b.pos += pending
            self.undecoded_bytes += pending
        if self._rs is not None:
            out.append(self._resynced(self._rs, False, end))

    def _note_skip(self, pos: int, n: int) -> None:
        """``n`` buffered bytes at ``pos`` are skipped by the open resync episode."""
        off = self._b.base + pos
        skipped = self._b.extent(off, off + n)
        self._rs = skipped if self._rs is None else self._rs.through(skipped)

    def _resynced(self, rs: Extent, found: bool, end: int) -> Resynced:
        """The ``Resynced`` event closing the episode that skipped ``rs`` (up to ``end``)."""
        self._rs = None
        return Resynced(found, rs.start, end, rs.ts_first_ns, rs.ts_last_ns, rs.frame_first,
                        rs.frame_last)

    def _resync_step(self) -> bool:
        """Run the resync rule once on the buffered bytes.  True when a start was found
        (the read position is then on it)."""
        buf = self._b.data
        pos = self._b.pos
        avail = len(buf) - pos
        if not avail:
            return False
        if self._resync is None:
            skip, found = avail, False
        else:
            skip, found = self._resync_scan(self._resync, buf, pos, avail)
        if not found and avail - skip > MAX_RESYNC_HOLD_BYTES:
            skip = avail - MAX_RESYNC_HOLD_BYTES
        if skip:
            self._note_skip(pos, skip)
            self._rs_prev = buf[pos + skip - 1]
            self._b.pos = pos + skip
            self.undecoded_bytes += skip
        if found:
            self._mode = self._normal
            self._scan = self._b.pos
            self._on_found()
            return True
        return False

    def _resync_scan(self, resync: ResyncFn, buf: bytearray, pos: int,
                     avail: int) -> tuple[int, bool]:
        """Ask the resync rule about ``buf[pos:]`` through a window that starts small and
        grows 4x while nothing is found: a resync that finds a candidate soon (each line
        of a flood of bad ops) copies and scans only that far, so the work stays linear
        in the bytes looked at, not in the bytes buffered (issue 17)."""
        prev = self._rs_prev
        window = RESYNC_FIRST_WINDOW
        skip = 0
        while True:
            seen = min(avail - skip, window)
            k, found = resync(bytes(buf[pos + skip : pos + skip + seen]), prev)
            k = max(0, min(int(k), seen))
            if found and k < seen:
                return skip + k, True
            if seen == avail - skip:  # the rule saw every buffered byte
                return skip + k, False
            if k:  # no start in buf[:k]: go on after it
                skip += k
                prev = buf[pos + skip - 1]
            window *= 4

    def _on_found(self) -> None:
        self._end_episode()

    def _end_episode(self) -> None:
        """Queue the ``Resynced`` event of a finished episode (if bytes were skipped)."""
        if self._rs is not None:
            self._events.append(self._resynced(self._rs, True, self._b.offset))

    def _skip_step(self) -> bool:
        """Skip toward ``_skip_end``; True once it is reached."""
        left = self._skip_end - self._b.offset
        take = self._b.discard_to(self._skip_end)
        self.undecoded_bytes += take
        if take == left:
            self._mode = self._normal
            self._scan = self._b.pos
            return True
        return False


# -------------------------------------------------------------------------- lines

_LINE = 1
_LONG = 2  # skipping an oversize line up to its LF
_BLOCK = 3


class LineFramer(_Framer):
    """Control lines (LF-terminated, a CR before the LF stripped, bare LF accepted), each
    optionally followed by exact-size blocks the caller asks for with ``read_exact``.

    A line longer than ``max_line_bytes`` (not counting CR LF) is reported as ``Oversize``
    and skipped up to its LF without being buffered.
    """

    __slots__ = ("max_line_bytes", "_long", "_long_head", "_long_quiet", "_blk_n",
                 "_blk_left", "_blk_keep", "_blk_parts", "_blk_kept", "_blk_hash",
                 "_blk_start", "_blk", "_blk_trailer", "_blk_lenient")

    def __init__(
        self,
        *,
        max_line_bytes: int = 4096,
        resync: ResyncFn | None = resync_after_lf,
        start_offset: int | None = None,
    ) -> None:
        super().__init__(resync, start_offset)
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be >= 1")
        self.max_line_bytes = max_line_bytes
        self._mode = self._normal = _LINE
        # oversize line being skipped
        self._long: Extent = _NOWHERE  # where it began (its first byte's packet)
        self._long_head = b""
        self._long_quiet = False  # skipping the rest of a line given up for the budget
        # block being read
        self._blk_n = 0
        self._blk_left = 0
        self._blk_keep = 0
        self._blk_parts: list[bytes] = []
        self._blk_kept = 0
        self._blk_hash: _Hash | None = None
        self._blk_start = 0
        self._blk: Extent | None = None  # the block's bytes consumed so far
        self._blk_trailer = b""
        self._blk_lenient: tuple[bytes, ...] = ()

    # ---- in-place scanning (compiled fast paths, e.g. dissectors.nats.fastpath) ----

    @property
    def at_line(self) -> bool:
        """Between units in line mode: the next buffered byte starts a line."""
        return self._mode == _LINE and not self._events

    def scan_view(self) -> tuple[bytearray, int, int, Sequence[Chunk]]:
        """``(buffer, read position, stream offset of buffer[0], provenance chunks)``
        for a scanner that parses whole units in place; it reports back with
        ``consumed``.  Valid until the next ``feed``.  These are the
        ``ProvenanceBuffer``'s own ``data``, ``pos``, ``base`` and ``chunks`` (or
        ``(last,)``: the bytes held came in one chunk), whose ``Chunk`` tuples are what
        ``dissectors/nats/_speedups.c`` reads."""
        b = self._b
        return b.data, b.pos, b.base, b.chunks or (b.last,)

    def consumed(self, nbytes: int) -> None:
        """A scanner decoded ``nbytes`` of whole units at the read position."""
        self.decoded_bytes += nbytes
        b = self._b
        b.pos = self._scan = b.pos + nbytes
        b.chunk_at(b.base + b.pos)  # forget the chunks wholly before it

    def direct_ready(self, offset: int) -> bool:
        """Whether a scanner may parse the next feed, which starts at ``offset``, straight
        from the caller's bytes instead of this framer's buffer (``took``): between units
        in line mode, nothing held, queued or told to the budget, and ``offset`` where
        the stream goes on.  Then the bytes would be the buffer's whole unresolved part
        after ``feed``, at read position 0, so the scanner sees what ``scan_view`` would
        show it; what it does not take goes through ``feed`` and ``consumed`` as usual."""
        b = self._b
        return (self._mode == _LINE and not self._events and not self._told and b.started
                and b.pos == len(b.data) and offset == b.base + b.pos)

    def took(self, data: bytes, last: Chunk) -> None:
        """A scanner read all of ``data``, the next bytes of the stream (``direct_ready``
        said so), as whole units, straight from the caller's bytes; ``last`` is the
        provenance record of its last packet.  The framer stands where ``feed(data)``
        then ``consumed(len(data))`` would have left it, without copying ``data``: the
        bytes count fed and decoded, nothing is held, the byte before the read position
        (a resync rule's ``prev_byte``) is ``data``'s last, and ``last`` is the
        provenance of what comes next.  Why: on a STAN or Liftbridge capture nearly every
        TCP segment is one whole NATS operation, and the buffer's append, compaction and
        chunk bookkeeping cost more Python than the scan of it.  The framer then waits
        for more bytes, holding none: ``hold_budget`` written out (nothing was told the
        budget, ``direct_ready``)."""
        n = len(data)
        self.fed_bytes += n
        self.decoded_bytes += n
        self._prev_byte = data[-1]
        self._scan = 0
        self._waiting = True
        self._b.passed(n, last)
        if self.budget is not None:
            self._tell(0)  # (a hold past the limit asks for a reclaim)

    def read_exact(
        self,
        nbytes: int,
        *,
        keep_bytes: int | None = None,
        sha256: bool = False,
        trailer: bytes = b"",
        lenient_trailers: tuple[bytes, ...] = (),
    ) -> None:
        """The next event is a ``Block`` of exactly ``nbytes`` (then ``trailer`` checked).

        Only the first ``keep_bytes`` (None: all) are kept; the rest stream past, hashed
        when ``sha256`` is set.  ``lenient_trailers`` are alternatives accepted with status
        ``LENIENT``.  Call right after receiving a ``Line`` (or a ``Block``).
        """
        if self._mode != _LINE or self._events:
            raise ValueError("read_exact outside a line boundary")
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        self._mode = _BLOCK
        self._blk_n = self._blk_left = nbytes
        self._blk_keep = nbytes if keep_bytes is None else min(max(keep_bytes, 0), nbytes)
        self._blk_parts = []
        self._blk_kept = 0
        self._blk_hash = hashlib.sha256() if sha256 else None
        b = self._b
        self._blk_start = b.base + b.pos
        self._blk = None
        self._blk_trailer = trailer
        self._blk_lenient = lenient_trailers

    def _inflight(self) -> int:
        if self._mode == _BLOCK:
            return self._blk_n - self._blk_left
        return 0

    def _budget_bytes(self) -> int:
        """What the budget is told: the bytes of a line whose LF has not come.  Nothing
        else is held for long (a block streams past; an oversize line is not buffered).
        A complete line waiting in the buffer (a scanner working in place waits for the
        payload that follows it, at most ``fastpath.MAX_FAST_TOTAL``) is not this
        framer's to give up and is not counted."""
        b = self._b
        buf = b.data
        pos = b.pos
        n = len(buf) - pos
        # (nothing held first: a scanner that took every whole unit, once per segment)
        if not n or self._mode != _LINE or self._events:
            return 0
        scan = self._scan
        if scan < len(buf):
            if buf.find(b"\n", scan if scan > pos else pos) >= 0:
                return 0
            self._scan = len(buf)  # (no LF up to here: the next search starts after it)
        return n

    def _release_partial(self) -> None:
        """A line whose LF has not come is given up like one too long to buffer: its
        bytes are undecoded, a ``Released`` event says so, and the rest of it is skipped
        up to its LF as it streams past; parsing resumes with the next line.  Only while
        the framer waits for bytes: between a ``Line`` and the caller's ``read_exact`` the
        line is the caller's."""
        n = self._budget_bytes() if self._waiting else 0
        if not n:
            return
        given_up = self._b.skip(n)
        limit = self.budget.limit_bytes if self.budget is not None else 0
        self._events.append(Released(limit, None, *given_up, "line"))
        self.undecoded_bytes += n
        self._clear()
        self._long = given_up
        self._long_head = b""
        self._long_quiet = True
        self._mode = _LONG

    def _next_event(self) -> Event | _NeedMore:
        """The next ``Line``/``Block``/``Oversize``/``Resynced``/``Released`` event, or
        ``NEED_MORE``."""
        if self._events:
            return self._events.pop(0)
        while True:
            mode = self._mode
            if mode == _LINE:
                b = self._b
                buf = b.data
                pos = b.pos
                scan = self._scan
                i = buf.find(b"\n", scan if scan > pos else pos)
                if i < 0:
                    n = len(buf) - pos
                    if n > self.max_line_bytes + 1:
                        self._start_long()
                        continue
                    self._scan = len(buf)
                    return NEED_MORE
                end = i + 1
                cr = i > pos and buf[i - 1] == 13
                j = i - 1 if cr else i
                base = b.base
                ev: Event
                if j - pos > self.max_line_bytes:
                    ev = Oversize(end - pos, bytes(buf[pos : pos + HEAD_BYTES]),
                                  *b.extent(base + pos, base + end))
                    self.undecoded_bytes += end - pos
                else:
                    # (the hot path: ``ProvenanceBuffer.extent`` written out, no Extent)
                    c1 = b.chunk_at(base + pos)
                    c2 = c1 if base + i < c1[0] else b.chunk_at(base + i)
                    ev = Line(bytes(buf[pos:j]), not cr, base + pos, base + end, c1[1], c2[2],
                              c1[3], c2[4])
                    self.decoded_bytes += end - pos
                b.pos = self._scan = end
                return ev
            if mode == _BLOCK:
                blk = self._block_step()
                return NEED_MORE if blk is None else blk
            if mode == _LONG:
                b = self._b
                buf = b.data
                pos = b.pos
                i = buf.find(b"\n", pos)
                stop = len(buf) if i < 0 else i + 1
                room = HEAD_BYTES - len(self._long_head)
                if room > 0:
                    self._long_head += buf[pos : min(stop, pos + room)]
                b.pos = stop
                self.undecoded_bytes += stop - pos
                if i < 0:
                    return NEED_MORE
                self._mode = _LINE
                self._scan = stop
                if self._long_quiet:  # the rest of a line given up (``Released``)
                    continue
                base = b.base
                line = self._long.through(b.extent(base + i, base + stop))
                return Oversize(line.end - line.start, self._long_head, *line)
            if mode == _RESYNC:
                if not self._resync_step():
                    return NEED_MORE
                if self._events:
                    return self._events.pop(0)
                continue
            if mode == _SKIP:
                if not self._skip_step():
                    return NEED_MORE
                continue
            return NEED_MORE  # _DEAD

    def _start_long(self) -> None:
        off = self._b.offset
        self._long = self._b.extent(off, off + 1)
        self._long_head = b""
        self._long_quiet = False
        self._mode = _LONG

    def _block_step(self) -> Block | None:
        b = self._b
        buf = b.data
        pos = b.pos
        base = b.base
        left = self._blk_left
        avail = len(buf) - pos
        trailer = self._blk_trailer
        # fast path: the whole block and its trailer are buffered
        if left == self._blk_n and avail >= left + len(trailer) and (
            not trailer or buf.startswith(trailer, pos + left)
        ):
            n = left
            keep = self._blk_keep
            data = bytes(buf[pos : pos + keep])
            h = self._blk_hash
            if h is not None:
                if keep == n:
                    h.update(data)
                else:
                    with memoryview(buf) as mv, mv[pos : pos + n] as part:
                        h.update(part)
                digest = h.hexdigest()
            else:
                digest = None
            end = pos + n + len(trailer)
            # (the hot path: ``ProvenanceBuffer.extent`` written out, no Extent)
            c1 = b.chunk_at(base + pos)
            c2 = c1 if (base + end - 1 < c1[0] or end == pos) else b.chunk_at(base + end - 1)
            b.pos = end
            self.decoded_bytes += end - pos
            self._mode = _LINE
            self._scan = end
            return Block(data, n, digest, TrailerStatus.OK if trailer else TrailerStatus.NONE,
                         trailer, base + pos, base + end, c1[1], c2[2], c1[3], c2[4])
        # streaming path
        if left:
            if not avail:
                return None
            take = avail if avail < left else left
            self._blk_piece(base + pos, take)
            room = self._blk_keep - self._blk_kept
            if room > 0:
                piece = bytes(buf[pos : pos + min(room, take)])
                self._blk_parts.append(piece)
                self._blk_kept += len(piece)
            if self._blk_hash is not None:
                with memoryview(buf) as mv, mv[pos : pos + take] as part:
                    self._blk_hash.update(part)
            pos += take
            b.pos = pos
            left -= take
            self._blk_left = left
            if left:
                return None
            avail -= take
        # block complete: the trailer
        status = TrailerStatus.NONE
        used = 0
        found = b""
        if trailer:
            found = bytes(buf[pos : pos + len(trailer)])
            if found == trailer:
                status, used = TrailerStatus.OK, len(trailer)
            else:
                alt = next((a for a in self._blk_lenient if buf.startswith(a, pos)), None)
                if alt is not None:
                    status, used, found = TrailerStatus.LENIENT, len(alt), alt
                else:
                    cands = (trailer, *self._blk_lenient)
                    for cand in cands:
                        if avail < len(cand) and cand.startswith(found):
                            return None  # cannot decide yet
                    if avail < len(trailer):
                        # decided, but ``trailer_found`` always shows len(trailer) bytes,
                        # whatever the cut: the same stream cut differently must give the
                        # same row (a gap or the end flushes what there is)
                        return None
                    return self._emit_block(TrailerStatus.BAD, found, used)
        return self._emit_block(status, found, used)

    def _blk_piece(self, start: int, n: int) -> Extent:
        """Bytes ``[start, start + n)`` of the block being read (or of its trailer) were
        consumed: they extend its provenance (an empty piece counts only as the first)."""
        piece = self._b.extent(start, start + n)
        blk = self._blk
        if blk is None:
            blk = piece
        elif n:
            blk = blk.through(piece)
        self._blk = blk
        return blk

    def _emit_block(self, status: TrailerStatus, found: bytes, used: int) -> Block:
        b = self._b
        blk = self._blk
        if used or blk is None:  # (an empty block: its provenance is where it is)
            blk = self._blk_piece(b.offset, used)
            b.pos += used
        self.decoded_bytes += self._blk_n + used
        h = self._blk_hash
        end = b.offset
        self._mode = _LINE
        self._scan = b.pos
        data = b"".join(self._blk_parts)
        self._blk_parts = []
        return Block(data, self._blk_n, h.hexdigest() if h is not None else None, status,
                     found, self._blk_start, end, blk.ts_first_ns, blk.ts_last_ns,
                     blk.frame_first, blk.frame_last)

    def _drop_partial(self) -> None:
        if self._mode == _BLOCK:
            self.undecoded_bytes += self._blk_n - self._blk_left
            self._blk_parts = []

    def _flush_partial(self, out: list[Event], end: int) -> int | None:
        mode = self._mode
        base = self._b.base
        pos = self._b.pos
        if mode == _LINE:
            n = len(self._b.data) - pos
            if n:  # (``end`` is where the bytes buffered end)
                out.append(Dropped("line", None, None, *self._b.extent(base + pos, end)))
            return None
        if mode == _LONG:
            if self._long_quiet:  # already reported (``Released``)
                return None
            got = self._long.through(self._b.extent(end - 1, end))
            out.append(Dropped("long_line", None, None, *got))
            return None
        if mode == _BLOCK:
            block_end = self._blk_start + self._blk_n
            known = block_end + len(self._blk_trailer)
            if self._blk_left == 0:
                # the block itself is complete; only its trailer is missing
                found = self.peek(len(self._blk_trailer))
                out.append(self._emit_block(TrailerStatus.MISSING, found, 0))
                return known
            self.undecoded_bytes += self._blk_n - self._blk_left
            blk = self._blk if self._blk is not None else Extent.of(0, 0, self._b.last,
                                                                    self._b.last)
            self._blk_parts = []
            self._mode = _LINE
            out.append(Dropped("block", known, None, self._blk_start, end, blk.ts_first_ns,
                               blk.ts_last_ns, blk.frame_first, blk.frame_last))
            return known
        return super()._flush_partial(out, end)

    def gap(self, offset: int, nbytes: int) -> list[Event]:
        out = super().gap(offset, nbytes)
        # a known unit end at or past the gap's end is where parsing resumes
        gap_end = offset + nbytes
        for i, ev in enumerate(out):
            if type(ev) is Dropped and ev.declared_end is not None:
                resume = ev.declared_end if ev.declared_end >= gap_end else None
                out[i] = ev._replace(resume_at=resume)
        return out


# ----------------------------------------------------------------- length prefixed

_HEADER = 1
_OVERSIZE = 2


class LengthPrefixedFramer(_Framer):
    """Units whose total length the protocol reads from their first bytes.

    ``pdu_length(view)`` gets a memoryview of the unresolved bytes (it must not keep it)
    and returns the whole unit's length in bytes, ``None`` when it needs more header
    bytes, or a number <= 0 when no valid unit starts here.  The framer then reports
    ``Invalid`` (once per episode) and resynchronises with ``resync`` from the next byte;
    a candidate the resync rule proposes is confirmed only by a valid ``pdu_length``, and
    the ``Resynced`` event is emitted then.  Without a resync rule every byte up to the
    next gap is undecoded.  Units longer than ``max_pdu_bytes`` are reported as
    ``Oversize`` and skipped as they stream past, never buffered.
    """

    __slots__ = ("_pdu_length", "max_pdu_bytes", "_want", "_ov", "_ov_end", "_ov_head",
                 "_hunting")

    def __init__(
        self,
        pdu_length: Callable[[memoryview], int | None],
        *,
        max_pdu_bytes: int,
        resync: ResyncFn | None = None,
        start_offset: int | None = None,
    ) -> None:
        super().__init__(resync, start_offset)
        if max_pdu_bytes < 1:
            raise ValueError("max_pdu_bytes must be >= 1")
        self._pdu_length = pdu_length
        self.max_pdu_bytes = max_pdu_bytes
        self._mode = self._normal = _HEADER
        self._want = -1  # length of the unit at the read position, once known
        self._ov: Extent = _NOWHERE  # the oversize unit's first byte
        self._ov_end = 0  # where it ends (declared)
        self._ov_head = b""
        self._hunting = False  # a resync episode is open until a valid length confirms it

    def start_resync(self) -> None:
        super().start_resync()
        self._hunting = self._mode == _RESYNC

    def _on_found(self) -> None:
        pass  # the episode ends when pdu_length accepts the candidate

    def _next_event(self) -> Event | _NeedMore:
        """The next ``Pdu``/``Oversize``/``Invalid``/``Resynced``/``Released`` event, or
        ``NEED_MORE``."""
        if self._events:
            return self._events.pop(0)
        while True:
            mode = self._mode
            if mode == _HEADER:
                b = self._b
                buf = b.data
                pos = b.pos
                avail = len(buf) - pos
                if not avail:
                    return NEED_MORE
                n = self._want
                if n < 0:
                    asked = self._ask_length(pos)
                    if asked is not None:
                        n = asked
                    elif avail < self.max_pdu_bytes:
                        return NEED_MORE
                    else:
                        n = -1  # no header decision within a whole maximum unit
                    if n <= 0:
                        ev = self._invalid(pos)
                        if ev is not None:
                            return ev
                        continue
                    if self._hunting:
                        self._hunting = False
                        self._end_episode()
                    if n > self.max_pdu_bytes:
                        self._start_oversize(pos, n)
                    else:
                        self._want = n
                    if self._events:
                        return self._events.pop(0)
                    continue
                if avail < n:
                    return NEED_MORE
                base = b.base
                # (the hot path: ``ProvenanceBuffer.take`` written out, no Extent)
                c1 = b.chunk_at(base + pos)
                c2 = c1 if base + pos + n - 1 < c1[0] else b.chunk_at(base + pos + n - 1)
                b.pos = pos + n
                self._want = -1
                self.decoded_bytes += n
                return Pdu(bytes(buf[pos : pos + n]), base + pos, base + pos + n, c1[1], c2[2],
                           c1[3], c2[4])
            if mode == _OVERSIZE:
                b = self._b
                left = self._ov_end - b.offset
                room = HEAD_BYTES - len(self._ov_head)
                if room > 0:
                    self._ov_head += b.data[b.pos : b.pos + min(room, left)]
                take = b.discard_to(self._ov_end)
                self.undecoded_bytes += take
                if take < left:
                    return NEED_MORE
                end = self._ov_end
                unit = self._ov.through(self._b.extent(end - 1, end))
                self._mode = _HEADER
                return Oversize(end - unit.start, self._ov_head, *unit)
            if mode == _RESYNC:
                if not self._resync_step():
                    return NEED_MORE
                continue
            if mode == _SKIP:
                if not self._skip_step():
                    return NEED_MORE
                continue
            return NEED_MORE  # _DEAD

    def _ask_length(self, pos: int) -> int | None:
        mv = memoryview(self._b.data)
        view = mv[pos:]
        try:
            n = self._pdu_length(view)
        finally:
            view.release()
            mv.release()
        return n if n is None else int(n)

    def _invalid(self, pos: int) -> Invalid | None:
        """No unit starts at ``pos``: report it (unless hunting already) and resync from
        the next byte."""
        ev = None
        if self._hunting:
            self._note_skip(pos, 1)
        else:
            off = self._b.base + pos
            ev = Invalid(bytes(self._b.data[pos : pos + self._decisive(pos)]),
                         *self._b.extent(off, off + 1))
        self.undecoded_bytes += 1
        self._rs_prev = self._b.data[pos]
        self._b.pos = pos + 1
        self._mode = _RESYNC
        self._hunting = True
        return ev

    def _decisive(self, pos: int) -> int:
        """How many bytes an ``Invalid`` shows: the shortest prefix at ``pos`` on which
        ``pdu_length`` decides (at most ``HEAD_BYTES``), not whatever happens to be
        buffered, so the same stream cut differently gives the same event."""
        avail = min(len(self._b.data) - pos, HEAD_BYTES)
        mv = memoryview(self._b.data)
        try:
            for k in range(1, avail + 1):
                with mv[pos : pos + k] as view:
                    if self._pdu_length(view) is not None:
                        return k
        finally:
            mv.release()
        return avail

    def _release_partial(self) -> None:
        """A partial unit of known length (the only kind that can be large: up to
        ``max_pdu_bytes``) is given up like one too large to buffer: its bytes are
        undecoded, the rest is skipped as it streams past, and a ``Released`` event
        says so.  A header still incomplete, or a resync in progress, holds little and
        is kept; so is a unit whose bytes are all there (it is read next)."""
        pos = self._b.pos
        pending = len(self._b.data) - pos
        if self._mode != _HEADER or self._hunting or not 0 < pending < self._want:
            return  # (a whole unit buffered is read at the next call: kept)
        given_up = self._b.skip(pending)
        limit = self.budget.limit_bytes if self.budget is not None else 0
        self._events.append(Released(limit, given_up.start + self._want, *given_up))
        self._mode = _SKIP
        self._skip_end = given_up.start + self._want
        self._want = -1
        self.undecoded_bytes += pending
        self._clear()

    def _start_oversize(self, pos: int, n: int) -> None:
        off = self._b.base + pos
        self._ov = self._b.extent(off, off + 1)
        self._ov_end = off + n
        self._ov_head = b""
        self._mode = _OVERSIZE

    def _flush_partial(self, out: list[Event], end: int) -> int | None:
        mode = self._mode
        if mode == _HEADER:
            pos = self._b.pos
            n = len(self._b.data) - pos
            known = None
            if n and self._hunting:
                # an unconfirmed candidate: part of the resync episode
                self._resync_flush(out, end)
            elif n:
                base = self._b.base
                if self._want < 0:
                    w = self._ask_length(pos)
                    if w is not None and 0 < w <= self.max_pdu_bytes:
                        self._want = w
                if self._want > 0:
                    known = base + pos + self._want
                # (``end`` is where the bytes buffered end)
                out.append(Dropped("pdu", known, None, *self._b.extent(base + pos, end)))
            elif self._hunting:
                self._resync_flush(out, end)
            self._want = -1
            return known
        if mode == _OVERSIZE:
            b = self._b
            # (nothing of it received yet: the latest packet's provenance)
            last = b.extent(end - 1, end) if end > self._ov.start else Extent.of(
                end - 1, end, b.last, b.last)
            out.append(Dropped("oversize", self._ov_end, None, *self._ov.through(last)))
            self._mode = _HEADER
            return self._ov_end
        return super()._flush_partial(out, end)

    def gap(self, offset: int, nbytes: int) -> list[Event]:
        out = super().gap(offset, nbytes)
        gap_end = offset + nbytes
        for i, ev in enumerate(out):
            if type(ev) is Dropped and ev.declared_end is not None:
                resume = ev.declared_end if ev.declared_end >= gap_end else None
                out[i] = ev._replace(resume_at=resume)
        self._hunting = self._mode == _RESYNC
        return out

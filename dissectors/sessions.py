"""``FramedSession``: the one session driver of the stream dissectors.

Strategy: every stream dissector has the same skeleton — feed the direction's framer,
drain ``next_event()`` until ``NEED_MORE``, handle the events flushed by ``gap()`` and
``close()``, copy the framer's byte counters into the session, turn a ``Released`` unit
(the run's memory budget took it back) into a ``limit.memory`` row, and, with
``--keep-secrets``, run all of it inside ``keeping_secrets()``.  This class is that
skeleton, written once (the built-in NATS, NATS-cluster, Pulsar and Felix sessions and
plugins use it), so a protocol only writes ``on_event`` and the hooks it needs.  It is
part of the plugin API (importable from ``dissectors.api``).

Runs of packets: ``feed_chunks`` takes the bytes of several packets in one call with one
provenance record per packet (the native engine's ``CoalescedData``, which the conveyor
hands on whole), so a bulk flow costs one call per run, not per TCP segment, with the
same rows: a session's rows never depend on how its bytes were cut into feeds.

Gaps: the events of the bytes a direction already received are drained *before* a gap
(or the end) flushes the unit it cut, so rows stay in stream order.  A session that
drains to ``NEED_MORE`` on every feed has nothing left by then, but one that stops early
(the compiled NATS fast path waits for an operation's last byte; a NATS link waits for
the bytes that tell whether an S2 stream starts) must let the reference see those bytes
first.  Nothing is drained *after* a gap: the framer empties its buffer at a gap, so no
event can be ready until the next ``feed``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Protocol

from dissectors.api import Direction, Provenance, Record, Session, Span
from dissectors.framing import NEED_MORE, LengthPrefixedFramer, LineFramer, Released
from dissectors.redaction import keeping_secrets, redact_text, secrets_kept
from reassembly.provenance import Chunk

__all__ = ["FEED_CHUNKS", "LIMIT_MEMORY", "FramedSession", "Layer"]

Framer = LineFramer | LengthPrefixedFramer

LIMIT_MEMORY = "limit.memory"
"""Anomaly kind of what the run's memory budget made a session give up (not a protocol's:
reassembly and every dissector report it alike)."""

_BOTH = (Direction.C2S, Direction.S2C)
# Packets handed to a framer in one ``feed`` at most (``feed_chunks``): a scanner that
# reads every provenance record the framer holds on each call (the compiled NATS scan
# copies them into an array) stays O(records held), however long the run.
FEED_CHUNKS = 64


class Layer(Protocol):
    """A per-direction transform in front of the framer (e.g. the S2 decompressor of a NATS
    link).  Once ``FramedSession.layers[direction]`` is set, the direction's wire bytes,
    gaps and end go to the layer, which feeds whatever framer it decodes into (draining
    it with ``FramedSession.drain`` and flushing it with ``FramedSession.flush``)."""

    def feed(self, data: bytes, span: Span, out: list[Record]) -> None: ...

    def gap(self, offset: int, nbytes: int, ts_ns: int, out: list[Record]) -> None: ...

    def close(self, out: list[Record]) -> None: ...


class FramedSession(Session):
    """A ``Session`` over two framers, ``framers[Direction.C2S]`` and
    ``framers[Direction.S2C]`` (a ``LineFramer`` or ``LengthPrefixedFramer`` each).

    Subclasses call ``super().__init__(c2s_framer, s2c_framer)`` and implement
    ``on_event``; they may override ``on_gap`` and ``on_close`` for state that spans
    several framing units (a gap or the end at a unit boundary flushes no ``Dropped``
    event, yet a multi-unit message may be half read).
    ``feed``, ``gap`` and ``close``, draining, ``limit.memory`` rows and byte accounting
    are done here.  While the events flushed by ``close()`` and ``on_close`` are handled,
    ``self.closing`` is True (so a ``Dropped`` unit can be told "cut by the end" from "cut
    by a gap").  ``keep_secrets`` True (set it in ``__init__``) runs the session inside
    ``dissectors.redaction.keeping_secrets()``; a class that sets ``redact_details`` has
    the details of ``anomaly`` pass the redaction gate unless secrets are kept.
    """

    redact_details: ClassVar[bool] = False
    keep_secrets: bool = False

    def __init__(self, c2s: Framer, s2c: Framer) -> None:
        super().__init__()
        # a list: a layer may replace a direction's framer (the one it decodes into)
        self.framers: list[Framer] = [c2s, s2c]
        self.layers: list[Layer | None] = [None, None]
        self.closing = False

    # ---- hooks -------------------------------------------------------------------

    @abstractmethod
    def on_event(self, direction: Direction, event: Any, out: list[Record]) -> None:
        """Handle one framing event of ``direction``; append rows/anomalies to ``out``.

        Events: ``Line``/``Block`` (``LineFramer``) or ``Pdu``/``Invalid``
        (``LengthPrefixedFramer``), and ``Oversize``, ``Resynced``, ``Dropped`` from both
        (``Released`` is handled here).  The handler may call the framer's
        ``read_exact``, ``reject``, ``start_resync`` or ``abandon``
        (``self.framers[direction]``)."""

    def on_gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int,
               out: list[Record]) -> None:
        """Called after the events a gap flushed from ``direction``'s framer."""

    def on_close(self, ts_ns: int, out: list[Record]) -> None:
        """Called once after both framers were closed and their events handled."""

    def feed_framer(self, direction: Direction, data: bytes, span: Span,
                    chunks: Sequence[Chunk] | None, out: list[Record]) -> None:
        """Feed ``direction``'s framer (no layer in front of it; ``chunks`` as
        ``LineFramer.feed`` takes them) and turn the bytes into events (``drain_fed``).
        A subclass may read the bytes straight from ``data`` instead when its framer
        holds none (``NatsSession``: the compiled scan, no copy into the framer's
        buffer); it must leave the framer, its counters and the rows as this does."""
        self.framers[direction].feed(data, span, chunks)
        self.drain_fed(direction, out)

    def drain_fed(self, direction: Direction, out: list[Record]) -> None:
        """Turn the bytes just fed into events: ``drain``, unless a subclass has a faster
        way for the common case (it must leave what it does not take to ``drain``, which
        also runs before every gap and the end)."""
        self.drain(direction, out)

    def account(self, direction: Direction) -> None:
        """Copy the direction's byte counters from its framer (a layer that consumes wire
        bytes itself overrides this)."""
        framer = self.framers[direction]
        self.decoded_bytes[direction] = framer.decoded_bytes
        self.undecoded_bytes[direction] = framer.undecoded_bytes

    # ---- Session API -------------------------------------------------------------

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        if self.keep_secrets and not secrets_kept():  # --keep-secrets: gate off
            with keeping_secrets():
                return self.feed(direction, data, span)
        out: list[Record] = []
        layer = self.layers[direction]
        if layer is None:
            self.feed_framer(direction, data, span, None, out)
        else:
            layer.feed(data, span, out)
            self.account(direction)
        return out

    def feed_chunks(self, direction: Direction, data: bytes, span: Span,
                    chunks: Sequence[Chunk]) -> list[Record]:
        """``feed`` of several packets' bytes in one call (a run of in-order segments of
        one direction, ``reassembly.provenance.CoalescedData``): ``span`` brackets them,
        ``chunks`` holds one provenance record per packet (``CoalescedData.chunks``), so
        the rows, their order and their packets are those of one ``feed`` per packet.
        The framer takes up to ``FEED_CHUNKS`` packets at a time; a direction behind a
        layer (which reads its own units), or a subclass with a ``feed`` of its own, gets
        one ``feed`` per packet."""
        if self.keep_secrets and not secrets_kept():
            with keeping_secrets():
                return self.feed_chunks(direction, data, span, chunks)
        out: list[Record] = []
        own_feed = type(self).feed is not FramedSession.feed
        layers = self.layers
        n = len(chunks)
        if n <= FEED_CHUNKS and not own_feed and layers[direction] is None:
            self.feed_framer(direction, data, span, chunks, out)  # the usual run: no copy
            return out
        base = start = span.offset
        i = 0
        while i < n:
            if own_feed or layers[direction] is not None:  # (a drain may set a layer)
                c = chunks[i]
                i += 1
                out += self.feed(direction, data[start - base:c[0] - base],
                                 Span(start, c[1], c[2], c[3], c[4]))
                start = c[0]
                continue
            part = chunks[i:i + FEED_CHUNKS]
            first, last = part[0], part[-1]
            piece = data[start - base:last[0] - base]
            piece_span = Span(start, first[1], last[2], first[3], last[4])
            i += len(part)
            self.feed_framer(direction, piece, piece_span, part, out)
            start = part[-1][0]
        return out

    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        if self.keep_secrets and not secrets_kept():
            with keeping_secrets():
                return self.gap(direction, offset, nbytes, ts_ns)
        out: list[Record] = []
        layer = self.layers[direction]
        if layer is None:
            self.drain(direction, out)  # what came before the gap goes first
            self.flush(direction, self.framers[direction].gap(offset, nbytes), out)
        else:
            layer.gap(offset, nbytes, ts_ns, out)
        self.on_gap(direction, offset, nbytes, ts_ns, out)
        self.account(direction)
        return out

    def close(self, ts_ns: int) -> list[Record]:
        if self.keep_secrets and not secrets_kept():
            with keeping_secrets():
                return self.close(ts_ns)
        out: list[Record] = []
        self.closing = True
        for direction in _BOTH:
            layer = self.layers[direction]
            if layer is None:
                self.drain(direction, out)
                self.flush(direction, self.framers[direction].close(), out, closing=True)
            else:
                layer.close(out)
        self.on_close(ts_ns, out)
        for direction in _BOTH:
            self.account(direction)
        return out

    # ---- for subclasses and layers -------------------------------------------------

    def drain(self, direction: Direction, out: list[Record]) -> None:
        """Handle the events of ``direction``'s framer until it needs more bytes."""
        nxt = self.framers[direction].next_event
        on_event = self.on_event
        while True:
            ev = nxt()
            if ev is NEED_MORE:
                break
            if type(ev) is Released:
                self._released(direction, ev, out)
            else:
                on_event(direction, ev, out)
        self.account(direction)

    def flush(self, direction: Direction, events: Iterable[Any], out: list[Record], *,
              closing: bool = False) -> None:
        """Handle events a gap (``closing`` False) or the end flushed from a framer."""
        was = self.closing
        self.closing = closing
        for ev in events:
            self.handle(direction, ev, out)
        self.closing = was

    def handle(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        """One event: ``on_event``, except for what the framer did on its own."""
        if type(ev) is Released:
            self._released(direction, ev, out)
        else:
            self.on_event(direction, ev, out)

    def anomaly(self, out: list[Record], kind: str, detail: str, direction: Direction,
                ev: Provenance, start: int | None = None, end: int | None = None) -> None:
        """An ``anomalies`` row about the bytes of event ``ev`` (or ``start``..``end``
        with its timestamps and frames).  ``kind`` may be a protocol's ``StrEnum``; the
        row gets its plain string."""
        if self.redact_details and not self.keep_secrets:
            detail = redact_text(detail)
        out.append(Record.anomaly(
            str(kind), detail, direction,
            ev.start if start is None else start, ev.end if end is None else end,
            ev.ts_first_ns, ev.ts_last_ns, ev.frame_first, ev.frame_last,
        ))

    def _released(self, direction: Direction, ev: Released, out: list[Record]) -> None:
        """A partial unit given up for the run's memory budget (the framer skips the rest
        of it and parses on after it)."""
        self.anomaly(out, LIMIT_MEMORY, ev.detail(), direction, ev)

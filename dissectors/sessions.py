"""``FramedSession``: a ``Session`` that drives one framer per direction.

Strategy: almost every stream dissector has the same skeleton — feed the direction's
framer, drain ``next_event()`` until ``NEED_MORE``, handle the events flushed by ``gap()``
and ``close()``, copy the framer's byte counters into the session.  This class is that
skeleton, written once, so a protocol only writes ``on_event``.  It is part of the plugin
API (importable from ``dissectors.api``); built-in dissectors may use it too.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from dissectors.api import Direction, Record, Session, Span
from dissectors.framing import NEED_MORE, LengthPrefixedFramer, LineFramer, Released

__all__ = ["FramedSession"]

Framer = LineFramer | LengthPrefixedFramer


class FramedSession(Session):
    """A ``Session`` over two framers, ``framers[Direction.C2S]`` and
    ``framers[Direction.S2C]`` (a ``LineFramer`` or ``LengthPrefixedFramer`` each).

    Subclasses call ``super().__init__(c2s_framer, s2c_framer)`` and implement
    ``on_event``; they may override ``on_gap`` and ``on_close`` for state that spans
    several framing units (a gap or the end at a unit boundary flushes no ``Dropped``
    event, yet a multi-unit message may be half read).
    ``feed``, ``gap`` and ``close``, draining, and byte accounting are done here.  While
    the events flushed by ``close()`` are handled, ``self.closing`` is True (so a
    ``Dropped`` unit can be told "cut by the end" from "cut by a gap").
    """

    def __init__(self, c2s: Framer, s2c: Framer) -> None:
        super().__init__()
        self.framers: tuple[Framer, Framer] = (c2s, s2c)
        self.closing = False

    @abstractmethod
    def on_event(self, direction: Direction, event: Any, out: list[Record]) -> None:
        """Handle one framing event of ``direction``; append rows/anomalies to ``out``.

        Events: ``Line``/``Block`` (``LineFramer``) or ``Pdu``/``Invalid``
        (``LengthPrefixedFramer``), and ``Oversize``, ``Resynced``, ``Dropped`` from both.
        The handler may call the framer's ``read_exact``, ``reject``, ``start_resync`` or
        ``abandon`` (``self.framers[direction]``)."""

    def on_gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int,
               out: list[Record]) -> None:
        """Called after the events a gap flushed from ``direction``'s framer."""

    def on_close(self, ts_ns: int, out: list[Record]) -> None:
        """Called once after both framers were closed and their events handled."""

    # ---- Session API -------------------------------------------------------------

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        framer = self.framers[direction]
        framer.feed(data, span)
        out: list[Record] = []
        self._drain(direction, framer, out)
        return out

    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        framer = self.framers[direction]
        out: list[Record] = []
        for ev in framer.gap(offset, nbytes):
            self._handle(direction, ev, out)
        self.on_gap(direction, offset, nbytes, ts_ns, out)
        self._drain(direction, framer, out)
        return out

    def close(self, ts_ns: int) -> list[Record]:
        out: list[Record] = []
        self.closing = True
        for direction in (Direction.C2S, Direction.S2C):
            framer = self.framers[direction]
            for ev in framer.close():
                self._handle(direction, ev, out)
        self.on_close(ts_ns, out)
        for direction in (Direction.C2S, Direction.S2C):
            self._account(direction, self.framers[direction])
        return out

    # ---- internals -----------------------------------------------------------------

    def _drain(self, direction: Direction, framer: Framer, out: list[Record]) -> None:
        nxt = framer.next_event
        handle = self._handle
        while True:
            ev = nxt()
            if ev is NEED_MORE:
                break
            handle(direction, ev, out)
        self._account(direction, framer)

    def _handle(self, direction: Direction, ev: object, out: list[Record]) -> None:
        """``on_event``, except for what the framer did on its own: a partial unit given
        up for the run's memory budget (``Released``) is a ``limit.memory`` row here."""
        if type(ev) is Released:
            out.append(Record.anomaly("limit.memory", ev.detail(), direction, ev.start,
                                      ev.end, ev.ts_first_ns, ev.ts_last_ns, ev.frame_first,
                                      ev.frame_last))
        else:
            self.on_event(direction, ev, out)

    def _account(self, direction: Direction, framer: Framer) -> None:
        self.decoded_bytes[direction] = framer.decoded_bytes
        self.undecoded_bytes[direction] = framer.undecoded_bytes

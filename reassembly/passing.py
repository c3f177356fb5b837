"""Runs of TCP segments that no layer above TCP wants, handed past the layers.

Why: with the native engine most events of a bulk capture are ``CoalescedData`` of flows
that no layer above TCP (TLS, WebSocket) takes; each layer's generator only passes such
a run on, and with ~4 segments per run (flows interleave) that walk through every
generator is paid tens of thousands of times.  ``Passing`` lets those runs go straight
from the source (the engine) to the consumer, without any layer naming another and
without the conveyor naming a protocol.

The contract: a layer that may take a TCP flow's bytes *joins* (``join``) and says, per
flow direction, when it would pass that direction's ``CoalescedData`` on exactly as it
is, with nothing of its own to update (``passes``), and when that is no longer so
(``holds``; also when the flow ends, so nothing outlives its flow).  A layer that never
takes a ``CoalescedData`` (QUIC: TCP is not its own) need not join.  ``veto`` adds a
test that keeps a flow's runs in the layers anyway (a ``RoleSwaps`` of a layer still
turning the flow's events).  ``around(source, stack)`` is ``stack(source)`` with every
run that all members pass (and no veto holds) handed over directly; so is a TCP
``StreamData`` of such a flow direction (the engine's run of one segment): a member
passes one exactly as it passes a run of that direction, and says so when one passes
through it as when a run does.

A member that watches the first byte of each segment near a direction's start (the TLS
layer: a client segment that begins with a handshake record within the first 64 KiB may
start TLS) passes that direction *unless* a segment begins with that byte before a
stream offset (``passes(..., watch=(before, byte))``): such a run goes through the
layers, which then decide on it as without ``Passing``; every other run skips them.
Why: a short flow never gets past such a window, so without the watch its runs never
skipped the layers (a STAN capture of 1,380 short flows: every segment went through
every layer).  A watched direction is not among ``keys`` (the engine's ``movable``: a
run moved among other flows' would reach the layers out of order if it had to stop).

Why the order and every state stay those of the full stack: every layer yields all the
events an input made before it asks for its next input, so when the source gives an
event, the consumer has taken everything the stack made of the events before it; a run
that every layer would pass on untouched comes out of the stack right then, so handing
it over directly gives the same sequence, and the layers' states are those they would
have had (a member says ``passes`` only where passing the run changes nothing it would
decide on).  Whether a run may skip is asked when the source gives it, after the
consumer took everything before it, so a member's ``holds`` (made while it handled an
earlier event) always counts.  To stop feeding the stack, the driver sends ``PAUSE``
through it (an object every layer passes on as any event it does not know): when
``PAUSE`` comes out, nothing is in flight.  That costs one trip through the layers
when the source switches from runs the layers take to runs that skip them, not one
per run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Final

from reassembly.events import FlowInfo, StreamData
from reassembly.provenance import SEGMENT, CoalescedData

__all__ = ["PAUSE", "Passing"]


class _Pause:
    """The marker the driver sends through the layers (see the module docstring)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PAUSE"


PAUSE: Final = _Pause()
_ALWAYS: Final = (True,)  # the ``active`` of a veto that is always asked


class Passing:
    """Which flow directions' ``CoalescedData`` every member layer passes on as it is
    (the module docstring).  ``skipped`` counts the runs handed past the layers."""

    __slots__ = ("_members", "_marks", "_keys", "_vetoes", "_actives", "_watches", "_watched",
                 "skipped", "pauses")

    def __init__(self) -> None:
        self._members = 0
        self._marks: dict[int, int] = {}  # flow direction -> bit set of the members passing
        self._keys: set[int] = set()  # flow directions every member passes, no watch
        self._vetoes: list[tuple[Sized, Callable[[FlowInfo], bool]]] = []
        self._actives: tuple[Sized, ...] = ()  # the vetoes' ``active`` collections
        # flow direction -> member -> (before, byte): what the member watches (``passes``)
        self._watches: dict[int, dict[int, tuple[int, int]]] = {}
        # flow directions every member passes, some watching: their watches
        self._watched: dict[int, tuple[tuple[int, int], ...]] = {}
        self.skipped = 0
        self.pauses = 0

    def join(self) -> int:
        """A new member; returns its index (for ``passes``/``holds``).  Join before the
        first event: a member that joins later has not said what it passes."""
        index = self._members
        self._members += 1
        return index

    def veto(self, holds: Callable[[FlowInfo], bool], active: Sized | None = None) -> None:
        """``holds(flow)`` True keeps that flow's runs in the layers for now.  ``active``:
        a live collection that is empty whenever ``holds`` is False for every flow (the
        flows a ``RoleSwaps`` turns), so that ``holds`` is not called per run while it
        is empty."""
        self._vetoes.append((_ALWAYS if active is None else active, holds))
        self._actives = tuple(active for active, _ in self._vetoes)

    def passes(self, member: int, flow_id: int, direction: int,
               watch: tuple[int, int] | None = None) -> None:
        """``member`` passes this flow direction's runs on as they are from now on;
        ``watch=(before, byte)``: except a run with a segment that begins with ``byte``
        at a stream offset below ``before`` (the module docstring)."""
        key = flow_id << 1 | direction
        marks = self._marks.get(key, 0) | 1 << member
        self._marks[key] = marks
        watches = self._watches.get(key)
        if watch is not None:
            if watches is None:
                watches = self._watches[key] = {}
            watches[member] = watch
        elif watches is not None:
            watches.pop(member, None)
            if not watches:
                del self._watches[key]
                watches = None
        if marks == (1 << self._members) - 1:
            if watches:
                self._keys.discard(key)
                self._watched[key] = tuple(watches.values())
            else:
                self._keys.add(key)
                self._watched.pop(key, None)

    def holds(self, member: int, flow_id: int, direction: int | None = None) -> None:
        """``member`` no longer passes this flow direction's runs (``direction`` None: both
        directions; what a member says when it takes the flow, or when the flow ends)."""
        for d in (0, 1) if direction is None else (direction,):
            key = flow_id << 1 | d
            marks = self._marks.pop(key, 0) & ~(1 << member)
            if marks:
                self._marks[key] = marks
            watches = self._watches.get(key)
            if watches is not None:
                watches.pop(member, None)
                if not watches:
                    del self._watches[key]
            self._keys.discard(key)
            self._watched.pop(key, None)

    @property
    def keys(self) -> set[int]:
        """The flow directions (``flow_id << 1 | direction``) every member passes with no
        watch, vetoes aside: the live set, not a copy (read it, do not change it)."""
        return self._keys

    def skips(self, ev: CoalescedData | StreamData) -> bool:
        """Whether the run (or the one segment) ``ev`` goes past the layers."""
        flow = ev.flow
        key = flow.flow_id << 1 | ev.direction
        if key not in self._keys:
            watches = self._watched.get(key)
            if watches is None:
                return False
            if len(watches) == 1 and type(ev) is StreamData and ev.offset < watches[0][0]:
                # (``_watch_stops``' usual case written out: one watch, one segment that
                # begins within it; a short flow's client side, each of its segments)
                data = ev.data
                if data and data[0] == watches[0][1]:
                    return False
            elif self._watch_stops(key, ev, watches):
                return False
        if any(self._actives):  # (one C call while every veto is idle)
            for active, holds in self._vetoes:  # noqa: SIM110 - (no generator per event)
                if active and holds(flow):
                    return False
        return True

    def _watch_stops(self, key: int, ev: CoalescedData | StreamData,
                     watches: tuple[tuple[int, int], ...]) -> bool:
        """Whether a watch of ``key`` stops ``ev``: a segment of it begins with the
        watched byte below the watch's offset.  A run that begins at or past every
        watch's offset makes them moot (offsets only grow): the key is then passed with
        no watch (among ``keys``, so the engine may move its runs), as the members would
        say of it once past their windows."""
        offset = ev.offset
        live = False
        for before, byte in watches:
            if offset < before:
                live = True
                if type(ev) is StreamData:
                    data = ev.data
                    if data and data[0] == byte:
                        return True
                elif _run_stops(ev, before, byte):  # type: ignore[arg-type]
                    return True
        if not live:
            del self._watches[key], self._watched[key]
            self._keys.add(key)
        return False

    @property
    def vetoing(self) -> bool:
        """Whether a veto may hold a flow now: while False (every veto's ``active``
        collection empty) none holds any (``skips_flow`` is then ``keys`` alone)."""
        return any(self._actives)

    def skips_flow(self, flow: FlowInfo, direction: int) -> bool:
        """Whether a run of this flow direction would go past the layers now (one that
        no member watches: ``keys``)."""
        if flow.flow_id << 1 | direction not in self._keys:
            return False
        for active, holds in self._vetoes:  # noqa: SIM110 - (no generator made per event)
            if active and holds(flow):
                return False
        return True

    def around(self, source: Iterable[Any], stack: Callable[[Iterator[Any]], Iterable[Any]]
               ) -> Iterator[Any]:
        """``stack(source)`` (the layers over the source's events), with the runs every
        member passes handed to the consumer directly (see the module docstring)."""
        events = iter(source)
        held: list[Any] = []  # the one event the driver read and the layers get next
        skips = self.skips

        def feed() -> Iterator[Any]:
            while True:
                if held:
                    ev = held.pop()
                else:
                    ev = next(events, None)  # (no event is None)
                    if ev is None:
                        return
                    if (type(ev) is CoalescedData or type(ev) is StreamData) and skips(ev):
                        held.append(ev)
                        self.pauses += 1
                        yield PAUSE  # drains the layers; the driver takes ``ev``
                        continue
                yield ev

        for out in stack(feed()):
            if out is not PAUSE:
                yield out
                continue
            n = 1
            yield held.pop()
            for ev in events:  # (at its end, the layers see it through ``feed``)
                cls = type(ev)
                if (cls is StreamData or cls is CoalescedData) and skips(ev):
                    n += 1
                    yield ev
                    continue
                held.append(ev)
                break
            self.skipped += n


def _run_stops(ev: CoalescedData, before: int, byte: int) -> bool:
    """Whether a segment of the run ``ev`` that begins below ``before`` begins with
    ``byte``."""
    offset, data = ev.offset, ev.data
    start = offset
    for end, _ts, _frame in SEGMENT.iter_unpack(ev.segments):
        if start >= before:
            break
        if data[start - offset] == byte:
            return True
        start = end
    return False

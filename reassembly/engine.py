"""Capture file → ordered reassembly events.  The one entry point of the package.

Strategy: frames go through the network decoder (link layer, IP, defragmentation) and
the flow table (TCP/UDP); both append events to one list that is drained after every
frame, so events come out in capture order with anomalies in place.  Idle flows and
stale fragments are expired on capture time, checked once per second of it, which
keeps memory bounded by the limits and not by the capture length.

Split by flow (``FlowSplit``, for ``msgcap dissect --workers N``): the flow table still
follows every flow but emits the events of the flows ``owns`` names only (see
``reassembly.flows``); the layers above (QUIC, TLS, WebSocket) then see only those.
What could still make an owned flow's events differ from those of a full run is state
shared across flows; ``FlowSplit.cross_flow`` names what of it was touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, overload

from reassembly.capture import CaptureReader, Frame, open_capture
from reassembly.events import Anomaly, CaptureEvent, Event, FlowInfo, QuicEvent
from reassembly.flows import DEFAULT_SERVER_PORTS, FlowTable, RoleSwaps
from reassembly.limits import SECOND_NS, Limits
from reassembly.network import FirstReports, L4Packet, NetworkDecoder
from reassembly.passing import Passing
from reassembly.quic.keylog import KeyLog
from reassembly.quic.layer import QuicLayer, add_capture_secrets
from reassembly.tls import TlsLayer

if TYPE_CHECKING:
    from reassembly._engine import Run
    from reassembly.provenance import CoalescedData
    from reassembly.websocket import WebSocketJoin

TCP, UDP = 6, 17
_Item = TypeVar("_Item")  # a frame, or a batch of them (``capture_events``)


class Clock(Protocol):
    """When a ``Reassembler`` expires idle flows and stale fragments.

    ``tick`` runs after every frame with the frame's time; it calls
    ``Reassembler.sweep`` (and ``flows.restamp_untimed``) when it decides to."""

    def tick(self, reassembler: Reassembler, ts_ns: int) -> None: ...


class CaptureClock:
    """The capture's own time drives expiry (the default ``Clock``).

    The clock is the largest frame time seen so far (captures are not always in time
    order); a sweep runs when it moved a second past the last one, so expiry costs
    nothing per frame and memory stays bounded on any capture length."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.last_sweep_ns: int | None = None

    def tick(self, reassembler: Reassembler, ts_ns: int) -> None:
        if ts_ns > self.now_ns:
            if not self.now_ns:
                # frames without a time (pcapng SPBs, zeroed headers) came first: take
                # them to be at the first known time, not at the epoch, or every flow
                # they opened would look idle for decades
                reassembler.flows.restamp_untimed(ts_ns)
            self.now_ns = ts_ns
        if self.last_sweep_ns is None:
            self.last_sweep_ns = ts_ns
        elif self.now_ns - self.last_sweep_ns >= SECOND_NS:
            self.last_sweep_ns = self.now_ns
            reassembler.sweep(self.now_ns)


class Reassembler:
    """Feed frames, get events.  Holds the network decoder and the flow table.

    ``owns(flow_id)``: the flows whose events come out (None: all; ``FlowTable``).
    ``clock``: when idle flows and fragments expire (default ``CaptureClock``);
    ``firsts``: which once-per-capture anomalies are reported (``FirstReports``).
    Both exist for a reassembler that sees only part of a capture (a Spark task).
    ``server_ports``: ports that mark a flow's server when no handshake tells
    (``FlowTable``; the analyzer passes its dissectors' ports)."""

    def __init__(
        self,
        limits: Limits | None = None,
        owns: Callable[[int], bool] | None = None,
        *,
        clock: Clock | None = None,
        firsts: FirstReports | None = None,
        server_ports: Collection[int] = DEFAULT_SERVER_PORTS,
    ) -> None:
        # a run's limits carry its memory budget (``Limits.with_budget``)
        self.limits = (limits or Limits()).with_budget()
        self._out: list[Event] = []
        self.network = NetworkDecoder(self.limits, self._out.append, firsts)
        self.flows = FlowTable(self.limits, self._out.append, owns, server_ports)
        self.clock: Clock = clock if clock is not None else CaptureClock()
        self.counters = {"other_proto": 0}

    def step(self, frame: Frame) -> L4Packet | None:
        """One frame: decoded, fed to the flow table, then the clock's tick; its events
        wait in the out list (``drain``).  Returns the decoded packet (None when the
        decoder took it: a fragment held, a bad or foreign frame), which says what flow
        it touched (``reassembly.native`` reviews that flow afterwards)."""
        pkt = self.network.decode(frame)
        if pkt is not None:
            missing = pkt.l4_len - len(pkt.payload) if pkt.truncated else 0
            if pkt.proto == TCP:
                self.flows.tcp(
                    pkt.src, pkt.dst, pkt.payload, pkt.ts_ns, pkt.frame, pkt.vlans, missing
                )
            elif pkt.proto == UDP:
                self.flows.udp(pkt.src, pkt.dst, pkt.payload, pkt.ts_ns, pkt.frame, pkt.vlans)
            else:
                self.counters["other_proto"] += 1
        self.clock.tick(self, frame.ts_ns)
        return pkt

    @property
    def pending(self) -> list[Event]:
        """The events of the frames stepped since the last drain, in order (the caller
        that steps frames itself yields and clears them, as ``process`` does)."""
        return self._out

    def process(self, frames: Iterable[Frame]) -> Iterator[Event]:
        """Events for ``frames`` followed by the end-of-capture flush."""
        out = self._out
        step = self.step
        for frame in frames:
            step(frame)
            if out:
                yield from out
                out.clear()
        yield from self.finish()

    def sweep(self, now_ns: int) -> None:
        """Expire idle flows and stale fragment sets at capture time ``now_ns``."""
        self.flows.expire(now_ns)
        self.network.flush(now_ns)

    def finish(self) -> Iterator[Event]:
        """Expire everything still open (end of capture); the flows' close events come
        a batch of flows at a time (``FlowTable.close_all_steps``), not all held at once."""
        self.network.flush(None)
        out = self._out
        for _ in self.flows.close_all_steps():
            yield from out
            out.clear()
        yield from out
        out.clear()


def capture_damage_events(reader: CaptureReader) -> list[Event]:
    """Damage found in the capture file, as anomalies (known once reading stopped)."""
    return [
        Anomaly("capture.damaged", f"{d.reason} (file offset {d.offset})", None, d.frame)
        for d in reader.info.damage
    ]


def stream_layers(events: Iterable[CaptureEvent | CoalescedData], limits: Limits,
                  keylog: KeyLog, flows: FlowTable | None = None, passing: Passing | None = None
                  ) -> Iterator[CaptureEvent | WebSocketJoin | CoalescedData]:
    """The layers above TCP: TLS decryption (``reassembly.tls``), then WebSocket
    (``reassembly.websocket``); each replaces the stream events of the flows it takes
    (a ``CoalescedData`` of such a flow as the ``StreamData`` it stands for) and passes
    every other event on.  ``flows``: the table the events come from (its
    ``swap_roles`` fixes roles).  ``passing``: both layers join it (``reassembly.passing``)."""
    from reassembly.websocket import WebSocketLayer

    roles = None
    if flows is not None:
        roles = RoleSwaps(immediate=True)
        roles.table = flows
    return WebSocketLayer(limits, roles, passing).process(
        TlsLayer(limits, keylog, passing=passing).process(events))


def layered_events(events: Iterable[Event | CoalescedData], quic: QuicLayer,
                   out: list[Event | QuicEvent], limits: Limits, flows: FlowTable,
                   passing: Passing | None = None
                   ) -> Iterator[CaptureEvent | WebSocketJoin | CoalescedData]:
    """Every layer above TCP/UDP reassembly over its events (``flows``' table): QUIC
    (``quic``, whose ``emit`` appends to ``out``), then ``stream_layers``; with
    ``passing``, the runs every layer passes go past them all (``Passing.around``)."""
    if passing is None:
        return stream_layers(quic.process(events, out), limits, quic.keylog, flows)
    return passing.around(events, lambda evs: stream_layers(
        quic.process(evs, out), limits, quic.keylog, flows, passing))


def keylog_problems(keylog: KeyLog) -> list[Event]:
    """Lines of a ``--keylog`` file that did not parse, or were dropped past the limit,
    as anomalies (shown redacted: see ``reassembly.quic.keylog.redacted_line``)."""
    out: list[Event] = []
    if keylog.bad_lines:
        out.append(Anomaly("quic.keylog", f"{keylog.bad_lines} key-log line(s) of the key log "
                           f"file do not parse (first: {keylog.first_bad!r})", None, None))
    if keylog.dropped:
        out.append(Anomaly("limit.keylog", f"{keylog.dropped} key-log line(s) of the key log "
                           f"file dropped: more than {len(keylog)} client randoms", None, None))
    return out


class FlowSplit:
    """``capture_events`` for one share of a capture split by flow: only the events of
    the flows ``owns(flow_id)`` names, plus every event tied to no flow.

    The events of an owned flow are then those of a full run as long as no state shared
    across flows was used; ``cross_flow()`` (read it after the run, even one that ended
    early) names what of it was touched in this share:

    * ``quic``: the QUIC layer took a datagram — it links UDP flows into one connection
      by connection id (migration), which a share without the other flow cannot see.
      Until the layer takes its first datagram its decisions depend on the datagram
      alone, so if no share's layer took one, neither did a full run's;
    * ``quic-keylog``: a pcapng Decryption Secrets Block met after a UDP flow began had
      lines the QUIC layer reports; that anomaly (tied to no flow) is stamped with the
      last datagram the layer saw, which may be of a flow this share does not follow.

    Not shared: IP defragmentation (before the flow table, every share does all of
    it), the flow table (every share follows every flow), the key log (read only; its
    pcapng additions come with frames every share reads), TLS and WebSocket (state per
    flow).  State above the events (payload dissectors learning on one connection what
    they use on another) is the caller's to check."""

    def __init__(self, owns: Callable[[int], bool]) -> None:
        self.owns = owns
        self.quic: QuicLayer | None = None  # set by capture_events
        self.flows: FlowTable | None = None
        self.late_keylog_anomalies = 0

    def cross_flow(self) -> list[str]:
        """What shared state this share touched (empty: its owned flows' events are
        those of a full run, as far as reassembly goes)."""
        reasons = []
        if self.quic is not None and self.quic.counters["datagrams"]:
            reasons.append("quic")
        if self.late_keylog_anomalies:
            reasons.append("quic-keylog")
        return reasons


Reorder = Callable[[list[tuple[FlowInfo, int]]], "bool | None"]
"""``capture_events``' ``reorder``: the consumer's word on a stretch of runs joined per
flow, asked with each run's flow and direction."""


def _reorder(passing: Passing, reorder: Reorder, runs: list[Run]) -> bool | None:
    """Whether the engine yields a stretch's runs joined per flow.  Only the runs of
    flow directions every layer passes as they are (``Passing.keys``, the engine's
    ``movable``) moved among other flows' (the layers see the others in the
    reference's order); a veto on one of them keeps the reference's order.  Then as the
    consumer says."""
    if not passing.vetoing:  # (the usual case: no veto to ask per run)
        return reorder([(run[0], run[2]) for run in runs])
    keys = passing.keys
    flows = []
    for info, _conn, direction, *_ in runs:
        if info.flow_id << 1 | direction in keys and not passing.skips_flow(info, direction):
            return False
        flows.append((info, direction))
    return reorder(flows)


@overload
def capture_events(
    reader: CaptureReader, limits: Limits | None = None, keylog: KeyLog | None = None,
    split: FlowSplit | None = None, server_ports: Collection[int] = DEFAULT_SERVER_PORTS,
    roles: RoleSwaps | None = None, *, chunks: Literal[False] = False,
    reorder: Reorder | None = None, stream_done: bool = False,
) -> Iterator[CaptureEvent | WebSocketJoin]: ...


@overload
def capture_events(
    reader: CaptureReader, limits: Limits | None = None, keylog: KeyLog | None = None,
    split: FlowSplit | None = None, server_ports: Collection[int] = DEFAULT_SERVER_PORTS,
    roles: RoleSwaps | None = None, *, chunks: bool, reorder: Reorder | None = None,
    stream_done: bool = False,
) -> Iterator[CaptureEvent | WebSocketJoin | CoalescedData]: ...


def capture_events(
    reader: CaptureReader,
    limits: Limits | None = None,
    keylog: KeyLog | None = None,
    split: FlowSplit | None = None,
    server_ports: Collection[int] = DEFAULT_SERVER_PORTS,
    roles: RoleSwaps | None = None,
    *,
    chunks: bool = False,
    reorder: Reorder | None = None,
    stream_done: bool = False,
) -> Iterator[CaptureEvent | WebSocketJoin | CoalescedData]:
    """Every event of an open capture: TCP/UDP reassembly, QUIC decryption and streams,
    TLS over TCP decryption, WebSocket (keys from ``keylog`` and from pcapng Decryption
    Secrets Blocks as they appear), and the capture's damage at the end.  TCP/UDP
    reassembly runs on the native engine (``reassembly.native.engine_for``: a whole
    pcap or pcapng file, unless ``MSGCAP_NATIVE_ENGINE=0``) with the same events.  ``split``:
    only the events of the flows it owns and those tied to no flow (``FlowSplit``).
    ``server_ports``: as for ``Reassembler``.  ``roles``: connected to this run's flow
    table, for a consumer that learns a flow's roles (``RoleSwaps``).

    ``chunks``: a consumer that takes ``CoalescedData`` (the conveyor) gets the engine's
    runs of consecutive segments of one flow direction as one event each wherever no
    layer owns the flow (``CoalescedData.split`` gives the events it stands for, in
    place); without it every stream event is a ``StreamData``.  ``reorder`` (with
    ``chunks``): a consumer that may take a stretch of the engine's runs joined per flow
    (``NativeReassembler`` ``coalesce="flow"``: each flow's events in its order, flows
    interleaved otherwise) says so per stretch, asked with the ``(flow, direction)`` of
    its runs once every layer passes all of them: True takes that stretch so, False
    takes it in the reference's order, None every later one too.  ``stream_done``: a
    ``StreamDone`` for each TCP flow both of whose sides closed with every byte
    delivered, for a consumer that ends the flow's decoding there (the layers keep it
    for a flow they took: theirs ends at its ``StreamClose``)."""
    # one memory budget shared by every layer of this run (``Limits.with_budget``)
    limits = (limits or Limits()).with_budget()
    if keylog is not None:
        # a key log file's own bad lines (pcapng DSBs are checked as they come)
        yield from keylog_problems(keylog)
    out: list[Event | QuicEvent] = []
    owns = split.owns if split is not None else None
    # the native engine (``reassembly.native``) when it can take the capture: the same
    # events, the reference deciding everything but the common path
    from reassembly import native

    engine = native.engine_for(reader, limits, owns, server_ports,
                               "adjacent" if chunks else "none")
    reassembler = engine.ref if engine is not None else Reassembler(
        limits, owns, server_ports=server_ports)
    reassembler.flows.stream_done = stream_done
    quic = QuicLayer(limits, out.append, keylog, reassembler.flows.swap_roles)
    if split is not None:
        split.quic, split.flows = quic, reassembler.flows
    info = reader.info

    def with_secrets(items: Iterable[_Item]) -> Iterator[_Item]:
        # each frame (or the engine's batch of frames) after the keys of the pcapng
        # Decryption Secrets Blocks read before it reached the QUIC layer
        seen = add_capture_secrets(quic, info.secrets, 0)
        for item in items:
            if len(info.secrets) != seen:
                log = quic.keylog
                before = (log.bad_lines, log.dropped)
                seen = add_capture_secrets(quic, info.secrets, seen)
                if (split is not None and (log.bad_lines, log.dropped) != before
                        and reassembler.flows.counters["udp_flows"]):
                    split.late_keylog_anomalies += 1
            yield item

    events: Iterable[Event | CoalescedData]
    if engine is not None:
        batches = with_secrets(native.reader_batches(reader))
        events = engine.process(batches) if chunks else engine.events(batches)
    else:
        events = reassembler.process(with_secrets(reader))
    passing = None
    if engine is not None and chunks:  # runs no layer takes go past the layers
        passing = Passing()
        # keys of a pcapng DSB (``with_secrets``) may have queued an anomaly in ``out``:
        # no run skips the layers until the QUIC layer let it out, in its place
        passing.veto(lambda _flow: bool(out), out)
        if reorder is not None:
            engine.coalesce = "flow"
            engine.movable = passing.keys
            engine.reorder = lambda runs: _reorder(passing, reorder, runs)
    layered = layered_events(events, quic, out, limits, reassembler.flows, passing)
    if roles is not None:
        layered = roles.connect(reassembler.flows, layered)
    yield from layered
    yield from capture_damage_events(reader)


def read_events(
    path: str | os.PathLike[str], limits: Limits | None = None, keylog: KeyLog | None = None
) -> Iterator[CaptureEvent | WebSocketJoin]:
    """All events of one capture file (see ``capture_events``)."""
    with open_capture(path) as reader:
        yield from capture_events(reader, limits, keylog)

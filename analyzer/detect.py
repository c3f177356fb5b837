"""Which dissector owns a TCP flow: forced by port, else probes with port hints.

Strategy: until a flow is decided, its stream events are held (at most
``PROBE_LIMIT_BYTES`` per direction) and every candidate dissector is asked
``probe(direction, prefix)``; dissectors whose default port matches the server port
are asked first, but a port is only a hint — a probe must say yes.  A candidate is
dropped once it says no for a direction; the flow locks to the first candidate that
says yes for a direction and no for none.  Held events are then replayed into the new
session, so no byte is decoded twice or lost.

A direction whose start was not captured (``FlowInfo.mid_stream``, or a stream that
begins with a gap) may begin inside a PDU: it is asked ``probe_joined`` instead, which
lets a protocol that can resynchronise claim it on a unit further in, and its "no"
rules nothing out.  Its first bytes before that unit reach the session like any
others (the session, told which directions joined late by the option ``joined``, skips
them as undecoded).  When every direction joined late and the roles were only guessed
from the ports, a candidate that says yes to a direction read as the other side's (a
NATS server's ``MSG`` where the port hint put the client) claims the flow with its roles
swapped (``swap_roles``, role source ``ops``).  A flow nobody claims stays unclaimed
(its bytes count as undecoded) and is recorded so in the ``flows`` table.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter, methodcaller
from typing import Any

from dissectors.api import Dissector, Record, Session, Span, Verdict
from reassembly.events import DIRECTIONS, Direction, FlowInfo, RoleSource, Transport

# Enough for any of our protocols to show its first PDU header; past it the flow is
# declared unclaimed rather than buffering without bound.
PROBE_LIMIT_BYTES = 8192
# A flow with a direction joined late is not given up while the other direction has not
# spoken (its first op may be the only one that checks out), up to this many held bytes.
JOINED_HOLD_BYTES = 8 * PROBE_LIMIT_BYTES
# what a flow's candidate ranking depends on, per dissector (``Detector._ranked``)
_CARRIED_ON = methodcaller("carried_on")
_PORTS_NAME = attrgetter("default_ports", "name")
# rankings kept at most (a capture with many server ports: forget them all, start again)
_MAX_RANKINGS = 1024
_NO, _YES = Verdict.NO, Verdict.YES


class FlowDispatch:
    """Per-flow detection state, then the locked dissector's session."""

    __slots__ = (
        "flow",
        "stream_id",
        "candidates",
        "session",
        "dissector",
        "held",
        "prefix",
        "unclaimed",
        "joined",
        "ends",
    )

    def __init__(self, flow: FlowInfo, candidates: list[type[Dissector]], forced: bool) -> None:
        self.flow = flow
        self.candidates = candidates
        self.session: Session | None = None
        self.dissector: type[Dissector] | None = None
        self.held: list[tuple] = []  # ("data", dir, bytes, span) | ("gap", dir, off, n, ts)
        self.prefix = [bytearray(), bytearray()]
        self.unclaimed = not candidates
        # per direction: its stream began with a gap (its start was not captured)
        self.joined = [False, False]
        # the conveyor's per-direction envelope of the flow's column rows, made at its
        # first (``analyzer.pipeline._move_ends``)
        self.ends: tuple[Any, ...] | None = None
        if forced:
            self.dissector = candidates[0]

    @property
    def decided(self) -> bool:
        return self.session is not None or self.unclaimed


class Detector:
    """Creates a ``FlowDispatch`` per flow and drives probing."""

    def __init__(
        self,
        dissectors: list[type[Dissector]],
        decode_as: dict[int, type[Dissector]] | None = None,
        options: dict[str, Any] | None = None,
        on_session: Callable[[FlowDispatch], None] | None = None,
    ) -> None:
        self.dissectors = sorted(dissectors, key=lambda d: d.name)
        self.decode_as = decode_as or {}
        self.options = options or {}
        # called once a flow has its session, e.g. to hook payload dispatch into it
        self.on_session = on_session or (lambda fd: None)
        # called when a candidate's probe raised (it is then dropped for that flow):
        # the pipeline records it; by default it counts as a silent "no"
        self.on_probe_error: Callable[[FlowDispatch, type[Dissector], BaseException], None] = (
            lambda fd, cand, exc: None)
        # swaps a flow's client and server (``reassembly.flows.RoleSwaps``: the run's
        # flow table, and its events still on their way turned); None: roles stay
        self.swap_roles: Callable[[FlowInfo, RoleSource, tuple[int, int] | None], bool] | None = (
            None)
        # ``_ranked``'s answers, by transport, server port and the dissectors' facts
        self._rankings: dict[tuple[Any, ...], list[type[Dissector]]] = {}

    def start(self, flow: FlowInfo, stream_id: int | None = None) -> FlowDispatch:
        """Detection state for a TCP flow, or for one QUIC stream (``stream_id``)."""
        fd = self._start(flow)
        fd.stream_id = stream_id
        return fd

    def _options_for(self, fd: FlowDispatch) -> dict[str, Any]:
        """Session options; a QUIC stream's session also learns its stream id."""
        if fd.stream_id is None:
            return self.options
        return {**self.options, "stream_id": fd.stream_id}

    def _start(self, flow: FlowInfo) -> FlowDispatch:
        forced = self.decode_as.get(flow.server.port) or self.decode_as.get(flow.client.port)
        if forced is not None and flow.transport in forced.carried_on():
            # its session is made at the flow's first event (``_forced_session``), where
            # the caller guards against dissector errors as for every other call
            return FlowDispatch(flow, [forced], forced=True)
        return FlowDispatch(flow, self._ranked(flow.transport, flow.server.port), forced=False)

    def _ranked(self, transport: Transport, port: int) -> list[type[Dissector]]:
        """The candidates for a flow: the dissectors carried on ``transport``, those whose
        default port is ``port`` first, then by name.  The same answer for the same
        transport, port and dissector facts (``carried_on()``, ``default_ports``,
        ``name``) is taken from ``_rankings``: a run's flows mostly share a server port,
        and ranking again cost ~150 bytecodes a flow.  (A flow's list is its own copy:
        detection replaces it, and a caller may change it.)"""
        ds = self.dissectors
        try:
            key = (transport, port, tuple(map(_CARRIED_ON, ds)), tuple(map(_PORTS_NAME, ds)))
            ranked = self._rankings.get(key)
        except TypeError:  # (a plugin's facts that are no dict key, e.g. a list of ports)
            key, ranked = None, None
        if ranked is None:
            ranked = sorted((d for d in ds if transport in d.carried_on()),
                            key=lambda d: (port not in d.default_ports, d.name))
            if key is not None:
                if len(self._rankings) >= _MAX_RANKINGS:
                    self._rankings.clear()
                self._rankings[key] = ranked
        return ranked.copy()

    def _forced_session(self, fd: FlowDispatch) -> Session | None:
        """The flow's session; a forced flow (``--decode-as``) gets it on first use."""
        if fd.session is None and fd.dissector is not None and not fd.unclaimed:
            fd.session = fd.dissector.session(self._options_for(fd))
            self.on_session(fd)
        return fd.session

    def data(self, fd: FlowDispatch, direction: Direction, data: bytes, span: Span) -> list[Record]:
        if self._forced_session(fd) is not None:
            return fd.session.feed(direction, data, span)
        if fd.unclaimed:
            return []
        fd.held.append(("data", direction, data, span))
        prefix = fd.prefix[direction]
        if len(prefix) < PROBE_LIMIT_BYTES:
            prefix += data[: PROBE_LIMIT_BYTES - len(prefix)]
        return self._probe(fd)

    def gap(self, fd: FlowDispatch, direction: Direction, offset: int, nbytes: int, ts_ns: int):
        if self._forced_session(fd) is not None:
            return fd.session.gap(direction, offset, nbytes, ts_ns)
        if not fd.unclaimed:
            fd.held.append(("gap", direction, offset, nbytes, ts_ns))
            if not fd.prefix[direction]:
                fd.joined[direction] = True
        return []

    def close(self, fd: FlowDispatch, ts_ns: int) -> list[Record]:
        if self._forced_session(fd) is not None:
            return fd.session.close(ts_ns)
        fd.unclaimed = True
        fd.held.clear()
        return []

    def _probe(self, fd: FlowDispatch) -> list[Record]:
        """Ask the remaining candidates; lock, give up, or keep waiting."""
        still: list[type[Dissector]] = []
        mid = fd.flow.mid_stream
        joined = fd.joined
        late = [mid[0] or joined[0], mid[1] or joined[1]]  # (per direction, by number)
        prefix = fd.prefix
        for cand in fd.candidates:
            try:
                verdicts: dict[Direction, Verdict] = {}
                for d in DIRECTIONS:
                    if prefix[d]:
                        v = (cand.probe_joined if late[d] else cand.probe)(d, bytes(prefix[d]))
                        # (a Verdict already is its own Verdict(): no enum lookup per answer)
                        verdicts[d] = v if type(v) is Verdict else Verdict(v)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - a plugin's sys.exit() too
                # a probe must never raise: one that does (or answers no Verdict) is a
                # bug of its dissector, which is dropped for this flow and reported
                self.on_probe_error(fd, cand, exc)
                continue
            # a direction captured mid-stream may begin inside a PDU: its "no" proves
            # nothing, so only a direction seen from its start can rule a candidate out
            # (a loop over the answers, the enum's members as globals: once a segment
            # per candidate of every flow being detected)
            ruled_out = yes = False
            for d, v in verdicts.items():
                if v is _NO:
                    ruled_out = ruled_out or not late[d]
                elif v is _YES:
                    yes = True
            if ruled_out:
                continue
            if yes:
                return self._lock(fd, cand)
            if self._turned_yes(fd, cand, late) and self._swap(fd):
                return self._lock(fd, cand)
            still.append(cand)
        fd.candidates = still
        if any(late):
            full = all(len(p) >= PROBE_LIMIT_BYTES for p in fd.prefix) or sum(
                len(item[2]) for item in fd.held if item[0] == "data") > JOINED_HOLD_BYTES
        else:
            full = all(len(p) >= PROBE_LIMIT_BYTES or not p for p in fd.prefix)
        if not still or full:
            fd.unclaimed = True
            fd.held.clear()
        return []

    def _turned_yes(self, fd: FlowDispatch, cand: type[Dissector], late: list[bool]) -> bool:
        """Joined late with roles guessed from the ports (no handshake seen): does a
        direction read as the *other* side's (a NATS server's MSG where the port hint
        put the client)?  Only asked when no direction says yes as it is."""
        flow = fd.flow
        if (self.swap_roles is None or not all(late)
                or flow.role_source not in (RoleSource.PORT, RoleSource.FIRST_PACKET)):
            return False
        try:
            return any(cand.probe_joined(d.flip(), bytes(fd.prefix[d])) == Verdict.YES
                       for d in DIRECTIONS if fd.prefix[d])
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - as in _probe
            self.on_probe_error(fd, cand, exc)
            return False

    def _swap(self, fd: FlowDispatch) -> bool:
        """Swap the flow's client and server (``swap_roles``, role source ``ops``); what
        detection holds is turned with it."""
        if self.swap_roles is None:
            return False
        # the evidence: the data just held (``data`` holds it, then probes)
        span = next(item[3] for item in reversed(fd.held) if item[0] == "data")
        if not self.swap_roles(fd.flow, RoleSource.OPS, (span.ts_last_ns, span.frame_last)):
            return False
        fd.held = [(item[0], item[1].flip(), *item[2:]) for item in fd.held]
        fd.prefix.reverse()
        fd.joined.reverse()
        return True

    def _lock(self, fd: FlowDispatch, cand: type[Dissector]) -> list[Record]:
        fd.dissector = cand
        options = self._options_for(fd)
        mid = fd.flow.mid_stream
        joined = fd.joined
        late = (() if not (mid[0] or joined[0] or mid[1] or joined[1]) else
                tuple(d for d in DIRECTIONS if mid[d] or joined[d]))
        if late:  # the session may start those directions looking for a unit start
            options = {**options, "joined": late}
        fd.session = session = cand.session(options)
        self.on_session(fd)
        records: list[Record] = []
        for item in fd.held:
            if item[0] == "data":
                records += session.feed(item[1], item[2], item[3])
            else:
                records += session.gap(item[1], item[2], item[3], item[4])
        fd.held.clear()
        fd.prefix = [bytearray(), bytearray()]
        return records

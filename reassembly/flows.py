"""The flow table: TCP connections and UDP flows, their roles and their lifetimes.

Strategy: every flow is reachable under both orientations of its 5-tuple, so a packet
costs one dict lookup that also tells its direction.  Live flows sit in three
least-recently-active orders (open TCP, closing TCP, UDP) so idle timeouts are found by
looking only at the front of each, and the table cap evicts the stalest flow first.
Flow ids are handed out in order of first packet, so they are stable for a given
capture and options.

Client and server are decided, in order of trust, by the SYN, the SYN-ACK, well-known or
lower ports, and finally by who spoke first; ``FlowInfo.role_source`` records which.

Split by flow (``owns``, e.g. the flows ``reassembly.flowplan`` gives worker k of
``msgcap dissect --workers N``): the table still tracks every flow — ids, roles, activity order,
eviction, idle expiry, port reuse and closing are decided from every packet exactly as
without ``owns`` — but a flow it does not own is *light*: its directions are
``TcpHalfTracker`` objects (no reassembly, only the sequence base that port reuse reads)
and it emits no event at all (no stream data, gap, close, datagram, or anomaly naming
it, eviction included).  Anomalies tied to no flow (bad headers) are emitted by every
table.  So the events of the owned flows are exactly those a table without
``owns`` emits for them.

A TCP flow that has seen one packet needing no stream state (a SYN, or a bare packet
without ACK, FIN, RST or data: what a SYN flood is made of) is held *young*: one
``bytes`` record (``_YOUNG``) under its packed client-to-server 5-tuple, with no
``FlowInfo``, ``_Tcp``, tracker or endpoints.  Its second packet, or going to sleep,
promotes it to the full form, in place: the same flow id, counters and state as if it
had been full from the start; evicted or closed young, only its ``FlowInfo`` is made.
Young flows are in the open-flows activity order through a queue in order of their
single packet; ``tick`` (a count of TCP packets) says which of the two fronts is older.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import struct
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from reassembly.events import (
    DIRECTIONS,
    Anomaly,
    Datagram,
    Direction,
    Endpoint,
    Event,
    FlowEnd,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamDone,
    Transport,
)
from reassembly.limits import TIER_POOLS, Limits
from reassembly.tcp import TcpHalfStream, TcpHalfTracker

_C2S, _S2C = DIRECTIONS  # (module globals: read per packet, ``DIRECTIONS``)

_E = TypeVar("_E")  # an event of any layer (``turned``, ``Turning.see``)
FlowKey = tuple[bytes, int, bytes, int]
"""A packet's (source address, source port, destination address, destination port)."""

_TCP_HDR = struct.Struct("!HHIIBBH")  # sport, dport, seq, ack, data offset, flags, window
_UDP_HDR = struct.Struct("!HH")
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
# After an idle pause, a packet continues a sleeping flow when its sequence number (or
# its ACK) lies this close to where that side (or its peer) left off.
CONTINUE_SLACK_BYTES = 1 << 20
# Window scale shift assumed when the handshake was not captured (RFC 7323 allows up to
# 14): the most lenient reading of a window, so the window rule never rejects real data.
UNKNOWN_WSCALE = 14


def _wscale_option(options: bytes) -> int | None:
    """The window scale shift in a SYN's options (RFC 7323 §2.2), None if absent."""
    i = 0
    while i < len(options):
        kind = options[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= len(options) or options[i + 1] < 2:
            break
        if kind == 3 and options[i + 1] == 3 and i + 2 < len(options):
            return min(options[i + 2], 14)
        i += options[i + 1]
    return None


try:  # the same in C (the flow table reads it for every SYN and SYN/ACK)
    from reassembly._engine import wscale as _wscale
except ImportError:  # no C compiler at install time, or a module built before it had it
    _wscale = _wscale_option

# What a flow held in its full form costs the run's memory budget (``Limits.budget``).
# Its state here (FlowInfo, client endpoint, key, direction states, table entries): a
# half-open flow in that form measured 1,107 bytes of RSS (300,000 SYNs), rounded up for
# the table's growth steps and longer IPv6 keys: ``LIGHT_FLOW_BYTES``, the charge of a
# flow another process dissects (``owns``), of which this one keeps only that.  A flow
# this process dissects also holds what the consumer of its events keeps for it for as
# long as it lives: the analyzer's dispatch state and the dissector's session with its
# framers, ~14 KB of RSS for an idle NATS connection (20,000 open connections,
# tests/hostile/test_memory_budget.py keeps this from undercounting it).  Charged
# 1,280 bytes as well until 2026-11-28, so a capture of 20,000 open connections peaked
# at 752 MB under the 80 MiB default (docs/robustness.md).  A closing flow is charged
# ``LIGHT_FLOW_BYTES`` (``FlowTable._charge`` says why).
LIGHT_FLOW_BYTES = 1280
FLOW_BYTES = 16 * 1024
# What a young flow (one packet, held as a ``_YOUNG`` record: a half-open flow) costs:
# 184-208 bytes of RSS over IPv4, 249-273 over IPv6, by where the dict is in its growth
# (100,000-360,000 SYNs; tests/hostile/test_memory_budget.py keeps this from
# undercounting it), rounded up for VLAN tags (docs/robustness.md).
HALF_OPEN_FLOW_BYTES = 320
# Endpoints remembered to be shared between flows (``FlowTable._endpoint``); the cache
# is emptied when full, so it costs at most this many entries.
_ENDPOINT_CACHE = 4096

# Ports on which a server listens, taken as proof of the server side when no handshake
# was captured (``FlowTable(server_ports=...)``).  This package knows no broker: the
# analyzer passes the ports its dissectors declare (``Dissector.default_ports``, plugins
# included, and ``--decode-as`` ports) joined to this default, the well-known ports of
# services the layers here read or meet themselves (TLS and WebSocket over HTTP(S),
# QUIC, DNS over TLS) and of common services (FTP, SSH, SMTP, DNS, NTP).  Ephemeral
# ports are never in here.
DEFAULT_SERVER_PORTS = frozenset({21, 22, 25, 53, 80, 123, 443, 853, 8080})
# The anomaly kind ``FlowTable.swap_roles`` emits for a TCP flow (its place in the event
# order says which of the flow's events are in which orientation).
ROLES_SWAPPED = "flow.roles_swapped"


def _ip_text(raw: bytes) -> str:
    """An address's text as ``ipaddress`` writes it.  IPv4 by ``inet_ntop``: the same
    dotted quad at a seventh of the cost, which a SYN flood (a new address per flow, the
    endpoint cache no help) pays per flow; IPv6 by ``ipaddress``, as ``inet_ntop`` writes
    some of those differently (an IPv4-mapped address's dotted tail)."""
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    return str(ipaddress.ip_address(raw))


def _server_by_port(server_ports: frozenset[int], sport: int, dport: int) -> bool | None:
    """True if the *source* looks like the server, False if the destination does."""
    s_known, d_known = sport in server_ports, dport in server_ports
    if s_known != d_known:
        return s_known
    if sport == dport:
        return None
    return sport < dport


def _roles_by_port(server_ports: frozenset[int], sport: int, dport: int
                   ) -> tuple[bool, RoleSource]:
    """(source is the server, how we know) when no handshake tells."""
    hint = _server_by_port(server_ports, sport, dport)
    return bool(hint), RoleSource.FIRST_PACKET if hint is None else RoleSource.PORT


_NO_WSCALE: tuple[int | None, int | None] = (None, None)  # shared until a SYN has options

# A young flow's record: flow id, first and last timestamps, frame, tick of its packet,
# the sequence number its packet ends at (ISN + 1 after a SYN), flags (``_Y_*``), role
# source (index in ``_ROLE_SOURCES``), window scale of its SYN (``_NO_SHIFT``: none);
# then its packed client-to-server 5-tuple (``_KEY4``/``_KEY16``), then its VLAN ids.
_YOUNG = struct.Struct("<qqqqqIBBB")
_Y_FLAGS_AT = 44  # offset of the flags byte
_Y_SYN, _Y_OWNED, _Y_S2C, _Y_V6 = 1, 2, 4, 8
_NO_SHIFT = 255
_ROLE_SOURCES = tuple(RoleSource)
_ROLE_INDEX = {source: i for i, source in enumerate(_ROLE_SOURCES)}
_KEY4, _KEY16 = struct.Struct("!4s4sHH"), struct.Struct("!16s16sHH")
_VLAN = struct.Struct("!H")
_PORTS = struct.Struct("!HH")
# Flows closed at the end of the capture before their events are passed on
# (``close_all_steps``): bounds the close events held at once.
CLOSE_BATCH = 4096
# Promoted or closed young flows leave their record in the queue until it reaches the
# front; past this many more of them than live ones the queue is rebuilt without them.
_STALE_SLACK = 4096


def _young_key(rec: bytes) -> bytes:
    """The packed client-to-server 5-tuple inside a young flow's record."""
    end = _YOUNG.size + (36 if rec[_Y_FLAGS_AT] & _Y_V6 else 12)
    return rec[_YOUNG.size:end]


class _Tcp:
    """Per-connection TCP state: two half streams plus close bookkeeping.

    One is held per connection for as long as it lives, so it is lean (a half-open flow
    must cost a few hundred bytes, not kilobytes): a direction has no state until a
    packet is sent in it, then a ``TcpHalfTracker`` (sequence base only) while it has
    sent only a SYN, and a ``TcpHalfStream`` from the first packet that needs one (data,
    FIN, an ACK of the peer's bytes: ``FlowTable._half``).  A flow not ``owned`` (another
    process reassembles it) only ever has trackers."""

    __slots__ = ("info", "key", "c2s", "s2c", "fin", "rst", "closing", "owned", "wscale",
                 "tick")

    def __init__(self, info: FlowInfo, key: FlowKey, owned: bool = True) -> None:
        self.info = info
        self.key = key  # the client-to-server key; the other is its reverse
        self.owned = owned
        # each direction's state (slots rather than a list: one object less a flow)
        self.c2s: TcpHalfStream | TcpHalfTracker | None = None
        self.s2c: TcpHalfStream | TcpHalfTracker | None = None
        self.fin = 0  # bit 1 << direction: that side sent a FIN
        self.rst = False
        self.closing = False
        # window scale shift each direction announced in its SYN (None: no option)
        self.wscale = _NO_WSCALE
        self.tick = 0  # ``FlowTable._ticks`` when it last moved in the open-flows order

    @property
    def halves(self) -> tuple[TcpHalfStream | TcpHalfTracker | None, ...]:
        """(c2s, s2c) states, None for a direction that sent nothing yet."""
        return self.c2s, self.s2c

    def window_bytes(self, direction: Direction, window: int, syn: bool) -> int:
        """A window field in bytes: scaled once both SYNs carried the option (RFC 7323),
        never in a SYN itself; unknown scaling (no handshake seen) is read leniently."""
        if syn:
            return window
        c2s, s2c = self.c2s, self.s2c  # (per ACK: no generator over ``halves``)
        if c2s is None or s2c is None or not (c2s.syn_seen and s2c.syn_seen):
            return window << UNKNOWN_WSCALE
        shift = self.wscale[direction]
        return window << shift if shift is not None and None not in self.wscale else window


class _Udp:
    """A UDP flow in the table: its info and its client-to-server key."""

    __slots__ = ("info", "key")

    def __init__(self, info: FlowInfo, key: FlowKey) -> None:
        self.info = info
        self.key = key


_S = TypeVar("_S", _Tcp, _Udp)  # a flow's state in one of the two key tables


class FlowTable:
    """Turns L4 packets into stream / datagram events.

    ``owns(flow_id)``: whether this table reassembles the flow and emits its events
    (None: every flow); see the module docstring.  ``server_ports``: ports that mark
    the server side of a flow whose handshake was not captured (``DEFAULT_SERVER_PORTS``
    says what the caller adds)."""

    # Hold a flow's first packet as a young record when it can be (module docstring).
    # False makes every flow full from its first packet: the same events, more memory
    # (tests compare the two).
    young_flows = True

    def __init__(
        self,
        limits: Limits,
        emit: Callable[[Event], None],
        owns: Callable[[int], bool] | None = None,
        server_ports: Collection[int] = DEFAULT_SERVER_PORTS,
    ) -> None:
        self.limits = limits
        self.emit = emit
        self.owns = owns
        self.server_ports = frozenset(server_ports)
        # a flow's client-to-server 5-tuple -> its state: one key a flow; a packet
        # found under its reversed 5-tuple travels server to client (``_entry``); TCP
        # and UDP apart (the same 4-tuple may carry both)
        self._tcp_keys: dict[FlowKey, _Tcp] = {}
        self._udp_keys: dict[FlowKey, _Udp] = {}
        # young TCP flows (module docstring): packed 5-tuple -> record, the records in
        # order of their packet (some no longer live: ``_stale`` of them), their count
        self._young_keys: dict[bytes, bytes] = {}
        self._young: deque[bytes] = deque()
        self._stale = 0
        self._young_n = 0
        self._ticks = 0  # TCP packets seen: orders young flows among the open ones
        self._held = 0  # flows registered under their keys, young ones included
        self._light_n = 0  # of them, full flows another process dissects (``owns``)
        self._closing_own = 0  # closing flows dissected here (``_charge``)
        # the TCP flows sweeps (``expire``) put to sleep or ended, for a caller that keeps
        # a copy of the table's flows and empties this after each frame
        # (``reassembly.native``: it reviews these, not every flow); None: not kept
        self.swept: list[_Tcp] | None = None
        self._open: OrderedDict[int, _Tcp] = OrderedDict()
        self._closing: OrderedDict[int, _Tcp] = OrderedDict()
        self._udp: OrderedDict[int, _Udp] = OrderedDict()
        # TCP flows idle past the timeout, buffers freed, still registered under their
        # keys: a continuation wakes them (the same flow), anything else closes them
        self._asleep: OrderedDict[int, _Tcp] = OrderedDict()
        self._next_id = 0
        self._endpoints: dict[tuple[bytes, int], Endpoint] = {}
        # told (flow, old client-to-server key) before a TCP flow's roles swap
        self.on_roles_swapped: Callable[[FlowInfo, FlowKey], None] | None = None
        # emit ``StreamDone`` when both sides closed with every byte delivered (for a
        # consumer that ends its decoding there: ``capture_events(stream_done=True)``)
        self.stream_done = False
        self.counters = {"tcp_bad_header": 0, "other_proto": 0, "tcp_flows": 0, "udp_flows": 0,
                         "light_flows": 0}

    def __len__(self) -> int:
        """Flows in the activity orders (one being created is not there yet)."""
        return (len(self._open) + len(self._closing) + len(self._udp) + len(self._asleep)
                + len(self._young) - self._stale)

    # -- creation / removal -------------------------------------------------------------

    def _new_info(
        self,
        transport: Transport,
        client: Endpoint,
        server: Endpoint,
        source: RoleSource,
        ts_ns: int,
        frame: int,
        vlans: tuple[int, ...],
    ) -> FlowInfo:
        if len(self) >= self.limits.max_flows:
            self._evict(ts_ns, frame)
        info = FlowInfo(
            self._next_id, transport, client, server, source, ts_ns, ts_ns, frame, frame
        )
        info.vlan = vlans
        self._next_id += 1
        return info

    def _keys(self, state: _Tcp | _Udp) -> dict[FlowKey, Any]:
        """The key table ``state`` belongs in (values: ``state``'s class)."""
        return self._tcp_keys if state.__class__ is _Tcp else self._udp_keys

    def _registered(self, state: _Tcp | _Udp) -> bool:
        """``state`` is the flow its key leads to (not one ended since)."""
        return self._keys(state).get(state.key) is state

    def _register(self, state: _Tcp | _Udp) -> None:
        self._keys(state)[state.key] = state
        self._held += 1
        if self.owns is not None and self._light(state):
            self._light_n += 1
        self._hold_budget()

    def _unregister(self, state: _Tcp | _Udp) -> None:
        keys = self._keys(state)
        if keys.get(state.key) is state:
            del keys[state.key]
        self._held -= 1
        if self.owns is not None and self._light(state):
            self._light_n -= 1
        self._hold_budget()

    def _light(self, state: _Tcp | _Udp) -> bool:
        """Another process dissects this flow (only with ``owns``)."""
        if state.__class__ is _Tcp:
            return not state.owned
        return self.owns is not None and not self.owns(state.info.flow_id)

    @staticmethod
    def _entry(keys: dict[FlowKey, _S], key: FlowKey) -> tuple[_S, Direction] | None:
        """The flow a packet with this 5-tuple belongs to, and the packet's direction."""
        state = keys.get(key)
        if state is not None:
            return state, _C2S
        src, sport, dst, dport = key
        state = keys.get((dst, dport, src, sport))
        return None if state is None else (state, _S2C)

    # -- young flows --------------------------------------------------------------------

    def _open_young(self, src: bytes, sport: int, dst: bytes, dport: int, seq: int,
                    flags: int, options: bytes, ts_ns: int, frame: int,
                    vlans: tuple[int, ...]) -> None:
        """A new TCP flow whose first packet needs no stream state: held as a record
        (what ``_open_tcp`` and the rest of ``tcp`` would have made of it, packed)."""
        if flags & SYN:
            src_is_server, source = False, RoleSource.SYN
        else:
            src_is_server, source = _roles_by_port(self.server_ports, sport, dport)
        if len(self) >= self.limits.max_flows:
            self._evict(ts_ns, frame)
        flow_id = self._next_id
        self._next_id += 1
        owned = self.owns is None or self.owns(flow_id)
        if not owned:
            self.counters["light_flows"] += 1
        pack = _KEY4.pack if len(src) == 4 else _KEY16.pack
        key = pack(dst, src, dport, sport) if src_is_server else pack(src, dst, sport, dport)
        bits = (_Y_OWNED if owned else 0) | (_Y_S2C if src_is_server else 0) | (
            _Y_V6 if len(src) != 4 else 0)
        shift = _NO_SHIFT
        if flags & SYN:
            bits |= _Y_SYN
            seq = (seq + 1) % (1 << 32)
            wscale = _wscale(options)
            if wscale is not None:
                shift = wscale
        rec = _YOUNG.pack(flow_id, ts_ns, ts_ns, frame, self._ticks, seq, bits,
                          _ROLE_INDEX[source], shift) + key
        if vlans:
            rec += b"".join(_VLAN.pack(v) for v in vlans)
        self._young_keys[key] = rec
        self._held += 1
        self._young_n += 1
        self._hold_budget()
        self._young.append(rec)
        self.counters["tcp_flows"] += 1

    def _young_entry(self, src: bytes, sport: int, dst: bytes, dport: int
                     ) -> tuple[_Tcp, Direction] | None:
        """The young flow a packet belongs to, promoted, and the packet's direction."""
        pack = _KEY4.pack if len(src) == 4 else _KEY16.pack
        keys = self._young_keys
        rec = keys.get(pack(src, dst, sport, dport))
        if rec is not None:
            return self._promote(rec), _C2S
        rec = keys.get(pack(dst, src, dport, sport))
        return None if rec is None else (self._promote(rec), _S2C)

    def _young_info(self, rec: bytes) -> tuple[FlowInfo, FlowKey]:
        """A young flow's ``FlowInfo`` (as ``tcp`` would have left it after its packet)
        and its client-to-server 5-tuple."""
        flow_id, ts_first, ts_last, frame, _, _, bits, role, _ = _YOUNG.unpack_from(rec)
        size = 16 if bits & _Y_V6 else 4
        at = _YOUNG.size
        src, dst = rec[at:at + size], rec[at + size:at + 2 * size]
        sport, dport = _PORTS.unpack_from(rec, at + 2 * size)
        vlan_at = at + 2 * size + 4
        info = FlowInfo(flow_id, Transport.TCP, self._endpoint(src, sport),
                        self._endpoint(dst, dport), _ROLE_SOURCES[role], ts_first, ts_last,
                        frame, frame)
        if len(rec) > vlan_at:
            info.vlan = tuple(v for (v,) in _VLAN.iter_unpack(rec[vlan_at:]))
        info.packets[_S2C if bits & _Y_S2C else _C2S] = 1
        return info, (src, sport, dst, dport)

    def _forget_young(self, rec: bytes) -> None:
        """A young flow leaves the young table (its record stays queued until pruned,
        unless it is the oldest)."""
        del self._young_keys[_young_key(rec)]
        self._young_n -= 1
        young = self._young
        if young and young[0] is rec:  # the oldest (evicted, expired): no stale record
            young.popleft()
            return
        self._stale += 1
        if self._stale > self._young_n + _STALE_SLACK:
            keys = self._young_keys
            self._young = deque(r for r in self._young if keys.get(_young_key(r)) is r)
            self._stale = 0

    def _end_young(self, rec: bytes, info: FlowInfo, reason: str) -> None:
        """``_end`` for a young flow (``info`` from ``_young_info``), without making its
        full form first: its one tracker has nothing to finish."""
        info.close_reason = reason
        self._forget_young(rec)
        self._held -= 1
        self._hold_budget()
        if rec[_Y_FLAGS_AT] & _Y_OWNED:
            self.emit(StreamClose(info, info.ts_last_ns, reason))

    def _promote(self, rec: bytes) -> _Tcp:
        """A young flow in its full form (``FlowInfo``, ``_Tcp``, the tracker of the
        side that sent), registered and put at the recent end of the open-flows order
        with its old tick: the caller moves it (its packet) or sleeps it at once.
        The budget is told by the caller (``_hold_budget``), once that is done."""
        info, key = self._young_info(rec)
        self._forget_young(rec)
        _, _, _, _, tick, seq, bits, _, shift = _YOUNG.unpack_from(rec)
        direction = _S2C if bits & _Y_S2C else _C2S
        conn = _Tcp(info, key, bool(bits & _Y_OWNED))
        if not conn.owned:
            self._light_n += 1
        conn.tick = tick
        tracker = TcpHalfTracker()
        if bits & _Y_SYN:
            tracker.base = seq
            tracker.started = tracker.syn_seen = True
            if shift != _NO_SHIFT:
                conn.wscale = (None, shift) if direction else (shift, None)
        tracker.last_end = seq
        if direction:
            conn.s2c = tracker
        else:
            conn.c2s = tracker
        self._tcp_keys[key] = conn
        self._open[info.flow_id] = conn
        return conn

    def _oldest_open(self) -> _Tcp | bytes | None:
        """The least recently active open TCP flow: the front of the full ones or of
        the young ones (a record), whichever moved last earlier."""
        young, keys = self._young, self._young_keys
        while young:
            rec = young[0]
            if keys.get(_young_key(rec)) is rec:
                break
            young.popleft()
            self._stale -= 1
        else:
            return next(iter(self._open.values()), None)
        if self._open:
            full = next(iter(self._open.values()))
            if full.tick < _YOUNG.unpack_from(rec)[4]:
                return full
        return rec

    def _half(self, conn: _Tcp, direction: Direction, full: bool
              ) -> TcpHalfStream | TcpHalfTracker:
        """A direction's state, made on first use: a ``TcpHalfTracker`` while it needs
        no more (``full`` False: a first SYN, a bare packet), a ``TcpHalfStream`` grown
        from it when it does.  Flows not owned only ever get trackers."""
        half = conn.s2c if direction else conn.c2s
        if half.__class__ is TcpHalfStream:
            return half
        if full and conn.owned:
            new: TcpHalfStream | TcpHalfTracker = TcpHalfStream(
                conn.info, direction, self.limits, self.emit)
            if half is not None:
                new.adopt(half)  # type: ignore[arg-type, union-attr]
        elif half is None:
            new = TcpHalfTracker()
        else:
            return half
        if direction:
            conn.s2c = new
        else:
            conn.c2s = new
        return new

    # -- memory budget ------------------------------------------------------------------

    def _charge(self) -> int:
        """What the flows held cost, for the budget: young ones less than full ones, and
        full ones another process dissects, or closing ones (both FINs or a RST: their
        linger), less than the open ones dissected here.  Why closing ones: a flow
        closed by a RST, or with a byte missing, keeps its session through the linger
        (``closed_linger_ns``; a clean close ends it at ``StreamDone``), but charged in full a
        capture of 1,000 short connections a second, 10,000 lingering at any time, made
        ~145,000 ``limit.memory`` rows (windows and flows given up) in an otherwise clean
        run; what they hold is bounded by the linger and the rate of closes instead
        (docs/robustness.md)."""
        young, light = self._young_n, self._light_n + self._closing_own
        return ((self._held - young - light) * FLOW_BYTES + light * LIGHT_FLOW_BYTES
                + young * HALF_OPEN_FLOW_BYTES)

    def _hold_budget(self) -> None:
        budget = self.limits.budget
        if budget is not None:
            budget.hold(self, self._charge(), TIER_POOLS)

    def release_memory(self, need: int) -> None:
        """The run's memory budget is reached and no buffer is left to give back: evict
        the least recently active flows (closing ones first), each with a
        ``limit.memory`` anomaly, until ``need`` bytes are freed.  The last flow is
        never evicted: it is the one being worked on (a flow being created is not in
        the activity orders yet; a packet moves its flow to the most recent end)."""
        freed = 0
        while freed < need and self._held > 1:
            before, charge = self._held, self._charge()
            self._evict(None, None, memory=True)
            if self._held >= before:
                break
            freed += charge - self._charge()

    def _owned(self, state: _Tcp | _Udp) -> bool:
        if isinstance(state, _Tcp):
            return state.owned
        return self.owns is None or self.owns(state.info.flow_id)

    def _evict(self, ts_ns: int | None, frame: int | None, memory: bool = False) -> None:
        """Table full (or, ``memory``, the run's memory budget reached): close the least
        recently active flow, closing ones first."""
        oldest: _Tcp | _Udp | bytes | None  # the victim (bytes: a young flow)
        table: Mapping[int, _Tcp | _Udp] = self._asleep or self._closing or self._udp
        if table:
            oldest = next(iter(table.values()))
        else:
            oldest = self._oldest_open()
            if oldest is None:
                return
        if isinstance(oldest, bytes):
            victim = self._young_info(oldest)[0]
            owned = bool(oldest[_Y_FLAGS_AT] & _Y_OWNED)
        else:
            victim = _info_of(oldest)
            owned = self._owned(oldest)
        if owned:
            if memory:
                budget = self.limits.budget
                kind = "limit.memory"
                why = (f"memory budget of {budget.limit_bytes if budget else 0} bytes reached "
                       f"with {len(self)} flows held")
                ts_ns, frame = victim.ts_last_ns, victim.frame_last
            else:
                kind, why = "limit.flow_table", f"flow table full ({self.limits.max_flows} flows)"
            self.emit(
                Anomaly(
                    kind,
                    f"{why}; evicted flow "
                    f"{victim.flow_id} {victim.client}->{victim.server} idle since frame "
                    f"{victim.frame_last}",
                    ts_ns,
                    frame,
                    victim,
                )
            )
        if isinstance(oldest, bytes):
            self._end_young(oldest, victim, "evicted")
        else:
            self._end(oldest, "evicted")

    def _end(self, state: _Tcp | _Udp, reason: str) -> None:
        """Close a flow.  Its close (and any final gap) is stamped with the flow's own
        last packet, never with whatever packet happened to trigger the close, so the
        result does not depend on other flows' traffic (the Spark split path relies on
        that)."""
        info = _info_of(state)
        ts_ns, frame = info.ts_last_ns, info.frame_last
        if isinstance(state, _Tcp):
            for half in state.halves:
                if half is not None:
                    half.finish(ts_ns, frame)
            info.close_reason = reason
            self._open.pop(info.flow_id, None)
            if self._closing.pop(info.flow_id, None) is not None and state.owned:
                self._closing_own -= 1
            self._asleep.pop(info.flow_id, None)
            self._unregister(state)
            if state.owned:
                self.emit(StreamClose(info, ts_ns, reason))
        else:
            info.close_reason = reason
            self._udp.pop(info.flow_id, None)
            self._unregister(state)
            if self.owns is None or self.owns(info.flow_id):
                self.emit(FlowEnd(info, ts_ns, reason))

    # -- time -------------------------------------------------------------------------

    def expire(self, now_ns: int) -> None:
        """Close flows whose idle timeout (capture time) has passed."""
        lim = self.limits
        tables: tuple[tuple[Mapping[int, _Tcp | _Udp], int], ...] = (
            (self._closing, lim.closed_linger_ns),
            (self._open, lim.tcp_idle_timeout_ns),
            (self._asleep, lim.tcp_sleep_max_ns),
            (self._udp, lim.udp_idle_timeout_ns),
        )
        for table, timeout in tables:
            while True:
                state: _Tcp | _Udp | bytes | None
                if table is self._open:
                    state = self._oldest_open()
                    if state is None:
                        break
                    if isinstance(state, bytes):
                        idle = now_ns - _YOUNG.unpack_from(state)[2]
                        if idle <= timeout:
                            break
                        if idle > lim.tcp_sleep_max_ns:
                            young_info = self._young_info(state)[0]
                            self._end_young(state, young_info, "idle-timeout")
                            continue
                        state = self._promote(state)
                elif table:
                    state = next(iter(table.values()))
                else:
                    break
                info = _info_of(state)
                if now_ns - info.ts_last_ns <= timeout:
                    break
                if self.swept is not None and state.__class__ is _Tcp:
                    self.swept.append(state)
                if (table is self._open and isinstance(state, _Tcp)
                        and now_ns - info.ts_last_ns <= lim.tcp_sleep_max_ns):
                    self._sleep(state)
                    self._hold_budget()  # a young flow slept in its full form
                    continue
                reason = "closed" if table is self._closing else "idle-timeout"
                self._end(state, reason)

    def restamp_untimed(self, now_ns: int) -> None:
        """Flows seen only at time 0 (no timestamp) get ``now_ns`` as their last activity."""
        for table in (self._open, self._closing, self._udp, self._asleep):
            for state in table.values():
                info = _info_of(state)
                if info.ts_last_ns == 0:
                    info.ts_last_ns = now_ns
        keys, renewed = self._young_keys, {}
        for key, rec in keys.items():
            if _YOUNG.unpack_from(rec)[2] == 0:
                new = bytearray(rec)
                _YOUNG.pack_into(new, 0, *_YOUNG.unpack_from(rec)[:2], now_ns,
                                 *_YOUNG.unpack_from(rec)[3:])
                renewed[rec] = keys[key] = bytes(new)
        if renewed:  # same places in the order
            self._young = deque(renewed.get(r, r) for r in self._young)

    def close_all(self) -> None:
        """End of capture: close every flow in order of flow id (deterministic)."""
        for _ in self.close_all_steps():
            pass

    def close_all_steps(self, batch: int = CLOSE_BATCH) -> Iterator[None]:
        """``close_all``, pausing (a ``yield``) after every ``batch`` flows so the caller
        can pass their events on first: 200,000 flows closed at once held all their
        ``FlowInfo``s and close events together (~90 MB; the young ones had none until
        then).  A flow evicted during a pause (the budget, reached by whoever consumed
        the events) is not closed again."""
        every: list[_Tcp | _Udp | bytes] = [
            *self._open.values(), *self._closing.values(), *self._udp.values(),
            *self._asleep.values(), *self._young_keys.values()]
        every.sort(key=_flow_id)
        states: list[_Tcp | _Udp | bytes | None] = []
        states += every
        del every
        young = self._young_keys
        for i, state in enumerate(states):
            states[i] = None  # a young record is freed once its flow is closed
            if state is None:
                continue  # (not reached: each place is read before it is cleared)
            if isinstance(state, bytes):
                if young.get(_young_key(state)) is state:
                    self._end_young(state, self._young_info(state)[0], "end-of-capture")
                    if i % batch == batch - 1:
                        yield
                continue
            if not self._registered(state):
                continue
            if isinstance(state, _Tcp) and state.info.flow_id in self._asleep:
                reason = "idle-timeout"  # asleep: it had been idle past the timeout
            else:
                reason = "closed" if isinstance(state, _Tcp) and state.closing else "end-of-capture"
            self._end(state, reason)
            if i % batch == batch - 1:
                yield

    # -- packets ----------------------------------------------------------------------

    def tcp(
        self,
        src: bytes,
        dst: bytes,
        payload: bytes,
        ts_ns: int,
        frame: int,
        vlans: tuple[int, ...] = (),
        missing: int = 0,
    ) -> None:
        """One TCP segment; ``missing`` bytes of its payload were cut by the snaplen."""
        if len(payload) < 20:
            self._bad_tcp(f"TCP header truncated to {len(payload)} bytes", ts_ns, frame)
            return
        sport, dport, seq, ack, doff, flags, window = _TCP_HDR.unpack_from(payload)
        hlen = (doff >> 4) * 4
        if hlen < 20 or (hlen > len(payload) and not missing):
            self._bad_tcp(f"TCP data offset {hlen} invalid for {len(payload)} bytes", ts_ns, frame)
            return
        if hlen > len(payload):  # snaplen cut inside the options: no data captured
            missing -= hlen - len(payload)
        data = payload[hlen:]
        self._ticks += 1
        entry = self._entry(self._tcp_keys, (src, sport, dst, dport))
        promoted = False
        if entry is None and self._young_n:
            entry = self._young_entry(src, sport, dst, dport)
            promoted = entry is not None
        if entry is not None:  # (a new flow's packet, a SYN flood's: no call)
            entry = self._stale_checked(entry, ts_ns)
        if entry is not None and entry[0].info.flow_id in self._asleep:
            entry = self._wake(entry, seq, ack, flags)
        syn_only = flags & (SYN | ACK) == SYN
        if entry is not None and syn_only:
            conn, direction = entry
            if self._is_new_connection(conn, direction, seq):
                self._end(conn, "port-reuse")
                entry = None
        if entry is None:
            if (not data and missing <= 0 and not flags & (ACK | FIN | RST)
                    and self.young_flows and (not vlans or all(0 <= v <= 0xFFFF for v in vlans))):
                self._open_young(src, sport, dst, dport, seq, flags, payload[20:hlen], ts_ns,
                                 frame, vlans)
                return
            conn, direction = self._open_tcp(src, sport, dst, dport, flags, ts_ns, frame, vlans)
        else:
            conn, direction = entry
        info = conn.info
        info.ts_last_ns = max(info.ts_last_ns, ts_ns)
        info.frame_last = frame
        info.packets[direction] += 1
        if data:  # the counter list is made on first use (a SYN flood has none)
            info.payload_bytes[direction] += len(data)
        if conn.closing:
            self._closing.move_to_end(info.flow_id)
        else:
            self._open.move_to_end(info.flow_id)
            conn.tick = self._ticks
        if promoted:
            self._hold_budget()  # now charged as a full flow

        # a tracker serves this side while it sent no more than a first SYN
        mine = conn.s2c if direction else conn.c2s
        full = bool(data) or missing > 0 or bool(flags & FIN) or (
            bool(flags & SYN) and mine is not None and mine.syn_seen)
        mine = self._half(conn, direction, full)
        if flags & SYN:
            mine.set_isn(seq, ts_ns, frame)
            wscale = _wscale(payload[20:hlen])
            if wscale != conn.wscale[direction]:
                pair = list(conn.wscale)
                pair[direction] = wscale
                conn.wscale = (pair[0], pair[1])
            seq = (seq + 1) % (1 << 32)
        if flags & ACK:
            peer = self._half(conn, DIRECTIONS[1 - direction], True)
            peer.on_ack(ack, ts_ns, frame)
            peer.on_window(ack, conn.window_bytes(direction, window, bool(flags & SYN)))
        if data:
            if not mine.syn_seen:
                info.mid_stream[direction] = True
            if conn.rst and conn.owned:
                # decoded, but flagged: after a reset neither side should send data
                self.emit(Anomaly("tcp.data_after_rst", f"{len(data)} bytes sent "
                                  f"{direction.short} after the connection was reset; "
                                  "decoded, but a reset connection carries no data",
                                  ts_ns, frame, info, direction, None, len(data)))
            mine.on_segment(seq, data, ts_ns, frame)
        if missing > 0:
            # the snaplen cut bytes that were sent: the stream reaches past them (a tail
            # never seen again becomes a gap), but earlier holes may still be filled
            mine.on_cut((seq + len(data) + missing) % (1 << 32))
        if flags & FIN:
            mine.on_fin(seq, len(data) + max(missing, 0))
            conn.fin |= 1 << direction
        mine.last_end = (seq + len(data) + max(missing, 0)) % (1 << 32)
        if flags & RST:
            conn.rst = True
        if not conn.closing and (conn.rst or conn.fin == 3):
            conn.closing = True
            del self._open[info.flow_id]
            self._closing[info.flow_id] = conn
            if conn.owned:
                self._closing_own += 1
                self._hold_budget()  # (charged less from now on: ``_charge``)
                if self.stream_done and not conn.rst and _delivered_to_fin(conn):
                    self.emit(StreamDone(info, ts_ns))

    def _stale_checked(self, entry: tuple[_S, Direction] | None, ts_ns: int
                       ) -> tuple[_S, Direction] | None:
        """A flow idle past its timeout is closed before this packet is placed, so
        whether a packet starts a new flow depends only on this flow's own history (not
        on when a sweep, driven by other traffic, happened to run)."""
        if entry is None:
            return None
        state = entry[0]
        info = state.info
        lim = self.limits
        if state.__class__ is _Tcp:
            timeout = lim.closed_linger_ns if state.closing else lim.tcp_idle_timeout_ns
        else:
            timeout = lim.udp_idle_timeout_ns
        if ts_ns - info.ts_last_ns <= timeout:
            return entry
        if isinstance(state, _Tcp) and not state.closing:
            if info.flow_id in self._open:
                self._sleep(state)
            if ts_ns - info.ts_last_ns <= lim.tcp_sleep_max_ns:
                return entry  # asleep: the caller wakes it if the packet continues it
        self._end(state, "closed" if isinstance(state, _Tcp) and state.closing else "idle-timeout")
        return None

    def _sleep(self, conn: _Tcp) -> None:
        """Idle past the timeout: the flow stays registered but its overlap-check tails
        are freed (a retransmission from before the pause is no longer compared)."""
        del self._open[conn.info.flow_id]
        self._asleep[conn.info.flow_id] = conn
        for half in conn.halves:
            if isinstance(half, TcpHalfStream):
                half.forget_recent()

    def _wake(self, entry: tuple[_Tcp, Direction], seq: int, ack: int, flags: int
              ) -> tuple[_Tcp, Direction] | None:
        """A packet on the 4-tuple of a sleeping flow: if its sequence number continues
        where its side left off (or its ACK where the peer's did), it is the same
        connection after a pause and the flow goes on; otherwise (a SYN, a new
        connection picked up mid-stream) the sleeping flow is closed."""
        conn, direction = entry
        if not flags & SYN:
            mine, peer = conn.halves[direction], conn.halves[1 - direction]
            marks = [(mine.last_end if mine is not None else None, seq)]
            if flags & ACK:
                marks.append((peer.last_end if peer is not None else None, ack))
            for end, value in marks:
                if end is not None and (
                    (value - end) % (1 << 32) <= CONTINUE_SLACK_BYTES
                    or (end - value) % (1 << 32) <= CONTINUE_SLACK_BYTES
                ):
                    del self._asleep[conn.info.flow_id]
                    self._open[conn.info.flow_id] = conn
                    return entry
        self._end(conn, "idle-timeout")
        return None

    def swap_roles(self, info: FlowInfo, source: RoleSource,
                   at: tuple[int, int] | None = None,
                   deliver: Callable[[Anomaly], None] | None = None) -> bool:
        """A layer above learned the roles better than the port hint did (QUIC: who sent
        the first Initial; WebSocket: who masks; a dissector: which ops each side sends):
        swap client and server of the flow in place.  Returns whether it did (False: not
        a live flow of this table, or a young one, which has no data to tell by).

        A TCP flow's directions swap too (its halves emit in the new orientation from
        now on), and one ``ROLES_SWAPPED`` anomaly naming the flow is emitted: the
        flow's events emitted before it were in the old orientation, those after it in
        the new one, so a layer that holds or receives them in between knows which to
        turn (``reassembly.websocket``, ``analyzer.detect``).  ``on_roles_swapped``
        (set by an engine that keeps its own copy of flows) hears of it first, with the
        flow's old client-to-server key.  ``at``: the timestamp and frame of the evidence
        (the bytes that showed the roles); the anomaly carries them.  Without it, the
        flow's last packet, which is the evidence only while packets are handled one at a
        time: a reader that runs ahead (the native engine reads a batch of records at
        once) has seen later packets of the flow by then.  ``deliver``: also handed the
        anomaly at once (``RoleSwaps``), besides emitting it among the events."""
        fid = info.flow_id
        state: _Tcp | _Udp | None = self._udp.get(fid)
        if state is None:
            state = self._open.get(fid) or self._closing.get(fid) or self._asleep.get(fid)
        if state is None or state.info is not info:
            return False
        if state.__class__ is _Tcp and self.on_roles_swapped is not None:
            self.on_roles_swapped(info, state.key)
        before = info.role_source
        info.client, info.server = info.server, info.client
        for counts in (info.packets, info.payload_bytes, info.stream_bytes, info.gap_bytes,
                       info.overlap_conflicts, info.mid_stream):
            counts.reverse()
        info.role_source = source
        self._unregister(state)
        src, sport, dst, dport = state.key
        state.key = (dst, dport, src, sport)
        self._register(state)
        if isinstance(state, _Tcp):
            state.c2s, state.s2c = state.s2c, state.c2s
            for half in state.halves:
                if isinstance(half, TcpHalfStream):
                    half.direction = half.direction.flip()
            state.wscale = (state.wscale[1], state.wscale[0])
            state.fin = ((state.fin & 1) << 1) | ((state.fin >> 1) & 1)
            if state.owned:
                anomaly = Anomaly(ROLES_SWAPPED, f"client and server swapped: decided by "
                                  f"{source.label}, not by {before.label} (the other way "
                                  f"round); the client is {info.client}",
                                  *(at or (info.ts_last_ns, info.frame_last)), info)
                self.emit(anomaly)
                if deliver is not None:
                    deliver(anomaly)
        return True

    def _is_new_connection(self, conn: _Tcp, direction: Direction, seq: int) -> bool:
        """A bare SYN on a known 4-tuple starts a new connection unless it repeats the SYN."""
        if conn.closing:
            return True
        half = conn.halves[direction]
        return half is not None and half.base is not None and (seq + 1) % (1 << 32) != half.base

    def _open_tcp(self, src: bytes, sport: int, dst: bytes, dport: int, flags: int,
                  ts_ns: int, frame: int, vlans: tuple[int, ...]) -> tuple[_Tcp, Direction]:
        if flags & (SYN | ACK) == SYN:
            src_is_server, source = False, RoleSource.SYN
        elif flags & (SYN | ACK) == SYN | ACK:
            src_is_server, source = True, RoleSource.SYN_ACK
        else:
            src_is_server, source = _roles_by_port(self.server_ports, sport, dport)
        info, key, direction = self._create(
            Transport.TCP, (src, sport, dst, dport), src_is_server, source, ts_ns, frame, vlans
        )
        owned = self.owns is None or self.owns(info.flow_id)
        conn = _Tcp(info, key, owned)
        if not owned:
            self.counters["light_flows"] += 1
        self._register(conn)
        self._open[info.flow_id] = conn
        self.counters["tcp_flows"] += 1
        return conn, direction

    def _create(self, transport: Transport, tup: FlowKey, src_is_server: bool,
                source: RoleSource, ts_ns: int, frame: int, vlans: tuple[int, ...]
                ) -> tuple[FlowInfo, FlowKey, Direction]:
        """A new flow's info, its client-to-server key and the direction of this packet."""
        src, sport, dst, dport = tup
        a, b = self._endpoint(src, sport), self._endpoint(dst, dport)
        client, server = (b, a) if src_is_server else (a, b)
        info = self._new_info(transport, client, server, source, ts_ns, frame, vlans)
        key = (dst, dport, src, sport) if src_is_server else tup
        return info, key, _S2C if src_is_server else _C2S

    def _endpoint(self, ip: bytes, port: int) -> Endpoint:
        """The (immutable) endpoint, shared by the flows that have it: a server's
        address and port, text included, is then held once, not once per flow."""
        cache = self._endpoints
        ep = cache.get((ip, port))
        if ep is None:
            if len(cache) >= _ENDPOINT_CACHE:
                cache.clear()
            ep = cache[(ip, port)] = Endpoint(_ip_text(ip), port)
        return ep

    def _bad_tcp(self, detail: str, ts_ns: int, frame: int) -> None:
        self.counters["tcp_bad_header"] += 1
        self.emit(Anomaly("tcp.bad_header", detail, ts_ns, frame))

    def udp(
        self,
        src: bytes,
        dst: bytes,
        payload: bytes,
        ts_ns: int,
        frame: int,
        vlans: tuple[int, ...] = (),
    ) -> None:
        if len(payload) < 8:
            self.emit(
                Anomaly(
                    "udp.bad_header", f"UDP header truncated to {len(payload)} bytes", ts_ns, frame
                )
            )
            return
        sport, dport = _UDP_HDR.unpack_from(payload)
        data = payload[8:]
        key = (src, sport, dst, dport)
        entry = self._stale_checked(self._entry(self._udp_keys, key), ts_ns)
        if entry is None:
            info, c2s, direction = self._create(
                Transport.UDP, key, *_roles_by_port(self.server_ports, sport, dport), ts_ns,
                frame, vlans
            )
            state = _Udp(info, c2s)
            self._register(state)
            self._udp[info.flow_id] = state
            self.counters["udp_flows"] += 1
            if self.owns is not None and not self.owns(info.flow_id):
                self.counters["light_flows"] += 1
        else:
            state, direction = entry
            info = state.info
            self._udp.move_to_end(info.flow_id)
        info.ts_last_ns = max(info.ts_last_ns, ts_ns)
        info.frame_last = frame
        info.packets[direction] += 1
        if data:
            info.payload_bytes[direction] += len(data)
            info.stream_bytes[direction] += len(data)
        if self.owns is None or self.owns(info.flow_id):
            self.emit(Datagram(info, direction, bytes(data), ts_ns, frame))


def _info_of(state: _Tcp | _Udp) -> FlowInfo:
    return state.info


def _flow_id(state: _Tcp | _Udp | bytes) -> int:
    """A flow's id, a young one's (its record) included."""
    return int(_YOUNG.unpack_from(state)[0]) if isinstance(state, bytes) else state.info.flow_id


def _delivered_to_fin(conn: _Tcp) -> bool:
    """Whether both directions of ``conn`` delivered every byte up to their FIN: none
    buffered out of order or held out of window, none known sent (ACKed, or cut by the
    snaplen) and never captured.  Then nothing but bytes sent after a FIN can follow."""
    for half in (conn.c2s, conn.s2c):
        if not isinstance(half, TcpHalfStream):
            return False
        fin = half.fin_seq_off
        if (fin is None or half.next_off < fin or half.pieces or half.held
                or (half.acked_off is not None and half.acked_off > half.next_off)):
            return False
    return True


def turned(ev: _E) -> _E:
    """``ev`` in the other orientation: its direction flipped (a flow whose roles were
    swapped after ``ev`` was emitted; events without a direction are as they were)."""
    direction = getattr(ev, "direction", None)
    if direction is None:
        return ev
    return dataclasses.replace(ev, direction=direction.flip())  # type: ignore[type-var]


class Turning:
    """The flows a layer swapped the roles of (``FlowTable.swap_roles``) whose
    ``ROLES_SWAPPED`` anomaly it has not seen yet: their events until then were
    emitted in the old orientation and are turned (``turned``) as they arrive."""

    __slots__ = ("_flows",)

    def __init__(self) -> None:
        self._flows: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self._flows)

    def __contains__(self, flow_id: int) -> bool:
        return flow_id in self._flows

    def begin(self, info: FlowInfo) -> None:
        """``info``'s roles were just swapped: turn its events until the anomaly."""
        self._flows.add(info.flow_id)

    def see(self, ev: _E) -> _E:
        """``ev`` as it is meant now: turned while its flow waits for the anomaly (which
        ends the wait and is passed on as it is)."""
        flow = getattr(ev, "flow", None)
        if flow is None or flow.flow_id not in self._flows:
            return ev
        if isinstance(ev, Anomaly) and ev.kind == ROLES_SWAPPED:
            self._flows.discard(flow.flow_id)
            return ev
        return turned(ev)


class RoleSwaps:
    """How a consumer of a run's events (detection, in the analyzer) swaps a flow's
    roles: ``reassembly.engine.capture_events`` connects it to the run's flow table
    (``table``) and passes its events through ``events``, which turns those of a
    swapped flow that were emitted before the swap (``Turning``).  Unconnected, it
    swaps nothing.

    ``immediate``: the ``ROLES_SWAPPED`` anomaly goes to ``ready`` at the swap, for the
    consumer to take right after the event that showed the roles, and its copy among
    the events only ends the turning (``events`` drops it).  Among the events it comes
    after whatever the reader had emitted by then — one packet's events for the
    reference, a batch of records for the native engine — so its place would differ
    between them; taken from ``ready`` it is the same for both."""

    def __init__(self, immediate: bool = False) -> None:
        self.table: FlowTable | None = None
        self._turning = Turning()
        self.ready: list[Anomaly] = []
        self._immediate = immediate
        self._delivered: dict[int, Anomaly] = {}  # by id: the copies ``events`` drops

    def __call__(self, info: FlowInfo, source: RoleSource,
                 at: tuple[int, int] | None = None) -> bool:
        deliver = self._deliver if self._immediate else None
        if self.table is None or not self.table.swap_roles(info, source, at, deliver):
            return False
        self._turning.begin(info)
        return True

    def _deliver(self, anomaly: Anomaly) -> None:
        self.ready.append(anomaly)
        self._delivered[id(anomaly)] = anomaly

    def connect(self, table: FlowTable, events: Iterable[_E]) -> Iterator[_E]:
        """Swap roles in ``table`` from now on; ``events`` (that table's) as ``events``
        passes them on."""
        self.table = table
        return self.events(events)

    def turns(self, info: FlowInfo) -> bool:
        """Whether ``info``'s events still arrive in the orientation before its swap."""
        return info.flow_id in self._turning

    @property
    def turning(self) -> set[int]:
        """The ids of the flows whose events are still turned (the live set, empty
        whenever ``turns`` is False for every flow: read it, do not change it)."""
        return self._turning._flows

    def turn(self, ev: _E) -> _E:
        """``ev`` in the orientation meant now (an event that reached the consumer other
        than through ``events``: a part of a ``CoalescedData`` it splits)."""
        return self._turning.see(ev) if self._turning._flows else ev

    def events(self, events: Iterable[_E]) -> Iterator[_E]:
        turning, delivered = self._turning, self._delivered
        swapped = turning._flows  # (its truth without a ``Turning.__bool__`` call per event)
        for ev in events:
            if swapped:
                ev = turning.see(ev)
            if delivered and delivered.pop(id(ev), None) is not None:
                continue
            yield ev

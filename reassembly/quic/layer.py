"""The QUIC layer: UDP ``Datagram`` events in, QUIC packet / stream / handshake events out.

Strategy (sans-IO, like the rest of ``reassembly``): the engine offers every
``Datagram`` to :meth:`QuicLayer.datagram`; when it returns True the datagram was QUIC
and is *not* delivered as a ``Datagram`` — instead the layer emits, per QUIC packet, a
``QuicPacket`` followed by what that packet produced (``StreamData``/``StreamGap``
with ``stream_id``, ``QuicStreamEnd``, ``QuicHandshake``, ``Anomaly``).

Detection: a UDP flow becomes QUIC when a datagram starts with a long header of a
version we know (1, 2, IETF drafts 23-34), a Version Negotiation packet, or a greased
version (0x?a?a?a?a) in a datagram of at least 1200 bytes.  Ports are not looked at
(443, 853 or any other).  From then on every datagram of the flow is QUIC.  A
short-header packet on a flow not known as QUIC is taken only when its DCID is a
connection ID of a known connection (below).  A capture that starts after the
handshake (short headers only) is not recognised: nothing ties it to QUIC.

Connections and paths: one connection = the UDP flow it started on (its *primary*
flow; a new client Initial with fresh keys after the server had answered starts a new
connection on the same flow, the old one ending with reason ``superseded``).  Every
connection ID seen (SCIDs of long headers, the client's original DCID, Retry SCIDs,
NEW_CONNECTION_ID frames) maps to the connection.  Packets of the connection on
another 5-tuple (migration, NAT rebinding) are found by their DCID: they are reported
as ``QuicPacket`` rows of the flow they arrived on with ``conn_flow_id`` = the primary
flow, decrypted with the connection's keys, and their STREAM data continues the
connection's streams *on the primary flow* (a ``quic.migration`` anomaly notes the new
path once).  The connection ends with its primary flow (``close_flow``): its streams
end then, and later packets on other paths are no longer recognised.

Not decoded: Google QUIC (Q0xx/T0xx versions), versions other than 1, 2 and IETF drafts
23-34, and Retry integrity of drafts (reported ``unverified``).

Byte accounting: ``FlowInfo.stream_bytes``/``gap_bytes`` of a QUIC flow count QUIC
STREAM bytes delivered / lost (all streams together), not datagram bytes: the datagram
bytes counted by the flow table are taken back when the layer takes a datagram, and
CRYPTO bytes are not counted (``payload_bytes`` still has the UDP payload total).

Limits (``Limits.quic_*``): connections tracked (the least recently active is closed
early, ``limit.quic_connections``; its flow is then no longer treated as QUIC),
connection IDs per connection, CRYPTO bytes buffered per level and direction, and
streams open per connection.  Each STREAM direction buffers like a TCP direction
(``max_buffered_bytes``, ``overlap_check_bytes``).

Imports: the engine puts this layer in every run, and most captures carry no QUIC, so
the connection machinery (``reassembly.quic.connection``: keys, frames, the TLS
handshake, ``cryptography``) is imported by the methods that meet a connection, not
with this module; telling a datagram is not QUIC needs only ``packet`` and ``versions``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, TypedDict

from reassembly.events import (
    Anomaly,
    CaptureEvent,
    Datagram,
    Direction,
    Event,
    FlowEnd,
    FlowInfo,
    QuicEvent,
    QuicPacket,
    RoleSource,
)
from reassembly.limits import Limits
from reassembly.quic.keylog import KeyLog
from reassembly.quic.packet import (
    FORM_LONG,
    HeaderError,
    LongHeader,
    is_plausible_first_packet,
    parse_long_header,
)
from reassembly.quic.versions import version_params

if TYPE_CHECKING:
    from reassembly.provenance import CoalescedData
    from reassembly.quic.connection import (  # imported where a connection is met
        Failed,
        Opened,
        QuicConnection,
    )
    from reassembly.websocket import WebSocketJoin

__all__ = [
    "TLS_KEY_LOG_SECRETS",
    "QuicLayer",
    "add_capture_secrets",
    "read_quic_events",
]

TLS_KEY_LOG_SECRETS = 0x544C534B  # pcapng DSB secrets type "TLSK"


class _PacketFields(TypedDict, total=False):
    """What a ``QuicPacket`` says beyond its datagram, gathered by the steps that read the
    packet (header, decryption, frames) before it is built; see ``QuicPacket``."""

    conn_flow_id: int
    version: int
    packet_type: str
    dcid: str
    scid: str | None
    packet_number: int | None
    token_length: int | None
    length: int
    datagram_offset: int
    coalesced_index: int
    frame_types: tuple[str, ...]
    stream_ids: tuple[int, ...]
    decrypted: bool | None
    undecrypted_reason: str | None
    key_phase: int | None
    supported_versions: tuple[int, ...]
    retry_integrity: str | None
    sni: str | None
    alpn: tuple[str, ...] | None
    close_error_code: int | None
    close_frame_type: int | None
    close_reason: str | None


class QuicLayer:
    """Datagram → QUIC events adapter (see the module docstring)."""

    def __init__(
        self,
        limits: Limits,
        emit: Callable[[Event | QuicEvent], None],
        keylog: KeyLog | None = None,
        swap_roles: Callable[[FlowInfo, RoleSource], object] | None = None,
    ) -> None:
        """``swap_roles`` (the flow table's) fixes a UDP flow whose port hint named the
        wrong side: the sender of a connection's first Initial is the client."""
        self._swap_roles = swap_roles
        self.limits = limits
        self._emit = emit
        self.keylog = keylog if keylog is not None else KeyLog()
        self._pending: list[Event | QuicEvent] = []
        self._by_flow: dict[int, QuicConnection] = {}
        self._conns: OrderedDict[int, QuicConnection] = OrderedDict()
        self._cid_map: dict[bytes, tuple[QuicConnection, int]] = {}
        self._cid_lens: dict[int, int] = {}
        self._path_roles: dict[tuple[int, int], int] = {}
        self._last_ts_ns = 0
        self._last_frame = 0
        self.counters = {
            "datagrams": 0,
            "packets": 0,
            "decrypted": 0,
            "undecrypted": 0,
            "connections": 0,
        }

    # -- public API -----------------------------------------------------------------

    def add_secrets(self, data: str | bytes) -> int:
        """Add NSS key-log text (a ``--keylog`` file's content or a pcapng DSB).

        Returns the number of secret lines taken.  Lines that do not parse are reported
        (``quic.keylog``), not silently dropped."""
        log = self.keylog
        bad, dropped = log.bad_lines, log.dropped
        added = log.add(data, complete=True)
        if log.bad_lines > bad:
            self._emit(
                Anomaly(
                    "quic.keylog",
                    f"{log.bad_lines - bad} key-log line(s) do not parse (first: "
                    f"{log.first_bad!r})",
                    self._last_ts_ns or None,
                    self._last_frame or None,
                )
            )
        if log.dropped > dropped:
            self._emit(
                Anomaly(
                    "limit.keylog",
                    f"{log.dropped - dropped} key-log line(s) dropped: more than "
                    f"{len(log)} client randoms",
                    self._last_ts_ns or None,
                    self._last_frame or None,
                )
            )
        return added

    def datagram(self, ev: Datagram) -> bool:
        """Take ``ev`` if it is QUIC (then it must not be delivered as a Datagram)."""
        data = ev.data
        flow = ev.flow
        self._last_ts_ns = max(self._last_ts_ns, ev.ts_ns)
        self._last_frame = ev.frame
        conn = self._by_flow.get(flow.flow_id)
        if conn is None:
            if not data:
                return False
            if data[0] & FORM_LONG:
                if not is_plausible_first_packet(data):
                    return False
                conn = self._path_by_long_header(ev)
                if conn is None:
                    ev = self._client_sent(ev)
                    conn = self._new_connection(flow, ev.ts_ns, ev.frame)
            else:
                conn = self._path_by_short_header(ev)
                if conn is None:
                    return False
        self.counters["datagrams"] += 1
        flow.stream_bytes[ev.direction] -= len(data)  # see "Byte accounting" above
        self._conns.move_to_end(conn.flow.flow_id)
        self._datagram(conn, ev)
        self._drain()
        return True

    def _client_sent(self, ev: Datagram) -> Datagram:
        """A connection's first packet comes from its client: make the flow say so."""
        flow = ev.flow
        if self._swap_roles is None or flow.role_source in (RoleSource.SYN, RoleSource.SYN_ACK):
            return ev
        if ev.direction is Direction.S2C:
            self._swap_roles(flow, RoleSource.QUIC_INITIAL)
            return replace(ev, direction=Direction.C2S)
        flow.role_source = RoleSource.QUIC_INITIAL
        return ev

    def close_flow(self, flow: FlowInfo, ts_ns: int) -> None:
        """A UDP flow ended (``FlowEnd``): a connection started on it ends too."""
        conn = self._by_flow.get(flow.flow_id)
        if conn is None:
            return
        if conn.flow is flow:
            self._close(conn, ts_ns, flow.frame_last, "flow-end")
        else:
            conn.paths.discard(flow.flow_id)
            del self._by_flow[flow.flow_id]
            for d in (0, 1):
                self._path_roles.pop((flow.flow_id, d), None)
        self._drain()

    def flush(self, ts_ns: int | None = None) -> None:
        """End of capture: every connection still open ends."""
        ts = self._last_ts_ns if ts_ns is None else ts_ns
        for conn in sorted(self._conns.values(), key=lambda c: c.flow.flow_id):
            self._close(conn, ts, self._last_frame, "flow-end")
        self._drain()

    def process(
        self, events: Iterable[Event | CoalescedData], out: list[Event | QuicEvent]
    ) -> Iterator[Event | QuicEvent | CoalescedData]:
        """Wrap an event stream: Datagrams the layer takes are replaced by its events;
        every other event (TCP's ``CoalescedData`` too) is passed on as it is.

        ``out`` must be the list this layer's ``emit`` appends to (the engine owns it)."""
        for ev in events:
            if isinstance(ev, Datagram) and self.datagram(ev):
                if out:
                    yield from out
                    out.clear()
                continue
            if isinstance(ev, FlowEnd):
                self.close_flow(ev.flow, ev.ts_ns)
            if out:
                yield from out
                out.clear()
            yield ev
        self.flush()
        if out:
            yield from out
            out.clear()

    # -- connections ------------------------------------------------------------------

    def _new_connection(self, flow: FlowInfo, ts_ns: int, frame: int) -> QuicConnection:
        if len(self._conns) >= self.limits.quic_max_connections:
            victim = next(iter(self._conns.values()))
            self._emit(
                Anomaly(
                    "limit.quic_connections",
                    f"more than {self.limits.quic_max_connections} QUIC connections; the "
                    f"least recently active one (flow {victim.flow.flow_id}) is closed and "
                    "its flow no longer decoded as QUIC",
                    ts_ns,
                    frame,
                    victim.flow,
                )
            )
            self._close(victim, ts_ns, frame, "evicted")
        from reassembly.quic.connection import QuicConnection

        conn = QuicConnection(flow, self.limits, self._pending.append, self.keylog,
                              self._register_cid)
        self._conns[flow.flow_id] = conn
        self._by_flow[flow.flow_id] = conn
        self.counters["connections"] += 1
        return conn

    def _close(self, conn: QuicConnection, ts_ns: int, frame: int, reason: str) -> None:
        conn.close(ts_ns, frame, reason)
        for fid in conn.paths:
            if self._by_flow.get(fid) is conn:
                del self._by_flow[fid]
            for d in (0, 1):
                self._path_roles.pop((fid, d), None)
        self._conns.pop(conn.flow.flow_id, None)
        for cid in conn.cids:
            hit = self._cid_map.get(cid)
            if hit is not None and hit[0] is conn:
                del self._cid_map[cid]
                n = self._cid_lens[len(cid)] - 1
                if n:
                    self._cid_lens[len(cid)] = n
                else:
                    del self._cid_lens[len(cid)]
        self._drain()

    def _register_cid(self, conn: QuicConnection, cid: bytes, issuer: int) -> None:
        if cid in self._cid_map:
            return  # first wins: another live connection already uses it
        self._cid_map[cid] = (conn, issuer)
        self._cid_lens[len(cid)] = self._cid_lens.get(len(cid), 0) + 1

    def _lookup_cid(self, data: bytes, start: int) -> tuple[QuicConnection, int, bytes] | None:
        """(connection, issuer role, cid) of the known connection id at ``data[start:]``."""
        for n in self._cid_lens:
            cid = bytes(data[start : start + n])
            hit = self._cid_map.get(cid)
            if hit is not None:
                return hit[0], hit[1], cid
        return None

    def _attach_path(self, conn: QuicConnection, ev: Datagram, role: int, dcid: bytes) -> None:
        flow = ev.flow
        conn.paths.add(flow.flow_id)
        self._by_flow[flow.flow_id] = conn
        self._path_roles[(flow.flow_id, int(ev.direction))] = role
        self._pending.append(
            Anomaly(
                "quic.migration",
                f"packets of the QUIC connection of flow {conn.flow.flow_id} "
                f"({conn.flow.client}->{conn.flow.server}) continue on flow {flow.flow_id} "
                f"({flow.client}->{flow.server}), DCID {dcid.hex()}; its stream data stays "
                f"on flow {conn.flow.flow_id}",
                ev.ts_ns,
                ev.frame,
                flow,
                ev.direction,
            )
        )

    def _path_by_short_header(self, ev: Datagram) -> QuicConnection | None:
        hit = self._lookup_cid(ev.data, 1)
        if hit is None:
            return None
        conn, issuer, cid = hit
        self._attach_path(conn, ev, 1 - issuer, cid)
        return conn

    def _path_by_long_header(self, ev: Datagram) -> QuicConnection | None:
        try:
            hdr = parse_long_header(ev.data, 0)
        except HeaderError:
            return None
        if hdr.packet_type not in ("handshake", "0rtt"):
            return None
        hit = self._cid_map.get(hdr.dcid)
        if hit is None:
            return None
        self._attach_path(hit[0], ev, 1 - hit[1], hdr.dcid)
        return hit[0]

    # -- packets ----------------------------------------------------------------------

    def _drain(self) -> None:
        pending = self._pending
        if pending:
            emit = self._emit
            for e in pending:
                emit(e)
            pending.clear()

    def _sender_role(
        self, conn: QuicConnection, ev: Datagram, dcid_start: int
    ) -> int | None:
        """Role of the sender on a secondary path (None on the primary flow)."""
        if ev.flow is conn.flow:
            return None
        hit = self._lookup_cid(ev.data, dcid_start)
        if hit is not None and hit[0] is conn:
            role = 1 - hit[1]
            self._path_roles[(ev.flow.flow_id, int(ev.direction))] = role
            return role
        key = (ev.flow.flow_id, int(ev.direction))
        if key in self._path_roles:
            return self._path_roles[key]
        other = self._path_roles.get((ev.flow.flow_id, 1 - int(ev.direction)))
        return None if other is None else 1 - other

    def _datagram(self, conn: QuicConnection, ev: Datagram) -> None:
        data = ev.data
        n = len(data)
        pos = 0
        index = 0
        first_dcid = b""
        while pos < n:
            if data[pos] & FORM_LONG:
                try:
                    hdr = parse_long_header(data, pos)
                except HeaderError as exc:
                    self._bad(ev, pos, index, str(exc))
                    return
                if not index:
                    first_dcid = hdr.dcid
                conn = self._long_packet(conn, ev, hdr, index)
                pos = hdr.end
            else:
                if index and not any(data[pos:]):
                    return  # zero bytes padding the datagram after its last packet
                if index and data[pos + 1 : pos + 1 + len(first_dcid)] != first_dcid:
                    # not a short-header packet of this datagram's connection: packets
                    # coalesced in one datagram share their DCID (RFC 9000 §12.2), so
                    # what follows is trailing junk, not 1-RTT data (the fixed bit says
                    # nothing: peers may grease it, RFC 9287)
                    self._bad(ev, pos, index, "trailing bytes after the last packet (their "
                              "DCID differs from the first packet's, RFC 9000 §12.2)")
                    return
                self._short_packet(conn, ev, pos, index)
                pos = n
            index += 1

    def _bad(self, ev: Datagram, pos: int, index: int, detail: str) -> None:
        where = f"packet {index} of the datagram" if index else "the datagram"
        self._pending.append(
            Anomaly(
                "quic.bad_packet",
                f"{where} (UDP payload offset {pos}, {len(ev.data) - pos} bytes) is not a "
                f"valid QUIC packet: {detail}",
                ev.ts_ns,
                ev.frame,
                ev.flow,
                ev.direction,
                pos,
                len(ev.data) - pos,
            )
        )

    def _long_packet(
        self, conn: QuicConnection, ev: Datagram, hdr: LongHeader, index: int
    ) -> QuicConnection:
        data = ev.data
        conn.begin_packet(ev.flow, ev.direction, ev.ts_ns, ev.frame)
        ptype = hdr.packet_type
        fields: _PacketFields = {
            "version": hdr.version,
            "packet_type": ptype,
            "dcid": hdr.dcid.hex(),
            "scid": hdr.scid.hex(),
            "token_length": hdr.token_length,
            "length": hdr.end - hdr.start,
            "datagram_offset": hdr.start,
            "coalesced_index": index,
        }
        if ptype == "vn":
            fields["supported_versions"] = hdr.supported_versions
            fields["decrypted"] = None
        elif ptype == "retry":
            fields["retry_integrity"] = conn.on_retry(hdr, data)
            fields["decrypted"] = None
        elif version_params(hdr.version) is None:
            conn.version = hdr.version
            fields["packet_type"] = "unknown"
            fields["decrypted"] = False
            fields["undecrypted_reason"] = "unsupported-version"
            conn.report_failure("unknown", "unsupported-version")
        else:
            from reassembly.quic.connection import RESTART, Failed, Opened

            role_hint = self._sender_role(conn, ev, hdr.start + 6)
            res = conn.open_long(data, hdr, ev.direction, role_hint)
            if res is RESTART:
                self._close(conn, ev.ts_ns, ev.frame, "superseded")
                conn = self._new_connection(ev.flow, ev.ts_ns, ev.frame)
                conn.begin_packet(ev.flow, ev.direction, ev.ts_ns, ev.frame)
                res = conn.open_long(data, hdr, ev.direction, None)
            assert isinstance(res, Opened | Failed)
            role = res.role if res.role is not None else conn.role_of(ev.direction)
            conn.add_cid(hdr.scid, role)
            self._packet_result(conn, res, ptype, fields)
        fields["conn_flow_id"] = conn.flow.flow_id
        self._emit_packet(conn, ev, fields)
        return conn

    def _short_packet(self, conn: QuicConnection, ev: Datagram, pos: int, index: int) -> None:
        from reassembly.quic.connection import CLIENT, SERVER

        data = ev.data
        conn.begin_packet(ev.flow, ev.direction, ev.ts_ns, ev.frame)
        role = self._sender_role(conn, ev, pos + 1)
        if role is None:
            role = conn.role_of(ev.direction)
        receiver = SERVER if role == CLIENT else CLIENT
        fields: _PacketFields = {
            "version": conn.version,
            "packet_type": "1rtt",
            "scid": None,
            "token_length": None,
            "length": len(data) - pos,
            "datagram_offset": pos,
            "coalesced_index": index,
            "conn_flow_id": conn.flow.flow_id,
        }
        dlen = conn.short_dcid_len(data, pos, receiver)
        if dlen is None:
            fields["dcid"] = ""
            fields["decrypted"] = False
            fields["undecrypted_reason"] = "unknown-dcid"
            conn.report_failure("1rtt", "unknown-dcid")
        else:
            fields["dcid"] = bytes(data[pos + 1 : pos + 1 + dlen]).hex()
            res = conn.open_short(data, pos, pos + 1 + dlen, role)
            self._packet_result(conn, res, "1rtt", fields)
        self._emit_packet(conn, ev, fields)

    def _packet_result(
        self, conn: QuicConnection, res: Opened | Failed, ptype: str, fields: _PacketFields
    ) -> None:
        from reassembly.quic.connection import Failed

        if isinstance(res, Failed):
            fields["decrypted"] = False
            fields["undecrypted_reason"] = res.reason
            if res.reason == "truncated":
                fields["undecrypted_reason"] = "truncated"
                conn.anomaly(
                    "quic.bad_packet",
                    f"{ptype} packet too short to remove header protection "
                    f"({fields['length']} bytes)",
                )
            else:
                conn.report_failure(ptype, res.reason)
            return
        fields["decrypted"] = True
        fields["packet_number"] = res.packet_number
        fields["key_phase"] = res.key_phase
        frames = res.frames
        fields["frame_types"] = tuple(frames.types)
        fields["stream_ids"] = tuple(dict.fromkeys(s[0] for s in frames.streams))
        if frames.close is not None:
            fields["close_error_code"], fields["close_frame_type"], fields["close_reason"] = (
                frames.close
            )
        conn.handle_frames(res, ptype)
        if conn.pkt_sni is not None or conn.pkt_alpn is not None:
            fields["sni"] = conn.pkt_sni
            fields["alpn"] = conn.pkt_alpn

    def _emit_packet(self, conn: QuicConnection, ev: Datagram, f: _PacketFields) -> None:
        c = self.counters
        c["packets"] += 1
        if f.get("decrypted"):
            c["decrypted"] += 1
        elif f.get("decrypted") is False:
            c["undecrypted"] += 1
        pkt = QuicPacket(
            ev.flow,
            ev.direction,
            ev.ts_ns,
            ev.frame,
            f["conn_flow_id"],
            f["version"],
            f["packet_type"],
            f["dcid"],
            f["scid"],
            f.get("packet_number"),
            f["token_length"],
            f["length"],
            f["datagram_offset"],
            f["coalesced_index"],
            f.get("frame_types", ()),
            f.get("stream_ids", ()),
            f.get("decrypted"),
            f.get("undecrypted_reason"),
            f.get("key_phase"),
            f.get("supported_versions", ()),
            f.get("retry_integrity"),
            f.get("sni"),
            f.get("alpn"),
            f.get("close_error_code"),
            f.get("close_frame_type"),
            f.get("close_reason"),
        )
        self._emit(pkt)
        self._drain()


# -- wiring helpers (engine integration, tests) ----------------------------------------


def add_capture_secrets(layer: QuicLayer, secrets: list[tuple[int, bytes]], seen: int) -> int:
    """Give the layer the TLS key-log DSBs in ``secrets[seen:]``; returns the new ``seen``.

    Call before processing frames and again whenever ``reader.info.secrets`` grew.  Each
    entry's bytes are released once given (its type stays): the key log keeps what it
    parsed, within its own limit, and a capture made of Decryption Secrets Blocks would
    otherwise hold every one of them until the run ends."""
    for i in range(seen, len(secrets)):
        stype, data = secrets[i]
        if stype == TLS_KEY_LOG_SECRETS:
            layer.add_secrets(data)
        secrets[i] = (stype, b"")
    return len(secrets)


def read_quic_events(
    path: str | os.PathLike[str],
    limits: Limits | None = None,
    keylog: KeyLog | None = None,
) -> Iterator[CaptureEvent | WebSocketJoin]:
    """All events of one capture with the QUIC layer in place (the engine's path)."""
    from reassembly.engine import read_events

    return read_events(path, limits, keylog)

"""Events that reassembly hands to the layers above.

Strategy: reassembly turns a capture into a single ordered stream of small, immutable
events.  Everything above (dissectors, the CLI, Spark) consumes only these types, so
they are the contract of the ``reassembly`` package.  Anomalies travel in the same
stream as data, which keeps them in capture order and makes "never silent" cheap.

Offsets are absolute byte offsets within one direction of one stream, counted from
the first byte after the SYN (or from the first byte seen when the SYN was not
captured).  Timestamps are integer nanoseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Direction(IntEnum):
    """Which way a chunk travelled, relative to the decided client/server roles."""

    C2S = 0
    S2C = 1

    @property
    def short(self) -> str:
        return DIRECTION_SHORT[self]

    def flip(self) -> Direction:
        return _S2C if self is _C2S else _C2S


DIRECTIONS: tuple[Direction, Direction] = (Direction.C2S, Direction.S2C)
"""The directions by number (``DIRECTIONS[n]`` is ``Direction(n)``), for a hot path:
reading ``Direction.C2S`` goes through the enum class's attribute lookup (~0.4 µs in
CPython 3.11, ~12x a module global's), and a ``Direction(n)`` call costs ~1 µs."""
_C2S, _S2C = DIRECTIONS

DIRECTION_SHORT: tuple[str, str] = ("c2s", "s2c")
"""``Direction.short`` by the direction's number, for a hot path that holds the number (a
``Direction(n)`` call costs ~1 µs)."""


class Transport(IntEnum):
    TCP = 6
    UDP = 17


class RoleSource(IntEnum):
    """How client and server were decided, most to least reliable."""

    SYN = 0  # we saw the client's SYN
    SYN_ACK = 1  # we saw the server's SYN-ACK (SYN missing or captured later)
    PORT = 2  # no handshake: the well-known / lower port is taken as the server
    FIRST_PACKET = 3  # ports gave no hint: the first sender is taken as the client
    QUIC_INITIAL = 4  # the sender of a QUIC connection's first Initial is the client
    WEBSOCKET_MASK = 5  # joined late: the side whose WebSocket frames are masked
    OPS = 6  # joined late: the protocol operations each side sends (NATS: PUB vs MSG)

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


@dataclass(slots=True, frozen=True)
class Endpoint:
    ip: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}"


def _pair_counter(name: str) -> property:
    """A per-direction ``[c2s, s2c]`` counter of ``FlowInfo`` allocated on first use:
    most flows of a SYN flood never carry a byte, and five two-item lists a flow cost
    more than the rest of it (docs/robustness.md, memory budget)."""
    slot = "_" + name

    def get(self: FlowInfo) -> list[int]:
        value: list[int] | None = getattr(self, slot)
        if value is None:
            value = [False, False] if name == "mid_stream" else [0, 0]
            setattr(self, slot, value)
        return value

    def put(self: FlowInfo, value: list[int]) -> None:
        setattr(self, slot, value)

    return property(get, put, doc=f"{name} per direction (c2s, s2c)")


class FlowInfo:
    """Everything known about one flow; updated in place while the flow lives.

    The same object is referenced by every event of the flow, so consumers can read
    endpoints without each event carrying them.  It is final once ``StreamClose`` (TCP)
    or ``FlowEnd`` (UDP) has been emitted.

    One is held per flow for as long as the flow lives (a SYN flood holds hundreds of
    thousands), so it is lean: slots, and the per-direction counters other than
    ``packets`` are lists made on first use (reading one makes it too).
    """

    __slots__ = ("flow_id", "transport", "client", "server", "role_source", "ts_first_ns",
                 "ts_last_ns", "frame_first", "frame_last", "packets", "_payload_bytes",
                 "_stream_bytes", "_gap_bytes", "_overlap_conflicts", "_mid_stream",
                 "close_reason", "vlan")

    # bytes of transport payload as captured, per direction (retransmissions included)
    payload_bytes = _pair_counter("payload_bytes")
    # bytes delivered as stream data (each stream byte counted once)
    stream_bytes = _pair_counter("stream_bytes")
    gap_bytes = _pair_counter("gap_bytes")
    overlap_conflicts = _pair_counter("overlap_conflicts")
    mid_stream = _pair_counter("mid_stream")

    def __init__(self, flow_id: int, transport: Transport, client: Endpoint, server: Endpoint,
                 role_source: RoleSource, ts_first_ns: int, ts_last_ns: int, frame_first: int,
                 frame_last: int, close_reason: str = "", vlan: tuple[int, ...] = ()) -> None:
        self.flow_id = flow_id
        self.transport = transport
        self.client = client
        self.server = server
        self.role_source = role_source
        self.ts_first_ns = ts_first_ns
        self.ts_last_ns = ts_last_ns
        self.frame_first = frame_first
        self.frame_last = frame_last
        self.packets = [0, 0]  # every flow has one: not worth making lazily
        self._payload_bytes = self._stream_bytes = self._gap_bytes = None
        self._overlap_conflicts = self._mid_stream = None
        self.close_reason = close_reason
        self.vlan = vlan

    _FIELDS = ("flow_id", "transport", "client", "server", "role_source", "ts_first_ns",
               "ts_last_ns", "frame_first", "frame_last", "packets", "payload_bytes",
               "stream_bytes", "gap_bytes", "overlap_conflicts", "mid_stream",
               "close_reason", "vlan")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:  # as the dataclass it was: by value
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self._FIELDS, self._values(), strict=True))
        return f"FlowInfo({inner})"

    def endpoint(self, direction: Direction) -> tuple[Endpoint, Endpoint]:
        """(source, destination) of a chunk travelling in ``direction``."""
        if direction is _C2S:
            return self.client, self.server
        return self.server, self.client


@dataclass(slots=True, frozen=True)
class StreamData:
    """Contiguous stream bytes starting at ``offset`` in ``direction``.

    ``ts_first_ns``/``frame_first`` belong to the packet that carried the first byte,
    ``ts_last_ns``/``frame_last`` to the one that carried the last byte.
    """

    flow: FlowInfo
    direction: Direction
    offset: int
    data: bytes
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    stream_id: int | None = None  # QUIC stream id; None for TCP


@dataclass(slots=True, frozen=True)
class StreamGap:
    """``nbytes`` starting at ``offset`` are not delivered; they are not zeros.  Most
    ``reason`` values mean the bytes were never captured; those in
    ``UNUSABLE_GAP_REASONS`` mean they were captured but a layer above TCP could not
    use them (``gap_wording`` says which, in words)."""

    flow: FlowInfo
    direction: Direction
    offset: int
    nbytes: int
    ts_ns: int
    frame: int
    reason: str
    stream_id: int | None = None  # QUIC stream id; None for TCP


# ``StreamGap.reason`` values of bytes that WERE captured but that a layer above TCP
# could not use (undecryptable, unframeable after lost sync): they pass on as a gap so
# offsets stay true, but "not captured" would be a false statement about the capture.
UNUSABLE_GAP_REASONS = frozenset({"tls-auth-failed", "tls-resync", "websocket-unreadable"})


def gap_wording(reason: str) -> str:
    """What happened to a gap's bytes, for anomaly details: never captured, or
    captured but unusable (issue 18 bug 9: two different facts)."""
    if reason in UNUSABLE_GAP_REASONS:
        return "were captured but could not be used"
    return "were not captured"


@dataclass(slots=True, frozen=True)
class StreamClose:
    """The TCP flow ended (FIN/RST, idle timeout, eviction or end of capture)."""

    flow: FlowInfo
    ts_ns: int
    reason: str


@dataclass(slots=True, frozen=True)
class StreamDone:
    """Both directions of the TCP flow ended with a FIN and every byte up to each FIN was
    delivered: no stream byte can come any more but one a closed side sends after its
    FIN.  The flow itself lingers (``Limits.closed_linger_ns``: the last ACK and late
    duplicates still count in its packets) until its ``StreamClose``.

    Why: a consumer may end its decoding here instead of at the ``StreamClose`` one
    linger later; a capture of a busy server's short connections holds thousands of
    lingering flows (1,000 closes a second, 10 s each), and their sessions were most of
    what such a run kept and its garbage collector walked again and again.  Emitted only
    for a consumer that asks for it (``capture_events(stream_done=True)``), once a flow,
    never for a flow closed by a RST (bytes sent before the reset, or the other side's
    bytes already on their way, may still come in)."""

    flow: FlowInfo
    ts_ns: int


@dataclass(slots=True, frozen=True)
class Datagram:
    """One UDP payload (after IP reassembly)."""

    flow: FlowInfo
    direction: Direction
    data: bytes
    ts_ns: int
    frame: int


@dataclass(slots=True, frozen=True)
class FlowEnd:
    """A UDP flow ended (idle timeout, eviction or end of capture)."""

    flow: FlowInfo
    ts_ns: int
    reason: str


@dataclass(slots=True, frozen=True)
class Anomaly:
    """Something odd or lossy happened; becomes a row of the ``anomalies`` table.

    ``kind`` is a stable dotted identifier (``capture.truncated``, ``ip.frag_overlap``,
    ``tcp.overlap_conflict``, ``limit.flow_table`` …) that users can group by.
    """

    kind: str
    detail: str
    ts_ns: int | None = None
    frame: int | None = None
    flow: FlowInfo | None = None
    direction: Direction | None = None
    offset: int | None = None
    nbytes: int | None = None


Event = StreamData | StreamGap | StreamClose | StreamDone | Datagram | FlowEnd | Anomaly


# -- QUIC (reassembly.quic) -----------------------------------------------------------
# Appended for the QUIC layer.  A UDP datagram the QUIC layer takes is not delivered as
# a ``Datagram``; it becomes one ``QuicPacket`` per QUIC packet in it, and the data of
# STREAM frames comes out as ``StreamData``/``StreamGap`` with ``stream_id`` set (one
# byte stream per QUIC stream id and direction, offsets from 0 as in the frames).


@dataclass(slots=True, frozen=True)
class QuicPacket:
    """One QUIC packet (a datagram may carry several, RFC 9000 §12.2).

    ``flow``/``direction`` are those of the datagram.  ``conn_flow_id`` is the flow of the
    QUIC connection the packet belongs to: the same as ``flow.flow_id`` unless the packet
    was found on another 5-tuple by its connection ID (migration, NAT rebinding).
    ``decrypted`` is None for packets that carry no protected payload (Version
    Negotiation, Retry, unknown versions); ``undecrypted_reason`` says why not otherwise.
    ``sni``/``alpn`` are set on the packet whose CRYPTO data completed the ClientHello.
    """

    flow: FlowInfo
    direction: Direction
    ts_ns: int
    frame: int
    conn_flow_id: int
    version: int
    packet_type: str  # initial / 0rtt / handshake / retry / vn / 1rtt / unknown
    dcid: str  # hex; for a short header as far as it could be told ("" if not)
    scid: str | None  # hex; long headers only
    packet_number: int | None  # once header protection is removed
    token_length: int | None  # Initial and Retry
    length: int  # bytes of this packet in the datagram
    datagram_offset: int  # where it starts in the UDP payload
    coalesced_index: int  # 0 for the first packet of the datagram
    frame_types: tuple[str, ...]  # in order, a run of PADDING once
    stream_ids: tuple[int, ...]  # of STREAM frames, in order, each once
    decrypted: bool | None
    undecrypted_reason: str | None
    key_phase: int | None  # 1-RTT, once header protection is removed
    supported_versions: tuple[int, ...] = ()  # Version Negotiation
    retry_integrity: str | None = None  # Retry: "ok" / "mismatch" / "unverified"
    sni: str | None = None
    alpn: tuple[str, ...] | None = None
    close_error_code: int | None = None  # CONNECTION_CLOSE
    close_frame_type: int | None = None  # CONNECTION_CLOSE (transport variant)
    close_reason: str | None = None


@dataclass(slots=True, frozen=True)
class QuicHandshake:
    """TLS facts of a QUIC connection, emitted each time new ones are parsed.

    ``stage`` is ``client_hello``, ``server_hello`` or ``encrypted_extensions``; every
    event carries everything known so far, so the last one of a flow is its summary
    (what goes on the flow row: ``sni``, ``alpn`` …).
    """

    flow: FlowInfo
    direction: Direction
    ts_ns: int
    frame: int
    stage: str
    version: int  # QUIC version
    initial_dcid: str  # hex: the DCID the Initial keys come from (the Retry SCID after a Retry)
    client_random: str | None  # hex: the key-log lookup key
    sni: str | None
    alpn: tuple[str, ...]  # offered by the client, in order
    alpn_selected: str | None  # from EncryptedExtensions (needs Handshake keys)
    tls_versions: tuple[int, ...]  # supported_versions offered
    tls_version: int | None  # selected by the server (0x0304 = TLS 1.3)
    cipher_suites: tuple[int, ...]  # offered
    cipher_suite: int | None  # selected
    early_data: bool  # the client offered 0-RTT
    hello_retry: bool = False  # the server sent a HelloRetryRequest


@dataclass(slots=True, frozen=True)
class QuicStreamEnd:
    """One direction of a QUIC stream ended: its bytes (and gaps) were all delivered.

    ``reason``: ``fin`` (FIN offset reached), ``reset`` (RESET_STREAM; ``error_code``),
    ``connection-close`` / ``flow-end`` / ``evicted`` (the connection ended first: any
    hole became a ``StreamGap``).  ``final_size`` is known for ``fin`` and ``reset``.
    """

    flow: FlowInfo
    direction: Direction
    stream_id: int
    ts_ns: int
    frame: int
    reason: str
    final_size: int | None
    error_code: int | None = None


QuicEvent = QuicPacket | QuicHandshake | QuicStreamEnd


# -- TLS over TCP (reassembly.tls) and WebSocket (reassembly.websocket) ----------------
# Appended for the TLS and WebSocket layers.  Each takes the ``StreamData``/``StreamGap``
# of the TCP flows it recognises and emits, in their place, ``StreamData``/``StreamGap``
# of the bytes it carries (decrypted application data; joined, unmasked, inflated
# WebSocket message payloads) in a new offset space per direction, stamped with the
# times and frames of the packets that carried the TLS records / WebSocket frames.
# ``FlowInfo.stream_bytes``/``gap_bytes`` of such a flow then count the carried bytes
# (what dissectors see), not the TCP bytes; ``TlsConnection`` keeps the TCP-level
# counts.  A flow whose TLS cannot be decrypted is passed through unchanged.


@dataclass(slots=True, frozen=True)
class TlsConnection:
    """One TLS connection on a TCP flow, emitted once, just before its ``StreamClose``.

    ``start_offsets`` are the TCP stream offsets (c2s, s2c) where TLS began (0 unless a
    plaintext exchange such as NATS's INFO came first); ``decrypted`` says whether its
    records were decrypted, ``undecrypted_reason`` why not (or why some were not).  The
    per-direction tuples are (c2s, s2c).  ``ts_ns``/``frame`` are those of its first
    record.
    """

    flow: FlowInfo
    ts_ns: int
    frame: int
    ts_last_ns: int
    frame_last: int
    start_offsets: tuple[int | None, int | None]
    end_offsets: tuple[int | None, int | None]
    client_random: str | None
    sni: str | None
    alpn: tuple[str, ...]  # offered by the client
    alpn_selected: str | None
    tls_versions: tuple[int, ...]  # supported_versions offered
    tls_version: int | None  # negotiated (0x0303 = TLS 1.2, 0x0304 = TLS 1.3)
    cipher_suites: tuple[int, ...]  # offered
    cipher_suite: int | None  # selected
    early_data: bool
    hello_retry: bool
    resumption: bool  # the client offered a PSK / session id (1.3 PSK, 1.2 ticket or id)
    decrypted: bool
    undecrypted_reason: str | None
    records: tuple[int, int]
    record_bytes: tuple[int, int]  # TCP bytes of TLS records (headers included)
    app_bytes: tuple[int, int]  # decrypted application data delivered
    undecrypted_records: tuple[int, int]  # encrypted records that could not be opened
    lost_bytes: tuple[int, int]  # TCP bytes of TLS lost to gaps or skipped while resyncing
    key_updates: tuple[int, int]
    alerts: tuple[str, ...]  # "c2s warning close_notify", "s2c encrypted" ...


@dataclass(slots=True, frozen=True)
class WebSocketHandshake:
    """An HTTP/1.1 upgrade to WebSocket (RFC 6455 §4) seen on a flow, emitted when the
    server's response has been read (``status`` 101 when accepted).  Offsets/provenance
    are those of the request (c2s) in the stream below WebSocket (TCP or decrypted TLS)."""

    flow: FlowInfo
    offset: int
    nbytes: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    method: str
    path: str
    host: str | None
    origin: str | None
    user_agent: str | None
    key: str | None
    protocols: tuple[str, ...]  # Sec-WebSocket-Protocol offered
    extensions: str | None  # Sec-WebSocket-Extensions offered
    status: int | None
    accept_ok: bool | None  # Sec-WebSocket-Accept matches the key (RFC 6455 §4.2.2)
    protocol: str | None  # selected
    extensions_accepted: str | None
    deflate: bool  # permessage-deflate in use
    response_offset: int | None
    response_nbytes: int | None


@dataclass(slots=True, frozen=True)
class WebSocketControl:
    """A WebSocket control frame (RFC 6455 §5.5): ``opcode`` 8 close, 9 ping, 10 pong.
    Offsets are those of the frame in the stream below WebSocket."""

    flow: FlowInfo
    direction: Direction
    offset: int
    nbytes: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    opcode: int
    payload: bytes
    close_code: int | None = None
    close_reason: str | None = None


LayerEvent = TlsConnection | WebSocketHandshake | WebSocketControl

# What the layers above the transport pass along (``engine.capture_events``): the
# transport's events, QUIC's and the TLS/WebSocket layers'.  Each layer replaces the
# events of the flows it takes and passes every other event on untouched.
CaptureEvent = Event | QuicEvent | LayerEvent

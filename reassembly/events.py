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

from dataclasses import dataclass, field
from enum import IntEnum


class Direction(IntEnum):
    """Which way a chunk travelled, relative to the decided client/server roles."""

    C2S = 0
    S2C = 1

    @property
    def short(self) -> str:
        return "c2s" if self is Direction.C2S else "s2c"

    def flip(self) -> Direction:
        return Direction.S2C if self is Direction.C2S else Direction.C2S


class Transport(IntEnum):
    TCP = 6
    UDP = 17


class RoleSource(IntEnum):
    """How client and server were decided, most to least reliable."""

    SYN = 0  # we saw the client's SYN
    SYN_ACK = 1  # we saw the server's SYN-ACK (SYN missing or captured later)
    PORT = 2  # no handshake: the well-known / lower port is taken as the server
    FIRST_PACKET = 3  # ports gave no hint: the first sender is taken as the client

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


@dataclass(slots=True)
class FlowInfo:
    """Everything known about one flow; updated in place while the flow lives.

    The same object is referenced by every event of the flow, so consumers can read
    endpoints without each event carrying them.  It is final once ``StreamClose`` (TCP)
    or ``FlowEnd`` (UDP) has been emitted.
    """

    flow_id: int
    transport: Transport
    client: Endpoint
    server: Endpoint
    role_source: RoleSource
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    packets: list[int] = field(default_factory=lambda: [0, 0])
    # bytes of transport payload as captured, per direction (retransmissions included)
    payload_bytes: list[int] = field(default_factory=lambda: [0, 0])
    # bytes delivered as stream data (each stream byte counted once)
    stream_bytes: list[int] = field(default_factory=lambda: [0, 0])
    gap_bytes: list[int] = field(default_factory=lambda: [0, 0])
    overlap_conflicts: list[int] = field(default_factory=lambda: [0, 0])
    mid_stream: list[bool] = field(default_factory=lambda: [False, False])
    close_reason: str = ""
    vlan: tuple[int, ...] = ()

    def endpoint(self, direction: Direction) -> tuple[Endpoint, Endpoint]:
        """(source, destination) of a chunk travelling in ``direction``."""
        if direction is Direction.C2S:
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
    """``nbytes`` starting at ``offset`` were never captured; they are not zeros."""

    flow: FlowInfo
    direction: Direction
    offset: int
    nbytes: int
    ts_ns: int
    frame: int
    reason: str
    stream_id: int | None = None  # QUIC stream id; None for TCP


@dataclass(slots=True, frozen=True)
class StreamClose:
    """The TCP flow ended (FIN/RST, idle timeout, eviction or end of capture)."""

    flow: FlowInfo
    ts_ns: int
    reason: str


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


Event = StreamData | StreamGap | StreamClose | Datagram | FlowEnd | Anomaly

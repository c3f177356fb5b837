"""The WebSocket layer: stream events in, WebSocket message payload streams out.

Strategy (sans-IO, after wsproto; one ``_Conn`` per WebSocket flow):

* **Upgrade** (RFC 6455 §4).  A TCP flow whose client direction, as this layer sees it
  (raw TCP, or the decrypted stream of the TLS layer below: ``wss``), starts with
  ``GET `` is held until the request's header block is complete (at most
  ``Limits.ws_max_handshake_bytes``).  A request with ``Upgrade: websocket`` waits for
  the response; ``101`` makes the flow WebSocket from the byte after each header block,
  anything else lets both directions through unchanged.  Either way one
  ``WebSocketHandshake`` event records the exchange.  Any port.
* **Joining late** (a flow captured after its upgrade: a direction joined mid-stream or
  begun by a gap, and no ``GET``).  Nothing in one frame header says "WebSocket", but a
  run of them does: the flow's events are held (charged to the memory budget, at most
  ``LATE_HOLD_BYTES`` a direction) while each direction is read as frames from its
  first byte, or from the first of its first ``LATE_LOOK_BYTES`` offsets where a run of
  at least three frames begins (searched again every ``LATE_SEARCH_STEP`` bytes).  It
  is WebSocket when both directions read so, with three frames between them, or one
  direction with four (at the end of what may be held: both, or one with three).
  Every header must be plausible (known opcode; FIN on control frames, at most 125
  bytes; RSV1 only on a message's first frame, for permessage-deflate; the shortest
  length encoding, as RFC 6455 §5.2 requires), every frame of a direction masked alike,
  the two directions the other way round from each other (clients mask, servers do
  not: the masked side is taken as the client, whatever the port hint said: the flow's
  roles are swapped when the hint had them the other way, role source
  ``websocket-mask``), and the frames must tile what was held.  NATS and TLS never pass
  (their first bytes are reserved opcodes, FIN-less control frames or continuations
  without a message).  The flow becomes WebSocket with one ``WebSocketJoin`` event; the
  bytes before a direction's first frame (the tail of a frame whose header was not captured) are a
  ``websocket-unreadable`` gap, and a message already in progress is read on (its
  continuation frames) unless the direction carries compressed messages.
  permessage-deflate cannot be known from a handshake: a message with RSV1 is inflated
  from an empty window, which is exact until the data refers to bytes sent before the
  capture began; from there the direction is lost (``websocket.lost_sync`` says why).
* **Frames** (RFC 6455 §5).  Headers are read as they come (up to 14 bytes); payloads
  are unmasked as they arrive (the mask position carries across chunks), so a large
  frame is never buffered.  Data frames (text, binary, continuation) of a message are
  joined: their payload bytes form one byte stream per direction, in a new offset space
  from 0, delivered as ``StreamData`` stamped with the packets that carried them.
  Control frames (close, ping, pong: at most 125 bytes) are collected and emitted as
  ``WebSocketControl``; they may arrive between the fragments of a message.
* **permessage-deflate** (RFC 7692).  When the response accepted it, a message whose
  first frame has RSV1 set is inflated (raw DEFLATE, the ``00 00 ff ff`` tail added at
  the message end), with the sliding window kept across messages unless the
  ``*_no_context_takeover`` parameter of that direction was agreed.  One message may
  inflate to ``Limits.ws_max_inflated_bytes`` at most: the rest is cut (a gap).  A
  direction whose output outgrows ``ws_max_inflate_ratio`` times its compressed input
  (past a floor), or a run whose inflaters together pass ``ws_max_inflated_total_bytes``,
  stops decompressing: a bomb of ``\\r\\n`` (1 KB → 1 MiB) costs the bound, not minutes.
* **Loss.**  A gap inside an uncompressed frame's payload becomes a gap of the same
  size in the message stream and reading goes on.  A gap in a frame header, or across
  frames, loses the framing; a gap in a compressed message loses the inflate window
  (unless there is no context takeover, then only that message).  A direction that lost
  its framing delivers the rest of its bytes as one gap per chunk
  (``websocket-unreadable``) with one ``websocket.lost_sync`` anomaly.

Byte accounting: as for TLS, ``FlowInfo.stream_bytes``/``gap_bytes`` of a WebSocket flow
count the message stream (what dissectors see), not the frames.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from reassembly.events import (
    Anomaly,
    CaptureEvent,
    Direction,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    StreamDone,
    StreamGap,
    WebSocketControl,
    WebSocketHandshake,
)
from reassembly.flows import RoleSwaps, turned
from reassembly.limits import Limits
from reassembly.passing import Passing
from reassembly.provenance import CoalescedData, Extent, ProvenanceBuffer

__all__ = ["WebSocketJoin", "WebSocketLayer", "accept_key", "parse_extensions"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
_GET = b"GET "
_TAIL = b"\x00\x00\xff\xff"  # RFC 7692 §7.2.2
MAX_CONTROL_PAYLOAD = 125  # RFC 6455 §5.5
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
_OP_NAMES = {OP_CLOSE: "close", OP_PING: "ping", OP_PONG: "pong"}
_C2S, _S2C = Direction.C2S, Direction.S2C
# side modes
_FRAMES, _DEAD = 1, 2
# What one raw-DEFLATE inflater holds (zlib's inflate state and its 32 KiB window), for
# the run's memory budget.
INFLATER_BYTES = 48 * 1024
# Joining late: bytes of each direction held and looked through before the flow is
# declared WebSocket or not (the first frame header is searched for among as many
# offsets)
LATE_LOOK_BYTES = 4096
# ... and held at most, per direction, while the frames found are too few to tell (one
# large frame): past it the flow is decided on what was seen
LATE_HOLD_BYTES = 64 * 1024
# ... and searched past a direction's first byte again when it has grown by this much
# (a flow of 1-byte segments would otherwise cost a search per byte)
LATE_SEARCH_STEP = 512
_DATA_OPS = (OP_CONT, OP_TEXT, OP_BINARY)
_CONTROL_OPS = (OP_CLOSE, OP_PING, OP_PONG)
_NO_EXTENT = Extent(0, 0, 0, 0, 0, 0)


@dataclass(slots=True, frozen=True)
class WebSocketJoin:
    """A flow recognised as WebSocket from its frames, its upgrade not captured (see the
    module docstring).  ``first_frame``: per direction (c2s, s2c), the offset in the
    stream below WebSocket of the first frame header read, None when that direction
    sent nothing while the flow was looked at; ``client``: the direction that carries
    masked frames (a WebSocket client's); ``deflate``: a frame with RSV1 was seen."""

    flow: FlowInfo
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    first_frame: tuple[int | None, int | None]
    client: Direction
    deflate: bool


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2 item 5.4)."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def parse_extensions(value: str | None) -> dict[str, dict[str, str]]:
    """``permessage-deflate; client_max_window_bits`` → {name: {param: value}} (the
    first offer of each extension)."""
    out: dict[str, dict[str, str]] = {}
    if not value:
        return out
    for ext in value.split(","):
        parts = [p.strip() for p in ext.split(";") if p.strip()]
        if not parts:
            continue
        params = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            params[k.strip().lower()] = v.strip().strip('"')
        out.setdefault(parts[0].lower(), params)
    return out


def _head(block: bytes) -> tuple[str, dict[str, str]]:
    """First line and headers (lower-case names; repeated ones joined by ", ")."""
    lines = block.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return lines[0], headers


def _unmask(data: bytes | bytearray, mask: bytes, pos: int) -> bytes | bytearray:
    """XOR with the 4-byte mask starting at mask position ``pos`` (RFC 6455 §5.3)."""
    n = len(data)
    if not n:
        return data
    rot = mask[pos % 4 :] + mask[: pos % 4]
    key = (rot * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


class _Side:
    __slots__ = (
        "direction", "mode", "out_off", "buf", "hdr_off", "hdr_at", "remaining",
        "mask", "mask_pos", "opcode", "fin", "control", "msg_op", "msg_deflate", "inflater",
        "inflated", "no_context", "skip_msg", "masked_reported", "frames", "messages",
        "deflate_in", "deflate_out", "masks", "joined", "unread", "tail",
    )

    def __init__(self, direction: Direction) -> None:
        self.direction = direction
        self.mode = _FRAMES
        self.out_off = 0
        # the frame bytes fed and not yet read, with their packets (the stream below
        # WebSocket's offsets): a frame header cut by a packet boundary waits here
        self.buf = ProvenanceBuffer()
        self.hdr_off = 0  # offset (below) of the current frame's first byte
        # a control frame's header: its bytes and packets (a data frame's are asked of
        # the buffer only when an anomaly names them: most frames need none)
        self.hdr_at = _NO_EXTENT
        self.remaining = -1  # payload bytes left in the current frame; -1: reading a header
        self.mask: bytes | None = None
        self.mask_pos = 0
        self.opcode = 0
        self.fin = True
        self.control = bytearray()
        self.msg_op: int | None = None  # opcode of the data message in progress
        self.msg_deflate = False
        self.inflater: zlib._Decompress | None = None
        self.inflated = 0
        self.no_context = False
        self.skip_msg = False  # the rest of this message is lost (inflate cut or gap)
        self.masked_reported = False
        self.frames = 0
        self.messages = 0
        # compressed bytes fed to / inflated bytes taken from the inflater, all messages
        # of this direction: the decompression ratio bound (Limits.ws_max_inflate_ratio)
        self.deflate_in = 0
        self.deflate_out = 0
        self.masks = direction == _C2S  # whether this side's frames should be masked
        # joined late: a message may be in progress when reading starts (a continuation
        # frame then goes on with it)
        self.joined = False
        self.unread = False  # joined late on compressed messages (RSV1 seen)
        self.tail = False  # the message in progress began before the capture: unreadable


class _Conn:
    __slots__ = ("flow", "state", "req", "req_events", "req_bytes", "resp", "resp_events",
                 "resp_bytes", "request", "sides", "deflate", "reported", "layer", "late",
                 "searched")

    def __init__(self, flow: FlowInfo, layer: WebSocketLayer | None = None) -> None:
        self.flow = flow
        self.layer = layer  # for the memory budget: giving up this flow's inflaters
        self.state = "request"  # request → response → ws
        self.req = bytearray()
        self.req_events: list[StreamData | StreamGap] = []
        self.req_bytes = 0
        self.resp = bytearray()
        self.resp_events: list[StreamData | StreamGap] = []
        self.resp_bytes = 0
        self.request: dict[str, Any] | None = None
        self.sides = (_Side(_C2S), _Side(_S2C))
        self.deflate = False
        self.reported: set[str] = set()
        self.late: list[StreamData | StreamGap] = []  # joining late: events held
        # joining late: per direction, bytes held when its first frame was last searched
        # for past its first byte (the search is repeated every LATE_SEARCH_STEP bytes)
        self.searched = [-LATE_SEARCH_STEP, -LATE_SEARCH_STEP]

    def release_memory(self, need: int) -> None:
        if self.layer is not None:
            self.layer.release_memory(self, need)


class WebSocketLayer:
    """Stream events → WebSocket message streams (see the module docstring)."""

    def __init__(self, limits: Limits, roles: RoleSwaps | None = None,
                 passing: Passing | None = None) -> None:
        """``roles`` (connected to the flow table, ``immediate``): fixes a flow joined
        late whose masked side (the client) the port hint took for the server, turns
        the flow's events still on their way, and hands over the anomaly at once (so it
        has the same place whatever reader runs ahead); without it the flow keeps its
        roles and its frames are read the other way round (``websocket.roles``).
        ``passing``: the runs of flows this layer passes on as they are may skip it
        (``reassembly.passing``), unless ``roles`` still turns their events."""
        self.limits = limits
        self._roles = roles
        self._passing = passing
        self._member = passing.join() if passing is not None else -1
        if passing is not None and roles is not None:
            passing.veto(roles.turns, roles.turning)
        self._out: list[CaptureEvent | WebSocketJoin | CoalescedData] = []
        self._conns: dict[int, _Conn] = {}
        self._seen: set[int] = set()  # flows whose first client chunk was looked at
        self.counters = {"connections": 0, "frames": 0}
        # bytes all inflaters of this run produced (Limits.ws_max_inflated_total_bytes)
        self.inflated_total = 0

    def process(self, events: Iterable[CaptureEvent | CoalescedData]
                ) -> Iterator[CaptureEvent | WebSocketJoin | CoalescedData]:
        out = self._out
        for ev in self._roles.events(events) if self._roles is not None else events:
            if (type(ev) is StreamData or type(ev) is StreamGap) and ev.stream_id is None:
                self.stream(ev)
            elif type(ev) is CoalescedData:
                self.coalesced(ev)
            elif type(ev) is StreamClose:
                self.close(ev)
            elif type(ev) is StreamDone:
                if ev.flow.flow_id not in self._conns:
                    out.append(ev)  # (a WebSocket flow's inner session ends at its close)
            else:
                out.append(ev)
            if out:
                yield from out
                out.clear()

    # -- routing --------------------------------------------------------------------------

    def stream(self, ev: StreamData | StreamGap) -> None:
        fid = ev.flow.flow_id
        conn = self._conns.get(fid)
        if conn is None:
            if fid not in self._seen:
                self._seen.add(fid)
                if (ev.direction == _C2S and isinstance(ev, StreamData)
                        and _GET.startswith(ev.data[:4])):
                    conn = self._conns[fid] = _Conn(ev.flow, self)
                    self._request(conn, ev)
                    return
                if _started_late(ev):
                    conn = self._conns[fid] = _Conn(ev.flow, self)
                    conn.state = "late"
                    self._late(conn, ev)
                    return
            self._out.append(ev)
            if self._passing is not None:  # as ``coalesced`` says for a run
                self._passing.passes(self._member, fid, ev.direction)
            return
        if conn.state == "ws":
            self._frames_input(conn, conn.sides[ev.direction], ev)
        elif conn.state == "late":
            self._late(conn, ev)
        elif conn.state == "request":
            if ev.direction == _C2S:
                if isinstance(ev, StreamGap):
                    self._release(conn)
                    self._out.append(ev)
                else:
                    self._request(conn, ev)
            else:  # the server spoke before the request was complete: not WebSocket
                self._release(conn)
                self._out.append(ev)
        else:  # waiting for the response
            if ev.direction == _C2S:
                conn.req_events.append(ev)
                if isinstance(ev, StreamData):
                    conn.req_bytes += len(ev.data)
                if conn.req_bytes > self.limits.ws_max_handshake_bytes + (1 << 20):
                    self._release(conn)
            elif isinstance(ev, StreamGap):
                conn.resp_events.append(ev)
                self._release(conn)
            else:
                self._response(conn, ev)

    def coalesced(self, ev: CoalescedData) -> None:
        """A run of segments of one TCP direction (``CoalescedData``): passed on whole
        when its flow was looked at and is not (or no longer) a candidate, as ``stream``
        passes each of its segments; otherwise its segments one by one."""
        fid = ev.flow.flow_id
        if fid in self._seen and fid not in self._conns:
            self._out.append(ev)
            if self._passing is not None:  # so until the flow ends (``_conns`` takes a
                # flow only before it is ``_seen``)
                self._passing.passes(self._member, fid, ev.direction)
            return
        for part in ev.split():
            self.stream(part)

    def close(self, ev: StreamClose) -> None:
        fid = ev.flow.flow_id
        self._seen.discard(fid)
        if self._passing is not None:
            self._passing.holds(self._member, fid)
        late = self._conns.get(fid)
        if late is not None and late.state == "late":
            self._late_decide(late, final=True)
        conn = self._conns.pop(fid, None)
        if conn is not None and conn.state != "ws":
            self._release(conn)
        if conn is not None and self.limits.budget is not None:
            self.limits.budget.hold(conn, 0)
        self._out.append(ev)

    def _release(self, conn: _Conn) -> None:
        """Not (or no longer possibly) WebSocket: everything held goes on unchanged."""
        if conn.state == "response" and conn.request is not None:
            self._handshake_event(conn, None, {}, None)
        self._conns.pop(conn.flow.flow_id, None)
        self._out.extend(conn.req_events)
        self._out.extend(conn.resp_events)
        conn.req_events, conn.resp_events = [], []
        conn.state = "none"

    # -- handshake ------------------------------------------------------------------------

    def _request(self, conn: _Conn, ev: StreamData) -> None:
        conn.req_events.append(ev)
        conn.req_bytes += len(ev.data)
        conn.req += ev.data
        if len(conn.req) < 4:
            return
        if conn.req[:4] != _GET:
            self._release(conn)
            return
        end = conn.req.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.req) > self.limits.ws_max_handshake_bytes:
                self._release(conn)
            return
        line, headers = _head(bytes(conn.req[:end]))
        if "websocket" not in headers.get("upgrade", "").lower():
            self._release(conn)
            return
        parts = line.split(" ")
        first = conn.req_events[0]
        conn.request = {
            "end": end + 4,
            "method": parts[0],
            "path": parts[1] if len(parts) > 1 else "",
            "headers": headers,
            "offset": first.offset,
            "ts_first": _ts(first),  # (data: a gap before the request ends it)
            "frame_first": _frame(first),
            "ts_last": ev.ts_last_ns,
            "frame_last": ev.frame_last,
        }
        conn.state = "response"
        conn.req = bytearray()

    def _response(self, conn: _Conn, ev: StreamData) -> None:
        conn.resp_events.append(ev)
        conn.resp_bytes += len(ev.data)
        conn.resp += ev.data
        if len(conn.resp) >= 5 and conn.resp[:5] != b"HTTP/":
            self._release(conn)
            return
        end = conn.resp.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.resp) > self.limits.ws_max_handshake_bytes:
                self._release(conn)
            return
        line, headers = _head(bytes(conn.resp[:end]))
        parts = line.split(" ")
        code = parts[1] if len(parts) > 1 else ""
        # three ASCII digits (RFC 9110 §15): str.isdigit alone also passes latin-1's
        # superscripts and 10,000-digit numbers, on which int() raises
        status = int(code) if len(code) == 3 and code.isascii() and code.isdigit() else None
        first = conn.resp_events[0]
        resp = {"offset": first.offset, "nbytes": end + 4}
        if status != 101 or "websocket" not in headers.get("upgrade", "").lower():
            self._handshake_event(conn, status, headers, resp)
            conn.request = None
            self._release(conn)
            return
        self._handshake_event(conn, status, headers, resp)
        self._upgrade(conn, end + 4, headers)

    def _handshake_event(self, conn: _Conn, status: int | None, headers: dict[str, str],
                         resp: dict[str, int] | None) -> None:
        req = conn.request
        if req is None:
            return
        rh = req["headers"]
        key = rh.get("sec-websocket-key")
        accept = headers.get("sec-websocket-accept")
        exts = parse_extensions(headers.get("sec-websocket-extensions"))
        deflate = status == 101 and "permessage-deflate" in exts
        conn.deflate = deflate
        if deflate:
            params = exts["permessage-deflate"]
            conn.sides[_C2S].no_context = "client_no_context_takeover" in params
            conn.sides[_S2C].no_context = "server_no_context_takeover" in params
        self._out.append(WebSocketHandshake(
            conn.flow, req["offset"], req["end"], req["ts_first"], req["ts_last"],
            req["frame_first"], req["frame_last"], req["method"], req["path"], rh.get("host"),
            rh.get("origin"), rh.get("user-agent"), key,
            tuple(p.strip() for p in rh.get("sec-websocket-protocol", "").split(",")
                  if p.strip()),
            rh.get("sec-websocket-extensions"), status,
            None if key is None or accept is None else accept == accept_key(key),
            headers.get("sec-websocket-protocol"), headers.get("sec-websocket-extensions"),
            deflate, resp["offset"] if resp else None, resp["nbytes"] if resp else None,
        ))
        if status is not None and status != 101:
            self._out.append(Anomaly(
                "websocket.refused",
                f"WebSocket upgrade of {req['path']!r} answered with HTTP {status}; the flow "
                "is passed on as it is", req["ts_first"], req["frame_first"], conn.flow, _S2C,
            ))
        self.counters["connections"] += status == 101

    def _upgrade(self, conn: _Conn, resp_end: int, headers: dict[str, str]) -> None:
        conn.state = "ws"
        flow = conn.flow
        req = conn.request
        assert req is not None
        req_events, resp_events = conn.req_events, conn.resp_events
        conn.req_events, conn.resp_events = [], []
        for side, events, hdr_end in ((conn.sides[_C2S], req_events, req["end"]),
                                      (conn.sides[_S2C], resp_events, resp_end)):
            base = events[0].offset if events else 0
            for ev in events:
                if isinstance(ev, StreamData):
                    flow.stream_bytes[side.direction] -= len(ev.data)
                    # the bytes after the header block are the first frames
                    cut = base + hdr_end - ev.offset
                    if cut < len(ev.data):
                        part = ev.data[max(cut, 0):]
                        flow.stream_bytes[side.direction] += len(part)
                        self._frames_input(conn, side, StreamData(
                            flow, ev.direction, ev.offset + max(cut, 0), part, ev.ts_first_ns,
                            ev.ts_last_ns, ev.frame_first, ev.frame_last))
                else:
                    self._frames_input(conn, side, ev)

    # -- joining late ---------------------------------------------------------------------

    def _late(self, conn: _Conn, ev: StreamData | StreamGap) -> None:
        """Hold ``ev`` while the flow is looked at; decide when there is enough."""
        conn.late.append(ev)
        d = ev.direction
        gap_after_data = isinstance(ev, StreamGap) and any(
            isinstance(e, StreamData) and e.direction == d for e in conn.late)
        held = sum(len(e.data) for e in conn.late
                   if isinstance(e, StreamData) and e.direction == d)
        self._late_decide(conn, final=gap_after_data or held > LATE_HOLD_BYTES)
        budget = self.limits.budget
        if budget is not None and conn.state == "late":
            # what is held while looking is charged; past the budget the flow is decided
            # on what was seen (release_memory)
            budget.hold(conn, sum(len(e.data) for e in conn.late
                                  if isinstance(e, StreamData)))

    def _late_decide(self, conn: _Conn, final: bool) -> None:
        """WebSocket (``_join``), not (``_late_release``), or wait (module docstring)."""
        looks = []
        for d in Direction:
            held = sum(len(e.data) for e in conn.late
                       if isinstance(e, StreamData) and e.direction == d)
            search = final or held >= conn.searched[d] + LATE_SEARCH_STEP
            if search:
                conn.searched[d] = held
            looks.append(_look(conn.late, d, search))
        found = [x for x in looks if isinstance(x, _Found)]
        masks = {x.masked for x in found}
        headers = sum(x.headers for x in found)
        strong_client = any(x.masked and x.headers >= 3 for x in found)
        if _NO in looks and not strong_client or len(found) == 2 and len(masks) == 1:
            self._late_release(conn)
        elif len(found) == 2 and headers >= 3 or any(x.headers >= 4 for x in found):
            self._join(conn, looks)
        elif final:
            if len(found) == 2 or any(x.headers >= 3 for x in found):
                self._join(conn, looks)
            else:
                self._late_release(conn)

    def _late_release(self, conn: _Conn) -> None:
        self._conns.pop(conn.flow.flow_id, None)
        self._out.extend(conn.late)
        conn.late = []
        conn.state = "none"
        if self.limits.budget is not None:
            self.limits.budget.hold(conn, 0)

    def _join(self, conn: _Conn, looks: list[_Found | str | None]) -> None:
        """The flow is WebSocket from here: read what was held as frames."""
        flow = conn.flow
        conn.state = "ws"
        conn.deflate = True  # RSV1 can only mean permessage-deflate
        if self.limits.budget is not None:
            self.limits.budget.hold(conn, 0)  # the held events are given back below
        found = {d: x for d, x in zip(Direction, looks, strict=True) if isinstance(x, _Found)}
        masked = [d for d, x in found.items() if x.masked]
        unmasked = [d for d, x in found.items() if not x.masked]
        client = masked[0] if masked else unmasked[0].flip()
        held, conn.late = conn.late, []
        roles = self._roles
        evidence = held[-1]
        if client != _C2S and roles is not None and roles(
                flow, RoleSource.WEBSOCKET_MASK, (_ts(evidence, True), _frame(evidence, True))):
            # the held events (and those still on their way: ``RoleSwaps.events``) were
            # emitted in the orientation the port hint gave
            self._out.extend(roles.ready)
            roles.ready.clear()
            held = [turned(ev) for ev in held]
            found = {d.flip(): x for d, x in found.items()}
            client = _C2S
        first, last = held[0], held[-1]
        self._out.append(WebSocketJoin(
            flow, _ts(first), _ts(last, True), _frame(first), _frame(last, True),
            (_at(found.get(_C2S)), _at(found.get(_S2C))), client,
            any(x.rsv1 for x in found.values())))
        self.counters["connections"] += 1
        for side in conn.sides:
            side.masks = side.direction == client
            side.joined = True
            x = found.get(side.direction)
            side.unread = x is not None and x.rsv1
        if client != _C2S:
            self._anomaly(conn, conn.sides[_S2C], "websocket.roles",
                          "masked frames (a WebSocket client's) travel s2c: the flow's client "
                          "and server, taken from its ports, are the other way round from "
                          "WebSocket's; its frames are read as such",
                          _ts(first), _frame(first))
        for ev in held:
            side = conn.sides[ev.direction]
            x = found.get(ev.direction)
            start = x.offset if x is not None else None
            if start is None or ev.offset >= start:
                self._frames_input(conn, side, ev)
                continue
            if isinstance(ev, StreamGap):  # begun by a gap: still one in the message stream
                flow.gap_bytes[side.direction] -= ev.nbytes
                self._emit_gap(conn, side, ev.nbytes, ev.ts_ns, ev.frame, ev.reason)
                continue
            # the tail of a frame whose header was not captured: unreadable
            data = ev.data
            cut = min(start - ev.offset, len(data))
            flow.stream_bytes[side.direction] -= cut
            self._emit_gap(conn, side, cut, ev.ts_first_ns, ev.frame_first,
                           "websocket-unreadable")
            if cut < len(data):
                self._frames_input(conn, side, StreamData(
                    flow, ev.direction, start, data[cut:], ev.ts_first_ns, ev.ts_last_ns,
                    ev.frame_first, ev.frame_last))

    # -- frames ---------------------------------------------------------------------------

    def _frames_input(self, conn: _Conn, side: _Side, ev: StreamData | StreamGap) -> None:
        flow = conn.flow
        d = side.direction
        if isinstance(ev, StreamGap):
            flow.gap_bytes[d] -= ev.nbytes
            if side.joined and not side.frames and not side.buf.held:  # no frame read yet
                self._emit_gap(conn, side, ev.nbytes, ev.ts_ns, ev.frame, ev.reason)
            else:
                self._gap(conn, side, ev)
            side.buf.reset(ev.offset + ev.nbytes)  # (a header it cut is lost with the framing)
            return
        data = ev.data
        flow.stream_bytes[d] -= len(data)
        if side.mode == _DEAD:
            self._emit_gap(conn, side, len(data), ev.ts_first_ns, ev.frame_first,
                           "websocket-unreadable")
            return
        b = side.buf
        if b.started and b.base + len(b.data) != ev.offset:  # (bytes this layer skipped)
            b.reset(ev.offset)
        b.feed(data, ev)
        out = bytearray()
        buf = b.data
        n = len(buf)  # (the loop only reads the buffer)
        while side.mode == _FRAMES and b.pos < n:
            if side.remaining < 0:
                if not self._header(conn, side, ev, out):
                    break
                continue
            pos = b.pos
            take = min(side.remaining, n - pos)
            chunk: bytes | bytearray = buf[pos : pos + take]
            b.pos = pos + take
            if side.mask is not None:
                chunk = _unmask(chunk, side.mask, side.mask_pos)
            side.mask_pos += take
            side.remaining -= take
            op = side.opcode
            if op >= 8:
                side.control += chunk
            elif op in _DATA_OPS and side.msg_op is not None:
                self._payload(conn, side, chunk, ev, out)
            if side.remaining == 0:
                self._frame_end(conn, side, ev, out, b.offset)
        self._flush(conn, side, out, ev)
        left = n - b.pos
        if side.mode == _DEAD and left:
            self._emit_gap(conn, side, left, ev.ts_first_ns, ev.frame_first,
                           "websocket-unreadable")
        if left and side.mode == _FRAMES:
            b.compact()  # what is left is a frame header cut by the end of the chunk
        else:
            b.clear()

    def _header(self, conn: _Conn, side: _Side, ev: StreamData, out: bytearray) -> bool:
        """Read the frame header at the buffer's read position; False (nothing read) when
        the buffer does not hold all of it yet."""
        b = side.buf
        buf, pos = b.data, b.pos
        side.hdr_off = b.offset
        avail = len(buf) - pos
        if avail < 2:
            return False
        b0, b1 = buf[pos], buf[pos + 1]
        ln = b1 & 0x7F
        size = 2 + (2 if ln == 126 else 8 if ln == 127 else 0) + (4 if b1 & 0x80 else 0)
        if avail < size:
            return False
        fin, rsv, op = bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F
        masked = bool(b1 & 0x80)
        at = pos + 2
        if ln == 126:
            ln = int.from_bytes(buf[pos + 2 : pos + 4], "big")
            at = pos + 4
        elif ln == 127:
            ln = int.from_bytes(buf[pos + 2 : pos + 10], "big")
            at = pos + 10
        mask = bytes(buf[at : at + 4]) if masked else None
        b.pos = pos + size
        hdr_end = side.hdr_off + size
        if op >= 8:
            side.hdr_at = b.extent(side.hdr_off, hdr_end)
        side.frames += 1
        self.counters["frames"] += 1
        # joined late: the first frame may go on with a message begun before the capture
        tail = side.joined and side.frames == 1 and op == OP_CONT and side.msg_op is None
        problem = _header_problem(fin, rsv, op, ln, conn.deflate,
                                  side.msg_op is not None or tail)
        if problem is not None:
            self._lost(conn, side, f"bad frame header at offset {side.hdr_off}: {problem}",
                       ev, out)
            return True
        if masked != side.masks and not side.masked_reported:
            side.masked_reported = True
            self._anomaly(conn, side, "websocket.masking",
                          f"{side.direction.short} frame {'with' if masked else 'without'} a "
                          "mask (RFC 6455 §5.1: clients mask, servers do not); read anyway",
                          *_first_packet(b.extent(side.hdr_off, hdr_end)), side.hdr_off)
        if tail:
            # its opcode and compression are unknown: read on unless the flow compresses
            side.msg_op, side.msg_deflate, side.inflated = OP_BINARY, False, 0
            side.skip_msg, side.tail = False, side.unread
        if op in (OP_TEXT, OP_BINARY):
            if side.msg_op is not None:
                self._anomaly(conn, side, "websocket.bad_frame",
                              f"new data frame at offset {side.hdr_off} while a fragmented "
                              "message was still open; the open message ends here",
                              *_first_packet(b.extent(side.hdr_off, hdr_end)), side.hdr_off)
                self._message_end(conn, side, ev, out)
            side.msg_op = op
            side.msg_deflate = bool(rsv & 4)
            side.inflated = 0
            side.skip_msg = False
        side.opcode, side.fin, side.mask, side.mask_pos = op, fin, mask, 0
        side.remaining = ln
        side.control = bytearray()
        if ln == 0:
            self._frame_end(conn, side, ev, out, hdr_end)
        return True

    def _payload(self, conn: _Conn, side: _Side, chunk: bytes | bytearray, ev: StreamData,
                 out: bytearray) -> None:
        if side.skip_msg:
            return
        if side.tail:  # compressed, with a window that began before the capture
            self._flush(conn, side, out, ev)
            self._emit_gap(conn, side, len(chunk), ev.ts_first_ns, ev.frame_first,
                           "websocket-unreadable")
            return
        if not side.msg_deflate:
            out += chunk
            return
        self._inflate(conn, side, chunk, ev, out)

    def _inflate(self, conn: _Conn, side: _Side, chunk: bytes | bytearray, ev: StreamData,
                 out: bytearray) -> None:
        if side.inflater is None:
            side.inflater = zlib.decompressobj(-15)
            budget = self.limits.budget
            if budget is not None:
                held = sum(s.inflater is not None for s in conn.sides)
                budget.hold(conn, held * INFLATER_BYTES)
                if side.inflater is None:  # the budget took it back at once (too small)
                    return
        lim = self.limits
        cap = lim.ws_max_inflated_bytes
        room = cap - side.inflated
        # never ask for more output than the ratio and the run's budget allow: the work
        # of a bomb stops at the bound, not after it
        side.deflate_in += len(chunk)
        by_ratio = max(lim.ws_inflate_ratio_floor_bytes,
                       lim.ws_max_inflate_ratio * side.deflate_in) - side.deflate_out
        by_run = lim.ws_max_inflated_total_bytes - self.inflated_total
        bound = min(room, by_ratio, by_run)
        try:
            got = side.inflater.decompress(chunk, max(bound, 0) + 1)
        except zlib.error as exc:
            why = f"permessage-deflate data does not inflate ({exc})"
            if not side.joined:
                self._inflate_lost(conn, side, why, ev, out)
                return
            why += (": joined late, the inflate window began before the capture, and this "
                    "message refers to bytes sent before it")
            self._inflate_lost(conn, side, why, ev, out)
            # the compressed bytes stay in the accounting, as the unreadable rest will
            self._emit_gap(conn, side, len(chunk), ev.ts_first_ns, ev.frame_first,
                           "websocket-unreadable")
            return
        side.deflate_out += len(got)
        self.inflated_total += len(got)
        if len(got) > bound and bound < room:
            got = got[: max(bound, 0)]
            out += got
            side.inflated += len(got)
            if by_ratio <= by_run:
                why = (f"inflates more than {lim.ws_max_inflate_ratio} times its "
                       f"{side.deflate_in} compressed bytes (limit ws_max_inflate_ratio, past "
                       f"{lim.ws_inflate_ratio_floor_bytes} bytes)")
            else:
                why = (f"would take the run past {lim.ws_max_inflated_total_bytes} inflated "
                       "bytes (limit ws_max_inflated_total_bytes)")
            self._anomaly(conn, side, "limit.websocket_inflate",
                          f"{side.direction.short} permessage-deflate data {why}; "
                          "decompression stops and the rest of this direction is not read",
                          ev.ts_first_ns, ev.frame_first, side.hdr_off)
            side.inflater = None
            side.skip_msg = True
            self._lost(conn, side, "decompression was cut", ev, out)
            return
        if len(got) > room:
            got = got[:room]
            out += got
            side.inflated += len(got)
            self._anomaly(conn, side, "limit.websocket_inflate",
                          f"a {side.direction.short} message inflates to more than {cap} bytes "
                          "(limit ws_max_inflated_bytes); the rest of it is cut",
                          ev.ts_first_ns, ev.frame_first, side.hdr_off)
            self._inflate_lost(conn, side, None, ev, out)
            return
        side.inflated += len(got)
        out += got

    def _inflate_lost(self, conn: _Conn, side: _Side, why: str | None, ev: StreamData,
                      out: bytearray) -> None:
        """The inflate window is gone: the rest of the message (and, with context
        takeover, of the direction) cannot be read."""
        if side.no_context:
            if why:
                self._anomaly(conn, side, "websocket.inflate_error",
                              f"{why}; the rest of the message is lost", ev.ts_first_ns,
                              ev.frame_first, side.hdr_off)
            side.skip_msg = True
            side.inflater = None
            return
        self._lost(conn, side, (why or "a message was cut") + " and the inflate window is "
                   "shared across messages (context takeover)", ev, out)

    def _frame_end(self, conn: _Conn, side: _Side, ev: StreamData, out: bytearray,
                   end_off: int) -> None:
        op = side.opcode
        side.remaining = -1
        if op >= 8:
            self._flush(conn, side, out, ev)
            payload = bytes(side.control)
            code = reason = None
            if op == OP_CLOSE and len(payload) >= 2:
                code = int.from_bytes(payload[:2], "big")
                reason = payload[2:].decode("utf-8", "backslashreplace")
            at = side.hdr_at
            if end_off > at.end:  # through the packet of the payload's last byte
                at = at.through(side.buf.extent(end_off - 1, end_off))
            self._out.append(WebSocketControl(
                conn.flow, side.direction, at.start, end_off - at.start, at.ts_first_ns,
                at.ts_last_ns, at.frame_first, at.frame_last, op, payload, code, reason,
            ))
            side.control = bytearray()
            return
        if side.fin and side.msg_op is not None:
            self._message_end(conn, side, ev, out)

    def _message_end(self, conn: _Conn, side: _Side, ev: StreamData, out: bytearray) -> None:
        if side.msg_deflate and not side.skip_msg and side.mode != _DEAD:
            self._inflate(conn, side, _TAIL, ev, out)
        if side.msg_deflate and side.no_context:
            side.inflater = None
        side.msg_op = None
        side.skip_msg = side.tail = False
        side.messages += 1

    def _flush(self, conn: _Conn, side: _Side, out: bytearray, ev: StreamData) -> None:
        if not out:
            return
        data = bytes(out)
        out.clear()
        d = side.direction
        self._out.append(StreamData(conn.flow, d, side.out_off, data, ev.ts_first_ns,
                                    ev.ts_last_ns, ev.frame_first, ev.frame_last))
        conn.flow.stream_bytes[d] += len(data)
        side.out_off += len(data)

    def _emit_gap(self, conn: _Conn, side: _Side, n: int, ts: int, frame: int,
                  reason: str) -> None:
        if n <= 0:
            return
        d = side.direction
        self._out.append(StreamGap(conn.flow, d, side.out_off, n, ts, frame, reason))
        conn.flow.gap_bytes[d] += n
        side.out_off += n

    def _lost(self, conn: _Conn, side: _Side, why: str, ev: StreamData | StreamGap,
              out: bytearray | None) -> None:
        if out is not None and isinstance(ev, StreamData):
            self._flush(conn, side, out, ev)
        side.mode = _DEAD
        ts = ev.ts_first_ns if isinstance(ev, StreamData) else ev.ts_ns
        frame = ev.frame_first if isinstance(ev, StreamData) else ev.frame
        self._anomaly(conn, side, "websocket.lost_sync",
                      f"{side.direction.short}: {why}; the rest of this direction is "
                      "captured but cannot be read (delivered as websocket-unreadable gaps)",
                      ts, frame, side.hdr_off)

    def _gap(self, conn: _Conn, side: _Side, ev: StreamGap) -> None:
        n = ev.nbytes
        if side.mode == _DEAD:
            self._emit_gap(conn, side, n, ev.ts_ns, ev.frame, ev.reason)
            return
        op = side.opcode
        in_data = side.remaining >= 0 and op < 8 and side.msg_op is not None
        if in_data and n <= side.remaining:
            side.remaining -= n
            side.mask_pos += n
            if side.msg_deflate and not side.skip_msg:
                if side.no_context:
                    side.skip_msg = True
                    side.inflater = None
                    self._anomaly(conn, side, "websocket.gap",
                                  f"a gap of {n} bytes in a compressed message: the rest of the "
                                  "message is lost", ev.ts_ns, ev.frame, ev.offset)
                else:
                    self._lost(conn, side, f"a gap of {n} bytes in a compressed message",
                               ev, None)
                self._emit_gap(conn, side, n, ev.ts_ns, ev.frame, ev.reason)
                return
            if not side.skip_msg:
                self._emit_gap(conn, side, n, ev.ts_ns, ev.frame, ev.reason)
            if side.remaining == 0:
                side.remaining = -1
                if side.fin:
                    self._message_end(conn, side, _as_data(ev), bytearray())
            return
        self._lost(conn, side, f"a gap of {n} bytes at offset {ev.offset} cut a frame header "
                   "or spans frames", ev, None)
        self._emit_gap(conn, side, n, ev.ts_ns, ev.frame, ev.reason)

    def release_memory(self, conn: _Conn, need: int) -> None:
        """The run's memory budget is reached and this flow's inflaters are the oldest
        holders: give them up.  A direction with context takeover cannot be read further
        (its window is gone: the rest becomes gaps); without, its next message starts
        afresh."""
        if conn.state == "late":  # decided now: joined or released, it holds nothing
            self._late_decide(conn, final=True)
            return
        flow = conn.flow
        budget = self.limits.budget
        for side in conn.sides:
            if side.inflater is None:
                continue
            side.inflater = None
            # the message in progress cannot be finished without it
            side.skip_msg = side.skip_msg or (side.msg_op is not None and side.msg_deflate)
            detail = (f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: "
                      f"gave up the {side.direction.short} permessage-deflate inflater, the "
                      "least recently used")
            if side.no_context:
                self._anomaly(conn, side, "limit.memory", detail + "; the rest of the message "
                              "in progress (if any) is lost", flow.ts_last_ns, flow.frame_last)
            else:
                side.mode = _DEAD
                self._anomaly(conn, side, "limit.memory", detail + "; the inflate window is "
                              "shared across messages, so the rest of this direction is not "
                              "read (delivered as gaps)", flow.ts_last_ns, flow.frame_last)
        if budget is not None:
            budget.hold(conn, 0)

    def _anomaly(self, conn: _Conn, side: _Side, kind: str, detail: str, ts: int, frame: int,
                 offset: int | None = None) -> None:
        self._out.append(Anomaly(kind, detail, ts or None, frame or None, conn.flow,
                                 side.direction, offset))


def _first_packet(at: Extent) -> tuple[int, int]:
    """Time and frame of the packet that carried ``at``'s first byte."""
    return at.ts_first_ns, at.frame_first


def _header_problem(fin: bool, rsv: int, op: int, ln: int, deflate: bool,
                    in_message: bool) -> str | None:
    """Why a frame header (FIN, RSV bits, opcode, payload length) cannot be read on
    (RFC 6455 §5.2, §5.5; RSV1 is permessage-deflate's, RFC 7692 §6), or None.
    ``in_message``: a data message is in progress (a continuation may follow)."""
    if ln >> 63:
        return f"frame length {ln} has its most significant bit set"
    if op in (3, 4, 5, 6, 7) or op > 10:
        return f"reserved opcode {op}"
    if op >= 8 and (ln > MAX_CONTROL_PAYLOAD or not fin):
        return f"control frame (opcode {op}) of {ln} bytes{'' if fin else ', fragmented'}"
    if rsv & 3 or (rsv & 4 and (not deflate or op == OP_CONT or op >= 8)):
        return f"RSV bits {rsv:03b} set on opcode {op} without an extension defining them"
    if op == OP_CONT and not in_message:
        return "continuation frame without a message in progress"
    return None


def _as_data(ev: StreamGap) -> StreamData:
    return StreamData(ev.flow, ev.direction, ev.offset, b"", ev.ts_ns, ev.ts_ns, ev.frame,
                      ev.frame)


# -- joining late: is a direction a run of frames? ------------------------------------------

_NO = "no"  # a direction that is not frames (within what is looked at)
_WAIT = "wait"  # too little to tell yet
_PRINTABLE = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


@dataclass(slots=True, frozen=True)
class _Found:
    """A direction read as frames from ``offset`` (in the stream below WebSocket)."""

    offset: int
    headers: int
    masked: bool
    rsv1: bool


def _started_late(ev: StreamData | StreamGap) -> bool:
    """The first event of a flow, from a direction whose start was not captured."""
    if isinstance(ev, StreamGap):
        return ev.offset == 0
    return bool(ev.flow.mid_stream[ev.direction])


def _chain(buf: bytes, k: int) -> tuple[int, bool, bool] | None:
    """Read ``buf[k:]`` as frames to its end: (headers read, masked, RSV1 seen), or None
    when a header is implausible (module docstring) or the masking changes.  A header
    or payload cut by the end of ``buf`` is no objection."""
    i, n = k, len(buf)
    headers, masked, rsv1 = 0, None, False
    open_msg: bool | None = None  # a fragmented message is open (None: unknown)
    while n - i >= 2:
        b0, b1 = buf[i], buf[i + 1]
        fin, rsv, op = b0 & 0x80, (b0 >> 4) & 7, b0 & 0x0F
        m = bool(b1 & 0x80)
        ln = b1 & 0x7F
        size = 2 + (2 if ln == 126 else 8 if ln == 127 else 0)
        if n - i < size:
            break
        if ln == 126:
            ln = int.from_bytes(buf[i + 2 : i + 4], "big")
            if ln < 126:
                return None
        elif ln == 127:
            ln = int.from_bytes(buf[i + 2 : i + 10], "big")
            if ln < 65536 or ln >> 63:
                return None
        if masked is None:
            masked = m
        elif m != masked:
            return None
        if op in _CONTROL_OPS:
            if not fin or ln > MAX_CONTROL_PAYLOAD or rsv:
                return None
        elif op in _DATA_OPS and not rsv & 3:
            if op == OP_CONT:
                if rsv or open_msg is False:
                    return None
            elif open_msg:
                return None
            rsv1 = rsv1 or bool(rsv)
            open_msg = not fin
        else:
            return None
        headers += 1
        i += size + (4 if m else 0) + ln
    return headers, bool(masked), rsv1


def _look(held: list[StreamData | StreamGap], d: Direction,
          search: bool = True) -> _Found | str | None:
    """What the held events of direction ``d`` are: ``_Found``, ``_NO``, ``_WAIT``, or
    None when it sent no data yet.  Leading gaps are passed over; a gap after data ends
    what is read.  Without ``search`` only the first byte is tried as a frame start."""
    parts: list[bytes] = []
    start = None
    for ev in held:
        if ev.direction != d:
            continue
        if isinstance(ev, StreamGap):
            if parts:
                break
            continue
        if start is None:
            start = ev.offset
        parts.append(ev.data)
    if start is None:
        return None
    buf = b"".join(parts)
    head = _chain(buf, 0)
    if head is not None and head[0] >= 1:
        return _Found(start, *head)
    if head is None and all(b in _PRINTABLE for b in buf[:64]):
        return _NO  # a text protocol (NATS, HTTP): no frame header is printable text
    if not search:
        return _WAIT
    for k in range(1, min(len(buf), LATE_LOOK_BYTES)):
        c = _chain(buf, k)
        if c is not None and c[0] >= 3:  # two could be chance in 4 KB of random bytes
            return _Found(start + k, *c)
    return _NO if len(buf) >= LATE_LOOK_BYTES else _WAIT


def _at(x: _Found | None) -> int | None:
    return None if x is None else x.offset


def _ts(ev: StreamData | StreamGap, last: bool = False) -> int:
    if isinstance(ev, StreamGap):
        return ev.ts_ns
    return ev.ts_last_ns if last else ev.ts_first_ns


def _frame(ev: StreamData | StreamGap, last: bool = False) -> int:
    if isinstance(ev, StreamGap):
        return ev.frame
    return ev.frame_last if last else ev.frame_first

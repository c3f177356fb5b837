"""The ``websocket`` table: the upgrade and the control frames of WebSocket connections.

Rows come from ``reassembly.events.WebSocketHandshake`` / ``WebSocketControl`` and
``reassembly.websocket.WebSocketJoin`` (a flow recognised from its frames, joined after
its upgrade; the WebSocket layer lives in ``reassembly.websocket``; the message payloads reach the
dissectors as stream events, e.g. NATS over WebSocket lands in the ``nats`` table).
Envelope offsets are in the byte stream *below* WebSocket: the TCP stream, or the
decrypted TLS stream for ``wss``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dissectors.layers import LayerDissector, LayerFacts, LayerRow
from dissectors.tables import Field, TableSpec, register_table
from reassembly.events import Direction, WebSocketControl, WebSocketHandshake
from reassembly.websocket import WebSocketJoin

__all__ = ["WEBSOCKET_TABLE", "WebSocketLayer", "websocket_control_row", "websocket_handshake_row",
           "websocket_join_row"]

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()

WEBSOCKET_TABLE = register_table(
    TableSpec(
        "websocket",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: `joined` rows
        "WebSocket (RFC 6455) connections on any TCP port, also under TLS (wss): one row "
        "per HTTP/1.1 upgrade (`kind` = `handshake`, with the server's answer), one per "
        "connection captured after its upgrade and recognised from its frames (`joined`: "
        "masked client frames, unmasked server frames, every header plausible; the flow's "
        "`mid_stream_*` or leading gaps say where its start was lost) and one per "
        "control frame (`close`, `ping`, `pong`). Data frames are not rows: their unmasked, "
        "joined and (permessage-deflate) inflated message payloads are the byte stream the "
        "flow's dissector reads, so NATS over WebSocket is in the `nats` table; "
        "`flows.layers` says `websocket` for such flows. Envelope offsets are in the byte "
        "stream below WebSocket (TCP, or decrypted TLS).",
        (
            Field("kind", _STR, "`handshake`, `joined`, `close`, `ping` or `pong`.", False),
            Field("method", _STR, "handshake: request method (`GET`)."),
            Field("path", _STR, "handshake: request target, e.g. `/` or `/nats?x=1`."),
            Field("host", _STR, "handshake: `Host` header."),
            Field("origin", _STR, "handshake: `Origin` header (browsers send it)."),
            Field("user_agent", _STR, "handshake: `User-Agent` header."),
            Field("protocols_offered", pa.list_(_STR),
                  "handshake: `Sec-WebSocket-Protocol` values the client offers."),
            Field("protocol", _STR, "handshake: subprotocol the server selects."),
            Field("extensions_offered", _STR,
                  "handshake: `Sec-WebSocket-Extensions` of the request, as sent."),
            Field("extensions", _STR,
                  "handshake: `Sec-WebSocket-Extensions` the server accepts, as sent."),
            Field("status", _I32, "handshake: HTTP status of the response (101 when "
                  "accepted); null when no response was seen."),
            Field("accept_ok", pa.bool_(), "handshake: `Sec-WebSocket-Accept` matches the "
                  "request's key (RFC 6455 §4.2.2); null when either is missing."),
            Field("deflate", pa.bool_(), "handshake: permessage-deflate (RFC 7692) in use; "
                  "joined: a compressed frame (RSV1) was seen while the flow was looked at."),
            Field("first_frame_c2s", _I64, "joined: offset (in the stream below WebSocket) "
                  "of the first c2s frame read; bytes before it are the tail of a frame "
                  "whose header was not captured (a `websocket-unreadable` gap). Null when "
                  "the direction sent nothing while the flow was looked at."),
            Field("first_frame_s2c", _I64, "joined: the same, server to client."),
            Field("client_direction", _STR, "joined: the direction of the masked frames "
                  "(`c2s`: when the roles guessed from the ports were the other way round "
                  "the flow's roles are swapped, role_source `websocket-mask`; `s2c` only "
                  "where they cannot be, with a `websocket.roles` anomaly)."),
            Field("payload", pa.binary(), "close/ping/pong: the control frame's payload "
                  "(at most 125 bytes, unmasked)."),
            Field("close_code", _I32, "close: status code (RFC 6455 §7.4), e.g. 1000; "
                  "null when the frame has no body."),
            Field("close_reason", _STR, "close: reason text (UTF-8)."),
        ),
    )
)


def websocket_handshake_row(ev: WebSocketHandshake) -> dict[str, Any]:
    """Envelope hints and protocol columns of a handshake row."""
    return {
        "direction": "c2s",
        "offset_start": ev.offset,
        "offset_end": ev.offset + ev.nbytes,
        "ts_first": ev.ts_first_ns,
        "ts_last": ev.ts_last_ns,
        "frame_first": ev.frame_first,
        "frame_last": ev.frame_last,
        "kind": "handshake",
        "method": ev.method,
        "path": ev.path,
        "host": ev.host,
        "origin": ev.origin,
        "user_agent": ev.user_agent,
        "protocols_offered": list(ev.protocols),
        "protocol": ev.protocol,
        "extensions_offered": ev.extensions,
        "extensions": ev.extensions_accepted,
        "status": ev.status,
        "accept_ok": ev.accept_ok,
        "deflate": ev.deflate,
    }


def websocket_join_row(ev: WebSocketJoin) -> dict[str, Any]:
    """A ``joined`` row: where reading began in each direction."""
    c2s, s2c = ev.first_frame
    at = c2s if c2s is not None else 0
    return {
        "direction": "c2s",
        "offset_start": at,
        "offset_end": at,
        "ts_first": ev.ts_first_ns,
        "ts_last": ev.ts_last_ns,
        "frame_first": ev.frame_first,
        "frame_last": ev.frame_last,
        "kind": "joined",
        "deflate": ev.deflate,
        "first_frame_c2s": c2s,
        "first_frame_s2c": s2c,
        "client_direction": ev.client.short,
    }


def websocket_control_row(ev: WebSocketControl) -> dict[str, Any]:
    return {
        "direction": ev.direction.short,
        "offset_start": ev.offset,
        "offset_end": ev.offset + ev.nbytes,
        "ts_first": ev.ts_first_ns,
        "ts_last": ev.ts_last_ns,
        "frame_first": ev.frame_first,
        "frame_last": ev.frame_last,
        "kind": {8: "close", 9: "ping", 10: "pong"}.get(ev.opcode, f"opcode-{ev.opcode}"),
        "payload": ev.payload,
        "close_code": ev.close_code,
        "close_reason": ev.close_reason,
    }


class WebSocketLayer(LayerDissector):
    """``websocket`` rows (the upgrade or the late join, control frames); an accepted
    upgrade (101) or a late join is the innermost entry of the flow's ``layers``."""

    events = (WebSocketHandshake, WebSocketJoin, WebSocketControl)
    tables = (WEBSOCKET_TABLE,)

    @classmethod
    def rows(cls, ev: WebSocketHandshake | WebSocketJoin | WebSocketControl,
             facts: LayerFacts) -> list[LayerRow]:
        # isinstance, not ``type(ev) is``: mypy narrows the union only so (no subclasses)
        if isinstance(ev, WebSocketHandshake):
            if ev.status == 101:
                facts.layers.append("websocket")
                facts.claim("websocket", 1)
            return [LayerRow(WEBSOCKET_TABLE, Direction.C2S, websocket_handshake_row(ev))]
        if isinstance(ev, WebSocketJoin):
            facts.layers.append("websocket")
            facts.claim("websocket", 1)
            return [LayerRow(WEBSOCKET_TABLE, Direction.C2S, websocket_join_row(ev))]
        return [LayerRow(WEBSOCKET_TABLE, ev.direction, websocket_control_row(ev))]

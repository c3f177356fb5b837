"""The ``quic_packets`` table (one row per QUIC packet) and the QUIC facts of a flow row.

The rows come from ``reassembly.events.QuicPacket`` events (the QUIC layer lives in
``reassembly.quic``: QUIC is a transport, its STREAM data reaches dissectors as stream
events).  ``quic_packet_row`` gives the protocol columns; the pipeline adds the
envelope.  Suggested envelope values for a packet row: ``ts_first = ts_last =
ev.ts_ns``, ``frame_first = frame_last = ev.frame``, ``offset_start =
ev.datagram_offset`` and ``offset_end = ev.datagram_offset + ev.length`` (offsets
inside the UDP payload: a packet is not a stretch of stream bytes).

``QUIC_FLOW_FIELDS`` / ``quic_flow_values`` are the TLS-handshake columns a demanding
user expects on the flow row (SNI, ALPN …), filled from the last ``QuicHandshake``
event of the flow.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dissectors.layers import LayerDissector, LayerFacts, LayerRow
from dissectors.tables import Field, TableSpec, register_table
from reassembly.events import QuicHandshake, QuicPacket

__all__ = ["QUIC_FLOW_FIELDS", "QUIC_PACKETS", "QuicLayer", "quic_flow_values", "quic_packet_row"]

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()

QUIC_PACKETS = register_table(
    TableSpec(
        "quic_packets",
        2,  # 2: timestamps in microseconds + exact `_ns` columns
        "One row per QUIC packet (RFC 9000 §17), several per UDP datagram when packets are "
        "coalesced. Header fields are always filled; packet number, key phase and frame "
        "types only when the packet could be decrypted (Initial packets always can, from "
        "the client's DCID; Handshake, 0-RTT and 1-RTT need the connection's TLS secrets "
        "from a key log or a pcapng Decryption Secrets Block). `undecrypted_reason` says "
        "why a packet stayed encrypted; a connection lacking secrets is also reported "
        "once in `anomalies` (`quic.undecryptable`, with its client random).",
        (
            Field(
                "conn_flow_id", _I64,
                "Flow id of the QUIC connection this packet belongs to: the flow it started "
                "on. Differs from `flow_id` only for packets found on another 5-tuple by "
                "their connection ID (migration, NAT rebinding).", False,
            ),
            Field(
                "version", _I64,
                "QUIC version from the long header (1 = RFC 9000, 1798521807 = 0x6b3343cf "
                "= v2, 0xff0000NN = draft NN, 0 = Version Negotiation); for 1-RTT packets "
                "the version of the connection's last long header.", False,
            ),
            Field("version_hex", _STR, "`version` as 8 hex digits, e.g. `0x00000001`.", False),
            Field(
                "packet_type", _STR,
                "`initial`, `0rtt`, `handshake`, `retry`, `vn` (Version Negotiation), `1rtt` "
                "(short header) or `unknown` (long header of a version we cannot read, e.g. "
                "a greased 0x?a?a?a?a one).", False,
            ),
            Field(
                "dcid", _STR,
                "Destination connection ID, lower-case hex (empty for a zero-length one). "
                "Short headers do not state its length: it is the length of the connection "
                "ID it matches, empty string when none could be told.", False,
            ),
            Field("scid", _STR, "Source connection ID, hex (long headers only; null for 1-RTT)."),
            Field(
                "packet_number", _I64,
                "Full packet number (decoded against the largest one received in its "
                "number space, RFC 9000 §A.3); null when the packet was not decrypted.",
            ),
            Field(
                "token_length", _I64,
                "Initial: length of the Token field (non-zero after a Retry or with a "
                "NEW_TOKEN token); Retry: length of the retry token. Null otherwise.",
            ),
            Field("length", _I64, "Bytes of this packet in the datagram (header included).", False),
            Field(
                "datagram_offset", _I64,
                "Offset of the packet's first byte in the UDP payload.", False,
            ),
            Field(
                "coalesced_index", _I32,
                "Position of the packet in its datagram: 0 for the first, 1 for the next "
                "coalesced one (RFC 9000 §12.2) and so on.", False,
            ),
            Field(
                "frame_types", pa.list_(_STR),
                "Frame types in order (RFC 9000 §19 names: PADDING, PING, ACK, CRYPTO, "
                "STREAM, CONNECTION_CLOSE, ...); a run of PADDING bytes counts once. Empty "
                "when not decrypted; UNKNOWN_0x.. ends the list when a frame type is unknown.",
                False,
            ),
            Field(
                "stream_ids", pa.list_(_I64),
                "Ids of the streams whose STREAM frames this packet carries, in order, each "
                "once. Bit 0: opened by the server; bit 1: unidirectional.", False,
            ),
            Field(
                "decrypted", pa.bool_(),
                "True when the payload was decrypted (header protection removed and AEAD tag "
                "verified); false when not (see `undecrypted_reason`); null for packets "
                "without a protected payload (Version Negotiation, Retry).",
            ),
            Field(
                "undecrypted_reason", _STR,
                "Why `decrypted` is false: `no-keys` (no secret for this level in the key "
                "log), `no-client-hello` (the ClientHello, hence the client random to look "
                "up, was not seen yet), `no-initial-dcid` (Initial packets without the "
                "client's first Initial), `auth-failed` (keys at hand did not authenticate "
                "it), `unsupported-version`, `unsupported-cipher`, `not-client` (0-RTT from "
                "the server side), `truncated`, `unknown-dcid` (short header whose DCID "
                "length cannot be told).",
            ),
            Field(
                "key_phase", _I32,
                "1-RTT: the Key Phase bit (RFC 9001 §6) once header protection is removed; "
                "it flips at each key update.",
            ),
            Field(
                "supported_versions", pa.list_(_I64),
                "Version Negotiation: the versions the server offers, in order.", False,
            ),
            Field(
                "retry_integrity", _STR,
                "Retry: `ok` when the Retry Integrity Tag (RFC 9001 §5.8, RFC 9369 §3.3.3) "
                "matches the client's DCID, `mismatch`, or `unverified` (client DCID not "
                "seen, or a draft version).",
            ),
            Field(
                "sni", _STR,
                "TLS server name (SNI) of the ClientHello, on the packet whose CRYPTO data "
                "completed the ClientHello (the flow row carries it too).",
            ),
            Field(
                "alpn", pa.list_(_STR),
                "ALPN protocols the ClientHello offers, in order, on the same packet as `sni`.",
            ),
            Field(
                "close_error_code", _I64,
                "CONNECTION_CLOSE: error code (a transport error, RFC 9000 §20, when "
                "`close_frame_type` is set; else an application error).",
            ),
            Field(
                "close_frame_type", _I64,
                "CONNECTION_CLOSE (transport variant 0x1c): type of the frame that caused "
                "the error; null for the application variant 0x1d.",
            ),
            Field("close_reason", _STR, "CONNECTION_CLOSE: reason phrase (UTF-8, may be empty)."),
        ),
    )
)


def quic_packet_row(ev: QuicPacket) -> dict[str, Any]:
    """The protocol columns of ``quic_packets`` for one ``QuicPacket`` event."""
    return {
        "conn_flow_id": ev.conn_flow_id,
        "version": ev.version,
        "version_hex": f"0x{ev.version:08x}",
        "packet_type": ev.packet_type,
        "dcid": ev.dcid,
        "scid": ev.scid,
        "packet_number": ev.packet_number,
        "token_length": ev.token_length,
        "length": ev.length,
        "datagram_offset": ev.datagram_offset,
        "coalesced_index": ev.coalesced_index,
        "frame_types": list(ev.frame_types),
        "stream_ids": list(ev.stream_ids),
        "decrypted": ev.decrypted,
        "undecrypted_reason": ev.undecrypted_reason,
        "key_phase": ev.key_phase,
        "supported_versions": list(ev.supported_versions),
        "retry_integrity": ev.retry_integrity,
        "sni": ev.sni,
        "alpn": None if ev.alpn is None else list(ev.alpn),
        "close_error_code": ev.close_error_code,
        "close_frame_type": ev.close_frame_type,
        "close_reason": ev.close_reason,
    }


# TLS names (RFC 8446 §B.4 and the IANA registry) for the suites QUIC can use
_SUITE_NAMES = {
    0x1301: "TLS_AES_128_GCM_SHA256",
    0x1302: "TLS_AES_256_GCM_SHA384",
    0x1303: "TLS_CHACHA20_POLY1305_SHA256",
    0x1304: "TLS_AES_128_CCM_SHA256",
    0x1305: "TLS_AES_128_CCM_8_SHA256",
}
_TLS_VERSIONS = {0x0304: "TLS 1.3", 0x0303: "TLS 1.2"}

QUIC_FLOW_FIELDS: tuple[Field, ...] = (
    Field("quic_version", _I64, "QUIC flows: QUIC version of the connection (see quic_packets)."),
    Field("tls_sni", _STR, "QUIC and TLS flows: server name (SNI) from the ClientHello."),
    Field(
        "tls_alpn", pa.list_(_STR),
        "QUIC and TLS flows: ALPN protocols the ClientHello offers, in order."
    ),
    Field(
        "tls_alpn_selected", _STR,
        "QUIC and TLS flows: ALPN protocol the server chose (EncryptedExtensions, which "
        "needs the Handshake secrets; TLS 1.2: the ServerHello).",
    ),
    Field(
        "tls_client_random", _STR,
        "QUIC and TLS flows: ClientHello random, hex: the key the connection's secrets are filed "
        "under in an SSLKEYLOGFILE.",
    ),
    Field(
        "tls_version", _STR,
        "QUIC and TLS flows: TLS version the ServerHello selects (`TLS 1.3`, `TLS 1.2`).",
    ),
    Field(
        "tls_cipher_suite", _STR,
        "QUIC and TLS flows: cipher suite the ServerHello selects, e.g. "
        "TLS_AES_128_GCM_SHA256 (TLS over TCP: see the `tls` table).",
    ),
    Field(
        "quic_initial_dcid", _STR,
        "QUIC flows: the client DCID the Initial keys derive from (hex; the Retry's SCID "
        "after a Retry).",
    ),
)


def quic_flow_values(ev: QuicHandshake) -> dict[str, Any]:
    """``QUIC_FLOW_FIELDS`` values from the last ``QuicHandshake`` event of a flow."""
    suite = ev.cipher_suite
    return {
        "quic_version": ev.version,
        "tls_sni": ev.sni,
        "tls_alpn": list(ev.alpn),
        "tls_alpn_selected": ev.alpn_selected,
        "tls_client_random": ev.client_random,
        "tls_version": None
        if ev.tls_version is None
        else _TLS_VERSIONS.get(ev.tls_version, f"0x{ev.tls_version:04x}"),
        "tls_cipher_suite": None if suite is None else _SUITE_NAMES.get(suite, f"0x{suite:04x}"),
        "quic_initial_dcid": ev.initial_dcid,
    }


class QuicLayer(LayerDissector):
    """``quic_packets`` rows and the flow facts of a QUIC connection: its streams are
    inner streams (each with its own session), the handshake fills the ``tls_*`` and
    ``quic_*`` flow columns, and an unclaimed flow is a ``quic`` flow."""

    events = (QuicPacket, QuicHandshake)
    tables = (QUIC_PACKETS,)

    @classmethod
    def rows(cls, ev: QuicPacket | QuicHandshake, facts: LayerFacts) -> list[LayerRow]:
        if isinstance(ev, QuicHandshake):  # (frozen event types: never subclassed)
            facts.values = quic_flow_values(ev)
            return []
        facts.inner_streams = True
        facts.claim("quic", 2)
        return [LayerRow(QUIC_PACKETS, ev.direction, {
            "direction": ev.direction.short,
            "ts_first": ev.ts_ns,
            "ts_last": ev.ts_ns,
            "frame_first": ev.frame,
            "frame_last": ev.frame,
            **quic_packet_row(ev),
        })]

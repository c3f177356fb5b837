"""The two tables every run writes, whatever the protocols: ``flows`` and ``anomalies``.

Strategy: like protocol tables they are declared once as ``TableSpec`` data and
registered at import; unlike them they carry no envelope (a flow row is not a stretch
of stream bytes, and an anomaly may belong to no flow at all), so they declare their
own provenance columns.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.quic.table import QUIC_FLOW_FIELDS, QUIC_PACKETS
from dissectors.tables import TS, Field, TableSpec, register_table
from dissectors.tls_table import LAYER_FLOW_FIELDS, TLS_TABLE
from dissectors.websocket_table import WEBSOCKET_TABLE

# quic_packets, tls and websocket are written by the pipeline itself (from the QUIC, TLS
# and WebSocket layers' events), like these two
__all__ = ["ANOMALIES", "FLOWS", "QUIC_PACKETS", "TLS_TABLE", "WEBSOCKET_TABLE"]

_DIRECTION_COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("packets", pa.int64(), "Packets captured {dir}, including retransmissions and empty ACKs."),
    (
        "payload_bytes",
        pa.int64(),
        "Transport payload bytes captured {dir}, retransmitted copies included.",
    ),
    (
        "stream_bytes",
        pa.int64(),
        "Distinct stream bytes delivered {dir} (each offset counted once; gaps excluded). "
        "For UDP: the sum of datagram payloads.",
    ),
    (
        "gap_bytes",
        pa.int64(),
        "Stream bytes {dir} delivered as gaps, not zeros: never captured, or captured but "
        "unusable by a layer above TCP (TLS that fails authentication or loses sync, "
        "unreadable WebSocket framing). Each gap is a `tcp.gap` row whose detail says which "
        "(`were not captured` / `were captured but could not be used`). "
        "`stream_bytes + gap_bytes` is the stream length.",
    ),
    (
        "overlap_conflicts",
        pa.int64(),
        "Overlapping segments {dir} whose bytes differed from the copy kept "
        "(each is also an `anomalies` row).",
    ),
    (
        "decoded_bytes",
        pa.int64(),
        "Stream bytes {dir} consumed into rows by the dissector. Byte accounting: "
        "`decoded_bytes + undecoded_bytes + gap_bytes` = stream length.",
    ),
    (
        "undecoded_bytes",
        pa.int64(),
        "Stream bytes {dir} no dissector turned into rows (unclaimed flow, skipped, "
        "malformed, or after the dissector gave up on the direction).",
    ),
    (
        "mid_stream",
        pa.bool_(),
        "True when the {dir} stream was joined after it had begun (its start was not "
        "captured; offsets count from the first byte captured). Always false for UDP.",
    ),
)

_DIRS = (("c2s", "client to server"), ("s2c", "server to client"))


def _per_direction() -> tuple[Field, ...]:
    cols = []
    for base, typ, text in _DIRECTION_COLUMNS:
        for suffix, words in _DIRS:
            cols.append(Field(f"{base}_{suffix}", typ, text.format(dir=words), False))
    return tuple(cols)


FLOWS = register_table(
    TableSpec(
        name="flows",
        version=2,  # 2: timestamps in microseconds + exact `_ns` columns
        description=(
            "One row per transport flow (TCP connection or UDP 5-tuple conversation), "
            "written when the flow ends. Says who the client and server were and how "
            "that was decided, which dissector claimed the flow, and, per direction, "
            "the packet and byte accounting that makes losses visible."
        ),
        envelope=False,
        fields=(
            Field(
                "capture_id", pa.string(),
                "Id of the capture file (first 16 hex digits of its SHA-256).", False,
            ),
            Field(
                "flow_id", pa.int64(),
                "Flow id, stable within a capture; the `flow_id` of every row of this flow.",
                False,
            ),
            Field("transport", pa.string(), "`tcp` or `udp`.", False),
            Field("client_ip", pa.string(), "Client address (IPv4 dotted or IPv6 text).", False),
            Field("client_port", pa.int32(), "Client port.", False),
            Field("server_ip", pa.string(), "Server address.", False),
            Field("server_port", pa.int32(), "Server port.", False),
            Field(
                "role_source", pa.string(),
                "How client and server were decided, most to least reliable: `syn` (client's "
                "SYN seen), `syn-ack` (server's SYN-ACK seen), `port` (well-known or lower "
                "port taken as the server), `first-packet` (first sender taken as client), "
                "`quic-initial` (the sender of the QUIC connection's first Initial); joined "
                "late with the port guess the other way round (then swapped, with a "
                "`flow.roles_swapped` anomaly): `websocket-mask` (the side sending masked "
                "WebSocket frames), `ops` (the protocol operations each side sends).",
                False,
            ),
            Field(
                "vlan", pa.list_(pa.int32()),
                "802.1Q/802.1ad VLAN ids of the flow's first packet, outermost first; "
                "empty when untagged.",
                False,
            ),
            Field("ts_first", TS, "Capture time of the flow's first packet (UTC).", False),
            Field("ts_last", TS, "Capture time of the flow's last packet (UTC).", False),
            Field("frame_first", pa.int64(), "Frame number (1-based) of the first packet.", False),
            Field("frame_last", pa.int64(), "Frame number of the last packet.", False),
            *_per_direction(),
            Field(
                "protocol", pa.string(),
                "Name of the dissector that claimed the flow; null when none did (unclaimed).",
            ),
            Field(
                "close_reason", pa.string(),
                "Why the flow ended, as reported by reassembly: `closed` (FIN from both "
                "sides or RST), `idle-timeout`, `evicted` (flow table full), `port-reuse` "
                "(new SYN on the same 4-tuple), `end-of-capture`.",
                False,
            ),
            *QUIC_FLOW_FIELDS,
            *LAYER_FLOW_FIELDS,
        ),
    )
)

ANOMALIES = register_table(
    TableSpec(
        name="anomalies",
        version=2,  # 2: timestamps in microseconds + exact `_ns` columns
        description=(
            "One row per thing that was odd, lossy or skipped: capture damage, IP "
            "fragment trouble, TCP gaps and conflicting overlaps, limits hit, malformed "
            "PDUs, resyncs, dissector failures. Nothing is dropped silently; the run "
            "summary and the exit code are derived from this table."
        ),
        envelope=False,
        fields=(
            Field(
                "capture_id", pa.string(),
                "Id of the capture file (first 16 hex digits of its SHA-256).", False,
            ),
            Field(
                "record_id", pa.int64(),
                "Row id, unique within a capture across all tables, in emission order.", False,
            ),
            Field(
                "flow_id", pa.int64(),
                "Flow the anomaly belongs to (joins to `flows.flow_id`); null when it "
                "concerns no single flow (e.g. a damaged capture file).",
            ),
            Field("direction", pa.string(), "`c2s` or `s2c`; null when not tied to a direction."),
            Field(
                "kind", pa.string(),
                "Stable dotted identifier to group by, e.g. `capture.truncated`, "
                "`ip.frag_overlap`, `tcp.overlap_conflict`, `limit.flow_table`, "
                "`nats.unknown_op`.",
                False,
            ),
            Field("detail", pa.string(), "Human-readable explanation with the specifics.", False),
            Field("ts", TS, "Capture time of the packet where it was noticed (UTC); null if none."),
            Field(
                "frame", pa.int64(), "Frame number (1-based) where it was noticed; null if none."
            ),
            Field(
                "offset", pa.int64(),
                "Stream offset (in `direction`) of the first affected byte; null when not "
                "about stream bytes.",
            ),
            Field(
                "nbytes", pa.int64(),
                "Number of affected bytes (gap length, skipped PDU size, ...); null if unknown.",
            ),
            Field(
                "source", pa.string(),
                "Layer that reported it: `capture`, `ip`, `tcp`, `udp`, `dissector:<name>` "
                "or `pipeline`.",
                False,
            ),
        ),
    )
)

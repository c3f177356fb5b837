"""The quic_packets table declaration and its rows."""

from __future__ import annotations

import pyarrow as pa

from dissectors.quic import QUIC_FLOW_FIELDS, QUIC_PACKETS, quic_flow_values, quic_packet_row
from dissectors.schema import rows_to_batch, validate_batch
from dissectors.tables import ENVELOPE_NAMES, TableSpec
from reassembly.quic.keylog import KeyLog
from tests.quic.helpers import CAPTURES, run_capture

ILLUSTRATED_KEYLOG = CAPTURES / "illustrated-quic/keylog.txt"


def _envelope(p) -> dict:
    src, dst = p.flow.endpoint(p.direction)
    return {
        "capture_id": "0" * 16, "flow_id": p.flow.flow_id, "record_id": 0,
        "direction": p.direction.short, "src_ip": src.ip, "src_port": src.port,
        "dst_ip": dst.ip, "dst_port": dst.port, "ts_first": p.ts_ns, "ts_last": p.ts_ns,
        "offset_start": p.datagram_offset, "offset_end": p.datagram_offset + p.length,
        "frame_first": p.frame, "frame_last": p.frame,
    }


def test_declaration():
    assert QUIC_PACKETS.name == "quic_packets" and QUIC_PACKETS.version == 2
    names = QUIC_PACKETS.column_names
    assert set(names) >= ENVELOPE_NAMES
    for col in ("version", "packet_type", "dcid", "scid", "packet_number", "length",
                "frame_types", "decrypted", "undecrypted_reason", "key_phase",
                "coalesced_index", "stream_ids", "sni", "alpn"):
        assert col in names
    assert QUIC_PACKETS.column("frame_types").type == pa.list_(pa.string())
    assert QUIC_PACKETS.column("stream_ids").type == pa.list_(pa.int64())
    # the flow columns are a valid declaration too
    TableSpec("quic_flow_columns_check", 1, "check", QUIC_FLOW_FIELDS, envelope=False)


def test_rows_of_real_captures_validate():
    for name, keylog in [
        ("illustrated-quic/capture.pcap", KeyLog.from_file(ILLUSTRATED_KEYLOG)),
        ("ntop-nDPI/quic-forcing-vn-with-data.pcapng", None),
        ("zeek/quic/quicv2-echo-443.pcap", None),
    ]:
        r = run_capture(name, keylog)
        rows = [{**_envelope(p), **quic_packet_row(p)} for p in r.packets]
        batch = rows_to_batch(QUIC_PACKETS, rows)
        validate_batch(QUIC_PACKETS, batch)
        assert batch.num_rows == len(r.packets)


def test_row_values():
    r = run_capture("illustrated-quic/capture.pcap",
                    KeyLog.from_file(CAPTURES / "illustrated-quic/keylog.txt"))
    first = quic_packet_row(r.packets[0])
    assert first["version_hex"] == "0x00000001" and first["packet_type"] == "initial"
    assert first["sni"] == "example.ulfheim.net" and first["alpn"] == ["ping/1.0"]
    ping = quic_packet_row(next(p for p in r.packets if p.stream_ids))
    assert ping["stream_ids"] == [0] and ping["key_phase"] == 0 and ping["decrypted"] is True
    flow = quic_flow_values(r.handshakes[0])
    assert flow == {
        "quic_version": 1, "tls_sni": "example.ulfheim.net", "tls_alpn": ["ping/1.0"],
        "tls_alpn_selected": "ping/1.0",
        "tls_client_random": "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "tls_version": "TLS 1.3", "tls_cipher_suite": "TLS_AES_128_GCM_SHA256",
        "quic_initial_dcid": "0001020304050607",
    }

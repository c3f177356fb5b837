"""QUIC output tables (``quic_packets``, the QUIC/TLS flow columns).

The QUIC layer itself (decryption, streams) is transport-level and lives in
``reassembly.quic``; this package only declares how its events become rows.
"""

from dissectors.quic.table import (
    QUIC_FLOW_FIELDS,
    QUIC_PACKETS,
    quic_flow_values,
    quic_packet_row,
)

__all__ = ["QUIC_FLOW_FIELDS", "QUIC_PACKETS", "quic_flow_values", "quic_packet_row"]

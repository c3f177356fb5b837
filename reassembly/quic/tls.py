"""The TLS 1.3 handshake messages QUIC carries in CRYPTO frames (RFC 8446 §4, RFC 9001 §4).

The parsers now live in ``reassembly.tlscommon`` (shared with TLS over TCP); this module
keeps the names the QUIC code and its tests import.
"""

from __future__ import annotations

from reassembly.tlscommon import (
    EXT_ALPN,
    EXT_EARLY_DATA,
    EXT_PRE_SHARED_KEY,
    EXT_QUIC_TRANSPORT_PARAMETERS,
    EXT_SERVER_NAME,
    EXT_SUPPORTED_VERSIONS,
    HRR_RANDOM,
    ClientHello,
    EncryptedExtensions,
    HandshakeReader,
    HandshakeType,
    ServerHello,
    parse_client_hello,
    parse_encrypted_extensions,
    parse_server_hello,
    safe_parse,
)

__all__ = [
    "EXT_ALPN",
    "EXT_EARLY_DATA",
    "EXT_PRE_SHARED_KEY",
    "EXT_QUIC_TRANSPORT_PARAMETERS",
    "EXT_SERVER_NAME",
    "EXT_SUPPORTED_VERSIONS",
    "HRR_RANDOM",
    "ClientHello",
    "EncryptedExtensions",
    "HandshakeReader",
    "HandshakeType",
    "ServerHello",
    "parse_client_hello",
    "parse_encrypted_extensions",
    "parse_server_hello",
    "safe_parse",
]

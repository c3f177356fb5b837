"""TLS record layer: headers, cipher suites, and record protection for TLS 1.2 and 1.3.

Only AEAD suites are decrypted (what TLS 1.3 allows and what TLS 1.2 stacks negotiate
by default): AES-GCM (RFC 5288, RFC 5289) and ChaCha20-Poly1305 (RFC 7905).  The
TLS 1.3 keys come from the traffic secrets of the key log through the shared key
schedule (``reassembly.tlscommon.AeadKeys``); TLS 1.2 keys from the master secret
(``CLIENT_RANDOM`` key-log lines) through the TLS 1.2 PRF (RFC 5246 §5, §6.3).  The keys
and record protection (``cryptography``) live in ``reassembly.tls.protection``; their
names load from here on first use.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import TYPE_CHECKING

from reassembly.lazy import lazy_names

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from reassembly.tls.protection import (
        TLS12_AEAD,
        Tls12Keys,
        Tls13Keys,
        tls12_key_block,
        tls12_prf,
    )

__all__ = [
    "HEADER_BYTES",
    "MAX_RECORD_BYTES",
    "AlertDescription",
    "ContentType",
    "TLS12_AEAD",
    "Tls12Keys",
    "Tls13Keys",
    "alert_text",
    "is_plausible_header",
    "suite_name",
    "tls12_key_block",
    "tls12_prf",
    "version_name",
]

# record protection (``cryptography``) is a module of its own, loaded on first use: the
# layer tells TLS from plain bytes and reads handshakes without it
__getattr__ = lazy_names(__name__, dict.fromkeys(
    ("TLS12_AEAD", "Tls12Keys", "Tls13Keys", "tls12_key_block", "tls12_prf"),
    "reassembly.tls.protection"))

HEADER_BYTES = 5
# RFC 5246 §6.2.3: a TLSCiphertext fragment is at most 2^14 + 2048 bytes (TLS 1.3 allows
# 2^14 + 256, RFC 8446 §5.2); anything longer is not a record.
MAX_RECORD_BYTES = (1 << 14) + 2048
GCM_EXPLICIT_NONCE_BYTES = 8
TAG_BYTES = 16
_HDR = struct.Struct("!BHH")


class ContentType(IntEnum):
    CHANGE_CIPHER_SPEC = 20
    ALERT = 21
    HANDSHAKE = 22
    APPLICATION_DATA = 23
    HEARTBEAT = 24


def is_plausible_header(data: bytes | bytearray, pos: int = 0) -> bool:
    """A record header (RFC 5246 §6.2.1): known content type, version 3.0-3.4 (the
    record layer of every TLS version says 3.x), and a length a record can have."""
    if len(data) - pos < HEADER_BYTES:
        return False
    ctype: int
    version: int
    length: int
    ctype, version, length = _HDR.unpack_from(data, pos)
    return 20 <= ctype <= 24 and 0x0300 <= version <= 0x0304 and 0 < length <= MAX_RECORD_BYTES


def version_name(v: int | None) -> str | None:
    if v is None:
        return None
    return {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2",
            0x0304: "TLS 1.3"}.get(v, f"0x{v:04x}")


# -- cipher suites ----------------------------------------------------------------------

_SUITE_NAMES = {
    0x1301: "TLS_AES_128_GCM_SHA256",
    0x1302: "TLS_AES_256_GCM_SHA384",
    0x1303: "TLS_CHACHA20_POLY1305_SHA256",
    0x1304: "TLS_AES_128_CCM_SHA256",
    0x1305: "TLS_AES_128_CCM_8_SHA256",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA",
    0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0x003C: "TLS_RSA_WITH_AES_128_CBC_SHA256",
    0x003D: "TLS_RSA_WITH_AES_256_CBC_SHA256",
    0x009C: "TLS_RSA_WITH_AES_128_GCM_SHA256",
    0x009D: "TLS_RSA_WITH_AES_256_GCM_SHA384",
    0x009E: "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
    0x009F: "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
    0x00A8: "TLS_PSK_WITH_AES_128_GCM_SHA256",
    0x00A9: "TLS_PSK_WITH_AES_256_GCM_SHA384",
    0x00AA: "TLS_DHE_PSK_WITH_AES_128_GCM_SHA256",
    0x00AB: "TLS_DHE_PSK_WITH_AES_256_GCM_SHA384",
    0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    0xC023: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    0xC024: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
    0xC027: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    0xC028: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    0xC02C: "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xC030: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    0xCCA8: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    0xCCA9: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    0xCCAA: "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    0xCCAB: "TLS_PSK_WITH_CHACHA20_POLY1305_SHA256",
    0xCCAC: "TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256",
    0xCCAD: "TLS_DHE_PSK_WITH_CHACHA20_POLY1305_SHA256",
    0xD001: "TLS_ECDHE_PSK_WITH_AES_128_GCM_SHA256",
    0xD002: "TLS_ECDHE_PSK_WITH_AES_256_GCM_SHA384",
}


def suite_name(code: int | None) -> str | None:
    """IANA name of a cipher suite, ``0x....`` for one we have no name for."""
    if code is None:
        return None
    return _SUITE_NAMES.get(code, f"0x{code:04x}")


def is_grease(code: int) -> bool:
    """RFC 8701: reserved values 0x?a?a exercise extensibility; not real choices."""
    return code & 0x0F0F == 0x0A0A and (code >> 8) == (code & 0xFF)


# -- alerts (RFC 8446 §6, RFC 5246 §7.2) ----------------------------------------------


class AlertDescription(IntEnum):
    close_notify = 0
    unexpected_message = 10
    bad_record_mac = 20
    record_overflow = 22
    handshake_failure = 40
    bad_certificate = 42
    unsupported_certificate = 43
    certificate_revoked = 44
    certificate_expired = 45
    certificate_unknown = 46
    illegal_parameter = 47
    unknown_ca = 48
    access_denied = 49
    decode_error = 50
    decrypt_error = 51
    protocol_version = 70
    insufficient_security = 71
    internal_error = 80
    inappropriate_fallback = 86
    user_canceled = 90
    no_renegotiation = 100
    missing_extension = 109
    unsupported_extension = 110
    unrecognized_name = 112
    bad_certificate_status_response = 113
    unknown_psk_identity = 115
    certificate_required = 116
    no_application_protocol = 120


def alert_text(body: bytes) -> str:
    """``warning close_notify`` / ``fatal handshake_failure`` / what could be read."""
    if len(body) != 2:
        return f"malformed ({len(body)} bytes)"
    level = {1: "warning", 2: "fatal"}.get(body[0], f"level-{body[0]}")
    try:
        desc = AlertDescription(body[1]).name
    except ValueError:
        desc = f"alert-{body[1]}"
    return f"{level} {desc}"

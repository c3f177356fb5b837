"""TLS record layer: headers, cipher suites, and record protection for TLS 1.2 and 1.3.

Only AEAD suites are decrypted (what TLS 1.3 allows and what TLS 1.2 stacks negotiate
by default): AES-GCM (RFC 5288, RFC 5289) and ChaCha20-Poly1305 (RFC 7905).  The
TLS 1.3 keys come from the traffic secrets of the key log through the shared key
schedule (``reassembly.tlscommon.AeadKeys``); TLS 1.2 keys from the master secret
(``CLIENT_RANDOM`` key-log lines) through the TLS 1.2 PRF (RFC 5246 §5, §6.3).
"""

from __future__ import annotations

import struct
from enum import IntEnum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac

from reassembly.tlscommon import TLS13_SUITES, AeadKeys, make_aead

__all__ = [
    "HEADER_BYTES",
    "MAX_RECORD_BYTES",
    "AlertDescription",
    "ContentType",
    "Tls12Keys",
    "Tls13Keys",
    "alert_text",
    "is_plausible_header",
    "suite_name",
    "tls12_key_block",
    "tls12_prf",
    "version_name",
]

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

# TLS 1.2 AEAD suites we decrypt: code -> (PRF hash, key bytes, fixed IV bytes, chacha)
_GCM128 = (hashes.SHA256, 16, 4, False)
_GCM256 = (hashes.SHA384, 32, 4, False)
_CHACHA = (hashes.SHA256, 32, 12, True)
TLS12_AEAD: dict[int, tuple[type[hashes.HashAlgorithm], int, int, bool]] = {
    0x009C: _GCM128, 0x009D: _GCM256,  # RSA
    0x009E: _GCM128, 0x009F: _GCM256,  # DHE_RSA
    0x00A8: _GCM128, 0x00A9: _GCM256,  # PSK
    0x00AA: _GCM128, 0x00AB: _GCM256,  # DHE_PSK
    0xC02B: _GCM128, 0xC02C: _GCM256,  # ECDHE_ECDSA
    0xC02F: _GCM128, 0xC030: _GCM256,  # ECDHE_RSA
    0xD001: _GCM128, 0xD002: _GCM256,  # ECDHE_PSK
    0xCCA8: _CHACHA, 0xCCA9: _CHACHA, 0xCCAA: _CHACHA,  # ECDHE_RSA, ECDHE_ECDSA, DHE_RSA
    0xCCAB: _CHACHA, 0xCCAC: _CHACHA, 0xCCAD: _CHACHA,  # PSK, ECDHE_PSK, DHE_PSK
}

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


# -- TLS 1.2 key derivation (RFC 5246 §5, §6.3) -----------------------------------------


def tls12_prf(
    secret: bytes, label: bytes, seed: bytes, length: int,
    hash_cls: type[hashes.HashAlgorithm] = hashes.SHA256,
) -> bytes:
    """PRF(secret, label, seed) = P_hash(secret, label + seed) (RFC 5246 §5)."""
    seed = label + seed

    def mac(data: bytes) -> bytes:
        h = hmac.HMAC(secret, hash_cls())
        h.update(data)
        return h.finalize()

    out = bytearray()
    a = seed
    while len(out) < length:
        a = mac(a)
        out += mac(a + seed)
    return bytes(out[:length])


def tls12_key_block(
    suite: int, master: bytes, client_random: bytes, server_random: bytes
) -> tuple[bytes, bytes, bytes, bytes]:
    """(client key, server key, client IV, server IV) of an AEAD suite (RFC 5246 §6.3:
    the key block is PRF(master, "key expansion", server_random + client_random); AEAD
    suites have no MAC keys)."""
    hash_cls, key_len, iv_len, _chacha = TLS12_AEAD[suite]
    block = tls12_prf(master, b"key expansion", server_random + client_random,
                      2 * (key_len + iv_len), hash_cls)
    ck, sk = block[:key_len], block[key_len : 2 * key_len]
    civ = block[2 * key_len : 2 * key_len + iv_len]
    siv = block[2 * key_len + iv_len :]
    return ck, sk, civ, siv


# -- record protection ---------------------------------------------------------------------


class Tls12Keys:
    """Record protection of one sender under a TLS 1.2 AEAD suite.

    GCM (RFC 5288 §3): the fragment is explicit_nonce(8) || ciphertext || tag; the
    nonce is the 4-byte salt (client/server write IV) || explicit_nonce.  ChaCha20-
    Poly1305 (RFC 7905 §2): no explicit nonce; the nonce is the 12-byte IV XOR the
    padded sequence number.  Additional data (RFC 5246 §6.2.3.3): seq_num(8) ||
    type || version || length of the plaintext."""

    __slots__ = ("suite", "chacha", "iv", "_aead")

    def __init__(self, suite: int, key: bytes, iv: bytes) -> None:
        self.suite = suite
        self.chacha = TLS12_AEAD[suite][3]
        self.iv = iv
        self._aead = make_aead(self.chacha, key)

    def overhead(self) -> int:
        return TAG_BYTES if self.chacha else TAG_BYTES + GCM_EXPLICIT_NONCE_BYTES

    def open(self, seq: int, ctype: int, version: int, fragment: bytes) -> bytes | None:
        if self.chacha:
            nonce = (int.from_bytes(self.iv, "big") ^ seq).to_bytes(12, "big")
            body = fragment
        else:
            if len(fragment) < GCM_EXPLICIT_NONCE_BYTES:
                return None
            nonce = self.iv + fragment[:GCM_EXPLICIT_NONCE_BYTES]
            body = fragment[GCM_EXPLICIT_NONCE_BYTES:]
        if len(body) < TAG_BYTES:
            return None
        aad = struct.pack("!QBHH", seq, ctype, version, len(body) - TAG_BYTES)
        try:
            return self._aead.decrypt(nonce, body, aad)
        except InvalidTag:
            return None

    def seal(self, seq: int, ctype: int, version: int, plaintext: bytes) -> bytes:
        """The fragment for ``plaintext`` (tests and tools; GCM uses seq as explicit
        nonce, as OpenSSL does)."""
        aad = struct.pack("!QBHH", seq, ctype, version, len(plaintext))
        if self.chacha:
            nonce = (int.from_bytes(self.iv, "big") ^ seq).to_bytes(12, "big")
            return self._aead.encrypt(nonce, plaintext, aad)
        explicit = seq.to_bytes(8, "big")
        return explicit + self._aead.encrypt(self.iv + explicit, plaintext, aad)

    def explicit_seq(self, fragment: bytes) -> int | None:
        """The GCM explicit nonce read as a sequence number (most stacks send exactly
        that): a resync hint after records were lost."""
        if self.chacha or len(fragment) < GCM_EXPLICIT_NONCE_BYTES:
            return None
        return int.from_bytes(fragment[:GCM_EXPLICIT_NONCE_BYTES], "big")


class Tls13Keys:
    """Record protection under one TLS 1.3 traffic secret (RFC 8446 §5.2): the AAD is
    the record header; the plaintext ends with the real content type and zero padding."""

    __slots__ = ("keys",)

    def __init__(self, suite: int, secret: bytes) -> None:
        self.keys = AeadKeys(suite, secret)

    @staticmethod
    def supported(suite: int) -> bool:
        return suite in TLS13_SUITES

    def overhead(self) -> int:
        return TAG_BYTES + 1

    def open(self, seq: int, header: bytes, fragment: bytes) -> tuple[int, bytes] | None:
        """(inner content type, content) or None when the tag does not verify or the
        inner plaintext is all padding."""
        plain = self.keys.open(seq, header, fragment)
        if plain is None:
            return None
        end = len(plain)
        while end and plain[end - 1] == 0:
            end -= 1
        if not end:
            return None
        return plain[end - 1], plain[: end - 1]

    def seal(self, seq: int, ctype: int, content: bytes) -> bytes:
        """A whole record (header included) for ``content`` (tests and tools)."""
        inner = content + bytes([ctype])
        header = _HDR.pack(ContentType.APPLICATION_DATA, 0x0303, len(inner) + TAG_BYTES)
        return header + self.keys.seal(seq, header, inner)

    def updated(self) -> Tls13Keys:
        """Keys after a KeyUpdate (RFC 8446 §7.2)."""
        return Tls13Keys(self.keys.suite, self.keys.updated_secret())

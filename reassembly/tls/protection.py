"""TLS record protection: the keys of TLS 1.2 AEAD suites (through the TLS 1.2 PRF,
RFC 5246 §5, §6.3) and of TLS 1.3 traffic secrets (``reassembly.tlskeys``), and the
opening of records with them.

The part of the record layer that needs the ``cryptography`` package, apart from
``reassembly.tls.records`` (headers, names, alerts) so that a run whose captures have no
TLS never imports it: ``TlsLayer`` imports this module when a connection's keys are
looked for, and ``reassembly.tls.records`` offers its names too, loaded on first use.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac

from reassembly.tls.records import _HDR, GCM_EXPLICIT_NONCE_BYTES, TAG_BYTES, ContentType
from reassembly.tlskeys import TLS13_SUITES, AeadKeys, make_aead

__all__ = ["TLS12_AEAD", "Tls12Keys", "Tls13Keys", "tls12_key_block", "tls12_prf"]

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

"""The TLS 1.3 key schedule and AEAD keys, shared by QUIC and TLS over TCP.

HKDF (RFC 5869) and TLS 1.3 HKDF-Expand-Label (RFC 8446 §7.1), the hash and key length
of each TLS 1.3 suite we decrypt, and the AEAD keys of a TLS 1.3 traffic secret
(RFC 8446 §7.3): QUIC derives its packet keys the same way with its own label prefix
(RFC 9001 §5.1).  Every primitive comes from the ``cryptography`` package; this is the
only part of ``reassembly.tlscommon`` that needs it, so it is a module of its own,
imported when a capture has keys to derive (``reassembly.tlscommon`` offers its names
too, loaded on first use).
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from reassembly.tlscommon import CipherSuite

__all__ = ["TLS13_SUITES", "AeadKeys", "hkdf_expand_label", "hkdf_extract", "make_aead"]


# -- HKDF (RFC 5869 via ``cryptography``; TLS 1.3 labels RFC 8446 §7.1) --------------


def hkdf_extract(
    salt: bytes, ikm: bytes, hash_cls: type[hashes.HashAlgorithm] = hashes.SHA256
) -> bytes:
    """HKDF-Extract(salt, IKM) = HMAC-Hash(salt, IKM) (RFC 5869 §2.2)."""
    h = hmac.HMAC(salt, hash_cls())
    h.update(ikm)
    return h.finalize()


def hkdf_expand_label(
    secret: bytes,
    label: bytes,
    context: bytes,
    length: int,
    hash_cls: type[hashes.HashAlgorithm] = hashes.SHA256,
) -> bytes:
    """TLS 1.3 HKDF-Expand-Label (RFC 8446 §7.1): the label is prefixed with "tls13 "."""
    full = b"tls13 " + label
    info = struct.pack("!HB", length, len(full)) + full + bytes([len(context)]) + context
    return HKDFExpand(hash_cls(), length, info).derive(secret)


# -- TLS 1.3 traffic keys ---------------------------------------------------------------

# suite -> (hash, AEAD key length) for the suites we decrypt (CCM is not supported)
TLS13_SUITES: dict[int, tuple[type[hashes.HashAlgorithm], int]] = {
    CipherSuite.AES_128_GCM_SHA256: (hashes.SHA256, 16),
    CipherSuite.AES_256_GCM_SHA384: (hashes.SHA384, 32),
    CipherSuite.CHACHA20_POLY1305_SHA256: (hashes.SHA256, 32),
}


def make_aead(chacha: bool, key: bytes) -> AESGCM | ChaCha20Poly1305:
    return ChaCha20Poly1305(key) if chacha else AESGCM(key)


class AeadKeys:
    """The AEAD key and IV of one TLS 1.3 traffic secret (RFC 8446 §7.3) — or of a QUIC
    packet protection secret, whose labels carry a prefix (``quic `` / ``quicv2 ``).
    The per-record nonce is the IV XOR the 64-bit sequence number (RFC 8446 §5.3;
    RFC 9001 §5.3 uses the packet number the same way)."""

    __slots__ = ("suite", "secret", "key", "iv", "hash_cls", "_aead")

    def __init__(self, suite: int, secret: bytes, label_prefix: bytes = b"") -> None:
        hash_cls, key_len = TLS13_SUITES[suite]  # KeyError: not a suite we decrypt
        self.suite = CipherSuite(suite)
        self.secret = secret
        self.hash_cls = hash_cls
        self.key = hkdf_expand_label(secret, label_prefix + b"key", b"", key_len, hash_cls)
        self.iv = hkdf_expand_label(secret, label_prefix + b"iv", b"", 12, hash_cls)
        self._aead = make_aead(suite == CipherSuite.CHACHA20_POLY1305_SHA256, self.key)

    def nonce(self, seq: int) -> bytes:
        iv = self.iv
        return (int.from_bytes(iv, "big") ^ seq).to_bytes(len(iv), "big")

    def open(self, seq: int, aad: bytes, ciphertext: bytes) -> bytes | None:
        """AEAD-decrypt; None when the tag does not verify."""
        try:
            return self._aead.decrypt(self.nonce(seq), ciphertext, aad)
        except InvalidTag:
            return None

    def seal(self, seq: int, aad: bytes, plaintext: bytes) -> bytes:
        return self._aead.encrypt(self.nonce(seq), plaintext, aad)

    def updated_secret(self, label: bytes = b"traffic upd") -> bytes:
        """The next secret of a key update (RFC 8446 §7.2; QUIC: ``quic ku``)."""
        return hkdf_expand_label(self.secret, label, b"", len(self.secret), self.hash_cls)

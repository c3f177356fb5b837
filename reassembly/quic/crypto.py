"""QUIC packet protection: key derivation, header protection, AEAD (RFC 9001 §5).

Strategy: every primitive comes from the ``cryptography`` package (HMAC for
HKDF-Extract, ``HKDFExpand``, AES-GCM, ChaCha20-Poly1305, AES-ECB and ChaCha20 for the
header-protection mask); this module only arranges them as RFC 9001 says.  A
:class:`PacketProtection` holds the key material of one sender at one encryption level
and key generation, with its AEAD and header-protection objects built once.

Version differences (RFC 9369 §3, ``reassembly.quic.versions``): QUIC v2 has its own
Initial salt, ``quicv2 *`` labels and Retry integrity key; pre-RFC drafts use older
salts with the v1 labels.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# the versions' parameters (plain data, ``reassembly.quic.versions``), re-exported here
# for QUIC's users
from reassembly.quic.versions import (
    VERSION_1,
    VERSION_2,
    VERSIONS,
    VersionParams,
    version_params,
)

# HKDF, HKDF-Expand-Label, the TLS 1.3 suites and the AEAD keys of a traffic secret are
# shared with TLS over TCP (``reassembly.tlscommon``, ``reassembly.tlskeys``);
# re-exported here for QUIC's users
from reassembly.tlscommon import CipherSuite, suites_for_secret
from reassembly.tlskeys import AeadKeys, hkdf_expand_label, hkdf_extract

__all__ = [
    "VERSION_1",
    "VERSION_2",
    "CipherSuite",
    "PacketProtection",
    "VersionParams",
    "decode_packet_number",
    "hkdf_expand_label",
    "hkdf_extract",
    "initial_protections",
    "initial_secrets",
    "retry_integrity_tag",
    "suites_for_secret",
    "version_params",
]

AEAD_TAG_BYTES = 16
SAMPLE_BYTES = 16  # RFC 9001 §5.4.2: the header-protection sample


def initial_secrets(version: int, dcid: bytes) -> tuple[bytes, bytes]:
    """(client_initial_secret, server_initial_secret) for a client DCID (RFC 9001 §5.2)."""
    params = VERSIONS[version]
    initial = hkdf_extract(params.initial_salt, dcid)
    return (
        hkdf_expand_label(initial, b"client in", b"", 32),
        hkdf_expand_label(initial, b"server in", b"", 32),
    )


# -- packet protection ---------------------------------------------------------------


class PacketProtection:
    """Keys of one sender at one level and key generation (RFC 9001 §5.1, §6): the
    TLS 1.3 traffic keys (``AeadKeys``) under the version's label prefix, plus the
    header-protection key."""

    __slots__ = ("suite", "secret", "key", "iv", "hp", "params", "_keys", "_hp_ecb")

    def __init__(
        self, suite: int, secret: bytes, params: VersionParams, hp: bytes | None = None
    ) -> None:
        prefix = params.label_prefix
        keys = self._keys = AeadKeys(suite, secret, prefix)
        self.suite = keys.suite
        self.secret = secret
        self.params = params
        self.key = keys.key
        self.iv = keys.iv
        # header-protection keys survive key updates (RFC 9001 §6: "hp" is not updated)
        self.hp = hp if hp is not None else hkdf_expand_label(
            secret, prefix + b"hp", b"", len(keys.key), keys.hash_cls
        )
        if suite == CipherSuite.CHACHA20_POLY1305_SHA256:
            self._hp_ecb = None
        else:
            # ECB is stateless block by block, so one encryptor serves every sample
            self._hp_ecb = Cipher(algorithms.AES(self.hp), modes.ECB()).encryptor()

    def mask(self, sample: bytes) -> bytes:
        """The 5-byte header-protection mask for a 16-byte sample (RFC 9001 §5.4.3/5.4.4)."""
        if self._hp_ecb is not None:
            return self._hp_ecb.update(sample)[:5]
        # ChaCha20: counter = sample[0:4] (little endian), nonce = sample[4:16]; the
        # ``cryptography`` ChaCha20 "nonce" is exactly counter || nonce
        enc = Cipher(algorithms.ChaCha20(self.hp, bytes(sample)), None).encryptor()
        return enc.update(b"\x00" * 5)

    def open(self, packet_number: int, header: bytes, ciphertext: bytes) -> bytes | None:
        """AEAD-decrypt a payload (RFC 9001 §5.3); None when the tag does not verify."""
        return self._keys.open(packet_number, header, ciphertext)

    def seal(self, packet_number: int, header: bytes, plaintext: bytes) -> bytes:
        """AEAD-encrypt a payload (the inverse of :meth:`open`; tests and tools)."""
        return self._keys.seal(packet_number, header, plaintext)

    def next_generation(self) -> PacketProtection:
        """Keys after a key update: secret <- HKDF-Expand-Label(secret, "quic ku") (§6.1)."""
        nxt = self._keys.updated_secret(self.params.label_prefix + b"ku")
        return PacketProtection(self.suite, nxt, self.params, self.hp)


def initial_protections(version: int, dcid: bytes) -> tuple[PacketProtection, PacketProtection]:
    """(client, server) Initial keys for the client's original DCID (AES-128-GCM)."""
    params = VERSIONS[version]
    c, s = initial_secrets(version, dcid)
    suite = CipherSuite.AES_128_GCM_SHA256
    return PacketProtection(suite, c, params), PacketProtection(suite, s, params)


def retry_integrity_tag(version: int, odcid: bytes, retry_without_tag: bytes) -> bytes | None:
    """The Retry Integrity Tag (RFC 9001 §5.8): AES-128-GCM over the Retry pseudo-packet
    (ODCID length, ODCID, the Retry packet without its tag) with a fixed key and nonce.
    None for versions whose fixed key we do not have (drafts)."""
    params = VERSIONS.get(version)
    if params is None or params.retry_key is None or params.retry_nonce is None:
        return None
    pseudo = bytes([len(odcid)]) + odcid + retry_without_tag
    return AESGCM(params.retry_key).encrypt(params.retry_nonce, b"", pseudo)


def decode_packet_number(largest: int | None, truncated: int, nbits: int) -> int:
    """Full packet number from its truncated encoding (RFC 9000 §A.3)."""
    expected = 0 if largest is None else largest + 1
    win = 1 << nbits
    hwin = win >> 1
    candidate = (expected & ~(win - 1)) | truncated
    if candidate <= expected - hwin and candidate < (1 << 62) - win:
        return candidate + win
    if candidate > expected + hwin and candidate >= win:
        return candidate - win
    return candidate

"""QUIC packet protection: key derivation, header protection, AEAD (RFC 9001 §5).

Strategy: every primitive comes from the ``cryptography`` package (HMAC for
HKDF-Extract, ``HKDFExpand``, AES-GCM, ChaCha20-Poly1305, AES-ECB and ChaCha20 for the
header-protection mask); this module only arranges them as RFC 9001 says.  A
:class:`PacketProtection` holds the key material of one sender at one encryption level
and key generation, with its AEAD and header-protection objects built once.

Version differences (RFC 9369 §3): QUIC v2 has its own Initial salt, ``quicv2 *``
labels and Retry integrity key; pre-RFC drafts use older salts with the v1 labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# HKDF, HKDF-Expand-Label, the TLS 1.3 suites and the AEAD keys of a traffic secret are
# shared with TLS over TCP (``reassembly.tlscommon``); re-exported here for QUIC's users
from reassembly.tlscommon import (
    AeadKeys,
    CipherSuite,
    hkdf_expand_label,
    hkdf_extract,
    suites_for_secret,
)

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

VERSION_1 = 0x00000001
VERSION_2 = 0x6B3343CF

AEAD_TAG_BYTES = 16
SAMPLE_BYTES = 16  # RFC 9001 §5.4.2: the header-protection sample


@dataclass(frozen=True, slots=True)
class VersionParams:
    """What a QUIC version changes in packet protection and long headers."""

    name: str
    initial_salt: bytes
    label_prefix: bytes  # b"quic " (v1, drafts) or b"quicv2 " (RFC 9369 §3.3.2)
    # long-header type bits (byte 0, 0x30) -> packet type name
    long_types: tuple[str, str, str, str]
    retry_key: bytes | None  # RFC 9001 §5.8 / RFC 9369 §3.3.3; None: not verified
    retry_nonce: bytes | None
    tls_ext_transport_params: int  # 0x39, drafts 0xffa5


_V1_TYPES = ("initial", "0rtt", "handshake", "retry")  # RFC 9000 §17.2
_V2_TYPES = ("retry", "initial", "0rtt", "handshake")  # RFC 9369 §3.2

_SALT_V1 = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")
_SALT_V2 = bytes.fromhex("0dede3def700a6db819381be6e269dcbf9bd2ed9")
_SALT_D29 = bytes.fromhex("afbfec289993d24c9e9786f19c6111e04390a899")  # drafts 29-32
_SALT_D23 = bytes.fromhex("c3eef712c72ebb5a11a7d2432bb46365bef9f502")  # drafts 23-28

_PARAMS_V1 = VersionParams(
    "1",
    _SALT_V1,
    b"quic ",
    _V1_TYPES,
    bytes.fromhex("be0c690b9f66575a1d766b54e368c84e"),
    bytes.fromhex("461599d35d632bf2239825bb"),
    0x39,
)
_PARAMS_V2 = VersionParams(
    "2",
    _SALT_V2,
    b"quicv2 ",
    _V2_TYPES,
    bytes.fromhex("8fb4b01b56ac48e260fbcbcead7ccc92"),
    bytes.fromhex("d86969bc2d7c6d9990efb04a"),
    0x39,
)


def _draft(n: int) -> VersionParams:
    salt = _SALT_V1 if n >= 33 else _SALT_D29 if n >= 29 else _SALT_D23
    ext = 0x39 if n >= 33 else 0xFFA5
    return VersionParams(f"draft-{n}", salt, b"quic ", _V1_TYPES, None, None, ext)


_VERSIONS: dict[int, VersionParams] = {VERSION_1: _PARAMS_V1, VERSION_2: _PARAMS_V2}
for _n in range(23, 35):  # IETF drafts 23..34 (0xff000017..0xff000022)
    _VERSIONS[0xFF000000 | _n] = _draft(_n)


def version_params(version: int) -> VersionParams | None:
    """Parameters of a version we can decrypt, else None."""
    return _VERSIONS.get(version)


def is_greased(version: int) -> bool:
    """RFC 9000 §15: versions 0x?a?a?a?a are reserved to exercise negotiation."""
    return version & 0x0F0F0F0F == 0x0A0A0A0A


def initial_secrets(version: int, dcid: bytes) -> tuple[bytes, bytes]:
    """(client_initial_secret, server_initial_secret) for a client DCID (RFC 9001 §5.2)."""
    params = _VERSIONS[version]
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
    params = _VERSIONS[version]
    c, s = initial_secrets(version, dcid)
    suite = CipherSuite.AES_128_GCM_SHA256
    return PacketProtection(suite, c, params), PacketProtection(suite, s, params)


def retry_integrity_tag(version: int, odcid: bytes, retry_without_tag: bytes) -> bytes | None:
    """The Retry Integrity Tag (RFC 9001 §5.8): AES-128-GCM over the Retry pseudo-packet
    (ODCID length, ODCID, the Retry packet without its tag) with a fixed key and nonce.
    None for versions whose fixed key we do not have (drafts)."""
    params = _VERSIONS.get(version)
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

"""What each QUIC version changes in long headers and packet protection (RFC 9000 §17.2,
RFC 9001 §5.2 and §5.8, RFC 9369 §3), and which versions the layer decodes.

Plain data, apart from ``reassembly.quic.crypto`` (which imports ``cryptography``): the
layer's first look at a datagram (``reassembly.quic.packet``) asks only this, so a
capture without QUIC never imports the packet-protection machinery.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VERSION_1", "VERSION_2", "VersionParams", "VERSIONS", "is_greased",
           "version_params"]

VERSION_1 = 0x00000001
VERSION_2 = 0x6B3343CF


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


# every version decoded, by number
VERSIONS: dict[int, VersionParams] = {VERSION_1: _PARAMS_V1, VERSION_2: _PARAMS_V2}
for _n in range(23, 35):  # IETF drafts 23..34 (0xff000017..0xff000022)
    VERSIONS[0xFF000000 | _n] = _draft(_n)


def version_params(version: int) -> VersionParams | None:
    """Parameters of a version we can decrypt, else None."""
    return VERSIONS.get(version)


def is_greased(version: int) -> bool:
    """RFC 9000 §15: versions 0x?a?a?a?a are reserved to exercise negotiation."""
    return version & 0x0F0F0F0F == 0x0A0A0A0A

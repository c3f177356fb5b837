"""TLS pieces shared by the QUIC layer and the TLS-over-TCP layer.

* HKDF (RFC 5869) and TLS 1.3 HKDF-Expand-Label (RFC 8446 §7.1), the TLS 1.3 cipher
  suites and the AEAD keys of a TLS 1.3 traffic secret (RFC 8446 §7.3): QUIC derives
  its packet keys the same way with its own label prefix (RFC 9001 §5.1).
* The handshake messages a forensic user asks for (RFC 8446 §4, RFC 5246 §7.4): the
  ClientHello (client random, SNI, offered ALPN, versions and cipher suites, early
  data), the ServerHello (selected cipher suite and version, HelloRetryRequest, the
  TLS 1.2 ALPN choice) and EncryptedExtensions (selected ALPN in TLS 1.3).
  :class:`HandshakeReader` turns the in-order bytes of a handshake stream (QUIC CRYPTO
  frames, TLS handshake records) into complete messages, holding at most
  ``max_message_bytes`` of an unfinished one.

Moved here from ``reassembly.quic.crypto`` / ``reassembly.quic.tls`` (which re-export
these names) when TLS over TCP needed them too.  The key schedule and the AEAD keys,
the part that needs the ``cryptography`` package, live in ``reassembly.tlskeys`` and
load from here on first use (``reassembly.lazy``): telling whether a flow is TLS and
reading its handshake does not import ``cryptography``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

from reassembly.lazy import lazy_names
from reassembly.quic.buffer import Cursor, NeedMore

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from reassembly.tlskeys import (
        TLS13_SUITES,
        AeadKeys,
        hkdf_expand_label,
        hkdf_extract,
    )

_T = TypeVar("_T")

__all__ = [
    "TLS13_SUITES",
    "AeadKeys",
    "CipherSuite",
    "ClientHello",
    "EncryptedExtensions",
    "HandshakeReader",
    "HandshakeType",
    "ServerHello",
    "hkdf_expand_label",
    "hkdf_extract",
    "parse_client_hello",
    "parse_encrypted_extensions",
    "parse_server_hello",
    "safe_parse",
    "suites_for_secret",
]

__getattr__ = lazy_names(__name__, dict.fromkeys(
    ("TLS13_SUITES", "AeadKeys", "hkdf_expand_label", "hkdf_extract"),
    "reassembly.tlskeys"))


# -- TLS 1.3 cipher suites ------------------------------------------------------------


class CipherSuite(IntEnum):
    """TLS 1.3 cipher suites (RFC 8446 §B.4)."""

    AES_128_GCM_SHA256 = 0x1301
    AES_256_GCM_SHA384 = 0x1302
    CHACHA20_POLY1305_SHA256 = 0x1303
    AES_128_CCM_SHA256 = 0x1304

    @property
    def label(self) -> str:
        """IANA name, e.g. ``TLS_AES_128_GCM_SHA256``."""
        return f"TLS_{self.name}"


def suites_for_secret(secret_len: int) -> tuple[CipherSuite, ...]:
    """Suites whose hash output has this length (to try when the ServerHello is unknown)."""
    if secret_len == 32:
        return (CipherSuite.AES_128_GCM_SHA256, CipherSuite.CHACHA20_POLY1305_SHA256)
    if secret_len == 48:
        return (CipherSuite.AES_256_GCM_SHA384,)
    return ()


# -- handshake messages -------------------------------------------------------------------

# RFC 8446 §4.1.3: a ServerHello with this random is a HelloRetryRequest
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")

EXT_SERVER_NAME = 0  # RFC 6066 §3
EXT_ALPN = 16  # RFC 7301
EXT_PRE_SHARED_KEY = 41
EXT_EARLY_DATA = 42
EXT_SUPPORTED_VERSIONS = 43
EXT_QUIC_TRANSPORT_PARAMETERS = 0x39  # RFC 9001 §8.2 (drafts: 0xffa5)


class HandshakeType(IntEnum):
    HELLO_REQUEST = 0  # TLS 1.2
    CLIENT_HELLO = 1
    SERVER_HELLO = 2
    NEW_SESSION_TICKET = 4
    END_OF_EARLY_DATA = 5
    ENCRYPTED_EXTENSIONS = 8
    CERTIFICATE = 11
    SERVER_KEY_EXCHANGE = 12  # TLS 1.2
    CERTIFICATE_REQUEST = 13
    SERVER_HELLO_DONE = 14  # TLS 1.2
    CERTIFICATE_VERIFY = 15
    CLIENT_KEY_EXCHANGE = 16  # TLS 1.2
    FINISHED = 20
    CERTIFICATE_STATUS = 22  # TLS 1.2 (RFC 6066 §8)
    KEY_UPDATE = 24
    MESSAGE_HASH = 254


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


@dataclass(frozen=True, slots=True)
class ClientHello:
    legacy_version: int
    random: bytes
    session_id: bytes
    cipher_suites: tuple[int, ...]
    extensions: tuple[int, ...]  # extension types in order
    sni: str | None
    alpn: tuple[str, ...]
    supported_versions: tuple[int, ...]
    early_data: bool
    psk: bool


@dataclass(frozen=True, slots=True)
class ServerHello:
    legacy_version: int
    random: bytes
    cipher_suite: int
    selected_version: int | None
    hello_retry: bool
    extensions: tuple[int, ...]
    alpn: str | None = None  # TLS 1.2: the server's ALPN choice (1.3: EncryptedExtensions)
    session_id: bytes = b""  # legacy_session_id_echo (TLS 1.2 resumption by session id)


@dataclass(frozen=True, slots=True)
class EncryptedExtensions:
    alpn: str | None
    extensions: tuple[int, ...]


def _extensions(buf: Cursor) -> list[tuple[int, Cursor]]:
    if buf.eof():  # extensions are optional in the TLS 1.2 framing
        return []
    block = buf.pull_block(2)
    out = []
    while not block.eof():
        etype = block.pull_u16()
        out.append((etype, block.pull_block(2)))
    return out


def parse_client_hello(body: bytes) -> ClientHello:
    """RFC 8446 §4.1.2.  Raises ``ValueError`` (``NeedMore``) on malformed input."""
    buf = Cursor(body)
    legacy_version = buf.pull_u16()
    random = buf.pull_bytes(32)
    session_id = buf.pull_opaque(1)
    suites_block = buf.pull_block(2)
    suites = []
    while not suites_block.eof():
        suites.append(suites_block.pull_u16())
    buf.pull_opaque(1)  # legacy_compression_methods
    sni: str | None = None
    alpn: list[str] = []
    versions: list[int] = []
    early = psk = False
    types = []
    for etype, ext in _extensions(buf):
        types.append(etype)
        if etype == EXT_SERVER_NAME and sni is None:
            names = ext.pull_block(2)
            while not names.eof():
                name_type = names.pull_u8()
                name = names.pull_opaque(2)
                if name_type == 0:  # host_name
                    sni = _text(name)
                    break
        elif etype == EXT_ALPN:
            protos = ext.pull_block(2)
            while not protos.eof():
                alpn.append(_text(protos.pull_opaque(1)))
        elif etype == EXT_SUPPORTED_VERSIONS:
            vers = ext.pull_block(1)
            while not vers.eof():
                versions.append(vers.pull_u16())
        elif etype == EXT_EARLY_DATA:
            early = True
        elif etype == EXT_PRE_SHARED_KEY:
            psk = True
    return ClientHello(
        legacy_version,
        random,
        session_id,
        tuple(suites),
        tuple(types),
        sni,
        tuple(alpn),
        tuple(versions),
        early,
        psk,
    )


def parse_server_hello(body: bytes) -> ServerHello:
    """RFC 8446 §4.1.3 (also a HelloRetryRequest, told by its random) and the TLS 1.2
    ServerHello (RFC 5246 §7.4.1.3), whose ALPN choice (RFC 7301 §3.1) is read too."""
    buf = Cursor(body)
    legacy_version = buf.pull_u16()
    random = buf.pull_bytes(32)
    session_id = buf.pull_opaque(1)  # legacy_session_id_echo
    suite = buf.pull_u16()
    buf.pull_u8()  # legacy_compression_method
    selected = None
    alpn = None
    types = []
    for etype, ext in _extensions(buf):
        types.append(etype)
        if etype == EXT_SUPPORTED_VERSIONS:
            selected = ext.pull_u16()
        elif etype == EXT_ALPN:
            protos = ext.pull_block(2)
            if not protos.eof():
                alpn = _text(protos.pull_opaque(1))
    return ServerHello(
        legacy_version, random, suite, selected, random == HRR_RANDOM, tuple(types), alpn,
        session_id,
    )


def parse_encrypted_extensions(body: bytes) -> EncryptedExtensions:
    """RFC 8446 §4.3.1: the server's ALPN choice lives here in TLS 1.3."""
    buf = Cursor(body)
    alpn = None
    types = []
    for etype, ext in _extensions(buf):
        types.append(etype)
        if etype == EXT_ALPN:
            protos = ext.pull_block(2)
            if not protos.eof():
                alpn = _text(protos.pull_opaque(1))
    return EncryptedExtensions(alpn, tuple(types))


class HandshakeReader:
    """Complete handshake messages (type, body) out of in-order CRYPTO bytes.

    ``error`` is set (and the reader stops) when a message header announces more than
    ``max_message_bytes``; the caller reports it.
    """

    __slots__ = ("buf", "max_message_bytes", "error")

    def __init__(self, max_message_bytes: int) -> None:
        self.buf = bytearray()
        self.max_message_bytes = max_message_bytes
        self.error: str | None = None

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self.error is not None:
            return []
        buf = self.buf
        buf += data
        out: list[tuple[int, bytes]] = []
        pos = 0
        while len(buf) - pos >= 4:
            mtype = buf[pos]
            mlen = int.from_bytes(buf[pos + 1 : pos + 4], "big")
            if mlen > self.max_message_bytes:
                self.error = (
                    f"TLS handshake message type {mtype} announces {mlen} bytes, more than "
                    f"the {self.max_message_bytes} buffered at most"
                )
                buf.clear()
                return out
            if len(buf) - pos - 4 < mlen:
                break
            out.append((mtype, bytes(buf[pos + 4 : pos + 4 + mlen])))
            pos += 4 + mlen
        del buf[:pos]
        return out


def safe_parse(parse: Callable[[bytes], _T], body: bytes) -> tuple[_T | None, str | None]:
    """Run a parse function; (result, None) or (None, error text)."""
    try:
        return parse(body), None
    except NeedMore as exc:
        return None, f"truncated: {exc}"
    except ValueError as exc:
        return None, str(exc)

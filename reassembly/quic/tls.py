"""The TLS 1.3 handshake messages QUIC carries in CRYPTO frames (RFC 8446 §4, RFC 9001 §4).

Only what a forensic user asks for is decoded: the ClientHello (client random, SNI,
offered ALPN, versions and cipher suites, early data), the ServerHello (selected
cipher suite and version, HelloRetryRequest) and EncryptedExtensions (selected ALPN).
:class:`HandshakeReader` turns the in-order bytes of one CRYPTO stream into complete
handshake messages, holding at most ``max_message_bytes`` of an unfinished one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from reassembly.quic.buffer import Cursor, NeedMore

__all__ = [
    "ClientHello",
    "EncryptedExtensions",
    "HandshakeReader",
    "HandshakeType",
    "ServerHello",
    "parse_client_hello",
    "parse_encrypted_extensions",
    "parse_server_hello",
]

# RFC 8446 §4.1.3: a ServerHello with this random is a HelloRetryRequest
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")

EXT_SERVER_NAME = 0  # RFC 6066 §3
EXT_ALPN = 16  # RFC 7301
EXT_PRE_SHARED_KEY = 41
EXT_EARLY_DATA = 42
EXT_SUPPORTED_VERSIONS = 43
EXT_QUIC_TRANSPORT_PARAMETERS = 0x39  # RFC 9001 §8.2 (drafts: 0xffa5)


class HandshakeType(IntEnum):
    CLIENT_HELLO = 1
    SERVER_HELLO = 2
    NEW_SESSION_TICKET = 4
    END_OF_EARLY_DATA = 5
    ENCRYPTED_EXTENSIONS = 8
    CERTIFICATE = 11
    CERTIFICATE_REQUEST = 13
    CERTIFICATE_VERIFY = 15
    FINISHED = 20
    KEY_UPDATE = 24


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
    """RFC 8446 §4.1.3 (also a HelloRetryRequest, told by its random)."""
    buf = Cursor(body)
    legacy_version = buf.pull_u16()
    random = buf.pull_bytes(32)
    buf.pull_opaque(1)  # legacy_session_id_echo
    suite = buf.pull_u16()
    buf.pull_u8()  # legacy_compression_method
    selected = None
    types = []
    for etype, ext in _extensions(buf):
        types.append(etype)
        if etype == EXT_SUPPORTED_VERSIONS:
            selected = ext.pull_u16()
    return ServerHello(legacy_version, random, suite, selected, random == HRR_RANDOM, tuple(types))


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
        out = []
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


def safe_parse(parse, body: bytes):
    """Run a parse function; (result, None) or (None, error text)."""
    try:
        return parse(body), None
    except NeedMore as exc:
        return None, f"truncated: {exc}"
    except ValueError as exc:
        return None, str(exc)

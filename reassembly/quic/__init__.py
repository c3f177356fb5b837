"""QUIC (RFC 9000/9001/9369) as a transport layer of ``reassembly``.

``QuicLayer`` (``layer.py``) takes UDP datagrams and emits ``QuicPacket``,
``QuicHandshake``, ``QuicStreamEnd`` and QUIC ``StreamData``/``StreamGap`` events.
Modules: ``buffer`` (bounds-checked cursor), ``packet`` (headers), ``crypto`` (keys,
header protection, AEAD via ``cryptography``), ``keylog`` (SSLKEYLOGFILE), ``frames``,
``tls`` (ClientHello/ServerHello/EncryptedExtensions), ``connection`` (per-connection
state), ``layer`` (datagrams to events).
"""

from reassembly.quic.frames import stream_kind
from reassembly.quic.keylog import KeyLog
from reassembly.quic.layer import (
    TLS_KEY_LOG_SECRETS,
    QuicLayer,
    add_capture_secrets,
    read_quic_events,
)

__all__ = [
    "TLS_KEY_LOG_SECRETS",
    "KeyLog",
    "QuicLayer",
    "add_capture_secrets",
    "read_quic_events",
    "stream_kind",
]

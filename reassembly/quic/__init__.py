"""QUIC (RFC 9000/9001/9369) as a transport layer of ``reassembly``.

``QuicLayer`` (``layer.py``) takes UDP datagrams and emits ``QuicPacket``,
``QuicHandshake``, ``QuicStreamEnd`` and QUIC ``StreamData``/``StreamGap`` events.
Modules: ``buffer`` (bounds-checked cursor), ``versions`` (what each QUIC version
changes), ``packet`` (headers), ``crypto`` (keys, header protection, AEAD via
``cryptography``), ``keylog`` (SSLKEYLOGFILE), ``frames``, ``tls``
(ClientHello/ServerHello/EncryptedExtensions), ``connection`` (per-connection state),
``layer`` (datagrams to events).

The names below load with their module on first use (``reassembly.lazy``): importing
``reassembly.quic.keylog`` or ``reassembly.quic.buffer`` (as TLS over TCP does) does
not import the QUIC layer, and the layer imports its connections (and ``cryptography``)
only when a capture has QUIC.
"""

from typing import TYPE_CHECKING

from reassembly.lazy import lazy_names

if TYPE_CHECKING:  # the lazy names below, for type checkers
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

__getattr__ = lazy_names(__name__, {
    "stream_kind": "reassembly.quic.frames",
    "KeyLog": "reassembly.quic.keylog",
    **dict.fromkeys(("TLS_KEY_LOG_SECRETS", "QuicLayer", "add_capture_secrets",
                     "read_quic_events"), "reassembly.quic.layer"),
})

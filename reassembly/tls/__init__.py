"""TLS over TCP as a layer of ``reassembly`` (TLS 1.2 and 1.3 record decryption).

``TlsLayer`` (``layer.py``) sits on the TCP stream events: flows that carry TLS
(from their first byte, or after a plaintext STARTTLS-style exchange such as NATS's
INFO) have their records decrypted with keys from the NSS key log, and the decrypted
application data goes on as ordinary ``StreamData``/``StreamGap``; each TLS connection
is summed up in one ``TlsConnection`` event.  ``records`` holds the record layer
(cipher suites, TLS 1.2 PRF, record protection); the key schedule, key log and
handshake parsers are shared with QUIC (``reassembly.tlscommon``, ``reassembly.quic.keylog``).
"""

from reassembly.tls.layer import TlsLayer

__all__ = ["TlsLayer"]

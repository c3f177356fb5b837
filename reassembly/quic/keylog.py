"""NSS key log files (SSLKEYLOGFILE), as Wireshark reads them.

Each line is ``LABEL <client random, 64 hex> <secret, hex>``; ``#`` starts a comment.
TLS 1.2 writes ``CLIENT_RANDOM <client random> <master secret>``; TLS 1.3 (and so
QUIC) writes CLIENT_EARLY_TRAFFIC_SECRET, CLIENT/SERVER_HANDSHAKE_
TRAFFIC_SECRET, CLIENT/SERVER_TRAFFIC_SECRET_0 and EXPORTER_SECRET per connection,
keyed by the ClientHello's random.  Lines can arrive in pieces (pcapng Decryption
Secrets Blocks appear mid-capture), so :meth:`KeyLog.add` accepts any amount of text
and remembers an unfinished last line until the rest comes.
"""

from __future__ import annotations

import hashlib
import os
import re

__all__ = ["MAX_CLIENT_RANDOMS", "KeyLog", "Labels"]

# Connections (client randoms) remembered.  A key log comes from the user or from the
# capture file itself (DSB), which may be hostile, so it is bounded like everything
# else; lines past the limit are counted in ``dropped``.
MAX_CLIENT_RANDOMS = 1_000_000
# Longest line kept while waiting for its end (a real line is < 300 bytes).
MAX_LINE_BYTES = 4096

_LABEL = re.compile(r"[A-Z0-9_]{1,64}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_RANDOM = re.compile(r"[0-9a-fA-F]{64}")


def redacted_line(line: str) -> str:
    """A key-log line fit for a report: the label and the client random (public: it is
    in the ClientHello) are kept, every other token becomes ``<redacted len=N
    sha256=HEX>``, so a malformed line never puts a secret into the output."""
    out = []
    for i, tok in enumerate(line.split()):
        label = i == 0 and _LABEL.fullmatch(tok) and not _HEX.fullmatch(tok)
        if label or (i == 1 and _RANDOM.fullmatch(tok)):
            out.append(tok)
        else:
            raw = tok.encode("utf-8", "surrogateescape")
            out.append(f"<redacted len={len(raw)} sha256={hashlib.sha256(raw).hexdigest()}>")
    return " ".join(out)


class Labels:
    CLIENT_EARLY = "CLIENT_EARLY_TRAFFIC_SECRET"
    CLIENT_HANDSHAKE = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
    SERVER_HANDSHAKE = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
    CLIENT_TRAFFIC_0 = "CLIENT_TRAFFIC_SECRET_0"
    SERVER_TRAFFIC_0 = "SERVER_TRAFFIC_SECRET_0"
    # TLS 1.2 and earlier (TLS over TCP): the 48-byte master secret
    CLIENT_RANDOM = "CLIENT_RANDOM"


class KeyLog:
    """Secrets by client random and label."""

    __slots__ = ("_secrets", "_partial", "lines", "bad_lines", "dropped", "first_bad")

    def __init__(self) -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self._partial = ""
        self.lines = 0  # secret lines accepted
        self.bad_lines = 0  # lines that are not comments and do not parse
        self.dropped = 0  # lines refused because of MAX_CLIENT_RANDOMS
        self.first_bad: str | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyLog:
        log = cls()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                log.add(chunk)
        log.add("\n")  # a last line without its newline
        return log

    def __len__(self) -> int:
        return len(self._secrets)

    def __contains__(self, client_random: bytes) -> bool:
        return client_random in self._secrets

    def get(self, client_random: bytes, label: str) -> bytes | None:
        entry = self._secrets.get(client_random)
        return None if entry is None else entry.get(label)

    def client_randoms(self) -> list[bytes]:
        return list(self._secrets)

    def add(self, data: str | bytes, complete: bool = False) -> int:
        """Add key-log text; returns the number of secret lines accepted.

        ``complete`` says the text ends at a line end even without a newline (one whole
        Decryption Secrets Block)."""
        if isinstance(data, bytes | bytearray | memoryview):
            text = bytes(data).decode("ascii", "replace")
        else:
            text = data
        text = self._partial + text
        lines = text.split("\n")
        self._partial = "" if complete else lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._note_bad(self._partial[:80])
            self._partial = ""
        added = 0
        for line in lines:
            added += self._line(line)
        return added

    def _note_bad(self, line: str) -> None:
        self.bad_lines += 1
        if self.first_bad is None:
            self.first_bad = redacted_line(line[:MAX_LINE_BYTES])[:400]

    def _line(self, line: str) -> int:
        line = line.strip()
        if not line or line.startswith("#"):
            return 0
        parts = line.split()
        if len(parts) != 3:
            self._note_bad(line)
            return 0
        label, rnd, secret = parts
        try:
            rnd_b = bytes.fromhex(rnd)
            secret_b = bytes.fromhex(secret)
        except ValueError:
            self._note_bad(line)
            return 0
        if len(rnd_b) != 32 or not secret_b:
            self._note_bad(line)
            return 0
        entry = self._secrets.get(rnd_b)
        if entry is None:
            if len(self._secrets) >= MAX_CLIENT_RANDOMS:
                self.dropped += 1
                return 0
            entry = self._secrets[rnd_b] = {}
        entry[label] = secret_b
        self.lines += 1
        return 1

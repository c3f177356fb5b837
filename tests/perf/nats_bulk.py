"""A generated NATS capture where one connection sends several segments in a row.

What the native engine's adjacent coalescing joins (``reassembly.native``): publishers
send bursts of 1..``burst`` full segments of ``PUB`` operations (payloads of random
sizes, so operations straddle segments), the server acknowledges after each burst and
sends the subscribers their ``MSG``s in bursts too.  Handshakes, an ``INFO``/``CONNECT``
exchange, and FINs at the end, so every flow is a whole one.  Deterministic for a seed.

Also a command, for measuring ``msgcap dissect`` on a large one::

    python -m tests.perf.nats_bulk OUT.pcap --megabytes 100
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tests.reassembly.synth import PcapWriter, tcp_frame

SERVER = bytes([10, 0, 0, 2])
PORT = 4222
MSS = 1448
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
T0_US = 1_700_000_000_000_000


class _Conn:
    """One client connection: its sequence numbers and its unsent bytes per side."""

    def __init__(self, n: int) -> None:
        self.client = bytes([10, 0, 1, n + 1])
        self.port = 40000 + n
        self.seq = [1000 + n * 7919, 5000 + n * 104729]  # next sequence number per side
        self.pending = [bytearray(), bytearray()]


class BulkWriter:
    """Writes the capture (``write``): ``publishers`` and ``subscribers`` connections."""

    def __init__(self, path: Path, publishers: int = 4, subscribers: int = 2,
                 burst: int = 12, seed: int = 0, max_payload: int = 4000) -> None:
        self.w = PcapWriter(path)
        self.rng = random.Random(seed)
        self.pubs = [_Conn(i) for i in range(publishers)]
        self.subs = [_Conn(publishers + i) for i in range(subscribers)]
        self.burst = burst
        self.max_payload = max_payload
        self.t = T0_US
        self.messages = 0

    def _frame(self, conn: _Conn, side: int, flags: int, data: bytes = b"") -> None:
        self.t += 37
        seq, peer = conn.seq[side], conn.seq[1 - side]
        if side == 0:
            frame = tcp_frame(conn.client, SERVER, conn.port, PORT, seq, peer, flags, data)
        else:
            frame = tcp_frame(SERVER, conn.client, PORT, conn.port, seq, peer, flags, data)
        self.w.write(self.t, frame)
        conn.seq[side] = seq + len(data) + (1 if flags & (SYN | FIN) else 0)

    def _open(self, conn: _Conn) -> None:
        conn.seq[0] -= 1  # the SYN takes one: the first data byte is at ISN + 1
        conn.seq[1] -= 1
        self._frame(conn, 0, SYN)
        self._frame(conn, 1, SYN | ACK)
        self._frame(conn, 0, ACK)
        self._send(conn, 1, b'INFO {"server_id":"S","version":"2.10.0","max_payload":1048576}'
                   b"\r\n", 1)
        self._send(conn, 0, b'CONNECT {"verbose":false,"pedantic":false}\r\n', 1)

    def _send(self, conn: _Conn, side: int, data: bytes, segments: int) -> None:
        """Queue ``data`` and send up to ``segments`` full segments (then an ACK back)."""
        buf = conn.pending[side]
        buf += data
        sent = 0
        while buf and sent < segments:
            piece = bytes(buf[:MSS])
            del buf[:MSS]
            self._frame(conn, side, ACK | PSH, piece)
            sent += 1
        if sent:
            self._frame(conn, 1 - side, ACK)

    def _ops(self, n: int, subject: bytes, msg: bool) -> bytes:
        out = bytearray()
        for _ in range(n):
            payload = self.rng.randbytes(self.rng.randrange(0, self.max_payload))
            self.messages += 1
            if msg:
                out += b"MSG %s 1 %d\r\n" % (subject, len(payload))
            else:
                out += b"PUB %s %d\r\n" % (subject, len(payload))
            out += payload + b"\r\n"
        return bytes(out)

    def write(self, nbytes: int) -> None:
        """About ``nbytes`` of NATS traffic, then every connection closes."""
        for conn in self.pubs + self.subs:
            self._open(conn)
        for i, conn in enumerate(self.subs):
            self._send(conn, 0, b"SUB bulk.%d %d\r\n" % (i, 1), 1)
        written = 0
        rng = self.rng
        while written < nbytes:
            conn = rng.choice(self.pubs + self.subs)
            side = 0 if conn in self.pubs else 1
            segments = rng.randrange(1, self.burst + 1)
            if len(conn.pending[side]) < segments * MSS:
                data = self._ops(rng.randrange(1, 3 * segments + 2), b"bulk.%d" % (
                    conn.port % 2), msg=side == 1)
                written += len(data)
            else:
                data = b""
            self._send(conn, side, data, segments)
        for conn in self.pubs + self.subs:  # the rest, then FIN each way
            for side in (0, 1):
                while conn.pending[side]:
                    self._send(conn, side, b"", self.burst)
            self._frame(conn, 0, FIN | ACK)
            self._frame(conn, 1, FIN | ACK)
            self._frame(conn, 0, ACK)
        self.w.close()


def write_bulk(path: Path, nbytes: int, seed: int = 0, **options: int) -> int:
    """Write the capture; returns how many NATS messages it holds."""
    writer = BulkWriter(path, seed=seed, **options)
    writer.write(nbytes)
    return writer.messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--megabytes", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--burst", type=int, default=12)
    args = ap.parse_args()
    n = write_bulk(args.out, int(args.megabytes * 1e6), args.seed, burst=args.burst)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {n} messages")


if __name__ == "__main__":
    main()

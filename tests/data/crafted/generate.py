"""Writes the crafted regression captures of issue 18 (see README.md here).

Run from the repository root: ``python tests/data/crafted/generate.py [NAME ...]``.  Each
capture is small, made with scapy, and covers a case no public capture shows.  The TCP
cases are deterministic; the TLS one records a real handshake (OpenSSL through Python's
``ssl``), so regenerating it gives new keys and a new key log next to it.
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import wrpcap

HERE = Path(__file__).resolve().parent
CLIENT, SERVER = "10.18.0.1", "10.18.0.2"
T0 = 1_700_000_000.0


class Conn:
    """One TCP connection between CLIENT:cport and SERVER:sport; ``send`` appends a
    segment with absolute sequence numbers kept per side (``c``/``s``)."""

    def __init__(self, cport: int = 40018, sport: int = 4222, cisn: int = 1000,
                 sisn: int = 5000, window: int = 65535) -> None:
        self.ports = {"c": (cport, sport), "s": (sport, cport)}
        self.addrs = {"c": (CLIENT, SERVER), "s": (SERVER, CLIENT)}
        self.nxt = {"c": cisn, "s": sisn}
        self.window = window
        self.t = T0
        self.packets: list[Packet] = []

    def send(self, side: str, flags: str = "A", data: bytes = b"", seq: int | None = None,
             ack: int | None = None, gap_s: float = 0.001, advance: bool = True,
             window: int | None = None) -> None:
        other = "s" if side == "c" else "c"
        seq = self.nxt[side] if seq is None else seq
        ack = self.nxt[other] if ack is None else ack
        src, dst = self.addrs[side]
        sport, dport = self.ports[side]
        pkt = (Ether() / IP(src=src, dst=dst)
               / TCP(sport=sport, dport=dport, seq=seq % (1 << 32),
                     ack=ack % (1 << 32) if "A" in flags else 0, flags=flags,
                     window=self.window if window is None else window))
        if data:
            pkt = pkt / Raw(data)
        self.t += gap_s
        pkt.time = self.t
        self.packets.append(pkt)
        if advance:
            self.nxt[side] = seq + len(data) + ("S" in flags) + ("F" in flags)

    def handshake(self) -> None:
        self.send("c", "S")
        self.send("s", "SA")
        self.send("c", "A")

    def close(self) -> None:
        self.send("c", "FA")
        self.send("s", "FA")
        self.send("c", "A")


def tls13_hello_retry(out: Path) -> None:
    """A real TLS 1.3 handshake with a HelloRetryRequest (the server accepts only
    secp384r1, the client's first key share is X25519), NATS-like lines inside, written
    as one TCP connection to port 4443, and its key log."""
    tmp = Path(tempfile.mkdtemp())
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", tmp / "k.pem", "-out", tmp / "c.pem", "-days", "3650",
         "-subj", "/CN=nats.example"], check=True, capture_output=True)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    sctx.set_ecdh_curve("secp384r1")
    sctx.minimum_version = ssl.TLSVersion.TLSv1_3
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.check_hostname = False
    cctx.verify_mode = ssl.CERT_NONE
    keylog = out.with_suffix(".keys")
    keylog.unlink(missing_ok=True)
    cctx.keylog_filename = str(keylog)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = cctx.wrap_bio(c_in, c_out, server_hostname="nats.example")
    server = sctx.wrap_bio(s_in, s_out, server_side=True)
    conn = Conn(sport=4443)
    conn.handshake()

    def pump() -> None:
        for side, src, dst in (("c", c_out, s_in), ("s", s_out, c_in)):
            data = src.read()
            if data:
                dst.write(data)
                conn.send(side, "PA", data)

    for _ in range(8):
        for end in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        pump()
    assert client.version() == "TLSv1.3"
    client.write(b"PUB hrr.test 5\r\nhello\r\n")
    pump()
    server.read()
    server.write(b"+OK\r\n")
    pump()
    conn.close()
    wrpcap(str(out), conn.packets)


CAPTURES: dict[str, Callable[[Path], None]] = {
    "tls13-hello-retry.pcap": tls13_hello_retry,
}


def main(names: list[str]) -> None:
    for name in names or CAPTURES:
        CAPTURES[name](HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main(sys.argv[1:])

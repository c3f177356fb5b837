"""Writes the crafted regression captures of issue 18 (see README.md here).

Run from the repository root: ``python tests/data/crafted/generate.py [NAME ...]``.  Each
capture is small, made with scapy, and covers a case no public capture shows.  The TCP
cases are deterministic; the TLS one records a real handshake (OpenSSL through Python's
``ssl``), so regenerating it gives new keys and a new key log next to it.
"""

from __future__ import annotations

import contextlib
import ssl
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import PcapWriter, wrpcap

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


PUB1 = b"PUB a 5\r\nhello\r\n"
PUB2 = b"PUB b 5\r\nworld\r\n"
INFO = b'INFO {"server_id":"crafted"}\r\n'


def out_of_window(out: Path) -> None:
    """Bug 4: one 200-byte segment at ISN + 2^31 - 100, far outside the server's
    window, between two in-order PUBs the server acknowledges."""
    c = Conn()
    c.handshake()
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.send("c", "PA", b"X" * 200, seq=1000 + (1 << 31) - 100, advance=False)
    c.send("s", "A")
    c.send("c", "PA", PUB2)
    c.send("s", "A")
    c.close()
    wrpcap(str(out), c.packets)


def second_synack(out: Path) -> None:
    """Bug 5: the server answers the SYN twice with different ISNs (5000, then 3000);
    its data follows the first."""
    c = Conn()
    c.send("c", "S")
    c.send("s", "SA")
    c.send("s", "SA", seq=3000, advance=False)
    c.send("c", "A")
    c.send("s", "PA", INFO)
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.close()
    wrpcap(str(out), c.packets)


def second_synack_data_follows_it(out: Path) -> None:
    """Bug 5, other order: the data follows the second SYN-ACK's ISN (3000), below the
    first one's (5000)."""
    c = Conn()
    c.send("c", "S")
    c.send("s", "SA")
    c.send("s", "SA", seq=3000)
    c.send("c", "A")
    c.send("s", "PA", INFO)
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.close()
    wrpcap(str(out), c.packets)


def data_after_rst_fin(out: Path) -> None:
    """Bug 6: two connections.  In the first the client resets, then a PUB still comes
    from it; in the second the client sends FIN, then a PUB after the FIN's sequence
    number."""
    a = Conn(cport=40061)
    a.handshake()
    a.send("c", "PA", PUB1)
    a.send("s", "A")
    a.send("c", "R", advance=False)
    a.send("c", "PA", PUB2)
    b = Conn(cport=40062)
    b.t = a.t
    b.handshake()
    b.send("c", "PA", PUB1)
    b.send("s", "A")
    b.send("c", "FA")
    b.send("s", "A")
    b.send("c", "PA", PUB2)
    b.send("s", "FA")
    b.send("c", "A")
    wrpcap(str(out), sorted(a.packets + b.packets, key=lambda p: p.time))


def keepalive_zero_window(out: Path) -> None:
    """Bug 7: a Windows keepalive (1 byte 0x00 at snd.nxt - 1) after the client's PUB,
    then the server closes its window, the client sends a zero-window probe (the next
    byte), and the rest once the window opens again."""
    c = Conn()
    c.handshake()
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.send("c", "A", b"\x00", seq=c.nxt["c"] - 1, advance=False, gap_s=45.0)
    c.send("s", "A")
    c.send("s", "A", window=0)
    c.send("c", "A", PUB2[:1], advance=False)
    c.send("s", "A", window=0)
    c.send("s", "A")
    c.send("c", "PA", PUB2)
    c.send("s", "A")
    c.close()
    wrpcap(str(out), c.packets)


def idle_continuation(out: Path) -> None:
    """Bug 3: a connection idle for 400 s (more than the 300 s TCP idle timeout) whose
    sequence numbers then simply continue; the server ACKs only after the pause."""
    c = Conn()
    c.handshake()
    c.send("s", "PA", INFO)
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.send("c", "PA", PUB2, gap_s=400.0)
    c.send("s", "A")
    c.close()
    wrpcap(str(out), c.packets)


def _linktype_capture(out: Path, linktype: int, frame: Callable[[bytes], bytes]) -> None:
    """One NATS exchange written with another link type: ``frame`` wraps each IP
    packet of the Ethernet conversation in that link type's header."""
    c = Conn()
    c.handshake()
    c.send("s", "PA", INFO)
    c.send("c", "PA", PUB1)
    c.send("s", "A")
    c.close()
    writer = PcapWriter(str(out), linktype=linktype)
    for pkt in c.packets:
        raw = Raw(frame(bytes(pkt[IP])))
        raw.time = pkt.time
        writer.write(raw)
    writer.close()


def pktap(out: Path) -> None:
    """Bug 8: LINKTYPE_PKTAP (258), as macOS ``tcpdump -i any`` writes: a 108-byte
    little-endian header (length, type 1 = packet, inner DLT 1 = Ethernet, interface
    en0, process nats-server) before each Ethernet frame."""
    header = (struct.pack("<III", 108, 1, 1) + b"en0".ljust(24, b"\0")
              + struct.pack("<IIIIi", 0, 2, 14, 0, 4222) + b"nats-server".ljust(17, b"\0"))
    header = header.ljust(108, b"\0")
    _linktype_capture(out, 258, lambda ip: header + bytes(Ether(type=0x0800) / Raw(ip)))


def ipoib(out: Path) -> None:
    """Bug 8: LINKTYPE_IPOIB (242): a 40-byte block (a 20-byte destination address,
    zero-padded) then the RFC 4391 header (ethertype 0x0800, reserved) before IP."""
    _linktype_capture(out, 242, lambda ip: b"\x00" * 40 + struct.pack("!HH", 0x0800, 0) + ip)


CAPTURES: dict[str, Callable[[Path], None]] = {
    "tls13-hello-retry.pcap": tls13_hello_retry,
    "tcp-out-of-window.pcap": out_of_window,
    "tcp-second-synack.pcap": second_synack,
    "tcp-second-synack-data-follows-it.pcap": second_synack_data_follows_it,
    "tcp-data-after-rst-fin.pcap": data_after_rst_fin,
    "tcp-keepalive-zero-window.pcap": keepalive_zero_window,
    "tcp-idle-continuation.pcap": idle_continuation,
    "linktype-pktap.pcap": pktap,
    "linktype-ipoib.pcap": ipoib,
}


def main(names: list[str]) -> None:
    for name in names or CAPTURES:
        CAPTURES[name](HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A real QUIC stack (aioquic, client and server in one process) whose datagrams are
written to a pcap, with the client's TLS secrets log: ground truth for the QUIC layer.

The two ``aioquic`` connections exchange datagrams directly (no sockets); every
datagram is recorded with IPv4/UDP headers (LINKTYPE_RAW) as a capture would see it.
What each side sent on each stream is recorded on the sending side.
"""

from __future__ import annotations

import datetime
import io
import os
import ssl
import struct
from dataclasses import dataclass, field
from pathlib import Path

from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import StreamDataReceived
from aioquic.quic.packet import encode_quic_retry, pull_quic_header
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CLIENT_IP, SERVER_IP = "10.1.0.1", "10.1.0.2"
SERVER_PORT = 4433
T0 = 1_700_000_000.0


def _certificate():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "felix.example")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("felix.example")]), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


_CERT = _certificate()


@dataclass
class Exchange:
    records: list[tuple[float, tuple[str, int], tuple[str, int], bytes]] = field(
        default_factory=list
    )
    sent: dict[tuple[str, int], bytearray] = field(default_factory=dict)
    secrets: str = ""
    client_random: str = ""

    def write_pcap(self, path: Path, drop: set[int] = frozenset(),
                   swap: tuple[int, int] | None = None) -> None:
        """LINKTYPE_RAW pcap of the datagrams; ``drop`` leaves records out (capture
        loss), ``swap`` exchanges two records' places (capture reordering)."""
        recs = list(self.records)
        if swap:
            i, j = swap
            recs[i], recs[j] = (recs[j][0], *recs[i][1:]), (recs[i][0], *recs[j][1:])
        out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for n, (ts, src, dst, data) in enumerate(recs):
            if n in drop:
                continue
            udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(data), 0) + data
            ip = struct.pack(
                "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), n & 0xFFFF, 0, 64, 17, 0,
                bytes(map(int, src[0].split("."))), bytes(map(int, dst[0].split("."))),
            )
            csum = sum(struct.unpack("!10H", ip))
            csum = (csum & 0xFFFF) + (csum >> 16)
            csum = ~((csum & 0xFFFF) + (csum >> 16)) & 0xFFFF
            ip = ip[:10] + struct.pack("!H", csum) + ip[12:]
            pkt = ip + udp
            sec = int(ts)
            out += struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(pkt), len(pkt)) + pkt
        path.write_bytes(bytes(out))


class Conversation:
    """Drive an aioquic client and server to exchange ``streams`` of data."""

    def __init__(self, *, cipher_suites=None, versions=None, alpn="felix", retry=False,
                 tickets: dict | None = None, early_data: bytes | None = None,
                 client_port: int = 50123, start: float = T0) -> None:
        self.log = io.StringIO()
        self.tickets = tickets if tickets is not None else {}  # server's ticket store
        self.client_tickets: list = []
        cc = QuicConfiguration(is_client=True, alpn_protocols=[alpn],
                               server_name="felix.example", verify_mode=ssl.CERT_NONE,
                               secrets_log_file=self.log, max_stream_data=4 << 20,
                               max_data=16 << 20)
        sc = QuicConfiguration(is_client=False, alpn_protocols=[alpn],
                               max_stream_data=4 << 20, max_data=16 << 20)
        sc.certificate, sc.private_key = _CERT
        if cipher_suites:
            cc.cipher_suites = sc.cipher_suites = cipher_suites
        if versions:
            cc.supported_versions = sc.supported_versions = versions
        if self.tickets.get("client"):
            cc.session_ticket = self.tickets["client"]
        self.server_conf = sc
        self.client = QuicConnection(configuration=cc,
                                     session_ticket_handler=self.client_tickets.append)
        self.server: QuicConnection | None = None
        self.retry = retry
        self.retry_scid: bytes | None = None
        self.odcid: bytes | None = None
        self.client_addr = (CLIENT_IP, client_port)
        self.server_addr = (SERVER_IP, SERVER_PORT)
        self.now = start
        self.ex = Exchange()
        self.received: dict[int, bytearray] = {}
        self.client.connect(self.server_addr, now=self.now)
        if early_data is not None:  # sent before the handshake: 0-RTT
            self.send("client", 0, early_data)
        self.pump()

    def _new_server(self, data: bytes) -> bool:
        """Create the server on the client's first Initial; False when that Initial was
        answered with a Retry instead (RFC 9000 §8.1.2)."""
        hdr = pull_quic_header(Buffer(data=data), host_cid_length=8)
        if self.retry and self.retry_scid is None:
            self.retry_scid = os.urandom(8)
            self.odcid = hdr.destination_cid
            pkt = encode_quic_retry(hdr.version, self.retry_scid, hdr.source_cid,
                                    hdr.destination_cid, b"retry-token")
            self.ex.records.append((self.now, self.server_addr, self.client_addr, pkt))
            self.client.receive_datagram(pkt, self.server_addr, now=self.now)
            return False
        tickets = self.tickets
        self.server = QuicConnection(
            configuration=self.server_conf,
            original_destination_connection_id=self.odcid or hdr.destination_cid,
            retry_source_connection_id=self.retry_scid,
            session_ticket_fetcher=lambda t: tickets.pop(t, None),
            session_ticket_handler=lambda t: tickets.__setitem__(t.ticket, t),
        )
        return True

    def _deliver(self, conn: QuicConnection, from_client: bool) -> bool:
        moved = False
        for data, addr in conn.datagrams_to_send(now=self.now):
            moved = True
            if from_client:
                self.ex.records.append((self.now, self.client_addr, self.server_addr, data))
                if self.server is None and not self._new_server(data):
                    continue
                self.server.receive_datagram(data, self.client_addr, now=self.now)
            else:
                self.ex.records.append((self.now, self.server_addr, addr, data))
                self.client.receive_datagram(data, self.server_addr, now=self.now)
            self.now += 0.0001
        return moved

    def _server_events(self) -> None:
        if self.server is None:
            return
        while (ev := self.server.next_event()) is not None:
            if isinstance(ev, StreamDataReceived):
                buf = self.received.setdefault(ev.stream_id, bytearray())
                buf += ev.data
                if ev.end_stream:  # answer with the data reversed: on the same stream,
                    sid = ev.stream_id  # or on a stream of its own for a one-way one
                    if sid & 0x02:
                        sid = self.server.get_next_available_stream_id(is_unidirectional=True)
                    self.send("server", sid, bytes(buf[::-1]), end=True)
        while self.client.next_event() is not None:
            pass

    def pump(self, rounds: int = 200_000) -> None:
        for _ in range(rounds):
            moved = self._deliver(self.client, True)
            if self.server is not None:
                moved |= self._deliver(self.server, False)
            self._server_events()
            if moved:
                continue
            timers = [(t, c) for c in (self.client, self.server)
                      if c is not None and (t := c.get_timer()) is not None]
            if not timers:
                return
            t, conn = min(timers, key=lambda tc: tc[0])
            if t > self.now + 1.0:
                return  # only idle timeouts left
            self.now = max(self.now, t)
            conn.handle_timer(now=self.now)

    def send(self, side: str, sid: int, data: bytes, end: bool = True) -> None:
        conn = self.client if side == "client" else self.server
        conn.send_stream_data(sid, data, end_stream=end)
        self.ex.sent.setdefault((side, sid), bytearray()).extend(data)

    def open_stream(self, data: bytes, uni: bool = False) -> int:
        sid = self.client.get_next_available_stream_id(is_unidirectional=uni)
        self.send("client", sid, data)
        self.pump()
        return sid

    def migrate(self, port: int) -> None:
        """The client moves to another source port (NAT rebinding + new CID)."""
        self.client.change_connection_id()
        self.client_addr = (CLIENT_IP, port)

    def finish(self) -> Exchange:
        self.client.close(error_code=0, reason_phrase="bye")
        self.pump()
        self.ex.secrets = self.log.getvalue()
        self.ex.client_random = self.ex.secrets.split()[1]
        if self.client_tickets:  # for a resumed connection with 0-RTT
            self.tickets["client"] = self.client_tickets[-1]
        return self.ex

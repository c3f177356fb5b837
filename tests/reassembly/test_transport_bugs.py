"""Regression tests for issue 18 (evidence-grade transport), one per numbered bug.

Each test names the bug it pins.  Third-party captures come from ``tests/data/captures``;
cases no public capture shows were crafted with scapy by ``tests/data/crafted/generate.py``
(see the README there)."""

from __future__ import annotations

import struct

from reassembly.events import (
    Anomaly,
    Direction,
    Endpoint,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    TlsConnection,
    Transport,
)
from reassembly.flows import ACK, SYN, FlowTable
from reassembly.limits import SECOND_NS, Limits
from reassembly.link import NON_IP, SHORT, UNKNOWN, decode_link
from reassembly.tcp import TcpHalfStream
from tests.conftest import SHARED
from tests.reassembly.streams import reassemble
from tests.tls.helpers import events as tls_events

CAPTURES = SHARED / "captures"
CRAFTED = SHARED / "crafted"
PUB1 = b"PUB a 5\r\nhello\r\n"
PUB2 = b"PUB b 5\r\nworld\r\n"
INFO = b'INFO {"server_id":"crafted"}\r\n'


def _kinds(r) -> list[str]:
    return [a.kind for a in r.anomalies]


def test_bug1_truncated_segment_does_not_discard_a_later_retransmission():
    """zeek/tcp/reassembly.pcap: frames 39 and 85 are cut by the snaplen.  The cut proves
    those bytes were sent, not that the holes below them will never fill: the
    retransmission of 1,440 bytes that follows must be placed (tshark: 28,832 bytes)."""
    r = reassemble(CAPTURES / "zeek/tcp/reassembly.pcap")
    (flow,) = r.flows
    assert flow.stream_bytes[0] == 28_832
    assert flow.gap_bytes[0] == 4_376
    stream = r.stream("63.193.213.194:2564", "128.3.97.175:80")
    assert stream.count(b"bytes missing]") == 9
    assert b"[1448 bytes missing]" in stream  # the hole nothing ever filled
    assert stream.count(b"[8 bytes missing]") == 2


def test_bug2_tls13_hello_retry_request_is_decrypted():
    """A real OpenSSL TLS 1.3 handshake with a HelloRetryRequest: the server's (and the
    client's) compatibility ChangeCipherSpec after the HRR is not a TLS 1.2 one, so the
    real ServerHello is read and the session decrypts with its key log."""
    pcap = CRAFTED / "tls13-hello-retry.pcap"
    evs = tls_events(pcap, pcap.with_suffix(".keys").read_text())
    (tls,) = [e for e in evs if isinstance(e, TlsConnection)]
    assert (tls.hello_retry, tls.tls_version, tls.cipher_suite) == (True, 0x0304, 0x1302)
    assert (tls.decrypted, tls.undecrypted_reason, tls.app_bytes) == (True, None, (23, 5))
    data = b"".join(e.data for e in evs if isinstance(e, StreamData) and e.direction == 0)
    assert data == b"PUB hrr.test 5\r\nhello\r\n"
    assert not [e for e in evs if isinstance(e, Anomaly)]


def _crafted(name: str):
    return reassemble(CRAFTED / name)


def test_bug4_one_out_of_window_segment_does_not_move_the_stream():
    """A 200-byte segment at ISN + 2^31 - 100, far beyond the window the server
    advertised and never acknowledged, is set aside with its bytes; the PUBs around it
    stay contiguous (the old code reported 4,294,967,096 gap bytes)."""
    r = _crafted("tcp-out-of-window.pcap")
    (flow,) = r.flows
    assert r.stream("10.18.0.1:40018", "10.18.0.2:4222") == PUB1 + PUB2
    assert (flow.stream_bytes[0], flow.gap_bytes[0]) == (32, 0)
    (oow,) = [a for a in r.anomalies if a.kind == "tcp.out_of_window"]
    assert (oow.offset, oow.nbytes, oow.frame) == ((1 << 31) - 101, 200, 6)
    assert oow.detail.endswith("58" * 200)  # the bytes themselves, in hex


def test_bug4_data_beyond_the_window_that_a_later_ack_covers_is_placed():
    """zeek/ftp/bigtransfer.pcap captured one segment every few hundred MB: each lies
    far beyond the last window seen, and the receiver's next ACK vindicates it."""
    r = reassemble(CAPTURES / "zeek/ftp/bigtransfer.pcap")
    assert "tcp.out_of_window" not in _kinds(r)
    flow = next(f for f in r.flows if f.client.port == 59764)
    assert (flow.stream_bytes[1], flow.gap_bytes[1]) == (23_822, 5_416_642_848)


def test_bug5_second_synack_with_another_isn_keeps_the_server_data():
    """The server answers twice with ISNs 5000 then 3000.  Whichever its data follows,
    the data is kept and the conflicting SYN-ACK is reported (the old code dropped all
    30 bytes as tcp.data_before_start when the data followed the second)."""
    for name, rebased in (("tcp-second-synack.pcap", False),
                          ("tcp-second-synack-data-follows-it.pcap", True)):
        r = _crafted(name)
        (flow,) = r.flows
        assert r.stream("10.18.0.1:40018", "10.18.0.2:4222", "s2c") == INFO, name
        assert r.stream("10.18.0.1:40018", "10.18.0.2:4222", "c2s") == PUB1, name
        assert (flow.gap_bytes, flow.stream_bytes) == ([0, 0], [16, 30]), name
        conflicts = [a for a in r.anomalies if a.kind == "tcp.isn_conflict"]
        assert len(conflicts) == 1 + rebased, name
        assert "ISN 3000 conflicts with the first handshake's ISN 5000" in conflicts[0].detail
        assert conflicts[0].frame == 3 and int(conflicts[0].direction) == 1
        assert "tcp.data_before_start" not in _kinds(r)


def test_bug6_data_after_rst_and_after_fin_is_decoded_but_flagged():
    """A PUB after the client's RST, and a PUB after the client's FIN: both delivered
    (a FIN consumes a sequence number, not a byte: no 1-byte gap), each flagged once."""
    r = _crafted("tcp-data-after-rst-fin.pcap")
    for port in (40061, 40062):
        assert r.stream(f"10.18.0.1:{port}", "10.18.0.2:4222") == PUB1 + PUB2
    assert [f.gap_bytes for f in r.flows] == [[0, 0], [0, 0]]
    (rst,) = [a for a in r.anomalies if a.kind == "tcp.data_after_rst"]
    (fin,) = [a for a in r.anomalies if a.kind == "tcp.data_after_fin"]
    assert (rst.flow.client.port, rst.nbytes, rst.frame) == (40061, 16, 7)
    assert (fin.flow.client.port, fin.offset, fin.nbytes) == (40062, 16, 16)


def test_bug7_keepalive_and_zero_window_probe_are_not_conflicts():
    """A Windows keepalive (1 byte 0x00 at snd.nxt - 1, 45 s after the last data) and a
    zero-window probe (the next byte, while the window is 0) in a clean capture: no
    tcp.overlap_conflict, no anomaly at all, the stream intact."""
    r = _crafted("tcp-keepalive-zero-window.pcap")
    (flow,) = r.flows
    assert r.stream("10.18.0.1:40018", "10.18.0.2:4222") == PUB1 + PUB2
    assert (flow.overlap_conflicts, flow.gap_bytes) == ([0, 0], [0, 0])
    assert r.anomalies == []


def test_bug7_a_real_one_byte_conflict_elsewhere_is_still_reported():
    """Only the byte just before snd.nxt is read as a keepalive: a 1-byte retransmission
    with different content further back is still a conflict."""
    events: list = []
    half = TcpHalfStream(
        FlowInfo(0, Transport.TCP, Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2),
                 RoleSource.SYN, 0, 0, 0, 0),
        Direction.C2S, Limits(), events.append)
    half.set_isn(99)
    half.on_segment(100, b"abcdef", 1, 1)
    half.on_segment(105, b"\x00", 2, 2)  # keepalive
    half.on_segment(102, b"X", 3, 3)  # differs from "c": conflict
    kinds = [(e.kind, e.offset) for e in events if isinstance(e, Anomaly)]
    assert kinds == [("tcp.overlap_conflict", 2)]


def test_bug3_idle_connection_whose_sequence_continues_is_one_flow():
    """400 s of silence (past the 300 s idle timeout), then the client's next PUB
    continues its sequence numbers: one flow, contiguous, no gap (the old code split
    it in two)."""
    r = _crafted("tcp-idle-continuation.pcap")
    (flow,) = r.flows
    assert flow.close_reason == "closed"
    assert r.stream("10.18.0.1:40018", "10.18.0.2:4222") == PUB1 + PUB2
    assert r.stream("10.18.0.1:40018", "10.18.0.2:4222", "s2c") == INFO
    assert (flow.gap_bytes, flow.packets) == ([0, 0], [6, 5])


def test_bug3_a_new_connection_on_the_same_tuple_after_idle_is_a_new_flow():
    """After the pause, a segment far from where either side left off (a new
    connection picked up mid-stream) closes the sleeping flow and opens another."""
    ft_events: list = []
    table = FlowTable(Limits(), ft_events.append)
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])

    def seg(seq: int, ack: int, flags: int, data: bytes = b"") -> bytes:
        return struct.pack("!HHIIBBHHH", 40000, 4222, seq, ack, 5 << 4, flags, 65535, 0, 0) + data

    table.tcp(c, s, seg(100, 0, SYN), 0, 1)
    table.tcp(c, s, seg(101, 0, ACK, b"hello"), 1, 2)
    table.tcp(c, s, seg(106, 0, ACK, b"again"), 400 * SECOND_NS, 3)  # continues
    table.tcp(c, s, seg(900_000_000, 0, ACK, b"other"), 800 * SECOND_NS, 4)  # does not
    table.close_all()
    closes = [(e.flow.flow_id, e.reason) for e in ft_events if isinstance(e, StreamClose)]
    assert closes == [(0, "idle-timeout"), (1, "end-of-capture")]
    data = [(e.flow.flow_id, e.data) for e in ft_events if isinstance(e, StreamData)]
    assert data == [(0, b"hello"), (0, b"again"), (1, b"other")]


def test_bug8_pktap_and_ipoib_link_types_are_read():
    """macOS PKTAP (258, Ethernet inside) and IP over InfiniBand (242): the old code
    skipped every frame as link.unknown_type; tshark finds the conversation."""
    for name in ("linktype-pktap.pcap", "linktype-ipoib.pcap"):
        r = _crafted(name)
        (flow,) = r.flows
        assert r.stream("10.18.0.1:40018", "10.18.0.2:4222") == PUB1, name
        assert r.stream("10.18.0.1:40018", "10.18.0.2:4222", "s2c") == INFO, name
        assert flow.packets == [5, 4] and r.anomalies == [], name


LINKTYPE_IPOIB, LINKTYPE_PKTAP = 242, 258


def test_bug8_pktap_header_longer_than_the_frame_is_short_not_a_crash():
    assert decode_link(LINKTYPE_PKTAP, struct.pack("<III", 200, 1, 1) + bytes(40))[0] == SHORT
    assert decode_link(LINKTYPE_PKTAP, struct.pack("<III", 12, 2, 1))[0] == NON_IP
    assert decode_link(LINKTYPE_PKTAP, struct.pack("<III", 12, 1, 258) + bytes(20))[0] == UNKNOWN
    assert decode_link(LINKTYPE_IPOIB, bytes(43))[0] == SHORT


def test_bug9_captured_but_unusable_bytes_do_not_read_as_not_captured(tmp_path):
    """A WebSocket direction loses sync at a real 6-byte capture gap; the frames after
    it were captured but cannot be framed.  The tcp.gap rows must tell the two apart."""
    from dissectors.sdk.testing import Data, Gap
    from tests.tls.helpers import C, Dissected, S, flow_pcap
    from tests.websocket.test_websocket import cframe, request, response

    f1, f2 = cframe(b"PUB a 1\r\nx\r\n"), cframe(b"PUB a 1\r\ny\r\n")
    script = [Data(C, request()), Data(S, response()), Data(C, f1[:5]),
              Gap(C, len(f1) - 5 + 3), Data(C, f2[3:]), Data(C, cframe(b"PING\r\n"))]
    d = Dissected(flow_pcap(tmp_path, script, port=80), tmp_path / "out")
    gaps = sorted((r["offset"], r["detail"]) for r in d.rows("anomalies") if r["kind"] == "tcp.gap")
    assert [detail.split(" (")[0] for _, detail in gaps] == [
        f"{len(f1) - 5 + 3} bytes of the c2s stream were not captured",
        f"{len(f2) - 3} bytes of the c2s stream were captured but could not be used",
        f"{len(cframe(b'PING' + bytes([13, 10])))} bytes of the c2s stream were captured but "
        "could not be used",
    ]
    assert all("websocket-unreadable" in detail for _, detail in gaps[1:])
    (lost,) = [r["detail"] for r in d.rows("anomalies") if r["kind"] == "websocket.lost_sync"]
    assert "captured but cannot be read" in lost


def test_bug4_a_sender_whose_receiver_acks_were_not_captured_keeps_every_byte():
    """The receiver advertised 64 KiB once and the capture lost all its later ACKs: the
    sender's next megabyte, in order, is not out of window (only data far beyond both
    the window and what the sender was seen sending is)."""
    events: list = []
    half = TcpHalfStream(
        FlowInfo(0, Transport.TCP, Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2),
                 RoleSource.SYN, 0, 0, 0, 0),
        Direction.C2S, Limits(), events.append)
    half.set_isn(99)
    half.on_window(100, 65_535)
    for i in range(1000):
        half.on_segment(100 + i * 1000, bytes([i % 256]) * 1000, i, i)
    half.on_segment(100 + 3_000_000, b"far", 1001, 1001)
    half.finish(1002, 1002)
    assert sum(len(e.data) for e in events if isinstance(e, StreamData)) == 1_000_000
    (oow,) = [e for e in events if isinstance(e, Anomaly)]
    assert (oow.kind, oow.offset, oow.nbytes) == ("tcp.out_of_window", 3_000_000, 3)

"""Reassembly split by flow (``FlowSplit``, ``FlowTable(owns=...)``): a share that owns
the flows ``flow_id % N == k`` gets exactly the events a full run gives for those flows
(and every event tied to no flow), for N = 2 and 3, while the flow table still follows
every flow (ids, eviction, idle expiry, port reuse, closing) from every packet.

Events are compared whole (``FlowInfo`` by value, at the end of the run), in order:
share k's event list must be the full run's list with the other shares' flows taken
out.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reassembly.capture import open_capture
from reassembly.engine import FlowSplit, capture_events
from reassembly.events import (
    Anomaly,
    Direction,
    Endpoint,
    FlowEnd,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.limits import SECOND_NS, Limits
from reassembly.quic.keylog import KeyLog
from reassembly.tcp import TcpHalfStream, TcpHalfTracker
from tests.conftest import SHARED
from tests.reassembly.synth import ACK, PSH, SYN, PcapWriter, tcp_frame

FIN, RST = 0x01, 0x04
T0 = 1_700_000_000_000_000  # capture time, microseconds
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
CAPTURES = SHARED / "captures"
SMALL = Limits(
    max_flows=5,
    tcp_idle_timeout_ns=5 * SECOND_NS,
    udp_idle_timeout_ns=3 * SECOND_NS,
    closed_linger_ns=1 * SECOND_NS,
    max_buffered_bytes=300,
    max_buffered_segments=4,
    overlap_check_bytes=64,
)


# ------------------------------------------------------------------------- helpers


def _ipv4(proto: int, src: bytes, dst: bytes, l4: bytes) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, proto, 0, src, dst)
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + l4


def udp_frame(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    return _ipv4(17, src, dst, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)


def bad_tcp_frame(src: bytes, dst: bytes) -> bytes:
    """A TCP header cut to 12 bytes: ``tcp.bad_header``, an anomaly tied to no flow."""
    return _ipv4(6, src, dst, b"\x9c\x40\x10\x7e" + b"\x00" * 8)


def _events(path: Path, limits: Limits, owns=None, keylog: KeyLog | None = None):
    split = FlowSplit(owns) if owns is not None else None
    with open_capture(path) as reader:
        return list(capture_events(reader, limits, keylog, split)), split


def _flow_id(ev) -> int | None:
    flow = getattr(ev, "flow", None)
    return None if flow is None else flow.flow_id


def assert_split_exact(path: Path, limits: Limits = SMALL, keylog_path: Path | None = None,
                       cross_flow: bool = False) -> list:
    """Every share of N = 2 and 3 gets the full run's events of its flows, in order;
    returns the full run's events.  ``cross_flow``: the shares may report shared state
    (QUIC), and then only the flow table's part is compared (every flow id closed once)."""
    def keylog():
        return KeyLog.from_file(keylog_path) if keylog_path else None

    full, _ = _events(path, limits, keylog=keylog())
    for n in (2, 3):
        closed: list[int] = []
        for k in range(n):
            def owns(fid: int, k: int = k, n: int = n) -> bool:
                return fid % n == k

            light, split = _events(path, limits, owns, keylog())
            closed += [ev.flow.flow_id for ev in light if type(ev) in (StreamClose, FlowEnd)]
            if cross_flow:
                continue
            assert split.cross_flow() == []
            want = [ev for ev in full if _flow_id(ev) is None or owns(_flow_id(ev))]
            assert len(light) == len(want), (n, k)
            for i, (got, exp) in enumerate(zip(light, want, strict=True)):
                assert got == exp, (n, k, i)
            flows = {_flow_id(ev) for ev in full} - {None}
            if any(not owns(f) for f in flows):
                assert split.flows.counters["light_flows"] > 0
        want_closed = [ev.flow.flow_id for ev in full if type(ev) in (StreamClose, FlowEnd)]
        assert sorted(closed) == sorted(want_closed), n
    return full


def _reasons(events: list) -> Counter:
    return Counter(ev.reason for ev in events if type(ev) in (StreamClose, FlowEnd))


def _kinds(events: list) -> Counter:
    return Counter(ev.kind for ev in events if type(ev) is Anomaly)


C1, C2, C3, S = (bytes([10, 0, 0, i]) for i in (1, 2, 3, 9))


# ---------------------------------------------------------------- hand-built cases


def test_port_reuse_fin_rst_and_retransmitted_syn(tmp_path) -> None:
    path = tmp_path / "reuse.pcap"
    w = PcapWriter(path)
    t = T0
    # flow 0: handshake, data both ways, FIN both ways (closing), then a new SYN on the
    # same 4-tuple with another ISN: port reuse, flow 3
    w.write(t, tcp_frame(C1, S, 40000, 4222, 100, 0, SYN))
    w.write(t + 1, tcp_frame(C1, S, 40000, 4222, 100, 0, SYN))  # retransmitted SYN
    w.write(t + 2, tcp_frame(S, C1, 4222, 40000, 900, 101, SYN | ACK))
    # flow 1 interleaved: no handshake (mid-stream), then a bare SYN that repeats no
    # earlier one: a new connection (port reuse of an open flow)
    w.write(t + 3, tcp_frame(C2, S, 40001, 4222, 5000, 77, ACK | PSH, b"mid-stream"))
    w.write(t + 4, tcp_frame(C1, S, 40000, 4222, 101, 901, ACK | PSH, b"PUB a 1\r\nx\r\n"))
    w.write(t + 5, tcp_frame(S, C1, 4222, 40000, 901, 113, ACK | PSH, b"+OK\r\n"))
    w.write(t + 6, tcp_frame(C2, S, 40001, 4222, 7000, 0, SYN))
    # flow 2: RST, then a late segment inside the linger, then a SYN: port reuse
    w.write(t + 7, tcp_frame(C3, S, 40002, 80, 1, 0, SYN))
    w.write(t + 8, tcp_frame(C3, S, 40002, 80, 2, 0, ACK | PSH, b"GET / HTTP/1.1\r\n"))
    w.write(t + 9, tcp_frame(S, C3, 80, 40002, 0, 18, RST))
    w.write(t + 10, tcp_frame(C3, S, 40002, 80, 18, 0, ACK | PSH, b"late"))
    w.write(t + 11, tcp_frame(C1, S, 40000, 4222, 113, 906, FIN | ACK))
    w.write(t + 12, tcp_frame(S, C1, 4222, 40000, 906, 114, FIN | ACK))
    w.write(t + 13, tcp_frame(C1, S, 40000, 4222, 5555, 0, SYN))
    w.write(t + 14, tcp_frame(C3, S, 40002, 80, 9999, 0, SYN))
    w.write(t + 15, tcp_frame(C3, S, 40002, 80, 10000, 0, ACK | PSH, b"again"))
    w.write(t + 16, tcp_frame(C2, S, 40001, 4222, 7001, 0, ACK | PSH, b"after reuse"))
    w.close()
    full = assert_split_exact(path, Limits())
    assert _reasons(full)["port-reuse"] == 3
    ids = {ev.flow.flow_id for ev in full if type(ev) is StreamClose}
    assert ids == set(range(6))


def test_port_reuse_reads_the_sequence_base_however_it_was_set(tmp_path) -> None:
    """A bare SYN on a live flow is a new connection unless it repeats the SYN that set
    the direction's sequence base; that base may come from the peer's ACK, a FIN, data,
    or a SYN only while nothing was placed — a light flow must know it as well."""
    path = tmp_path / "bases.pcap"
    w = PcapWriter(path)
    t = T0
    # base from the peer's ACK (3000): a SYN at 4999 is new, one at 2999 would not be
    w.write(t, tcp_frame(S, C1, 4222, 41000, 1, 3000, ACK))
    w.write(t + 1, tcp_frame(C1, S, 41000, 4222, 4999, 0, SYN))
    w.write(t + 2, tcp_frame(S, C1, 4222, 41001, 1, 3000, ACK))
    w.write(t + 3, tcp_frame(C1, S, 41001, 4222, 2999, 0, SYN))
    # base from a FIN (7000)
    w.write(t + 4, tcp_frame(C2, S, 41002, 4222, 7000, 0, FIN | ACK))
    w.write(t + 5, tcp_frame(C2, S, 41003, 4222, 7000, 0, ACK))  # another flow, no FIN
    w.write(t + 6, tcp_frame(C2, S, 41003, 4222, 99, 0, SYN))  # base still None: same flow
    w.write(t + 7, tcp_frame(C3, S, 41004, 4222, 0, 0, SYN))  # flow 4: base 1
    w.write(t + 8, tcp_frame(C3, S, 41004, 4222, 0, 0, SYN))  # retransmission
    # base from data (5000); a later SYN-ACK the same way does not move it (data was
    # placed), so a SYN repeating the SYN-ACK's sequence number is a new connection
    w.write(t + 9, tcp_frame(C1, S, 41005, 4222, 5000, 0, ACK | PSH, b"mid"))
    w.write(t + 10, tcp_frame(C1, S, 41005, 4222, 8000, 0, SYN | ACK))
    w.write(t + 11, tcp_frame(C1, S, 41005, 4222, 8000, 0, SYN))
    # a SYN-ACK first fixes the base; data then does not move it
    w.write(t + 12, tcp_frame(C2, S, 41006, 4222, 600, 0, SYN | ACK))
    w.write(t + 13, tcp_frame(C2, S, 41006, 4222, 601, 0, ACK | PSH, b"data"))
    w.write(t + 14, tcp_frame(C2, S, 41006, 4222, 600, 0, SYN))  # repeats: same flow
    w.write(t + 15, tcp_frame(C2, S, 41002, 4222, 100, 0, SYN))  # after the FIN: new
    for i in range(3):  # later flows: their ids tell whether every share saw the same
        w.write(t + 16 + i, tcp_frame(C3, S, 41007 + i, 4222, 0, 0, SYN))
        w.write(t + 20 + i, tcp_frame(C3, S, 41007 + i, 4222, 1, 0, ACK | PSH, b"%d" % i))
    w.close()
    full = assert_split_exact(path, Limits())
    reused = sorted(ev.flow.flow_id for ev in full
                    if type(ev) is StreamClose and ev.reason == "port-reuse")
    assert reused == [0, 3, 6]
    assert len({ev.flow.flow_id for ev in full if type(ev) is StreamClose}) == 13


def test_idle_expiry_tcp_and_udp_and_linger(tmp_path) -> None:
    path = tmp_path / "idle.pcap"
    w = PcapWriter(path)
    t = T0
    w.write(t, tcp_frame(C1, S, 40000, 4222, 1, 0, SYN))
    w.write(t + 10, udp_frame(C2, S, 5000, 53, b"query"))
    w.write(t + 20, tcp_frame(C2, S, 40001, 4222, 1, 0, SYN))
    w.write(t + 30, tcp_frame(C2, S, 40001, 4222, 2, 0, ACK | PSH, b"hello"))
    w.write(t + 40, tcp_frame(C2, S, 40001, 4222, 7, 0, RST))
    t += 2 * 1_000_000  # linger (1 s) over: flow 2 closed by the sweep
    w.write(t, udp_frame(C2, S, 5000, 53, b"query 2"))
    w.write(t + 1, tcp_frame(C3, S, 40002, 4222, 1, 0, SYN))
    t += 4 * 1_000_000  # udp idle (3 s) over for flow 1, by the packet of its own flow
    w.write(t, udp_frame(S, C2, 53, 5000, b"answer"))
    t += 3 * 1_000_000  # tcp idle (5 s) over for flows 0 and 3: both asleep
    # continues flow 0's sequence numbers: the same flow goes on (issue 18 bug 3)
    w.write(t, tcp_frame(C1, S, 40000, 4222, 2, 0, ACK | PSH, b"back"))
    w.write(t + 1, udp_frame(C1, S, 6000, 123, b"ntp"))
    w.close()
    full = assert_split_exact(path)
    closes = [(ev.flow.flow_id, ev.reason) for ev in full if type(ev) in (StreamClose, FlowEnd)]
    assert closes == [(2, "closed"), (1, "idle-timeout"), (0, "end-of-capture"),
                      (3, "idle-timeout"), (4, "end-of-capture"), (5, "end-of-capture")]


def test_syn_flood_past_max_flows(tmp_path) -> None:
    """More flows than the table holds: evictions of owned and foreign flows alike;
    the ``limit.flow_table`` anomaly names the victim, so only its owner emits it."""
    path = tmp_path / "flood.pcap"
    w = PcapWriter(path)
    t = T0
    w.write(t, tcp_frame(C1, S, 40000, 4222, 10, 0, SYN))
    w.write(t + 1, tcp_frame(C1, S, 40000, 4222, 11, 0, ACK | PSH, b"first"))
    for i in range(40):
        src = bytes([10, 1, i // 250, i % 250 + 1])
        w.write(t + 10 + 2 * i, tcp_frame(src, S, 1024 + i, 4222, i * 1000, 0, SYN))
        if i % 7 == 0:
            w.write(t + 11 + 2 * i, udp_frame(src, S, 2000 + i, 53, b"q%d" % i))
        if i % 5 == 0:  # the first flow stays active: the stalest others go first
            w.write(t + 11 + 2 * i, tcp_frame(C1, S, 40000, 4222, 16 + i, 0, ACK | PSH,
                                              b"x"))
    w.write(t + 200, bad_tcp_frame(C2, S))
    w.close()
    full = assert_split_exact(path)
    assert _reasons(full)["evicted"] > 30
    assert _kinds(full)["limit.flow_table"] == _reasons(full)["evicted"]
    assert _kinds(full)["tcp.bad_header"] == 1


def test_out_of_order_gaps_overlaps_and_reorder_limit(tmp_path) -> None:
    path = tmp_path / "ooo.pcap"
    w = PcapWriter(path)
    t = T0
    for port, src in ((40000, C1), (40001, C2), (40002, C3)):
        w.write(t, tcp_frame(src, S, port, 4222, 0, 0, SYN))
        t += 1
    for i in range(3):  # interleave the flows segment by segment
        for port, src in ((40000, C1), (40001, C2), (40002, C3)):
            base = 1 + 100 * (2 - i)  # reversed order: everything buffered at first
            w.write(t, tcp_frame(src, S, port, 4222, base, 0, ACK | PSH, bytes([65 + i]) * 100))
            t += 1
    # flow 0: retransmission with other bytes of delivered ones (overlap conflict),
    # then a hole that the peer acknowledges (acked-unseen gap)
    w.write(t, tcp_frame(C1, S, 40000, 4222, 271, 0, ACK | PSH, b"Z" * 20))
    w.write(t + 1, tcp_frame(C1, S, 40000, 4222, 501, 0, ACK | PSH, b"after hole"))
    w.write(t + 2, tcp_frame(S, C1, 4222, 40000, 1, 600, ACK))
    # flow 1: past the reorder limit (4 pieces / 300 bytes)
    for j in range(6):
        w.write(t + 3 + j, tcp_frame(C2, S, 40001, 4222, 1000 + 200 * j, 0, ACK | PSH,
                                     b"r" * 80))
    # flow 2: FIN past a missing tail
    w.write(t + 20, tcp_frame(C3, S, 40002, 4222, 900, 0, FIN | ACK))
    w.close()
    full = assert_split_exact(path)
    kinds = _kinds(full)
    assert kinds["tcp.overlap_conflict"] and kinds["limit.reorder_buffer"]
    gaps = Counter(ev.reason for ev in full if type(ev) is StreamGap)
    assert gaps["acked-unseen"] and gaps["reorder-limit"] and gaps["missing-tail"]


# ------------------------------------------------------------ random flow soups


def write_random_capture(path: Path, seed: int, packets: int = 500) -> None:
    """A few 4-tuples (so port reuse happens) with random handshakes, data in and out
    of order, retransmissions with other bytes, ACKs past holes, FIN, RST, UDP, bad
    headers and idle pauses, against ``SMALL`` limits (5 flows, seconds of idle)."""
    rng = random.Random(seed)
    w = PcapWriter(path)
    clients = [(bytes([10, 0, 0, 1 + i % 3]), 40000 + i) for i in range(7)]
    nxt: dict[tuple, int] = {}  # (tuple index, direction) -> next sequence number
    t = T0
    for _ in range(packets):
        t += rng.choice((1, 10, 1000, 300_000, 1_500_000, 4_000_000, 7_000_000))
        i = rng.randrange(len(clients))
        c, cport = clients[i]
        sport = 4222 if i % 2 else 80
        d = rng.randrange(2)
        src, dst, p1, p2 = (c, S, cport, sport) if d == 0 else (S, c, sport, cport)
        seq = nxt.setdefault((i, d), rng.randrange(1 << 32))
        ack = nxt.get((i, 1 - d), 0)
        what = rng.random()
        if what < 0.12:
            isn = seq - 1 if rng.random() < 0.5 else rng.randrange(1 << 32)  # repeat or new
            flags = SYN | (ACK if rng.random() < 0.3 else 0)
            w.write(t, tcp_frame(src, dst, p1, p2, isn, ack, flags))
            nxt[(i, d)] = (isn + 1) % (1 << 32)
        elif what < 0.55:
            data = rng.randbytes(rng.randrange(1, 120))
            shift = rng.choice((0, 0, 0, 40, 150, 400, -30))  # in order, ahead, behind
            w.write(t, tcp_frame(src, dst, p1, p2, seq + shift, ack, ACK | PSH, data))
            if shift == 0:
                nxt[(i, d)] = (seq + len(data)) % (1 << 32)
        elif what < 0.65:  # an ACK past whatever the peer sent
            peer = nxt.get((i, 1 - d), 0)
            w.write(t, tcp_frame(src, dst, p1, p2, seq, peer + rng.randrange(0, 300), ACK))
        elif what < 0.72:
            w.write(t, tcp_frame(src, dst, p1, p2, seq, ack, FIN | ACK))
        elif what < 0.77:
            w.write(t, tcp_frame(src, dst, p1, p2, seq, ack, RST))
        elif what < 0.95:
            w.write(t, udp_frame(src, dst, 5000 + i, 53, rng.randbytes(rng.randrange(40))))
        elif what < 0.97:
            w.write(t, bad_tcp_frame(src, dst))
        else:
            w.write(t, udp_frame(src, dst, 5000 + i, 53, b"")[:-8])  # header cut
    w.close()


@pytest.mark.parametrize("seed", range(25))
def test_random_flow_soups(tmp_path, seed: int) -> None:
    path = tmp_path / "soup.pcap"
    write_random_capture(path, seed)
    full = assert_split_exact(path)
    assert len({_flow_id(ev) for ev in full}) > 5


def test_random_soups_cover_every_flow_table_decision(tmp_path) -> None:
    """The soups above do reach port reuse, eviction, idle expiry, linger and gaps."""
    reasons: Counter = Counter()
    gaps = 0
    for seed in range(25):
        path = tmp_path / f"soup{seed}.pcap"
        write_random_capture(path, seed)
        full, _ = _events(path, SMALL)
        reasons += _reasons(full)
        gaps += sum(type(ev) is StreamGap for ev in full)
    for why in ("port-reuse", "evicted", "idle-timeout", "closed", "end-of-capture"):
        assert reasons[why] > 0, why
    assert gaps > 0


# --------------------------------------------------------------- real captures


def _shared(n: int) -> list[Path]:
    if not CAPTURES.is_dir():
        return []
    caps = sorted(p for p in CAPTURES.rglob("*") if p.suffix in (".pcap", ".pcapng", ".cap"))
    # small enough to be read six times each
    caps = [p for p in caps if p.stat().st_size < 4 << 20]
    return caps[:n]


@pytest.mark.parametrize("path", _shared(200), ids=lambda p: str(p.relative_to(CAPTURES)))
def test_real_captures(path: Path) -> None:
    full, _ = _events(path, Limits())
    quic = any(type(ev).__name__ == "QuicPacket" for ev in full)
    assert_split_exact(path, Limits(), cross_flow=quic)


@pytest.mark.parametrize("name", ["nats-basic", "nats-tls", "nats-ws", "pulsar-client"])
def test_samples_over_tls_and_websocket(name: str) -> None:
    pcap = SAMPLES / f"{name}.pcap"
    keys = pcap.with_suffix(".keys")
    assert_split_exact(pcap, Limits(), keys if keys.exists() else None)


def test_quic_is_reported_as_cross_flow_state() -> None:
    """QUIC links UDP flows by connection id: a share whose QUIC layer took a datagram
    says so, and the shares together cover every flow once."""
    pcap = SAMPLES / "felix-quic.pcap"
    keys = pcap.with_suffix(".keys")
    assert_split_exact(pcap, Limits(), keys, cross_flow=True)
    reported = []
    for k in range(2):
        _, split = _events(pcap, Limits(), lambda f, k=k: f % 2 == k, KeyLog.from_file(keys))
        reported += split.cross_flow()
    assert "quic" in reported


# ------------------------------------------------------- the half-stream tracker


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["isn", "ack", "fin", "seg", "empty"]),
        st.integers(0, (1 << 32) - 1),
        st.integers(0, 300),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_tracker_keeps_what_the_flow_table_reads(ops) -> None:
    """``TcpHalfTracker`` keeps ``base``, ``started`` and ``syn_seen`` exactly as the
    real half stream sets them, whatever the calls."""
    info = FlowInfo(0, Transport.TCP, Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2),
                    RoleSource.SYN, 0, 0, 0, 0)
    real = TcpHalfStream(info, Direction.C2S, Limits(), lambda ev: None)
    light = TcpHalfTracker()
    for op, value, n in ops:
        for half in (real, light):
            if op == "isn":
                half.set_isn(value)
            elif op == "ack":
                half.on_ack(value, 1, 1)
            elif op == "fin":
                half.on_fin(value, n)
            else:
                half.on_segment(value, b"x" * n if op == "seg" else b"", 1, 1)
        assert (light.base, light.started, light.syn_seen) == (
            real.base, real.started, real.syn_seen)
    light.finish(1, 1)


def test_without_owns_nothing_changes(tmp_path) -> None:
    """``FlowSplit`` owning everything is the full run."""
    path = tmp_path / "soup.pcap"
    write_random_capture(path, 99)
    full, _ = _events(path, SMALL)
    every, split = _events(path, SMALL, lambda f: True)
    assert every == full and split.cross_flow() == []
    assert split.flows.counters["light_flows"] == 0
    assert any(type(ev) is StreamData for ev in full)

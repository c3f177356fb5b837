"""TCP half-stream reassembly and the flow table, from hand-built segments."""

from __future__ import annotations

import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from reassembly.events import (
    Anomaly,
    Direction,
    Endpoint,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.flows import ACK, RST, SYN, FlowTable
from reassembly.limits import Limits, OverlapPolicy
from reassembly.tcp import TcpHalfStream

MOD = 1 << 32


def _info() -> FlowInfo:
    return FlowInfo(
        0,
        Transport.TCP,
        Endpoint("10.0.0.1", 40000),
        Endpoint("10.0.0.2", 4222),
        RoleSource.SYN,
        0,
        0,
        0,
        0,
    )


def _half(limits: Limits | None = None) -> tuple[TcpHalfStream, list]:
    events: list = []
    return TcpHalfStream(_info(), Direction.C2S, limits or Limits(), events.append), events


def render(events: list) -> bytes:
    """Stream as suricata prints it: bytes, with ``[N bytes missing]`` for gaps."""
    out = bytearray()
    expect = 0
    for ev in events:
        if isinstance(ev, StreamData):
            assert ev.offset == expect, "data must be contiguous with what came before"
            out += ev.data
            expect += len(ev.data)
        elif isinstance(ev, StreamGap):
            assert ev.offset == expect
            out += b"[%d bytes missing]" % ev.nbytes
            expect += ev.nbytes
    return bytes(out)


def test_in_order_and_wraparound_inside_a_segment():
    half, ev = _half()
    isn = MOD - 32
    half.set_isn(isn)
    half.on_segment((isn + 1) % MOD, b"A" * 8, 1, 1)
    half.on_segment((isn + 9) % MOD, b"B" * 40, 2, 2)  # crosses 2**32
    half.on_segment((isn + 49) % MOD, b"C" * 4, 3, 3)
    half.finish(4, 4)
    assert render(ev) == b"A" * 8 + b"B" * 40 + b"C" * 4
    assert [e.frame_first for e in ev] == [1, 2, 3]


def test_first_wins_on_buffered_and_delivered_overlap_reports_conflicts():
    half, ev = _half()
    half.set_isn(1000)
    half.on_segment(1001, b"GOOD", 1, 1)
    half.on_segment(1001, b"EVIL", 2, 2)  # already delivered: conflict, GOOD stays
    half.on_segment(1009, b"DATA", 3, 3)  # ahead: buffered
    half.on_segment(1010, b"XX", 4, 4)  # overlaps buffered DATA with different bytes
    half.on_segment(1005, b"VERY", 5, 5)  # fills the hole
    half.finish(6, 6)
    assert render(ev) == b"GOODVERYDATA"
    conflicts = [e for e in ev if isinstance(e, Anomaly) and e.kind == "tcp.overlap_conflict"]
    assert [(c.offset, c.nbytes, c.frame) for c in conflicts] == [(0, 4, 2), (9, 2, 4)]
    assert half.flow.overlap_conflicts[0] == 2


def test_last_wins_policy_replaces_buffered_bytes():
    half, ev = _half(Limits(overlap_policy=OverlapPolicy.LAST))
    half.set_isn(0)
    half.on_segment(5, b"DATA", 1, 1)
    half.on_segment(6, b"XX", 2, 2)
    half.on_segment(1, b"GOOD", 3, 3)
    half.finish(4, 4)
    assert render(ev) == b"GOODDXXA"


def test_identical_retransmission_is_not_a_conflict():
    half, ev = _half()
    half.set_isn(0)
    half.on_segment(1, b"hello", 1, 1)
    half.on_segment(1, b"hello world", 2, 2)
    half.finish(3, 3)
    assert render(ev) == b"hello world"
    assert not [e for e in ev if isinstance(e, Anomaly)]


def test_hole_becomes_gap_when_peer_acks_past_it():
    half, ev = _half()
    half.set_isn(0)
    half.on_segment(1, b"VERY", 1, 1)
    half.on_segment(9, b"DATA", 2, 2)
    assert render(ev) == b"VERY"
    half.on_ack(13, 3, 3)  # receiver has everything: bytes 5-8 are lost to the capture
    assert render(ev) == b"VERY[4 bytes missing]DATA"
    gap = [e for e in ev if isinstance(e, StreamGap)][0]
    assert (gap.offset, gap.nbytes, gap.reason) == (4, 4, "acked-unseen")


def test_leading_gap_and_missing_tail_from_fin():
    half, ev = _half()
    half.set_isn(0)
    half.on_segment(5, b"GOOD", 1, 1)
    half.on_segment(9, b"DATA", 2, 2)
    half.on_fin(17, 0)  # FIN at offset 16: 4 bytes before it never seen
    half.finish(3, 3)
    assert render(ev) == b"[4 bytes missing]GOODDATA[4 bytes missing]"


def test_reorder_buffer_limit_declares_gap_and_reports():
    half, ev = _half(Limits(max_buffered_bytes=10))
    half.set_isn(0)
    half.on_segment(1, b"ab", 1, 1)
    half.on_segment(101, b"x" * 6, 2, 2)
    half.on_segment(107, b"y" * 6, 3, 3)  # 12 buffered > 10
    kinds = [e.kind for e in ev if isinstance(e, Anomaly)]
    assert kinds == ["limit.reorder_buffer"]
    assert render(ev) == b"ab[98 bytes missing]" + b"x" * 6 + b"y" * 6
    assert half.buffered == 0


def test_sequence_jump_of_2gb_holds_only_real_bytes():
    half, ev = _half(Limits(max_buffered_bytes=1 << 20))
    half.set_isn(0)
    half.on_segment(1, b"start", 1, 1)
    jump = 1 << 31
    for i in range(300):  # 300 * 4 KiB = 1.2 MiB > 1 MiB cap
        half.on_segment((1 + jump + i * 4096) % MOD, b"z" * 4096, 2 + i, 2 + i)
    assert half.buffered <= 1 << 20
    gaps = [e for e in ev if isinstance(e, StreamGap)]
    assert gaps[0].offset == 5 and gaps[0].nbytes == jump - 5
    assert any(isinstance(e, Anomaly) and e.kind == "limit.reorder_buffer" for e in ev)


def test_data_before_stream_start_is_reported_not_delivered():
    half, ev = _half()
    half.on_segment(5000, b"later", 1, 1)  # mid-stream: first byte seen becomes offset 0
    half.on_segment(4990, b"0123456789later", 2, 2)
    half.finish(3, 3)
    assert render(ev) == b"later"
    anomaly = [e for e in ev if isinstance(e, Anomaly)][0]
    assert (anomaly.kind, anomaly.nbytes) == ("tcp.data_before_start", 10)


# -- property tests -----------------------------------------------------------------------


@st.composite
def _segmented(draw, drop: bool):
    data = draw(st.binary(min_size=1, max_size=3000))
    isn = draw(st.sampled_from([0, 1000, MOD - 1, MOD - 700, draw(st.integers(0, MOD - 1))]))
    cuts = (
        sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=40))))
        if len(data) > 1
        else []
    )
    bounds = [0, *cuts, len(data)]
    segs = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
    extra = draw(
        st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(1, 200)), max_size=10)
    )
    segs += [(a, min(len(data), a + n)) for a, n in extra]  # duplicates / overlaps, same bytes
    dropped = set()
    if drop:
        dropped = set(draw(st.lists(st.integers(0, len(segs) - 1), max_size=len(segs) // 2 + 1)))
    kept = [s for i, s in enumerate(segs) if i not in dropped]
    seed = draw(st.integers(0, 2**32))
    window = draw(st.integers(1, 8))
    rng = random.Random(seed)
    # permute within a window: sort by index + random displacement
    order = sorted(range(len(kept)), key=lambda i: i + rng.uniform(0, window))
    return data, isn, [kept[i] for i in order]


def _feed(data: bytes, isn: int, segs: list[tuple[int, int]]) -> list:
    half, ev = _half()
    half.set_isn(isn)
    for n, (a, b) in enumerate(segs, 1):
        half.on_segment((isn + 1 + a) % MOD, data[a:b], n, n)
    half.on_fin((isn + 1 + len(data)) % MOD, 0)
    half.finish(len(segs) + 1, len(segs) + 1)
    return ev


@settings(max_examples=300, deadline=None)
@given(_segmented(drop=False))
def test_any_reordering_with_duplicates_reassembles_exactly(case):
    data, isn, segs = case
    ev = _feed(data, isn, segs)
    assert render(ev) == data
    assert not [e for e in ev if isinstance(e, StreamGap | Anomaly)]


@settings(max_examples=300, deadline=None)
@given(_segmented(drop=True))
def test_dropped_segments_become_exactly_the_missing_ranges(case):
    data, isn, segs = case
    covered = bytearray(len(data))
    for a, b in segs:
        covered[a:b] = b"\x01" * (b - a)
    expected = bytearray()
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and covered[j] == covered[i]:
            j += 1
        expected += data[i:j] if covered[i] else b"[%d bytes missing]" % (j - i)
        i = j
    ev = _feed(data, isn, segs)
    assert render(ev) == bytes(expected)
    delivered = sum(len(e.data) for e in ev if isinstance(e, StreamData))
    gaps = sum(e.nbytes for e in ev if isinstance(e, StreamGap))
    assert delivered + gaps == len(data)  # byte accounting


# -- flow table ---------------------------------------------------------------------------

C, S = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def seg(sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes = b"") -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + data


def _table(limits: Limits | None = None) -> tuple[FlowTable, list]:
    events: list = []
    return FlowTable(limits or Limits(), events.append), events


def test_syn_ack_captured_before_syn_keeps_roles():
    ft, ev = _table()
    ft.tcp(S, C, seg(80, 59856, 500, 101, SYN | ACK), 1, 1)
    ft.tcp(C, S, seg(59856, 80, 100, 0, SYN), 2, 2)
    ft.tcp(C, S, seg(59856, 80, 101, 501, ACK, b"GET /"), 3, 3)
    ft.close_all()
    data = [e for e in ev if isinstance(e, StreamData)]
    info = data[0].flow
    assert (info.client, info.server, info.role_source) == (
        Endpoint("10.0.0.1", 59856),
        Endpoint("10.0.0.2", 80),
        RoleSource.SYN_ACK,
    )
    assert data[0].direction is Direction.C2S and data[0].offset == 0


def test_missing_syn_client_from_syn_ack_and_port_hint_without_handshake():
    ft, ev = _table()
    ft.tcp(C, S, seg(50000, 4222, 7, 9, ACK, b"PING\r\n"), 1, 1)
    ft.close_all()
    info = ev[0].flow
    assert info.server.port == 4222 and info.role_source is RoleSource.PORT
    assert info.mid_stream == [True, False]


def test_new_syn_on_closed_tuple_opens_new_flow():
    ft, ev = _table()
    ft.tcp(C, S, seg(40000, 80, 100, 0, SYN), 1, 1)
    ft.tcp(C, S, seg(40000, 80, 101, 0, ACK, b"one"), 2, 2)
    ft.tcp(C, S, seg(40000, 80, 104, 0, RST), 3, 3)
    ft.tcp(C, S, seg(40000, 80, 9000, 0, SYN), 4, 4)
    ft.tcp(C, S, seg(40000, 80, 9001, 0, ACK, b"two"), 5, 5)
    ft.close_all()
    data = [(e.flow.flow_id, e.data) for e in ev if isinstance(e, StreamData)]
    assert data == [(0, b"one"), (1, b"two")]
    closes = [(e.flow.flow_id, e.reason) for e in ev if isinstance(e, StreamClose)]
    assert closes == [(0, "port-reuse"), (1, "end-of-capture")]


def test_syn_retransmission_is_the_same_connection():
    ft, ev = _table()
    ft.tcp(C, S, seg(40000, 80, 100, 0, SYN), 1, 1)
    ft.tcp(C, S, seg(40000, 80, 100, 0, SYN), 2, 2)
    ft.close_all()
    assert len([e for e in ev if isinstance(e, StreamClose)]) == 1


def test_flow_table_cap_evicts_oldest_and_reports():
    ft, ev = _table(Limits(max_flows=3))
    for i in range(5):
        ft.tcp(C, S, seg(40000 + i, 80, 1, 0, SYN), i, i)
    assert len(ft) == 3
    evictions = [e for e in ev if isinstance(e, Anomaly) and e.kind == "limit.flow_table"]
    assert [e.flow.flow_id for e in evictions] == [0, 1]


def test_idle_and_closed_flows_expire_on_capture_time():
    ft, ev = _table(Limits(tcp_idle_timeout_ns=100, closed_linger_ns=10, tcp_sleep_max_ns=300))
    ft.tcp(C, S, seg(40000, 80, 1, 0, SYN), 0, 1)
    ft.tcp(C, S, seg(40001, 80, 1, 0, SYN), 0, 2)
    ft.tcp(C, S, seg(40001, 80, 2, 0, RST), 5, 3)
    ft.expire(50)
    assert [(e.flow.flow_id, e.reason) for e in ev if isinstance(e, StreamClose)] == [(1, "closed")]
    ft.expire(200)  # idle past the timeout: asleep (issue 18 bug 3), not closed yet
    assert len([e for e in ev if isinstance(e, StreamClose)]) == 1 and len(ft) == 1
    ft.expire(500)
    assert [(e.flow.flow_id, e.reason) for e in ev if isinstance(e, StreamClose)] == [
        (1, "closed"),
        (0, "idle-timeout"),
    ]


def test_truncated_tcp_header_is_an_anomaly():
    ft, ev = _table()
    ft.tcp(C, S, seg(1, 2, 3, 4, ACK)[:13], 1, 1)
    assert [e.kind for e in ev] == ["tcp.bad_header"]


def test_snaplen_cut_payload_becomes_gap():
    ft, ev = _table()
    ft.tcp(C, S, seg(40000, 25, 100, 0, SYN), 1, 1)
    ft.tcp(C, S, seg(40000, 25, 101, 0, ACK, b"HE"), 2, 2, missing=3)
    ft.tcp(C, S, seg(40000, 25, 106, 0, ACK, b"WO"), 3, 3, missing=3)
    ft.close_all()
    assert render([e for e in ev if e.__class__ in (StreamData, StreamGap)]) == (
        b"HE[3 bytes missing]WO[3 bytes missing]"
    )


def test_idle_flow_is_split_by_its_own_history_not_by_sweeps():
    """No sweep runs here: the late packet itself finds its flow stale."""
    ft, ev = _table(Limits(udp_idle_timeout_ns=100))
    udp = struct.pack("!HHHH", 5353, 53, 9, 0) + b"x"
    ft.udp(C, S, udp, 0, 1)
    ft.udp(C, S, udp, 50, 2)
    ft.udp(C, S, udp, 500, 3)
    ft.close_all()
    ends = [(e.flow.flow_id, e.reason, e.ts_ns) for e in ev if e.__class__.__name__ == "FlowEnd"]
    assert ends == [(0, "idle-timeout", 50), (1, "end-of-capture", 500)]

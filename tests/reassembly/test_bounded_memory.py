"""Hostile captures keep memory under the configured caps, and the breach is reported.

Each case runs the reassembly pass in a child process and reads its own peak RSS
(VmHWM), so the numbers are not polluted by the test runner.  The thresholds sit far below what the
same capture costs without the caps (≈1.5 GB for a million live flows, and the whole
stream for an unbounded reorder buffer).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.reassembly.synth import write_sequence_jump, write_syn_flood

_CHILD = textwrap.dedent(
    """
    import collections, json, sys
    from reassembly.engine import read_events
    from reassembly.events import Anomaly, StreamClose, StreamGap
    from reassembly.limits import Limits
    limits = Limits(**json.loads(sys.argv[2]))
    kinds, closes, gap_bytes = collections.Counter(), 0, 0
    for ev in read_events(sys.argv[1], limits):
        if isinstance(ev, Anomaly):
            kinds[ev.kind] += 1
        elif isinstance(ev, StreamClose):
            closes += 1
        elif isinstance(ev, StreamGap):
            gap_bytes += ev.nbytes
    # VmHWM, not ru_maxrss: the latter is inherited from the (large) pytest parent
    # across fork/exec, so it would report the parent's peak
    with open("/proc/self/status") as f:
        hwm_kb = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    peak_mb = hwm_kb / 1024
    res = {"kinds": kinds, "closes": closes, "gap_bytes": gap_bytes, "peak_mb": peak_mb}
    print(json.dumps(res))
    """
)


def _run(path, **limits) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), json.dumps(limits)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def test_million_half_open_flows_stay_under_the_flow_cap(tmp_path):
    path = tmp_path / "synflood.pcap"
    write_syn_flood(path, 1_000_000)
    res = _run(path, max_flows=10_000)
    assert res["closes"] == 1_000_000  # every flow still reported, none lost
    assert res["kinds"]["limit.flow_table"] == 990_000
    assert res["peak_mb"] < 250, res


def test_two_gigabyte_sequence_jump_stays_under_the_reorder_cap(tmp_path):
    path = tmp_path / "jump.pcap"
    write_sequence_jump(path, jump=2 * 1024**3 - 10_000, segments_after=200_000)
    res = _run(path, max_buffered_bytes=4 * 1024 * 1024)
    assert res["kinds"]["limit.reorder_buffer"] == 1
    assert res["gap_bytes"] == 2 * 1024**3 - 10_000
    assert res["peak_mb"] < 150, res


# ------------------------------------------------------------------ young flows
# A TCP flow's first packet, when it needs no stream state (a SYN), is held as a packed
# record (``reassembly.flows``, "young"); ``FlowTable.young_flows = False`` makes every
# flow full from its first packet.  Holding flows young must change nothing but memory.


def _table_events(packets: list, young: bool, max_flows: int = 1000, owns=None) -> tuple:
    """Feed ``(kind, src, dst, segment, ts_ns, vlans)`` packets the way the engine does
    (an expiry sweep per second of capture time), then close all; the events, the table
    size after each packet and the counters."""
    from reassembly.events import Anomaly
    from reassembly.flows import FlowTable
    from reassembly.limits import SECOND_NS, Limits

    events: list = []
    table = FlowTable(Limits(max_flows=max_flows, memory_limit_bytes=0), events.append, owns)
    table.young_flows = young
    now, swept, sizes = 0, None, []
    for frame, (kind, src, dst, seg, ts, vlans) in enumerate(packets, 1):
        getattr(table, kind)(src, dst, seg, ts, frame, vlans)
        if ts > now:
            if not now:
                table.restamp_untimed(ts)
            now = ts
        if swept is None:
            swept = ts
        elif now - swept >= SECOND_NS:
            swept = now
            table.expire(now)
        sizes.append(len(table))
    table.close_all()
    assert all(e.flow is None or e.flow.close_reason for e in events if isinstance(e, Anomaly))
    return events, sizes, table.counters


def _segment(sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes = b"",
             options: bytes = b"") -> bytes:
    import struct

    hlen = 20 + len(options)
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (hlen // 4) << 4, flags, 65535,
                       0, 0) + options + data


def _random_packets(rnd, n: int) -> list:
    import struct

    from reassembly.flows import ACK, FIN, RST, SYN
    from reassembly.limits import SECOND_NS

    hosts4 = [bytes([10, 0, 0, i]) for i in (1, 2, 3)]
    hosts6 = [b"\x20\x01" + bytes(13) + bytes([i]) for i in (1, 2)]
    ports = rnd.choice([[4222, 40000], [4222, 40000, 40001, 80, 5000]])
    ts = 0 if rnd.random() < 0.3 else 1_700_000_000 * SECOND_NS
    out = []
    for _ in range(n):
        if rnd.random() < 0.3:  # pauses: idle timeout (300 s), sleep (1 h), linger
            ts += rnd.choice([0, SECOND_NS, 20 * SECOND_NS, 400 * SECOND_NS, 4000 * SECOND_NS])
        elif ts:
            ts += rnd.randint(0, 1000)
        src, dst = rnd.sample(hosts4 if rnd.random() < 0.7 else hosts6, 2)
        sport, dport = rnd.choice(ports), rnd.choice(ports)
        flags = rnd.choice([SYN, SYN, SYN | ACK, ACK, ACK | 8, FIN | ACK, RST, 0, 8,
                            SYN | FIN, SYN | RST])
        data = rnd.randbytes(rnd.randint(1, 20)) if rnd.random() < 0.4 else b""
        options = b"\x01\x03\x03" + bytes([rnd.randint(0, 15)]) if rnd.random() < 0.3 else b""
        seq = rnd.choice([0, 1000, 1001, 2**32 - 3, rnd.randrange(2**32)])
        ack = rnd.choice([0, 1, 1001, rnd.randrange(2**32)])
        vlans = rnd.choice([(), (), (5,), (5, 7)])
        if rnd.random() < 0.1:
            out.append(("udp", src, dst, struct.pack("!HHHH", sport, dport, 8 + len(data), 0)
                        + data, ts, vlans))
        else:
            out.append(("tcp", src, dst, _segment(sport, dport, seq, ack, flags, data, options),
                        ts, vlans))
    return out


def test_young_flows_change_no_event_order_or_count():
    """Random traffic (SYNs, handshakes, data, FIN/RST, port reuse, UDP on the same
    4-tuples, IPv6, VLANs, idle pauses into sleep and expiry, a tiny flow cap that evicts,
    a split by flow id, untimed first packets): the same events with flows held young as
    with every flow full from its first packet."""
    import random

    for seed in range(300):
        rnd = random.Random(seed)
        packets = _random_packets(rnd, rnd.randint(1, 60))
        max_flows = rnd.choice([2, 3, 1000])
        owns = rnd.choice([None, lambda flow_id: flow_id % 2 == 0])
        young = _table_events(packets, True, max_flows, owns)
        full = _table_events(packets, False, max_flows, owns)
        assert young == full, seed


def test_a_young_flow_is_evicted_in_its_place_among_full_ones():
    """The flow cap evicts the least recently active flow, young or full: a young flow
    whose SYN came after a full flow's last packet goes after it, before it otherwise."""
    from reassembly.events import Anomaly
    from reassembly.flows import ACK, SYN

    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])

    def evicted(order: list[int]) -> list[int]:
        script = {
            0: [("tcp", c, s, _segment(40000, 4222, 9, 0, SYN), 1, ()),
                ("tcp", c, s, _segment(40000, 4222, 10, 0, ACK, b"PING\r\n"), 2, ())],
            1: [("tcp", c, s, _segment(40001, 4222, 9, 0, SYN), 3, ())],  # stays young
            2: [("tcp", c, s, _segment(40000, 4222, 16, 0, ACK, b"PING\r\n"), 4, ())],
        }
        packets = [p for k in order for p in script[k]]
        packets.append(("tcp", c, s, _segment(40002, 4222, 9, 0, SYN), 5, ()))  # a third
        events, _, _ = _table_events(packets, True, max_flows=2)
        return [e.flow.flow_id for e in events
                if isinstance(e, Anomaly) and e.kind == "limit.flow_table"]

    assert evicted([0, 1]) == [0]  # flow 0 (full) last moved before flow 1's SYN
    assert evicted([0, 1, 2]) == [1]  # flow 0 moved again: the young flow 1 is older


def test_a_young_ipv6_vlan_flow_closes_with_all_it_was_told():
    """A lone SYN over IPv6 on two VLANs with a window-scale option: its flow closes with
    the endpoints, VLANs, role source, times and packet count a full flow would have, and
    a SYN-ACK on it later in the capture finds it (the same flow, scaling known)."""
    from reassembly.events import RoleSource, StreamClose
    from reassembly.flows import ACK, SYN

    c, s = b"\x20\x01" + bytes(13) + b"\x01", b"\x20\x01" + bytes(13) + b"\x02"
    syn = ("tcp", c, s, _segment(40000, 4222, 7, 0, SYN, options=b"\x01\x03\x03\x05"), 10,
           (5, 4095))
    (close,) = _table_events([syn], True)[0]
    assert isinstance(close, StreamClose) and close.reason == "end-of-capture"
    info = close.flow
    assert (str(info.client), str(info.server), info.vlan, info.role_source, info.packets,
            info.ts_first_ns, info.ts_last_ns, info.frame_first, info.frame_last) == (
        "[2001::1]:40000", "[2001::2]:4222", (5, 4095), RoleSource.SYN, [1, 0], 10, 10, 1, 1)
    assert _table_events([syn], True) == _table_events([syn], False)
    synack = ("tcp", s, c, _segment(4222, 40000, 99, 8, SYN | ACK, options=b"\x01\x03\x03\x02"),
              11, (5, 4095))
    events, sizes, counters = _table_events([syn, synack], True)
    assert sizes == [1, 1] and counters["tcp_flows"] == 1
    assert [type(e).__name__ for e in events] == ["StreamClose"]
    assert events[0].flow.packets == [1, 1]
    assert (events, sizes, counters) == _table_events([syn, synack], False)
    # the client's window (65535 << its shift 5, about 2 MiB) covers server data 1 MB
    # ahead: buffered, then a gap; with another shift it would be set aside out of window
    ack = ("tcp", c, s, _segment(40000, 4222, 8, 100, ACK), 12, (5, 4095))
    ahead = ("tcp", s, c, _segment(4222, 40000, 100 + 1_000_000, 8, ACK, b"x"), 13, (5, 4095))
    events, _, _ = _table_events([syn, synack, ack, ahead], True)
    assert [(type(e).__name__, getattr(e, "nbytes", None)) for e in events] == [
        ("StreamGap", 1_000_000), ("StreamData", None), ("StreamClose", None)]
    assert events == _table_events([syn, synack, ack, ahead], False)[0]


def test_a_udp_flow_and_a_tcp_flow_on_one_4_tuple_are_two_flows():
    """Regression: the table keyed TCP and UDP flows together, so a TCP segment on the
    4-tuple of a live UDP flow (or the reverse) found the other protocol's state and
    raised (AttributeError: '_Udp' object has no attribute 'closing')."""
    import struct

    from reassembly.events import Transport
    from reassembly.flows import SYN

    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    udp = ("udp", c, s, struct.pack("!HHHH", 40000, 4222, 12, 0) + b"abcd", 1, ())
    syn = ("tcp", c, s, _segment(40000, 4222, 9, 0, SYN), 2, ())
    for packets in ([udp, syn, udp], [syn, udp, syn]):
        events, sizes, counters = _table_events(packets, True)
        closes = sorted((e.flow.flow_id, e.flow.transport, e.flow.packets) for e in events
                        if type(e).__name__ in ("StreamClose", "FlowEnd"))
        assert sizes == [1, 2, 2] and (counters["tcp_flows"], counters["udp_flows"]) == (1, 1)
        first, second = ((Transport.UDP, Transport.TCP) if packets[0] is udp
                         else (Transport.TCP, Transport.UDP))
        assert closes == [(0, first, [2, 0]), (1, second, [1, 0])]

"""One memory budget for a whole run (issue 17 part 2): many holders that are each under
their own limit must not add up past it.

Before the budget every limit was per item, so totals grew with the input: 240 flows each
holding 3.8 MiB out of order peaked at 1,066 MB, 200,000 half-open SYNs (the default flow
cap) at 750 MB, 8,000 incomplete 64 KB IP fragments at 647 MB.  Each case here runs the
whole pipeline (``dissect_capture``, default settings) in a child process that reads its
own peak RSS (VmHWM, tests/hostile/child.py) and must stay at or under 400 MB, with every
flow still accounted for in ``flows`` or in the ``limit.memory`` anomalies.  The inputs are
generated in the test, streamed to a file, and are not committed.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from reassembly.flows import FLOW_BYTES, HALF_OPEN_FLOW_BYTES, LIGHT_FLOW_BYTES
from reassembly.limits import DEFAULT_MEMORY_LIMIT, Limits, MemoryBudget
from tests.hostile.conftest import dissect_in_child, dissect_one
from tests.reassembly.synth import (
    PcapWriter,
    repeat_records,
    stamp,
    stamp_times,
    write_syn_flood,
)

PEAK_MB = 400  # the target, interpreter and pyarrow included
T0_US = 1_700_000_000_000_000
_ETH_IP = struct.Struct("!6s6sHBBHHHBBH4s4s")


# ------------------------------------------------------------------------ generators


_TCP = struct.Struct("!HHIIBBHHH")
_WSCALE = b"\x01\x03\x03\x07"  # NOP, window scale 7: windows up to 8 MiB (RFC 7323)


def _tcp(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
         data: bytes = b"", options: bytes = b"") -> bytes:
    hlen = 20 + len(options)
    ip = _ETH_IP.pack(b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, 20 + hlen + len(data), 1, 0,
                      64, 6, 0, src, dst)
    return ip + _TCP.pack(sport, dport, seq % (1 << 32), ack % (1 << 32), (hlen // 4) << 4,
                          flags, 65535, 0, 0) + options + data


def write_out_of_order_flows(path: Path, flows: int, held_bytes: int, seg: int = 1400,
                             port: int = 9000) -> dict:
    """``flows`` connections, one after the other, each sending ``held_bytes`` whose first
    segment is never captured and never acknowledged: everything after it waits in the
    reorder buffer (each flow under the 4 MiB / 4,096-piece per-direction limit).  Both
    SYNs offer window scaling and the server advertises 8 MiB, so the data is in window."""
    rnd = random.Random(7)
    w = PcapWriter(path)
    pieces = held_bytes // seg
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    syn, ack, psh = 0x02, 0x10, 0x08
    k = np.arange(1, pieces + 1, dtype=np.int64)
    for f in range(flows):
        t = T0_US + f * 10_000
        cp, ci, si = 20000 + f, 1000, 50_000
        w.write(t, _tcp(c, s, cp, port, ci, 0, syn, options=_WSCALE))
        w.write(t + 1, _tcp(s, c, port, cp, si, ci + 1, syn | ack, options=_WSCALE))
        w.write(t + 2, _tcp(c, s, cp, port, ci + 1, si + 1, ack))
        w.write(t + 3, _tcp(s, c, port, cp, si + 1, ci + 1, ack))  # window 65535 << 7
        # the data segments differ only in time and sequence number: stamped into copies
        data = _tcp(c, s, cp, port, 0, si + 1, ack | psh, rnd.randbytes(seg))
        records = repeat_records(data, pieces)
        stamp_times(records, t + 3 + k)
        stamp(records, 38, ">u4", (ci + 1 + k * seg) % (1 << 32))  # TCP sequence number
        w.write_records(records)
    w.close()
    return {"pieces": pieces, "buffered": pieces * seg}


def write_incomplete_fragments(path: Path, datagrams: int, size: int = 64_000,
                               frag: int = 1480) -> dict:
    """``datagrams`` IPv4/UDP datagrams of ``size`` bytes, each sent as fragments of
    ``frag`` bytes of which the last is never captured: every one waits in the fragment
    table until the end of the capture (all within one second, far inside the timeout)."""
    w = PcapWriter(path)
    src, dst = bytes([10, 1, 0, 1]), bytes([10, 1, 0, 2])
    body = struct.pack("!HHHH", 5000, 6000, size, 0) + b"\xab" * (size - 8)
    frames = []
    for off in range(0, size - frag, frag):  # the last fragment is never sent
        chunk = body[off : off + frag]  # always ``frag`` bytes: the short one is the last
        flags_frag = 0x2000 | (off // 8)  # MF
        frames.append(_ETH_IP.pack(b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, 20 + len(chunk),
                                   0, flags_frag, 64, 17, 0, src, dst) + chunk)
    # every datagram's fragments are the first one's but for the IP id and the times
    block = np.concatenate([repeat_records(frame, 1) for frame in frames])
    n = len(frames)
    for first in range(0, datagrams, 64):
        d = np.arange(first, min(first + 64, datagrams), dtype=np.int64)
        records = np.tile(block, (len(d), 1))
        stamp(records, 18, ">u2", np.repeat(d & 0xFFFF, n))  # IPv4 identification
        stamp_times(records, T0_US + np.repeat(d * 100, n) + np.tile(np.arange(n), len(d)))
        w.write_records(records)
    w.close()
    sent = datagrams * n * frag
    return {"fragment_bytes": sent}


# ------------------------------------------------------------------------ the budget


class _Holder:
    def __init__(self, budget: MemoryBudget, name: str, log: list) -> None:
        self.budget, self.name, self.log = budget, name, log

    def release_memory(self, need: int) -> None:
        self.log.append((self.name, need))
        self.budget.hold(self, 0)


class _Pool(_Holder):
    def __init__(self, budget: MemoryBudget, log: list, items: int) -> None:
        super().__init__(budget, "pool", log)
        self.items = items

    def release_memory(self, need: int) -> None:
        self.log.append(("pool", need))
        self.items -= (need + 9) // 10
        self.budget.hold(self, self.items * 10, tier=1)


def test_budget_gives_back_buffers_oldest_first_then_pools():
    log: list = []
    b = MemoryBudget(1000)
    a, c = _Holder(b, "a", log), _Holder(b, "c", log)
    pool = _Pool(b, log, 50)
    b.hold(pool, 500, tier=1)
    b.hold(a, 300)
    b.hold(c, 150)
    b.hold(a, 350)  # a is now the most recent buffer
    assert (b.used, log) == (1000, [])
    b.hold(c, 200)  # 1050: the oldest buffer (a, touched before c) goes first
    assert log == [("a", 50)] and b.used == 700
    b.hold(c, 700)  # 1200: c is the only buffer and goes, then nothing is left to take
    assert log == [("a", 50), ("c", 200)] and b.used == 500
    pool.items = 103
    b.hold(pool, 1030, tier=1)  # a pool shrinks by what is needed only
    assert log[-1] == ("pool", 30) and b.used == 1000 and pool.items == 100
    assert b.peak == 1200 and b.releases == 3


def test_budget_is_per_run_and_stays_out_of_the_manifest():
    from analyzer.pipeline import Options
    from reassembly.limits import Limits

    lim = Limits()
    assert lim.budget is None and lim.memory_limit_bytes == DEFAULT_MEMORY_LIMIT
    run1, run2 = lim.with_budget(), lim.with_budget()
    assert run1.budget is not run2.budget and run1.with_budget() is run1
    assert Limits(memory_limit_bytes=0).with_budget().budget is None
    assert "budget" not in Options().as_json()["limits"]


# ------------------------------------------------------------------------ the targets


def _accounted(r: dict, flows: int) -> None:
    assert r["flow_count"] == flows, r["flow_count"]
    assert not r["accounting_errors"], r["accounting_errors"]


DEFAULT_FLOOD = 1_000_000 if os.environ.get("MSGCAP_HOSTILE_FULL") == "1" else 200_000
BUDGET_FLOOD, BUDGET_LIMIT = 25_000, 2 * 2**20


@pytest.fixture(scope="module")
def syn_flood_runs(tmp_path_factory) -> dict:
    """The two pipeline runs over SYN floods (``default``, ``budget``), as jobs of one
    child: one interpreter start and one import of the pipeline instead of two.  The
    child resets its peak before each job; the default run, whose peak is asserted, is
    the first."""
    d = tmp_path_factory.mktemp("synflood")
    jobs = []
    for name, flows, limits in (("default", DEFAULT_FLOOD, {}),
                                ("budget", BUDGET_FLOOD, {"memory_limit_bytes": BUDGET_LIMIT})):
        path = d / f"{name}.pcap"
        write_syn_flood(path, flows)
        jobs.append((path, d / f"out-{name}",
                     {"rows_per_kind": 2, "max_flow_rows": 0, "limits": limits}))
    return dict(zip(("default", "budget"), dissect_in_child(jobs), strict=True))


def test_half_open_flows_at_default_settings(syn_flood_runs):
    """200,000 SYNs (the default flow cap, 750 MB before); 1,000,000 with
    ``MSGCAP_HOSTILE_FULL=1`` (~100 s of CPU, so not in the default run).  Half-open
    flows are held young (``HALF_OPEN_FLOW_BYTES`` each), so the default budget holds
    more of them than the default flow cap: the cap, not the budget, evicts here."""
    flows = DEFAULT_FLOOD
    cap = Limits().max_flows
    assert cap < DEFAULT_MEMORY_LIMIT // HALF_OPEN_FLOW_BYTES
    r = syn_flood_runs["default"]
    assert r["peak_mb"] <= PEAK_MB, r["peak_mb"]
    # every flow has its row; each one evicted to make room has its anomaly as well
    _accounted(r, flows)
    assert r["anomalies"].get("limit.flow_table", 0) == flows - cap, r["anomalies"]
    assert "limit.memory" not in r["anomalies"]
    if flows > cap:
        (row, _) = r["anomaly_rows"]["limit.flow_table"]
        assert row["detail"].startswith(f"flow table full ({cap} flows); evicted flow 0 "), row


def test_half_open_flows_evicted_by_the_budget(syn_flood_runs):
    """25,000 SYNs under a 2 MiB budget: it holds 2 MiB / ``HALF_OPEN_FLOW_BYTES`` young
    flows, and each flow past that evicts the least recently active one.  (It was 100,000
    under 8 MiB: a quarter of both keeps the ratio, about 3.8 flows for each one the
    budget holds, and the claim, the count held and one eviction per flow past it, holds
    at any scale; no peak is asserted here, the default run above bounds that.)"""
    flows, limit = BUDGET_FLOOD, BUDGET_LIMIT
    held = limit // HALF_OPEN_FLOW_BYTES
    assert flows > 3 * held
    r = syn_flood_runs["budget"]
    _accounted(r, flows)
    assert r["anomalies"].get("limit.memory") == flows - held, r["anomalies"]
    assert "limit.flow_table" not in r["anomalies"]
    first, second = r["anomaly_rows"]["limit.memory"]
    assert first["detail"].startswith(f"memory budget of {limit} bytes reached with {held} "
                                      "flows held; evicted flow 0 10.0.0.0:1024->10.9.9.9:4222 "
                                      "idle since frame 1"), first
    assert "evicted flow 1 10.0.0.1:1025->" in second["detail"], second


def test_120_flows_each_holding_3_8_mib_out_of_order(tmp_path):
    """120 flows each holding 3.8 MiB out of order (456 MiB in all) at default settings:
    the budget flushes the oldest buffers and the peak stays under the target.  It was 240
    flows (912 MiB, 1,066 MB peak before the budget); half of them still holds more than
    the target can: without a run-wide budget the peak would be the interpreter's
    ~140 MB plus every buffer, ~600 MB by the same proportion, so the bound still fails
    what it was written against, at half the packets to push through."""
    flows = 120
    path = tmp_path / "ooo.pcap"
    facts = write_out_of_order_flows(path, flows, int(3.8 * 1024 * 1024))
    assert flows * facts["buffered"] > 400 * 2**20
    r = dissect_one(path, tmp_path, rows_per_kind=3)
    assert r["peak_mb"] <= PEAK_MB, r["peak_mb"]
    _accounted(r, flows)
    # no flow is over the per-direction limit: only the budget flushes buffers
    assert "limit.reorder_buffer" not in r["anomalies"]
    flushed = r["anomalies"]["limit.memory"]
    assert flows - 40 <= flushed < flows, flushed  # the last few fit (80 MiB: ~21 x 3.8)
    row = r["anomaly_rows"]["limit.memory"][0]
    assert f"({facts['buffered']} bytes in {facts['pieces']} pieces)" in row["detail"], row
    for f in r["flows"]:  # nothing buffered was lost: one segment of gap, the rest data
        assert (f["stream_bytes_c2s"], f["gap_bytes_c2s"]) == (facts["buffered"], 1400), f


def test_8000_incomplete_64_kb_fragmented_datagrams(tmp_path):
    path = tmp_path / "frags.pcap"
    write_incomplete_fragments(path, 8000)
    r = dissect_one(path, tmp_path, rows_per_kind=2)
    assert r["peak_mb"] <= PEAK_MB, r["peak_mb"]
    dropped = r["anomalies"]["limit.memory"]
    incomplete = r["anomalies"]["ip.frag_incomplete"]
    assert dropped + incomplete == 8000, r["anomalies"]  # every datagram is reported once
    assert dropped > 6000, dropped  # most had to go: 8,000 x 64 KiB is 4x the budget
    assert "limit.fragment_table" not in r["anomalies"]
    row = r["anomaly_rows"]["limit.memory"][0]
    assert "dropped incomplete IPv4 10.1.0.1 -> 10.1.0.2 id 0x0000 proto 17" in row["detail"]
    assert "43 fragments, 63640 bytes of unknown (last fragment missing)" in row["detail"]


_PER_FLOW = """
import json, sys
from reassembly.capture import open_capture
from reassembly.engine import Reassembler
from reassembly.limits import Limits
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024
with open_capture(sys.argv[1]) as reader:
    r = Reassembler(Limits(max_flows=10**7, memory_limit_bytes=0))
    base = rss()
    for fr in reader:
        p = r.network.decode(fr)
        r.flows.tcp(p.src, p.dst, p.payload, p.ts_ns, p.frame, p.vlans, 0)
    print(json.dumps({"flows": len(r.flows), "per_flow": (rss() - base) / len(r.flows)}))
"""


def test_a_held_flow_costs_no_more_than_the_budget_charges_for_it(tmp_path):
    """RSS per half-open flow held in the flow table (300,000 SYNs, no budget, in a child):
    the budget's ``HALF_OPEN_FLOW_BYTES`` must not undercount it.  Measured: 2,459 bytes
    before the flow state was made lean, 1,107 after, 188 held young (a record)."""
    import json
    import subprocess
    import sys

    from tests.hostile.conftest import REPO

    path = tmp_path / "syn.pcap"
    write_syn_flood(path, 300_000)
    proc = subprocess.run([sys.executable, "-c", _PER_FLOW, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["flows"] == 300_000
    assert 120 < res["per_flow"] <= HALF_OPEN_FLOW_BYTES < FLOW_BYTES, res


OPEN_CONNECTIONS = 20_000


def test_open_connections_at_default_settings(tmp_path):
    """20,000 NATS client connections set up (INFO, CONNECT, PING, PONG) and left open, at
    default settings: each holds its flow, the conveyor's state and a dissector session
    to the end.  Charged 1,280 bytes a flow (the flow table's part only), 20,000 idle
    connections peaked at 752 MB (~32 KB each); the budget now charges a flow dissected
    here ``FLOW_BYTES``, so past 80 MiB / 16 KiB (5,120 flows, fewer with the windows)
    the least recently active flows are evicted, each with its row and a ``limit.memory``
    row, and the peak stays under the target."""
    from samples.hostile.generate import write_nats_connections

    flows = OPEN_CONNECTIONS
    path = tmp_path / "open.pcap"
    write_nats_connections(path, flows)
    r = dissect_one(path, tmp_path, rows_per_kind=1, max_flow_rows=0)
    assert r["peak_mb"] <= PEAK_MB, r["peak_mb"]
    _accounted(r, flows)
    evicted = r["anomaly_patterns"].get(
        "limit.memory: memory budget of N bytes reached with N flows held; evicted flow N "
        "N.N.N.N:N->N.N.N.N:N idle since frame N", 0)
    held = DEFAULT_MEMORY_LIMIT // FLOW_BYTES
    assert flows - held <= evicted < flows, r["anomaly_patterns"]


def test_a_flow_another_process_dissects_is_charged_the_flow_tables_part_only():
    """With ``owns`` (``--workers``, Spark tasks), a full flow this process does not
    dissect has no session here: charged ``LIGHT_FLOW_BYTES``, the others ``FLOW_BYTES``,
    from their promotion out of the young table to their removal."""
    from dataclasses import replace

    from reassembly.flows import FlowTable
    from tests.reassembly.synth import ACK, SYN, tcp_frame

    budget = MemoryBudget(1 << 30)
    table = FlowTable(replace(Limits(), budget=budget), [].append,
                      owns=lambda flow_id: flow_id % 2 == 0)
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    for f in range(4):  # SYN (young), SYN/ACK (full: promoted)
        port = 40000 + f
        table.tcp(c, s, tcp_frame(c, s, port, 4222, 999, 0, SYN)[34:], 1 + f, 1 + 2 * f)
        table.tcp(s, c, tcp_frame(s, c, 4222, port, 5000, 1000, SYN | ACK)[34:], 2 + f, 2 + 2 * f)
    assert budget.used == 2 * FLOW_BYTES + 2 * LIGHT_FLOW_BYTES
    table.close_all()
    assert budget.used == 0


def test_closed_connections_lingering_at_default_settings(tmp_path):
    """8,000 NATS connections closed (FIN both ways) one a millisecond: all of them are
    still in their 10 s linger at the end.  Charged in full they would pass the default
    budget (8,000 x 16 KiB) and be given up with ``limit.memory`` rows in a clean
    capture; a closing flow is charged ``LIGHT_FLOW_BYTES`` (``FlowTable._charge``)."""
    from samples.hostile.generate import write_nats_connections

    flows = 8_000
    assert flows * FLOW_BYTES > DEFAULT_MEMORY_LIMIT
    path = tmp_path / "closed.pcap"
    write_nats_connections(path, flows, close=True)
    r = dissect_one(path, tmp_path, rows_per_kind=1, max_flow_rows=0)
    _accounted(r, flows)
    assert not r["anomalies"], r["anomaly_patterns"]


_CLI_PEAK = """
import atexit, sys
def peak():
    with open("/proc/self/status") as f:
        print(next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024)
atexit.register(peak)
from analyzer import cli
sys.argv = ["msgcap", "dissect", *sys.argv[1:]]
cli.main()
"""


def test_an_open_connection_costs_no_more_than_the_budget_charges_for_it(tmp_path):
    """Peak RSS of ``msgcap dissect --memory-limit 0`` (no budget) over 3,000 and 12,000
    open NATS connections (``write_nats_connections``), each in a process of its
    own: what the 9,000 more connections add, per connection, must not pass what the
    budget charges a flow dissected here (``FLOW_BYTES``).  Measured 2026-11-28: ~32 KB
    before the scan's column buffers, the framers and their empty queues were made lean,
    14.3 KB after (Arrow on jemalloc, as the command sets it up; a Python caller of
    ``dissect_capture`` whose pyarrow kept its default allocator measured 17.7 KB)."""
    import subprocess
    import sys

    from samples.hostile.generate import write_nats_connections
    from tests.hostile.conftest import REPO

    peaks = {}
    for n in (3_000, 12_000):
        path = tmp_path / f"open{n}.pcap"
        write_nats_connections(path, n)
        proc = subprocess.run([sys.executable, "-c", _CLI_PEAK, str(path), "-o",
                               str(tmp_path / f"out{n}"), "-q", "--memory-limit", "0"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        peaks[n] = int(proc.stdout.split()[-1])
    per_flow = (peaks[12_000] - peaks[3_000]) / 9_000
    assert LIGHT_FLOW_BYTES < per_flow <= FLOW_BYTES, (per_flow, peaks)


def test_a_half_open_flow_holds_no_stream_state_until_it_needs_it():
    """A SYN leaves one young record (no FlowInfo, no TCP state, no endpoints); made full
    (here: put to sleep, idle past the timeout) it has a tracker (sequence base only) on
    its side, nothing on the other and no counter lists; the first data wakes it and grows
    the tracker into a reassembler that keeps its base, and only the counters that were
    touched are made."""
    from reassembly.flows import FlowTable
    from reassembly.limits import SECOND_NS
    from reassembly.tcp import TcpHalfStream, TcpHalfTracker
    from tests.reassembly.synth import ACK, SYN, tcp_frame

    events: list = []
    table = FlowTable(Limits(), events.append)
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    seg = tcp_frame(c, s, 40000, 4222, 999, 0, SYN)[34:]  # the TCP segment of the frame
    table.tcp(c, s, seg, 1, 1)
    assert len(table) == 1 and not table._open and not table._tcp_keys
    (rec,) = table._young_keys.values()
    assert type(rec) is bytes and len(rec) == 47 + 12
    later = 1 + 301 * SECOND_NS  # idle past the 300 s timeout: asleep, in its full form
    table.expire(later)
    (conn,) = table._asleep.values()
    assert type(conn.c2s) is TcpHalfTracker and conn.c2s.base == 1000 and conn.s2c is None
    assert len(table) == 1 and not table._young_keys
    info = conn.info
    assert (info.flow_id, info.packets, str(info.client), str(info.server)) == (
        0, [1, 0], "10.0.0.1:40000", "10.0.0.2:4222")
    assert (info._payload_bytes, info._stream_bytes, info._gap_bytes, info._mid_stream,
            info._overlap_conflicts) == (None,) * 5
    ping = tcp_frame(c, s, 40000, 4222, 1000, 0, ACK, b"PING\r\n")[34:]
    table.tcp(c, s, ping, later, 2)  # continues the sequence: the same flow wakes
    assert list(table._open.values()) == [conn]
    assert type(conn.c2s) is TcpHalfStream and conn.c2s.base == 1000
    # its ACK is news for the other side (what it acknowledged, its window): a stream
    assert type(conn.s2c) is TcpHalfStream and conn.s2c.base == 0
    assert [(type(e).__name__, getattr(e, "data", None)) for e in events] == [
        ("StreamData", b"PING\r\n")]
    assert info._gap_bytes is None and info.stream_bytes == [6, 0]


def test_memory_limit_option_of_msgcap_dissect(tmp_path):
    import json
    import subprocess
    import sys

    from tests.hostile.conftest import REPO

    sample = REPO / "samples" / "nats-basic.pcap"

    def msgcap(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "analyzer.cli", "dissect", str(sample),
                               "-q", *args], cwd=REPO, capture_output=True, text=True)

    ok = msgcap("-o", str(tmp_path / "a"), "--memory-limit", "64M")
    assert ok.returncode == 0, ok.stderr
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["options"]["limits"]["memory_limit_bytes"] == 64 * 1024 * 1024
    assert "budget" not in manifest["options"]["limits"]
    bad = msgcap("-o", str(tmp_path / "b"), "--memory-limit", "12x")
    assert bad.returncode == 2
    assert "error: argument --memory-limit: '12x' is not a size" in bad.stderr
    assert "fix: " in bad.stderr and "Traceback" not in bad.stderr


def test_msgcap_dissect_says_when_the_budget_was_reached(tmp_path, capsys):
    """The run summary names the budget and the option when ``limit.memory`` rows were
    written (200 open connections under 1 MiB: flows evicted), and nothing of it when
    none were; ``--help`` gives what an open connection counts and how many fit."""
    from analyzer import cli
    from analyzer.testing import dissect_with_cli
    from samples.hostile.generate import write_nats_connections

    path = tmp_path / "open.pcap"
    write_nats_connections(path, 200)
    tight = dissect_with_cli(path, tmp_path / "a", "--memory-limit", "1M")
    assert tight.returncode == 1, tight.stderr
    hint = (f"limit.memory: the run's memory budget (1 MiB) was reached, and what was given "
            f"up is in those rows (docs/robustness.md); to hold more, give --memory-limit "
            f"more (an open connection counts {FLOW_BYTES // 1024} KiB)")
    assert hint in " ".join(tight.stderr.split()), tight.stderr
    roomy = dissect_with_cli(path, tmp_path / "b")
    assert roomy.returncode == 0 and "limit.memory" not in roomy.stderr, roomy.stderr
    with pytest.raises(SystemExit):
        cli.main(["dissect", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    fit = round(DEFAULT_MEMORY_LIMIT / FLOW_BYTES, -3)
    assert (f"an open connection counts {FLOW_BYTES // 1024} KiB, so ~{fit:,.0f} fit"
            in helped), helped


def test_websocket_inflaters_draw_from_the_budget(tmp_path):
    """Two permessage-deflate flows, a budget with room for one inflater (48 KiB): when
    the second is created, the first flow's (the least recently used) is given up; and
    a budget too small for any inflater gives up each one as it is created, cleanly."""
    import zlib
    from dataclasses import replace

    from dissectors.sdk.testing import PcapFlow, write_pcap
    from reassembly.engine import read_events
    from reassembly.events import Anomaly, StreamData
    from reassembly.limits import Limits
    from reassembly.websocket import INFLATER_BYTES
    from tests.tls.helpers import C, S
    from tests.websocket.test_websocket import cframe, request, response

    def message(text: bytes) -> bytes:
        comp = zlib.compressobj(wbits=-15)
        return (comp.compress(text) + comp.flush(zlib.Z_SYNC_FLUSH))[:-4]

    ext = "permessage-deflate"
    flows = [PcapFlow([(C, request(ext=ext)), (S, response(ext)),
                       (C, cframe(message(b"PING\r\n" * n), rsv1=True))], 8080)
             for n in (1, 2)]
    pcap = write_pcap(tmp_path / "two.pcap", flows)
    # room for one inflater and the two flows (no overlap-check windows: this is about the
    # inflaters; windows are given up after the buffers, reassembly.tcp._Window)
    limits = replace(Limits(), memory_limit_bytes=INFLATER_BYTES + 2 * FLOW_BYTES + 4096,
                     overlap_check_bytes=0)
    evs = list(read_events(pcap, limits))
    (a,) = [e for e in evs if isinstance(e, Anomaly) and e.kind == "limit.memory"]
    assert a.flow.flow_id == 0 and a.direction == C
    assert "gave up the c2s permessage-deflate inflater" in a.detail
    data = {e.flow.flow_id: e.data for e in evs if isinstance(e, StreamData) and e.direction == C}
    assert data == {0: b"PING\r\n", 1: b"PING\r\n" * 2}  # what was inflated stays
    from reassembly.events import StreamClose

    evs = list(read_events(pcap, replace(Limits(), memory_limit_bytes=1024,
                                         overlap_check_bytes=0)))
    memory = [e for e in evs if isinstance(e, Anomaly) and e.kind == "limit.memory"]
    # each inflater given up once as it is created; flow 0 evicted when flow 1 came; the
    # last flow is never evicted (it is the one being worked on)
    assert [(e.flow.flow_id, "inflater" in e.detail) for e in memory] == [
        (0, True), (0, False), (1, True)]
    assert [e.flow.flow_id for e in evs if isinstance(e, StreamClose)] == [0, 1]


def test_tls_bytes_held_for_the_server_hello_draw_from_the_budget(tmp_path):
    """A TLS connection whose ServerHello has not come holds its bytes (to decrypt them
    once keys are known): they count in the run's budget, and past it the connection is
    passed on undecrypted (``memory-limit``) with a ``limit.memory`` row, nothing lost."""
    from dataclasses import replace

    from reassembly.capture import open_capture
    from reassembly.engine import Reassembler
    from reassembly.events import Anomaly, TlsConnection
    from reassembly.limits import Limits
    from reassembly.tls import TlsLayer
    from tests.tls.helpers import C, S, flow_pcap
    from tests.tls.synth import Tls13Conn
    from tests.tls.test_layer import _plain, conn_bytes

    conn = Tls13Conn()
    hello = conn.c_hello()
    early = conn.app("c", b"x" * 1500) + conn.app("c", b"y" * 1500)  # protected: held
    script = [(C, hello), (C, early), (S, conn.s_flight())]
    pcap = flow_pcap(tmp_path, script)
    # room for the flow and 1,000 held bytes: the hello fits, the early data does not
    limits = replace(Limits(), memory_limit_bytes=FLOW_BYTES + 1000,
                     overlap_check_bytes=0).with_budget()  # no windows: the TLS bytes alone
    assert len(hello) < 1000 < len(hello) + len(early)
    with open_capture(pcap) as reader:
        evs = list(TlsLayer(limits).process(Reassembler(limits).process(reader)))
    anomalies = [e for e in evs if isinstance(e, Anomaly)]
    assert [e.kind for e in anomalies][:2] == ["limit.memory", "tls.undecryptable"]
    assert anomalies[0].detail == (
        f"memory budget of {FLOW_BYTES + 1000} bytes reached: gave up waiting for the "
        "ServerHello of TLS connection 10.0.0.1:40000->10.0.0.2:4222, the least recently "
        # the hello and the first 1,460-byte segment of the early data: past the budget
        f"active, and passed on undecrypted the bytes held (c2s {len(hello) + 1460})")
    (summary,) = [e for e in evs if isinstance(e, TlsConnection)]
    assert summary.undecrypted_reason == "memory-limit" and not summary.decrypted
    assert _plain(evs, C) == conn_bytes(script, C)  # passed on unchanged
    assert limits.budget is not None and limits.budget.used == 0  # all given back at the end


def test_framer_buffers_draw_from_the_budget():
    """Two Pulsar connections each buffering most of a 200,000-byte frame, a budget with
    room for one: the first (the least recently fed) gives its partial frame up (a
    ``limit.memory`` row, its bytes undecoded, the rest skipped as it streams past) and
    parses on after it; the second frame is decoded whole."""
    from reassembly.events import Direction
    from tests.pulsar.test_frames import MD
    from tests.pulsar.wire import Run, cmd, frame, metadata

    budget = MemoryBudget(150_000)
    big = frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), b"x" * 200_000)
    ping = frame(cmd("PING"))
    a, b = Run({"memory_budget": budget}), Run({"memory_budget": budget})
    C = Direction.C2S
    a.feed(C, big[:100_000])
    assert budget.used == 100_000 and a.anomalies() == []
    b.feed(C, big[:100_000])  # 200,000 > 150,000: a's buffer is the oldest
    assert budget.used == 100_000 and budget.releases == 1
    a.feed(C, big[100_000:] + ping).close()
    b.feed(C, big[100_000:]).close()
    assert a.anomalies() == ["limit.memory"]
    (row,) = [r for r in a.all_records() if r.table == "anomalies"]
    assert (row.offset_start, row.offset_end) == (0, 100_000)
    assert row.values["detail"] == (
        f"memory budget of 150000 bytes reached: dropped the 100000 bytes buffered of a "
        f"{len(big)}-byte unit (this direction's framer buffer, the least recently fed); the "
        "rest of the unit is skipped, parsing resumes where it ends")
    assert [r["command"] for r in a.rows()] == ["PING"]  # parsing went on after the frame
    assert a.session.undecoded_bytes[C] == len(big) and a.session.decoded_bytes[C] == len(ping)
    assert [r["command"] for r in b.rows()] == ["SEND"] and b.anomalies() == []
    assert budget.used == 0  # closed sessions hold nothing


def test_msgcap_dissect_gives_its_budget_to_the_dissector_sessions(tmp_path):
    """The pipeline hands the run's budget to the sessions (``options["memory_budget"]``):
    a Pulsar connection whose two directions each buffer 3 MB of an unfinished 4 MB frame,
    under ``--memory-limit 4M``, gives up the client's (the least recently fed) partial
    frame with a ``limit.memory`` row; the server's is cut by the end of the stream."""
    from analyzer.testing import dissect_with_cli
    from dissectors.sdk.testing import PcapFlow, write_pcap
    from tests.pulsar.test_frames import MD
    from tests.pulsar.wire import cmd, frame, metadata

    big = frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), b"x" * 4_000_000)
    pcap = write_pcap(tmp_path / "p.pcap", [PcapFlow([(0, big[:3_000_000]),
                                                      (1, big[:3_000_000])], 6650)])
    run = dissect_with_cli(pcap, tmp_path / "out", "--memory-limit", "4M", "-q")
    assert run.returncode == 1, run.stderr
    rows = [(a["kind"], a["direction"], a["detail"]) for a in run.tables["anomalies"]
            if a["kind"] in ("limit.memory", "pulsar.eof_in_frame")]
    assert rows == [
        ("limit.memory", "c2s",
         f"memory budget of {4 * 2**20} bytes reached: dropped the 3000000 bytes buffered of "
         f"a {len(big)}-byte unit (this direction's framer buffer, the least recently fed); "
         "the rest of the unit is skipped, parsing resumes where it ends"),
        ("pulsar.eof_in_frame", "s2c",
         f"partial frame of {len(big)} bytes cut by the end of the stream after 3000000 bytes"),
    ], rows


def test_pulsar_decompression_draws_from_the_budget():
    """A compressed Pulsar payload holds the size it declares while it is decompressed:
    an older holder gives its memory back to make room; a payload the budget cannot make
    room for is not decompressed (``limit.memory``, message row incomplete)."""
    import zlib

    from reassembly.events import Direction
    from tests.pulsar.test_frames import MD
    from tests.pulsar.wire import Run, cmd, frame, metadata

    log: list = []
    budget = MemoryBudget(100_000)
    older = _Holder(budget, "reorder buffer", log)
    budget.hold(older, 60_000)

    def send(data: bytes) -> bytes:
        md = metadata(**MD, compression=2, uncompressed_size=len(data))
        return frame(cmd("SEND", producer_id=1, sequence_id=11), md, zlib.compress(data))

    small, large = b"a" * 80_000, b"b" * 200_000
    run = Run({"memory_budget": budget}).feed(Direction.C2S, send(small) + send(large)).close()
    assert log == [("reorder buffer", 40_000)]  # made room for the first payload
    first, second = run.messages()
    assert (first["payload_len"], first.get("incomplete")) == (80_000, False)
    assert second["incomplete"] is True and "payload_len" not in second
    (row,) = [r for r in run.all_records() if r.table == "anomalies"]
    assert (row.values["kind"], row.values["detail"]) == (
        "limit.memory", f"memory budget of 100000 bytes reached: a payload of "
        f"{len(zlib.compress(large))} compressed bytes (200000 bytes to decompress) was not "
        "decompressed")
    assert budget.used == 0


def test_quic_crypto_reorder_buffers_draw_from_the_budget():
    """CRYPTO data ahead of a hole waits in the same reassembler as TCP, under the run's
    budget: past it the buffer is flushed (``limit.memory``), the hole is a gap, and the
    handshake of that level is reported unreadable."""
    from dataclasses import replace

    from reassembly.events import Anomaly
    from reassembly.limits import Limits
    from reassembly.quic.connection import CLIENT, SPACE_INITIAL, QuicConnection
    from reassembly.quic.keylog import KeyLog
    from tests.quic.helpers import make_flow

    events: list = []
    limits = replace(Limits(), memory_limit_bytes=4000, overlap_check_bytes=0).with_budget()
    conn = QuicConnection(make_flow(), limits, events.append, KeyLog(), lambda *a: None)
    conn._crypto_data(SPACE_INITIAL, CLIENT, 1000, b"x" * 5000)  # offset 0-999 missing
    kinds = [(e.kind, e.detail.split(";")[0]) for e in events if isinstance(e, Anomaly)]
    assert kinds == [
        ("limit.memory", "memory budget of 4000 bytes reached: flushed the out-of-order buffer "
         "of this direction, the least recently active (5000 bytes in 1 pieces)"),
        ("quic.crypto_gap", "client CRYPTO stream (Initial) lost 1000 bytes at offset 0 "
         "(memory-limit)")], kinds
    assert limits.budget is not None and limits.budget.used == 0

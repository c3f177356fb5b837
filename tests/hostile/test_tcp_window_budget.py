"""The TCP overlap-check window (the last ``overlap_check_bytes`` each direction delivered,
kept to compare retransmissions of delivered bytes) draws from the run's memory budget
(issue 17 part 2): many connections each with a full window used to grow past any bound.

Past the budget, after the buffers, the least recently grown window is given up for good
(one ``limit.memory`` row per direction): no stream byte is lost, only the comparison of
later retransmissions (reassembly.tcp._Window, reassembly.limits.RECLAIM_ORDER)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from reassembly.engine import read_events
from reassembly.events import Anomaly, StreamData, StreamGap
from reassembly.flows import FLOW_BYTES
from reassembly.limits import Limits
from samples.hostile.generate import Conversation
from tests.hostile.conftest import dissect_one
from tests.hostile.test_framer_budget import ABOVE_BASELINE_MB, write_unfinished_lines
from tests.hostile.test_hostile import _clean_accounting
from tests.reassembly.synth import PcapWriter

WINDOW_TEXT = ("dropped the overlap-check window of this direction, the least recently grown "
               "({n} bytes); from here on, retransmissions of bytes already delivered in this "
               "direction are not compared")


def _write_flows(path: Path, flows: int, nbytes: int) -> None:
    """``flows`` connections that each send ``nbytes`` in order (all open at once), then,
    flow by flow, a retransmission of their first 100 bytes with different content."""
    w = PcapWriter(path)
    convs = []
    for f in range(flows):
        conv = Conversation(w, 20_000 + f, 4222, t_us=1_700_000_000_000_000 + f * 100)
        conv.handshake().send(0, b"a" * nbytes)
        convs.append(conv)
    for conv in convs:
        conv.t += 1_000_000
        conv.send_at(0, nbytes - 100, b"b" * 100)  # delivered already: compared if kept
        conv.fin()
    w.close()


def test_windows_are_given_up_least_recently_grown_first_and_nothing_is_lost(tmp_path):
    """Ten flows each delivering 20,000 bytes (a 32 KiB window charge each) under a
    budget with room for the flows and about four windows: the six oldest windows are
    given up with one row each, every byte is delivered, no gap; a retransmission that
    differs is reported only on the flows that kept their window."""
    path = tmp_path / "ten.pcap"
    _write_flows(path, 10, 20_000)
    limits = replace(Limits(), memory_limit_bytes=10 * FLOW_BYTES + 4 * 32768 + 1000)
    evs = list(read_events(path, limits))
    memory = [e for e in evs if isinstance(e, Anomaly) and e.kind == "limit.memory"]
    assert [e.flow.flow_id for e in memory] == [0, 1, 2, 3, 4, 5]
    assert all(e.detail.endswith(WINDOW_TEXT.format(n=20_000)) for e in memory), memory[0]
    assert not [e for e in evs if isinstance(e, StreamGap)]
    delivered = {}
    for e in evs:
        if isinstance(e, StreamData):
            delivered[e.flow.flow_id] = delivered.get(e.flow.flow_id, 0) + len(e.data)
    assert delivered == {f: 20_000 for f in range(10)}
    conflicts = sorted(e.flow.flow_id for e in evs
                       if isinstance(e, Anomaly) and e.kind == "tcp.overlap_conflict")
    assert conflicts == [6, 7, 8, 9]


def test_without_pressure_no_window_is_given_up(tmp_path):
    path = tmp_path / "ten.pcap"
    _write_flows(path, 10, 20_000)
    evs = list(read_events(path, Limits()))
    assert not [e for e in evs if isinstance(e, Anomaly) and e.kind == "limit.memory"]
    conflicts = [e for e in evs if isinstance(e, Anomaly) and e.kind == "tcp.overlap_conflict"]
    assert len(conflicts) == 10


def test_many_nats_connections_with_full_windows_stay_within_the_budget(tmp_path, baseline_mb):
    """2,500 NATS client connections each delivering a 60 KB INFO line with no LF, all
    open at once, at default settings: flows x (a 64 KiB window + the framer's line).
    4,000 peaked at 611 MB when the windows were not counted; now the budget gives
    windows and lines back: the peak stays under the issue's 400 MB (checked above a
    trivial run's peak, ``ABOVE_BASELINE_MB``), bytes accounted.
    (4,000 peaked at 364 MB here but 405 MB in a fresh-clone CI run: what is off the
    budget, ~15 KB an idle NATS session, grows with the flows; 2,500 keeps a margin.)"""
    flows = 2500
    path = tmp_path / "lines.pcap"
    facts = write_unfinished_lines(path, flows)
    r = dissect_one(path, tmp_path, rows_per_kind=1, max_flow_rows=10)
    print(r["peak_mb"], r["cpu_s"], r["anomalies"])
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb <= ABOVE_BASELINE_MB, (r["peak_mb"], baseline_mb)
    patterns = r["anomaly_patterns"]
    windows = sum(n for p, n in patterns.items() if "dropped the overlap-check window" in p)
    lines = sum(n for p, n in patterns.items() if "bytes buffered of an unfinished line" in p)
    assert windows > 0 and lines > 0, patterns
    assert windows + lines == r["anomalies"]["limit.memory"], patterns
    assert windows <= 2 * flows  # one per direction at most
    assert r["flow_count"] == flows
    for f in r["flows"]:
        assert f["stream_bytes_s2c"] == facts["s2c"]

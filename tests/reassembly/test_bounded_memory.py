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

"""Byte accounting, cross-checked against the anomalies table, on every shared capture.

tests/analyzer/test_nats_end_to_end.py checks decoded + undecoded + gap = stream length
per flow direction.  This adds the other half of "never silent": every byte a flow
reports missing is in a ``tcp.gap`` / ``quic.stream_gap`` row of that flow and
direction, and every such row is counted in the flow (the hostile suite checks the same
through tests/hostile/child.py)."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq

from analyzer.pipeline import Options, dissect_capture
from tests.conftest import SHARED

CAPTURES = SHARED / "captures"
KEYS = sorted(json.loads((CAPTURES / "expected.json").read_text()))


def _table(out, name):
    return pq.read_table(next((out / name).rglob("*.parquet"))).to_pylist()


def test_gap_rows_add_up_to_the_missing_bytes_of_every_flow(tmp_path):
    problems = []
    gaps_seen = 0
    for i, key in enumerate(KEYS):
        out = tmp_path / str(i)
        dissect_capture(CAPTURES / key, out, Options(strict=True))
        rows: Counter = Counter()
        for a in _table(out, "anomalies"):
            if a["kind"] in ("tcp.gap", "quic.stream_gap"):
                rows[(a["flow_id"], a["direction"])] += a["nbytes"]
                gaps_seen += 1
        for f in _table(out, "flows"):
            for d in ("c2s", "s2c"):
                if rows.pop((f["flow_id"], d), 0) != f[f"gap_bytes_{d}"]:
                    problems.append((key, f["flow_id"], d))
        problems += [(key, *k, "row for no flow") for k in rows]
    assert problems == []
    assert gaps_seen > 0  # the shared captures do have gaps

"""STAN and Liftbridge through the real pipeline (`msgcap dissect`), not the harness.

The harness tests compare the payload dissectors with the recorders' truth; these check
that the pipeline wires them the same way: every carried message offered once with its
whole payload, one scope per NATS server, child rows pointing at their NATS row.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pytest

from analyzer.pipeline import Options, dissect_capture
from tests.stan.capture_harness import SAMPLES, dispatch_capture


def _table(out, name):
    return ds.dataset(out / name, partitioning="hive").to_table().to_pylist()


@pytest.mark.parametrize(
    ("capture", "tables"),
    [
        ("stan-basic.pcap", ("stan",)),
        ("liftbridge-basic.pcap", ("liftbridge", "liftbridge_entries")),
    ],
)
def test_pipeline_rows_equal_the_dispatcher_on_the_same_capture(tmp_path, capture, tables):
    out = tmp_path / "out"
    # a small payload cap must not reach the payload dissectors: they get whole payloads
    dissect_capture(SAMPLES / capture, out, Options(strict=True, validate=True, payload_cap=16))
    carried, _ = dispatch_capture(SAMPLES / capture)
    want = Counter(
        (r.table, r.values.get("msg_type"))
        for c in carried
        for rec in c.records
        for r in [rec, *rec.children]
        if r.table != "anomalies"
    )
    got = Counter()
    nats = {r["record_id"]: r for r in _table(out, "nats")}
    for name in tables:
        for row in _table(out, name):
            got[(name, row.get("msg_type"))] += 1
            parent = nats.get(row["parent_record_id"])
            if name == "liftbridge_entries":
                continue  # children of liftbridge rows, checked through them
            assert parent is not None and parent["op"] in ("PUB", "HPUB", "MSG", "HMSG")
            assert parent["flow_id"] == row["flow_id"]
            assert (parent["offset_start"], parent["frame_last"]) == (
                row["offset_start"],
                row["frame_last"],
            )
    assert got == want
    assert sum(got.values()) > 0

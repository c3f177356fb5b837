"""Flows joined late whose roles are swapped give the same dataset with the native
engine as with the reference reassembler (``MSGCAP_NATIVE_ENGINE=0``), record ids and
anomaly frames included.  The engine reads a batch of records ahead, so an anomaly
emitted among the events at the swap used to land later (record 41 instead of 3 on the
cut nats-js.pcap) and carry the flow's last packet instead of the evidence's (frame 27
instead of 2); the ``flow.roles_swapped`` row is now handed over at the swap
(``RoleSwaps(immediate=True)``), with the frame of the bytes that showed the roles."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options, dissect_capture
from tests.analyzer.test_late_join import _js_cut
from tests.spark.test_late_join import _ws_cut


def _dataset(path: Path, out: Path) -> dict[str, list[dict]]:
    dissect_capture(path, out, Options(strict=True))
    return {d.name: pq.read_table(d).to_pylist() for d in sorted(out.iterdir()) if d.is_dir()}


@pytest.mark.parametrize("cut", ["nats-js", "nats-ws"])
def test_engine_and_reference_write_the_same_rows(cut, tmp_path, monkeypatch):
    pcap = _js_cut(tmp_path)[0] if cut == "nats-js" else _ws_cut(tmp_path)
    monkeypatch.setenv("MSGCAP_NATIVE_ENGINE", "1")
    engine = _dataset(pcap, tmp_path / "engine")
    monkeypatch.setenv("MSGCAP_NATIVE_ENGINE", "0")
    reference = _dataset(pcap, tmp_path / "reference")
    assert engine == reference
    (swap,) = [a for a in reference["anomalies"] if a["kind"] == "flow.roles_swapped"]
    rows = [r for t in ("nats", "websocket") for r in reference.get(t, [])
            if r["flow_id"] == swap["flow_id"]]
    before = [r["frame_last"] for r in rows if r["record_id"] < swap["record_id"]]
    after = [r["frame_first"] for r in rows if r["record_id"] > swap["record_id"]]
    if cut == "nats-js":  # detection: right after the row of the ops that showed the roles
        assert swap["frame"] == max(before), (swap, before)
    else:  # WebSocket masking, at the join: before every row of the flow (the held
        # bytes, from frame 1 on, are read after it), with the frame of the join's last
        assert not before and min(after) <= swap["frame"] <= max(after), (swap, after)

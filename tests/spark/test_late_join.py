"""``spark ingest`` of flows joined late (issue 23) equals ``msgcap dissect``: a task
swaps a flow's roles from its NATS ops (and from WebSocket masking) as the local run
does.  Before, a split task's dissection was not connected to its flow table, so the
cut JetStream connection kept the roles the port hint gave it: client and server
reversed, every row's direction wrong, and its ops flagged as sent the wrong way."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture
from analyzer.spark.ingest import ingest
from tests.analyzer.test_late_join import JS_CLIENT, JS_SERVER, _js_cut
from tests.spark.helpers import assert_same_dataset, read_tables
from tests.websocket import capcut

pytestmark = pytest.mark.spark

WS = Path(__file__).resolve().parents[2] / "samples" / "nats-ws.pcap"


def _ws_cut(tmp_path: Path) -> Path:
    """nats-ws.pcap without its first 40% of data packets: no HTTP upgrade is left."""
    _, packets = capcut.read(WS)
    data = [p for p in packets if p.payload]
    cut_at = data[len(data) * 2 // 5].number
    return capcut.cut(WS, tmp_path / "ws-cut.pcap", lambda p: p.number >= cut_at)


def test_split_ingest_swaps_roles_as_dissect_does(spark, tmp_path: Path) -> None:
    options = Options(strict=True, validate=True)
    pcap, _ = _js_cut(tmp_path)
    ws = _ws_cut(tmp_path)
    for path in (pcap, ws):
        local = tmp_path / f"local-{path.stem}"
        dissect_capture(path, local, options)
        out = tmp_path / f"spark-{path.stem}"
        report = ingest(spark, [path], out, options=options,
                        split_bytes=max(path.stat().st_size // 3, 64))
        assert report.how[str(path)].startswith("split:"), report.how
        assert_same_dataset(local, out)
    flows = read_tables(tmp_path / f"spark-{pcap.stem}")["flows"].to_pylist()
    (f,) = flows
    assert (f["client_port"], f["server_port"], f["role_source"]) == (
        JS_CLIENT, JS_SERVER, "ops")
    ws_sources = {f["role_source"] for f in read_tables(
        tmp_path / f"spark-{ws.stem}")["flows"].to_pylist() if f["protocol"] == "nats"}
    assert "websocket-mask" in ws_sources or "ops" in ws_sources, ws_sources

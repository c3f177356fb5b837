"""``RunSink``, the Spark dissection task's stand-in for ``DatasetWriter``: what it holds
is bounded by bytes, not only by rows, and its dict rows pass the same redaction gate
as the local writer's (``analyzer.sink.gated_rows``).  No Spark needed: the sink is the
task's own Python."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.sink import DatasetWriter
from analyzer.spark.task import RunSink
from dissectors.core_tables import ANOMALIES
from dissectors.redaction import marker
from dissectors.registry import discover
from dissectors.schema import arrow_schema, rows_to_batch
from dissectors.tables import get_table

SECRET = "hunter2-run-sink-0001"
DETAIL = f'CONNECT {{"user":"bob","pass":"{SECRET}"}} does not parse'


def _anomaly(i: int, detail: str = "", nbytes: int = 0) -> dict:
    return {"capture_id": "0123456789abcdef", "record_id": i, "flow_id": 1,
            "direction": "c2s", "kind": "test.kind", "detail": detail or f"row {i}",
            "ts": 1_000_000_000 + i, "ts_ns": 1_000_000_000 + i, "frame": i, "offset": 0,
            "nbytes": nbytes, "source": "test"}


def _runs(sink: RunSink, table: str) -> list[pa.Table]:
    return [pa.ipc.open_file(f).read_all() for f in sink.files if Path(f).parent.name == table]


def test_a_run_is_written_once_the_buffered_bytes_reach_run_bytes(tmp_path: Path) -> None:
    """Batches of ~40 kB each, a bound of 256 kB: a run at least every 7 batches, and the
    rows read back in the order they came.  (With the row bound alone, 262,144 rows,
    the whole input stayed in memory and came out as one run at ``close``.)"""
    schema = arrow_schema(ANOMALIES)
    batches = [rows_to_batch(ANOMALIES, [_anomaly(k * 100 + i, "x" * 400) for i in range(100)])
               for k in range(40)]
    assert 30_000 < batches[0].nbytes < 60_000
    sink = RunSink(tmp_path, 0, validate=True, run_bytes=256 * 1024)
    most = 0
    for b in batches:
        sink.write_batch(ANOMALIES, b)
        most = max(most, sum(x.nbytes for x in sink._batches.get(ANOMALIES.name, [])))
    sink.close()
    runs = _runs(sink, ANOMALIES.name)
    assert len(runs) >= len(batches) * batches[0].nbytes // (256 * 1024)
    assert most < 256 * 1024  # a run is written as soon as it reaches the bound
    got = pa.concat_tables(runs).cast(schema)
    assert got.column("record_id").to_pylist() == [k * 100 + i for k in range(40)
                                                   for i in range(100)]
    assert sink.rows[ANOMALIES.name] == 4_000


def test_the_row_bound_still_holds(tmp_path: Path) -> None:
    sink = RunSink(tmp_path, 0, validate=True, run_rows=250, chunk=100)
    sink.write_rows(ANOMALIES, [_anomaly(i) for i in range(1_000)])
    sink.close()
    assert [len(t) for t in _runs(sink, ANOMALIES.name)] == [300, 300, 300, 100]


@pytest.mark.parametrize("keep", [False, True])
def test_anomaly_details_pass_the_gate_the_local_writer_applies(tmp_path: Path, keep: bool
                                                               ) -> None:
    """The same detail written by a task's ``RunSink`` and by ``DatasetWriter``: the
    same text (a credential quoted from the wire becomes its marker unless the run keeps
    secrets).  Before the gate was shared, a task wrote the detail as it came."""
    sink = RunSink(tmp_path / "runs", 0, validate=True, keep_secrets=keep)
    sink.write_rows(ANOMALIES, [_anomaly(1, DETAIL)])
    sink.close()
    (task,) = _runs(sink, ANOMALIES.name)

    writer = DatasetWriter(tmp_path / "local", "0123456789abcdef", "0" * 64, "test",
                           {"keep_secrets": keep})
    writer.write_rows(ANOMALIES, [_anomaly(1, DETAIL)])
    writer.close()
    (local,) = (tmp_path / "local" / ANOMALIES.name).rglob("*.parquet")
    detail = task.column("detail")[0].as_py()
    assert detail == pq.read_table(local).column("detail")[0].as_py()
    assert (SECRET in detail) is keep
    if not keep:
        assert marker(SECRET.encode()) in detail


def test_dict_rows_holding_payloads_are_converted_by_bytes(tmp_path: Path) -> None:
    """Rows whose binary columns hold 1 MiB each: converted (and a run written) once
    they hold ``run_bytes``, not after ``chunk`` rows."""
    discover()
    nats = get_table("nats")
    payload = b"\x01" * (1 << 20)
    rows = [{"capture_id": "0123456789abcdef", "record_id": i, "flow_id": 1,
             "direction": "c2s", "op": "PUB", "subject": f"s.{i}", "payload": payload,
             "payload_len": len(payload)} for i in range(40)]
    sink = RunSink(tmp_path, 0, validate=False, run_bytes=8 << 20)
    sink.write_rows(nats, rows)
    assert sum(len(r["payload"] or b"") for r in sink._rows.get("nats", [])) < 8 << 20
    sink.close()
    runs = _runs(sink, "nats")
    assert len(runs) >= 40 // 8
    assert pa.concat_tables(runs).column("record_id").to_pylist() == list(range(40))

"""``msgcap spark ingest --decode --schema`` fills the payload_decoded columns exactly as
``msgcap dissect`` does: a NATS recording decoded with a user ``.proto`` and a Pulsar
recording decoded with the schemas its producers and consumers announced (one task per
file).  The Pulsar recording is one connection, so a synthetic capture
(``tests/payload/pulsar_capture.py``) gives the split path its hard case: a producer
announces an Avro schema on one connection, a consumer that announced none receives the
messages on another, one process decodes them with the producer's schema, and so must
the split run (the server is dissected again with its connections in one task).  Options
come from the CLI's own parser (``analyzer.runoptions``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli import build_parser
from analyzer.cliutil import UserError
from analyzer.pipeline import Options, dissect_capture
from analyzer.runoptions import options_from_args
from analyzer.spark.ingest import ingest
from dissectors.registry import discover
from tests.payload.pulsar_capture import TOPIC, write_two_connection_capture
from tests.spark.helpers import assert_same_dataset, read_tables

pytestmark = pytest.mark.spark

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
NATS = SAMPLES / "nats-payloads.pcap"
PULSAR = SAMPLES / "pulsar-schemas.pcap"
DECODED = ["payload_decoder", "payload_schema_id", "payload_decoded", "payload_decode_error"]


def _options(*argv: str) -> Options:
    """``Options`` as ``msgcap spark ingest ARGV`` builds them."""
    args = build_parser().parse_args(["spark", "ingest", str(NATS), "-o", "unused", *argv])
    return options_from_args(args, discover())


def test_spark_ingest_decodes_as_dissect(spark, tmp_path: Path) -> None:
    proto = tmp_path / "shop.proto"  # a copy: the spec's relative path is made absolute
    shutil.copy(SAMPLES / "payloads" / "shop.proto", proto)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        options = _options("--decode", "--schema", "shop.events.*=shop.proto#shop.OrderEvent")
    assert options.payload_schemas == (f"shop.events.*={proto}#shop.OrderEvent",)
    for cap in (NATS, PULSAR):
        dissect_capture(cap, tmp_path / "local", options)
    # one task per file (the split path: test_schema_announced_on_another_connection)
    report = ingest(spark, [NATS, PULSAR], tmp_path / "spark", options=options)
    assert set(report.how.values()) == {"file"}
    assert_same_dataset(tmp_path / "local", tmp_path / "spark")
    tables = read_tables(tmp_path / "spark")
    nats = [r for r in tables["nats"].select(["op", *DECODED]).to_pylist()
            if r["op"] in ("PUB", "MSG")]
    assert len(nats) == 38 and all(r["payload_decoded"] for r in nats)
    assert sum(r["payload_schema_id"] == "user:shop.proto#shop.OrderEvent" for r in nats) > 0
    pulsar = tables["pulsar_messages"].select(DECODED).to_pylist()
    assert len(pulsar) == 32 and all(r["payload_decoded"] for r in pulsar)
    assert {r["payload_schema_id"].split(":")[0] for r in pulsar} == {"pulsar"}
    # the fields can be read where Spark reads the dataset
    got = (spark.read.parquet(str(tmp_path / "spark" / "nats"))
           .where("payload_decoder = 'protobuf'")
           .selectExpr("get_json_object(payload_decoded, '$.order_id') AS id").collect())
    assert got and all(r.id for r in got)


def test_schema_file_the_executors_cannot_read(spark, tmp_path: Path) -> None:
    """A file the driver read but an executor cannot: error + fix before any task."""
    proto = tmp_path / "shop.proto"
    shutil.copy(SAMPLES / "payloads" / "shop.proto", proto)
    options = _options("--schema", f"shop.events.*={proto}#shop.OrderEvent")
    proto.unlink()  # as if the executors ran on nodes without it
    with pytest.raises(UserError) as err:
        ingest(spark, [NATS], tmp_path / "out", options=options)
    assert "executors cannot load a --schema file" in str(err.value)
    assert "shared" in err.value.fix
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_bad_schema_refused_before_spark_starts(tmp_path: Path) -> None:
    """The same check as `dissect` (exit 2, error + fix), before any Spark session."""
    proc = subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "spark", "ingest", str(NATS), "-o",
         str(tmp_path / "o"), "--schema", "orders.*=/nonexistent.proto", "--master",
         "spark://127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "error: " in proc.stderr and "fix: give the path of a .proto" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_schema_announced_on_another_connection(spark, tmp_path: Path) -> None:
    """Split by connection, the consumer's connection would not see the producer's
    schema: the task that learned it names the server and the pass runs again with the
    server's connections in one task; the rows are those of one process."""
    cap = tmp_path / "pulsar-two-connections.pcap"
    values = write_two_connection_capture(cap)
    options = _options("--decode")
    dissect_capture(cap, tmp_path / "local", options)
    rows = read_tables(tmp_path / "local")["pulsar_messages"].to_pylist()
    assert [(r["direction"], json.loads(r["payload_decoded"])) for r in rows] == [
        (d, v) for d in ("c2s", "s2c") for v in values]
    assert {r["payload_schema_id"] for r in rows} == {f"pulsar:{TOPIC}@5"}
    assert len({r["flow_id"] for r in rows}) == 2
    report = ingest(spark, [cap], tmp_path / "spark", options=options,
                    split_bytes=cap.stat().st_size // 2 + 1, partitions=4)
    assert report.how[str(cap)] == "split:2 (dissected again with 1 endpoint(s) merged)"
    assert_same_dataset(tmp_path / "local", tmp_path / "spark")

"""``msgcap spark ingest --decode --schema`` fills the payload_decoded columns exactly as
``msgcap dissect`` does: a NATS recording decoded with a user ``.proto`` and a Pulsar
recording decoded with the schemas its producers and consumers announced (one task per
file).  The Pulsar recording is one connection, so a synthetic capture
(``tests/payload/pulsar_capture.py``) gives the split path its hard case: a producer
announces an Avro schema on one connection, a consumer that announced none receives the
messages on another, one process decodes them with the producer's schema, and so must
the split run (the server is dissected again with its connections in one task).  Options
come from the CLI's own parser (``analyzer.runoptions``); a schema file the executors
cannot read and a bad spec are refused before any task."""

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
    """One ingest (one Spark application's worth of jobs) for the three captures: the two
    recordings one task each, the synthetic capture split into two ranges."""
    proto = tmp_path / "shop.proto"  # a copy: the spec's relative path is made absolute
    shutil.copy(SAMPLES / "payloads" / "shop.proto", proto)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        options = _options("--decode", "--schema", "shop.events.*=shop.proto#shop.OrderEvent")
    assert options.payload_schemas == (f"shop.events.*={proto}#shop.OrderEvent",)
    two = tmp_path / "pulsar-two-connections.pcap"
    values = write_two_connection_capture(two, 80)
    assert two.stat().st_size > PULSAR.stat().st_size > NATS.stat().st_size  # 33 > 22 > 13 KB
    for cap in (NATS, PULSAR, two):
        dissect_capture(cap, tmp_path / "local", options)
    report = ingest(spark, [NATS, PULSAR, two], tmp_path / "spark", options=options,
                    split_bytes=max(PULSAR.stat().st_size, two.stat().st_size // 2 + 1),
                    partitions=4)
    assert report.how == {str(NATS): "file", str(PULSAR): "file",
                          str(two): "split:2 (dissected again with 1 endpoint(s) merged)"}
    assert_same_dataset(tmp_path / "local", tmp_path / "spark")

    tables = read_tables(tmp_path / "spark")
    nats = [r for r in tables["nats"].select(["op", *DECODED]).to_pylist()
            if r["op"] in ("PUB", "MSG")]
    assert len(nats) == 38 and all(r["payload_decoded"] for r in nats)
    assert sum(r["payload_schema_id"] == "user:shop.proto#shop.OrderEvent" for r in nats) > 0
    pulsar = tables["pulsar_messages"].select(["capture_id", "direction", *DECODED]).to_pylist()
    recorded = [r for r in pulsar if r["capture_id"] != report.results[2].capture_id]
    assert len(recorded) == 32 and all(r["payload_decoded"] for r in recorded)
    assert {r["payload_schema_id"].split(":")[0] for r in recorded} == {"pulsar"}
    # split by connection, the consumer's task alone would not know the producer's schema
    synthetic = [r for r in pulsar if r["capture_id"] == report.results[2].capture_id]
    assert [(r["direction"], json.loads(r["payload_decoded"])) for r in synthetic] == [
        (d, v) for d in ("c2s", "s2c") for v in values]
    assert {r["payload_schema_id"] for r in synthetic} == {f"pulsar:{TOPIC}@5"}


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

"""The decoded value where people read and query it: `msgcap follow --decoded` and Spark's
`get_json_object` over a dataset dissected with --schema (DuckDB: test_nats_recording)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.testing import dissect_with_cli
from tests.analyzer.conftest import spark  # noqa: F401  (the shared session fixture)

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TRUTH = json.loads((SAMPLES / "nats-payloads.truth.json").read_text())["messages"]
SCHEMA = f"shop.events.*={SAMPLES / 'payloads' / 'shop.proto'}#shop.OrderEvent"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("views")
    run = dissect_with_cli(SAMPLES / "nats-payloads.pcap", out, "--schema", SCHEMA, "-q")
    assert run.returncode == 0, run.stderr
    return out


def test_follow_decoded_shows_the_decoded_value(dataset: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", "follow", str(dataset),
                           "--flow", "0", "--decoded", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    pubs = [m for m in lines if m["kind"] == "PUB"]
    assert len(pubs) == len(TRUTH)
    first = pubs[0]
    assert first["preview"] == "json " + json.dumps(TRUTH[0]["value"], separators=(",", ":"))
    metrics = next(m for m in pubs if m["fields"]["subject"] == "metrics.host")
    assert metrics["preview"] == 'msgpack {"host":"h0","cpu":[0.0,1.0],"up":true}'
    # a decoded value holding a credential member: the output gate may withhold the whole
    # preview (it did while this was written), never show the secret
    pb = next(m for m in pubs if m["fields"]["subject"] == "shop.events.placed")
    assert pb["preview"].startswith("protobuf ")
    login = next(m for m in pubs if m["fields"]["subject"] == "auth.login")
    assert "s3cr3t-pw" not in login["preview"] and "<redacted len=9 " in login["preview"]


def test_spark_get_json_object(dataset: Path, spark) -> None:  # noqa: F811
    df = spark.read.parquet(str(dataset / "nats"))
    rows = (df.where("op = 'PUB' and payload_decoder in ('json', 'msgpack', 'protobuf')")
              .selectExpr("record_id", "subject",
                          "get_json_object(payload_decoded, '$.order_id') as oid",
                          "get_json_object(payload_decoded, '$.host') as host",
                          "get_json_object(payload_decoded, '$.lines[0].sku') as sku")
              .orderBy("record_id").collect())
    got = [(r.subject, r.oid, r.host, r.sku) for r in rows]
    want = []
    for t in TRUTH:
        v = t["value"]
        if t["encoding"] in ("json", "msgpack", "protobuf"):
            sku = v["lines"][0]["sku"] if "lines" in v else None
            oid = None if "order_id" not in v else str(v["order_id"])
            want.append((t["subject"], oid, v.get("host"), sku))
    assert got == want
    assert got[0] == ("orders.eu", "1000", None, None)
    assert ("shop.events.placed", "1099511627776", None, "B-0") in got


def test_report_shows_the_decoded_value(dataset: Path, tmp_path: Path) -> None:
    import html

    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", "report", str(dataset),
                           "-o", str(out), "--flow", "0", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text("utf-8")
    first = json.dumps(TRUTH[0]["value"], separators=(",", ":"))
    assert "payload json " + html.escape(first) in page  # the sequence diagram's hover text

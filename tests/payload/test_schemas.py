"""User schemas: .avsc, JSON Schema, descriptor sets, and the patterns that bind them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import fastavro
import pytest

from dissectors.payload import PayloadDecoding
from dissectors.payload.schemas import (
    SchemaSpecError,
    decoding_for,
    load_schema_spec,
    pattern_matches,
)

PROTO = Path(__file__).resolve().parents[2] / "samples" / "payloads" / "shop.proto"
AVSC = {
    "type": "record", "name": "Reading", "namespace": "lab",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"},
               {"name": "tags", "type": {"type": "array", "items": "string"}},
               {"name": "raw", "type": ["null", "bytes"], "default": None}],
}


@pytest.mark.parametrize(
    ("pattern", "subject", "hit"),
    [
        ("orders.*", "orders.eu", True),
        ("orders.*", "orders.eu.x", False),
        ("orders.>", "orders.eu.x", True),
        ("orders.>", "orders", False),
        ("*.eu", "orders.eu", True),
        ("orders", "persistent://public/default/orders", True),  # local topic name
        ("orders", "persistent://public/default/orders-2", False),
        ("persistent://public/default/ord.*", "persistent://public/default/orders", True),
        ("persistent://public/default/ord.*", "persistent://public/other/orders", False),
    ],
)
def test_patterns(pattern: str, subject: str, hit: bool) -> None:
    assert pattern_matches(pattern, subject) is hit


def _avro(value: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVSC), value)
    return buf.getvalue()


def test_avsc(tmp_path: Path) -> None:
    (tmp_path / "reading.avsc").write_text(json.dumps(AVSC))
    engine = decoding_for([f"lab.>={tmp_path / 'reading.avsc'}"])
    value = {"sensor": "t1", "value": 21.5, "tags": ["a", "b"], "raw": b"\x01\x02"}
    out = engine.columns(_avro(value), False, "lab.temp")
    assert out["payload_decoder"] == "avro"
    assert out["payload_schema_id"] == "user:reading.avsc"
    assert json.loads(out["payload_decoded"]) == {**value, "raw": "AQI="}
    bad = engine.columns(_avro(value)[:-3], False, "lab.temp")
    assert bad["payload_decoded"] is None and bad["payload_decode_error"].startswith("avro: ")
    extra = engine.columns(_avro(value) + b"\x00", False, "lab.temp")
    assert extra["payload_decode_error"] == "avro: 1 trailing bytes after the datum"
    # another subject: by structure (these bytes are not text): declined
    assert engine.columns(_avro(value), False, "other")["payload_decoder"] != "avro"


def test_json_schema(tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["id"],
              "properties": {"id": {"type": "integer"}}}
    (tmp_path / "o.json").write_text(json.dumps(schema))
    engine = decoding_for([f"orders.*={tmp_path / 'o.json'}"])
    ok = engine.columns(b'{"id": 3}', False, "orders.eu")
    assert (ok["payload_decoder"], ok["payload_schema_id"], ok["payload_decoded"]) == (
        "json", "user:o.json", '{"id":3}')
    bad = engine.columns(b'{"id": "x"}', False, "orders.eu")
    assert bad["payload_decode_error"] == "json: JSON Schema: 'x' is not of type 'integer' at /id"


def test_descriptor_set_and_proto_agree(tmp_path: Path) -> None:
    desc = tmp_path / "shop.desc"
    from grpc_tools import protoc

    assert protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={desc}",
                        PROTO.name]) == 0
    by_desc = load_schema_spec(f"a.*={desc}#shop.OrderEvent")
    by_proto = load_schema_spec(f"a.*={PROTO}#shop.OrderEvent")
    msg = by_proto.schema(order_id=7, customer="c", lines=[{"sku": "x", "qty": 2}])
    data = msg.SerializeToString()
    engine = PayloadDecoding(None, [by_desc])
    assert json.loads(engine.columns(data, False, "a.b")["payload_decoded"]) == {
        "order_id": "7", "customer": "c", "lines": [{"sku": "x", "qty": 2}]}
    assert by_desc.schema_id == "user:shop.desc#shop.OrderEvent"


@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        ("a.*", "write it as"),
        ("a.*=/no/such.proto", "give the path"),
        (f"a.*={PROTO}", "name the message type"),
        (f"a.*={PROTO}#shop.Nope", "give the full name"),
        ("persistent://x/(=protobuf", "regular expression"),
    ],
)
def test_spec_errors_carry_a_fix(spec: str, fix: str) -> None:
    with pytest.raises(SchemaSpecError) as e:
        load_schema_spec(spec)
    assert fix in e.value.fix


def test_later_schema_wins() -> None:
    engine = decoding_for(["a.>=text", "a.b=msgpack"])
    assert engine.columns(b"\x81\xa1x\x01", False, "a.b")["payload_decoder"] == "msgpack"
    assert engine.columns(b"hi", False, "a.c")["payload_decoder"] == "text"


def test_cli_refuses_a_bad_schema_with_error_and_fix(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "dissect",
         str(PROTO.parents[1] / "nats-payloads.pcap"), "-o", str(tmp_path / "o"),
         "--schema", f"a.*={PROTO}"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "error: shop.proto defines 2 messages (Line, OrderEvent)" in proc.stderr
    assert "fix: name the message type" in proc.stderr

"""A real nats-server <-> nats-py recording (samples/record_nats_payloads.py) decoded with a
user .proto and by structure; every field checked against what the client encoded."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from analyzer.testing import dissect_with_cli

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PCAP = SAMPLES / "nats-payloads.pcap"
TRUTH = json.loads((SAMPLES / "nats-payloads.truth.json").read_text())["messages"]
PROTO = SAMPLES / "payloads" / "shop.proto"
SCHEMA = f"shop.events.*={PROTO}#shop.OrderEvent"
SECRET_KEYS = {"password", "token"}  # names the redaction gate treats as credentials


def _expected(value: dict) -> dict:
    """The client's value with credentials as the gate's markers (computed here from the
    truth: length and SHA-256 of the value's UTF-8 text)."""
    out = {}
    for k, v in value.items():
        if k in SECRET_KEYS:
            raw = v.encode()
            v = f"<redacted len={len(raw)} sha256={hashlib.sha256(raw).hexdigest()}>"
        out[k] = v
    return out


@pytest.fixture(scope="module")
def decoded(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("dec")
    run = dissect_with_cli(PCAP, out, "--schema", SCHEMA, "-q")
    assert run.returncode == 0, run.stderr
    return out, run.tables["nats"]


@pytest.mark.parametrize("op", ["PUB", "MSG"])
def test_every_message_matches_client_truth(decoded, op: str) -> None:
    _, rows = decoded
    rows = sorted((r for r in rows if r["op"] == op), key=lambda r: r["record_id"])
    assert len(rows) == len(TRUTH) == 19
    for row, truth in zip(rows, TRUTH, strict=True):
        assert row["subject"] == truth["subject"]
        assert row["payload_sha256"] == truth["sha256"]
        assert row["payload_decoder"] == truth["encoding"]
        assert row["payload_decode_error"] is None
        if truth["encoding"] == "protobuf":
            assert row["payload_schema_id"] == "user:shop.proto#shop.OrderEvent"
        else:
            assert row["payload_schema_id"] is None
        assert json.loads(row["payload_decoded"]) == _expected(truth["value"])


def test_protobuf_values_exactly(decoded) -> None:
    _, rows = decoded
    first = next(r for r in rows if r["op"] == "PUB" and r["subject"] == "shop.events.placed")
    value = json.loads(first["payload_decoded"])
    assert value["order_id"] == str(2**40)  # proto3 JSON mapping: int64 as a string
    assert value["customer"] == "cust-0" and value["status"] == "PLACED"
    assert value["lines"] == [{"sku": "B-0", "qty": 1, "price": 1.25}]
    assert "gift" not in value  # proto3 default (false) is not on the wire


def test_without_the_schema_protobuf_is_not_guessed(tmp_path: Path) -> None:
    run = dissect_with_cli(PCAP, tmp_path, "--decode", "-q")
    pb = [r for r in run.tables["nats"] if (r["subject"] or "").startswith("shop.events.")]
    assert len(pb) == 10
    assert all(r["payload_decoder"] != "protobuf" and r["payload_schema_id"] is None
               for r in pb)
    js = [r for r in run.tables["nats"] if r["subject"] == "orders.eu"]
    assert [json.loads(r["payload_decoded"])["order_id"] for r in js] == [
        1000, 1000, 1001, 1001, 1002, 1002, 1003, 1003, 1004, 1004]


def test_schemaless_protobuf_when_asked(tmp_path: Path) -> None:
    run = dissect_with_cli(PCAP, tmp_path, "--schema", "shop.events.>=protobuf", "-q")
    row = next(r for r in run.tables["nats"]
               if r["op"] == "PUB" and r["subject"] == "shop.events.placed")
    fields = json.loads(row["payload_decoded"])
    assert row["payload_decoder"] == "protobuf" and row["payload_schema_id"] == "user:protobuf"
    assert fields[0] == {"field": 1, "wire_type": 0, "value": 2**40}
    assert fields[1] == {"field": 2, "wire_type": 2,
                         "value": base64.b64encode(b"cust-0").decode()}
    assert fields[2] == {"field": 3, "wire_type": 0, "value": 1}


def test_keep_secrets_keeps_decoded_secrets(tmp_path: Path) -> None:
    run = dissect_with_cli(PCAP, tmp_path, "--decode", "--keep-secrets", "-q")
    row = next(r for r in run.tables["nats"] if r["subject"] == "auth.login")
    assert json.loads(row["payload_decoded"])["password"] == "s3cr3t-pw"


def test_decoded_fields_queried_with_duckdb(decoded) -> None:
    out, _ = decoded
    got = duckdb.sql(
        f"""select json_extract_string(payload_decoded, '$.customer') as customer,
                   cast(json_extract_string(payload_decoded, '$.order_id') as bigint) as oid,
                   json_array_length(json_extract(payload_decoded, '$.lines')) as n
            from read_parquet('{out}/nats/**/*.parquet', hive_partitioning = true)
            where op = 'PUB' and payload_decoder = 'protobuf'
              and json_extract_string(payload_decoded, '$.status') = 'PLACED'
            order by record_id""").fetchall()
    want = [(t["value"]["customer"], int(t["value"]["order_id"]), len(t["value"]["lines"]))
            for t in TRUTH if t["encoding"] == "protobuf" and t["value"]["status"] == "PLACED"]
    assert got == want == [("cust-0", 2**40, 1), ("cust-2", 2**40 + 2, 3),
                           ("cust-4", 2**40 + 4, 2)]

"""The payload_decoded columns through a whole run: the NATS fast path (Arrow batches) and
the pure-Python path (dict rows) give the same columns; off unless asked; CLI errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from analyzer.pipeline import Options, dissect_capture

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
COLS = ["record_id", "subject", "payload", "payload_truncated", "payload_decoder",
        "payload_schema_id", "payload_decoded", "payload_decode_error"]


def _nats_rows(tmp: Path, **kw) -> list[dict]:
    dissect_capture(SAMPLES / "nats-basic.pcap", tmp, Options(**kw))
    t = pq.read_table(tmp / "nats", columns=COLS).sort_by("record_id")
    return t.to_pylist()


def test_decode_fast_and_reference_paths_agree(tmp_path: Path) -> None:
    fast = _nats_rows(tmp_path / "fast", payload_schemas=())
    slow = _nats_rows(tmp_path / "slow", payload_schemas=(), fast=False)
    assert fast == slow
    by = {}
    for r in fast:
        by.setdefault(r["payload_decoder"], []).append(r)
    # nats-basic: JetStream API JSON, 'plain ...' text messages, binary/empty payloads
    assert {k: len(v) for k, v in by.items()} == {None: 127, "json": 17, "text": 61}
    for r in by["json"]:
        assert not r["payload_truncated"]
        assert json.loads(r["payload_decoded"]) == json.loads(r["payload"])
    for r in by["text"]:
        assert json.loads(r["payload_decoded"]) == r["payload"].decode()
    assert all(r["payload_decode_error"] is None for r in fast)


def test_off_by_default(tmp_path: Path) -> None:
    rows = _nats_rows(tmp_path)
    assert {r["payload_decoder"] for r in rows} == {None}
    assert {r["payload_decoded"] for r in rows} == {None}


def test_payload_cap_marks_rows_undecoded(tmp_path: Path) -> None:
    rows = _nats_rows(tmp_path, payload_schemas=(), payload_cap=8)
    cut = [r for r in rows if r["payload_truncated"]]
    assert cut and all(r["payload_decoded"] is None and r["payload_decode_error"].startswith(
        "payload cut by --payload-cap") for r in cut)


def test_bad_schema_is_a_user_error(tmp_path: Path) -> None:
    for spec, fix in (("orders.*", "write it as --schema"),
                      ("orders.*=/nonexistent.proto", "give the path of a .proto")):
        proc = subprocess.run(
            [sys.executable, "-m", "analyzer.cli", "dissect", str(SAMPLES / "nats-basic.pcap"),
             "-o", str(tmp_path / "o"), "--schema", spec], capture_output=True, text=True)
        assert proc.returncode == 2
        assert "error: " in proc.stderr and f"fix: {fix}" in proc.stderr


def test_workers_decode_the_same(tmp_path: Path) -> None:
    """--workers 2: each worker decodes its share of the flows, the rows are the same."""
    cols = ["record_id", "payload_decoder", "payload_schema_id", "payload_decoded"]
    out = {}
    for n in (1, 2):
        dissect_capture(SAMPLES / "pulsar-schemas.pcap", tmp_path / str(n),
                        Options(payload_schemas=()), workers=n)
        out[n] = pq.read_table(tmp_path / str(n) / "pulsar_messages",
                               columns=cols).sort_by("record_id").to_pylist()
    assert out[1] == out[2]
    assert len(out[1]) == 32 and all(r["payload_decoded"] for r in out[1])


def test_stan_data_is_decoded_from_its_own_column(tmp_path: Path) -> None:
    """STAN rows (children of NATS rows, dict rows) decode `data`, not the NATS payload."""
    dissect_capture(SAMPLES / "stan-basic.pcap", tmp_path, Options(payload_schemas=()))
    rows = pq.read_table(tmp_path / "stan").to_pylist()
    text = [r for r in rows if r["payload_decoder"] == "text"]
    assert len(text) == 56
    assert {r["msg_type"] for r in text} == {"PubMsg", "MsgProto"}
    for r in text:
        assert json.loads(r["payload_decoded"]) == r["data"].decode()
    assert all(r["payload_decoded"] is None for r in rows if r["data"] is None)


def test_manifest_records_the_decoding_options(tmp_path: Path) -> None:
    dissect_capture(SAMPLES / "nats-basic.pcap", tmp_path / "on",
                    Options(payload_schemas=("a.*=text",)))
    dissect_capture(SAMPLES / "nats-basic.pcap", tmp_path / "off", Options())
    on = json.loads((tmp_path / "on" / "manifest.json").read_text())
    off = json.loads((tmp_path / "off" / "manifest.json").read_text())
    assert on["inputs"][0]["options"]["payload_schemas"] == ["a.*=text"]
    assert "payload_schemas" not in off["inputs"][0]["options"]


def test_workers_with_a_schema_from_another_connection(tmp_path: Path) -> None:
    """A light --workers run would decode the consumer's messages without the schema its
    producer announced on another connection (not its worker's): the worker that learned
    a schema says so and the run is made again exactly, as one process decodes it."""
    from tests.payload.pulsar_capture import write_two_connection_capture

    cap = tmp_path / "two.pcap"
    values = write_two_connection_capture(cap)
    cols = ["record_id", "flow_id", "payload_schema_id", "payload_decoded"]
    out = {}
    for n in (1, 2):
        result = dissect_capture(cap, tmp_path / str(n), Options(payload_schemas=()),
                                 workers=n)
        out[n] = pq.read_table(tmp_path / str(n) / "pulsar_messages",
                               columns=cols).sort_by("record_id").to_pylist()
    assert result.split == "exact"
    assert any("payload schema" in why for why in result.fallback)
    assert out[1] == out[2]
    assert [json.loads(r["payload_decoded"]) for r in out[2]] == values * 2
    assert len({r["flow_id"] for r in out[2]}) == 2

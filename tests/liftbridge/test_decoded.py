"""The payload_decoded columns of ``liftbridge`` and ``liftbridge_entries``: filled from the
message value (as ``stan`` from ``data``) on samples/liftbridge-basic.pcap, bound to
``--schema`` patterns by the row's ``subject``, null unless decoding is asked for."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from analyzer.pipeline import Options, dissect_capture

PCAP = Path(__file__).resolve().parents[2] / "samples" / "liftbridge-basic.pcap"
DECODED = ["payload_decoder", "payload_schema_id", "payload_decoded", "payload_decode_error"]


def _rows(out: Path, table: str, **kw) -> list[dict]:
    dissect_capture(PCAP, out, Options(**kw))
    cols = ["record_id", "msg_type", "subject", "value", "value_truncated", *DECODED]
    if table == "liftbridge_entries":
        cols.remove("msg_type")
    return pq.read_table(out / table, columns=cols).sort_by("record_id").to_pylist()


def _check_by_structure(rows: list[dict]) -> Counter:
    """Every value decoded by structure or left as it is; returns decoders used."""
    used: Counter = Counter()
    for r in rows:
        used[r["payload_decoder"]] += 1
        assert r["payload_decode_error"] is None and r["payload_schema_id"] is None
        if r["payload_decoder"] == "text":
            assert json.loads(r["payload_decoded"]) == r["value"].decode()
        else:  # binary (a 0..255 run, internal protobufs), empty or no value
            assert r["payload_decoder"] is None and r["payload_decoded"] is None
            if r["value"]:
                try:
                    r["value"].decode("utf-8")
                except UnicodeDecodeError:
                    continue
                assert r["value"].startswith((b"\n", b"\x08"))  # a protobuf, not text
    return used


def test_liftbridge_values_decoded(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "liftbridge", payload_schemas=())
    used = _check_by_structure(rows)
    # text publishes (order-1, a run of x, café) and plain stream messages, each twice
    assert used["text"] == 12
    texts = {json.loads(r["payload_decoded"]) for r in rows if r["payload_decoder"]}
    assert {"order-1", "café", "plain value 0", "plain value 2"} <= texts


def test_liftbridge_entries_decoded(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "liftbridge_entries", payload_schemas=())
    assert len(rows) == 16
    assert _check_by_structure(rows)["text"] > 0


def test_schema_bound_by_subject(tmp_path: Path) -> None:
    """`orders.*` binds the plain messages on partition subject orders.1 only; the bound
    decoder's failure is the row's error, the row stays."""
    rows = _rows(tmp_path, "liftbridge", payload_schemas=("orders.*=cbor",))
    bound = [r for r in rows if r["payload_schema_id"] == "user:cbor"]
    assert bound and {r["subject"] for r in bound} == {"orders.1"}
    assert all(r["payload_decoder"] == "cbor" and r["payload_decode_error"]
               and r["value"] == b"plain value 2" for r in bound)
    assert {r["payload_decoder"] for r in rows if r["subject"] == "orders"} == {"text"}


def test_off_by_default(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "liftbridge")
    assert rows and all(r[c] is None for r in rows for c in DECODED)

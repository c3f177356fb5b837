"""JetStream ack reply subjects parsed into the ``js_*`` columns of delivery rows
(dissectors/nats/jetstream.py): both forms from literals, and a real JetStream workload
(samples/nats-js.pcap, samples/record_nats_js.py) checked against nats-py's own reading
of each delivery (``msg.metadata``, recorded client-side), compiled fast path and
reference alike."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from dissectors.nats.jetstream import ack_arrays, parse_ack
from tests.tls.helpers import Dissected

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TRUTH = json.loads((SAMPLES / "nats-js.truth.json").read_text())
COLS = ("js_ack_form", "js_domain", "js_account_hash", "js_stream", "js_consumer",
        "js_delivered", "js_stream_seq", "js_consumer_seq", "js_timestamp_ns", "js_pending")


def test_old_form():
    assert parse_ack("$JS.ACK.ORDERS.proc.2.3.4.1795617180109203746.5") == {
        "js_ack_form": "v1", "js_domain": None, "js_account_hash": None,
        "js_stream": "ORDERS", "js_consumer": "proc", "js_delivered": 2,
        "js_stream_seq": 3, "js_consumer_seq": 4, "js_timestamp_ns": 1795617180109203746,
        "js_pending": 5}


def test_newer_form_with_domain_and_account_hash():
    got = parse_ack("$JS.ACK.hub.ACCHASH.ORDERS.proc.1.10.7.1795617180109203746.0.rNd")
    assert got == {"js_ack_form": "v2", "js_domain": "hub", "js_account_hash": "ACCHASH",
                   "js_stream": "ORDERS", "js_consumer": "proc", "js_delivered": 1,
                   "js_stream_seq": 10, "js_consumer_seq": 7,
                   "js_timestamp_ns": 1795617180109203746, "js_pending": 0}
    # "_" is "no domain"; the random last token is optional
    got = parse_ack("$JS.ACK._.ACCHASH.ORDERS.proc.1.10.7.1795617180109203746.0")
    assert (got["js_domain"], got["js_ack_form"], got["js_stream_seq"]) == (None, "v2", 10)


@pytest.mark.parametrize("reply", [
    None, "", "_INBOX.abc.def", "$JS.ACK.ORDERS.proc.1.2.3.4",  # 8 tokens
    "$JS.ACK.ORDERS.proc.x.2.3.4.5", "$JS.ACK.ORDERS.proc.1.2.3.4.-5",
    "$JS.ACK..proc.1.2.3.4.5", "$JS.ACK.a.b.c.d.1.2.3.4.5.6.7",  # 13 tokens
])
def test_not_an_ack_subject_fills_nothing(reply):
    assert parse_ack(reply) is None


def test_batches_without_deliveries_cost_one_vectorised_test():
    op = pa.array(["MSG", "PUB", "MSG"])
    assert ack_arrays(op, pa.array(["_INBOX.a", "$JS.ACK.S.c.1.1.1.1.0", None])) is None
    cols = ack_arrays(op, pa.array(["_INBOX.a", None, "$JS.ACK.S.c.1.2.3.4.0"]))
    assert cols["js_stream_seq"].to_pylist() == [None, None, 2]
    assert cols["js_ack_form"].to_pylist() == [None, None, "v1"]


@pytest.fixture(scope="module", params=[True, False], ids=["fast", "reference"])
def js_run(request, tmp_path_factory) -> Dissected:
    return Dissected(SAMPLES / "nats-js.pcap", tmp_path_factory.mktemp("js") / "out",
                     fast=request.param)


def _ns(iso: str) -> int:
    t = dt.datetime.fromisoformat(iso)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def test_every_delivery_matches_what_the_client_read(js_run):
    assert TRUTH["problems"] == []
    assert js_run.rows("anomalies") == []
    rows = [r for r in js_run.rows("nats") if r["js_stream"] is not None]
    assert all(r["op"] in ("MSG", "HMSG") for r in rows)
    got = [(r["reply_to"], r["payload_sha256"], r["js_ack_form"], r["js_domain"],
            r["js_stream"], r["js_consumer"], r["js_stream_seq"], r["js_consumer_seq"],
            r["js_delivered"], r["js_pending"]) for r in rows]
    want = [(d["reply"], d["sha256"], "v1", d["domain"], d["stream"], d["consumer"],
             d["stream_seq"], d["consumer_seq"], d["delivered"], d["pending"])
            for d in TRUTH["deliveries"]]
    assert got == want
    # nats-py keeps the store time as a datetime (microseconds, rounded from a float)
    for r, d in zip(rows, TRUTH["deliveries"], strict=True):
        assert abs(r["js_timestamp_ns"] - _ns(d["timestamp"])) <= 1000
    # redelivery and lag are queries: the unacked third message came back once
    assert [(r["js_stream_seq"], r["js_delivered"]) for r in rows if r["js_delivered"] > 1] \
        == [(3, 2)]
    assert [r["js_pending"] for r in rows] == [5, 4, 3, 3, 2, 1, 0]


def test_other_rows_have_no_ack_columns(js_run):
    for r in js_run.rows("nats"):
        if not (r["reply_to"] or "").startswith("$JS.ACK."):
            assert all(r[c] is None for c in COLS), r

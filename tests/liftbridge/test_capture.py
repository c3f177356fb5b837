"""samples/liftbridge-basic.pcap (real nats-server, emulated Liftbridge servers and client
on nats-py) through reassembly → NATS dissector → payload dispatch, compared with the
sender-side truth (samples/record_liftbridge.py, samples/README.md)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from dissectors.liftbridge import ENTRIES_TABLE, LIFTBRIDGE_TABLE
from dissectors.schema import rows_to_batch, validate_batch
from tests.stan.capture_harness import SAMPLES, dispatch_capture
from tests.stan.test_capture import framed_sha256

PCAP = SAMPLES / "liftbridge-basic.pcap"
TRUTH = json.loads((SAMPLES / "liftbridge-basic.truth.json").read_text())


@pytest.fixture(scope="module")
def carried():
    out, nats_anomalies = dispatch_capture(PCAP)
    assert nats_anomalies == []
    return out


def lb_rows(carried, port=None):
    for c in carried:
        if port is None or c.client_port == port:
            for r in c.records:
                if r.table == "liftbridge":
                    yield r


def kind(v) -> str:
    return v["msg_type"] if v["magic_ok"] else "plain"


def test_truth_file_describes_this_capture():
    assert TRUTH["problems"] == []
    assert hashlib.sha256(PCAP.read_bytes()).hexdigest() == TRUTH["pcap"]["sha256"]


def test_every_carried_message_decodes_cleanly_except_the_unknowable_one(carried):
    unclaimed = [c for c in carried if not c.records]
    # the plain message sent before the stream existed: nobody could know, so no row
    assert len(unclaimed) == TRUTH["plain_before_stream_known"]
    assert unclaimed[0].nats.values["subject"] in TRUTH["stream"]["partition_subjects"]
    for c in carried:
        if c.records:
            assert [r.table for r in c.records] == ["liftbridge"]
            v = c.records[0].values
            assert not v["malformed"] and v.get("unknown_fields", []) == []


@pytest.mark.parametrize("name", sorted(TRUTH["connections"]))
def test_message_types_per_connection_match_truth(carried, name):
    conn = TRUTH["connections"][name]
    got = {"c2s": Counter(), "s2c": Counter()}
    for r in lb_rows(carried, conn["client_port"]):
        got[r.direction.short][kind(r.values)] += 1
    sent = {k: n for k, n in conn["sent"].items() if k != "plain_unlearned"}
    assert dict(got["c2s"]) == sent
    assert dict(got["s2c"]) == conn["received"]


@pytest.mark.parametrize("name", sorted(TRUTH["connections"]))
def test_value_digests_match_truth(carried, name):
    conn = TRUTH["connections"][name]
    for key, want in conn["data"].items():
        side, k = key.split(".")
        if k == "plain_unlearned":
            continue
        direction = "c2s" if side == "sent" else "s2c"
        rows = [r.values for r in lb_rows(carried, conn["client_port"])
                if r.direction.short == direction and kind(r.values) == k]
        for v in rows:
            assert v["value_sha256"] == hashlib.sha256(v["value"]).hexdigest()
        assert framed_sha256(v["value"] for v in rows) == (
            want["messages"], want["bytes"], want["sha256"]
        ), key


def test_replicated_entries_match_what_the_leader_sent(carried):
    leader = TRUTH["connections"]["lb-server-a"]["client_port"]
    entries = [k.values for r in lb_rows(carried, leader) if r.direction.short == "c2s"
               for k in r.children]
    assert all(e["crc_status"] == "ok" and not e["malformed"] for e in entries)
    want = TRUTH["replicated_entries"]
    assert framed_sha256(e["value"] or b"" for e in entries) == (
        want["messages"], want["bytes"], want["sha256"]
    )
    subjects = TRUTH["stream"]["partition_subjects"]
    assert {e["subject"] for e in entries} <= set(subjects)
    responses = [r.values for r in lb_rows(carried, leader)
                 if r.values.get("msg_type") == "ReplicationResponse"]
    assert sum(v["entry_count"] for v in responses) == len(entries)
    assert all(v["stream"] == "orders" and v["partition"] in (0, 1) for v in responses)
    offsets = [r.values for r in lb_rows(carried)
               if r.values.get("msg_type") == "LeaderEpochOffsetResponse"]
    assert offsets and all(v["stream"] == "orders" for v in offsets)


def test_plain_rows_carry_the_learned_stream(carried):
    subjects = TRUTH["stream"]["partition_subjects"]
    plain = [r.values for r in lb_rows(carried) if not r.values["magic_ok"]]
    assert plain
    for v in plain:
        assert v.get("msg_type") is None
        assert (v["stream"], v["partition"]) == ("orders", subjects[v["subject"]])


def test_crc_flag_and_internal_values(carried):
    rows = [r.values for r in lb_rows(carried)]
    assert {v.get("crc_status") for v in rows if v["magic_ok"]} == {"ok", "absent"}
    assert sum(v.get("crc_status") == "ok" for v in rows) == 2  # client's PUB + leader's MSG
    decoded_as = Counter(v.get("value_decoded_as") for v in rows if v.get("value_decoded_as"))
    assert decoded_as == {"ActivityStreamEvent": 2, "Cursor": 2}
    errs = {v["error"] for v in rows if v.get("error")}
    assert errs == {"node b is already a member", "stream 'nosuch' not found"}
    acks = [v for v in rows if v.get("msg_type") == "Ack"]
    assert acks and all(v["ack_error"] == "OK" and v["stream"] == "orders" for v in acks)


def test_rows_validate(carried):
    env = {"capture_id": "c", "flow_id": 1, "direction": "c2s"}
    main = [r.values for r in lb_rows(carried)]
    kids = [k.values for r in lb_rows(carried) for k in r.children]
    validate_batch(LIFTBRIDGE_TABLE, rows_to_batch(
        LIFTBRIDGE_TABLE, [{**env, "record_id": i, **v} for i, v in enumerate(main)]))
    validate_batch(ENTRIES_TABLE, rows_to_batch(
        ENTRIES_TABLE, [{**env, "record_id": i, **v} for i, v in enumerate(kids)]))


def _summary(carried):
    return [(c.client_port, r.table, r.offset_start, r.offset_end, r.values,
             [k.values for k in r.children]) for c in carried for r in c.records]


def test_chunking_invariance(carried):
    rechunked, anomalies = dispatch_capture(PCAP, rechunk_seed=3)
    assert anomalies == []
    assert _summary(rechunked) == _summary(carried)

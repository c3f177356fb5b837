"""Liftbridge dissector: all 15 envelope types to exact values, CRC-32C, header problems,
the ReplicationResponse message set, plain stream data, schema validation, never-raise."""

from __future__ import annotations

import hashlib
import json
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dissectors.dispatch import PayloadDispatcher
from dissectors.liftbridge import ENTRIES_TABLE, LIFTBRIDGE_TABLE, LiftbridgeDissector
from dissectors.schema import rows_to_batch, validate_batch
from dissectors.stan import StanDissector
from tests.stan.wirehelp import anomalies, carried, nonnull, pb, rows

MAGIC = bytes.fromhex("b90e43b4")
TS = 1_700_000_000_000_000_001
COLUMNS = [f.name for f in LIFTBRIDGE_TABLE.fields]
ENTRY_COLUMNS = [f.name for f in ENTRIES_TABLE.fields]


def env(msg_type: int, body: bytes, crc: int | None | bool = None, version=0, hl=None,
        flags=None) -> bytes:
    """An envelope; ``crc=True`` computes the right CRC-32C, an int stores that value."""
    if crc is None:
        return MAGIC + bytes([version, 8 if hl is None else hl, flags or 0, msg_type]) + body
    value = crc32c.crc32c(body) if crc is True else crc
    return (MAGIC + bytes([version, 12 if hl is None else hl, 1 if flags is None else flags,
                           msg_type]) + struct.pack(">I", value) + body)


def scope(**options):
    return PayloadDispatcher([LiftbridgeDissector, StanDissector], options, strict=True).scope(
        ("127.0.0.1", 4222)
    )


def one(records):
    (row,) = rows(records, "liftbridge")
    assert set(row) <= set(COLUMNS)
    return {c: row.get(c) for c in COLUMNS}


def head(code, name, payload_len, crc_status="absent", hl=8, flags=0, **cols):
    out = {
        "magic_ok": True, "version": 0, "header_len": hl, "flags": flags,
        "msg_type_code": code, "msg_type": name, "crc_status": crc_status,
        "payload_len": payload_len, "malformed": False, "unknown_fields": [],
    }
    out.update(cols)
    return out


VALUE = b"order #1 \x00\x01"
MESSAGE = pb(
    (1, -1), (2, b"k1"), (3, VALUE), (4, TS), (5, "orders"), (6, 1), (7, "orders.1"),
    (8, "_INBOX.r"), (9, pb((1, "h1"), (2, b"v1"))), (10, "lb.ack.X"), (11, "cid-1"), (12, 1),
)
ACK = pb(
    (1, "orders"), (2, "orders.1"), (3, "orders.1"), (4, 41), (5, "lb.ack.X"), (6, "cid-1"),
    (7, 1), (8, TS), (9, TS + 5), (10, 2),
)


@pytest.mark.parametrize(
    ("code", "subject", "body", "expect"),
    [
        (2, "liftbridge-default.orders.1.replicate", pb((1, "srv-b"), (2, 41), (3, 7)),
         {"msg_type": "ReplicationRequest", "replica_id": "srv-b", "offset": 41,
          "leader_epoch": 7, "stream": "orders", "partition": 1}),
        (4, "liftbridge-default.raft.metadata.join", pb((1, "n2"), (2, "10.0.0.2:9293")),
         {"msg_type": "RaftJoinRequest", "node_id": "n2", "node_addr": "10.0.0.2:9293"}),
        (5, "_INBOX.j", pb((1, "not leader")), {"msg_type": "RaftJoinResponse",
                                                 "error": "not leader"}),
        (6, "liftbridge-default.orders.0.offset", pb((1, 3)),
         {"msg_type": "LeaderEpochOffsetRequest", "leader_epoch": 3, "stream": "orders",
          "partition": 0}),
        (7, "_INBOX.o", pb((1, 99)), {"msg_type": "LeaderEpochOffsetResponse",
                                      "end_offset": 99}),
        (10, "liftbridge-default.raft.metadata.info", pb((1, "srv-a")),
         {"msg_type": "ServerInfoRequest", "server_id": "srv-a"}),
        (11, "_INBOX.i", pb((1, "srv-b"), (2, "localhost"), (3, 9292)),
         {"msg_type": "ServerInfoResponse", "server_id": "srv-b", "host": "localhost",
          "port": 9292}),
        (12, "liftbridge-default.raft.metadata.status.srv-b", pb((1, "orders"), (2, 1)),
         {"msg_type": "PartitionStatusRequest", "stream": "orders", "partition": 1}),
        (13, "_INBOX.s", pb((1, True)), {"msg_type": "PartitionStatusResponse", "exists": True,
                                         "is_leader": False}),
        (14, "liftbridge-default.notify.srv-b", pb((1, "orders"), (2, 1)),
         {"msg_type": "PartitionNotification", "stream": "orders", "partition": 1}),
    ],
)
def test_internal_rpc_types(code, subject, body, expect):
    r = one(scope().dispatch(carried(subject, env(code, body), "_INBOX.reply")))
    assert nonnull(r) == head(code, expect.pop("msg_type"), len(body), **expect)


def test_publish_exact_values_with_crc_ok():
    body = MESSAGE
    r = one(scope().dispatch(carried("orders.1", env(0, body, crc=True))))
    assert nonnull(r) == head(
        0, "Publish", len(body), "ok", hl=12, flags=1, crc32c=crc32c.crc32c(body),
        offset=-1, key=b"k1", value_len=len(VALUE), value_sha256=hashlib.sha256(VALUE).hexdigest(),
        value=VALUE, value_truncated=False, timestamp=TS, stream="orders", partition=1,
        subject="orders.1", reply_subject="_INBOX.r", headers=[("h1", b"v1")],
        ack_inbox="lb.ack.X", correlation_id="cid-1", ack_policy="ALL",
    )


def test_go_liftbridge_style_publish_defaults():
    body = pb((1, -1), (3, b"v"), (10, "lb.ack.Y"), (11, "c2"))
    r = one(scope().dispatch(carried("orders", env(0, body))))
    assert nonnull(r) == head(
        0, "Publish", len(body), offset=-1, key=b"", value_len=1,
        value_sha256=hashlib.sha256(b"v").hexdigest(), value=b"v", value_truncated=False,
        stream="", partition=0, subject="", reply_subject="", headers=[], ack_inbox="lb.ack.Y",
        correlation_id="c2", ack_policy="LEADER",
    )


def test_ack_exact_values():
    r = one(scope().dispatch(carried("lb.ack.X", env(1, ACK))))
    assert nonnull(r) == head(
        1, "Ack", len(ACK), stream="orders", partition_subject="orders.1", msg_subject="orders.1",
        offset=41, ack_inbox="lb.ack.X", correlation_id="cid-1", ack_policy="ALL",
        reception_timestamp=TS, commit_timestamp=TS + 5, ack_error="INCORRECT_OFFSET",
    )


def test_propagated_request_create_stream_and_learning():
    partition = lambda sub, pid: pb((1, sub), (2, "orders"), (3, pid), (5, 2),  # noqa: E731
                                    (6, "a"), (6, "b"), (7, "a"), (8, "a"), (9, 4))
    stream = pb((1, "orders"), (2, "orders"), (3, partition("orders", 0)),
                (3, partition("orders.1", 1)), (5, TS))
    body = pb((1, 0), (2, pb((1, stream))))
    sc = scope()
    # before: a plain message on the stream subject is not ours
    assert sc.dispatch(carried("orders.1", b"plain")) == []
    r = one(sc.dispatch(carried("liftbridge-default.raft.metadata.propagate", env(8, body),
                                "_INBOX.p")))
    op = json.loads(r["op_json"])
    assert (r["msg_type"], r["op"], r["stream"]) == ("PropagatedRequest", "CREATE_STREAM", "orders")
    assert op["create_stream_op"]["stream"]["partitions"][1] == {
        "subject": "orders.1", "stream": "orders", "id": 1, "replication_factor": 2,
        "replicas": ["a", "b"], "leader": "a", "isr": ["a"], "leader_epoch": 4,
    }
    # after: plain stream data, flagged as such
    r = one(sc.dispatch(carried("orders.1", b"plain")))
    assert nonnull(r) == {
        "magic_ok": False, "malformed": False, "payload_len": 5, "subject": "orders.1",
        "stream": "orders", "partition": 1, "value_len": 5,
        "value_sha256": hashlib.sha256(b"plain").hexdigest(), "value": b"plain",
        "value_truncated": False,
    }
    # an envelope on the same subject is still decoded as an envelope
    assert one(sc.dispatch(carried("orders", env(0, MESSAGE))))["msg_type"] == "Publish"


@pytest.mark.parametrize(
    ("op", "sub_field", "sub", "expect"),
    [
        (1, 3, pb((1, "s"), (2, 2), (3, "r9"), (4, "l1"), (5, 6)),
         {"op": "SHRINK_ISR", "stream": "s", "partition": 2, "replica": "r9", "leader": "l1",
          "leader_epoch": 6}),
        (4, 5, pb((1, "s"), (2, 2), (3, "r8"), (4, "l1"), (5, 6)),
         {"op": "EXPAND_ISR", "stream": "s", "partition": 2, "replica": "r8", "leader": "l1",
          "leader_epoch": 6}),
        (2, 4, pb((1, "s"), (2, 0), (3, "r1"), (4, "r1"), (5, 2)),
         {"op": "REPORT_LEADER", "stream": "s", "partition": 0, "replica": "r1", "leader": "r1",
          "leader_epoch": 2}),
        (13, 12, pb((1, "g"), (2, "c"), (3, "srv"), (4, 5)),
         {"op": "REPORT_CONSUMER_GROUP_COORDINATOR", "group_id": "g", "consumer_id": "c",
          "coordinator": "srv", "epoch": 5}),
        (6, 7, pb((1, "s"), (2, b"\x01\x02"), (3, True)), {"op": "PAUSE_STREAM", "stream": "s"}),
    ],
)
def test_propagated_request_operations(op, sub_field, sub, expect):
    body = pb((1, op), (sub_field, sub))
    r = nonnull(one(scope().dispatch(carried("x.raft.metadata.propagate", env(8, body)))))
    for k, v in expect.items():
        assert r[k] == v, k
    assert r["op_json"].startswith("{")


def test_propagated_request_pause_partitions_in_json():
    body = pb((1, 6), (7, pb((1, "s"), (2, b"\x01\x02"), (3, True))))
    r = one(scope().dispatch(carried("x.raft.metadata.propagate", env(8, body))))
    assert json.loads(r["op_json"]) == {
        "pause_stream_op": {"stream": "s", "partitions": [1, 2], "resume_all": True}
    }


def test_propagated_response():
    body = pb((1, 11), (2, pb((1, 404), (2, "no such group"))), (11, pb((1, "srv-c"), (2, 3))))
    r = one(scope().dispatch(carried("_INBOX.x", env(9, body))))
    assert nonnull(r) == head(
        9, "PropagatedResponse", len(body), op="JOIN_CONSUMER_GROUP", error_code=404,
        error="no such group", coordinator="srv-c", epoch=3,
    )


_U64 = st.one_of(st.sampled_from([0, 3, 404, 2**32 + 5, 2**63 - 1, 2**63, 2**64 - 1]),
                 st.integers(0, 2**64 - 1))
_TEXT = st.one_of(st.sampled_from(["", "srv-c", "grp é"]), st.binary(max_size=4))


@st.composite
def _response_bodies(draw) -> bytes:
    """PropagatedResponses: clean ones, and ones with an unknown or repeated field, a
    wrong wire type (each, at times), big numbers, invalid UTF-8 or a cut at the end."""
    def message(fields, odd) -> bytes:
        out = [f for f in fields if draw(st.booleans())]
        if draw(st.integers(0, 3)) == 0:
            out.append(draw(st.sampled_from(odd)))
        return pb(*draw(st.permutations(out)))

    error = message([(1, draw(_U64)), (2, draw(_TEXT))], [(3, 1), (1, "x"), (2, 5)])
    resp = message([(1, draw(_TEXT)), (2, draw(_U64))], [(4, b"?"), (2, "x"), (1, 5)])
    body = message([(1, draw(_U64)), (2, error), (11, resp)],
                   [(5, 1), (1, "x"), (11, 7), (2, error), (11, resp)])
    return body[: draw(st.integers(0, len(body)))] if draw(st.integers(0, 3)) == 0 else body


@settings(max_examples=150, deadline=None)
@given(_response_bodies())
@example(pb((1, 11), (2, pb((1, 404), (2, "gone"))), (11, pb((1, "c"), (2, 2**63 - 1)))))
@example(pb((11, pb((1, "c"), (2, 2**63)))))  # (an epoch int64 cannot hold: reported)
@example(pb((2, pb((1, 2**32 + 5), (2, b"\xff")))))
def test_walked_propagated_responses_are_the_readers(body):
    # the compiled tree of a PropagatedResponse and its nested messages
    # (decoder._walked_nested) gives the rows the reader gives, or leaves it to the reader
    from dissectors.liftbridge import decoder

    def decoded():
        recs = scope().dispatch(carried("_INBOX.x", env(9, body)))
        return [(r.table, r.values) for r in recs]

    walked = decoded()
    real = decoder.tree
    decoder.tree = lambda data, pos, node: None
    try:
        assert decoded() == walked
    finally:
        decoder.tree = real


def entry(offset, key, value, headers, ts=TS, epoch=2, corrupt=False):
    def blob(b, width):
        return struct.pack(width, -1) if b is None else struct.pack(width, len(b)) + b

    body = b"\x01\x00" + blob(key, ">i") + blob(value, ">i") + struct.pack(">h", len(headers))
    for k, v in headers:
        body += blob(k, ">h") + blob(v, ">i")
    crc = crc32c.crc32c(body) ^ (1 if corrupt else 0)
    msg = struct.pack(">I", crc) + body
    return struct.pack(">qqQI", offset, ts, epoch, len(msg)) + msg, crc


@st.composite
def _message_sets(draw) -> tuple[bytes, bool]:
    """(a ReplicationResponse body, whether the compiled parse must take it): whole
    entries with random fields (null or empty keys and values, duplicate and non-UTF-8
    header keys, epochs past int64), some with a bad CRC, some bodies cut or a byte
    changed."""
    blob = st.one_of(st.none(), st.binary(max_size=6))
    head_key = st.sampled_from([b"subject", b"reply", b"", b"k", b"\xff\xfe", None])
    body = struct.pack(">Qq", draw(st.integers(0, 2**64 - 1)),
                       draw(st.integers(-2**63, 2**63 - 1)))
    clean = True
    for _ in range(draw(st.integers(0, 3))):
        headers = draw(st.lists(st.tuples(head_key, blob), max_size=3))
        corrupt = draw(st.integers(0, 5)) == 0
        e, _ = entry(draw(st.integers(-2**63, 2**63 - 1)), draw(blob), draw(blob), headers,
                     ts=draw(st.integers(-2**63, 2**63 - 1)),
                     epoch=draw(st.integers(0, 2**64 - 1)))
        msg = bytes([draw(st.integers(0, 255)), draw(st.integers(0, 255))]) + e[34:]  # magic,
        e = e[:28] + struct.pack(">I", crc32c.crc32c(msg) ^ corrupt) + msg  # attributes
        clean = clean and not corrupt and all(k != b"\xff\xfe" for k, _ in headers)
        body += e
    how = draw(st.integers(0, 4))
    if how == 0:
        return body[: draw(st.integers(0, len(body)))], False
    if how == 1 and body:
        at = draw(st.integers(0, len(body) - 1))
        return body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1:], False
    return body, clean


@settings(max_examples=200, deadline=None)
@given(_message_sets())
def test_compiled_message_sets_are_the_references(case):
    # the compiled ReplicationResponse parse (envelope._COMPILED) answers what the
    # reference does, or None (the reference's); it takes every clean body
    from dissectors.liftbridge import envelope

    body, clean = case
    if envelope._COMPILED is None:
        pytest.skip("the compiled walk is not built")
    got = envelope._COMPILED(body, envelope.Entry, crc32c.crc32c, "ok")
    assert got is None or got == envelope._parse_entries(body, 0)
    assert got is not None or not clean


def test_replication_response_entries_with_request_context():
    sc = scope()
    sc.dispatch(carried("liftbridge-default.orders.1.replicate", env(2, pb((1, "b"), (2, 5))),
                        "_INBOX.rep"))
    e0, crc0 = entry(5, b"k", b"v0", [(b"subject", b"orders.1"), (b"reply", b"")])
    e1, crc1 = entry(6, None, None, [(b"subject", b"orders.1"), (b"reply", b"_INBOX.z")])
    body = struct.pack(">Qq", 2, 6) + e0 + e1
    recs = sc.dispatch(carried("_INBOX.rep", env(3, body), op="MSG"))
    assert anomalies(recs) == []
    (rec,) = [x for x in recs if x.table == "liftbridge"]
    r = one(recs)
    assert nonnull(r) == head(
        3, "ReplicationResponse", len(body), stream="orders", partition=1, leader_epoch=2,
        high_watermark=6, entry_count=2,
    )
    kids = [{c: k.values.get(c) for c in ENTRY_COLUMNS} for k in rec.children]
    assert [k.table for k in rec.children] == ["liftbridge_entries"] * 2
    assert nonnull(kids[0]) == {
        "entry_index": 0, "offset": 5, "timestamp": TS, "leader_epoch": 2, "size": len(e0) - 28,
        "crc32c": crc0, "crc_status": "ok", "magic": 1, "attributes": 0, "key": b"k",
        "value_len": 2, "value_sha256": hashlib.sha256(b"v0").hexdigest(), "value": b"v0",
        "value_truncated": False, "headers": [("subject", b"orders.1"), ("reply", b"")],
        "subject": "orders.1", "reply": "", "malformed": False,
    }
    assert nonnull(kids[1]) == {
        "entry_index": 1, "offset": 6, "timestamp": TS, "leader_epoch": 2, "size": len(e1) - 28,
        "crc32c": crc1, "crc_status": "ok", "magic": 1, "attributes": 0,
        "headers": [("subject", b"orders.1"), ("reply", b"_INBOX.z")], "subject": "orders.1",
        "reply": "_INBOX.z", "malformed": False,
    }
    # the replicated entries taught us the stream subject
    plain = one(sc.dispatch(carried("orders.1", b"raw")))
    assert (plain["magic_ok"], plain["stream"], plain["partition"]) == (False, "orders", 1)
    env_ = {"capture_id": "c", "flow_id": 1, "direction": "s2c"}
    validate_batch(ENTRIES_TABLE, rows_to_batch(
        ENTRIES_TABLE, [{**env_, "record_id": i, **k.values} for i, k in enumerate(rec.children)]
    ))


def test_replication_response_empty_and_damaged_message_sets():
    r = one(scope().dispatch(carried("_INBOX.r", env(3, struct.pack(">Qq", 1, -1)))))
    assert (r["high_watermark"], r["entry_count"], r["malformed"]) == (-1, 0, False)
    e0, _ = entry(1, b"k", b"v", [], corrupt=True)
    recs = scope().dispatch(carried("_INBOX.r", env(3, struct.pack(">Qq", 1, 1) + e0 + e0[:40])))
    r = one(recs)
    assert (r["entry_count"], r["malformed"]) == (2, True)
    assert sorted(anomalies(recs)) == [
        "liftbridge.bad_message_set", "liftbridge.entry_crc_mismatch"
    ]
    (rec,) = [x for x in recs if x.table == "liftbridge"]
    assert rec.children[0].values["crc_status"] == "mismatch"
    assert rec.children[1].values["malformed"] is True
    assert "declares" in rec.children[1].values["decode_error"]
    recs = scope().dispatch(carried("_INBOX.r", env(3, b"\x00" * 10)))
    assert one(recs)["malformed"] and anomalies(recs) == ["liftbridge.bad_message_set"]


def test_activity_and_cursor_values_decoded():
    event = pb((1, 12), (2, 0), (3, b""))
    body = pb((3, event), (5, "__activity"))
    r = one(scope().dispatch(carried("liftbridge-default.activity", env(0, body))))
    assert r["value_decoded_as"] == "ActivityStreamEvent"
    assert json.loads(r["value_json"]) == {"id": 12, "op": "CREATE_STREAM", "create_stream_op": {}}
    cursor = pb((1, "orders"), (2, 1), (3, "cur-1"), (4, 77))
    body = pb((2, b"cur-1,orders,1"), (3, cursor))
    r = one(scope().dispatch(carried("liftbridge-default.cursors", env(0, body))))
    assert r["value_decoded_as"] == "Cursor"
    assert json.loads(r["value_json"]) == {"stream": "orders", "partition": 1,
                                           "cursor_id": "cur-1", "offset": 77}


def test_learning_from_acks_and_forwarded_publishes():
    sc = scope()
    sc.dispatch(carried("lb.ack.X", env(1, ACK)))
    r = one(sc.dispatch(carried("orders.1", b"x")))
    assert (r["magic_ok"], r["stream"], r["partition"]) == (False, "orders", None)
    sc.dispatch(carried("lb", env(0, pb((5, "s2"), (6, 3), (7, "s2.sub.3")))))
    r = one(sc.dispatch(carried("s2.sub.3", b"y")))
    assert (r["stream"], r["partition"]) == ("s2", 3)


def test_crc_mismatch():
    recs = scope().dispatch(carried("x", env(1, ACK, crc=0xDEADBEEF)))
    r = one(recs)
    assert (r["crc32c"], r["crc_status"], r["msg_type"]) == (0xDEADBEEF, "mismatch", "Ack")
    assert anomalies(recs) == ["liftbridge.crc_mismatch"]


@pytest.mark.parametrize(
    ("payload", "kinds", "cols"),
    [
        (MAGIC + b"\x00\x08", ["liftbridge.truncated_header"],
         {"version": 0, "header_len": 8, "malformed": True}),
        (MAGIC + bytes([0, 12, 1, 1]) + b"\x00", ["liftbridge.truncated_header"],
         {"flags": 1, "malformed": True}),
        (env(1, ACK, crc=True, hl=8), ["liftbridge.header_len_mismatch"],
         {"header_len": 8, "crc_status": None, "msg_type": "Ack", "malformed": True,
          "stream": None}),
        (env(1, b"\x00\x00\x00\x00" + ACK, hl=12), ["liftbridge.header_len_mismatch"],
         {"msg_type": "Ack", "malformed": False, "stream": "orders"}),
        (env(1, ACK, hl=200), ["liftbridge.header_len_mismatch", "liftbridge.bad_header_len"],
         {"malformed": True}),
        (env(1, ACK, version=1), ["liftbridge.unknown_version"],
         {"version": 1, "msg_type": "Ack", "malformed": True}),
        (env(1, ACK, flags=0x80), ["liftbridge.unknown_flags"],
         {"flags": 0x80, "msg_type": "Ack", "malformed": False}),
        (env(15, ACK), ["liftbridge.unknown_msg_type"],
         {"msg_type_code": 15, "msg_type": None, "malformed": True}),
        (env(1, ACK[:-3]), ["liftbridge.truncated_protobuf"],
         {"msg_type": "Ack", "malformed": True, "stream": "orders"}),
        (env(1, b"\x08\x01"), ["liftbridge.bad_protobuf"], {"malformed": True}),
        (env(2, pb((3, 2**64 - 1))), ["liftbridge.uint64_overflow"],
         {"leader_epoch": None, "malformed": False}),
    ],
)
def test_header_and_payload_problems(payload, kinds, cols):
    recs = scope().dispatch(carried("x.y", payload))
    r = one(recs)
    assert anomalies(recs) == kinds
    for k, v in cols.items():
        assert r[k] == v, k
    assert r["malformed"] == (r["decode_error"] is not None)


def test_value_cap():
    r = one(scope(payload_cap=3).dispatch(carried("o", env(0, MESSAGE))))
    assert (r["value"], r["value_len"], r["value_truncated"]) == (VALUE[:3], len(VALUE), True)


def test_non_magic_payload_is_not_claimed_by_probe():
    assert LiftbridgeDissector.probe_payload(b"\xb9\x0e\x43") == 0
    assert scope().dispatch(carried("orders", b"hello")) == []


@pytest.mark.parametrize("payload", [b"", b"\xb9", b"\xb9\x0e\x43", b"\xb9\x0e\x43\xb5",
                                     b"\xb9\x0e\x43\xb4", env(0, MESSAGE), b"x" + env(0, MESSAGE)])
def test_the_declared_prefix_rule_is_the_probe(payload):
    # the NATS scan decides the probe from probe_prefixes alone (dispatch flag 3)
    from dissectors.dispatch import probe_first_bytes

    rule = payload.startswith(LiftbridgeDissector.probe_prefixes or ())
    assert (LiftbridgeDissector.probe_payload(payload) == 1) == rule
    flags = probe_first_bytes([LiftbridgeDissector])
    assert flags[0xB9] == 3 and flags[256:] == b"\x04" + MAGIC
    assert sum(flags[:256]) == 3


def test_all_15_names():
    from dissectors.liftbridge import MSG_TYPES

    assert len(MSG_TYPES) == 15 and MSG_TYPES[3] == "ReplicationResponse"
    assert MSG_TYPES[14] == "PartitionNotification"


FRAMES = [env(0, MESSAGE), env(1, ACK, crc=True), env(3, struct.pack(">Qq", 1, 1) +
          entry(1, b"k", b"v", [(b"subject", b"s")])[0]), env(8, pb((1, 0), (2, b"\x0a\x00")))]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=60).map(lambda b: MAGIC + b),
            st.builds(lambda f, i, b: f[:i] + bytes([b]) + f[i + 1:],
                      st.sampled_from(FRAMES), st.integers(4, 120), st.integers(0, 255)),
            st.builds(lambda f, n: f[:n], st.sampled_from(FRAMES), st.integers(4, 120)),
            st.binary(max_size=30),
        ),
        max_size=10,
    )
)
def test_random_and_mutated_envelopes_never_raise_and_rows_validate(payloads):
    sc = scope()
    sc.dispatch(carried("liftbridge-default.orders.0.replicate", env(2, b""), "_INBOX.r"))
    main, kids = [], []
    for p in payloads:
        for subject in ("orders", "_INBOX.r"):
            recs = sc.dispatch(carried(subject, p))
            if any(r.values.get("malformed") for r in recs):
                assert any(r.table == "anomalies" for r in recs)  # never silent
            for rec in recs:
                if rec.table == "anomalies":
                    assert rec.values["kind"].startswith(("liftbridge.", "stan."))
                    continue
                if rec.table == "liftbridge":
                    main.append(rec.values)
                    kids.extend(k.values for k in rec.children)
    env_ = {"capture_id": "c", "flow_id": 1, "direction": "c2s"}
    validate_batch(LIFTBRIDGE_TABLE, rows_to_batch(
        LIFTBRIDGE_TABLE, [{**env_, "record_id": i, **v} for i, v in enumerate(main)]))
    validate_batch(ENTRIES_TABLE, rows_to_batch(
        ENTRIES_TABLE, [{**env_, "record_id": i, **v} for i, v in enumerate(kids)]))


def test_stream_subject_memory_is_bounded(monkeypatch):
    import dissectors.liftbridge.decoder as lb

    monkeypatch.setattr(lb, "MAX_STREAM_SUBJECTS", 2)
    sc = scope()
    for i in range(4):
        sc.dispatch(carried("x", env(1, pb((1, "s"), (2, f"sub.{i}")))))
    state = sc.states["liftbridge"]
    assert list(state.stream_subjects) == ["sub.2", "sub.3"]

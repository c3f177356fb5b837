"""STAN dissector: every message type to exact values, typing by learned inboxes,
default subjects and inference, CRC, malformed input, schema validation, never-raise."""

from __future__ import annotations

import hashlib
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.api import Direction
from dissectors.dispatch import PayloadDispatcher
from dissectors.liftbridge import LiftbridgeDissector
from dissectors.schema import rows_to_batch, validate_batch
from dissectors.stan import STAN_TABLE, StanDissector
from tests.stan.wirehelp import anomalies, carried, nonnull, pb, rows, tag, varint

S2C = Direction.S2C
TS_NS = 1_700_000_000_123_456_789


def scope(**options):
    return PayloadDispatcher([StanDissector, LiftbridgeDissector], options, strict=True).scope(
        ("127.0.0.1", 4222)
    )


COLUMNS = [f.name for f in STAN_TABLE.fields]


def one(records):
    """The single stan row of ``records`` with every column (absent = None)."""
    (row,) = rows(records, "stan")
    assert set(row) <= set(COLUMNS)
    return {c: row.get(c) for c in COLUMNS}


def base(msg_type, typed_by="learned", inferred=False, **cols):
    """Columns every row has, plus ``cols``."""
    out = {
        "msg_type": msg_type,
        "typed_by": typed_by,
        "inferred": inferred,
        "malformed": False,
        "unknown_fields": [],
    }
    out.update(cols)
    return out


# --- the frames of one client session (built with the independent encoder) ---------

CONNECT_REQ = pb((1, "client-1"), (2, "_INBOX.hb1"), (3, 1), (4, b"CONNID1"), (5, 5), (6, 88))
CONNECT_RESP = pb(
    (1, "Q.pub.7"), (2, "Q.sub.7"), (3, "Q.unsub.7"), (4, "Q.close.7"),
    (6, "Q.subclose.7"), (7, "_STAN.discover.test-cluster.pings"), (8, 5), (9, 88), (10, 1),
    (100, "PKEY"),
)
DATA = b"hello \x00\xff world"
PUB_MSG = pb((1, "client-1"), (2, "guid-1"), (3, "orders"), (5, DATA), (6, b"CONNID1"))
PUB_ACK = pb((1, "guid-1"))
SUB_REQ = pb(
    (1, "client-1"), (2, "orders"), (3, "workers"), (4, "_INBOX.deliver1"), (5, 1024), (6, 30),
    (7, "dur"), (10, 4), (11, 0), (12, 0),
)
SUB_RESP = pb((2, "_INBOX.acks1"))
MSG_PROTO = pb(
    (1, 1), (2, "orders"), (4, DATA), (5, TS_NS), (6, True), (7, 2), (10, zlib.crc32(DATA)),
)
ACK = pb((1, "orders"), (2, 1))
PING = pb((1, b"CONNID1"))
UNSUB_REQ = pb((1, "client-1"), (2, "orders"), (3, "_INBOX.deliver1"), (4, "dur"))
CLOSE_REQ = pb((1, "client-1"))


def session_rows(sc):
    """Feed one client session through ``sc``; return the stan rows in order."""
    out = []
    steps = [
        ("_STAN.discover.test-cluster", CONNECT_REQ, "_INBOX.c1", Direction.C2S),
        ("_INBOX.c1", CONNECT_RESP, None, Direction.C2S),  # server's PUB of the response
        ("_INBOX.c1", CONNECT_RESP, None, S2C),  # ... delivered to the client
        ("Q.pub.7.orders", PUB_MSG, "_STAN.acks.A1", Direction.C2S),
        ("_STAN.acks.A1", PUB_ACK, None, S2C),
        ("Q.sub.7", SUB_REQ, "_INBOX.s1", Direction.C2S),
        ("_INBOX.s1", SUB_RESP, None, S2C),
        ("_INBOX.deliver1", MSG_PROTO, None, S2C),
        ("_INBOX.acks1", ACK, None, Direction.C2S),
        ("_STAN.discover.test-cluster.pings", PING, "_INBOX.p1", Direction.C2S),
        ("_INBOX.p1", b"", None, S2C),  # PingResponse without error: empty protobuf
        ("_INBOX.hb1", b"", "_INBOX.h1", S2C),  # server heartbeat
        ("_INBOX.h1", b"", None, Direction.C2S),  # client's reply
        ("Q.subclose.7", UNSUB_REQ, "_INBOX.sc1", Direction.C2S),
        ("_INBOX.sc1", b"", None, S2C),
        ("Q.unsub.7", UNSUB_REQ, "_INBOX.u1", Direction.C2S),
        ("_INBOX.u1", pb((3, "stan: unknown subscription")), None, S2C),
        ("Q.close.7", CLOSE_REQ, "_INBOX.x1", Direction.C2S),
        ("_INBOX.x1", b"", None, S2C),
    ]
    for subject, payload, reply, direction in steps:
        recs = sc.dispatch(carried(subject, payload, reply, direction=direction))
        assert anomalies(recs) == []
        out.append(one(recs))
    return out


def test_full_session_typed_by_learned_subjects_exact_values():
    r = session_rows(scope())
    assert [x["msg_type"] for x in r] == [
        "ConnectRequest", "ConnectResponse", "ConnectResponse", "PubMsg", "PubAck",
        "SubscriptionRequest", "SubscriptionResponse", "MsgProto", "Ack", "Ping",
        "PingResponse", "Heartbeat", "HeartbeatReply", "UnsubscribeRequest",
        "SubscriptionResponse", "UnsubscribeRequest", "SubscriptionResponse", "CloseRequest",
        "CloseResponse",
    ]
    assert nonnull(r[0]) == base(
        "ConnectRequest", "default_subject", client_id="client-1", heartbeat_inbox="_INBOX.hb1",
        protocol=1, conn_id=b"CONNID1", ping_interval=5, ping_max_out=88,
    )
    assert nonnull(r[1]) == base(
        "ConnectResponse", pub_prefix="Q.pub.7", sub_requests="Q.sub.7",
        unsub_requests="Q.unsub.7", close_requests="Q.close.7", error="",
        sub_close_requests="Q.subclose.7", ping_requests="_STAN.discover.test-cluster.pings",
        ping_interval=5, ping_max_out=88, protocol=1, public_key="PKEY",
    )
    assert r[2] == r[1]
    assert nonnull(r[3]) == base(
        "PubMsg", client_id="client-1", guid="guid-1", channel="orders", reply="",
        data_len=len(DATA), data_sha256=hashlib.sha256(DATA).hexdigest(), data=DATA,
        data_truncated=False, conn_id=b"CONNID1", pub_sha256=b"", pub_sha256_status="absent",
    )
    assert nonnull(r[4]) == base("PubAck", guid="guid-1", error="")
    assert nonnull(r[5]) == base(
        "SubscriptionRequest", client_id="client-1", channel="orders", q_group="workers",
        inbox="_INBOX.deliver1", max_in_flight=1024, ack_wait_secs=30, durable_name="dur",
        start_position="First", start_sequence=0, start_time_delta_ns=0,
    )
    assert nonnull(r[6]) == base("SubscriptionResponse", ack_inbox="_INBOX.acks1", error="")
    assert nonnull(r[7]) == base(
        "MsgProto", sequence=1, channel="orders", reply="", data_len=len(DATA),
        data_sha256=hashlib.sha256(DATA).hexdigest(), data=DATA, data_truncated=False,
        timestamp=TS_NS, redelivered=True, redelivery_count=2, crc32=zlib.crc32(DATA),
        crc_status="ok",
    )
    assert nonnull(r[8]) == base("Ack", channel="orders", sequence=1)
    assert nonnull(r[9]) == base("Ping", conn_id=b"CONNID1")
    assert nonnull(r[10]) == base("PingResponse", error="")
    assert nonnull(r[11]) == base("Heartbeat")
    assert nonnull(r[12]) == base("HeartbeatReply")
    assert nonnull(r[13]) == base(
        "UnsubscribeRequest", sub_close=True, client_id="client-1", channel="orders",
        inbox="_INBOX.deliver1", durable_name="dur",
    )
    assert nonnull(r[14]) == base("SubscriptionResponse", ack_inbox="", error="")
    assert nonnull(r[15])["sub_close"] is False
    assert nonnull(r[16]) == base(
        "SubscriptionResponse", ack_inbox="", error="stan: unknown subscription"
    )
    assert nonnull(r[17]) == base("CloseRequest", client_id="client-1")
    assert nonnull(r[18]) == base("CloseResponse", error="")
    assert all(x["inferred_alternatives"] is None for x in r)


def test_probe_first_bytes_are_those_the_schemas_give():
    """The dissector's written-out first bytes (so that registering it reads no schema)
    are exactly the tags ``decode`` derives from the STAN schemas."""
    from dissectors.stan.decode import FIRST_BYTES

    assert StanDissector.probe_first_bytes == FIRST_BYTES


def test_rows_pass_the_schema_validator():
    r = session_rows(scope())
    env = {"capture_id": "c", "flow_id": 1, "direction": "c2s"}
    batch = rows_to_batch(STAN_TABLE, [{**env, "record_id": i, **x} for i, x in enumerate(r)])
    validate_batch(STAN_TABLE, batch)
    assert batch.num_rows == 19


def test_custom_pub_prefix_is_inferred_until_learned():
    sc = scope()
    r = one(sc.dispatch(carried("Q.pub.7.orders", PUB_MSG, "_STAN.acks.A1")))
    assert (r["msg_type"], r["typed_by"], r["inferred"]) == ("PubMsg", "inference", True)
    sc.dispatch(carried("_STAN.discover.test-cluster", CONNECT_REQ, "_INBOX.c1"))
    sc.dispatch(carried("_INBOX.c1", CONNECT_RESP))
    assert one(sc.dispatch(carried("Q.pub.7.a.b", PUB_MSG, "_STAN.acks.A1")))["typed_by"] == (
        "learned"
    )


@pytest.mark.parametrize(
    ("subject", "payload", "msg_type"),
    [
        ("_STAN.discover.any", CONNECT_REQ, "ConnectRequest"),
        ("_STAN.discover.a-b.pings", PING, "Ping"),
        ("_STAN.discover.with.dots.pings", PING, "Ping"),
        ("_STAN.pub.NOTCLUSTER.orders.eu", PUB_MSG, "PubMsg"),
        ("_STAN.sub.XYZ", SUB_REQ, "SubscriptionRequest"),
        ("_STAN.unsub.XYZ", UNSUB_REQ, "UnsubscribeRequest"),
        ("_STAN.subclose.XYZ", UNSUB_REQ, "UnsubscribeRequest"),
        ("_STAN.close.XYZ", CLOSE_REQ, "CloseRequest"),
        ("_STAN.acks.NUID", PUB_ACK, "PubAck"),
        ("_STAN.subacks.test-cluster.orders.NUID", ACK, "Ack"),  # v0.5-0.7 servers
    ],
)
def test_default_subjects_match_prefix_plus_any_token(subject, payload, msg_type):
    row = one(scope().dispatch(carried(subject, payload, "_INBOX.r")))
    assert (row["msg_type"], row["typed_by"], row["inferred"]) == (
        msg_type, "default_subject", False
    )
    if subject.startswith("_STAN.subclose"):
        assert row["sub_close"] is True


def test_default_subjects_do_not_claim_other_stan_internal_subjects():
    sc = scope()
    r = one(sc.dispatch(carried("_STAN.sub.a.b", SUB_REQ, "_INBOX.r")))  # one token only
    assert (r["msg_type"], r["typed_by"]) == ("SubscriptionRequest", "inference")
    assert sc.dispatch(carried("_STAN.pub.X", b"\x01")) == []  # needs a channel
    assert sc.dispatch(carried("_STAN.ack.test-cluster", b"\x01")) == []  # server-internal


def test_response_without_request_is_inferred():
    sc = scope()
    r = one(sc.dispatch(carried("_INBOX.unknown", CONNECT_RESP, op="MSG", direction=S2C)))
    assert (r["msg_type"], r["typed_by"], r["inferred"], r["inferred_alternatives"]) == (
        "ConnectResponse", "inference", True, []
    )
    assert r["pub_prefix"] == "Q.pub.7"
    # what it names is learned, flagged as resting on an inference
    p = one(sc.dispatch(carried("Q.pub.7.orders", PUB_MSG, "_STAN.acks.A1")))
    assert (p["msg_type"], p["typed_by"], p["inferred"]) == ("PubMsg", "learned", True)
    # ... unless a STAN default subject gives the same type
    s = one(sc.dispatch(carried("_STAN.discover.test-cluster.pings", PING, "_INBOX.q")))
    assert (s["msg_type"], s["typed_by"], s["inferred"]) == ("Ping", "default_subject", False)


def test_deliveries_after_an_uncaptured_subscription_are_inferred_msgproto():
    sc = scope()
    r = one(sc.dispatch(carried("_INBOX.mid", MSG_PROTO, op="MSG", direction=S2C)))
    assert (r["msg_type"], r["typed_by"], r["inferred"]) == ("MsgProto", "inference", True)
    assert (r["sequence"], r["crc_status"]) == (1, "ok")
    r2 = one(sc.dispatch(carried("_INBOX.mid", pb((1, 2), (2, "orders"), (5, TS_NS)))))
    assert (r2["msg_type"], r2["typed_by"], r2["inferred"]) == ("MsgProto", "learned", True)
    a = one(sc.dispatch(carried("_INBOX.ackmid", ACK)))
    assert (a["msg_type"], a["typed_by"], a["inferred"], a["sequence"]) == (
        "Ack", "inference", True, 1
    )


def test_inferred_request_binds_its_reply_and_inbox():
    sc = scope()
    r = one(sc.dispatch(carried("custom.subscribe", SUB_REQ, "_INBOX.s9")))
    assert (r["msg_type"], r["typed_by"], r["inferred"]) == (
        "SubscriptionRequest", "inference", True
    )
    resp = one(sc.dispatch(carried("_INBOX.s9", b"")))  # empty: only a binding can type it
    assert (resp["msg_type"], resp["inferred"], resp["ack_inbox"]) == (
        "SubscriptionResponse", True, ""
    )
    m = one(sc.dispatch(carried("_INBOX.deliver1", MSG_PROTO)))
    assert (m["msg_type"], m["typed_by"], m["inferred"]) == ("MsgProto", "learned", True)
    u = one(sc.dispatch(carried("custom.unsub", UNSUB_REQ, "_INBOX.u9")))
    assert (u["msg_type"], u["sub_close"]) == ("UnsubscribeRequest", None)


def test_ambiguous_or_foreign_payloads_are_not_claimed():
    sc = scope()
    for payload in (
        b"",
        PUB_ACK,  # one string field: any protobuf looks like this
        pb((1, "unknown clientID")),
        b'{"json": true}',
        b"plain text payload",
        pb((1, "x"), (3, 5)),
    ):
        assert sc.dispatch(carried("_INBOX.zz", payload)) == []
        assert sc.dispatch(carried("app.subject", payload, "_INBOX.r")) == []


def test_custom_discover_prefix_is_learned_from_the_capture():
    sc = scope()
    r = one(sc.dispatch(carried("_MY.disc.clusterA", CONNECT_REQ, "_INBOX.cc")))
    assert (r["msg_type"], r["typed_by"], r["inferred"]) == ("ConnectRequest", "inference", True)
    resp = one(sc.dispatch(carried("_INBOX.cc", CONNECT_RESP, direction=S2C)))
    assert (resp["msg_type"], resp["typed_by"], resp["inferred"]) == (
        "ConnectResponse", "learned", True
    )
    # confirmed: the prefix is now a discover prefix, and this client's subjects are learned
    r2 = one(sc.dispatch(carried("_MY.disc.clusterA", CONNECT_REQ, "_INBOX.cd")))
    assert (r2["typed_by"], r2["inferred"]) == ("learned", False)
    r3 = one(sc.dispatch(carried("_MY.disc.otherCluster", pb((1, "c2"), (2, "_INBOX.h")), "_I.x")))
    assert (r3["msg_type"], r3["typed_by"]) == ("ConnectRequest", "learned")
    p = one(sc.dispatch(carried("Q.pub.7.orders", PUB_MSG, "_STAN.acks.A1")))
    assert (p["typed_by"], p["inferred"]) == ("learned", False)
    ping = one(sc.dispatch(carried("_MY.disc.clusterB.pings", PING, "_INBOX.pp")))
    assert ping["msg_type"] == "Ping"
    # the confirmed pair also vouches for the heartbeat inbox the request named
    hb = one(sc.dispatch(carried("_INBOX.hb1", b"", "_INBOX.h9", direction=S2C)))
    assert (hb["msg_type"], hb["typed_by"], hb["inferred"]) == ("Heartbeat", "learned", False)
    # and the response seen a second time (the MSG delivering it) keeps the bindings learned
    again = one(sc.dispatch(carried("_INBOX.cc", CONNECT_RESP, op="MSG", direction=S2C)))
    assert again["inferred"] is True
    p = one(sc.dispatch(carried("Q.pub.7.orders", PUB_MSG, "_STAN.acks.A1")))
    assert (p["typed_by"], p["inferred"]) == ("learned", False)


def test_unconfirmed_discovery_binds_heartbeats_as_inferred():
    sc = scope()
    one(sc.dispatch(carried("_MY.disc.clusterA", CONNECT_REQ, "_INBOX.cc")))
    hb = one(sc.dispatch(carried("_INBOX.hb1", b"", "_INBOX.h9", direction=S2C)))
    assert (hb["msg_type"], hb["typed_by"], hb["inferred"]) == ("Heartbeat", "learned", True)
    reply = one(sc.dispatch(carried("_INBOX.h9", b"")))
    assert (reply["msg_type"], reply["inferred"]) == ("HeartbeatReply", True)


def test_crc_mismatch_and_absent():
    sc = scope()
    sc.dispatch(carried("_STAN.sub.X", SUB_REQ, "_INBOX.s1"))
    bad = pb((1, 7), (2, "orders"), (4, DATA), (5, TS_NS), (10, zlib.crc32(DATA) ^ 1))
    recs = sc.dispatch(carried("_INBOX.deliver1", bad))
    r = one(recs)
    assert (r["crc32"], r["crc_status"]) == (zlib.crc32(DATA) ^ 1, "mismatch")
    assert anomalies(recs) == ["stan.crc_mismatch"]
    r = one(sc.dispatch(carried("_INBOX.deliver1", pb((1, 8), (2, "orders"), (4, DATA)))))
    assert (r["crc32"], r["crc_status"], r["timestamp"]) == (None, "absent", None)


def test_pub_sha256_field_verified():
    good = PUB_MSG + pb((10, hashlib.sha256(DATA).digest()))
    bad = PUB_MSG + pb((10, b"\x00" * 32))
    sc = scope()
    assert one(sc.dispatch(carried("_STAN.pub.X.c", good, "_STAN.acks.1")))[
        "pub_sha256_status"
    ] == "ok"
    assert one(sc.dispatch(carried("_STAN.pub.X.c", bad, "_STAN.acks.1")))[
        "pub_sha256_status"
    ] == "mismatch"


def test_truncated_protobuf_keeps_what_parsed():
    cut = PUB_MSG[: PUB_MSG.index(DATA) + 3]
    recs = scope().dispatch(carried("_STAN.pub.X.orders", cut, "_STAN.acks.A1"))
    r = one(recs)
    assert nonnull(r) == base(
        "PubMsg", "default_subject", malformed=True,
        decode_error="data (field 5): length 14 runs past the end (3 bytes left) (at offset 27)",
        client_id="client-1", guid="guid-1", channel="orders",
    )
    assert anomalies(recs) == ["stan.truncated_protobuf"]


def test_wrong_wire_type_is_bad_protobuf():
    recs = scope().dispatch(carried("_STAN.acks.A", pb((1, "g")) + tag(2, 0) + varint(3)))
    r = one(recs)
    assert r["malformed"] and r["guid"] == "g" and r.get("error") is None
    assert anomalies(recs) == ["stan.bad_protobuf"]


def test_unknown_fields_listed_invalid_utf8_flagged():
    recs = scope().dispatch(carried("_STAN.acks.A", pb((1, b"g\xfe"), (15, 1))))
    r = one(recs)
    assert (r["guid"], r["unknown_fields"], r["malformed"]) == ("g\\xfe", ["15"], False)
    assert anomalies(recs) == ["stan.invalid_utf8"]


def test_uint64_sequence_overflow_is_null_plus_anomaly():
    sc = scope()
    recs = sc.dispatch(carried("_STAN.subacks.x", pb((1, "orders"), (2, 2**64 - 1))))
    assert one(recs)["sequence"] is None
    assert anomalies(recs) == ["stan.uint64_overflow"]
    assert str(2**64 - 1) in recs[1].values["detail"]


def test_heartbeat_with_payload_is_flagged():
    sc = scope()
    sc.dispatch(carried("_STAN.discover.c", CONNECT_REQ, "_INBOX.c1"))
    recs = sc.dispatch(carried("_INBOX.hb1", b"xx", "_INBOX.h"))
    r = one(recs)
    assert (r["msg_type"], r["malformed"]) == ("Heartbeat", True)
    assert anomalies(recs) == ["stan.heartbeat_not_empty"]


def test_data_cap():
    sc = scope(payload_cap=4)
    r = one(sc.dispatch(carried("_STAN.pub.X.orders", PUB_MSG, "_STAN.acks.A1")))
    assert (r["data"], r["data_len"], r["data_truncated"]) == (DATA[:4], len(DATA), True)
    r = one(scope(payload_cap=None).dispatch(carried("_STAN.pub.X.o", PUB_MSG, "_STAN.acks.A")))
    assert (r["data"], r["data_truncated"]) == (DATA, False)


def test_start_position_unknown_value_kept_as_number():
    r = one(scope().dispatch(carried("_STAN.sub.X", SUB_REQ + pb((10, 9)), "_INBOX.s")))
    assert r["start_position"] == "9"


def test_bad_option():
    with pytest.raises(ValueError):
        scope(payload_cap=-1)


# --- never raise ----------------------------------------------------------------------

SUBJECTS = [
    "_STAN.discover.c", "_STAN.pub.X.c", "_STAN.sub.X", "_STAN.acks.A1", "_STAN.subacks.x",
    "_INBOX.c1", "Q.pub.7.c", "_INBOX.deliver1", "_INBOX.hb1", "random.subject",
]
FRAMES = [CONNECT_REQ, CONNECT_RESP, PUB_MSG, SUB_REQ, SUB_RESP, MSG_PROTO, ACK, PING, UNSUB_REQ]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(SUBJECTS),
            st.one_of(
                st.binary(max_size=80),
                st.builds(
                    lambda f, i, b: f[:i] + bytes([b]) + f[i + 1 :],
                    st.sampled_from(FRAMES), st.integers(0, 80), st.integers(0, 255),
                ),
                st.builds(lambda f, n: f[:n], st.sampled_from(FRAMES), st.integers(0, 80)),
            ),
            st.one_of(st.none(), st.sampled_from(["_INBOX.c1", "_INBOX.r", "_STAN.acks.A1"])),
        ),
        max_size=12,
    )
)
def test_random_and_mutated_payloads_never_raise_and_rows_validate(msgs):
    sc = scope()
    sc.dispatch(carried("_STAN.discover.c", CONNECT_REQ, "_INBOX.c1"))
    sc.dispatch(carried("_INBOX.c1", CONNECT_RESP))
    sc.dispatch(carried("Q.sub.7", SUB_REQ, "_INBOX.s1"))
    out = []
    for subject, payload, reply in msgs:
        recs = sc.dispatch(carried(subject, payload, reply))
        if any(r.values.get("malformed") for r in recs):
            assert any(r.table == "anomalies" for r in recs)  # never silent
        for rec in recs:
            assert rec.table in ("stan", "anomalies")
            if rec.table == "anomalies":
                assert rec.values["kind"].startswith("stan.")
            else:
                out.append(rec.values)
                assert rec.values["malformed"] == (rec.values["decode_error"] is not None)
    env = {"capture_id": "c", "flow_id": 1, "direction": "c2s"}
    batch = rows_to_batch(STAN_TABLE, [{**env, "record_id": i, **x} for i, x in enumerate(out)])
    validate_batch(STAN_TABLE, batch)


def _plausible_by_definition(s, literal=True):
    """``plausible_subject`` as its docstring says it, character by character."""
    if not isinstance(s, str) or not s or len(s) > 1024:
        return False
    if any(not tok or (literal and tok in ("*", ">")) for tok in s.split(".")):
        return False
    return not any(c.isspace() for c in s) and s.isprintable()


@given(st.one_of(st.text(alphabet=st.sampled_from("ab.*> \t\u00a0\u2028\x00_é"), max_size=12),
                 st.text(max_size=12), st.none(), st.integers()),
       st.booleans())
def test_plausible_subject_is_its_definition(s, literal):
    from dissectors.stan.decode import plausible_subject

    assert plausible_subject(s, literal) == _plausible_by_definition(s, literal)

"""Felix dissector on hand-built frames: every JSON type and binary layout decodes to what
the sender put in; any cutting of the bytes gives the same rows; damage becomes anomalies
with resynchronisation; random and mutated bytes never raise."""

from __future__ import annotations

import hashlib
import json
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.api import Verdict
from dissectors.felix import FelixDissector, FelixSession, wire
from dissectors.sdk.testing import (
    Gap,
    assert_never_raises,
    assert_rows_valid,
    assert_split_invariant,
    run_session,
)
from tests.felix.helpers import C, S, assert_frame, rf, run, sender

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64_MAX = (1 << 64) - 1


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def kinds(anomalies: list[dict]) -> list[str]:
    return [a["kind"] for a in anomalies]


# ------------------------------------------------------------------ a whole conversation


def conversation() -> list[tuple]:
    """(direction, Frame) for one client stream and one event stream's worth of frames:
    every builder, every modifier bit, JSON types beyond the snapshot's."""
    big = bytes(range(256)) * 300  # 76 800 bytes: many QUIC / TCP packets
    idem_payloads = [b"i0", b"i1"]
    return [
        (C, rf.auth("t1", "demo-token", 0x7FFF)),
        (S, rf.auth_ok(0x3FFF)),
        (C, rf.publish("orders", b"hello", key=b"k1", request_id=1, ack="per_message")),
        (S, rf.publish_ok(1, 41)),
        (C, rf.publish_batch("orders", [b"a", b"", b"\x00\xff"], request_id=2, ack="per_batch")),
        (S, rf.publish_error(2, "stream is sealed", "forbidden", "fatal")),
        (C, rf.json_frame(
            {"type": "publish_idempotent", "tenant_id": "t1", "namespace": "default",
             "stream": "orders", "payloads": [rf.b64(p) for p in idem_payloads],
             "request_id": 3, "producer_id": 99, "sequence": 5},
            {"tenant_id": "t1", "stream": "orders", "request_id": 3, "producer_id": 99,
             "sequence": 5, "payload_count": 2},
            [rf._msg(p, i, 2, producer_id=99, sequence=5, request_id=3)
             for i, p in enumerate(idem_payloads)])),
        (S, rf.json_frame(
            {"type": "publish_refused", "request_id": 3,
             "reason": {"sequence_gap": {"expected": 4}}, "message": "gap"},
            {"request_id": 3, "reason": '{"sequence_gap":{"expected":4}}',
             "error_message": "gap"})),
        (C, rf.binary_publish("orders", [b"x", b"yy"])),
        (C, rf.binary_publish("orders", [b"p"], request_id=4, ack_mode="per_message")),
        (S, rf.binary_ack(4, offset=U64_MAX)),
        (C, rf.binary_publish("orders", [b"q", b"r"], key=b"route", request_id=5,
                              producer=(7, U64_MAX))),
        (S, rf.binary_ack(5, owner=("broker-2", None, 3))),
        (C, rf.binary_publish("orders", [big], key="ключ".encode(), request_id=6)),
        (S, rf.binary_ack(6, "not leader", code="not_leader", retry="redirect",
                          reason="moved", retry_after_ms=1500,
                          owner=("broker-3", "10.0.0.3:5000", 12), )),
        (S, rf.binary_ack(7, "overloaded", code="overloaded", retry="retry_after")),
        (C, rf.subscribe("orders", start={"offset": 5}, subscription_id=U64_MAX)),
        (S, rf.subscribed(U64_MAX)),
        (S, rf.event_stream_hello(9)),
        (S, rf.binary_events([b"e0", b"e1"], subscription_id=9)),
        (S, rf.binary_events([b"e2"], subscription_id=9, base_offset=2, skipped_before=1,
                             publisher="svc")),
        (S, rf.binary_events([b"e3", b"e4"], base_offset=3, times_us=[1_700_000_000_000_000,
                                                                     1_700_000_000_000_001])),
        (S, rf.binary_events([], publisher="")),
        (S, rf.event("orders", b"ev", offset=7)),
        (S, rf.event_batch("orders", [b"b0", b"b1", b"b2"], base_offset=U64_MAX)),
        (S, rf.subscription_lagged(9, 11)),
        (C, rf.cache_put("primary", "k", b"v" * 5000, request_id=8)),
        (S, rf.cache_ok(8)),
        (C, rf.cache_get("primary", "k")),
        (S, rf.cache_value("primary", "k", None)),
        (S, rf.json_frame({"type": "error", "message": "slow down", "code": 10,
                           "retry": "retry_after",
                           "detail": {"reason": "quota", "retry_after_ms": 250}},
                          {"error_message": "slow down", "error_code": "10",
                           "retry": "retry_after", "reason": "quota", "retry_after_ms": 250})),
        (S, rf.json_frame({"type": "not_leader", "node_id": "n2", "addr": "h:5000",
                           "generation": 4},
                          {"node_id": "n2", "addr": "h:5000", "generation": 4})),
        (S, rf.json_frame({"type": "group_records", "records": [{"offset": 1}]}, {})),
        (S, rf.json_frame({"type": "counter_value", "value": -5, "request_id": 12},
                          {"request_id": 12, "payload_len": None})),
    ]


def script() -> list[tuple]:
    return [(d, f.data) for d, f in conversation()]


def test_conversation_matches_the_sender():
    frames, children, anomalies, r = run(script())
    assert anomalies == []
    conv = conversation()
    assert len(frames) == len(conv)
    for i, ((d, f), row, kids) in enumerate(zip(conv, frames, children, strict=True)):
        assert row["direction"] == d.short
        assert_frame(row, kids, f.truth, f"frame {i}")
    assert_rows_valid(FelixDissector, r.records)
    assert r.session.decoded_bytes == [sum(len(f.data) for d, f in conv if d == x) for x in (C, S)]
    assert r.session.undecoded_bytes == [0, 0]


def test_conversation_details():
    frames, children, _, _ = run(script())
    auth = frames[0]
    assert auth["json"].startswith('{"type":"auth","tenant_id":"t1","token":"<redacted len=10 ')
    assert auth["advertised_flags"] == 0x7FFF
    ack = frames[10]
    assert ack["kind"] == "binary_publish_ack" and ack["offset"] == -1  # u64 max, int64 column
    assert ack["flag_names"] == ["BINARY_PUBLISH_ACK", "BINARY_PUBLISH_ACK_OFFSET"]
    idem = frames[11]
    assert idem["flags"] == 0x0149 and idem["sequence"] == -1 and idem["key"] == "route"
    big, big_kids = frames[13], children[13]
    assert big["key"] == "ключ" and big_kids[0]["payload_len"] == 76800
    assert len(big_kids[0]["payload"]) == 4096 and big_kids[0]["payload_truncated"]
    coded = frames[14]
    assert coded["flags"] == 0x0690
    assert (coded["error_code"], coded["retry"], coded["reason"], coded["retry_after_ms"],
            coded["node_id"], coded["addr"], coded["generation"]) == (
        "not_leader", "redirect", "moved", 1500, "broker-3", "10.0.0.3:5000", 12)
    assert frames[12]["addr"] is None  # an empty owner address: not published
    sub = frames[16]
    assert sub["start"] == '{"offset":5}' and sub["subscription_id"] == -1
    ts, ts_kids = frames[21], children[21]
    assert ts["flag_names"] == ["BINARY_EVENT_BATCH_SHARED", "EVENT_BATCH_OFFSETS",
                                "EVENT_BATCH_TIMESTAMPS"]
    assert [k["append_time"] for k in ts_kids] == [1_700_000_000_000_000_000,
                                                   1_700_000_000_000_001_000]
    assert [k["offset"] for k in ts_kids] == [3, 4]
    empty = frames[22]
    assert empty["payload_count"] == 0 and children[22] == [] and empty["publisher"] == ""
    batch_kids = children[24]
    assert [k["offset"] for k in batch_kids] == [-1, 0, 1]  # base u64 max wraps like u64
    cache = frames[26]
    assert cache["payload_len"] == 5000 and len(cache["payload"]) == 4096
    assert cache["payload_truncated"] and cache.get("payload_count") is None
    miss = frames[29]
    assert miss["type"] == "cache_value" and miss.get("payload") is None
    assert frames[32]["type"] == "group_records" and frames[32].get("payload_count") is None
    assert frames[33].get("payload") is None  # counter value is a number, not base64


def test_any_split_gives_the_same_rows():
    small = [(d, f.data) for d, f in conversation() if len(f.data) < 2000]
    assert_split_invariant(FelixDissector, small, rounds=30)
    assert_split_invariant(FelixDissector, script(), rounds=10, bytewise=False)


def test_caps_are_options():
    frames, children, _, _ = run(script(), payload_cap=None, json_cap=20)
    assert children[13][0]["payload"] == bytes(range(256)) * 300
    assert frames[0]["json_truncated"] and len(frames[0]["json"]) == 20
    frames, children, _, _ = run(script(), payload_cap=0)
    assert children[2][0]["payload"] == b"" and children[2][0]["payload_truncated"]
    with pytest.raises(ValueError):
        FelixSession({"payload_cap": -1})
    with pytest.raises(ValueError):
        FelixSession({"max_frame_bytes": "big"})


@pytest.mark.parametrize(("sid", "kind"), [(0, "bidi-client"), (3, "uni-server"),
                                           (6, "uni-client"), (5, "bidi-server"),
                                           (None, None)])
def test_stream_kind_comes_from_the_stream_id(sid, kind):
    opts = {} if sid is None else {"stream_id": sid}
    frames, children, _, _ = run(script()[:4], **opts)
    assert {f["stream_kind"] for f in frames} == {kind}
    assert {c["stream_kind"] for kids in children for c in kids} == {kind}


# ------------------------------------------------------------------ random frames


_text = st.text(max_size=12)
_blobs = st.lists(st.binary(max_size=40), max_size=5)
_ids = st.integers(0, (1 << 63) - 1)
_ack = st.sampled_from(["per_message", "per_batch"])
FRAMES = st.one_of(
    st.builds(rf.auth, _text, _text, st.none() | st.integers(0, 0xFFFF)),
    st.builds(rf.auth_ok, st.integers(0, 0xFFFF)),
    st.builds(rf.publish, _text, st.binary(max_size=60), key=st.none() | _text.map(str.encode),
              request_id=st.none() | _ids, ack=st.none() | _ack),
    st.builds(rf.publish_batch, _text, _blobs, request_id=st.none() | _ids),
    st.builds(rf.binary_publish, _text, _blobs, key=st.none() | _text.map(str.encode),
              request_id=st.none() | _ids, ack_mode=st.none() | _ack,
              producer=st.none() | st.tuples(_ids, _ids)),
    st.builds(rf.binary_ack, _ids, st.none() | _text, offset=st.none() | _ids),
    st.builds(rf.binary_ack, _ids, _text, code=st.sampled_from(["forbidden", "internal"]),
              retry=st.sampled_from(["retry", "fatal"]), reason=st.none() | _text.filter(bool),
              retry_after_ms=st.none() | st.integers(1, 1 << 40)),
    st.builds(rf.binary_events, _blobs, subscription_id=st.none() | _ids,
              base_offset=st.none() | st.integers(0, 1 << 40),
              publisher=st.none() | st.text(max_size=8)),
    st.builds(rf.event, _text, st.binary(max_size=30), offset=st.none() | _ids),
    st.builds(rf.cache_put, _text, _text, st.binary(max_size=30),
              request_id=st.none() | _ids, ttl_ms=st.none() | _ids),
    st.builds(rf.error, _text),
    st.builds(rf.subscribed, _ids),
)


@SETTINGS
@given(st.lists(FRAMES, min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_random_frames_decode_to_what_was_sent(frames, rnd):
    items = [(sender(f), f) for f in frames]
    sc = [(d, f.data) for d, f in items]
    whole = run(sc)
    cut = run(sc, split=random.Random(rnd.random()))
    assert cut[:3] == whole[:3]
    rows, children, anomalies, _ = whole
    allowed = {"felix.no_auth", "felix.wrong_direction"}
    assert set(kinds(anomalies)) <= allowed
    per_dir = {C: [], S: []}
    for d, f in items:
        per_dir[d].append(f)
    got = {C: [], S: []}
    for row, kids in zip(rows, children, strict=True):
        got[C if row["direction"] == "c2s" else S].append((row, kids))
    for d in (C, S):
        assert len(got[d]) == len(per_dir[d])
        for (row, kids), f in zip(got[d], per_dir[d], strict=True):
            assert_frame(row, kids, f.truth, d.short)


# ------------------------------------------------------------------ damage and anomalies


def frame(flags: int, payload: bytes, version: int = 1) -> bytes:
    return rf.header(flags, len(payload), version) + payload


AUTH = rf.auth("t1", "tok").data
OK = rf.ok().data


def test_bad_magic_resyncs_on_the_next_frame():
    garbage = b"GARBAGE\r\nFLX" + b"\x00" * 5
    frames, _, anomalies, r = run([(C, AUTH + garbage + rf.publish("s", b"p").data)])
    assert [f["type"] for f in frames] == ["auth", "publish"]
    assert kinds(anomalies) == ["felix.bad_magic", "felix.resync"]
    # the first byte is the bad header, the rest is skipped looking for the magic
    assert anomalies[1]["detail"].startswith(f"skipped {len(garbage) - 1} bytes")
    assert r.session.undecoded_bytes[C] == len(garbage)


def test_stream_not_starting_with_a_frame():
    frames, _, anomalies, _ = run([(S, b"\x00\x01junk" + OK)])
    assert [f["type"] for f in frames] == ["ok"]
    assert kinds(anomalies) == ["felix.bad_magic", "felix.resync"]


def test_oversize_length_resyncs():
    huge = rf.header(0, 5000) + b"{" * 100  # declares 5000 bytes, more than allowed below
    frames, _, anomalies, _ = run([(C, AUTH + huge + OK)], max_frame_bytes=1000)
    assert [f["type"] for f in frames] == ["auth", "ok"]
    assert kinds(anomalies)[:2] == ["felix.oversize_frame", "felix.resync"]
    assert "5000 payload bytes" in anomalies[0]["detail"]
    # the default limit is the broker's 16 MiB
    over = rf.header(0, wire.DEFAULT_MAX_FRAME_BYTES + 1)
    _, _, anomalies, _ = run([(C, AUTH + over + OK)])
    assert kinds(anomalies)[0] == "felix.oversize_frame"


@pytest.mark.parametrize(("flags", "kind"), [
    (0x8001, "felix.unknown_flags"),
    (0x8000, "felix.unknown_flags"),
    (0x0003, "felix.bad_flags"),  # two layouts
    (0x0020, "felix.bad_flags"),  # a modifier alone
    (0x0041 | 0x0020, "felix.bad_flags"),  # an event modifier on a publish batch
    (0x0101, "felix.bad_flags"),  # idempotent without acked
    (0x0802, "felix.bad_flags"),  # skipped without offsets
    (0x0410, "felix.bad_flags"),  # detail without code
])
def test_flags_that_select_no_layout_are_kept_undecoded(flags, kind):
    body = b"\x01\x02\x03"
    frames, kids, anomalies, _ = run([(C, AUTH + frame(flags, body) + rf.cache_get("c", "k").data)])
    assert [f.get("type") or f["kind"] for f in frames] == ["auth", "unknown", "cache_get"]
    row = frames[1]
    assert (row["flags"], row["body"], row["length"], kids[1]) == (flags, body, 3, [])
    assert row["unknown_flags"] == (0x8000 if flags & 0x8000 else None)
    assert kinds(anomalies) == [kind]


def test_other_versions_are_reported_not_resynced():
    frames, _, anomalies, _ = run([(C, AUTH + frame(0, b'{"type":"ok"}', version=2) + OK)])
    assert [(f["version"], f["kind"]) for f in frames] == [(1, "json"), (2, "unknown"),
                                                           (1, "json")]
    assert frames[1]["body"] == b'{"type":"ok"}'
    assert kinds(anomalies)[0] == "felix.bad_version"


def test_gap_inside_a_frame_resumes_after_it():
    pub = rf.publish("s", b"0123456789" * 10).data
    frames, _, anomalies, r = run([(C, AUTH), (C, pub[:20]), Gap(C, 30), (C, pub[50:] + OK)])
    assert [f["type"] for f in frames] == ["auth", "ok"]
    assert kinds(anomalies) == ["felix.gap_in_frame", "felix.wrong_direction"]
    assert "parsing resumes where it ends" in anomalies[0]["detail"]
    assert r.session.undecoded_bytes[C] == len(pub) - 30


def test_gap_in_a_header_resyncs():
    frames, _, anomalies, _ = run([(C, AUTH), (C, OK[:3]), Gap(C, 4), (C, b"zzz" + OK)])
    assert [f["type"] for f in frames] == ["auth", "ok"]
    assert kinds(anomalies)[:2] == ["felix.gap_in_frame", "felix.resync"]


def test_end_inside_a_frame():
    frames, _, anomalies, r = run([(C, AUTH + OK[:-2])])
    assert [f["type"] for f in frames] == ["auth"]
    assert kinds(anomalies) == ["felix.eof_in_frame"]
    assert r.session.undecoded_bytes[C] == len(OK) - 2


@pytest.mark.parametrize(("flags", "body", "kind", "error"), [
    (0x0001, b"\x00\x02t1\x00", "felix.bad_binary", "namespace length"),
    (0x0001, b"\x00\x01t\x00\x01n\x00\x01s\xff\xff\xff\xff", "felix.bad_binary",
     "count 4294967295 exceeds"),
    (0x0001, b"\x00\x01t\x00\x01n\x00\x01s\x00\x00\x00\x01\x00\x00\x00\x09abc",
     "felix.bad_binary", "message 0"),
    (0x0010, b"\x00" * 8, "felix.bad_binary", "request_id"),
    (0x0012, b"", "felix.bad_flags", None),
    (0x0002, b"\x00" * 7, "felix.bad_binary", "subscription_id"),
    (0x0004, b"\x00\x00\x00\x00extra", "felix.trailing_bytes", None),
    (0x2004, b"\x05ab", "felix.bad_binary", "publisher"),
])
def test_short_or_long_binary_layouts(flags, body, kind, error):
    frames, _, anomalies, _ = run([(S, frame(flags, body) + OK)])
    assert [f.get("type") or f["kind"] for f in frames][-1] == "ok"
    assert kind in kinds(anomalies)
    if error is not None:
        assert error in frames[0]["decode_error"]


def test_partial_batches_keep_what_decoded():
    body = (b"\x00\x01t\x00\x01n\x00\x01s\x00\x00\x00\x02" + struct.pack(">I", 2) + b"ok"
            + struct.pack(">I", 50) + b"short")
    frames, kids, anomalies, _ = run([(C, AUTH + frame(0x0001, body))])
    assert frames[1]["payload_count"] == 2 and [k["payload"] for k in kids[1]] == [b"ok"]
    assert kinds(anomalies) == ["felix.bad_binary"]


@pytest.mark.parametrize(("payload", "error"), [
    (b"not json", "not a JSON text"),
    (b"", "not a JSON text"),
    (b"[1,2]", "not an object"),
    (b'{"kind":"auth"}', "without a string"),
    (b'{"type":"ok","x":NaN}', "NaN is not JSON"),
    (b'{"type":"ok","x":"\xff"}', "UnicodeDecodeError"),
    (b"[" * 100_000 + b"]" * 100_000, "not a JSON text"),
])
def test_bad_json(payload, error):
    frames, _, anomalies, _ = run([(S, frame(0, payload) + OK)])
    assert frames[0]["kind"] == "json" and error in frames[0]["decode_error"]
    assert frames[0]["json"] == payload[:65536].decode("utf-8", "backslashreplace")
    assert kinds(anomalies)[0] == "felix.bad_json" and frames[1]["type"] == "ok"


def test_fields_of_the_wrong_form():
    obj = {"type": "publish", "tenant_id": 5, "namespace": "ns", "stream": "s",
           "payload": "not base64!", "request_id": -1, "ack": True, "key": "@@"}
    frames, kids, anomalies, _ = run([(C, AUTH + frame(0, json.dumps(obj).encode()))])
    row = frames[1]
    assert (row.get("tenant_id"), row["namespace"], row.get("request_id"), row.get("key")) == (
        None, "ns", None, None)
    assert row["payload_count"] == 1 and row.get("payload") is None
    assert kids[1][0]["payload"] is None and kids[1][0]["payload_len"] is None
    assert kinds(anomalies) == ["felix.bad_field"]
    detail = anomalies[0]["detail"]
    for name in ("tenant_id", "request_id", "ack", "key", "payload"):
        assert name in detail


def test_bad_codes_and_utf8_in_binary_layouts():
    acked = struct.pack(">QB", 1, 3) + b"\x00\x02\xff\xfe\x00\x01n\x00\x01s\x00\x00\x00\x00"
    ack = struct.pack(">BQ", 2, 1) + b"\x00\x00"
    frames, _, anomalies, _ = run([(C, AUTH + frame(0x0009, acked)), (S, frame(0x0010, ack))])
    assert frames[1]["ack_mode"] == "3" and frames[1]["tenant_id"] == "\\xff\\xfe"
    assert frames[2]["ack_status"] == "2"
    assert kinds(anomalies) == ["felix.bad_ack_mode", "felix.bad_utf8", "felix.bad_ack_status"]


def test_unknown_ack_codes_are_numbers():
    body = struct.pack(">BQ", 1, 1) + b"\x00\x01e" + struct.pack(">HB", 99, 9)
    frames, _, anomalies, _ = run([(S, frame(0x0210, body))])
    assert (frames[0]["error_code"], frames[0]["retry"]) == ("99", "9")
    assert anomalies == []


def test_first_client_frame_must_be_auth_and_directions_are_checked():
    frames, _, anomalies, _ = run([(C, OK + rf.publish("s", b"x").data + OK),
                                   (S, rf.publish("s", b"y").data)])
    assert len(frames) == 4
    assert kinds(anomalies) == ["felix.no_auth", "felix.wrong_direction",
                                "felix.wrong_direction"]  # once per type and direction


@pytest.mark.parametrize("payload", [
    b'{"type":"auth","tenant_id":"t","token":"s3cret"}',
    b'{"type":"auth","TOKEN":"s3cret"}',
    b'{"type":"auth","\\u0074oken":"s3cret"}',
    b'{"type":"auth","token":"s3cr',  # cut short
    b'{"type":"auth","token":{"nested":"s3cret"}}',
])
def test_tokens_never_reach_the_table(payload):
    for version in (1, 2):  # decoded JSON, and a body kept undecoded
        frames, _, _, _ = run([(C, frame(0, payload, version))])
        shown = frames[0].get("json") or frames[0]["body"].decode()
        assert "s3cr" not in shown and "<redacted len=" in shown
        frames, _, _, _ = run([(C, frame(0, payload, version))], keep_secrets=True)
        assert "s3cr" in (frames[0].get("json") or frames[0]["body"].decode())


def test_records_validate_against_the_tables():
    frames = [frame(0x8001, b"x"), frame(0, b"nope"), rf.publish("s", b"\xff").data]
    r = run_session(FelixDissector, [(C, b"junk" + b"".join(frames)), Gap(C, 5), (C, OK)])
    assert_rows_valid(FelixDissector, r.records)


# ------------------------------------------------------------------ probe and fuzzing


@pytest.mark.parametrize(("prefix", "verdict"), [
    (b"", Verdict.NEED_MORE), (b"F", Verdict.NEED_MORE), (b"FLX", Verdict.NEED_MORE),
    (b"FLX1", Verdict.YES), (AUTH, Verdict.YES), (b"FLXI\x00\x01", Verdict.NO),
    (b"GET / HTTP/1.1", Verdict.NO), (b"\x00\x00\x00\x10", Verdict.NO),
])
def test_probe(prefix, verdict):
    assert FelixDissector.probe(C, prefix) == verdict


def test_resync_rule_keeps_a_partial_magic():
    assert wire.resync(b"xxFLX1yy", None) == (2, True)
    assert wire.resync(b"xxxFL", None) == (3, False)
    assert wire.resync(b"xxx", None) == (3, False)


def test_mutated_conversations_never_raise():
    small = [(d, f.data) for d, f in conversation() if len(f.data) < 6000]
    corpus = [small[i : i + 6] for i in range(0, len(small), 3)]
    assert_never_raises(FelixDissector, corpus, rounds=400, seed=1)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([C, S]), st.binary(max_size=300)), max_size=6))
def test_random_bytes_never_raise(items):
    for prefix in (b"", b"FLX1\x00\x01"):
        sc = [(d, prefix + b) for d, b in items if prefix + b]
        for d, b in sc:
            FelixDissector.probe(d, b)
        r = run_session(FelixDissector, sc, split=random.Random(len(sc)))
        assert_rows_valid(FelixDissector, r.records)


@SETTINGS
@given(st.integers(0, 0xFFFF), st.binary(max_size=200))
def test_any_flags_with_any_payload_never_raise(flags, body):
    r = run_session(FelixDissector, [(S, frame(flags, body))])
    assert_rows_valid(FelixDissector, r.records)
    rows = [x for x in r.records if x.table == "felix"]
    assert len(rows) == 1 and rows[0].values["flags"] == flags

"""The upstream conformance vectors (shared/vectors/felix, README there): every vector
decodes to exactly its documented fields, with no anomaly, and our sending-side builders
reproduce its bytes (so the frames of the other tests are byte-true Felix)."""

from __future__ import annotations

import hashlib
import json

import pytest

from dissectors.felix import FELIX, FelixDissector
from dissectors.sdk.testing import assert_rows_valid, run_session
from tests.conftest import SHARED
from tests.felix.helpers import C, S, rf, rows_of

VECTORS = SHARED / "vectors" / "felix"
NAMES = sorted(p.stem for p in VECTORS.glob("*.json")) if VECTORS.is_dir() else []
HELLO = {"payload": b"hello", "payload_len": 5,
         "payload_sha256": hashlib.sha256(b"hello").hexdigest()}
DEMO = {"tenant_id": "t1", "namespace": "default", "stream": "demo"}
CACHE = {"tenant_id": "t1", "namespace": "default", "cache": "primary", "key": "demo-key"}
CACHED = {"payload": b"cached", "payload_len": 6,
          "payload_sha256": hashlib.sha256(b"cached").hexdigest()}
FEATURES = {"features": 0x80000001, "features_hi": 1, "feature_names": ["TOPOLOGY", "EXTENDED"]}

# name -> (direction, every non-null content column of its felix row, message payloads)
# written from the README table, not from the decoder
EXPECTED: dict[str, tuple] = {
    "auth_with_capabilities": (C, {"tenant_id": "t1", "advertised_flags": 25}, []),
    "auth_ok": (S, {"advertised_flags": 25}, []),
    "auth_extended_features": (C, {"tenant_id": "t1", "advertised_flags": 25, **FEATURES}, []),
    "auth_ok_extended_features": (S, {"advertised_flags": 25, **FEATURES}, []),
    "publish": (C, {**DEMO, **HELLO, "payload_count": 1}, [b"hello"]),
    "subscribe": (C, DEMO, []),
    "event": (S, {**DEMO, "payload": b"world", "payload_len": 5, "payload_count": 1,
                  "payload_sha256": hashlib.sha256(b"world").hexdigest()}, [b"world"]),
    "cache_put": (C, {**CACHE, **CACHED, "ttl_ms": 1000}, []),
    "cache_get": (C, CACHE, []),
    "cache_value": (S, {**CACHE, **CACHED}, []),
    "ok": (S, {}, []),
    "error": (S, {"error_message": "oops"}, []),
    "binary_publish_acked": (
        C, {**DEMO, "request_id": 7, "ack_mode": "per_batch", "payload_count": 1}, [b"hello"]),
    "binary_publish_acked_keyed": (
        C, {**DEMO, "request_id": 7, "ack_mode": "per_batch", "key": "k7", "payload_count": 1},
        [b"hello"]),
    "binary_publish_keyed": (C, {**DEMO, "key": "k7", "payload_count": 1}, [b"hello"]),
    "binary_publish_ack_ok": (S, {"ack_status": "ok", "request_id": 7}, []),
    "binary_publish_ack_error": (
        S, {"ack_status": "error", "request_id": 9, "error_message": "stream not found"}, []),
}
KINDS = {None: "json", "json_message": "json",
         "binary_acked_publish_batch": "binary_acked_publish_batch",
         "binary_publish_batch": "binary_publish_batch",
         "binary_publish_ack": "binary_publish_ack"}
# columns describing the frame itself rather than its content
META = {"stream_kind", "magic_ok", "version", "flags", "flag_names", "unknown_flags", "length",
        "kind", "type", "json", "json_truncated", "body_sha256", "payload_truncated"}
CONTENT = [f.name for f in FELIX.fields if f.name not in META]

# the sending side's builders for each vector (checked byte for byte)
BUILT = {
    "auth_with_capabilities": lambda: rf.auth("t1", "demo-token", 25),
    "auth_ok": lambda: rf.auth_ok(25),
    "publish": lambda: rf.publish("demo", b"hello"),
    "subscribe": lambda: rf.subscribe("demo"),
    "event": lambda: rf.event("demo", b"world"),
    "cache_put": lambda: rf.cache_put("primary", "demo-key", b"cached", ttl_ms=1000),
    "cache_get": lambda: rf.cache_get("primary", "demo-key"),
    "cache_value": lambda: rf.cache_value("primary", "demo-key", b"cached"),
    "ok": rf.ok,
    "error": lambda: rf.error("oops"),
    "binary_publish_acked": lambda: rf.binary_publish("demo", [b"hello"], request_id=7),
    "binary_publish_acked_keyed": lambda: rf.binary_publish("demo", [b"hello"], key=b"k7",
                                                            request_id=7),
    "binary_publish_keyed": lambda: rf.binary_publish("demo", [b"hello"], key=b"k7"),
    "binary_publish_ack_ok": lambda: rf.binary_ack(7),
    "binary_publish_ack_error": lambda: rf.binary_ack(9, "stream not found"),
}


def _vector(name: str) -> dict:
    return json.loads((VECTORS / f"{name}.json").read_text())


def test_every_vector_is_covered():
    assert NAMES, f"{VECTORS} is committed: its vectors must be there"
    assert sorted(EXPECTED) == NAMES  # a new vector upstream needs its expectations here
    assert len(NAMES) == 17


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_vector_decodes_to_its_documented_fields(name):
    assert name in NAMES, f"vector {name} missing from {VECTORS}"
    v = _vector(name)
    frame = bytes.fromhex(v["frame_hex"])
    payload = bytes.fromhex(v["payload_hex"])
    hex_file = VECTORS / f"{name}.hex"
    if hex_file.exists():  # the .hex twin holds the same bytes
        assert bytes.fromhex(hex_file.read_text().strip()) == frame
    direction, content, messages = EXPECTED[name]
    # a client stream authenticates first, as the broker requires
    auth = bytes.fromhex(_vector("auth_with_capabilities")["frame_hex"])
    script = [(C, auth)] if direction == C and name != "auth_with_capabilities" else []
    r = run_session(FelixDissector, [*script, (direction, frame)],
                    options={"keep_secrets": True})
    assert_rows_valid(FelixDissector, r.records)
    frames, children, anomalies = rows_of(r.records)
    assert anomalies == []
    row, kids = frames[-1], children[-1]
    assert row["direction"] == direction.short
    assert row["offset_end"] - row["offset_start"] == len(frame)
    assert (row["magic_ok"], row["version"], row["flags"], row["length"]) == (
        True, 1, v.get("flags", 0), len(payload))
    assert row["kind"] == KINDS[v.get("kind")]
    assert row["body_sha256"] == hashlib.sha256(payload).hexdigest()
    if row["kind"] == "json":
        assert row["json"] == v["payload_json"]
        assert row["type"] == json.loads(v["payload_json"])["type"]
        assert row["flag_names"] == []
    else:
        assert row.get("type") is None and row.get("json") is None
    got = {k: row[k] for k in CONTENT if row.get(k) is not None}
    assert got == content
    assert [m["payload"] for m in kids] == messages
    # binary vectors list their payloads and fields by name
    if "payloads_utf8" in v:
        assert [m["payload"].decode() for m in kids] == v["payloads_utf8"]
        for m in kids:
            assert (m["tenant_id"], m["namespace"], m["stream"]) == (
                v["tenant_id"], v["namespace"], v["stream"])
            assert m.get("key") == v.get("key_utf8")
            assert m.get("request_id") == v.get("request_id")
            assert m.get("ack_mode") == v.get("ack_mode")
            assert (m["index"], m["batch_size"]) == (0, 1)
    if v.get("kind") == "binary_publish_ack":
        assert row["ack_status"] == v["status"]
        assert row["request_id"] == v["request_id"]
        assert row.get("error_message") == v["message"]


@pytest.mark.parametrize("name", sorted(BUILT))
def test_sending_side_builders_reproduce_the_vectors(name):
    assert name in NAMES, f"vector {name} missing from {VECTORS}"
    assert BUILT[name]().data.hex() == _vector(name)["frame_hex"]


def test_auth_token_is_redacted_unless_secrets_are_kept():
    assert NAMES, f"{VECTORS} is committed: its vectors must be there"
    for name in ("auth_with_capabilities", "auth_extended_features"):
        frame = bytes.fromhex(_vector(name)["frame_hex"])
        (row,), _, _ = rows_of(run_session(FelixDissector, [(C, frame)]).records)
        token = hashlib.sha256(b"demo-token").hexdigest()
        assert f'"token":"<redacted len=10 sha256={token}>"' in row["json"]
        assert "demo-token" not in row["json"]
        assert json.loads(row["json"])["tenant_id"] == "t1"

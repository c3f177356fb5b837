"""Pulsar dissector: hand-built frames decode to exact rows (every command type, payload
commands with and without checksum and broker entry metadata, every codec, batches,
chunks); anomalies for damage; any split gives the same rows; fuzzing never raises."""

from __future__ import annotations

import json
import random
import struct
import zlib

import cramjam
import lz4.block
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dissectors.api import Verdict
from dissectors.pulsar import PULSAR_COMMANDS, PULSAR_MESSAGES, PulsarDissector
from dissectors.pulsar.frame import COMMAND_NAMES, DEFAULT_MAX_FRAME_BYTES, resync
from dissectors.schema import rows_to_batch, validate_batch
from tests.pulsar.wire import (
    BrokerEntryMetadata,
    C,
    Run,
    S,
    batch,
    cmd,
    frame,
    metadata,
    sha,
)

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPIC = "persistent://public/default/t1"
AUTH = b"token:s3cr3t-value"
PUBLISH_MS = 1_700_000_000_123


# ------------------------------------------------------------------ a whole conversation

def conversation() -> list[tuple]:
    md0 = metadata(producer_name="prod-a", sequence_id=7, publish_time=PUBLISH_MS,
                   properties=[{"key": "k", "value": "v"}, {"key": "k", "value": "w"}],
                   partition_key="pk", event_time=PUBLISH_MS - 5)
    bem = BrokerEntryMetadata(broker_timestamp=PUBLISH_MS + 1, index=41).SerializeToString()
    return [
        (C, frame(cmd("CONNECT", client_version="Pulsar-CPP-v3.4.2", protocol_version=19,
                      auth_method_name="token", auth_data=AUTH,
                      feature_flags={"supports_auth_refresh": True,
                                     "supports_broker_entry_metadata": True}))),
        (S, frame(cmd("CONNECTED", server_version="Pulsar Server3.2.0", protocol_version=19,
                      max_message_size=5242880))),
        (C, frame(cmd("PRODUCER", topic=TOPIC, producer_id=3, request_id=1,
                      metadata=[{"key": "app", "value": "x"}]))),
        (S, frame(cmd("PRODUCER_SUCCESS", request_id=1, producer_name="prod-a",
                      last_sequence_id=-1))),
        (C, frame(cmd("SEND", producer_id=3, sequence_id=7), md0, b"hello")),
        (S, frame(cmd("SEND_RECEIPT", producer_id=3, sequence_id=7,
                      message_id={"ledger_id": 9, "entry_id": 40},
                      highest_sequence_id=(1 << 64) - 1))),
        (C, frame(cmd("SUBSCRIBE", topic=TOPIC, subscription="sub", sub_type=3, consumer_id=5,
                      request_id=2, consumer_name="cons-1"))),
        (S, frame(cmd("SUCCESS", request_id=2))),
        (C, frame(cmd("FLOW", consumer_id=5, message_permits=1000))),
        (S, frame(cmd("MESSAGE", consumer_id=5,
                      message_id={"ledger_id": 9, "entry_id": 40, "partition": -1},
                      redelivery_count=2), md0, b"hello", bem=bem)),
        (C, frame(cmd("ACK", consumer_id=5, ack_type=0,
                      message_id=[{"ledger_id": 9, "entry_id": 40},
                                  {"ledger_id": 9, "entry_id": 41, "batch_index": 2}]))),
        (C, frame(cmd("CLOSE_PRODUCER", producer_id=3, request_id=3))),
        (S, frame(cmd("SUCCESS", request_id=3))),
    ]


def run_conversation(split=None) -> Run:
    r = Run()
    for direction, data in conversation():
        r.feed(direction, data, split(data) if split else ())
    return r.close()


def test_conversation_exact_rows():
    r = run_conversation()
    assert r.anomalies() == []
    rows = r.rows()
    assert [x["command"] for x in rows] == [
        "CONNECT", "CONNECTED", "PRODUCER", "PRODUCER_SUCCESS", "SEND", "SEND_RECEIPT",
        "SUBSCRIBE", "SUCCESS", "FLOW", "MESSAGE", "ACK", "CLOSE_PRODUCER", "SUCCESS"]
    frames = conversation()
    connect = rows[0]
    assert connect == {
        "command": "CONNECT", "command_type": 2, "frame_size": len(frames[0][1]),
        "command_size": len(frames[0][1]) - 8, "protocol_version": 19,
        "client_version": "Pulsar-CPP-v3.4.2",
        "feature_flags": ["supports_auth_refresh", "supports_broker_entry_metadata"],
        "auth_method": "token", "auth_data_len": len(AUTH), "auth_data_sha256": sha(AUTH),
        "unknown_fields": [],
        "command_json": json.dumps({
            "client_version": "Pulsar-CPP-v3.4.2",
            "auth_data": {"len": len(AUTH), "sha256": sha(AUTH)},
            "protocol_version": 19, "auth_method_name": "token",
            "feature_flags": {"supports_auth_refresh": True,
                              "supports_broker_entry_metadata": True}},
            separators=(",", ":")),
    }
    # auth data is never stored, in any form but length and hash
    for rec in r.all_records():
        assert AUTH not in repr(rec.values).encode()
        assert AUTH.hex() not in repr(rec.values)
    assert rows[1]["server_version"] == "Pulsar Server3.2.0"
    assert rows[1]["max_message_size"] == 5242880
    assert rows[2]["metadata"] == [("app", "x")]
    assert rows[3]["last_sequence_id"] == -1 and rows[3]["producer_name"] == "prod-a"
    send = rows[4]
    send_len = len(frames[4][1])
    assert {k: v for k, v in send.items() if k != "command_json"} == {
        "command": "SEND", "command_type": 6, "frame_size": send_len,
        "command_size": len(cmd("SEND", producer_id=3, sequence_id=7)),
        "producer_id": 3, "sequence_id": 7, "topic": TOPIC, "producer_name": "prod-a",
        "num_messages": 1, "crc_status": "ok", "checksum": struct.unpack(
            ">I", frames[4][1][8 + send["command_size"] + 2:][:4])[0],
        "metadata_size": send["metadata_size"], "payload_size": 5, "unknown_fields": [],
    }
    assert rows[5]["highest_sequence_id"] == -1  # 2**64-1 on the wire
    assert (rows[5]["ledger_id"], rows[5]["entry_id"], rows[5]["topic"]) == (9, 40, TOPIC)
    assert rows[6]["sub_type"] == "Key_Shared" and rows[6]["consumer_name"] == "cons-1"
    assert rows[8] | {} == {
        "command": "FLOW", "command_type": 11, "frame_size": len(frames[8][1]),
        "command_size": len(frames[8][1]) - 8, "consumer_id": 5, "message_permits": 1000,
        "topic": TOPIC, "subscription": "sub", "unknown_fields": [],
        "command_json": '{"consumer_id":5,"message_permits":1000}'}
    msg = rows[9]
    assert (msg["consumer_id"], msg["topic"], msg["subscription"], msg["redelivery_count"],
            msg["num_messages"], msg["broker_index"], msg["broker_timestamp"],
            msg["crc_status"], msg["partition"]) == (
        5, TOPIC, "sub", 2, 1, 41, (PUBLISH_MS + 1) * 1_000_000, "ok", -1)
    ack = rows[10]
    assert ack["ack_type"] == "Individual" and (ack["ledger_id"], ack["entry_id"]) == (9, 40)
    assert ack["message_ids"] == [
        {"ledger_id": 9, "entry_id": 40, "partition": None, "batch_index": None},
        {"ledger_id": 9, "entry_id": 41, "partition": None, "batch_index": 2}]
    assert rows[11]["topic"] == TOPIC
    # messages: one per SEND / MESSAGE, children of their frame
    msgs = r.messages()
    common = {
        "topic": TOPIC, "producer_name": "prod-a", "sequence_id": 7,
        "publish_time": PUBLISH_MS * 1_000_000, "event_time": (PUBLISH_MS - 5) * 1_000_000,
        "properties": [("k", "v"), ("k", "w")], "partition_key": "pk", "compression": "NONE",
        "wire_payload_len": 5, "payload_len": 5, "payload_sha256": sha(b"hello"),
        "payload": b"hello", "payload_truncated": False, "encrypted": False,
        "crc_status": "ok", "incomplete": False,
    }
    assert msgs[0] == {"command": "SEND", "producer_id": 3, **common}
    assert msgs[1] == {
        "command": "MESSAGE", "consumer_id": 5, "subscription": "sub", "ledger_id": 9,
        "entry_id": 40, "partition": -1, "redelivery_count": 2,
        "broker_timestamp": (PUBLISH_MS + 1) * 1_000_000, "broker_index": 41, **common}
    send_rec = [x for x in r.records if x.table == "pulsar_commands"][4]
    assert [c.table for c in send_rec.children] == ["pulsar_messages"]
    assert (send_rec.children[0].offset_start, send_rec.children[0].offset_end) == (
        send_rec.offset_start, send_rec.offset_end)


def test_rows_convert_to_arrow_and_validate():
    r = run_conversation()
    for spec in (PULSAR_COMMANDS, PULSAR_MESSAGES):
        rows = [dict(x.values) for x in r.all_records() if x.table == spec.name]
        env = {"capture_id": "0" * 16, "flow_id": 1, "record_id": 1, "direction": "c2s"}
        batch_ = rows_to_batch(spec, [{**env, **x} for x in rows])
        validate_batch(spec, batch_)


def _splits(data: bytes) -> list[int]:
    return list(range(1, len(data)))


def test_byte_by_byte_gives_the_same_rows():
    whole = run_conversation().shape()
    assert run_conversation(_splits).shape() == whole


@SETTINGS
@given(st.data())
def test_any_split_gives_the_same_rows(data):
    whole = run_conversation().shape()
    split = lambda b: data.draw(st.lists(st.integers(1, max(1, len(b) - 1)), max_size=6))  # noqa: E731
    assert run_conversation(split).shape() == whole


@SETTINGS
@given(st.lists(st.integers(0, 2000), max_size=8))
def test_stream_cut_anywhere_across_frames(cuts):
    stream = b"".join(d for direction, d in conversation() if direction == C)
    whole = Run().feed(C, stream).close().shape()
    assert Run().feed(C, stream, cuts).close().shape() == whole


# --------------------------------------------------------------- every command type

@pytest.mark.parametrize("t", sorted(COMMAND_NAMES))
def test_every_command_type_by_name(t):
    name = COMMAND_NAMES[t]
    if name in ("SEND", "MESSAGE"):
        data = frame(cmd(name, partial=True), metadata(producer_name="p", sequence_id=0,
                                                         publish_time=1), b"x")
    else:
        data = frame(cmd(name, partial=True))
    r = Run().feed(C if t % 2 else S, data).close()
    kinds = [k for k in r.anomalies() if k != "pulsar.wrong_direction"]
    assert kinds == []
    (row,) = r.rows()
    assert row["command"] == name and row["command_type"] == t
    assert row["frame_size"] == len(data)
    assert row["unknown_fields"] == []
    expected_json = '{"raw": ""}' if t >= 70 else "{}"
    assert row["command_json"] == expected_json


def test_unknown_type_kept_as_number():
    data = frame(bytes([0x08, 99]))  # BaseCommand{type: 99}
    r = Run().feed(C, data).close()
    (row,) = r.rows()
    assert row["command"] == "99" and row["command_type"] == 99
    assert r.anomalies() == ["pulsar.unknown_command"]


def test_unknown_fields_are_listed_not_fatal():
    base = cmd("FLOW", consumer_id=1, message_permits=5)
    # BaseCommand field 11 (flow) rebuilt with an extra field 9 (varint 1) inside
    sub = bytes([0x08, 1, 0x10, 5, 0x48, 1])
    data = frame(bytes([0x08, 11, 0x5A, len(sub)]) + sub)
    r = Run().feed(C, data).close()
    (row,) = r.rows()
    assert row["unknown_fields"] == ["flow.9"] and row["message_permits"] == 5
    assert r.anomalies() == []
    assert base  # the plain encoding is a prefix of this one


def test_error_and_lookup_columns():
    r = Run()
    r.feed(S, frame(cmd("ERROR", request_id=4, error=11, message="topic missing")))
    r.feed(S, frame(cmd("SEND_ERROR", producer_id=1, sequence_id=2, error=9, message="crc")))
    r.feed(S, frame(cmd("LOOKUP_RESPONSE", broker_service_url="pulsar://b:6650",
                        broker_service_url_tls="pulsar+ssl://b:6651", response=0,
                        request_id=5, authoritative=True, proxy_through_service_url=True)))
    r.feed(S, frame(cmd("PARTITIONED_METADATA_RESPONSE", partitions=3, request_id=6,
                        response=0)))
    r.feed(S, frame(cmd("TOPIC_MIGRATED", resource_id=8, resource_type=1,
                        broker_service_url="pulsar://c:6650")))
    r.feed(S, frame(cmd("AUTH_CHALLENGE", server_version="s",
                        challenge={"auth_method_name": "sasl", "auth_data": b"abc"})))
    sub = bytes([0x08, 4, 0x10, 77, 0x1A, 3]) + b"new"  # ServerError 77: not in the enum
    r.feed(S, frame(bytes([0x08, 14, 0x72, len(sub)]) + sub))
    rows = r.close().rows()
    assert (rows[0]["error_code"], rows[0]["error_message"], rows[0]["request_id"]) == (
        "TopicNotFound", "topic missing", 4)
    assert (rows[1]["error_code"], rows[1]["producer_id"], rows[1]["sequence_id"]) == (
        "ChecksumError", 1, 2)
    assert {k: rows[2][k] for k in ("broker_service_url", "broker_service_url_tls",
                                    "lookup_response", "authoritative",
                                    "proxy_through_service_url", "request_id")} == {
        "broker_service_url": "pulsar://b:6650", "broker_service_url_tls": "pulsar+ssl://b:6651",
        "lookup_response": "Redirect", "authoritative": True, "proxy_through_service_url": True,
        "request_id": 5}
    assert (rows[3]["partitions"], rows[3]["lookup_response"]) == (3, "Success")
    assert (rows[4]["consumer_id"], rows[4]["broker_service_url"]) == (8, "pulsar://c:6650")
    assert "producer_id" not in rows[4]
    assert (rows[5]["auth_method"], rows[5]["auth_data_len"], rows[5]["auth_data_sha256"]) == (
        "sasl", 3, sha(b"abc"))
    assert "abc" not in rows[5]["command_json"] and "616263" not in rows[5]["command_json"]
    assert rows[6]["error_code"] == "77"


# ------------------------------------------------------ payload section variants

MD = dict(producer_name="p", sequence_id=11, publish_time=PUBLISH_MS)


def one(data: bytes, direction=C, **options) -> Run:
    return Run(options).feed(direction, data).close()


def test_send_without_checksum_is_absent():
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), b"abc",
                  checksum=False))
    assert r.anomalies() == []
    (row,) = r.rows()
    assert row["crc_status"] == "absent" and "checksum" not in row
    (m,) = r.messages()
    assert (m["payload"], m["crc_status"]) == (b"abc", "absent")


def test_checksum_mismatch_is_an_anomaly_and_still_decoded():
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), b"abc",
                  checksum=0xDEADBEEF))
    assert r.anomalies() == ["pulsar.checksum_mismatch"]
    (row,) = r.rows()
    assert (row["crc_status"], row["checksum"]) == ("mismatch", 0xDEADBEEF)
    (m,) = r.messages()
    assert (m["payload"], m["crc_status"]) == (b"abc", "mismatch")


def test_broker_entry_metadata_without_checksum():
    bem = BrokerEntryMetadata(broker_timestamp=PUBLISH_MS, index=3).SerializeToString()
    r = one(frame(cmd("MESSAGE", consumer_id=1, message_id={"ledger_id": 1, "entry_id": 2}),
                  metadata(**MD), b"abc", checksum=False, bem=bem), S)
    assert r.anomalies() == []
    (row,) = r.rows()
    assert (row["crc_status"], row["broker_index"], row["broker_timestamp"]) == (
        "absent", 3, PUBLISH_MS * 1_000_000)
    assert r.messages()[0]["payload"] == b"abc"


def test_message_id_and_payload_of_an_empty_message():
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), b""))
    (m,) = r.messages()
    assert (m["payload"], m["payload_len"], m["payload_sha256"]) == (b"", 0, sha(b""))


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "LZ4":
        return lz4.block.compress(data, store_size=False)
    if codec == "ZLIB":
        return zlib.compress(data)
    if codec == "ZSTD":
        return zstandard.ZstdCompressor().compress(data)
    if codec == "SNAPPY":
        return bytes(cramjam.snappy.compress_raw(data))
    return data


CODECS = {"NONE": 0, "LZ4": 1, "ZLIB": 2, "ZSTD": 3, "SNAPPY": 4}


@pytest.mark.parametrize("codec", list(CODECS))
def test_each_codec_single_message(codec):
    data = b"payload " * 300
    wire = _compress(codec, data)
    md = metadata(**MD, compression=CODECS[codec], uncompressed_size=len(data))
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, wire))
    assert r.anomalies() == []
    (m,) = r.messages()
    assert (m["compression"], m["uncompressed_size"], m["wire_payload_len"], m["payload_len"],
            m["payload_sha256"], m["payload"], m["payload_truncated"]) == (
        codec, len(data), len(wire), len(data), sha(data), data[:4096], False)


@pytest.mark.parametrize("codec", list(CODECS))
def test_each_codec_batch(codec):
    entries = [
        (b"first", {"properties": [{"key": "a", "value": "1"}], "partition_key": "k0",
                    "event_time": PUBLISH_MS + 1}),
        (b"", {"sequence_id": 100}),
        (b"third" * 10, {"ordering_key": b"\x00\x01", "null_value": False}),
    ]
    raw = batch(entries)
    md = metadata(**MD, compression=CODECS[codec], uncompressed_size=len(raw),
                  num_messages_in_batch=3)
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11, num_messages=3), md,
                  _compress(codec, raw)))
    assert r.anomalies() == []
    assert r.rows()[0]["num_messages"] == 3
    msgs = r.messages()
    assert [(m["batch_index"], m["sequence_id"], m["payload"], m["num_messages_in_batch"])
            for m in msgs] == [(0, 11, b"first", 3), (1, 100, b"", 3), (2, 13, b"third" * 10, 3)]
    assert msgs[0]["properties"] == [("a", "1")] and msgs[0]["partition_key"] == "k0"
    assert msgs[0]["event_time"] == (PUBLISH_MS + 1) * 1_000_000
    assert msgs[1]["properties"] == [] and "partition_key" not in msgs[1]
    assert msgs[2]["ordering_key"] == b"\x00\x01" and msgs[2]["null_value"] is False


def test_batch_damage_is_an_anomaly_and_keeps_good_entries():
    raw = batch([(b"ok", {}), (b"cut", {})])[:-2]
    md = metadata(**MD, num_messages_in_batch=2)
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, raw))
    assert r.anomalies() == ["pulsar.bad_batch"]
    assert [m["payload"] for m in r.messages()] == [b"ok"]


def test_decompression_bomb_is_an_anomaly_not_an_allocation():
    data = b"\0" * 200_000
    md = metadata(**MD, compression=3, uncompressed_size=len(data))
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, _compress("ZSTD", data)),
            max_uncompressed_bytes=100_000)
    assert r.anomalies() == ["pulsar.decompression_bomb"]
    (m,) = r.messages()
    assert m["incomplete"] is True and "payload" not in m and m["uncompressed_size"] == 200_000
    # lying about the size: declared small, expands big
    md = metadata(**MD, compression=2, uncompressed_size=10)
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, _compress("ZLIB", data)))
    assert r.anomalies() == ["pulsar.uncompressed_size_mismatch"]
    assert r.messages()[0]["incomplete"] is True


def test_corrupt_compressed_payload():
    md = metadata(**MD, compression=1, uncompressed_size=50)
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, b"\xff" * 20))
    assert r.anomalies() == ["pulsar.decompression_failed"]
    md = metadata(**MD, uncompressed_size=50) + bytes([0x40, 9])  # compression 9
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, b"x"))
    assert r.anomalies() == ["pulsar.unknown_compression"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000), st.sampled_from([0, 1, 6, 9]),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
       st.integers(0, 4000), st.booleans())
@example(b"hello" * 50, 6, [(0, 0x88), (1, 28)], 0, False)  # 64 KiB window: zlib refuses
def test_zlib_isal_and_zlib_agree(src, level, edits, limit, cut):
    """ISA-L's inflate (codec._zlib, when isal is installed) gives what zlib alone gives:
    the same bytes, or the same problem (zlib's message), on damaged streams too."""
    from dissectors.pulsar import codec as codec_mod

    wire = bytearray(zlib.compress(src, level))
    for at, byte in edits:  # damage: header, Huffman tables, body, checksum
        wire[at % len(wire)] = byte
    wire = bytes(wire[: len(wire) // 2] if cut else wire)
    declared = limit or len(src)

    def outcome():
        return codec_mod.decompress(2, wire, declared, 1 << 20)

    got = outcome()
    saved, codec_mod._isal_zlib = codec_mod._isal_zlib, None
    try:
        assert outcome() == got
    finally:
        codec_mod._isal_zlib = saved


def test_encrypted_payload_kept_as_sent():
    md = metadata(**MD, compression=1, uncompressed_size=99, num_messages_in_batch=4,
                  encryption_keys=[{"key": "k", "value": b"v"}], encryption_algo="AES")
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), md, b"ciphertext"))
    assert r.anomalies() == []
    (m,) = r.messages()
    assert (m["encrypted"], m["payload"], m["encryption_algo"], m["num_messages_in_batch"]) == (
        True, b"ciphertext", "AES", 4)


def test_payload_cap_truncates_but_hashes_everything():
    data = bytes(range(256)) * 40
    r = one(frame(cmd("SEND", producer_id=1, sequence_id=11), metadata(**MD), data),
            payload_cap=100)
    (m,) = r.messages()
    assert (m["payload"], m["payload_len"], m["payload_sha256"], m["payload_truncated"]) == (
        data[:100], len(data), sha(data), True)


# ----------------------------------------------------------------------------- chunks

def chunked(total: bytes, n: int, *, codec: str = "NONE", uuid: str = "u-1",
            direction=C, ids=None) -> list[bytes]:
    wire = _compress(codec, total)
    step = -(-len(wire) // n)
    parts = [wire[i * step:(i + 1) * step] for i in range(n)]
    frames = []
    for i in (ids if ids is not None else range(n)):
        md = metadata(**MD, compression=CODECS[codec], uncompressed_size=len(total), uuid=uuid,
                      chunk_id=i, num_chunks_from_msg=n, total_chunk_msg_size=len(wire))
        if direction == C:
            c = cmd("SEND", producer_id=1, sequence_id=11, is_chunk=True)
        else:
            c = cmd("MESSAGE", consumer_id=2, message_id={"ledger_id": 5, "entry_id": 10 + i})
        frames.append(frame(c, md, parts[i]))
    return frames


@pytest.mark.parametrize("codec", ["NONE", "LZ4"])
def test_chunks_reassembled_into_one_row(codec):
    total = random.Random(1).randbytes(5000)
    r = Run()
    r.feed(C, frame(cmd("PRODUCER", topic=TOPIC, producer_id=1, request_id=1)))
    lens = []
    for f in chunked(total, 3, codec=codec):
        lens.append(len(f))
        r.feed(C, f)
    r.close()
    assert r.anomalies() == []
    assert [x["command"] for x in r.rows()] == ["PRODUCER", "SEND", "SEND", "SEND"]
    (m,) = r.messages()
    wire = _compress(codec, total)
    start = r.rows()[0]["frame_size"]
    assert {k: m[k] for k in ("topic", "chunk_uuid", "chunk_id", "chunk_ids", "num_chunks",
                              "total_chunk_msg_size", "chunk_offsets", "payload_len",
                              "payload_sha256", "incomplete", "wire_payload_len")} == {
        "topic": TOPIC, "chunk_uuid": "u-1", "chunk_id": 2, "chunk_ids": [0, 1, 2],
        "num_chunks": 3, "total_chunk_msg_size": len(wire),
        "chunk_offsets": [start, start + lens[0], start + lens[0] + lens[1]],
        "payload_len": 5000, "payload_sha256": sha(total), "incomplete": False,
        "wire_payload_len": len(wire)}
    rec = [x for x in r.all_records() if x.table == "pulsar_messages"][0]
    assert (rec.offset_start, rec.offset_end) == (start, start + sum(lens))
    last_send = [x for x in r.records if x.table == "pulsar_commands"][-1]
    assert last_send.children == [rec]


def test_missing_chunk_gives_one_incomplete_row():
    total = b"z" * 3000
    r = Run()
    for f in chunked(total, 3, ids=[0, 2]):
        r.feed(C, f)
    r.close()
    (m,) = r.messages()
    assert (m["incomplete"], m["chunk_ids"], "payload" in m) == (True, [0, 2], False)
    assert r.anomalies() == ["pulsar.chunk_incomplete"]


def test_chunks_cut_by_the_end_of_the_connection():
    r = Run()
    frames = chunked(b"y" * 3000, 3, direction=S, ids=[0, 1])
    for f in frames:
        r.feed(S, f)
    r.close()
    (rec,) = [x for x in r.all_records() if x.table == "pulsar_messages"]
    assert (rec.offset_start, rec.offset_end, rec.frame_first, rec.frame_last) == (
        0, len(frames[0]) + len(frames[1]), 1, 2)
    (m,) = r.messages()
    assert (m["incomplete"], m["chunk_ids"], m["command"], m["consumer_id"]) == (
        True, [0, 1], "MESSAGE", 2)
    assert r.anomalies() == ["pulsar.chunk_incomplete"]


def test_interleaved_chunked_messages_and_a_duplicate_chunk():
    a = chunked(b"a" * 2000, 3, uuid="A")
    b = chunked(b"b" * 2000, 2, uuid="B")
    r = Run()
    for f in (a[0], b[0], a[1], a[1], a[2], b[1]):
        r.feed(C, f)
    r.close()
    assert r.anomalies() == ["pulsar.chunk_duplicate"]
    assert [(m["chunk_uuid"], m["payload_len"], m["payload_sha256"]) for m in r.messages()] == [
        ("A", 2000, sha(b"a" * 2000)), ("B", 2000, sha(b"b" * 2000))]


def test_chunk_zero_again_starts_over():
    a = chunked(b"a" * 2000, 2, uuid="A")
    r = Run()
    for f in (a[0], a[0], a[1]):
        r.feed(C, f)
    r.close()
    assert r.anomalies() == ["pulsar.chunk_incomplete"]
    assert [(m["incomplete"], m["chunk_ids"]) for m in r.messages()] == [
        (True, [0]), (False, [0, 1])]


def test_chunk_memory_limit():
    r = Run({"max_chunked_bytes": 1000})
    for f in chunked(b"q" * 3000, 3):
        r.feed(C, f)
    r.close()
    (m,) = r.messages()
    assert m["incomplete"] is True
    assert r.anomalies() == ["pulsar.chunk_incomplete"]


# ------------------------------------------------------------------ framing damage

def test_oversize_frame_is_skipped_with_an_anomaly():
    big = frame(cmd("SEND", producer_id=1, sequence_id=1), metadata(**MD), b"x" * 5000)
    after = frame(cmd("PING"))
    r = Run({"max_frame_bytes": 4096}).feed(C, big + after, cuts=range(0, 6000, 700)).close()
    assert r.anomalies() == ["pulsar.oversize_frame"]
    assert [x["command"] for x in r.rows()] == ["PING"]
    assert r.session.undecoded_bytes[0] == len(big)


def test_default_limit_accepts_a_maximum_size_message():
    data = b"m" * (5 * 1024 * 1024)
    f = frame(cmd("SEND", producer_id=1, sequence_id=1), metadata(**MD), data)
    assert len(f) <= DEFAULT_MAX_FRAME_BYTES
    r = one(f)
    assert r.anomalies() == [] and r.messages()[0]["payload_len"] == len(data)


def test_declared_giant_frame_is_not_allocated():
    head = struct.pack(">II", 0x7FFFFFF0, 4) + cmd("PING")
    r = Run().feed(C, head + b"\0" * 1000).close()
    assert r.anomalies() == ["pulsar.eof_in_frame"]
    assert r.session.framers[0].buffered_bytes == 0


def test_garbage_then_resync():
    good = frame(cmd("PING"))
    r = Run().feed(C, b"\xff\x00garbage bytes here" + good + good).close()
    assert r.anomalies() == ["pulsar.bad_header", "pulsar.resync"]
    assert [x["command"] for x in r.rows()] == ["PING", "PING"]


def test_gap_inside_a_frame_resumes_at_the_next_one():
    f1 = frame(cmd("SEND", producer_id=1, sequence_id=1), metadata(**MD), b"x" * 100)
    f2 = frame(cmd("PING"))
    r = Run().feed(C, f1[:30]).gap(C, 50).feed(C, f1[80:] + f2).close()
    assert r.anomalies() == ["pulsar.gap_in_frame"]
    assert [x["command"] for x in r.rows()] == ["PING"]


def test_truncated_metadata_and_bad_sizes():
    c = cmd("SEND", producer_id=1, sequence_id=1)
    bad = struct.pack(">II", 4 + len(c) + 10, len(c)) + c + struct.pack(">HI", 0x0E01, 0) + \
        struct.pack(">I", 999)
    r = one(bad)
    assert r.anomalies() == ["pulsar.checksum_mismatch", "pulsar.bad_frame"]
    (row,) = r.rows()
    assert row["metadata_size"] == 999 and r.messages() == []


def test_trailing_bytes_after_a_non_payload_command():
    c = cmd("PING")
    data = struct.pack(">II", 4 + len(c) + 10, len(c)) + c + struct.pack(">I", 0) + b"\0" * 6
    r = one(data)
    assert "pulsar.trailing_bytes" in r.anomalies()


def test_wrong_direction_reported_once():
    f = frame(cmd("CONNECTED", server_version="x"))
    r = Run().feed(C, f + f).close()
    assert r.anomalies() == ["pulsar.wrong_direction"]


# --------------------------------------------------------------------------- probe

@pytest.mark.parametrize("prefix, verdict", [
    (frame(cmd("CONNECT", client_version="x")), Verdict.YES),
    (frame(cmd("CONNECTED", server_version="x"))[:10], Verdict.YES),
    (frame(cmd("PING"))[:9], Verdict.NEED_MORE),
    (b"\x00\x00", Verdict.NEED_MORE),
    (b"\x00\x00\x00\x01", Verdict.NO),
    (b"INFO {}\r\n", Verdict.NO),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc", Verdict.NO),
    (struct.pack(">II", 10, 6) + b"\x08\x63", Verdict.NO),  # type 99 unknown
    (struct.pack(">II", 10, 7) + b"\x08\x02", Verdict.NO),  # command larger than frame
    (struct.pack(">II", 10, 6) + b"\x10\x02", Verdict.NO),  # no type tag
    (struct.pack(">II", 100 * 1024 * 1024, 6) + b"\x08\x02", Verdict.NO),  # above the limit
])
def test_probe(prefix, verdict):
    assert PulsarDissector.probe(C, prefix) == verdict


@SETTINGS
@given(st.binary(max_size=64))
def test_probe_never_raises(prefix):
    assert PulsarDissector.probe(C, prefix) in tuple(Verdict)


def test_resync_rule():
    good = frame(cmd("PING"))
    assert resync(b"xx" + good, None) == (2, True)
    assert resync(b"xxx", None) == (0, False)
    assert resync(b"\xff" * 20, None)[1] is False


def test_dissector_metadata():
    assert PulsarDissector.name == "pulsar"
    assert PulsarDissector.default_ports == (6650,)
    assert [t.name for t in PulsarDissector.tables] == ["pulsar_commands", "pulsar_messages"]


def test_bad_options_raise():
    with pytest.raises(ValueError):
        PulsarDissector.session({"max_frame_bytes": "big"})


# --------------------------------------------------------------------------- fuzzing

def _all_frames() -> bytes:
    out = b"".join(d for _, d in conversation())
    out += b"".join(chunked(b"c" * 500, 2))
    raw = batch([(b"a", {}), (b"b", {})])
    out += frame(cmd("SEND", producer_id=1, sequence_id=1),
                 metadata(**MD, compression=4, uncompressed_size=len(raw),
                          num_messages_in_batch=2), _compress("SNAPPY", raw))
    return out


@SETTINGS
@given(st.binary(max_size=600), st.binary(max_size=600), st.lists(st.integers(0, 600),
                                                                  max_size=5))
def test_random_bytes_never_raise(c2s, s2c, cuts):
    Run().feed(C, c2s, cuts).feed(S, s2c, cuts).close()


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.data())
def test_mutated_streams_never_raise(seed, n, data):
    rng = random.Random(seed)
    stream = bytearray(_all_frames())
    for _ in range(n):
        i = rng.randrange(len(stream))
        op = rng.random()
        if op < 0.6:
            stream[i] = rng.randrange(256)
        elif op < 0.8:
            del stream[i : i + rng.randrange(1, 8)]
        else:
            stream[i:i] = rng.randbytes(rng.randrange(1, 8))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    r = Run().feed(C, bytes(stream), cuts).close()
    for rec in r.all_records():
        if rec.table in ("pulsar_commands", "pulsar_messages"):
            spec = PULSAR_COMMANDS if rec.table == "pulsar_commands" else PULSAR_MESSAGES
            rows_to_batch(spec, [rec.values])  # every row converts to its Arrow types


@SETTINGS
@given(st.data())
def test_accounting_with_random_gaps(data):
    stream = _all_frames()
    r = Run()
    pos = 0
    fed = 0
    while pos < len(stream):
        n = data.draw(st.integers(1, 400))
        if data.draw(st.booleans()) and pos:
            r.gap(C, min(n, len(stream) - pos))
        else:
            r.feed(C, stream[pos:pos + n])
            fed += min(n, len(stream) - pos)
        pos += n
    r.records += r.session.close(0)
    s = r.session
    assert s.decoded_bytes[0] + s.undecoded_bytes[0] == fed


@SETTINGS
@given(st.lists(st.integers(0, 4000), max_size=10))
def test_batches_and_chunks_under_any_split(cuts):
    raw = batch([(b"a", {}), (b"b", {})])
    stream = b"".join(d for direction, d in conversation() if direction == C)
    stream += b"".join(chunked(b"c" * 500, 2))
    stream += frame(cmd("SEND", producer_id=1, sequence_id=1),
                    metadata(**MD, compression=4, uncompressed_size=len(raw),
                             num_messages_in_batch=2), _compress("SNAPPY", raw))
    whole = Run().feed(C, stream).close()
    assert whole.anomalies() == []
    assert [m["payload"] for m in whole.messages()] == [b"hello", b"c" * 500, b"a", b"b"]
    assert Run().feed(C, stream, cuts).close().shape() == whole.shape()

"""The Pulsar columnar fast path gives exactly the reference's rows (issue 22).

One session fed the same script both ways: hand-built and hypothesis-generated frame
streams (plain and damaged batches under every codec, batches the fast path must
refuse, non-batched messages, commands, junk, gaps), cut at random points.  The fast
run's ``ColumnBatch`` records are expanded through the accumulator the pipeline uses and
compared, row for row and in order, with the reference's records converted by the
table's own Arrow conversion; byte accounting must agree too.  Whole captures are
compared in tests/perf/test_pulsar_fastpath.py.
"""

from __future__ import annotations

import hashlib
import random
import struct
import zlib
from typing import Any

import cramjam
import lz4.block
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.api import ColumnBatch, Direction, Record
from dissectors.pulsar import PULSAR_COMMANDS, PULSAR_MESSAGES, fastpath, pb
from dissectors.pulsar.session import _AUTH_FIELDS, _COMPACT_JSON, PulsarSession, _plain
from dissectors.schema import SchemaError, arrow_schema, rows_to_batch
from dissectors.sdk.testing import Data, Gap, run_session
from tests.pulsar.wire import batch, cmd, frame, metadata

C2S, S2C = Direction.C2S, Direction.S2C
pytestmark = pytest.mark.skipif(not fastpath.AVAILABLE, reason="extension not built")

_ENVELOPE = {"capture_id": "x", "flow_id": 0, "stream_id": None, "src_ip": "a",
             "src_port": 1, "dst_ip": "b", "dst_port": 2}


def test_the_extension_is_built_and_used():
    # CI installs with pip, which must build it: a silent fallback would leave the
    # fast path untested and the benchmark measuring the reference
    assert fastpath.AVAILABLE
    assert fastpath.enabled()
    assert not fastpath.enabled(False)


def test_environment_switch(monkeypatch):
    monkeypatch.setenv("MSGCAP_PULSAR_FAST", "0")
    assert not fastpath.enabled()
    s = PulsarSession({})
    s.columnar(True)
    assert not s.fast_on


# ------------------------------------------------------------------ comparison


def _message_batches(records: list) -> list[ColumnBatch]:
    """The fast path's message batches among a session's records (a frame's command row
    is a ``ColumnBatch`` too, with the columnar path on)."""
    return [r for r in records if type(r) is ColumnBatch and r.table == PULSAR_MESSAGES.name]


def _row(rec: Record, record_id: int, parent: int | None) -> dict[str, Any]:
    return {**_ENVELOPE, "record_id": record_id, "parent_record_id": parent,
            "direction": rec.direction.short, "ts_first": rec.ts_first_ns,
            "ts_last": rec.ts_last_ns, "offset_start": rec.offset_start,
            "offset_end": rec.offset_end, "frame_first": rec.frame_first,
            "frame_last": rec.frame_last, **rec.values}


def flatten(records: list, session: PulsarSession) -> tuple[list, list, list]:
    """(anomalies and order, command rows, message rows) numbered as the pipeline
    numbers them; ColumnBatch rows (messages; commands with the columnar path on) come
    out of the accumulator the pipeline uses."""
    shape: list[tuple] = []
    commands: list[dict] = []
    messages: list[Any] = []
    next_id = [0]
    schema = arrow_schema(PULSAR_MESSAGES)

    def walk(recs: list, parent: int | None) -> None:
        for rec in recs:
            rid = next_id[0]
            if type(rec) is ColumnBatch and rec.table == PULSAR_COMMANDS.name:
                # a command row as columns (``RowsFormat.record_of``): the row a Record
                # would have given, then its children
                assert parent is None and rec.n == 1
                next_id[0] += 1
                shape.append((rec.table, int(rec.direction), rec.rows[2], rec.rows[3],
                              None, None))
                acc = rec.fmt.accumulator()
                acc.move(rec.rows, 1, 0, rid, int(rec.direction), None, "a", 1, "b", 2)
                commands.extend(acc.to_batch(arrow_schema(PULSAR_COMMANDS), "x").to_pylist())
                walk(list(rec.children), rid)
                continue
            if type(rec) is ColumnBatch:
                shape.append(("batch", int(rec.direction), rec.n))
                acc = fastpath.FORMAT.accumulator()
                acc.move(rec.rows, rec.n, 0, rid, int(rec.direction), None, "a", 1, "b", 2)
                messages.extend(acc.to_batch(schema, "x").to_pylist())
                next_id[0] += rec.n
                continue
            next_id[0] += 1
            shape.append((rec.table, int(rec.direction), rec.offset_start, rec.offset_end,
                          rec.values.get("kind"), rec.values.get("detail")))
            if rec.table == PULSAR_COMMANDS.name:
                commands.append(rows_to_batch(PULSAR_COMMANDS, [_row(rec, rid, parent)])
                                .to_pylist()[0])
            elif rec.table == PULSAR_MESSAGES.name:
                messages.append(_row(rec, rid, parent))
            walk(rec.children, rid)

    walk(records, None)
    cmd_rows = commands
    plain = [m for m in messages if "ts_first_ns" not in m]  # (the reference's dicts)
    converted = iter(rows_to_batch(PULSAR_MESSAGES, plain).to_pylist() if plain else [])
    msg_rows = [m if "ts_first_ns" in m else next(converted) for m in messages]
    return shape, cmd_rows, msg_rows


def both_ways(script: list, split: int, options: dict | None = None):
    def ref() -> PulsarSession:
        return PulsarSession(dict(options or {}))

    def fast() -> PulsarSession:
        s = ref()
        s.columnar(True)
        assert s.fast_on
        return s

    a = run_session(ref, script, split=random.Random(split))
    b = run_session(fast, script, split=random.Random(split))
    return a, b


def assert_same(a, b) -> None:
    ra = flatten(a.records, a.session)
    rb = flatten(b.records, b.session)
    # the records but message rows (those are compared below, record ids included)
    assert [s for s in ra[0] if s[0] != PULSAR_MESSAGES.name] == \
        [s for s in rb[0] if s[0] not in (PULSAR_MESSAGES.name, "batch")]
    assert ra[1] == rb[1]
    assert ra[2] == rb[2]
    assert a.session.decoded_bytes == b.session.decoded_bytes
    assert a.session.undecoded_bytes == b.session.undecoded_bytes
    assert a.session.messages == b.session.messages
    assert a.session.frames == b.session.frames


# ------------------------------------------------------------------ frames


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return lz4.block.compress(data, store_size=False)
    if codec == 2:
        return zlib.compress(data)
    if codec == 3:
        return zstandard.ZstdCompressor().compress(data)
    if codec == 4:
        return bytes(cramjam.snappy.compress_raw(data))
    return data


MD = {"producer_name": "p-1", "sequence_id": 11, "publish_time": 1_700_000_000_000}
# what pulsar-client sends (samples/pulsar-client.pcap): properties and partition keys on
# some entries of a batch, none on others
PLAIN = [(b"hello", {"sequence_id": 7, "partition_key": "k-1"}), (b"", {}),
         (b"x" * 300, {"properties": [{"key": "a", "value": "1"}, {"key": "a", "value": ""}]}),
         (b"\x00\xff", {"properties": [{"key": "\u00e9\U0001f600", "value": "v"}],
                          "partition_key": ""})]


def _varint(v: int) -> bytes:
    out = b""
    while v >= 0x80:
        out += bytes([v & 0x7F | 0x80])
        v >>= 7
    return out + bytes([v])


def _field(tag: int, value: bytes) -> bytes:
    """One length-delimited field (``tag``: the whole tag byte)."""
    return bytes([tag]) + _varint(len(value)) + value


# Hand-encoded SingleMessageMetadata pieces protobuf classes will not write: a KeyValue
# without key or value, repeated inside, with an unknown field, strings that are not UTF-8
# (the reference shows them escaped), overlong forms and surrogates, a tag in a longer
# encoding, partition_key twice (the last wins).
_STRING_BYTES = [b"", b"k", "\u00e9\u4e2d\U0001f600".encode(), b"\xff", b"\xc3", b"\xc0\x80",
                 b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"a\x00b"]
_RAW_PIECES = [
    _field(0x0A, b""),
    _field(0x0A, _field(0x12, b"v")),
    _field(0x0A, _field(0x0A, b"k") + _field(0x0A, b"k2") + _field(0x12, b"v")),
    _field(0x0A, _field(0x0A, b"k") + b"\x18\x01"),
    _field(0x0A, _field(0x0A, b"k") + b"\x12\x05v"),  # cut inside the KeyValue
    _field(0x12, b"first") + _field(0x12, b"second"),
    b"\x92\x00" + _varint(2) + b"pk",  # partition_key, tag in two bytes
]


@st.composite
def raw_metadata(draw) -> bytes:
    """Extra SingleMessageMetadata bytes: properties and partition keys, hand-encoded."""
    out = b""
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            out += draw(st.sampled_from(_RAW_PIECES))
        else:
            tag = draw(st.sampled_from([0x0A, 0x12]))
            text = draw(st.sampled_from(_STRING_BYTES))
            out += _field(0x12, text) if tag == 0x12 else _field(0x0A, _field(
                0x0A, text) + _field(0x12, draw(st.sampled_from(_STRING_BYTES))))
    return out


def raw_batch(entries: list[tuple[bytes, dict, bytes]]) -> bytes:
    """``batch`` with extra metadata bytes appended to each entry's."""
    out = b""
    for payload, fields, extra in entries:
        one = batch([(payload, fields)])
        size = int.from_bytes(one[:4], "big")
        out += struct.pack(">I", size + len(extra)) + one[4 : 4 + size] + extra + payload
    return out


@st.composite
def batch_payload(draw) -> tuple[bytes, int]:
    """(uncompressed batch bytes, num_messages_in_batch): mostly plain, some the fast
    path must refuse (other fields, damage, a count that does not match)."""
    entries = []
    for _ in range(draw(st.integers(1, 6))):
        payload = b"p" * 5000 if draw(st.integers(0, 9)) == 0 else draw(st.binary(max_size=40))
        fields: dict[str, Any] = {}
        extra = b""
        kind = draw(st.integers(0, 14))
        if kind < 5:
            fields["sequence_id"] = draw(st.sampled_from([0, 5, 2**63, 2**64 - 1]))
        elif kind == 5:
            fields["properties"] = draw(st.lists(st.fixed_dictionaries(
                {"key": st.text(max_size=6), "value": st.text(max_size=6)}), max_size=4))
        elif kind == 6:
            fields["event_time"] = 1_700_000_000_001
        elif kind == 7:
            fields["partition_key"] = draw(st.text(max_size=8))
        elif kind == 8:
            fields["compacted_out"] = True
        elif kind < 12:
            extra = draw(raw_metadata())
        if draw(st.integers(0, 3)) == 0:  # the sample captures' entries: both at once
            fields["partition_key"] = draw(st.sampled_from(["", "key-7"]))
            fields["properties"] = [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]
        entries.append((payload, fields, extra))
    raw = raw_batch(entries)
    n = len(entries)
    damage = draw(st.integers(0, 12))
    if damage == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif damage == 1:
        raw += b"\x00\x01"
    elif damage == 2:
        n += draw(st.sampled_from([-n, -1, 1, 2**31 - 1 - n]))
    elif damage == 3:  # a negative payload_size
        raw = struct.pack(">I", 11) + b"\x18" + b"\xff" * 9 + b"\x01" + raw
        n += 1
    elif damage == 4:  # an overlong varint
        raw = struct.pack(">I", 12) + b"\x18" + b"\x80" * 10 + b"\x00" + raw
        n += 1
    return raw, n


@st.composite
def payload_frame(draw) -> bytes:
    send = draw(st.booleans())
    codec = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
    raw, n = draw(batch_payload())
    md: dict[str, Any] = dict(MD, compression=codec, uncompressed_size=len(raw))
    which = draw(st.integers(0, 10))
    if which < 8:
        md["num_messages_in_batch"] = n
    elif which == 8:  # chunked
        md.update(uuid="u", chunk_id=0, num_chunks_from_msg=1, total_chunk_msg_size=len(raw))
    elif which == 9:
        md["encryption_keys"] = [{"key": "k", "value": b"v"}]
    if draw(st.integers(0, 8)) == 0:
        del md["sequence_id"]
    if draw(st.integers(0, 8)) == 0:
        md["uncompressed_size"] = len(raw) + 1
    wire = _compress(codec, raw)
    if send:
        command = cmd("SEND", producer_id=1, sequence_id=11, num_messages=max(n, 1))
    else:
        command = cmd("MESSAGE", consumer_id=2, message_id={"ledger_id": 9, "entry_id": 3})
    checksum = draw(st.sampled_from([True, True, False, 123]))
    return frame(command, metadata(**md), wire, checksum=checksum)


@st.composite
def other_frame(draw) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return frame(cmd("PRODUCER", producer_id=1, request_id=1, topic="persistent://t/a"))
    if kind == 1:
        return frame(cmd("SUBSCRIBE", consumer_id=2, request_id=2, topic="persistent://t/a",
                         subscription="s", sub_type=0))
    if kind == 2:
        return frame(cmd("FLOW", consumer_id=2, message_permits=1000))
    if kind == 3:
        return frame(cmd("ACK", consumer_id=2, ack_type=0,
                         message_id=[{"ledger_id": 9, "entry_id": 3}]))
    if kind == 4:  # a non-batched message
        return frame(cmd("SEND", producer_id=1, sequence_id=3), metadata(**MD), b"single")
    return draw(st.binary(min_size=1, max_size=30))  # junk


@st.composite
def scripts(draw) -> list:
    items: list = []
    for _ in range(draw(st.integers(1, 12))):
        d = draw(st.sampled_from([C2S, S2C]))
        if draw(st.integers(0, 25)) == 0:
            items.append(Gap(d, draw(st.integers(1, 60))))
            continue
        frames = draw(st.lists(st.one_of(payload_frame(), other_frame()), min_size=1,
                               max_size=4))
        items.append(Data(d, b"".join(frames)))
    return items


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scripts(), st.integers(0, 10_000), st.sampled_from([None, 0, 3, 4096]))
def test_a_session_gives_the_same_records_both_ways(script, split, cap):
    a, b = both_ways(script, split, {"payload_cap": cap})
    assert_same(a, b)


def _plain_frames(codec: int) -> list:
    raw = batch(PLAIN)
    md = metadata(**MD, compression=codec, uncompressed_size=len(raw),
                  num_messages_in_batch=len(PLAIN))
    send = frame(cmd("SEND", producer_id=1, sequence_id=11, num_messages=4), md,
                 _compress(codec, raw))
    msg = frame(cmd("MESSAGE", consumer_id=2, message_id={"ledger_id": 9, "entry_id": 3}),
                md, _compress(codec, raw))
    return [Data(C2S, frame(cmd("PRODUCER", producer_id=1, request_id=1, topic="t")) + send),
            Data(S2C, msg + msg), Data(C2S, send)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_plain_batches_go_to_the_columns(codec):
    script = _plain_frames(codec)
    reused = fastpath.reuse_stats()[0]
    for split in range(10):
        a, b = both_ways(script, split)
        assert_same(a, b)
    assert [r.n for r in _message_batches(b.records)] == [4, 4, 4, 4]
    assert not any(r.children for r in b.records)
    # every frame's command row as columns too (PRODUCER, SEND, MESSAGE x2, SEND)
    assert [type(r) for r in b.records if r.table == PULSAR_COMMANDS.name] == [ColumnBatch] * 5
    # the same batch four times (SEND, MESSAGE twice, SEND): decompressed and split once
    assert fastpath.reuse_stats()[0] - reused >= 10 * 3 * 2


def test_a_batch_seen_again_gets_its_own_rows():
    # the same payload bytes again (reused: fastpath.decompress) under another sequence
    # id, another declared size (a mismatch anomaly) and, from one run to the next in
    # this thread, other payload caps
    raw = batch(PLAIN)

    def send(seq: int, declared: int = len(raw)) -> bytes:
        md = metadata(**dict(MD, sequence_id=seq), compression=2, uncompressed_size=declared,
                      num_messages_in_batch=len(PLAIN))
        return frame(cmd("SEND", producer_id=1, sequence_id=seq, num_messages=4), md,
                     _compress(2, raw))

    script = [Data(C2S, send(11) + send(50) + send(11) + send(11, len(raw) + 1))]
    for cap in (None, 3, 0, 4096):
        a, b = both_ways(script, 0, {"payload_cap": cap})
        assert_same(a, b)


def test_recent_payloads_stay_bounded():
    recent = fastpath._recent()
    for i in range(300):
        raw = batch([(bytes([i % 256]) * 40_000 + str(i).encode(), {})])
        got = fastpath.decompress(0, raw, len(raw), 1 << 26)
        assert fastpath.split(got.data, 1, i, None, {}, (0,) * 6) is not None
        assert len(recent.entries) <= fastpath._RECENT_ENTRIES
        assert recent.nbytes <= fastpath._RECENT_BYTES
    # (an entry counts its payloads and the splits it keeps)
    for e in recent.entries.values():
        assert e.nbytes == len(e.raw) + (len(e.data) if e.data is not e.raw else 0) + sum(
            c.nbytes for c in e.splits.values() if c)
    assert recent.nbytes == sum(e.nbytes for e in recent.entries.values())
    assert set(recent.by_data) == {id(e.data) for e in recent.entries.values()}


def test_command_rows_stay_records_where_the_sink_reads_them_in_order():
    """Payload decoding learns schemas from command rows as they reach the sink, before
    the messages they govern (``dissectors.payload.pulsar``): its writer names the table
    (``watched_tables``) and the session then hands command rows as Records."""
    from dissectors.payload.schemas import decoding_for

    watched = decoding_for([]).watched_tables
    assert watched == frozenset({PULSAR_COMMANDS.name})
    s = PulsarSession({"watched_tables": watched})
    s.columnar(True)
    run = run_session(lambda: s, _plain_frames(1))
    assert [type(r) for r in run.records if r.table == PULSAR_COMMANDS.name] == [Record] * 5
    assert [r.n for r in _message_batches(run.records)] == [4, 4, 4, 4]


def test_counting_only_gives_batches_without_rows():
    s = PulsarSession({})
    s.columnar(False)
    run = run_session(lambda: s, _plain_frames(2))
    assert [(r.n, r.rows) for r in _message_batches(run.records)] == [(4, None)] * 4
    commands = [r for r in run.records if r.table == PULSAR_COMMANDS.name]
    assert [(type(r), r.rows) for r in commands] == [(ColumnBatch, None)] * 5
    assert s.messages == [8, 8]


def test_refused_batches_stay_with_the_reference():
    # an event time on one entry, a count one too high: the reference's rows and anomaly
    raw = batch([(b"a", {"event_time": 5}), (b"b", {})])
    md = metadata(**MD, uncompressed_size=len(raw), num_messages_in_batch=2)
    bad = metadata(**MD, uncompressed_size=len(raw), num_messages_in_batch=3)
    script = [Data(C2S, frame(cmd("SEND", producer_id=1, sequence_id=1), md, raw)
                   + frame(cmd("SEND", producer_id=1, sequence_id=3), bad, raw))]
    a, b = both_ways(script, 0)
    assert_same(a, b)
    assert not _message_batches(b.records)
    assert "pulsar.bad_batch" in [r.values.get("kind") for r in b.records
                                  if type(r) is Record]


def test_digests_without_libcrypto_come_from_hashlib():
    # the extension hashes with libcrypto's SHA256 when fastpath found it; without it
    # (use_sha256(0, 0, 0)) Python's hashlib does: the rows are the same either way
    assert fastpath.SHA256_IMPL != "none"
    script = _plain_frames(0)
    try:
        fastpath._speedups.use_sha256(0, 0, 0)
        a, b = both_ways(script, 1)
        assert_same(a, b)
    finally:
        fastpath._hook_sha256()
    a, b = both_ways(script, 1)
    assert_same(a, b)


@pytest.mark.parametrize("n", [0, 1, 55, 56, 64, 1000, 70000])
def test_sha256_matches_hashlib(n):
    if fastpath.SHA256_IMPL == "hashlib":
        pytest.skip("no libcrypto: digests come from hashlib")
    data = random.Random(n).randbytes(n)
    assert fastpath._speedups.sha256_hex(data) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("cap", [0, 1, 5, 2**70])
def test_any_payload_cap(cap):
    a, b = both_ways(_plain_frames(3), 2, {"payload_cap": cap})
    assert_same(a, b)
    assert _message_batches(b.records)


def test_entry_strings_as_the_reference_reads_them():
    # a key, a value and a partition key of each kind (valid UTF-8 goes to the columns,
    # the rest is escaped by the reference), then every hand-encoded piece: one batch each
    extras = [*[piece for text in _STRING_BYTES for piece in (
        _field(0x0A, _field(0x0A, text) + _field(0x12, b"v")),
        _field(0x0A, _field(0x0A, b"k") + _field(0x12, text)),
        _field(0x12, text))], *_RAW_PIECES]
    frames = b""
    for extra in extras:
        raw = raw_batch([(b"a", {}, extra), (b"b", {"partition_key": "p"}, b"")])
        md = metadata(**MD, uncompressed_size=len(raw), num_messages_in_batch=2)
        frames += frame(cmd("SEND", producer_id=1, sequence_id=1), md, raw)
    a, b = both_ways([Data(C2S, frames)], 0)
    assert_same(a, b)
    assert _message_batches(b.records)


# ------------------------------------------------------------------ protobuf decode

_DECODE_CASES = [
    (pb.schema("BaseCommand"), cmd("SEND", producer_id=1, sequence_id=2**64 - 1, num_messages=3,
                                   is_chunk=True)),
    (pb.schema("BaseCommand"), cmd("MESSAGE", consumer_id=2, redelivery_count=2**32 - 1,
                                   message_id={"ledger_id": 9, "entry_id": 3, "partition": -1,
                                               "ack_set": [1, -2],
                                               "first_chunk_message_id": {"ledger_id": 1,
                                                                          "entry_id": 2}})),
    (pb.schema("BaseCommand"), cmd("PRODUCER", producer_id=1, request_id=1, topic="t\u00e9",
                                   metadata=[{"key": "k", "value": "v"}])),
    (pb.schema("BaseCommand"), cmd("CONNECT", client_version="c", auth_data=b"\x00\xff",
                                   protocol_version=21, feature_flags={"supports_auth_refresh":
                                                                       True})),
    (pb.schema("MessageMetadata"), metadata(**MD, compression=3, uncompressed_size=10,
                                            num_messages_in_batch=2, replicate_to=["a", "b"],
                                            properties=[{"key": "k", "value": "v"}] * 2,
                                            encryption_keys=[{"key": "k", "value": b"v"}],
                                            partition_key="pk", event_time=5, marker_type=-3,
                                            highest_sequence_id=2**64 - 1)),
    # singular fields twice (the last wins, in the first one's place) and a repeated one
    (pb.schema("MessageMetadata"), metadata(**MD, replicate_to=["a"])
     + metadata(sequence_id=99, producer_name="q", replicate_to=["b"])),
    (pb.schema("BaseCommand"), cmd("FLOW", consumer_id=2, message_permits=10)
     + cmd("FLOW", partial=True, consumer_id=3)),
    # what the JSON must escape, enums (known and not), bytes, nested lists
    (pb.schema("BaseCommand"), cmd("SUBSCRIBE", topic='t"\\\n\x01\x7f\u2028\u00e9', subscription="",
                                   sub_type=2, consumer_id=1, request_id=2, initial_position=1,
                                   metadata=[{"key": "\t", "value": "\x1f"}])),
    (pb.schema("BaseCommand"), cmd("ACK", consumer_id=1, ack_type=1, validation_error=3,
                                   message_id=[{"ledger_id": 1, "entry_id": 2},
                                               {"ledger_id": 3, "entry_id": 4,
                                                "ack_set": [5, 6]}])),
    (pb.schema("BaseCommand"), cmd("AUTH_RESPONSE", response={"auth_method_name": "m",
                                                              "auth_data": b"\x00s"})),
]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(_DECODE_CASES), st.lists(st.tuples(st.integers(0, 400),
                                                          st.integers(0, 255)), max_size=3),
       st.integers(0, 400), st.binary(max_size=8))
def test_the_compiled_decode_gives_the_readers_decoded(case, flips, cut, tail):
    # the fast path's decode of commands and metadata must be the tolerant reader's, for
    # clean messages (decoded in C) and damaged ones alike (left to the reader)
    schema, data = case
    assert fastpath._speedups.decode_clean(data, fastpath._table(schema, {}), schema,
                                           pb.Decoded) is not None
    mutated = bytearray(data)
    for at, byte in flips:
        if at < len(mutated):
            mutated[at] = byte
    for buf in (data, bytes(mutated), bytes(mutated[:cut]), data + tail):
        got = fastpath.decode(buf, schema)
        assert got == pb.decode(buf, schema)
        _same_json(got)


def _same_json(d: pb.Decoded) -> None:
    """The compiled command_json of ``d`` and of every message inside it is the
    reference's, or left to it (None)."""
    js = fastpath.plain_json(d, _AUTH_FIELDS)
    assert js is None or js == _COMPACT_JSON(_plain(d))
    for v in d.values.values():
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, pb.Decoded):
                _same_json(x)


def test_the_compiled_json_is_used():
    # clean sub-commands are written in C (None would leave every frame to _plain)
    for schema, data in _DECODE_CASES[:3] + _DECODE_CASES[-3:-1]:
        d = fastpath.decode(data, schema)
        sub = next(v for v in d.values.values() if isinstance(v, pb.Decoded))
        assert fastpath.plain_json(sub, _AUTH_FIELDS) == _COMPACT_JSON(_plain(sub))
    sub = fastpath.decode(_DECODE_CASES[-1][1], _DECODE_CASES[-1][0]).values["auth_response"]
    assert fastpath.plain_json(sub, _AUTH_FIELDS) is None  # auth data: length and digest


def test_shared_columns_are_the_rows_conversion():
    """``MessageAccumulator.to_batch`` builds the shared columns of many chunks (frames
    of both directions and codecs, other flows and endpoints) per column; the reference's
    way, one dict row per chunk through ``rows_to_batch`` then repeated, gives the same
    arrays, and a value that does not convert is left to that way (which raises as
    ``rows_to_batch`` does)."""
    chunks, envelopes = [], []
    for k, codec in enumerate((0, 1, 2, 3, 4, 2, 0)):
        s = PulsarSession({})
        s.columnar(True)
        run_session(lambda s=s: s, _plain_frames(codec))
        assert s.fast_rows is not None
        for i, chunk in enumerate(s.fast_rows.chunks):
            chunks.append(chunk)
            envelopes.append((k % 3, 10 * k + i, ("c2s", "s2c")[i % 2], None if k else 5,
                              f"10.0.0.{k % 2}", 1000 + k, "10.0.0.9", 6650,
                              *chunk.provenance[2:4], *chunk.provenance[:2],
                              *chunk.provenance[4:]))
    counts = np.array([c.n for c in chunks], np.int64)
    total = int(counts.sum())
    got = fastpath._shared_columns(chunks, envelopes, counts, total, "cafe")
    want = fastpath._shared_by_rows(chunks, envelopes, counts, total, "cafe")
    assert got is not None
    for name, column in want.items():
        if name in got:
            assert got[name].type == column.type, name
            assert got[name].equals(column), name
    assert set(want) - set(got) == {"record_id", "batch_index", "sequence_id", "payload_len",
                                    "payload_sha256", "payload", "payload_truncated",
                                    "properties", "partition_key"}
    bad = chunks[0]._replace(shared={**chunks[0].shared, "partition": 1 << 40})
    assert fastpath._shared_columns([bad], envelopes[:1], counts[:1], int(counts[0]),
                                    "cafe") is None
    with pytest.raises(SchemaError):
        fastpath._shared_by_rows([bad], envelopes[:1], counts[:1], int(counts[0]), "cafe")


@st.composite
def any_frame(draw) -> bytes:
    """A frame as the framer hands it over (header consistent with its length): built,
    maybe with broker entry metadata, then maybe damaged after its header."""
    data = draw(st.one_of(payload_frame(), other_frame()))
    if len(data) < 8:  # (junk: a frame of an empty command and these bytes)
        return struct.pack(">II", 4 + len(data), 0) + data
    if draw(st.integers(0, 3)) == 0:  # broker entry metadata (0x0e02) after the command
        cmd_end = 8 + struct.unpack_from(">I", data, 4)[0]
        bem = draw(st.sampled_from([b"\x08\x95\x9a\xef\x3a\x10\x07", b"", b"\xff\x01"]))
        section = struct.pack(">HI", 0x0E02, len(bem)) + bem + data[cmd_end:]
        data = data[:cmd_end] + section
    body = bytearray(data[8:])
    for at, byte in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                  max_size=3)):
        if body:
            body[at % len(body)] = byte
    cut = draw(st.integers(0, len(body)))
    cmd_size = min(struct.unpack_from(">I", data, 4)[0], cut)
    return struct.pack(">II", 4 + cut, cmd_size) + bytes(body[:cut])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(any_frame())
def test_frames_taken_apart_in_c_as_the_reference_does(data):
    """``fastpath.frame`` (``_speedups.parse_frame`` for a clean frame) gives the
    ``Frame`` ``frame.parse_frame`` gives, damaged frames included."""
    from dissectors.pulsar.frame import parse_frame

    assert fastpath.frame(data) == parse_frame(data, fastpath.decode)

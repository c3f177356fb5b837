"""The tolerant protobuf reader (dissectors.proto.wire): Go-like semantics, exact errors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dissectors.proto import decode, schema
from dissectors.proto.wire import MAX_DEPTH
from tests.stan.wirehelp import pb, tag, varint

PUB = schema("msgcap.stan.PubMsg")
MSG = schema("msgcap.stan.MsgProto")
CONN = schema("msgcap.stan.ConnectRequest")
PAUSE = schema("msgcap.liftbridge.internal.PauseStreamOp")
PROP = schema("msgcap.liftbridge.internal.PropagatedRequest")


def test_clean_message_and_last_one_wins():
    d = decode(pb((1, "a"), (3, "chan"), (1, "b")), PUB)
    assert d.values == {"client_id": "b", "subject": "chan"}
    assert d.clean and d.error is None


def test_empty_payload_is_a_clean_empty_message():
    d = decode(b"", PUB)
    assert d.values == {} and d.clean


def test_int32_negative_and_low_bits_like_go():
    d = decode(pb((3, -1), (5, (1 << 32) + 7)), CONN)
    assert d.values == {"protocol": -1, "ping_interval": 7}


def test_uint64_stays_unsigned_bool_is_nonzero():
    d = decode(pb((1, (1 << 64) - 1), (6, 2)), MSG)
    assert d.values == {"sequence": (1 << 64) - 1, "redelivered": True}


def test_unknown_fields_are_skipped_and_listed():
    raw = pb((1, "c"), (9, 5), (99, b"zz")) + tag(11, 1) + bytes(8) + tag(12, 5) + bytes(4)
    d = decode(raw, PUB)
    assert d.values == {"client_id": "c"}
    assert d.unknown == ["9", "99", "11", "12"]
    assert d.error is None and not d.clean


def test_groups_are_skipped():
    raw = tag(20, 3) + pb((1, 5)) + tag(21, 3) + tag(21, 4) + tag(20, 4) + pb((2, "g"))
    d = decode(raw, PUB)
    assert d.values == {"guid": "g"} and d.unknown == ["20"]


def test_mismatched_end_group_is_an_error():
    d = decode(tag(20, 3) + tag(21, 4), PUB)
    assert d.error == "end-group 21 closes group 20 (at offset 2)"


def test_truncated_length():
    raw = pb((1, "abc")) + tag(2, 2) + varint(10) + b"xy"
    d = decode(raw, PUB)
    assert d.values == {"client_id": "abc"}
    assert d.truncated
    assert d.error == "guid (field 2): length 10 runs past the end (2 bytes left) (at offset 6)"
    assert d.error_offset == 6


def test_truncated_varint_and_tag():
    d = decode(tag(1, 0) + b"\x80\x80", MSG)
    assert d.truncated and d.error == "sequence: varint runs past the end (at offset 1)"
    d = decode(b"\x80", MSG)
    assert d.truncated and d.error == "tag runs past the end (at offset 0)"


def test_overlong_varint_is_invalid():
    d = decode(tag(1, 0) + b"\xff" * 10 + b"\x01", MSG)
    assert not d.truncated and d.error == "sequence: varint longer than 10 bytes (at offset 1)"


def test_wrong_wire_type_on_a_known_field_stops_like_gogoproto():
    d = decode(pb((1, "x")) + tag(2, 0) + varint(1), PUB)
    assert d.values == {"client_id": "x"}
    assert d.error == "guid (field 2) has wire type 0, expected 2 (at offset 3)"
    assert not d.truncated


def test_field_zero_and_invalid_wire_types():
    assert decode(b"\x00\x01", PUB).error == "field number 0 (at offset 0)"
    assert decode(tag(30, 6), PUB).error == "invalid wire type 6 for field 30 (at offset 0)"
    assert decode(tag(30, 4), PUB).error == "end-group tag for field 30 (at offset 0)"


def test_invalid_utf8_is_kept_escaped_and_flagged():
    d = decode(pb((1, b"a\xffb")), PUB)
    assert d.values == {"client_id": "a\\xffb"}
    assert d.bad_utf8 == ["client_id"] and d.error is None and not d.clean


def test_repeated_packed_and_unpacked():
    raw = pb((1, "s")) + tag(2, 2) + varint(3) + varint(1) + varint(300) + pb((2, 7))
    d = decode(raw, PAUSE)
    assert d.values == {"stream": "s", "partitions": [1, 300, 7]}


def test_nested_error_has_a_dotted_path_and_absolute_offset():
    inner = pb((1, "s")) + tag(2, 2) + varint(5) + b"\x01"  # packed list cut short
    raw = pb((1, 6)) + tag(7, 2) + varint(len(inner)) + inner
    d = decode(raw, PROP)
    assert d.values["op"] == 6
    assert d.values["pause_stream_op"].values == {"stream": "s"}
    assert d.error == (
        "pause_stream_op.partitions (field 2): length 5 runs past the end (1 bytes left) "
        "(at offset 8)"
    )


def test_depth_is_bounded():
    sch = schema("msgcap.liftbridge.internal.CreateStreamOp")
    raw = b""
    # CreateStreamOp.stream (1) → Stream; Stream has no self-reference, so nest unknown
    # groups instead: they are skipped iteratively up to MAX_DEPTH
    for _ in range(MAX_DEPTH + 2):
        raw = tag(9, 3) + raw + tag(9, 4)
    d = decode(raw, sch)
    assert d.error is not None and "deeper than" in d.error


@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data):
    for sch in (PUB, MSG, CONN, PROP):
        d = decode(data, sch)
        assert d.error is None or d.error_offset is not None


def _general_only(data: bytes, sch):
    """``decode`` with the inline reading of simple fields turned off: every field goes
    through the general reader ``wire._field`` (the definition of the semantics)."""
    saved = {}

    def walk(s):
        if s.full_name in saved:
            return
        saved[s.full_name] = (s, s.simple)
        s.simple = (len(s.fields), {})
        for f in s.fields.values():
            if f.message is not None:
                walk(f.message)

    walk(sch)
    try:
        return decode(data, sch)
    finally:
        for s, simple in saved.values():
            s.simple = simple


_SCHEMAS = [schema(n) for n in (
    "msgcap.stan.PubMsg", "msgcap.stan.MsgProto", "msgcap.stan.ConnectRequest",
    "msgcap.stan.SubscriptionRequest", "msgcap.stan.Ack",
    "msgcap.liftbridge.api.Message", "msgcap.liftbridge.internal.PropagatedRequest",
    "msgcap.liftbridge.internal.PauseStreamOp", "msgcap.liftbridge.internal.ServerInfoResponse",
)]
_VALUES = st.one_of(
    st.integers(0, 300), st.integers(0, (1 << 64) - 1), st.booleans(),
    st.binary(max_size=140), st.text(max_size=20), st.tuples(st.just("fixed32"), st.integers(0, 9)),
)


@given(st.sampled_from(_SCHEMAS),
       st.lists(st.tuples(st.integers(1, 20), _VALUES), max_size=8),
       st.integers(0, 400), st.binary(max_size=3))
def test_inline_reading_matches_the_general_reader(sch, fields, cut, tail):
    """Well-formed, truncated and trailing-garbage messages (wrong wire types, unknown
    fields, bad UTF-8, long lengths included) decode the same with and without the
    inline path, errors and offsets too."""
    full = pb(*fields)
    for data in (full, full[:cut], full + tail):
        assert decode(data, sch) == _general_only(data, sch)

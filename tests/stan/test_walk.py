"""The compiled walk (dissectors.proto.walk, ``_walk.c``) against the tolerant reader
(dissectors.proto.wire), which stays the definition: whatever the walk answers is what
the reader decodes, the STAN values it gives are ``decode_kind``'s, and Liftbridge's
rows and learning are those of the reader alone."""

from __future__ import annotations

import zlib
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from dissectors.api import CarriedMessage
from dissectors.dispatch import ScopeDispatcher
from dissectors.liftbridge.decoder import _SCHEMAS as _LB_SCHEMAS
from dissectors.liftbridge.magic import MAGIC
from dissectors.proto import schema
from dissectors.proto.walk import (
    WalkPlan,
    available,
    capper,
    tree,
    tree_plan,
    walk,
    walk_plan,
)
from dissectors.proto.wire import ABSENT, Decoded, Kind, MessageSchema, decode
from dissectors.stan.decode import KINDS, clean_values, decode_kind
from tests.stan.wirehelp import carried, pb, tag, varint

_SCHEMAS = [schema(n) for n in (
    *sorted({full for full, _ in KINDS.values() if full is not None}),
    "msgcap.liftbridge.api.Message", "msgcap.liftbridge.api.Ack",
    "msgcap.liftbridge.internal.PropagatedRequest",
    "msgcap.liftbridge.internal.ServerInfoResponse",
)]
# field numbers the schemas use (and some they do not), values of every wire type
_NUMBERS = st.one_of(st.integers(1, 14), st.sampled_from([100, 127, 128, 300]))
_VALUES = st.one_of(
    st.integers(0, 300), st.integers(0, (1 << 64) - 1), st.booleans(),
    st.binary(max_size=40), st.text(max_size=12), st.tuples(st.just("fixed32"), st.integers(0, 9)),
)
_SIMPLE = (Kind.STRING, Kind.BYTES, Kind.INT32, Kind.INT64, Kind.UINT32, Kind.UINT64, Kind.BOOL,
           Kind.ENUM)


def _typed_value(kind: Kind) -> st.SearchStrategy[object]:
    if kind is Kind.STRING:
        return st.one_of(st.text(max_size=12), st.binary(max_size=6))  # (bytes: bad UTF-8)
    if kind is Kind.BYTES:
        return st.binary(max_size=40)
    if kind is Kind.MESSAGE or kind is Kind.MAP:
        return st.binary(max_size=6)
    return st.one_of(st.integers(0, 300), st.integers(0, (1 << 64) - 1))


@st.composite
def _fields(draw: st.DrawFn, sch: MessageSchema) -> list[tuple[int, object]]:
    """Mostly the schema's own fields with values of their kind, sometimes anything."""
    specs = list(sch.fields.values())
    out = []
    for _ in range(draw(st.integers(0, 7))):
        if draw(st.integers(0, 5)):
            f = draw(st.sampled_from(specs))
            out.append((f.number, draw(_typed_value(f.kind))))
        else:
            out.append((draw(_NUMBERS), draw(_VALUES)))
    return out


@st.composite
def _nested(draw: st.DrawFn, sch: MessageSchema, depth: int = 0) -> bytes:
    """A message of ``sch`` with its nested messages, repeated fields (packed lists
    too) and map entries mostly well-formed, sometimes not (``_fields``' anything)."""
    out = b""
    for _ in range(draw(st.integers(0, 5))):
        f = draw(st.sampled_from(list(sch.fields.values()))) if sch.fields else None
        if f is None or not draw(st.integers(0, 7)):
            out += pb((draw(_NUMBERS), draw(_VALUES)))
        elif f.kind is Kind.MESSAGE and f.message is not None and depth < 4:
            out += pb((f.number, draw(_nested(f.message, depth + 1))))
        elif f.kind is Kind.MAP and f.message is not None:
            entry = list(f.message.fields.values())
            out += pb((f.number, pb(*((e.number, draw(_typed_value(e.kind)))
                                     for e in entry if draw(st.integers(0, 4))))))
        elif f.repeated and f.kind not in (Kind.STRING, Kind.BYTES, Kind.MESSAGE) \
                and draw(st.booleans()):  # packed
            items = draw(st.lists(st.integers(0, (1 << 64) - 1), max_size=4))
            out += pb((f.number, b"".join(varint(v) for v in items)))
        else:
            out += pb((f.number, draw(_typed_value(f.kind))))
    return out


def _plain(v: object) -> object:
    """A reader's value with every nested ``Decoded`` (map values too) as a dict."""
    if isinstance(v, Decoded):
        return {k: _plain(x) for k, x in v.values.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _identity(sch: MessageSchema) -> WalkPlan:
    """Each field to the column of its own name, nothing when absent."""
    plan = walk_plan([(f, f.name, ABSENT, None) for f in sch.fields.values()], {})
    assert plan is not None
    return plan


def test_the_walk_is_built():
    assert available(), "dissectors.proto._walk is not built (pip install -e .)"


@given(st.data(), st.sampled_from(_SCHEMAS), st.integers(0, 200), st.binary(max_size=3),
       st.binary(max_size=3))
def test_what_the_walk_takes_the_reader_decodes_the_same(data_, sch, cut, tail, prefix):
    """Well-formed, cut and trailing-garbage messages (wrong wire types, unknown fields,
    bad UTF-8, long lengths, repeated and nested fields, over-long varints): the walk
    answers only for a clean message of simple fields, with the reader's values and the
    numbers present; and it answers for every such message."""
    full = pb(*data_.draw(_fields(sch)))
    by_name = {f.name: f for f in sch.fields.values()}
    for data in (full, full[:cut], full + tail, tag(1, 0) + b"\xff" * 10 + b"\x01"):
        got = walk(prefix + data, len(prefix), _identity(sch))
        d = decode(data, sch)
        simple = d.clean and all(
            by_name[n].kind in _SIMPLE and not by_name[n].repeated for n in d.values)
        if got is None:
            assert not simple, data
            continue
        values, present = got
        assert simple and values == d.values
        assert present == sum(1 << by_name[n].number for n in d.values)


_TREE_SCHEMAS = [schema(_LB_SCHEMAS[8]), schema("msgcap.liftbridge.internal.Cursor"),
                 schema("msgcap.liftbridge.api.ActivityStreamEvent"),
                 schema("msgcap.liftbridge.internal.PropagatedResponse")]


@given(st.data(), st.sampled_from(_TREE_SCHEMAS), st.booleans(), st.integers(0, 300),
       st.binary(max_size=3))
def test_what_the_tree_takes_the_reader_decodes_the_same(data_, sch, names, cut, tail):
    """Nested messages (operations, partitions, repeated and packed fields), cut or with
    trailing garbage: the tree answers only for a clean message, with the reader's
    fields (nested ones as dicts), enums named as a JSON column names them; and it
    answers for every clean one."""
    from dissectors.liftbridge.decoder import _json_obj

    node = tree_plan(sch, names)
    assert node is not None
    full = data_.draw(_nested(sch))
    for data in (full, full[:cut], full + tail):
        got = tree(b"xy" + data, 2, node)
        d = decode(data, sch)
        if got is None:
            assert not d.clean, data
            continue
        assert d.clean
        if names:  # (every level named: the JSON the dissector shows)
            assert got == _json_obj(d)
        else:
            top = _json_obj(d)
            top.update({k: v for k, v in d.values.items() if not isinstance(v, Decoded)})
            assert got == top


def test_the_tree_refuses_what_a_json_column_renders_otherwise():
    assert tree_plan(schema("msgcap.liftbridge.api.Message")) is None  # bytes, a map
    node = tree_plan(schema("msgcap.liftbridge.api.ActivityStreamEvent"))
    assert node is not None
    assert tree(pb((2, 1), (3, b"")), 0, node) == {"op": "DELETE_STREAM",
                                                   "create_stream_op": {}}
    assert tree(pb((2, 99)), 0, node) == {"op": 99}  # (unnamed: its number, as JSON)
    assert tree(pb((3, pb((1, 5)))), 0, node) is None  # an unknown field, nested
    assert tree(pb((1, "x")), 0, node) is None  # a wrong wire type
    assert tree(b"", 1, node) is None and tree(b"", -1, node) is None


@given(st.data(), st.integers(0, 300), st.binary(max_size=3))
def test_walked_maps_are_the_readers_items(data_, cut, tail):
    """A Liftbridge Message's header map (entries with a key or value missing, repeated
    keys, bad UTF-8, unknown entry fields): the walk answers only for a clean message,
    the map as the list of the reader's dict items."""
    sch = schema(_LB_SCHEMAS[0])
    by_name = {f.name: f for f in sch.fields.values()}
    plan = walk_plan([(f, f.name, ABSENT, None) for f in sch.fields.values()], {}, maps=True)
    assert plan is not None
    full = data_.draw(_nested(sch))
    for data in (full, full[:cut], full + tail):
        got = walk(data, 0, plan)
        d = decode(data, sch)
        if got is None:
            assert not d.clean, data
            continue
        values, present = got
        expect = {k: list(v.items()) if by_name[k].kind is Kind.MAP else v
                  for k, v in d.values.items()}
        assert d.clean and values == expect
        assert present == sum(1 << by_name[n].number for n in d.values)


@given(st.binary(max_size=600), st.sampled_from([None, 0, 1, 64, 512, 4096]),
       st.booleans(), st.dictionaries(st.sampled_from(["x", "n", "h"]), st.integers(), max_size=2))
def test_compiled_payload_columns_are_capped_pys(data, cap, view, before):
    """``_walk.capped`` sets the same columns to the same values, of the same types, as
    ``walk.capped_py`` (the definition), and returns the same digest; a memoryview too."""
    columns = ("n", "h", "kept", "cut")
    got, want = dict(before), dict(before)
    payload = memoryview(data) if view else data
    assert capper(columns)(got, payload, cap) == capper(columns, False)(want, payload, cap)
    assert list(got) == list(want)
    assert [(type(v), bytes(v) if isinstance(v, memoryview) else v) for v in got.values()] \
        == [(type(v), bytes(v) if isinstance(v, memoryview) else v) for v in want.values()]


def test_defaults_base_and_extras():
    sch = schema("msgcap.stan.SubscriptionRequest")
    f = {s.name: s for s in sch.fields.values()}
    names = {0: "NewOnly", 1: "LastReceived"}
    plan = walk_plan([(f["client_id"], "client", "", None),
                      (f["start_position"], "pos", "x", names),
                      (f["start_sequence"], "seq", ABSENT, True)], {"kind": "k"},
                     (("seen", []),))
    assert plan is not None
    assert walk(b"", 0, plan) == ({"kind": "k", "client": "", "pos": "x", "seen": []}, 0)
    one, _ = walk(pb((10, 1)), 0, plan)  # type: ignore[misc]
    two, _ = walk(pb((10, 1)), 0, plan)  # type: ignore[misc]
    assert one["pos"] == "LastReceived" and one["seen"] is not two["seen"]  # (a list per row)
    assert walk(pb((10, 7)), 0, plan)[0]["pos"] == "7"  # type: ignore[index]  # unnamed
    assert walk(pb((11, (1 << 63) - 1)), 0, plan)[0]["seq"] == (1 << 63) - 1  # type: ignore[index]
    assert walk(pb((11, 1 << 63)), 0, plan) is None  # the reference reports the overflow
    assert walk(pb((2, "chan")), 0, plan) is None  # a field the plan does not name
    assert walk(tag(1, 2) + varint(5) + b"ab", 0, plan) is None  # cut short
    assert walk(b"", 1, plan) is None and walk(pb((1, "c")), -1, plan) is None  # (bad pos)
    assert walk(bytearray(pb((1, "c"))), 0, plan) == ({"kind": "k", "client": "c", "pos": "x",
                                                       "seen": []}, 2)
    assert walk_plan([(f["client_id"], "kind", "", None)], {"kind": "k"}) is None  # a base key


@given(st.data(), st.sampled_from(sorted(KINDS)), st.sampled_from([None, 0, 3, 4096]),
       st.booleans())
def test_stan_clean_values_are_decode_kinds(data_, kind, cap, crc_right):
    """Random STAN messages of every kind (a MsgProto's CRC right or wrong, a PubMsg's
    digest present or not): ``clean_values`` answers only where ``decode_kind`` reports
    no problem, with its values."""
    full = KINDS[kind][0]
    payload = pb(*data_.draw(_fields(schema(full)))) if full else data_.draw(st.binary(max_size=2))
    if kind == "MsgProto" and crc_right:
        import zlib

        d = decode(payload, schema("msgcap.stan.MsgProto"))
        if d.clean and isinstance(d.values.get("data", b""), bytes):
            payload += pb((10, zlib.crc32(d.values.get("data", b""))))
    fast = clean_values(kind, payload, cap)
    if fast is not None:
        values, _, problems = decode_kind(kind, payload, cap)
        assert not problems and fast == values


def test_typical_stan_messages_take_the_walk():
    import hashlib
    import zlib

    data = b"hello"
    for kind, payload in (
        ("PubMsg", pb((1, "c1"), (2, "g"), (3, "chan"), (5, data),
                      (10, hashlib.sha256(data).digest()))),
        ("MsgProto", pb((1, 7), (2, "chan"), (4, data), (5, 1_700_000_000 * 10**9),
                        (10, zlib.crc32(data)))),
        ("SubscriptionRequest", pb((1, "c1"), (2, "chan"), (4, "_INBOX.x"), (5, 10), (6, 30),
                                   (10, 2))),
        ("Ack", pb((1, "chan"), (2, 7))),
        ("PubAck", pb((1, "g"))),
    ):
        fast = clean_values(kind, payload, 4096)
        values, _, problems = decode_kind(kind, payload, 4096)
        assert fast is not None and not problems and fast == values, kind


# -- Liftbridge: rows and learning with the walk and with the reader alone ------------

_LB_CODES = [c for c, full in _LB_SCHEMAS.items() if full is not None]


def _refuse(*args: object) -> None:
    """The walk and the tree switched off: every message to the reader (and every
    envelope header to ``parse_header``)."""
    return None


def _lb_arm(messages: list[CarriedMessage], walked: bool) -> tuple[object, ...]:
    """Records and what the scope learned from ``messages``, with or without the walk."""
    from dissectors import liftbridge
    from dissectors.liftbridge import decoder

    scope = ScopeDispatcher([liftbridge.LiftbridgeDissector], {"payload_cap": 16}, strict=True)
    with mock.patch.object(decoder, "_walk", decoder._walk if walked else _refuse), \
            mock.patch.object(decoder, "tree", decoder.tree if walked else _refuse), \
            mock.patch.object(decoder, "_PLAIN_HEADERS",
                              decoder._PLAIN_HEADERS if walked else {}):
        out = [[(r.table, r.values, [(c.table, c.values) for c in r.children])
                for r in scope.dispatch(m)] for m in messages]
    return out, dict(scope.exact), list(scope.patterns), \
        dict(scope.states["liftbridge"].stream_subjects)


@given(st.data(), st.lists(st.sampled_from(_LB_CODES), min_size=1, max_size=6))
def test_liftbridge_rows_and_learning_are_the_readers(data_, codes):
    """Random envelopes of every protobuf type (plain fields of their kind mostly, or
    nested messages, lists and maps, so the walk takes many), some on a ``.replicate`` /
    ``.offset`` subject, the same rows, anomalies and bindings with the walk as with
    the reader alone."""
    messages = []
    for code in codes:
        sch = schema(_LB_SCHEMAS[code])
        body = data_.draw(st.one_of(_fields(sch).map(lambda f: pb(*f)), _nested(sch)))
        payload = MAGIC + bytes([0, 8, 0, code]) + body
        subject = data_.draw(st.sampled_from(["s.x", "ns.orders.0.replicate", "ns.o.1.offset",
                                              "a.activity"]))
        messages.append(carried(subject, payload, reply=data_.draw(st.sampled_from([None, "r"]))))
    assert _lb_arm(messages, True) == _lb_arm(messages, False)


def test_liftbridge_forwarded_publishes_and_acks_learn_the_same():
    """What a walked message teaches depends on which fields were on the wire (a
    forwarded publish without ``partition`` binds its subject to no partition, with
    ``partition`` = 0 to partition 0), and the internal streams' values decode."""
    msgs = [carried("s.x", MAGIC + bytes([0, 8, 0, code]) + pb(*fields)) for code, fields in (
        (0, [(5, "orders"), (7, "orders.a")]),
        (0, [(5, "orders"), (7, "orders.b"), (6, 0)]),
        (0, [(5, "orders"), (7, "orders.c"), (6, 2), (3, b"v" * 40)]),
        (0, [(5, "__activity"), (3, pb((1, 1), (2, 7)))]),
        (1, [(1, "orders"), (2, "orders.d")]),
        (1, [(1, "orders"), (3, "orders.e")]),
    )]
    walked = _lb_arm(msgs, True)
    assert walked == _lb_arm(msgs, False)
    assert walked[3] == {"orders.a": ("orders", None), "orders.b": ("orders", 0),
                         "orders.c": ("orders", 2), "orders.d": ("orders", None)}


def test_typical_liftbridge_messages_take_the_walk():
    """The nested and map-field messages a Liftbridge cluster sends (a CreateStream with
    its partitions, a consumer group join, a pause with a packed partition list, a publish
    with headers, the __activity / __cursors values) never reach the reader, and give
    the reader's rows and bindings."""
    from dissectors.liftbridge import decoder

    partition = pb((1, "orders.1"), (2, "orders"), (3, 1), (5, 2), (6, "a"), (6, "b"),
                   (7, "a"), (8, "a"), (9, 1), (10, 1))
    msgs = [carried(subject, MAGIC + bytes([0, 8, 0, code]) + body) for subject, code, body in (
        ("lb.raft.metadata.propagate", 8,
         pb((2, pb((1, pb((1, "orders"), (2, "orders"), (3, partition), (5, 7))))))),
        ("lb.raft.metadata.propagate", 8, pb((1, 11), (10, pb((1, "g"), (2, "c"), (3, "o"))))),
        ("lb.raft.metadata.propagate", 8, pb((1, 6), (7, pb((1, "s"), (2, b"\x00\x01"))))),
        ("orders", 0, pb((1, -1), (2, b"k"), (3, b"v"), (9, pb((1, "trace"), (2, b"t-1"))),
                         (9, pb((1, "bin"), (2, b"\x00"))), (12, 2))),
        ("lb.activity", 0, pb((3, pb((1, 4), (2, 1), (4, b""))), (5, "__activity"))),
        ("lb.cursors", 0, pb((2, b"g,orders,0"), (3, pb((1, "orders"), (3, "g"), (4, 4))),
                             (5, "__cursors"))),
    )]
    with mock.patch.object(decoder, "decode", side_effect=AssertionError("to the reader")):
        walked = _lb_arm(msgs, True)
    assert walked == _lb_arm(msgs, False)
    rows = [recs[0][1] for recs in walked[0]]  # type: ignore[index]
    assert rows[3]["headers"] == [("trace", b"t-1"), ("bin", b"\x00")]
    assert rows[4]["value_json"] == '{"delete_stream_op":{},"id":4,"op":"DELETE_STREAM"}'
    assert walked[3] == {"orders.1": ("orders", 1)}


# -- STAN: rows and learning with the walk and with the reader alone -----------------

# subjects and inboxes a STAN scope learns and types by: string fields draw from them too
_STAN_SUBJECTS = ["_STAN.discover.c", "_STAN.discover.c.d.pings", "_STAN.pub.c.ch",
                  "_STAN.sub.c", "_INBOX.a", "_INBOX.b", "disc.c", "p.ch"]


def _plausible(draw: st.DrawFn, kind: str) -> list[tuple[int, object]] | None:
    """Fields of a ``kind`` that scores (``decode.score``): inference claims it."""
    sub = st.sampled_from(_STAN_SUBJECTS)
    data = draw(st.binary(max_size=6))
    return {
        "ConnectRequest": [(1, "c1"), (2, draw(sub)), (3, 1), (4, b"n")],
        "ConnectResponse": [(1, draw(sub)), (2, draw(sub)), (3, draw(sub)), (4, draw(sub)),
                            (6, draw(sub)), (7, draw(sub))],
        "SubscriptionRequest": [(1, "c1"), (2, "ch"), (4, draw(sub)), (5, 10), (6, 30),
                                (10, draw(st.integers(0, 6)))],
        "SubscriptionResponse": [(2, draw(sub))],
        "UnsubscribeRequest": [(1, "c1"), (2, "ch"), (3, draw(sub))],
        "SubCloseRequest": [(1, "c1"), (2, "ch"), (3, draw(sub)), (4, "d")],
        "PubMsg": [(1, "c1"), (2, "g1"), (3, "ch"), (5, data), (6, b"n")],
        "MsgProto": [(1, draw(st.integers(1, 9))), (2, "ch"), (4, data),
                     (5, 1_700_000_000 * 10**9), (10, zlib.crc32(data))],
        "Ack": [(1, "ch"), (2, draw(st.integers(1, 9)))],
        "PubAck": [(1, "g1")],
    }.get(kind)


@st.composite
def _stan_message(draw: st.DrawFn) -> CarriedMessage:
    """A message of any kind, often one inference claims (``_plausible``), its string
    fields often subjects a scope learns from."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    full = KINDS[kind][0]
    fields = _plausible(draw, kind) if draw(st.booleans()) else None
    if fields is None:
        fields = draw(_fields(schema(full))) if full else []
    if full:
        strings = [f for f in schema(full).fields.values() if f.kind is Kind.STRING]
        for f in draw(st.lists(st.sampled_from(strings), max_size=2)) if strings else ():
            fields.append((f.number, draw(st.sampled_from(_STAN_SUBJECTS))))
    payload = pb(*fields) if full else draw(st.sampled_from([b"", b"\x00"]))
    return carried(draw(st.sampled_from(_STAN_SUBJECTS)), payload,
                   reply=draw(st.sampled_from([None, "_INBOX.a", "_INBOX.b"])))


def _stan_arm(messages: list[CarriedMessage], walked: bool) -> tuple[object, ...]:
    """Records and what the scope learned from ``messages``, with or without the walk."""
    from dissectors import stan
    from dissectors.stan import decoder

    scope = ScopeDispatcher([stan.StanDissector], {"payload_cap": 3}, strict=True)
    with mock.patch.object(decoder, "walked_values",
                           decoder.walked_values if walked else _refuse):
        out = [[(r.table, r.values) for r in scope.dispatch(m)] for m in messages]
    state = scope.states["stan"]
    return out, list(scope.exact.items()), list(scope.patterns), \
        list(state.pending_discover.items()), list(state.confirmed), state.discover_prefixes


@given(st.lists(_stan_message(), min_size=1, max_size=12))
def test_stan_rows_and_learning_are_the_readers(messages):
    """Random messages of every kind on subjects a scope types by default, learns or
    infers, the same rows, anomalies and bindings with the walk (rows stamped in its
    plan) as with the reader alone (stamped after)."""
    assert _stan_arm(messages, True) == _stan_arm(messages, False)

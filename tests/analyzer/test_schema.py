"""Derivations from the table declarations: Arrow/Spark schemas, validator, batches,
registry and the generated docs/tables.md."""

from __future__ import annotations

import collections
import functools
import subprocess
import sys
import types
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import docs
from dissectors import schema as S
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.schema import (
    SchemaError,
    arrow_schema,
    load_all_tables,
    rows_to_batch,
    spark_schema,
    validate_batch,
)
from dissectors.tables import (
    ENVELOPE,
    TS,
    Field,
    TableSpec,
    all_tables,
    get_table,
    register_table,
    unregister_table,
)

REPO = Path(__file__).resolve().parents[2]

# one column of every Arrow type the tables use
ALL_TYPES = TableSpec(
    name="all_types",
    version=3,
    description="Test table with every type.",
    envelope=False,
    fields=(
        Field("s", pa.string(), "a string", False),
        Field("i32", pa.int32(), "an int32"),
        Field("i64", pa.int64(), "an int64", False),
        Field("flag", pa.bool_(), "a bool"),
        Field("blob", pa.binary(), "bytes"),
        Field("f64", pa.float64(), "a double"),
        Field("ts", TS, "a timestamp"),
        Field("ints", pa.list_(pa.int32()), "a list"),
        Field("hdrs", pa.map_(pa.string(), pa.string()), "a map"),
    ),
)

PROTO = TableSpec(
    name="proto_test",
    version=1,
    description="A protocol-like table with the envelope.",
    fields=(
        Field("op", pa.string(), "operation", False),
        Field("payload", pa.binary(), "payload bytes"),
    ),
)

FLOWS_EXPECTED = [
    ("capture_id", pa.string(), False),
    ("flow_id", pa.int64(), False),
    ("transport", pa.string(), False),
    ("client_ip", pa.string(), False),
    ("client_port", pa.int32(), False),
    ("server_ip", pa.string(), False),
    ("server_port", pa.int32(), False),
    ("role_source", pa.string(), False),
    ("vlan", pa.list_(pa.int32()), False),
    ("ts_first", pa.timestamp("us", tz="UTC"), False),
    ("ts_first_ns", pa.int64(), False),
    ("ts_last", pa.timestamp("us", tz="UTC"), False),
    ("ts_last_ns", pa.int64(), False),
    ("frame_first", pa.int64(), False),
    ("frame_last", pa.int64(), False),
]
for _base in (
    "packets",
    "payload_bytes",
    "stream_bytes",
    "gap_bytes",
    "overlap_conflicts",
    "decoded_bytes",
    "undecoded_bytes",
):
    FLOWS_EXPECTED += [(f"{_base}_c2s", pa.int64(), False), (f"{_base}_s2c", pa.int64(), False)]
FLOWS_EXPECTED += [
    ("mid_stream_c2s", pa.bool_(), False),
    ("mid_stream_s2c", pa.bool_(), False),
    ("protocol", pa.string(), True),
    ("close_reason", pa.string(), False),
    ("quic_version", pa.int64(), True),
    ("tls_sni", pa.string(), True),
    ("tls_alpn", pa.list_(pa.string()), True),
    ("tls_alpn_selected", pa.string(), True),
    ("tls_client_random", pa.string(), True),
    ("tls_version", pa.string(), True),
    ("tls_cipher_suite", pa.string(), True),
    ("quic_initial_dcid", pa.string(), True),
    ("layers", pa.list_(pa.string()), True),
]

ANOMALIES_EXPECTED = [
    ("capture_id", pa.string(), False),
    ("record_id", pa.int64(), False),
    ("flow_id", pa.int64(), True),
    ("direction", pa.string(), True),
    ("kind", pa.string(), False),
    ("detail", pa.string(), False),
    ("ts", pa.timestamp("us", tz="UTC"), True),
    ("ts_ns", pa.int64(), True),
    ("frame", pa.int64(), True),
    ("offset", pa.int64(), True),
    ("nbytes", pa.int64(), True),
    ("source", pa.string(), False),
]


def _schema(cols: list[tuple[str, pa.DataType, bool]]) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=nl) for n, t, nl in cols])


def _all_types_row(i: int = 0) -> dict:
    return {
        "s": f"s{i}",
        "i32": i,
        "i64": 10**12 + i,
        "flag": i % 2 == 0,
        "blob": bytes([i % 256]) * 3,
        "f64": i / 4,
        "ts": 1_700_000_000_123_456_789 + i,
        "ints": [i, i + 1],
        "hdrs": [("k", str(i))],
    }


# ---------------------------------------------------------------------- Arrow schema


def test_flows_arrow_schema_is_the_declared_columns() -> None:
    got = arrow_schema(FLOWS)
    assert got.equals(_schema(FLOWS_EXPECTED), check_metadata=False)
    assert got.metadata == {b"msgcap.table": b"flows", b"msgcap.table_version": b"2"}
    for f in FLOWS.columns:
        assert got.field(f.name).metadata == {b"description": f.description.encode()}


def test_anomalies_arrow_schema_is_the_declared_columns() -> None:
    assert arrow_schema(ANOMALIES).equals(_schema(ANOMALIES_EXPECTED), check_metadata=False)
    assert arrow_schema(ANOMALIES).metadata[b"msgcap.table"] == b"anomalies"


def test_protocol_table_gets_the_envelope_first() -> None:
    got = arrow_schema(PROTO)
    assert got.names == [f.name for f in ENVELOPE] + ["op", "payload"]
    assert got.field("capture_id").nullable is False
    assert got.field("parent_record_id").nullable is True
    assert got.field("ts_first").type == pa.timestamp("us", tz="UTC")
    assert got.field("ts_first_ns").type == pa.int64()


def test_every_core_column_has_a_real_description() -> None:
    for spec in (FLOWS, ANOMALIES):
        assert len(spec.description) > 40
        for f in spec.columns:
            assert len(f.description) > 8, f.name


def test_tablespec_rejects_bad_declarations() -> None:
    with pytest.raises(ValueError, match="reserved"):
        TableSpec("t", 1, "d", (Field("capture", pa.string(), "x"),), envelope=False)
    with pytest.raises(ValueError, match="duplicate"):
        TableSpec("t", 1, "d", (Field("flow_id", pa.int64(), "x"),))
    with pytest.raises(ValueError, match="must match"):
        TableSpec("T-1", 1, "d", (Field("a", pa.string(), "x"),), envelope=False)
    with pytest.raises(ValueError, match="version"):
        TableSpec("t", 0, "d", (Field("a", pa.string(), "x"),), envelope=False)
    with pytest.raises(ValueError, match="description"):
        TableSpec("t", 1, "d", (Field("a", pa.string(), " "),), envelope=False)


# ---------------------------------------------------------------------- Spark schema


def test_spark_schema_maps_every_type() -> None:
    T = pytest.importorskip("pyspark.sql.types")
    expected = T.StructType(
        [
            T.StructField("s", T.StringType(), False, {"comment": "a string"}),
            T.StructField("i32", T.IntegerType(), True, {"comment": "an int32"}),
            T.StructField("i64", T.LongType(), False, {"comment": "an int64"}),
            T.StructField("flag", T.BooleanType(), True, {"comment": "a bool"}),
            T.StructField("blob", T.BinaryType(), True, {"comment": "bytes"}),
            T.StructField("f64", T.DoubleType(), True, {"comment": "a double"}),
            T.StructField("ts", T.TimestampType(), True, {"comment": "a timestamp"}),
            T.StructField(
                "ts_ns", T.LongType(), True, {"comment": ALL_TYPES.column("ts_ns").description}
            ),
            T.StructField(
                "ints", T.ArrayType(T.IntegerType(), containsNull=True), True, {"comment": "a list"}
            ),
            T.StructField(
                "hdrs",
                T.MapType(T.StringType(), T.StringType(), valueContainsNull=True),
                True,
                {"comment": "a map"},
            ),
        ]
    )
    assert spark_schema(ALL_TYPES) == expected


def test_spark_schema_of_flows() -> None:
    T = pytest.importorskip("pyspark.sql.types")
    got = spark_schema(FLOWS)
    assert got.names == [n for n, _, _ in FLOWS_EXPECTED]
    assert got["vlan"].dataType == T.ArrayType(T.IntegerType(), True)
    assert got["ts_first"].dataType == T.TimestampType()
    assert got["client_port"].dataType == T.IntegerType()
    assert got["mid_stream_s2c"].dataType == T.BooleanType()
    assert [f.nullable for f in got.fields] == [nl for _, _, nl in FLOWS_EXPECTED]
    assert got["protocol"].metadata["comment"] == FLOWS.column("protocol").description


def test_spark_type_rejects_unmapped_types() -> None:
    pytest.importorskip("pyspark")
    with pytest.raises(TypeError, match="no Spark mapping"):
        S.spark_type(pa.duration("s"))
    T = pytest.importorskip("pyspark.sql.types")
    assert S.spark_type(pa.timestamp("us")) == T.TimestampNTZType()
    assert S.spark_type(pa.uint64()) == T.DecimalType(20, 0)


def test_importing_msgcap_does_not_load_spark() -> None:
    code = (
        "import sys; import dissectors.schema, dissectors.core_tables, analyzer.sink, "
        "analyzer.manifest, analyzer.docs; "
        "from dissectors.core_tables import FLOWS; import dissectors.schema as s; "
        "s.arrow_schema(FLOWS); "
        "assert not [m for m in sys.modules if m.startswith('pyspark')], 'pyspark loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ------------------------------------------------------------------------- validator


def _good_batch() -> pa.RecordBatch:
    return rows_to_batch(ALL_TYPES, [_all_types_row(i) for i in range(5)])


def test_validator_accepts_a_conforming_batch_and_table() -> None:
    b = _good_batch()
    validate_batch(ALL_TYPES, b)
    validate_batch(ALL_TYPES, pa.Table.from_batches([b, b]))
    # nullability flags of the batch's own schema do not matter, only the data
    relaxed = pa.RecordBatch.from_arrays(b.columns, names=b.schema.names)
    validate_batch(ALL_TYPES, relaxed)


def test_validator_rejects_wrong_type() -> None:
    b = _good_batch()
    cols = b.columns
    cols[1] = pa.array([1, 2, 3, 4, 5], pa.int64())  # i32 declared int32
    bad = pa.RecordBatch.from_arrays(cols, names=b.schema.names)
    with pytest.raises(SchemaError) as e:
        validate_batch(ALL_TYPES, bad)
    assert (e.value.table, e.value.column) == ("all_types", "i32")
    assert str(e.value) == "table 'all_types', column 'i32': type is int64, declared int32"


def test_validator_rejects_timestamp_of_another_unit_or_zone() -> None:
    b = _good_batch()
    for wrong in (pa.timestamp("ns", tz="UTC"), pa.timestamp("us")):
        cols = b.columns
        cols[6] = b.column(6).cast(wrong, safe=False)
        bad = pa.RecordBatch.from_arrays(cols, names=b.schema.names)
        with pytest.raises(SchemaError, match="column 'ts': type is timestamp"):
            validate_batch(ALL_TYPES, bad)


def test_validator_rejects_wrong_order() -> None:
    b = _good_batch()
    names = b.schema.names
    order = [1, 0] + list(range(2, len(names)))
    bad = pa.RecordBatch.from_arrays([b.column(i) for i in order], names=[names[i] for i in order])
    with pytest.raises(SchemaError) as e:
        validate_batch(ALL_TYPES, bad)
    assert e.value.column == "i32"
    assert "wrong order: position 0 holds 'i32', declared 's'" in str(e.value)


def test_validator_rejects_null_in_non_nullable_column() -> None:
    rows = [_all_types_row(i) for i in range(4)]
    rows[2]["i64"] = None
    b = rows_to_batch(ALL_TYPES, rows)  # conversion itself does not check nullability
    with pytest.raises(SchemaError) as e:
        validate_batch(ALL_TYPES, b)
    assert e.value.column == "i64"
    assert "declared non-nullable but holds 1 null(s) (first at row 2)" in str(e.value)


def test_validator_rejects_missing_and_extra_columns() -> None:
    b = _good_batch()
    missing = b.drop_columns(["f64"])
    with pytest.raises(SchemaError) as e:
        validate_batch(ALL_TYPES, missing)
    assert e.value.column == "f64"
    assert "missing column (expected at position 5)" in str(e.value)

    short = b.drop_columns(["hdrs"])
    with pytest.raises(SchemaError, match="column 'hdrs': missing column"):
        validate_batch(ALL_TYPES, short)

    extra = b.append_column("zzz", pa.array([0] * 5))
    with pytest.raises(SchemaError, match="column 'zzz': unexpected column at position 10"):
        validate_batch(ALL_TYPES, extra)

    renamed = b.rename_columns(["s", "i32x"] + b.schema.names[2:])
    with pytest.raises(SchemaError, match="column 'i32': missing column"):
        validate_batch(ALL_TYPES, renamed)


# --------------------------------------------------------------------- rows_to_batch


def test_rows_to_batch_orders_columns_and_fills_missing_with_null() -> None:
    rows = [
        dict(reversed(list(_all_types_row(1).items()))),  # key order must not matter
        {"s": "only", "i64": 7},
    ]
    b = rows_to_batch(ALL_TYPES, rows)
    assert b.schema.equals(arrow_schema(ALL_TYPES), check_metadata=True)
    got = b.to_pylist()
    assert list(got[0]) == ALL_TYPES.column_names
    # ints are nanoseconds: exact in ``ts_ns``, rounded down to the microsecond in ``ts``
    assert got[0]["ts_ns"] == 1_700_000_000_123_456_790
    assert b.column("ts").cast(pa.int64())[0].as_py() == 1_700_000_000_123_456
    assert got[0]["hdrs"] == [("k", "1")]
    assert got[1] == {n: None for n in ALL_TYPES.column_names} | {"s": "only", "i64": 7}


def test_rows_to_batch_empty() -> None:
    b = rows_to_batch(ALL_TYPES, [])
    assert b.num_rows == 0
    validate_batch(ALL_TYPES, b)


def test_rows_to_batch_columns_no_row_sets_are_plain_nulls() -> None:
    # (a column no row sets is a slice of a kept null column: equal to n converted Nones)
    b = rows_to_batch(ALL_TYPES, [{"s": "a"}, {"i64": 2}, {}])
    for f, col in zip(ALL_TYPES.columns, b.columns, strict=True):
        if f.name in ("s", "i64"):
            continue
        assert col.type == f.type and col.null_count == 3, f.name
        assert col.equals(pa.array([None] * 3, type=f.type)), f.name
    # an undeclared key (allowed unchecked) changes nothing; checked, the first in row order
    # is named
    assert rows_to_batch(ALL_TYPES, [{"s": "a", "zz": 1}], check_keys=False).equals(
        rows_to_batch(ALL_TYPES, [{"s": "a"}]))
    with pytest.raises(SchemaError, match="column 'zy': row has a key"):
        rows_to_batch(ALL_TYPES, [{"s": "a"}, {"zy": 1, "i64": 1, "zx": 2}, {"zw": 0}])


def test_rows_to_batch_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(SchemaError, match="column 'i3': row has a key that is not a declared"):
        rows_to_batch(ALL_TYPES, [_all_types_row(), {"s": "x", "i64": 1, "i3": 5}])
    # unchecked on request (the sinks always check: analyzer.sink module docstring)
    rows_to_batch(ALL_TYPES, [{"s": "x", "i64": 1, "i3": 5}], check_keys=False)
    with pytest.raises(SchemaError, match="column 'i32': cannot convert values to int32"):
        rows_to_batch(ALL_TYPES, [{"s": "x", "i64": 1, "i32": "seven"}])
    with pytest.raises(SchemaError, match="column 'i32': cannot convert"):
        rows_to_batch(ALL_TYPES, [{"s": "x", "i64": 1, "i32": 2**40}])


# ------------------------------------------- rows_to_batch: the C transposition (_rows)


@functools.cache
def _types_of_every_table() -> tuple[pa.DataType, ...]:
    seen: dict[str, pa.DataType] = {}
    for spec in load_all_tables():
        for f in spec.columns:
            if f.exact_of is None:
                seen.setdefault(str(f.type), f.type)
    return tuple(seen.values())


_SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc80x"])
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False),
    st.text(max_size=4), _SURROGATES, st.binary(max_size=4),
)
# values of every shape the tables' columns take (lists, structs, maps as pair lists and
# dicts), right and wrong: both ways convert each column with the same ``pa.array``
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(st.tuples(st.one_of(st.text(max_size=3), _SURROGATES), inner), max_size=3),
        st.dictionaries(st.sampled_from(["ledger_id", "entry_id", "partition", "zz"]), inner,
                        max_size=3),
    ),
    max_leaves=6,
)


def _good(t: pa.DataType) -> st.SearchStrategy:
    """Values of Arrow type ``t`` as decoders give them (None where Arrow allows one)."""
    if pa.types.is_string(t):
        return st.one_of(st.text(max_size=4), _SURROGATES)
    if pa.types.is_binary(t):
        return st.binary(max_size=4)
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        return st.integers(-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
    if pa.types.is_timestamp(t):
        return st.integers(-(2**63), 2**63 - 1)
    if pa.types.is_map(t):
        pair = st.tuples(_good(t.key_type), st.one_of(st.none(), _good(t.item_type)))
        return st.one_of(st.lists(pair, max_size=3),
                         st.dictionaries(_good(t.key_type), _good(t.item_type), max_size=3))
    if pa.types.is_list(t):
        return st.lists(st.one_of(st.none(), _good(t.value_type)), max_size=3)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({}, optional={f.name: st.one_of(st.none(), _good(f.type))
                                                   for f in t})
    raise AssertionError(f"no values for {t}: add them here")


def _reference_batch(spec: TableSpec, rows: list, check_keys: bool) -> object:
    """``rows_to_batch`` with the Python transposition (the definition), or its error."""
    keep, S._rows = S._rows, None
    try:
        return rows_to_batch(spec, rows, check_keys=check_keys)
    except SchemaError as e:
        return (e.table, e.column, e.issue)
    finally:
        S._rows = keep


def test_rows_extension_is_built() -> None:
    assert S._rows is not None, "dissectors._rows not built: python setup.py build_ext"


@given(st.data())
@settings(max_examples=60)
def test_rows_to_batch_in_c_matches_the_python_loop(data: st.DataObject) -> None:
    """Differential: rows_to_batch with ``dissectors._rows`` vs the Python loop, over a
    column of every type the tables use (a timestamp and its ``_ns`` twin included), rows
    with missing, None, undeclared and wrong-typed values, lone surrogates and ints out of
    range: the same batch, or the same ``SchemaError`` (table, column, issue)."""
    types = _types_of_every_table()
    spec = TableSpec("rows_c_test", 1, "d",
                     tuple(Field(f"c{i}", t, str(t)) for i, t in enumerate(types)),
                     envelope=False)
    # the declared columns, an undeclared key and a timestamp's ``_ns`` twin (ignored)
    names = [f.name for f in spec.columns] + ["zz"]

    wrong = data.draw(st.booleans())  # values of any shape, or each column's own

    def value(name: str) -> st.SearchStrategy:
        t = spec.column(name).type if name != "zz" else None
        if t is not None and not wrong:
            return st.one_of(st.none(), _good(t))
        if t is not None and pa.types.is_map(t):
            # (not a None entry in a map's list: pyarrow 26 aborts the process on
            # ``pa.array([[None]], map_(string(), string()))``, whichever way)
            return _VALUES.filter(lambda v: not (isinstance(v, list) and None in v))
        return _VALUES

    rows = data.draw(st.lists(
        st.lists(st.sampled_from(names), unique=True, max_size=8).flatmap(
            lambda keys: st.fixed_dictionaries({k: value(k) for k in keys})),
        max_size=6))
    check_keys = data.draw(st.booleans())
    want = _reference_batch(spec, rows, check_keys)
    for given_rows in (rows, tuple(rows)):
        try:
            got: object = rows_to_batch(spec, given_rows, check_keys=check_keys)
        except SchemaError as e:
            got = (e.table, e.column, e.issue)
        if isinstance(want, pa.RecordBatch):
            assert isinstance(got, pa.RecordBatch) and got.equals(want)
            assert got.schema.equals(want.schema, check_metadata=True)
        else:
            assert got == want


class _Key(str):
    """A str subclass (its own __eq__/__hash__ could run Python: the C walk declines)."""


@given(st.lists(st.dictionaries(
    st.one_of(st.sampled_from(["a", "b", "c", "d"]), st.text(max_size=2)),
    st.one_of(st.none(), st.integers(), st.text(max_size=2)), max_size=5), max_size=8))
@settings(max_examples=50)
def test_rows_columns_in_c_match_the_python_loop(rows: list[dict]) -> None:
    """``_rows.columns`` gives the reference's lists (the very value objects, in place),
    keys in first-seen order; it declines (None) what only the loop may take."""
    keys, lists = S._rows.columns(rows)
    want = S._columns_py(rows, len(rows))
    assert keys == list(dict.fromkeys(k for r in rows for k in r))
    assert dict(zip(keys, lists, strict=True)).keys() == want.keys()
    for k, got in zip(keys, lists, strict=True):
        assert len(got) == len(rows) and all(a is b for a, b in zip(got, want[k], strict=True))
    declined = [
        [*rows, {_Key("a"): 1}],  # a str subclass key
        [*rows, {1: 2}],  # a key that is not a str
        [*rows, types.MappingProxyType({"a": 1})],  # a Mapping that is not a dict
        [*rows, collections.OrderedDict(a=1)],  # a dict subclass
    ]
    for other in declined:
        assert S._rows.columns(other) is None
        assert S._columns(other, len(other)) == S._columns_py(other, len(other))
    assert S._rows.columns(iter(rows)) is None  # neither a list nor a tuple


def test_rows_columns_in_c_past_the_guessed_positions() -> None:
    # rows of more keys than the walk remembers positions of (_rows.c GUESSES), in
    # different orders, and one key set by few rows
    wide = [{f"k{j}": (i, j) for j in range(300)} for i in range(3)]
    wide[1] = dict(reversed(list(wide[1].items())))
    wide.append({"k299": "x", "lone": None})
    keys, lists = S._rows.columns(wide)
    assert dict(zip(keys, lists, strict=True)) == S._columns_py(wide, len(wide))


_TYPED = TableSpec("rows_typed_test", 1, "d", (
    Field("i64", pa.int64(), "d"), Field("i32", pa.int32(), "d"), Field("b", pa.bool_(), "d"),
    Field("s", pa.string(), "d"), Field("bin", pa.binary(), "d"), Field("ts", TS, "d"),
    Field("l", pa.list_(pa.string()), "d")), envelope=False)


@given(st.data())
@settings(max_examples=40)
def test_typed_columns_over_many_rows(data: st.DataObject) -> None:
    """``_rows.typed`` (the values straight into Arrow buffers) past one byte of validity
    bitmap: rows of good values with keys missing at random (nulls between values, the
    strings' offsets across them) and a timestamp's ``_ns`` twin set (ignored): the
    reference's batch."""
    names = [f.name for f in _TYPED.columns]

    def good(name: str) -> st.SearchStrategy:  # (no lone surrogate: the C builder declines)
        return st.text(max_size=4) if name == "s" else _good(_TYPED.column(name).type)

    rows = data.draw(st.lists(
        st.lists(st.sampled_from(names), unique=True).flatmap(
            lambda keys: st.fixed_dictionaries({k: st.one_of(st.none(), good(k))
                                                for k in keys})),
        min_size=1, max_size=70))
    assert S._rows.typed(rows, _TYPED._index, S.typed_kinds(_TYPED)) is not None
    got = rows_to_batch(_TYPED, rows)
    want = _reference_batch(_TYPED, rows, True)
    assert isinstance(want, pa.RecordBatch) and got.equals(want)


@pytest.mark.parametrize("row", [
    {"i64": 1.0}, {"i64": True}, {"i64": 2**63}, {"i64": -(2**63) - 1}, {"i32": 2**31},
    {"i32": -(2**31) - 1}, {"b": 1}, {"s": b"x"}, {"s": "\ud800"}, {"bin": "x"},
    {"bin": bytearray(b"x")}, {"ts": 1.5}, {"zz": 1}, {_Key("i64"): 1}, {1: 1},
])
def test_typed_columns_decline_what_only_arrow_may_judge(row: dict) -> None:
    """What the C builder does not take exactly as Arrow would, it leaves to ``pa.array``
    (None): a row with it gives the reference's batch or ``SchemaError`` either way."""
    rows = [{"i64": 5, "s": "a"}, row]
    assert S._rows.typed(rows, _TYPED._index, S.typed_kinds(_TYPED)) is None
    for check_keys in (True, False):
        try:
            got: object = rows_to_batch(_TYPED, rows, check_keys=check_keys)
        except SchemaError as e:
            got = (e.table, e.column, e.issue)
        want = _reference_batch(_TYPED, rows, check_keys)
        assert got.equals(want) if isinstance(want, pa.RecordBatch) else got == want
    edges = [{"i64": 2**63 - 1, "i32": -(2**31), "ts": -(2**63)}, {"i32": 2**31 - 1}]
    assert S._rows.typed(edges, _TYPED._index, S.typed_kinds(_TYPED)) is not None
    assert rows_to_batch(_TYPED, edges).equals(_reference_batch(_TYPED, edges, True))


# -------------------------------------------------------------------------- registry


def test_registry_register_get_and_conflicts() -> None:
    cols = (Field("a", pa.int64(), "x"),)
    spec = TableSpec("zz_registry_test", 1, "d", cols, envelope=False)
    try:
        assert register_table(spec) is spec
        assert register_table(spec) is spec  # idempotent
        same = TableSpec("zz_registry_test", 1, "d", cols, envelope=False)
        assert register_table(same) is spec  # equal declaration: the first one stays
        other = TableSpec("zz_registry_test", 2, "d", cols, envelope=False)
        with pytest.raises(ValueError, match="already registered"):
            register_table(other)
        assert get_table("zz_registry_test") is spec
        names = [s.name for s in all_tables()]
        assert names == sorted(names)
    finally:
        unregister_table("zz_registry_test")
    with pytest.raises(KeyError, match="no table 'zz_registry_test' registered"):
        get_table("zz_registry_test")


def test_load_all_tables_finds_core_and_entry_point_tables() -> None:
    names = {s.name for s in load_all_tables()}
    assert {"flows", "anomalies", "nats"} <= names


# ------------------------------------------------------------------- docs/tables.md


def test_docs_tables_md_is_up_to_date() -> None:
    committed = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    fresh = docs.render_tables_md(load_all_tables())
    assert committed == fresh, "docs/tables.md is stale: python -m analyzer.docs --write"


def test_render_tables_md_lists_every_column() -> None:
    text = docs.render_tables_md([PROTO, FLOWS, ANOMALIES, ALL_TYPES])
    # core tables first, then by name
    order = [text.index(f"\n## {n}\n") for n in ("flows", "anomalies", "all_types", "proto_test")]
    assert order == sorted(order)
    assert "Version 3. Test table with every type." in text
    assert "| `vlan` | `list<int32>` | no | " in text
    assert "| `ts_first` | `timestamp[us, UTC]` | no | Capture time of the flow's first" in text
    assert "| `ts_first_ns` | `int64` | no | Exact value of `ts_first`" in text
    assert "| `hdrs` | `map<string, string>` | yes | a map |" in text
    assert "| `protocol` | `string` | yes | Name of the dissector" in text
    assert "## Envelope" in text
    for f in [*FLOWS.columns, *ANOMALIES.columns, *ENVELOPE]:
        assert f"| `{f.name}` |" in text


def test_docs_cli_write_and_check(tmp_path, capsys) -> None:
    path = tmp_path / "tables.md"
    assert docs.main(["--check", str(path)]) == 1  # missing counts as stale
    assert docs.main(["--write", str(path)]) == 0
    assert docs.main(["--check", str(path)]) == 0
    path.write_text(path.read_text() + "edited\n")
    assert docs.main(["--check", str(path)]) == 1
    assert "stale" in capsys.readouterr().err

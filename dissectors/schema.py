"""Everything derived from a ``TableSpec``: Arrow schema, Spark schema, validator, batches.

Strategy: the declaration in ``dissectors.tables`` is the single source of truth; this
module only *derives*.  ``arrow_schema`` is cached per spec (specs are immutable), the
validator compares a batch against it column by column and reports the first problem
as a ``SchemaError`` naming table, column and issue, and ``rows_to_batch`` transposes
row dicts into one Python list per column so Arrow converts each column in one call.

Spark mapping notes (``spark_schema``):

* Timestamps are ``timestamp[us, UTC]`` (``dissectors.tables.TS``), which Spark's
  Parquet reader maps to ``TimestampType`` with default settings; the exact nanoseconds
  are the int64 ``<column>_ns`` beside each one (``LongType``).
* Spark reports every column of a Parquet file as nullable, whatever the file says;
  the declared nullability is still in ``spark_schema`` and enforced when writing.
* Descriptions travel as the ``comment`` metadata of each ``StructField`` (what
  ``DESCRIBE`` shows) and as ``description`` field metadata in Arrow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dissectors.arrowops import from_parts, nulls
from dissectors.tables import (
    TS,
    Field,
    TableSpec,
    all_tables,
    get_table,
    register_table,
    unregister_table,
)

try:  # row dicts transposed in C (``_columns``); optional like every extension (setup.py)
    from dissectors import _rows  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the extension was not built: the Python loop
    _rows = None

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import DataType as SparkDataType
    from pyspark.sql.types import StructType

__all__ = [
    "DESCRIPTION_KEY",
    "META_TABLE",
    "META_VERSION",
    "TYPED_BINARY",
    "SchemaError",
    "all_tables",
    "arrow_schema",
    "get_table",
    "load_all_tables",
    "register_table",
    "rows_to_batch",
    "spark_schema",
    "spark_type",
    "timestamp_from_ns",
    "typed_kind",
    "typed_kinds",
    "typed_tuples",
    "unregister_table",
    "validate_batch",
]

DESCRIPTION_KEY = b"description"
META_TABLE = b"msgcap.table"
META_VERSION = b"msgcap.table_version"

# Protocol table modules imported by ``load_all_tables``; missing ones are skipped.
# Placeholder until discovery through the ``msgcap.dissectors`` entry points is wired.
CORE_TABLE_MODULE = "dissectors.core_tables"


class SchemaError(ValueError):
    """A batch does not match its table declaration."""

    def __init__(self, table: str, column: str | None, issue: str) -> None:
        self.table = table
        self.column = column
        self.issue = issue
        where = f"table {table!r}" + (f", column {column!r}" if column is not None else "")
        super().__init__(f"{where}: {issue}")


# ------------------------------------------------------------------------------ Arrow


def _arrow_field(f: Field) -> pa.Field:
    return pa.field(f.name, f.type, nullable=f.nullable, metadata={DESCRIPTION_KEY: f.description})


@cache
def arrow_schema(spec: TableSpec) -> pa.Schema:
    """The Arrow schema of ``spec``: columns in declared order, descriptions as field
    metadata (``description``), table name and version as schema metadata."""
    return pa.schema(
        [_arrow_field(f) for f in spec.columns],
        metadata={META_TABLE: spec.name.encode(), META_VERSION: str(spec.version).encode()},
    )


# ------------------------------------------------------------------------------ Spark


def spark_type(t: pa.DataType) -> SparkDataType:
    """The Spark SQL type that Spark uses for a Parquet column written from Arrow type
    ``t`` (pyspark is imported here, not at module import)."""
    from pyspark.sql import types as T

    if pa.types.is_dictionary(t):
        return spark_type(t.value_type)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return T.StringType()
    if pa.types.is_boolean(t):
        return T.BooleanType()
    simple = {
        pa.int8(): T.ByteType,
        pa.int16(): T.ShortType,
        pa.int32(): T.IntegerType,
        pa.int64(): T.LongType,
        # unsigned: what Spark's Parquet reader makes of UINT_8/16/32
        pa.uint8(): T.ShortType,
        pa.uint16(): T.IntegerType,
        pa.uint32(): T.LongType,
        pa.float32(): T.FloatType,
        pa.float64(): T.DoubleType,
        pa.date32(): T.DateType,
    }
    if t in simple:
        return simple[t]()
    if t == pa.uint64():
        return T.DecimalType(20, 0)
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return T.BinaryType()
    if pa.types.is_timestamp(t):
        # TS is microseconds: exactly Spark's precision (nanoseconds: the ``_ns`` column)
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_map(t):
        return T.MapType(
            spark_type(t.key_type), spark_type(t.item_type), valueContainsNull=t.item_field.nullable
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(spark_type(t.value_type), containsNull=t.value_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(c.name, spark_type(c.type), c.nullable) for c in t])
    raise TypeError(f"no Spark mapping for Arrow type {t}")


def spark_schema(spec: TableSpec) -> StructType:
    """The Spark ``StructType`` of ``spec`` (declared nullability, descriptions as the
    ``comment`` metadata).  Imports pyspark lazily."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField(f.name, spark_type(f.type), f.nullable, {"comment": f.description})
            for f in spec.columns
        ]
    )


# -------------------------------------------------------------------------- validation


def validate_batch(spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
    """Raise ``SchemaError`` unless ``batch`` has exactly the declared columns, in order,
    with the declared types, and no nulls in non-nullable columns.

    Cost is per column, not per row (Arrow keeps null counts), so it stays on in
    production.  Metadata and the batch's own nullability flags are not compared.
    """
    expected = spec.columns
    got = batch.schema
    names = got.names
    if names != spec.column_names:
        declared = spec.column_names
        for i, f in enumerate(expected):
            if i >= len(names):
                raise SchemaError(spec.name, f.name, f"missing column (expected at position {i})")
            if names[i] != f.name:
                if f.name not in names:
                    raise SchemaError(
                        spec.name, f.name, f"missing column (expected at position {i})"
                    )
                if names[i] not in declared:
                    raise SchemaError(spec.name, names[i], f"unexpected column at position {i}")
                raise SchemaError(
                    spec.name,
                    names[i],
                    f"wrong order: position {i} holds {names[i]!r}, declared {f.name!r}",
                )
        extra = names[len(expected)]
        if extra in declared:
            raise SchemaError(spec.name, extra, "duplicate column")
        raise SchemaError(spec.name, extra, f"unexpected column at position {len(expected)}")
    for i, f in enumerate(expected):
        col = batch.column(i)
        if not col.type.equals(f.type):
            raise SchemaError(spec.name, f.name, f"type is {col.type}, declared {f.type}")
        if not f.nullable and col.null_count:
            first = _first_null(col)
            raise SchemaError(
                spec.name,
                f.name,
                f"declared non-nullable but holds {col.null_count} null(s) (first at row {first})",
            )


def _first_null(col: pa.Array | pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    return int(pc.index(pc.is_null(col), True).as_py())


# ------------------------------------------------------------------------------ build


def timestamp_from_ns(ns: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``TS`` values (UTC microseconds, rounded *down*, also before 1970) from int64
    nanoseconds since the epoch; nulls stay null.  The one conversion every writer uses,
    so a row's ``X`` and ``X_ns`` always agree."""
    import numpy as np

    if isinstance(ns, pa.ChunkedArray):
        ns = ns.combine_chunks()
    # from the buffers, validity shared: ``is_null``/``fill_null`` and ``pa.array`` over
    # numpy would import ``pyarrow.compute`` and ``numpy.ma`` (~0.1 s of every run)
    validity, data = ns.buffers()
    count = ns.offset + len(ns)
    values = np.frombuffer(data, np.int64, count) if data is not None and count else \
        np.zeros(count, np.int64)
    micros = values // 1000  # null slots hold whatever they held: still null
    return pa.Array.from_buffers(TS, len(ns), [validity, pa.py_buffer(micros)],
                                 null_count=ns.null_count, offset=ns.offset)


def rows_to_batch(
    spec: TableSpec, rows: Sequence[Mapping[str, Any]], *, check_keys: bool = True
) -> pa.RecordBatch:
    """Build a ``RecordBatch`` with ``arrow_schema(spec)`` from row dicts.

    Missing keys become null.  With ``check_keys`` a key that is not a declared column
    raises ``SchemaError`` (a typo would otherwise silently produce a null column).
    Timestamps are given as integer nanoseconds since the epoch under the timestamp
    column's name: that fills both the column (microseconds, rounded down) and its
    exact ``<name>_ns`` companion (which rows need not, and should not, set).  A value Arrow
    cannot convert to the column's type raises ``SchemaError``.  Nullability is not
    checked here: that is ``validate_batch``'s job.
    """
    schema = arrow_schema(spec)
    n = len(rows)
    # the simple columns straight into Arrow buffers in C (``_typed``); what it declines
    # is converted below, the definition
    typed = _typed(spec, rows)
    if typed is not None:
        return _from_typed(spec, schema, typed, n)
    # one list per key the rows set: a protocol row sets a fraction of its table's columns
    # (a NATS PING sets one, a STAN message ~13 of 69), so a column no row sets is a kept
    # null column (``arrowops.nulls``), not a conversion of n Nones.  (A list for every key
    # present, declared or not: the undeclared ones, allowed without ``check_keys``, are
    # never converted.)
    columns = _columns(rows, n)
    if check_keys and not columns.keys() <= spec._index.keys():
        _check_keys(spec, rows)  # raises, naming the first undeclared key
    arrays = []
    exact: dict[str, pa.Array] = {}  # timestamp column -> its int64 nanoseconds
    for f in spec.columns:
        name = f.name
        if f.exact_of is not None:
            arrays.append(exact[f.exact_of])
            continue
        values = columns.get(name)
        if pa.types.is_timestamp(f.type):
            ns = _converted(spec, f, values if values is not None else [None] * n, pa.int64())
            exact[name] = ns
            arrays.append(timestamp_from_ns(ns))
        elif values is None:
            arrays.append(nulls(f.type, n))
        else:
            arrays.append(_converted(spec, f, values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _converted(spec: TableSpec, f: Field, values: list[Any], type: pa.DataType) -> pa.Array:
    """``pa.array(values, type)``, lone surrogates replaced; what Arrow cannot convert
    raises ``SchemaError`` naming the column."""
    try:
        try:
            return pa.array(values, type=type)
        except UnicodeEncodeError:
            return pa.array(_without_surrogates(values), type=type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise SchemaError(spec.name, f.name, f"cannot convert values to {f.type}: {e}") from e


# ``dissectors._rows.typed``'s column kinds (see _rows.c); the simple ones (up to
# ``TYPED_BINARY``) are also those of the Pulsar fast path's ``repeat_values``
TYPED_INT64, TYPED_INT32, TYPED_BOOL, TYPED_STRING, TYPED_BINARY, TYPED_OBJECT, \
    TYPED_IGNORE = range(7)
_KIND_OF = {pa.int64(): TYPED_INT64, pa.int32(): TYPED_INT32, pa.bool_(): TYPED_BOOL,
            pa.string(): TYPED_STRING, pa.binary(): TYPED_BINARY}
# ``_rows.typed_tuples`` (None: the extension is not built)
typed_tuples: Callable[[Sequence[tuple[Any, ...]], int, bytes], list[Any] | None] | None = \
    None if _rows is None else _rows.typed_tuples


def typed_kind(type: pa.DataType) -> int:
    """What ``dissectors._rows.typed`` makes of a column of Arrow ``type``: timestamps
    are int64 nanoseconds, a type it has no builder for stays Python objects."""
    return TYPED_INT64 if pa.types.is_timestamp(type) else _KIND_OF.get(type, TYPED_OBJECT)


@cache
def typed_kinds(spec: TableSpec) -> bytes:
    """``typed_kind`` of each column of ``spec``; an exact ``_ns`` twin is ignored
    (``rows_to_batch`` fills it from its timestamp)."""
    return bytes(TYPED_IGNORE if f.exact_of is not None else typed_kind(f.type)
                 for f in spec.columns)


def _typed(spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> list[Any] | None:
    """``dissectors._rows.typed`` of the rows (None: the reference converts them)."""
    if _rows is None or not rows:
        return None
    return _rows.typed(rows, spec._index, typed_kinds(spec))  # type: ignore[no-any-return]


def _from_typed(spec: TableSpec, schema: pa.Schema, parts: list[Any], n: int
                ) -> pa.RecordBatch:
    """The batch of ``_typed``'s columns: what the reference makes of the same rows."""
    arrays = []
    exact: dict[str, pa.Array] = {}
    for f, part in zip(spec.columns, parts, strict=True):
        if f.exact_of is not None:
            arrays.append(exact[f.exact_of])
        elif pa.types.is_timestamp(f.type):
            ns = exact[f.name] = nulls(pa.int64(), n) if part is None else \
                from_parts(pa.int64(), n, part)
            arrays.append(timestamp_from_ns(ns))
        elif part is None:
            arrays.append(nulls(f.type, n))
        elif type(part) is list:
            arrays.append(_converted(spec, f, part, f.type))
        else:
            arrays.append(from_parts(f.type, n, part))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _columns(rows: Sequence[Mapping[str, Any]], n: int) -> dict[str, list[Any]]:
    """Each key the ``n`` rows set -> the list of its values, row i's at i, None where a
    row lacks it.  In C (``dissectors._rows``: a Python step per row item was ~190
    bytecodes per STAN row) for a list or tuple of plain dicts with str keys; the loop
    below is the reference, and runs for anything else or without the extension."""
    got = _rows.columns(rows) if _rows is not None else None
    if got is not None:
        return dict(zip(*got, strict=True))
    return _columns_py(rows, n)


def _columns_py(rows: Sequence[Mapping[str, Any]], n: int) -> dict[str, list[Any]]:
    """``_columns`` in Python: the definition (``present``: one C-level union)."""
    present = set().union(*rows)
    columns: dict[str, list[Any]] = {k: [None] * n for k in present}
    for i, r in enumerate(rows):
        for k, v in r.items():
            columns[k][i] = v
    return columns


def _without_surrogates(value: object) -> object:
    """``value`` with lone surrogates in its strings replaced by U+FFFD.  Why: a JSON
    ``"\\ud800"`` escape (and invalid UTF-8 read by ``json.loads``, which decodes bytes
    with ``surrogatepass``, as nats-server's Go decoder accepts it) gives a Python string
    that UTF-8, and so Arrow, cannot encode; a row must never fail on what a peer sent."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return value
    if isinstance(value, list | tuple):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_surrogates(v) for k, v in value.items()}
    return value


def _check_keys(spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise ``SchemaError`` naming the first key of ``rows`` (in row order) that is not
    a declared column (``rows_to_batch`` asks only once its union of keys showed one)."""
    known = spec._index
    for r in rows:
        for k in r:
            if k not in known:
                raise SchemaError(spec.name, k, "row has a key that is not a declared column")


# --------------------------------------------------------------------------- registry


def load_all_tables(*, plugins: bool = False) -> tuple[TableSpec, ...]:
    """The core tables plus the tables of the dissectors msgcap ships (entry points of
    the ``msgcap`` distribution), registered, sorted by name.  With ``plugins``, the tables
    of third-party plugins installed under the same entry points are included too.

    Only these are returned, not everything ever registered in this process: what
    ``docs/tables.md`` shows must not depend on which plugins happen to be installed or
    which modules earlier code (tests) imported."""
    from dissectors.registry import OWN_DISTRIBUTION, discover  # it imports this module

    core = importlib.import_module(CORE_TABLE_MODULE)
    reg = discover()
    core_specs = (getattr(core, n) for n in core.__all__)
    specs = {s.name: s for s in core_specs if isinstance(s, TableSpec)}
    for spec in reg.tables(None if plugins else OWN_DISTRIBUTION):
        specs.setdefault(spec.name, register_table(spec))
    return tuple(specs[n] for n in sorted(specs))

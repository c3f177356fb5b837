"""Table declarations: every output table is declared once, here or next to its dissector.

Strategy: a ``TableSpec`` is plain data (name, version, ordered fields with an Arrow type
and a description).  The Arrow schema, the Spark ``StructType``, ``docs/tables.md`` and
the batch validator are all *derived* from it (``dissectors.schema``), so they cannot
drift apart.  Every protocol table begins with the same envelope columns (DESIGN §5) so
any row leads back to its capture, flow, frames and stream offsets.

The registry (``register_table`` / ``get_table`` / ``all_tables``) lives here, next to
the declarations, so a protocol's table module only needs this module (or
``dissectors.api``) to declare and register its tables at import.  The registry never
imports protocol packages itself; discovery is the pipeline's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

__all__ = [
    "DELTA",
    "ENVELOPE",
    "ENVELOPE_NAMES",
    "NS_SUFFIX",
    "PARTITION_KEY",
    "TS",
    "Field",
    "TableSpec",
    "all_tables",
    "exact_ns_field",
    "get_table",
    "register_table",
    "unregister_table",
]

TS = pa.timestamp("us", tz="UTC")
"""Type of every timestamp column: UTC microseconds, the Parquet ``TIMESTAMP(MICROS)`` that
plain ``spark.read.parquet`` reads with default settings (Spark cannot read ``NANOS``).
Each timestamp column ``X`` is followed by its exact value ``X_ns`` (int64 nanoseconds
since the epoch), added by ``TableSpec`` itself; rows give ``X`` as integer nanoseconds
and ``dissectors.schema.rows_to_batch`` fills both."""

NS_SUFFIX = "_ns"

PARTITION_KEY = "capture"
"""Hive partition key of the Parquet dataset (``OUT/<table>/capture=<capture_id>/``).

Reserved: no table may declare a column with this name, or readers that add the
partition column would see two columns of the same name.
"""

DELTA = "DELTA_BINARY_PACKED"
"""``Field.encoding`` of ordered integers (record ids, offsets, frames, times): Parquet
stores the differences between neighbours, which are small there; measured in
docs/performance.md, "Parquet settings" (the envelope's such columns: -9 % of a NATS
table's bytes)."""

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: pa.DataType
    description: str
    nullable: bool = True
    # for an ``X_ns`` column added by ``TableSpec``: ``X``, the timestamp it makes exact
    exact_of: str | None = None
    # Parquet encoding instead of the dictionary (``DELTA``), for columns whose values are
    # nearly all distinct and ordered; storage only, never content (analyzer.sink)
    encoding: str | None = None


def exact_ns_field(f: Field) -> Field:
    """The ``<name>_ns`` companion of timestamp column ``f``: why two columns: Spark keeps
    microseconds, the capture has nanoseconds, and a forensic tool must not round."""
    return Field(
        f.name + NS_SUFFIX,
        pa.int64(),
        f"Exact value of `{f.name}`: nanoseconds since the Unix epoch (`{f.name}` itself is "
        "rounded down to the microsecond).",
        f.nullable,
        exact_of=f.name,
        encoding=f.encoding,
    )


def _with_exact_ns(fields: tuple[Field, ...]) -> tuple[Field, ...]:
    out: list[Field] = []
    for f in fields:
        if f.exact_of is not None:
            continue  # a companion given back (a spec rebuilt from ``columns``): re-derived
        out.append(f)
        if pa.types.is_timestamp(f.type):
            out.append(exact_ns_field(f))
    return tuple(out)


def _check_column(table: str, f: Field) -> None:
    """``ValueError`` / ``TypeError`` unless ``f`` may be a column of ``table``."""
    if not isinstance(f, Field) or not isinstance(f.type, pa.DataType):
        raise TypeError(f"table {table}: {f!r} is not a Field with an Arrow type")
    if not _NAME_RE.match(f.name):
        raise ValueError(f"table {table}: column {f.name!r} must match [a-z][a-z0-9_]*")
    if pa.types.is_timestamp(f.type) and f.type != TS:
        raise ValueError(
            f"table {table}: column {f.name} must use the timestamp type TS "
            f"(timestamp[us, UTC]), not {f.type}"
        )
    if f.name == PARTITION_KEY:
        raise ValueError(
            f"table {table}: column name {PARTITION_KEY!r} is reserved "
            "for the dataset partition key"
        )
    if not f.description.strip():
        raise ValueError(f"table {table}: column {f.name} has no description")


@dataclass(frozen=True, slots=True)
class TableSpec:
    name: str
    version: int
    description: str
    fields: tuple[Field, ...]
    # protocol tables get the envelope prepended; flows/anomalies declare their own
    envelope: bool = True
    _all: tuple[Field, ...] = field(init=False, repr=False, compare=False)
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"table name {self.name!r} must match [a-z][a-z0-9_]*")
        if not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"table {self.name}: version must be an int >= 1")
        # the envelope is checked once, below its declaration: only the table's own
        # columns are checked here (~25 specs a run, each with the envelope's 22)
        own = _with_exact_ns(tuple(self.fields))
        cols = (ENVELOPE + own) if self.envelope else own
        if not cols:
            raise ValueError(f"table {self.name}: no columns")
        names = [f.name for f in cols]
        if len(set(names)) != len(names):
            dupes = {n for n in names if names.count(n) > 1}
            raise ValueError(f"table {self.name}: duplicate columns {sorted(dupes)}")
        for f in own:
            _check_column(self.name, f)
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "_all", cols)
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})

    def __hash__(self) -> int:
        # equal specs have equal names, versions and column counts; hashing every
        # column instead (each Arrow type hashes its text) cost ~50 us a call, and the
        # writer looks its tables up by spec dozens of times a run
        return hash((self.name, self.version, self.envelope, len(self._all)))

    @property
    def columns(self) -> tuple[Field, ...]:
        """All columns in order, envelope first."""
        return self._all

    @property
    def column_names(self) -> list[str]:
        return [f.name for f in self._all]

    def column(self, name: str) -> Field:
        """The declared column ``name`` (``KeyError`` if the table has none)."""
        try:
            return self._all[self._index[name]]
        except KeyError:
            raise KeyError(f"table {self.name} has no column {name!r}") from None


ENVELOPE: tuple[Field, ...] = _with_exact_ns((
    Field(
        "capture_id", pa.string(),
        "Id of the capture file (first 16 hex digits of its SHA-256).", False,
    ),
    Field(
        "flow_id", pa.int64(),
        "Flow id, stable within a capture; joins to `flows.flow_id`.", False,
    ),
    Field(
        "record_id", pa.int64(),
        "Row id, unique within a capture across all tables, in emission order.", False,
        encoding=DELTA,
    ),
    Field(
        "parent_record_id", pa.int64(),
        "For rows decoded from inside another row's payload: that row's `record_id`.",
    ),
    Field("direction", pa.string(), "`c2s` (client to server) or `s2c`.", False),
    Field(
        "stream_id",
        pa.int64(),
        "QUIC stream id the row's bytes came from (its low two bits give the kind: 0 "
        "client-opened bidi, 1 server bidi, 2 client uni, 3 server uni); null for TCP.",
    ),
    Field("src_ip", pa.string(), "Source address of the bytes of this row."),
    Field("src_port", pa.int32(), "Source port."),
    Field("dst_ip", pa.string(), "Destination address."),
    Field("dst_port", pa.int32(), "Destination port."),
    Field("ts_first", TS, "Capture time of the packet carrying the row's first byte (UTC).",
          encoding=DELTA),
    Field("ts_last", TS, "Capture time of the packet carrying the row's last byte (UTC).",
          encoding=DELTA),
    Field(
        "offset_start", pa.int64(),
        "Stream offset of the first byte (inclusive) in this direction.", encoding=DELTA,
    ),
    Field("offset_end", pa.int64(), "Stream offset one past the last byte (exclusive).",
          encoding=DELTA),
    Field("frame_first", pa.int64(), "Capture frame number (1-based) carrying the first byte.",
          encoding=DELTA),
    Field("frame_last", pa.int64(), "Capture frame number carrying the last byte.",
          encoding=DELTA),
))

ENVELOPE_NAMES = frozenset(f.name for f in ENVELOPE)
for _f in ENVELOPE:
    _check_column("envelope", _f)
del _f


# --------------------------------------------------------------------------- registry

_REGISTRY: dict[str, TableSpec] = {}


def register_table(spec: TableSpec) -> TableSpec:
    """Register ``spec`` under its name and return it (so ``X = register_table(...)``).

    Registering an equal spec again is a no-op returning the spec registered first
    (modules may be re-imported); a *different* spec under a taken name raises
    ``ValueError``.
    """
    if not isinstance(spec, TableSpec):
        raise TypeError(f"register_table expects a TableSpec, got {type(spec).__name__}")
    old = _REGISTRY.get(spec.name)
    if old is not None:
        if old != spec:
            raise ValueError(
                f"table {spec.name!r} is already registered with a different declaration"
            )
        return old
    _REGISTRY[spec.name] = spec
    return spec


def unregister_table(name: str) -> None:
    """Remove a table from the registry (tests, plugin reloads).  Missing names are ignored."""
    _REGISTRY.pop(name, None)


def get_table(name: str) -> TableSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"no table {name!r} registered (registered: {known})") from None


def all_tables() -> tuple[TableSpec, ...]:
    """Every registered table, sorted by name (deterministic)."""
    return tuple(_REGISTRY[n] for n in sorted(_REGISTRY))

"""Payload rows as columns: the rows STAN and Liftbridge decode, handed to the conveyor
as ``dissectors.api.ColumnBatch`` records instead of ``Record`` dict rows (issue 22).

Why: once the compiled NATS scan took carried PUB/MSG (it offers them itself), a STAN or
Liftbridge message still cost a ``Record``, its trip through the conveyor's record walk
(``_collect``: an envelope dict of 16 keys, the values copied into it, a list per table
per event) and the sink's per-row conversion (``rows_to_batch`` over ~40 keys a row).
Here the decode's values dict itself waits, with the message's provenance, in a
``ColumnBatch`` of one row; the conveyor gives it its record id and envelope through
``move`` where the ``Record`` would have had them, and ``PayloadRows.to_batch`` turns
16,384 of them into one Arrow batch: the values with the reference's own conversion
(``rows_to_batch``), the envelope built column by column, no dict per row.

What stays the definition: the decode.  The values are the dict the ``Record`` would
carry, so only the way to Arrow differs; a message whose decode reports an anomaly goes
out as ``Record``s, as before.  Child rows (a ReplicationResponse's entries) stay
``Record``s, the ``ColumnBatch``'s ``children``, which the conveyor ids and parents
after the row exactly as a ``Record``'s children (so the row itself need not wait as a
dict row among the accumulator's rows, which cost an interleave at every flush).  Used
only when the run's sink takes Arrow batches (the session option ``columnar``, which the
pipeline sets), for STAN and Liftbridge unless ``MSGCAP_PAYLOAD_COLUMNS`` says otherwise
(``0``: neither; the switch for A/B runs; ``enabled``).

A session's own top-level rows may take the same way (``RowsFormat(spec,
carried=False).record_of``: Pulsar's command rows, one per frame), with no parent.

Parent: a payload row's parent is the carrier's row, and the conveyor numbers a row's
children right after it, so ``parent_record_id`` is the row's own record id minus one
(as the Pulsar fast path's message rows) when the payload row is the first record the
dispatcher returns.  The one case where it is not: a probe of another payload dissector
raised in this scope, and the dispatcher put its anomaly first; ``rows_for`` then
answers None for good in that scope (``ScopeDispatcher.probe_failed`` only grows).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from operator import itemgetter
from types import MethodType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from dissectors.api import Bindings, CarriedMessage, ColumnBatch, Direction, Record
from dissectors.arrowops import fixed_width_strings, from_numpy, from_parts, nulls, repeated_bytes
from dissectors.options import SessionOptions
from dissectors.proto.walk import compiled_column_row, compiled_move_row
from dissectors.schema import rows_to_batch, timestamp_from_ns, typed_kind, typed_tuples
from dissectors.tables import ENVELOPE, NS_SUFFIX, TableSpec
from reassembly.events import DIRECTION_SHORT

__all__ = ["CONVERT_ROWS", "DEFAULT", "SWITCH", "PayloadRows", "RowsFormat", "enabled", "rows_for"]

SWITCH = "MSGCAP_PAYLOAD_COLUMNS"
# On unless the switch says otherwise.  Liftbridge was left out when, on
# bench_liftbridge's 20 MB capture, its CPU did not fall and peak RSS rose by ~70 MB
# (docs/performance.md, "Payload rows as columns"); with its decode compiled
# (dissectors.proto.walk), alternated runs (2026-11-27, load 2.4-3.5): 20 MB CPU median
# 7.36 -> 6.81 s and 6.58 -> 6.23 s (3 pairs each), 150 MB 45.8 -> 41.3 s (one pair),
# function calls of a 20 MB run 12.32 -> 11.24 million; peak RSS +26 MB (228 -> 254 MB
# at 20 MB, 261 -> 287 MB at 150 MB).
DEFAULT = frozenset({"stan", "liftbridge"})

# the envelope ``move`` is given, in its argument order, and the provenance each row
# carries (``RowsFormat.record``): the columns ``PayloadRows.to_batch`` builds itself
_MOVED = ("flow_id", "record_id", "direction", "stream_id", "src_ip", "src_port", "dst_ip",
          "dst_port")
_PROVENANCE = ("offset_start", "offset_end", "ts_first", "ts_last", "frame_first",
               "frame_last")
# a moved row's tuple after its values dict and size (``nbytes``): provenance, then envelope
_ROW_COLUMNS = _PROVENANCE + _MOVED
# what a row is reckoned to hold besides its payload's bytes (for ``nbytes``)
_ROW_OVERHEAD = 512
CONVERT_ROWS = 4096  # values dicts held before conversion to Arrow (``PayloadRows``)
_new_tuple = tuple.__new__
_minus_one = (-1).__add__  # a row's parent: the carrier's row, just before it


def enabled(options: SessionOptions, dissector: str) -> bool:
    """Whether ``dissector``'s rows may go out as columns in a run with these session
    options: the run is columnar, and ``MSGCAP_PAYLOAD_COLUMNS`` is ``1`` (every payload
    dissector), names it (a comma-separated list), or is unset and it is in ``DEFAULT``
    (``0``: none)."""
    if options.get("columnar") is not True:
        return False
    switch = os.environ.get(SWITCH)
    if switch is None:
        return dissector in DEFAULT
    return switch == "1" or dissector in switch.split(",")


class RowsFormat:
    """The ``dissectors.api.ColumnFormat`` of one payload table's rows.

    ``record`` is ``record_py`` (the definition), or the same in one C call
    (``_walk.column_row``, with the batch type, table, row overhead and this format
    bound) when the extension is built and ``compiled``: per STAN or Liftbridge row,
    ``record_py`` was ~39 bytecodes (seven attribute reads, two tuples)."""

    __slots__ = ("carried", "record", "spec")

    def __init__(self, spec: TableSpec, compiled: bool = True, carried: bool = True) -> None:
        self.spec = spec
        # a carried message's row (its parent: the carrier's row, just before it), or a
        # session's own row (no parent: ``record_of``)
        self.carried = carried
        column_row = compiled_column_row() if compiled else None
        self.record: Callable[..., Record] = self.record_py if column_row is None else \
            partial(column_row, ColumnBatch, spec.name, _ROW_OVERHEAD, self)

    def accumulator(self) -> PayloadRows:
        return PayloadRows(self.spec, carried=self.carried)

    def record_of(self, rec: Record, size: int, keep: bool = True) -> Record:
        """A session's own top-level row ``rec`` (its values final, its children made) as
        a ``ColumnBatch`` of one row for a format made with ``carried=False``; ``size``:
        the wire bytes it stands for (``nbytes``).  ``keep`` False: counted only (another
        process writes the flow), as ``ColumnBatch.rows`` None says."""
        row = (rec.values, size + _ROW_OVERHEAD, rec.offset_start, rec.offset_end,
               rec.ts_first_ns, rec.ts_last_ns, rec.frame_first, rec.frame_last) \
            if keep else None
        return self._batch(rec.direction, row, rec.children or ())

    def _batch(self, direction: Direction, row: tuple[Any, ...] | None,
               children: list[Record] | tuple[()]) -> Record:
        """The ``ColumnBatch`` of one row, typed as the ``Record`` it stands for
        (``PayloadDissector.decode`` returns a list of records, and the conveyor takes a
        ``ColumnBatch`` wherever it takes one, children included)."""
        # (the tuple made directly: the NamedTuple's own __new__ is a Python function,
        # ~0.3 us more per row)
        batch = _new_tuple(ColumnBatch, (self.spec.name, direction, 1, row, self, children))
        return batch  # type: ignore[return-value]

    def record_py(self, msg: CarriedMessage, values: dict[str, Any],
                  children: list[Record] | tuple[()] = ()) -> Record:
        """The row ``msg.record(table, values)`` would give (with ``children``), as a
        ``ColumnBatch`` of one row (``_batch``)."""
        row = (values, len(msg.payload) + _ROW_OVERHEAD, msg.offset_start, msg.offset_end,
               msg.ts_first_ns, msg.ts_last_ns, msg.frame_first, msg.frame_last)
        return self._batch(msg.direction, row, children)


def rows_for(fmt: RowsFormat | None, bindings: Bindings) -> RowsFormat | None:
    """``fmt`` when this message's row may go out as columns: a format was made for the
    run, and no prober failed in the dispatcher's scope (module docstring: parent)."""
    if fmt is None or getattr(bindings, "probe_failed", True):
        return None
    return fmt


class PayloadRows(list[tuple[Any, ...] | None]):
    """A ``dissectors.api.ColumnAccumulator`` of one payload table's rows.

    The values dicts are converted every ``CONVERT_ROWS`` rows, as the sink converts dict
    rows (``analyzer.sink._CONVERT_ROWS``): Python objects are far bigger than Arrow
    values, and the conveyor holds up to 16,384 rows before it asks for the batch.

    The rows are the list itself, one item a row in order: the row's tuple with its
    envelope appended (one flat tuple: one append a row, and ``_convert`` transposes them
    all in one ``zip``) until it is converted, then None.  Why a list: the conveyor asks
    ``len`` after every move, and the list's own answers in C (a Python ``__len__`` was a
    call and ~9 bytecodes a row)."""

    __slots__ = ("_done", "_next", "_parts", "carried", "move", "nbytes", "spec")

    def __init__(self, spec: TableSpec, compiled: bool = True, carried: bool = True) -> None:
        super().__init__()
        self.spec = spec
        self.carried = carried  # parent: the row just before (a carrier's), else none
        # ``move_py`` (the definition), or the same in one C call (``_walk.move_row``)
        # when the extension is built and ``compiled``: ~39 bytecodes a row in Python
        move_row = compiled_move_row() if compiled else None
        self.move: Callable[..., None] = self.move_py if move_row is None else \
            MethodType(move_row, self)
        self._parts: list[pa.RecordBatch] = []  # converted (capture_id still null)
        self._done = 0  # rows converted (the first ones: None since)
        self._next = CONVERT_ROWS  # the row count at which the next conversion is due
        # (an attribute, not a property: the conveyor reads it after every move)
        self.nbytes = 0

    def move_py(self, rows: tuple[Any, ...], n: int, flow_id: int, record_id: int,
             direction: int, stream_id: int | None, src_ip: str, src_port: int, dst_ip: str,
             dst_port: int) -> None:
        """Take the one row ``RowsFormat.record`` made, numbered ``record_id``."""
        if n != 1:  # pragma: no cover - RowsFormat.record makes batches of one row
            raise ValueError(f"payload rows: a batch of {n} rows, not 1")
        self.append(rows + (flow_id, record_id, direction, stream_id, src_ip, src_port,
                            dst_ip, dst_port))
        self.nbytes += rows[1]  # (the payload's size and the row's overhead: ``record``)
        if len(self) >= self._next:
            self._parts.append(self._convert())

    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        parts = self._parts
        if len(self) > self._done or not parts:
            parts.append(self._convert())
        self.clear()
        self._parts, self._done, self._next, self.nbytes = [], 0, CONVERT_ROWS, 0
        batch = parts[0] if len(parts) == 1 else \
            pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
        arrays = batch.columns
        at = schema.get_field_index("capture_id")
        arrays[at] = repeated_bytes(schema.field(at).type, capture_id.encode(), batch.num_rows)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _convert(self) -> pa.RecordBatch:
        """The rows moved since the last conversion as a batch (capture_id null); they
        become None in the list."""
        done = self._done
        rows = cast("list[tuple[Any, ...]]", self[done:])  # (None only before ``done``)
        self[done:] = [None] * len(rows)
        self._done = len(self)
        self._next = self._done + CONVERT_ROWS
        spec = self.spec
        if not rows:
            return rows_to_batch(spec, [])
        # the protocol columns as the reference's dict rows are converted (the envelope's
        # columns come out null there: no values dict has those keys)
        base = rows_to_batch(spec, list(map(_first, rows)))
        moved = _moved_columns(rows, self.carried)
        if moved is None:
            moved = _moved_columns_py(rows, self.carried)
        arrays = [base.column(i) if (a := moved.get(f.name)) is None else a
                  for i, f in enumerate(spec.columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=base.schema)


_first = itemgetter(0)
# ``_ROW_COLUMNS``' types as ``_rows.typed_tuples`` reads them from the row tuples: the
# envelope's, timestamps as int64 nanoseconds, the direction as its number
_ENVELOPE_TYPES = {f.name: f.type for f in ENVELOPE}
_MOVED_TYPES = tuple(pa.int64() if name == "direction" or pa.types.is_timestamp(t) else t
                     for name, t in ((name, _ENVELOPE_TYPES[name]) for name in _ROW_COLUMNS))
_MOVED_KINDS = bytes(map(typed_kind, _MOVED_TYPES))
# the ``direction`` values' bytes by direction number (``fixed_width_strings``)
_DIRECTION_BYTES = np.frombuffer("".join(DIRECTION_SHORT).encode(), np.uint8).reshape(
    len(DIRECTION_SHORT), -1)


def _moved_columns(rows: list[tuple[Any, ...]], carried: bool = True
                   ) -> dict[str, pa.Array] | None:
    """The provenance and envelope columns of moved rows, by column name (the timestamps'
    exact ``_ns`` twins and ``parent_record_id`` too: the row before's id when
    ``carried``, else null), from ``_rows.typed_tuples``' buffers; None (ask
    ``_moved_columns_py``, the definition) when the extension is not built or takes some
    value differently (not an int, a null where none is expected).  Why: transposing the
    row tuples and converting each envelope column from Python ints was about half of
    ``_convert``, ~1 us a STAN row."""
    parts = typed_tuples(rows, 2, _MOVED_KINDS) if typed_tuples is not None else None
    if parts is None:
        return None
    n = len(rows)
    got = dict(zip(_ROW_COLUMNS, parts, strict=True))
    direction, record_id = got["direction"], got["record_id"]
    if direction[0] is not None or record_id[0] is not None:  # (a null: the reference's)
        return None
    codes = np.frombuffer(direction[2], np.int64)
    if n and not 0 <= int(codes.min()) <= int(codes.max()) < len(DIRECTION_SHORT):
        return None
    columns = {name: from_parts(t, n, part)
               for name, t, part in zip(_ROW_COLUMNS, _MOVED_TYPES, parts, strict=True)}
    for name in ("ts_first", "ts_last"):
        ns = columns[f"{name}{NS_SUFFIX}"] = columns[name]
        columns[name] = timestamp_from_ns(ns)
    columns["direction"] = fixed_width_strings(_ENVELOPE_TYPES["direction"],
                                               _DIRECTION_BYTES[codes])
    columns["parent_record_id"] = from_numpy(np.frombuffer(record_id[2], np.int64) - 1) \
        if carried else nulls(_ENVELOPE_TYPES["parent_record_id"], n)
    return columns


def _moved_columns_py(rows: list[tuple[Any, ...]], carried: bool = True
                      ) -> dict[str, pa.Array]:
    """``_moved_columns`` in Python (the definition): the rows transposed, each column
    converted by ``pa.array`` as a dict row's would be."""
    _values, _sizes, *moved = zip(*rows, strict=True)
    values: dict[str, Any] = dict(zip(_ROW_COLUMNS, moved, strict=True))
    values["direction"] = list(map(DIRECTION_SHORT.__getitem__, values["direction"]))
    values["parent_record_id"] = list(map(_minus_one, values["record_id"])) if carried \
        else [None] * len(rows)
    types = dict(_ENVELOPE_TYPES)
    types.update((name, pa.int64()) for name in ("ts_first", "ts_last"))  # (nanoseconds)
    columns: dict[str, pa.Array] = {}
    for name, column in values.items():  # (lists: pa.array takes a tuple of ints ~50x
        columns[name] = pa.array(list(column), type=types[name])  # slower than a list)
    for name in ("ts_first", "ts_last"):
        ns = columns[f"{name}{NS_SUFFIX}"] = columns[name]
        columns[name] = timestamp_from_ns(ns)
    return columns

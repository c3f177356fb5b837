"""The columnar fast path's buffers: ``redis`` rows without the ``Record`` detour.

Why: on the plain path each message becomes a ``Record``, then the pipeline builds a
row dict with its envelope, then a list of dicts becomes Arrow columns.  Switched to
columns (``RedisSession.columnar``), a message with no ``redis_pubsub`` children goes
into the session's ``RowBuffer`` instead, and the session returns a ``ColumnBatch``
saying how many rows wait there; the pipeline moves them, with their envelope, into a
``RedisAccumulator`` and asks it for one Arrow batch now and then.  Everything here is
``dissectors.api`` and pyarrow: a plugin adds a fast path without touching msgcap.

The rows must be exactly those of the plain path (tests/test_redis.py compares the
two): the values are the very dicts ``RedisSession`` builds, the provenance is the
framing events', and timestamps are written the way msgcap writes them (UTC
microseconds rounded down, next to the exact ``_ns`` value).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pyarrow as pa
from dissectors.api import Direction, Provenance

__all__ = ["FORMAT", "RedisAccumulator", "RedisFormat", "RowBuffer"]

# the envelope columns this buffer fills per row (the pipeline gives ids and endpoints)
_PROVENANCE = ("offset_start", "offset_end", "ts_first", "ts_last", "frame_first",
               "frame_last")
# a row's rough size in memory beyond its values, for the accumulator's ``nbytes``
_ROW_OVERHEAD = 200


class RowBuffer:
    """One session's rows waiting for the pipeline: its values and provenance, oldest
    first (the pipeline takes them in the order of the session's ``ColumnBatch``es)."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: deque[tuple[dict[str, Any], tuple[int, ...]]] = deque()

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, values: dict[str, Any], first: Provenance, last: Provenance) -> None:
        """One row covering the bytes from framing event ``first`` through ``last``
        (as ``record_from`` would take them)."""
        self._rows.append((values, (first.start, last.end, first.ts_first_ns,
                                    last.ts_last_ns, first.frame_first, last.frame_last)))

    def take(self, n: int) -> list[tuple[dict[str, Any], tuple[int, ...]]]:
        """The ``n`` oldest rows, removed."""
        rows = self._rows
        return [rows.popleft() for _ in range(n)]


class RedisAccumulator:
    """A ``dissectors.api.ColumnAccumulator``: rows of many sessions, with their
    envelope, until ``to_batch`` turns them into one Arrow batch."""

    def __init__(self) -> None:
        self._rows: list[tuple[dict[str, Any], tuple[int, ...], tuple[Any, ...]]] = []
        self._nbytes = 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def move(self, rows: RowBuffer, n: int, flow_id: int, record_id: int, direction: int,
             stream_id: int | None, src_ip: str, src_port: int, dst_ip: str,
             dst_port: int) -> None:
        short = Direction(direction).short
        out = self._rows
        size = 0
        for i, (values, prov) in enumerate(rows.take(n)):
            out.append((values, prov, (flow_id, record_id + i, short, stream_id, src_ip,
                                       src_port, dst_ip, dst_port)))
            size += _ROW_OVERHEAD
            for v in values.values():
                t = type(v)
                if t is bytes or t is str:
                    size += len(v)
                elif t is list:  # args: the kept bytes of each
                    size += sum(map(len, v))
        self._nbytes += size

    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        rows, self._rows, self._nbytes = self._rows, [], 0
        n = len(rows)
        env = ("flow_id", "record_id", "direction", "stream_id", "src_ip", "src_port",
               "dst_ip", "dst_port")
        exact: dict[str, list[int]] = {}  # timestamp column -> its nanoseconds
        # protocol columns: one pass over each row's keys (a row sets a few of them)
        values: dict[str, list[Any]] = {}
        for i, (row, _prov, _env) in enumerate(rows):
            for key, value in row.items():
                column = values.get(key)
                if column is None:
                    column = values[key] = [None] * n
                column[i] = value
        arrays = []
        for f in schema:
            name = f.name
            if name == "capture_id":
                arrays.append(pa.array([capture_id] * n, f.type))
            elif name in env:
                k = env.index(name)
                arrays.append(pa.array([r[2][k] for r in rows], f.type))
            elif name in _PROVENANCE:
                k = _PROVENANCE.index(name)
                column = [r[1][k] for r in rows]
                if pa.types.is_timestamp(f.type):  # microseconds, rounded down
                    exact[name + "_ns"] = column
                    column = [ns // 1000 for ns in column]
                arrays.append(pa.array(column, f.type))
            elif name in exact:
                arrays.append(pa.array(exact[name], f.type))
            else:  # a protocol column (parent_record_id: none on this path)
                arrays.append(pa.array(values.get(name, [None] * n), f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class RedisFormat:
    """The ``dissectors.api.ColumnFormat`` of ``RowBuffer``."""

    def accumulator(self) -> RedisAccumulator:
        return RedisAccumulator()


FORMAT = RedisFormat()

"""The hook that fills the ``payload_decoded`` columns: a wrapper around the run's sink.

Strategy: the conveyor names no protocol and writes rows (dicts) or Arrow batches (the
NATS fast path) to one sink.  ``DecodingWriter`` sits in front of that sink and, for the
tables declared with ``decoded_fields``, computes the four columns from the row's own
payload / truncation / subject columns just before the write.  So every path that reaches
the sink (dict rows, compiled batches, the Spark task sinks) is decoded the same way, and
the pipeline only has to wrap its writer once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from dissectors.payload import DECODED_COLUMNS, PayloadDecoding, decoded_source
from dissectors.redaction import keeping_secrets
from dissectors.tables import TableSpec

__all__ = ["DecodingWriter", "decode_batch", "decode_rows"]


def decode_rows(engine: PayloadDecoding, table: str, rows: list[dict[str, Any]]) -> None:
    """Set the decoded columns of dict ``rows`` of ``table`` in place."""
    src = decoded_source(table)
    if src is None:
        return
    for row in rows:
        data = row.get(src.payload)
        if data is None:
            continue
        row.update(engine.columns(
            data,
            row.get(src.truncated) if src.truncated else False,
            row.get(src.subject) if src.subject else None,
            row.get("schema_version"),
        ))


def decode_batch(engine: PayloadDecoding, table: str, batch: pa.RecordBatch | pa.Table
                 ) -> pa.RecordBatch | pa.Table:
    """``batch`` (a ``RecordBatch`` or ``Table``) with its decoded columns computed (the
    other columns untouched)."""
    src = decoded_source(table)
    names = batch.schema.names
    if src is None or src.payload not in names or DECODED_COLUMNS[0] not in names:
        return batch
    payloads = batch.column(src.payload).to_pylist()
    if not any(payloads):
        return batch
    cut = (batch.column(src.truncated).to_pylist() if src.truncated in names
           else [False] * len(payloads))
    subjects = (batch.column(src.subject).to_pylist() if src.subject in names
                else [None] * len(payloads))
    versions = (batch.column("schema_version").to_pylist() if "schema_version" in names
                else [None] * len(payloads))
    cols: dict[str, list[str | None]] = {c: [None] * len(payloads) for c in DECODED_COLUMNS}
    for i, data in enumerate(payloads):
        if data is None:
            continue
        for k, v in engine.columns(data, cut[i], subjects[i], versions[i]).items():
            cols[k][i] = v
    arrays = list(batch.columns)
    for c in DECODED_COLUMNS:
        arrays[names.index(c)] = pa.array(cols[c], type=pa.string())
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(arrays, schema=batch.schema)
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


class DecodingWriter:
    """A sink wrapper: ``write_rows`` / ``write_batch`` decode, everything else is the
    wrapped sink's (``columnar`` and ``owns`` of ``analyzer.sink.Sink`` included)."""

    def __init__(self, inner: Any, engine: PayloadDecoding, *, keep_secrets: bool = False
                 ) -> None:
        self._inner = inner
        self.engine = engine
        self.keep_secrets = keep_secrets  # --keep-secrets: decoded values not redacted

    @property
    def watched_tables(self) -> frozenset[str]:
        """Tables whose rows must come as dict rows, in order (``PayloadDecoding``)."""
        return self.engine.watched_tables

    def write_rows(self, spec: TableSpec, rows: Iterable[dict[str, Any]]) -> None:
        if not isinstance(rows, list):
            rows = list(rows)
        self.engine.observe(spec.name, rows)  # schemas announced (Pulsar commands)
        if decoded_source(spec.name) is not None:
            # a --workers sink writes only its share of the flows: decode only that share
            # (every worker still sees every command row, so schemas cross flows)
            owns = getattr(self._inner, "owns", None)
            mine = rows if owns is None else [r for r in rows if owns(r.get("flow_id"))]
            with keeping_secrets(self.keep_secrets):
                decode_rows(self.engine, spec.name, mine)
        self._inner.write_rows(spec, rows)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name == "write_batch":
            def write_batch(spec: TableSpec, batch: pa.RecordBatch | pa.Table, *a: Any,
                            **kw: Any) -> Any:
                with keeping_secrets(self.keep_secrets):
                    batch = decode_batch(self.engine, spec.name, batch)
                return attr(spec, batch, *a, **kw)
            return write_batch
        return attr

"""The sink protocol the pipeline's conveyor writes to, apart from the Parquet writer
(analyzer.sink) so that a sink of dict rows (``msgcap flows``, Spark tasks) does not
import pyarrow: ``msgcap flows`` on a stream stays small and starts fast."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from dissectors.schema import TableSpec


class Sink(Protocol):
    """What the pipeline's conveyor (``analyzer.pipeline.CaptureDissection``) writes to.

    ``columnar``: the sink takes Arrow batches (``write_batch``), so sessions with a
    columnar fast path are switched on (``dissectors.api.ColumnarSession``); a sink of
    dict rows only says False and is never given a batch.  ``owns(flow_id)``: whether
    this sink writes that flow's rows (a ``--workers`` process writes its share only; the
    conveyor then skips building the others)."""

    columnar: bool

    def write_rows(self, spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> None: ...
    def write_batch(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None: ...
    def owns(self, flow_id: int | None) -> bool: ...


class RowSink:
    """Base of a ``Sink`` of dict rows only (Spark tasks, ``msgcap flows``)."""

    columnar = False

    def write_batch(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
        raise TypeError(f"{type(self).__name__} takes dict rows only (columnar = False)")

    def owns(self, flow_id: int | None) -> bool:
        return True

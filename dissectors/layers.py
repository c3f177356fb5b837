"""Layer dissectors: rows from the layers below the dissectors (QUIC, TLS, WebSocket).

Why: those layers live in ``reassembly`` (their decrypted or unframed bytes reach the
dissectors as stream events) but they also have tables of their own and facts for the
flow row.  A ``LayerDissector`` turns one layer's events into rows and flow facts, and
is declared next to its table (``dissectors.quic.table``, ``dissectors.tls_table``,
``dissectors.websocket_table``), so the pipeline routes their events and writes their
rows through the same path as every other row, without naming a layer.

The pipeline adds to each ``LayerRow`` what only it knows: ``capture_id``, ``flow_id``,
``record_id`` and the endpoints of the row's direction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, NamedTuple

from dissectors.tables import TableSpec
from reassembly.events import Direction, StreamGap, gap_wording

__all__ = ["LayerDissector", "LayerFacts", "LayerRow", "builtin_layers", "stream_gap_anomaly"]


class LayerFacts:
    """What the layers learned about one flow, for its ``flows`` row.  A plain class: a
    dataclass is built (its methods generated and compiled) at every import, ~0.5 ms of
    each run's start."""

    __slots__ = ("layers", "values", "protocol", "rank", "inner_streams")

    def __init__(self) -> None:
        self.layers: list[str] = []  # ``flows.layers``, outermost first
        self.values: dict[str, Any] = {}  # handshake columns of ``flows``
        # ``flows.protocol`` when no dissector claimed the flow: the name of the layer of
        # highest ``rank`` that saw it (``claim``)
        self.protocol: str | None = None
        self.rank = -1
        # the flow's bytes reach dissectors as several inner streams: its undecoded bytes
        # are what its streams delivered less what their sessions decoded
        self.inner_streams = False

    def claim(self, name: str, rank: int) -> None:
        if rank > self.rank:
            self.protocol, self.rank = name, rank


class LayerRow(NamedTuple):
    """A row of a layer table: every column but ``capture_id``, ``flow_id``,
    ``record_id`` and the endpoints (``src_*``/``dst_*`` of ``direction``)."""

    spec: TableSpec
    direction: Direction
    values: dict[str, Any]


class LayerDissector(ABC):
    """The rows and flow facts of one layer's reassembly events."""

    events: ClassVar[tuple[type, ...]]  # the event types this layer reads
    tables: ClassVar[tuple[TableSpec, ...]]

    @classmethod
    @abstractmethod
    def rows(cls, ev: Any, facts: LayerFacts) -> list[LayerRow]:
        """The rows of ``ev`` (an instance of one of ``events``); update ``facts``."""


def builtin_layers() -> tuple[type[LayerDissector], ...]:
    """QUIC, TLS and WebSocket, in the order their tables are listed."""
    from dissectors.quic.table import QuicLayer
    from dissectors.tls_table import TlsLayer
    from dissectors.websocket_table import WebSocketLayer

    return (QuicLayer, TlsLayer, WebSocketLayer)


def stream_gap_anomaly(ev: StreamGap) -> tuple[str, str, str]:
    """(kind, detail, source) of the anomaly that lost stream bytes are, whatever a
    dissector makes of them: a TCP stream's, or a QUIC stream's (``stream_id``)."""
    quic = ev.stream_id is not None
    detail = (f"{ev.nbytes} bytes of the {ev.direction.short} stream"
              + (f" of QUIC stream {ev.stream_id}" if quic else "")
              + f" {gap_wording(ev.reason)} ({ev.reason})")
    return ("quic.stream_gap" if quic else "tcp.gap", detail, "quic" if quic else "tcp")

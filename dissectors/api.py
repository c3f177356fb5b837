"""The dissector API: the only module a plugin needs to import.

Strategy (sans-IO, after h11/wsproto): a dissector is a class with metadata and a
cheap ``probe``; the pipeline creates one ``Session`` per flow and feeds it stream
bytes, gaps and a close, and gets ``Record`` objects back.  Sessions never touch files,
sockets, Arrow or logging.  Malformed input never raises: it becomes an anomaly record
(``Record.anomaly``) and the session resynchronises or gives up on that direction.

Byte accounting (DESIGN §7): a session reports, per direction, how many stream bytes it
decoded and how many it had to leave undecoded; the pipeline adds the gap bytes and
checks that the three add up to the stream length.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple

from dissectors.tables import Field, TableSpec
from reassembly.events import Direction, Transport

__all__ = [
    "API_VERSION",
    "Direction",
    "Dissector",
    "Field",
    "Record",
    "Session",
    "Span",
    "TableSpec",
    "Transport",
    "Verdict",
]

API_VERSION = 1


class Verdict(IntEnum):
    """Answer of ``Dissector.probe``: the flow is ours, is not, or we cannot tell yet."""

    NO = 0
    YES = 1
    NEED_MORE = 2


class Span(NamedTuple):
    """Provenance of a chunk of stream bytes handed to ``Session.feed``."""

    offset: int  # stream offset of data[0] in this direction
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


@dataclass(slots=True)
class Record:
    """One output row before the pipeline adds the envelope (capture, flow, endpoints).

    ``values`` holds the protocol columns of ``table``; columns not given are null.
    ``offset_end`` is exclusive.  ``children`` are rows decoded from this row's payload
    (the pipeline gives them ``parent_record_id``).
    """

    table: str
    direction: Direction
    offset_start: int
    offset_end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int
    values: dict[str, Any]
    children: list[Record] = field(default_factory=list)

    @classmethod
    def anomaly(
        cls,
        kind: str,
        detail: str,
        direction: Direction,
        offset_start: int,
        offset_end: int,
        ts_first_ns: int,
        ts_last_ns: int,
        frame_first: int,
        frame_last: int,
    ) -> Record:
        """An ``anomalies`` row raised by a dissector (``kind`` like ``nats.unknown_op``)."""
        return cls(
            "anomalies",
            direction,
            offset_start,
            offset_end,
            ts_first_ns,
            ts_last_ns,
            frame_first,
            frame_last,
            {"kind": kind, "detail": detail},
        )


class Session(ABC):
    """Per-flow state of one dissector.  Subclasses override the three feeders."""

    def __init__(self) -> None:
        # per direction (index = Direction): stream bytes consumed into records / skipped
        self.decoded_bytes = [0, 0]
        self.undecoded_bytes = [0, 0]

    @abstractmethod
    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]: ...

    @abstractmethod
    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]: ...

    @abstractmethod
    def close(self, ts_ns: int) -> list[Record]: ...


class Dissector(ABC):
    """Class-level metadata plus ``probe`` and ``session`` factories.

    Registered through the entry-point group ``msgcap.dissectors``.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = ()
    tables: ClassVar[tuple[TableSpec, ...]] = ()

    @classmethod
    @abstractmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        """Cheap look at the first bytes of one direction.  Must never raise."""
        ...

    @classmethod
    @abstractmethod
    def session(cls, options: dict[str, Any]) -> Session: ...

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
    "Bindings",
    "CarriedMessage",
    "Direction",
    "Dissector",
    "Field",
    "PayloadDissector",
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


# -- protocols carried inside another protocol's messages (STAN, Liftbridge in NATS) ----


@dataclass(slots=True)
class CarriedMessage:
    """A message of a carrier protocol (NATS PUB/HPUB/MSG/HMSG) offered to payload
    dissectors.  ``payload`` is the whole payload, never the capped copy.  The
    provenance fields are those of the carrier's row, which becomes the parent of every
    row decoded from this message."""

    carrier: str  # "nats"
    op: str  # "PUB", "HPUB", "MSG", "HMSG"
    subject: str
    reply_to: str | None
    sid: str | None
    headers: dict[str, list[str]] | None
    payload: bytes
    direction: Direction
    flow_id: int
    offset_start: int
    offset_end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int

    def record(self, table: str, values: dict[str, Any]) -> Record:
        """A row of ``table`` decoded from this message (provenance copied)."""
        return Record(
            table,
            self.direction,
            self.offset_start,
            self.offset_end,
            self.ts_first_ns,
            self.ts_last_ns,
            self.frame_first,
            self.frame_last,
            values,
        )

    def anomaly(self, kind: str, detail: str) -> Record:
        return Record.anomaly(
            kind,
            detail,
            self.direction,
            self.offset_start,
            self.offset_end,
            self.ts_first_ns,
            self.ts_last_ns,
            self.frame_first,
            self.frame_last,
        )


class Bindings(ABC):
    """What payload dissectors learn from the capture and share through the dispatcher.

    Scope: one capture and one carrier server endpoint (a STAN client and the STAN server
    talk to the same NATS server over different connections)."""

    @abstractmethod
    def bind_subject(self, subject: str, dissector: str, hint: str) -> None:
        """Messages on exactly ``subject`` belong to ``dissector`` with ``hint`` (e.g. the
        reply inbox of a ConnectRequest carries a ConnectResponse)."""

    @abstractmethod
    def bind_pattern(self, pattern: str, dissector: str, hint: str) -> None:
        """Like ``bind_subject`` for a NATS wildcard pattern (``*`` one token, ``>`` rest)."""

    @abstractmethod
    def unbind_subject(self, subject: str) -> None: ...


class PayloadDissector(ABC):
    """Decodes messages carried in another protocol (registered like ``Dissector``).

    Dispatch order for each carried message: (1) exact subjects bound during the
    capture, (2) subject patterns — the class's static ``subjects`` plus learned ones,
    most specific first — (3) ``probe_payload``.  ``hint`` says what the binding knew
    (e.g. a message type); it is ``""`` for a probe match.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    carriers: ClassVar[tuple[str, ...]] = ("nats",)
    subjects: ClassVar[tuple[tuple[str, str], ...]] = ()  # (pattern, hint)
    tables: ClassVar[tuple[TableSpec, ...]] = ()

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        """Cheap look at a payload no binding claimed; default: not ours."""
        return Verdict.NO

    @classmethod
    @abstractmethod
    def new_state(cls, options: dict[str, Any]) -> Any:
        """Per-scope state (one per capture + carrier server endpoint)."""

    @classmethod
    @abstractmethod
    def decode(cls, state: Any, bindings: Bindings, msg: CarriedMessage, hint: str) -> list[Record]:
        """Rows (``msg.record``) and anomalies (``msg.anomaly``) for one message."""

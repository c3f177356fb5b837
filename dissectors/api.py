"""The dissector API: the only module a plugin needs to import.

Strategy (sans-IO, after h11/wsproto): a dissector is a class with metadata and a
cheap ``probe``; the pipeline creates one ``Session`` per flow and feeds it stream
bytes, gaps and a close, and gets ``Record`` objects back.  Sessions never touch files,
sockets, Arrow or logging.  Malformed input never raises: it becomes an anomaly record
(``Record.anomaly``) and the session resynchronises or gives up on that direction.

Byte accounting (DESIGN §7): a session reports, per direction, how many stream bytes it
decoded and how many it had to leave undecoded; the pipeline adds the gap bytes and
checks that the three add up to the stream length.

What a plugin may rely on (the versioned surface, ``API_VERSION``): every name in
``__all__``.  Names are only ever added within a major version; a change that would break
a plugin raises ``API_VERSION``, and the registry then refuses plugins built for the old
one with a message saying so.  Nothing else under ``dissectors`` is promised.

Groups of names:

* the session protocol: ``Dissector``, ``Session``, ``Span``, ``Verdict``, ``Direction``,
  ``Transport``, ``FramedSession`` (a ``Session`` that drains one framer per direction);
* run options (``dissectors.options``): ``SessionOptions``, ``session_option``,
  ``DEFAULT_PAYLOAD_CAP``;
* rows: ``Record``, ``record_from``, ``anomaly_from`` (anomaly helpers; ``Provenance`` is
  what they accept), ``payload_values``, ``decode_text``;
* table declaration: ``TableSpec``, ``Field``, ``payload_fields``, ``register_table``;
* framing (``dissectors.framing``): ``LineFramer``, ``LengthPrefixedFramer``, their events
  (``Line``, ``Block``, ``Pdu``, ``Oversize``, ``Invalid``, ``Resynced``, ``Dropped``),
  ``NEED_MORE``, ``TrailerStatus``, ``ResyncFn``, ``resync_after_lf``;
* payload dispatch (protocols carried in another's messages): ``PayloadDissector``,
  ``CarriedMessage``, ``Bindings``; a carrier's side: ``CarrierSession``, ``CarrierScope``;
* columnar fast paths (a session that fills column buffers instead of ``Record`` objects):
  ``ColumnarSession``, ``ColumnBatch``, ``ColumnFormat``, ``ColumnAccumulator``;
* not here: the test helpers (``Data``, ``Gap``, ``run_session``,
  ``assert_split_invariant``, ``write_pcap``, ...) are the separate public module
  ``dissectors.sdk.testing``, and ``dissect_with_cli`` is ``analyzer.testing``'s; this
  module does not import them (asking it for one says where it went).

The framing and ``FramedSession`` names are loaded on first use (PEP 562
``__getattr__``): ``dissectors.framing`` imports this module (a plain import would be
circular).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import pyarrow as pa

from dissectors.options import DEFAULT_PAYLOAD_CAP, SessionOptions, session_option
from dissectors.tables import Field, TableSpec, register_table
from reassembly.events import Direction, Transport
from reassembly.lazy import lazy_names
from reassembly.provenance import Span  # (declared on the lower floor: the layers use it)

if TYPE_CHECKING:  # pragma: no cover - the lazy names below, for type checkers
    from dissectors.framing import (
        NEED_MORE,
        Block,
        Dropped,
        Invalid,
        LengthPrefixedFramer,
        Line,
        LineFramer,
        Oversize,
        Pdu,
        Resynced,
        ResyncFn,
        TrailerStatus,
        resync_after_lf,
    )
    from dissectors.sessions import FramedSession

__all__ = [
    "API_VERSION",
    "DEFAULT_PAYLOAD_CAP",
    "MAX_VERDICTS",
    "NEED_MORE",
    "Bindings",
    "Block",
    "CarriedMessage",
    "CarrierScope",
    "CarrierSession",
    "ColumnAccumulator",
    "ColumnBatch",
    "ColumnFormat",
    "ColumnarSession",
    "Direction",
    "Dissector",
    "Dropped",
    "Field",
    "FramedSession",
    "Invalid",
    "LengthPrefixedFramer",
    "Line",
    "LineFramer",
    "Oversize",
    "PayloadDissector",
    "Pdu",
    "Provenance",
    "Record",
    "ResyncFn",
    "Resynced",
    "Session",
    "SessionOptions",
    "Span",
    "TableSpec",
    "TrailerStatus",
    "Transport",
    "Verdict",
    "anomaly_from",
    "decode_text",
    "payload_fields",
    "payload_values",
    "record_from",
    "register_table",
    "resync_after_lf",
    "session_option",
]

API_VERSION = 1
"""Major version of this API.  A plugin class states the version it was written for in its
``api_version`` class attribute (default: the version it was imported with); the registry
refuses a plugin whose ``api_version`` differs, with a message naming both versions."""

# name -> module of the names loaded on first use (see the module docstring)
_LAZY = {
    **dict.fromkeys(
        (
            "NEED_MORE", "Block", "Dropped", "Invalid", "LengthPrefixedFramer", "Line",
            "LineFramer", "Oversize", "Pdu", "ResyncFn", "Resynced", "TrailerStatus",
            "resync_after_lf",
        ),
        "dissectors.framing",
    ),
    "FramedSession": "dissectors.sessions",
}
# test helpers this module re-exported until they moved -> the import that gives them
# (said in the error only: this module never imports test code)
_MOVED = {
    **dict.fromkeys(
        (
            "Data", "Gap", "PcapFlow", "Run", "assert_accounting", "assert_never_raises",
            "assert_rows_valid", "assert_split_invariant", "carried_message", "run_payload",
            "run_session", "write_pcap",
        ),
        "from dissectors.sdk.testing import",
    ),
    **dict.fromkeys(("CliRun", "dissect_with_cli"), "from analyzer.testing import"),
}


_lazy = lazy_names(__name__, _LAZY)


def __getattr__(name: str) -> object:
    if name in _MOVED:  # ImportError: ``from dissectors.api import Data`` shows it
        raise ImportError(f"{name} is not part of {__name__} (the test helpers are a "
                          f"module of their own): {_MOVED[name]} {name}", name=__name__)
    return _lazy(name)  # stored in this module's namespace: later lookups skip this


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class Verdict(IntEnum):
    """Answer of ``Dissector.probe``: the flow is ours, is not, or we cannot tell yet."""

    NO = 0
    YES = 1
    NEED_MORE = 2


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
    """Per-flow state of one dissector.  Subclasses override the three feeders.

    ``decoded_bytes`` / ``undecoded_bytes`` (one int per ``Direction``) must be kept up to
    date: after ``close`` every byte fed in a direction is in exactly one of them (gap
    bytes are in neither; the pipeline adds those).  ``FramedSession`` does this for you.
    """

    def __init__(self) -> None:
        # per direction (index = Direction): stream bytes consumed into records / skipped
        self.decoded_bytes = [0, 0]
        self.undecoded_bytes = [0, 0]

    @abstractmethod
    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        """Stream bytes of ``direction`` starting at ``span.offset`` (contiguous with the
        previous ``feed``/``gap`` of that direction).  Returns the rows completed so far.
        Must not raise on any input bytes."""

    @abstractmethod
    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        """``nbytes`` at ``offset`` in ``direction`` were never captured (they are not
        zeros).  Typically: report the unit the gap cut, then resynchronise."""

    @abstractmethod
    def close(self, ts_ns: int) -> list[Record]:
        """End of the flow (both directions): report what is left; nothing follows."""


class Dissector(ABC):
    """Class-level metadata plus ``probe`` and ``session`` factories.

    Registered through the entry-point group ``msgcap.dissectors`` (in a plugin's
    ``pyproject.toml``: ``[project.entry-points."msgcap.dissectors"] NAME =
    "package.module:Class"``).  ``name`` is the protocol's name in ``msgcap protocols``,
    ``--decode-as PORT=NAME`` and anomaly kinds (``NAME.something``).  ``default_ports``
    are hints that order the probes, never proof.  ``tables`` lists every table the
    sessions write rows to (the pipeline registers them).  ``api_version`` is the
    ``API_VERSION`` the class was written for.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    transport: ClassVar[Transport] = Transport.TCP
    # every transport whose byte streams the dissector reads (QUIC streams ride on UDP
    # flows): defaults to ``(transport,)``; Felix, for one, says ``(UDP, TCP)``
    transports: ClassVar[tuple[Transport, ...]] = ()
    default_ports: ClassVar[tuple[int, ...]] = ()
    tables: ClassVar[tuple[TableSpec, ...]] = ()
    api_version: ClassVar[int] = API_VERSION

    @classmethod
    def carried_on(cls) -> tuple[Transport, ...]:
        """The transports this dissector can be offered."""
        return cls.transports or (cls.transport,)

    @classmethod
    @abstractmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        """Cheap look at the first bytes of one direction.  Must never raise."""
        ...

    @classmethod
    def probe_joined(cls, direction: Direction, prefix: bytes) -> Verdict:
        """``probe`` for a direction whose start was not captured (joined mid-stream, or
        begun by a gap): ``prefix`` may start inside a PDU, so a protocol that can
        resynchronise may say YES on a valid unit further in.  Default: ``probe``."""
        return cls.probe(direction, prefix)

    @classmethod
    @abstractmethod
    def session(cls, options: SessionOptions) -> Session:
        """A new session for one flow.  ``options`` holds run options such as
        ``payload_cap`` (payload bytes to keep per row; None keeps all); read them with
        ``session_option`` so that a bad value raises ``ValueError`` naming the option."""


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
        """An ``anomalies`` row about this message (provenance copied)."""
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
    def unbind_subject(self, subject: str) -> None:
        """Forget an exact binding (e.g. a one-shot reply inbox once answered)."""


# (state, bindings, msg, hint) -> records: ``PayloadDissector.decode``'s call
PayloadDecode = Callable[[Any, "Bindings", "CarriedMessage", str], "list[Record]"]


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
    api_version: ClassVar[int] = API_VERSION
    # Optional promise about ``probe_payload``: it answers NO for an empty payload and
    # for one whose first byte is not in this set.  Carriers with a compiled fast path
    # (NATS) then offer only such payloads; None (the default) means every payload.
    probe_first_bytes: ClassVar[frozenset[int] | None] = None
    # ... and it answers NO for a payload that is not a well-formed protobuf message as
    # ``dissectors.proto.wire.scan`` reads it (None there).
    probe_needs_protobuf: ClassVar[bool] = False
    # ... or its whole rule: YES exactly when the payload starts with one of these
    # non-empty prefixes (up to 255 bytes each), NO otherwise; the NATS fast path then
    # decides it in C instead of stopping to ask (Liftbridge's envelope magic).
    probe_prefixes: ClassVar[tuple[bytes, ...] | None] = None
    # Promise that the rows ``decode`` returns for a message depend only on messages of
    # the same flow (``CarriedMessage.flow_id``), whatever it binds: a process that
    # dissects only some flows of a capture (``analyzer.parallel``'s light split) then
    # writes the same rows, so its decodes do not count as cross-flow state.
    flow_local: ClassVar[bool] = False

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        """Cheap look at a payload no binding claimed; default: not ours."""
        return Verdict.NO

    @classmethod
    @abstractmethod
    def new_state(cls, options: SessionOptions) -> Any:
        """Per-scope state (one per capture + carrier server endpoint); ``options`` as for
        ``Dissector.session``."""

    @classmethod
    @abstractmethod
    def decode(cls, state: Any, bindings: Bindings, msg: CarriedMessage, hint: str) -> list[Record]:
        """Rows (``msg.record``) and anomalies (``msg.anomaly``) for one message."""

    @classmethod
    def decoder(cls) -> PayloadDecode:
        """What the dispatcher calls for each message: a callable taking (state, bindings,
        msg, hint), as ``decode`` does; default: ``decode`` itself.  Asked once per scope,
        when its first message is decoded (not when the scope is made: a dissector whose
        ``decode`` only delegates to a module imported by the first message hands out that
        module's function here, which spares a Python call per message).  It must decode
        exactly as ``decode`` does."""
        return cls.decode


def delegated_decoder(cls: type[PayloadDissector], owner: type[PayloadDissector],
                      load: Callable[[], PayloadDecode]) -> PayloadDecode:
    """``decoder()`` for a dissector ``owner`` whose ``decode`` only calls the function
    ``load()`` returns (a decoder module imported by the first message): that function,
    so the dispatcher skips the shell; but ``cls.decode`` for a subclass that decodes
    otherwise (it overrides ``decode`` and not ``decoder``)."""
    if cls.decode.__func__ is not owner.decode.__func__:  # type: ignore[attr-defined]
        return cls.decode
    return load()

# The most subjects a scope's ``verdicts`` holds (``CarrierScope``): replies go to a new
# ``_INBOX.<id>.<n>`` subject per request, so without a bound the dict would grow with the
# capture, outside the memory budget.  A fast path that must add one at the bound empties
# the dict first; the scope's own bindings add none past it.
MAX_VERDICTS = 4096


class CarrierScope(Protocol):
    """What a carrier session is given for one flow (``CarrierSession.carry``): the
    payload dispatch of its server's scope (``dissectors.dispatch``).

    ``offer`` returns the rows decoded from one message; they become the children of the
    carrier's row.  The other members are for a compiled fast path that must know, without
    building a ``CarriedMessage``, whether a message may be a payload dissector's:
    ``first_bytes`` (256 flags, then a prefix table:
    ``dissectors.dispatch.probe_first_bytes``), ``verdicts`` (subject -> "a binding covers
    it", at most ``MAX_VERDICTS``; kept true as bindings change: a subject's own entry set
    or dropped, the whole dict emptied in place when a pattern is added),
    ``bound(subject)`` and ``probed(payload)``."""

    @property
    def flow_id(self) -> int: ...
    @property
    def first_bytes(self) -> bytes: ...
    @property
    def verdicts(self) -> dict[str, bool]: ...
    def bound(self, subject: str) -> bool: ...
    def probed(self, payload: bytes) -> bool: ...
    def offer(self, msg: CarriedMessage) -> list[Record]: ...


class CarrierSession(ABC):
    """Capability of a ``Session`` whose messages carry other protocols (NATS carries
    STAN, Liftbridge, JetStream API bodies, plugins).  ``Dissector.name`` is what a
    ``PayloadDissector.carriers`` names.  When a flow's server has payload dissectors
    for this carrier, ``carry`` is called once, right after the session is made and
    before any byte is fed: the session then builds a ``CarriedMessage`` for each whole
    message and makes the rows ``scope.offer`` returns its row's children."""

    @abstractmethod
    def carry(self, scope: CarrierScope) -> None:
        """Offer every whole message of this flow to ``scope``."""


# -- columnar fast paths ---------------------------------------------------------------


class ColumnAccumulator(Protocol):
    """Rows of one table gathered from many sessions' column buffers, in output order,
    until the pipeline turns them into one Arrow batch.  ``move`` takes the first ``n``
    rows out of a session's buffer and gives them the envelope: flow id, the first row's
    record id (the next ``n - 1`` follow it), direction, stream id and endpoints."""

    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def move(self, rows: Any, n: int, flow_id: int, record_id: int, direction: int,
             stream_id: int | None, src_ip: str, src_port: int, dst_ip: str,
             dst_port: int) -> None: ...
    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        """The rows moved so far as one batch in ``schema``'s column order (then empty)."""
        ...


class ColumnFormat(Protocol):
    """The layout of one protocol's column buffers (one object per format)."""

    def accumulator(self) -> ColumnAccumulator: ...


class ColumnBatch(NamedTuple):
    """A record standing for ``n`` rows of ``table`` in ``direction`` that wait, in order,
    in the session's column buffer ``rows`` (laid out as ``fmt`` says): the pipeline
    gives them their envelope and record ids where this record stands among the
    session's records, and hands them to the sink as Arrow batches.  ``rows`` is None
    when the session was asked to count rows only (another process writes this flow).
    ``children``: records decoded from the *last* row's payload (``Record.children`` of
    a row that went to the columns: a carried message), given ids after it."""

    table: str
    direction: Direction
    n: int
    rows: Any
    fmt: ColumnFormat
    children: list[Record] | tuple[()] = ()


class ColumnarSession(ABC):
    """Capability of a ``Session`` with a compiled fast path that fills column buffers
    and returns ``ColumnBatch`` records (NATS does).  The pipeline calls ``columnar`` once,
    right after ``CarrierSession.carry`` (if any) and before any byte is fed, when its
    sink takes Arrow batches and the run allows fast paths; otherwise the session returns
    plain ``Record`` objects.  The rows must be exactly those the plain path gives."""

    @abstractmethod
    def columnar(self, keep_rows: bool) -> None:
        """Return ``ColumnBatch`` records from now on (if the fast path is available);
        ``keep_rows`` False: parse and count rows only, ``ColumnBatch.rows`` None."""


# -- helpers for building rows --------------------------------------------------------


class Provenance(Protocol):
    """Anything that knows where its bytes were in the stream: every framing event
    (``Line``, ``Block``, ``Pdu``, ``Oversize``, ``Invalid``, ``Resynced``, ``Dropped``)
    has these six attributes, so it can be passed to ``record_from``/``anomaly_from``."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def ts_first_ns(self) -> int: ...
    @property
    def ts_last_ns(self) -> int: ...
    @property
    def frame_first(self) -> int: ...
    @property
    def frame_last(self) -> int: ...


def record_from(
    table: str,
    direction: Direction,
    values: dict[str, Any],
    first: Provenance,
    last: Provenance | None = None,
) -> Record:
    """A row of ``table`` covering the bytes from ``first`` through ``last`` (two framing
    events, e.g. a header ``Line`` and the body ``Block`` after it; ``last`` defaults to
    ``first``): offsets, times and frames are taken from them."""
    last = first if last is None else last
    return Record(
        table,
        direction,
        first.start,
        last.end,
        first.ts_first_ns,
        last.ts_last_ns,
        first.frame_first,
        last.frame_last,
        values,
    )


def anomaly_from(
    kind: str,
    detail: str,
    direction: Direction,
    first: Provenance,
    last: Provenance | None = None,
) -> Record:
    """An ``anomalies`` row about the bytes from ``first`` through ``last`` (framing
    events).  ``kind`` is ``<dissector name>.<what>`` in snake case, e.g.
    ``redis.protocol_error``; ``detail`` says what was seen and what the session did
    about it (skipped, resynchronised, gave up on the direction)."""
    last = first if last is None else last
    return Record.anomaly(
        kind,
        detail,
        direction,
        first.start,
        last.end,
        first.ts_first_ns,
        last.ts_last_ns,
        first.frame_first,
        last.frame_last,
    )


def payload_fields(prefix: str = "payload", what: str = "payload") -> tuple[Field, ...]:
    """The four columns DESIGN §5 asks for wherever a table keeps message bytes:
    ``<prefix>`` (binary, capped), ``<prefix>_len``, ``<prefix>_sha256`` and
    ``<prefix>_truncated``; ``what`` names the bytes in the descriptions.  Fill them with
    ``payload_values``."""
    return (
        Field(
            prefix, pa.binary(),
            f"The {what} bytes, the first `payload_cap` bytes only (run option, default "
            "4096); null when the bytes were not captured.",
        ),
        Field(f"{prefix}_len", pa.int64(), f"Length of the whole {what} in bytes."),
        Field(
            f"{prefix}_sha256", pa.string(),
            f"Lower-case hex SHA-256 of the whole {what}, computed even when "
            f"`{prefix}` is capped; null when bytes were lost.",
        ),
        Field(
            f"{prefix}_truncated", pa.bool_(),
            f"True when `{prefix}` holds fewer bytes than `{prefix}_len` because of the cap.",
        ),
    )


def payload_values(
    data: bytes | None,
    cap: int | None,
    prefix: str = "payload",
    *,
    nbytes: int | None = None,
    sha256: str | None = None,
) -> dict[str, Any]:
    """Values for the ``payload_fields`` columns.

    ``data`` is the whole payload, or its first bytes when ``nbytes`` (the real length)
    and ``sha256`` (hex digest of the whole, e.g. from a framing ``Block``) are given.
    ``cap`` is the ``payload_cap`` option (None keeps all).  ``data=None`` means the bytes
    were lost: only the length is filled."""
    if data is None:
        return {prefix: None, f"{prefix}_len": nbytes, f"{prefix}_sha256": None,
                f"{prefix}_truncated": None}
    total = len(data) if nbytes is None else nbytes
    if sha256 is None:
        if len(data) != total:
            raise ValueError("payload_values: a partial payload needs its sha256")
        sha256 = hashlib.sha256(data).hexdigest()
    kept = bytes(data) if cap is None or len(data) <= cap else bytes(data[:cap])
    return {
        prefix: kept,
        f"{prefix}_len": total,
        f"{prefix}_sha256": sha256,
        f"{prefix}_truncated": len(kept) < total,
    }


def decode_text(raw: bytes) -> str:
    """Bytes from the wire as a ``string`` column value: UTF-8, with every byte that is
    not valid UTF-8 shown as ``\\xNN`` (lossless to the eye, never raises)."""
    return bytes(raw).decode("utf-8", "backslashreplace")

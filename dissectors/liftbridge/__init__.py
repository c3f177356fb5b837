"""Liftbridge over NATS: envelopes and known-stream plain messages (tables ``liftbridge``,
``liftbridge_entries``).

Strategy: an envelope types itself (its MsgType byte), so no subject knowledge is
needed to decode one: ``probe_payload`` answers YES on the 4-byte magic (chance
collision 2^-32; a look-alike that fails to decode is reported, as Liftbridge itself
would store it as a plain value).  Subjects are learned only for what the envelope
cannot say:

* *stream subjects* — from CreateStream operations (PropagatedRequest), Acks
  (partitionSubject), forwarded publishes (Message.subject) and replicated entries
  (their `subject` header).  A plain NATS message on such a subject is Liftbridge
  stream data without an envelope: it gets a row with ``magic_ok`` = false and a null
  ``msg_type`` (there is no type to report), its value and the stream/partition that
  taught us the subject.  Before the subject is learned such messages are only in
  ``nats`` (we cannot know).
* *which stream a ReplicationResponse / LeaderEpochOffsetResponse answers* — the
  request's subject ``<ns>.<stream>.<partition>.replicate|offset`` names it; the reply
  inbox is bound so the response row carries stream and partition.

Options: ``payload_cap`` (value bytes kept per row, default 4096, None = all).

Layout: this module declares the dissector (the registry loads it on every run) and
keeps its per-scope state; the decoder (``decoder``, with the envelope reader and
``dissectors.proto``) is imported by the first message the dissector is asked about.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cache, cached_property
from typing import TYPE_CHECKING, ClassVar

from dissectors.api import (
    Bindings,
    CarriedMessage,
    PayloadDecode,
    PayloadDissector,
    Record,
    TableSpec,
    Verdict,
    delegated_decoder,
)
from dissectors.liftbridge.magic import MAGIC
from dissectors.liftbridge.table import ENTRIES_TABLE, LIFTBRIDGE_TABLE, MSG_TYPES
from dissectors.options import SessionOptions, read_payload_cap

if TYPE_CHECKING:
    from collections.abc import Callable

    from dissectors.proto.columns import RowsFormat

__all__ = ["ENTRIES_TABLE", "LIFTBRIDGE_TABLE", "MSG_TYPES", "LiftbridgeDissector"]

NAME = "liftbridge"


@cache
def _columns() -> RowsFormat:
    from dissectors.proto.columns import RowsFormat

    return RowsFormat(LIFTBRIDGE_TABLE)


@cache
def _decoder() -> Callable[[LiftbridgeState, Bindings, CarriedMessage, str], list[Record]]:
    """The decoder's ``decode``, imported by the first message (module docstring); once,
    not per message (an import statement cost ~1 µs each time it ran), and bound once (a
    classmethod read from its class is bound again at each read)."""
    from dissectors.liftbridge.decoder import LiftbridgeDecoder

    return LiftbridgeDecoder.decode


class LiftbridgeState:
    def __init__(self, options: SessionOptions) -> None:
        self.payload_cap = read_payload_cap(options, "liftbridge")
        self.stream_subjects: OrderedDict[str, tuple[str, int | None]] = OrderedDict()
        self._options = options

    @cached_property
    def columns(self) -> RowsFormat | None:
        """Rows as columns in a columnar run (``dissectors.proto.columns``): asked by the
        first decode, so a scope that meets no Liftbridge message does not import it."""
        from dissectors.proto.columns import enabled

        return _columns() if enabled(self._options, NAME) else None


class LiftbridgeDissector(PayloadDissector):
    name: ClassVar[str] = NAME
    description: ClassVar[str] = "Liftbridge envelopes (and known-stream plain messages) in NATS"
    carriers: ClassVar[tuple[str, ...]] = ("nats",)
    subjects: ClassVar[tuple[tuple[str, str], ...]] = ()
    tables: ClassVar[tuple[TableSpec, ...]] = (LIFTBRIDGE_TABLE, ENTRIES_TABLE)
    probe_first_bytes: ClassVar[frozenset[int] | None] = frozenset(MAGIC[:1])
    probe_prefixes: ClassVar[tuple[bytes, ...] | None] = (MAGIC,)  # probe_payload's rule

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        return Verdict.YES if payload[:4] == MAGIC else Verdict.NO

    @classmethod
    def new_state(cls, options: SessionOptions) -> LiftbridgeState:
        return LiftbridgeState(options)

    @classmethod
    def decode(
        cls, state: LiftbridgeState, bindings: Bindings, msg: CarriedMessage, hint: str
    ) -> list[Record]:
        return _decoder()(state, bindings, msg, hint)

    @classmethod
    def decoder(cls) -> PayloadDecode:
        return delegated_decoder(cls, LiftbridgeDissector, _decoder)

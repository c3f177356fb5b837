"""NATS Streaming (STAN) dissector: STAN protobufs carried in NATS messages (table ``stan``).

Strategy: STAN payloads have no type tag, so a message's type comes from where it was
sent (protocol-facts §2.1).  Three sources, strongest first:

1. *Learned subjects.*  A ConnectRequest names its heartbeat inbox and its NATS reply
   inbox (→ ConnectResponse); a ConnectResponse names the publish prefix
   (``<pubPrefix>.>`` → PubMsg) and the subscribe/unsubscribe/close/subclose/ping
   subjects; every request's reply inbox gets the matching response type; a
   SubscriptionRequest names the inbox its MsgProto deliveries arrive on; a
   SubscriptionResponse names the ack inbox (→ Ack); a PubMsg's reply (the client's
   ``_STAN.acks.<nuid>``) → PubAck; a Heartbeat's reply → HeartbeatReply.  Learned
   subjects are registered with the dispatcher (``Bindings``), whose scope is one
   capture + NATS server, because the client and the STAN server use different
   connections.  Reply inboxes are not unbound after the first response: the same
   response is seen twice (the server's PUB and the MSG delivering it).
2. *STAN default subjects* (``subjects``): ``_STAN.discover.>`` (ConnectRequest),
   ``_STAN.discover.*.pings``, ``_STAN.pub.*.>``, ``_STAN.sub.*``, ``_STAN.unsub.*``,
   ``_STAN.close.*``, ``_STAN.subclose.*``, ``_STAN.acks.>`` (PubAck) and the legacy
   ``_STAN.subacks.>`` (Ack).  The token after the verb is the cluster ID only on
   v0.20+ servers with new stores, so any one token matches.
3. *Inference* (``probe_payload``): a payload nothing claimed is tried against the
   candidate types (requests when it has a NATS reply, the rest when not); a candidate
   must decode cleanly and look plausible (see ``decode.score``).  Such rows have
   ``inferred`` = true.  This is how a capture that starts after the subscription
   still yields its MsgProto, and how a custom discover prefix is learned: a
   ConnectRequest-looking protobuf on ``<prefix>.<cluster>`` whose reply inbox then
   carries a ConnectResponse makes ``<prefix>.*`` a discover subject for the rest of
   the capture.

Subjects learned from an inferred message carry the inference along (their rows are
``inferred`` too), except where a STAN default subject gives the same type.

Options: ``payload_cap`` (bytes of ``data`` kept per row, default 4096, None = all).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, ClassVar

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
from dissectors.options import SessionOptions, read_payload_cap
from dissectors.stan.table import MSG_TYPES, STAN_TABLE

if TYPE_CHECKING:
    from collections.abc import Callable

    from dissectors.proto.columns import RowsFormat

__all__ = ["MSG_TYPES", "STAN_TABLE", "StanDissector", "StanState"]

NAME = "stan"
DEFAULT_DISCOVER_PREFIX = "_STAN.discover"

# static subject patterns → kind (protocol-facts §2.1)
STATIC_SUBJECTS: tuple[tuple[str, str], ...] = (
    ("_STAN.discover.>", "ConnectRequest"),
    ("_STAN.discover.*.pings", "Ping"),
    ("_STAN.pub.*.>", "PubMsg"),
    ("_STAN.sub.*", "SubscriptionRequest"),
    ("_STAN.unsub.*", "UnsubscribeRequest"),
    ("_STAN.close.*", "CloseRequest"),
    ("_STAN.subclose.*", "SubCloseRequest"),
    ("_STAN.acks.>", "PubAck"),
    ("_STAN.subacks.>", "Ack"),
)
_STATIC_TOKENS = tuple((tuple(p.split(".")), k) for p, k in STATIC_SUBJECTS)

# Probe-found ConnectRequests waiting for their ConnectResponse (reply inbox → prefix).
# Bounded: a capture of many unanswered look-alikes must not grow memory.
MAX_PENDING_DISCOVER = 1024

# The tags a STAN message can start with (``decode.FIRST_BYTES``, which reads them from
# the schemas; tests/stan checks the two agree): written out so that registering the
# dissector, on every run, reads no schema.  The message decoder (``decode``, with
# ``dissectors.proto``) is imported by the first payload that needs it.
FIRST_BYTES = frozenset({8, 10, 16, 18, 24, 26, 34, 40, 42, 48, 50, 56, 58, 64, 72, 80, 82, 88,
                         96, 162})


@cache
def _columns() -> RowsFormat:
    from dissectors.proto.columns import RowsFormat

    return RowsFormat(STAN_TABLE)


@cache
def _decoder() -> Callable[[StanState, Bindings, CarriedMessage, str], list[Record]]:
    """The decoder's ``decode`` (``dissectors.stan.decoder``), imported by the first
    message: a run that meets no STAN reads none of its schemas.  (Once, not per message:
    an import statement cost ~1 µs each time it ran; and bound once, not per message: a
    classmethod read from its class is bound again at each read, ~0.08 µs a message.)"""
    from dissectors.stan.decoder import StanDecoder

    return StanDecoder.decode



class StanState:
    """Per-scope knowledge that the dispatcher's bindings do not hold."""

    def __init__(self, options: SessionOptions) -> None:
        self.payload_cap = read_payload_cap(options, "stan")
        # probe-found ConnectRequests: reply inbox → (discover prefix, heartbeat inbox)
        self.pending_discover: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        # reply inboxes of confirmed discoveries (the response is seen twice)
        self.confirmed: OrderedDict[str, None] = OrderedDict()
        self.discover_prefixes: set[str] = {DEFAULT_DISCOVER_PREFIX}
        self._options = options

    @cached_property
    def columns(self) -> RowsFormat | None:
        """Rows as columns in a columnar run (``dissectors.proto.columns``): asked by the
        first decode, so a scope that meets no STAN message does not import it."""
        from dissectors.proto.columns import enabled

        return _columns() if enabled(self._options, NAME) else None


class StanDissector(PayloadDissector):
    name: ClassVar[str] = NAME
    description: ClassVar[str] = "NATS Streaming (STAN) protobufs carried in NATS messages"
    carriers: ClassVar[tuple[str, ...]] = ("nats",)
    subjects: ClassVar[tuple[tuple[str, str], ...]] = STATIC_SUBJECTS
    tables: ClassVar[tuple[TableSpec, ...]] = (STAN_TABLE,)
    # infer() rejects any other first byte (a tag none of the STAN messages starts with)
    probe_first_bytes: ClassVar[frozenset[int] | None] = FIRST_BYTES
    probe_needs_protobuf: ClassVar[bool] = True  # infer() starts with wire.scan()

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        if not payload:
            return Verdict.NO
        from dissectors.stan.decode import infer

        return Verdict.YES if infer(payload, None) is not None else Verdict.NO

    @classmethod
    def new_state(cls, options: SessionOptions) -> StanState:
        return StanState(options)

    @classmethod
    def decode(
        cls, state: StanState, bindings: Bindings, msg: CarriedMessage, hint: str
    ) -> list[Record]:
        return _decoder()(state, bindings, msg, hint)

    @classmethod
    def decoder(cls) -> PayloadDecode:
        return delegated_decoder(cls, StanDissector, _decoder)

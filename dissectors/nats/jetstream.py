"""JetStream semantics read from NATS subjects: the ack reply subject of a delivery.

A message a JetStream consumer delivers carries, as its reply subject, where the client
acks it; the server encodes the delivery's bookkeeping in that subject (facts from
nats-server ``server/consumer.go`` and the client libraries' ``metadata`` parsers,
restated):

* old form (9 tokens): ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
  seq>.<timestamp>.<pending>``
* newer form (2.9+, 11 or 12 tokens): ``$JS.ACK.<domain>.<account hash>.<stream>.
  <consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<random>]``,
  domain ``_`` when the server has none.

``delivered`` is how many times this message was delivered to the consumer (above 1: a
redelivery), ``timestamp`` the stream's store time in Unix nanoseconds, ``pending`` the
messages left for the consumer after this one.  So lag and redelivery are queries over
the delivery rows.  Parsing is one split and a handful of ``int`` calls; a subject that
does not fit either form fills nothing (the row keeps its ``reply_to``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pyarrow as pa

from dissectors.tables import Field

__all__ = ["ACK_FIELDS", "ACK_PREFIX", "AckForm", "ack_arrays", "parse_ack"]

ACK_PREFIX = "$JS.ACK."
_NO_DOMAIN = "_"
_I64 = pa.int64()
_STR = pa.string()


class AckForm(StrEnum):
    V1 = "v1"  # without domain and account hash
    V2 = "v2"  # with domain and account hash


_WHAT = "MSG/HMSG delivered by a JetStream consumer (reply subject `$JS.ACK...`): "
ACK_FIELDS: tuple[Field, ...] = (
    Field("js_ack_form", _STR, _WHAT + "form of the ack subject, `v1` (`$JS.ACK.<stream>."
          "<consumer>...`) or `v2` (with domain and account hash); null on other rows or "
          "when the reply subject fits neither form."),
    Field("js_domain", _STR, _WHAT + "JetStream domain (v2 form; null when the server "
          "has none, written `_` on the wire)."),
    Field("js_account_hash", _STR, _WHAT + "account hash token (v2 form)."),
    Field("js_stream", _STR, _WHAT + "stream the message is stored in."),
    Field("js_consumer", _STR, _WHAT + "consumer that delivered it."),
    Field("js_delivered", _I64, _WHAT + "delivery count of this message to this consumer "
          "(1 = first delivery, more = redelivery)."),
    Field("js_stream_seq", _I64, _WHAT + "the message's sequence number in the stream."),
    Field("js_consumer_seq", _I64, _WHAT + "the consumer's delivery sequence number."),
    Field("js_timestamp_ns", _I64, _WHAT + "time the stream stored the message (Unix "
          "nanoseconds, from the ack subject)."),
    Field("js_pending", _I64, _WHAT + "messages still pending for the consumer after this "
          "one (consumer lag)."),
)
_NAMES = tuple(f.name for f in ACK_FIELDS)


def parse_ack(reply: str | None) -> dict[str, Any] | None:
    """The ``js_*`` columns of an ack reply subject, or None when it is not one."""
    if not reply or not reply.startswith(ACK_PREFIX):
        return None
    tokens = reply.split(".")
    n = len(tokens)
    if n == 9:
        form, domain, acc, rest = AckForm.V1, None, None, tokens[2:]
    elif n in (11, 12):
        form, domain, acc, rest = AckForm.V2, tokens[2], tokens[3], tokens[4:]
        if domain == _NO_DOMAIN:
            domain = None
    else:
        return None
    try:
        nums = [int(t) for t in rest[2:7]]
    except ValueError:
        return None
    if any(x < 0 for x in nums) or not rest[0] or not rest[1]:
        return None
    return dict(zip(_NAMES, (form.value, domain, acc, rest[0], rest[1], *nums), strict=True))


def ack_arrays(op: pa.Array, reply_to: pa.Array) -> dict[str, pa.Array] | None:
    """The ``js_*`` columns of a batch of ``nats`` rows (compiled fast path), or None
    when no delivery in it has an ack reply subject (the common case: one vectorised
    test)."""
    import pyarrow.compute as pc

    hits = pc.and_(pc.starts_with(reply_to, ACK_PREFIX),
                   pc.is_in(op, pa.array(["MSG", "HMSG"])))
    if not pc.any(hits).as_py():
        return None
    cols: dict[str, list[Any]] = {name: [None] * len(op) for name in _NAMES}
    for i in pc.indices_nonzero(pc.fill_null(hits, False)).to_pylist():
        parsed = parse_ack(reply_to[i].as_py())
        if parsed:
            for name, value in parsed.items():
                cols[name][i] = value
    return {f.name: pa.array(cols[f.name], f.type) for f in ACK_FIELDS}

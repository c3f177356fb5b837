"""JetStream semantics read from NATS messages: the ack reply subject of a delivery
(``js_*`` columns of ``nats``) and the ``$JS.API`` calls (table ``jetstream_api``, below).

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

import json
from enum import StrEnum
from typing import Any, ClassVar

import pyarrow as pa

from dissectors.api import Bindings, CarriedMessage, PayloadDissector, Record
from dissectors.arrowops import call
from dissectors.options import SessionOptions, read_payload_cap
from dissectors.redaction import redact_text
from dissectors.tables import Field, TableSpec, register_table

__all__ = [
    "ACK_FIELDS",
    "ACK_PREFIX",
    "JETSTREAM_API_TABLE",
    "AckForm",
    "JetStreamApiDissector",
    "ack_arrays",
    "parse_ack",
    "parse_api_subject",
]

ACK_PREFIX = "$JS.ACK."
_ACK_BYTES = ACK_PREFIX.encode()
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
    test, after a look for the prefix in the column's bytes that spares most runs even
    that; the kernels are called through ``arrowops.call``, so a run with acks does not
    import ``pyarrow.compute`` either)."""
    data = reply_to.buffers()[2]
    if data is None or _ACK_BYTES not in data.to_pybytes():
        return None
    from pyarrow import _compute

    # typed: an inferred array or scalar imports dateutil (cliutil.skip_pandas_probe)
    deliveries = pa.array(["MSG", "HMSG"], pa.string())
    hits = call("and", call("starts_with", reply_to,
                            options=_compute.MatchSubstringOptions(ACK_PREFIX)),
                call("is_in", op, options=_compute.SetLookupOptions(deliveries)))
    at = call("indices_nonzero", call("coalesce", hits, pa.scalar(False, pa.bool_())))
    if not len(at):
        return None
    cols: dict[str, list[Any]] = {name: [None] * len(op) for name in _NAMES}
    for i in at.to_pylist():
        parsed = parse_ack(reply_to[i].as_py())
        if parsed:
            for name, value in parsed.items():
                cols[name][i] = value
    return {f.name: pa.array(cols[f.name], f.type) for f in ACK_FIELDS}


# -- the JetStream API ($JS.API.*) --------------------------------------------------------
#
# Facts (nats-server ``server/jetstream_api.go``, restated): a JetStream API call is a
# request published to ``$JS.API.<operation>[.<stream>[.<consumer>[.<filter>]]]`` (or
# ``$JS.<domain>.API...`` across domains) with a reply inbox; the response is one JSON
# object with a ``type`` such as ``io.nats.jetstream.api.v1.stream_create_response`` and,
# on failure, ``error: {code: <HTTP-like status>, err_code: <JetStream code>,
# description}``.  ``CONSUMER.MSG.NEXT`` (a pull request) is answered by the messages
# themselves (deliveries, see the ack columns), not by an API response.
#
# Strategy: a payload dissector on the subject pattern; a request binds its reply inbox
# to this dissector (hint ``response:<operation>``) so the response on that exact subject
# is decoded too, then the binding is dropped.  Both the compiled fast path and the
# reference honour bindings, so nothing else changes for the carrier.  A response is
# taken only on the connection that made the request (the hint names its flow), so the
# rows depend on that flow alone (``flow_local``) and a parallel light split stays exact.

API_OPERATIONS = (  # longest first where one is a prefix of another
    "CONSUMER.DURABLE.CREATE", "CONSUMER.LEADER.STEPDOWN", "CONSUMER.MSG.NEXT",
    "CONSUMER.CREATE", "CONSUMER.UPDATE", "CONSUMER.DELETE", "CONSUMER.INFO",
    "CONSUMER.NAMES", "CONSUMER.LIST", "CONSUMER.PAUSE", "CONSUMER.UNPIN",
    "STREAM.LEADER.STEPDOWN", "STREAM.PEER.REMOVE", "STREAM.MSG.DELETE", "STREAM.MSG.GET",
    "STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.INFO", "STREAM.NAMES",
    "STREAM.LIST", "STREAM.PURGE", "STREAM.SNAPSHOT", "STREAM.RESTORE",
    "DIRECT.GET", "META.LEADER.STEPDOWN", "SERVER.REMOVE", "ACCOUNT.PURGE", "INFO",
)
_STREAM_FIRST = {"CONSUMER.NAMES", "CONSUMER.LIST"}  # <stream> only
MAX_JSON_CHARS = 65536  # request/response JSON kept per row (the nats row has the bytes)
_RESPONSE = "response:"

JETSTREAM_API_TABLE = register_table(
    TableSpec(
        "jetstream_api",
        1,
        "One row per JetStream API request (`$JS.API.*`, also `$JS.<domain>.API.*`) and "
        "one per response to it, decoded from NATS messages (the parent row in `nats` "
        "holds the bytes): which stream or consumer was created, updated, deleted or "
        "looked at, and errors with their codes.  A response is found on the request's "
        "reply inbox; `CONSUMER.MSG.NEXT` is answered by deliveries (`js_*` columns of "
        "`nats`), not here.",
        (
            Field("kind", _STR, "`request` or `response`.", False),
            Field("api", _STR, "API operation, e.g. `STREAM.CREATE`, `CONSUMER.INFO`, "
                  "`CONSUMER.MSG.NEXT`; `UNKNOWN` for a `$JS.API.` subject msgcap does not "
                  "know.", False),
            Field("domain", _STR, "JetStream domain of a `$JS.<domain>.API` request."),
            Field("stream", _STR, "Stream named in the request subject (or, for a "
                  "response, the stream its config/info names)."),
            Field("consumer", _STR, "Consumer named in the request subject (or in the "
                  "response's info)."),
            Field("filter_subject", _STR, "`CONSUMER.CREATE.<stream>.<consumer>.<filter>`: "
                  "the filter subject in the request subject."),
            Field("request_subject", _STR, "The `$JS.API...` subject of the request (a "
                  "response row: of the request it answers)."),
            Field("reply_to", _STR, "Request: the reply inbox the response goes to."),
            Field("response_type", _STR, "Response: its `type` "
                  "(`io.nats.jetstream.api.v1...`)."),
            Field("error_code", pa.int32(), "Response with `error`: `code` (HTTP-like "
                  "status, e.g. 404)."),
            Field("err_code", pa.int32(), "Response with `error`: `err_code`, JetStream's "
                  "own error number (e.g. 10059 stream not found)."),
            Field("error_description", _STR, "Response with `error`: `description`."),
            Field("json", _STR, "The request or response JSON as sent (first 65,536 "
                  "characters), through the redaction gate."),
            Field("bad_json", pa.bool_(), "True when the payload is not a JSON object "
                  "(an empty request payload is not bad).", False),
        ),
    )
)


def parse_api_subject(subject: str) -> dict[str, Any] | None:
    """Columns of a ``$JS.API...`` / ``$JS.<domain>.API...`` request subject."""
    tokens = subject.split(".")
    if len(tokens) < 3 or tokens[0] != "$JS":
        return None
    domain = None
    if tokens[1] == "API":
        rest = tokens[2:]
    elif len(tokens) >= 4 and tokens[2] == "API":
        domain, rest = tokens[1], tokens[3:]
    else:
        return None
    joined = ".".join(rest)
    for op in API_OPERATIONS:
        if joined == op or joined.startswith(op + "."):
            args = rest[op.count(".") + 1 :]
            break
    else:
        return {"api": "UNKNOWN", "domain": domain}
    v: dict[str, Any] = {"api": op, "domain": domain}
    if args:
        v["stream"] = args[0]
    if len(args) >= 2 and op not in _STREAM_FIRST and op.startswith("CONSUMER."):
        v["consumer"] = args[1]
        if len(args) >= 3:
            v["filter_subject"] = ".".join(args[2:])
    return v


def _json_columns(payload: bytes, v: dict[str, Any]) -> dict[str, Any] | None:
    """Fill ``json``/``bad_json``; the parsed object, if any."""
    txt = payload.decode("utf-8", "replace")
    v["json"] = redact_text(txt[:MAX_JSON_CHARS]) if txt else None
    v["bad_json"] = False
    if not payload:
        return None
    try:
        obj = json.loads(payload)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        v["bad_json"] = True
        return None
    return obj


class JetStreamApiDissector(PayloadDissector):
    name: ClassVar[str] = "jetstream_api"
    description: ClassVar[str] = "JetStream API requests ($JS.API.*) and their responses"
    carriers: ClassVar[tuple[str, ...]] = ("nats",)
    subjects: ClassVar[tuple[tuple[str, str], ...]] = (("$JS.API.>", "request"),
                                                       ("$JS.*.API.>", "request"))
    tables: ClassVar[tuple[TableSpec, ...]] = (JETSTREAM_API_TABLE,)
    probe_first_bytes: ClassVar[frozenset[int] | None] = frozenset()  # never probed
    flow_local: ClassVar[bool] = True  # a response counts only on its request's flow

    @classmethod
    def new_state(cls, options: SessionOptions) -> None:
        # no payload bytes are kept here, but a bad run option fails as in every session
        read_payload_cap(options, cls.name)
        return None

    @classmethod
    def decode(cls, state: None, bindings: Bindings, msg: CarriedMessage,
               hint: str) -> list[Record]:
        if hint.startswith(_RESPONSE):
            api, flow, req_subject = hint[len(_RESPONSE):].split(" ", 2)
            if str(msg.flow_id) != flow:  # the inbox on another connection: not ours
                return []
            bindings.unbind_subject(msg.subject)
            v: dict[str, Any] = {"kind": "response", "api": api,
                                 "request_subject": req_subject or None}
            asked = parse_api_subject(req_subject) or {}
            for col in ("domain", "stream", "consumer"):  # what the request named
                if asked.get(col) is not None:
                    v[col] = asked[col]
            obj = _json_columns(msg.payload, v)
            if obj is not None:
                if isinstance(obj.get("type"), str):
                    v["response_type"] = obj["type"]
                err = obj.get("error")
                if isinstance(err, dict):
                    for col, key in (("error_code", "code"), ("err_code", "err_code")):
                        val = err.get(key)
                        if type(val) is int and -2**31 <= val < 2**31:
                            v[col] = val
                    if isinstance(err.get("description"), str):
                        v["error_description"] = err["description"]
                cfg = obj.get("config")
                if isinstance(cfg, dict) and isinstance(cfg.get("name"), str):
                    v["stream" if "stream" in api.lower() else "consumer"] = cfg["name"]
                if isinstance(obj.get("stream_name"), str):
                    v["stream"] = obj["stream_name"]
                if isinstance(obj.get("name"), str) and api.startswith("CONSUMER."):
                    v["consumer"] = obj["name"]
            return [msg.record(JETSTREAM_API_TABLE.name, v)]
        v = parse_api_subject(msg.subject) or {"api": "UNKNOWN"}
        v.update(kind="request", request_subject=msg.subject, reply_to=msg.reply_to)
        _json_columns(msg.payload, v)
        if msg.reply_to and v["api"] != "CONSUMER.MSG.NEXT":
            bindings.bind_subject(msg.reply_to, cls.name,
                                  f"{_RESPONSE}{v['api']} {msg.flow_id} {msg.subject}")
        return [msg.record(JETSTREAM_API_TABLE.name, v)]

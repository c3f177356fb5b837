"""The ``redis`` and ``redis_pubsub`` tables.

``redis`` has one row per RESP message, like Wireshark's packet list with the ``resp``
filter: every command a client sent and every reply or push the server sent, in stream
order per direction.  ``redis_pubsub`` has one row per publish/subscribe event, each a
child of the ``redis`` row it was read from (``parent_record_id``), so "who published
what on which channel, and which subscriber got it" is one query.
"""

from __future__ import annotations

import pyarrow as pa
from dissectors.api import Field, TableSpec, payload_fields

__all__ = ["REDIS", "REDIS_PUBSUB"]

_STR = pa.string()
_I64 = pa.int64()
_BOOL = pa.bool_()

REDIS = TableSpec(
    "redis",
    1,
    "One row per RESP message (Redis serialization protocol, RESP2 and RESP3): each command "
    "a client sent (multibulk or inline) and each reply or push the server sent, in stream "
    "order per direction. Outside pub/sub mode the n-th reply answers the n-th command of "
    "the connection (`msg_index`). Malformed bytes produce `anomalies` rows (kinds "
    "`redis.*`).",
    (
        Field(
            "kind", _STR,
            "`command` (client to server), `reply` (an answer), or `push` (server-initiated: "
            "a RESP3 push, or a pub/sub message on a RESP2 connection in subscribe mode).",
            False,
        ),
        Field(
            "resp_type", _STR,
            "Wire type of the message: `array`, `bulk_string`, `simple_string`, "
            "`simple_error`, `integer`, `null`, `boolean`, `double`, `big_number`, "
            "`bulk_error`, `verbatim_string`, `map`, `set`, `push`, or `inline` (an inline "
            "command: words separated by blanks, no RESP framing).",
            False,
        ),
        Field(
            "msg_index", _I64,
            "0-based number of this message among the messages of its direction.", False,
        ),
        Field(
            "command", _STR,
            "Commands: the command name in upper case (`SET`, `PUBLISH`, ...); null for an "
            "empty multibulk (`*0`).",
        ),
        Field(
            "args", pa.list_(pa.binary()),
            "Commands: the arguments after the name, as sent (each capped at `payload_cap` "
            "bytes; at most 1024 kept).",
        ),
        Field("arg_count", _I64, "Commands: number of arguments after the name."),
        Field(
            "args_truncated", _BOOL,
            "Commands: true when an argument was capped or arguments were left out of `args`.",
        ),
        Field(
            "text", _STR,
            "simple_string: the string; verbatim_string: the text after its format prefix; "
            "big_number: the digits. Invalid UTF-8 is shown as \\xNN escapes.",
        ),
        Field(
            "error", _STR,
            "simple_error / bulk_error: the error message, e.g. `ERR unknown command 'FOO'`.",
        ),
        Field(
            "error_code", _STR,
            "simple_error / bulk_error: the leading upper-case word (ERR, WRONGTYPE, MOVED, "
            "NOAUTH, ...), null if there is none.",
        ),
        Field("integer", _I64, "integer: the value."),
        Field("double", pa.float64(), "double: the value (inf, -inf and nan included)."),
        Field("boolean", _BOOL, "boolean: the value."),
        *payload_fields("bulk", "bulk string (bulk_string, bulk_error or verbatim_string)"),
        Field("verbatim_format", _STR, "verbatim_string: the three-letter format, `txt` or `mkd`."),
        Field(
            "elements", _I64,
            "array / set / push: number of elements; map: number of key-value pairs.",
        ),
        Field(
            "is_null", _BOOL,
            "True for a null: RESP3 `_`, or the RESP2 null bulk string (`$-1`) / null array "
            "(`*-1`); false otherwise.", False,
        ),
        Field(
            "attributes", _I64,
            "RESP3: number of attribute pairs (`|`) sent before the value; null when none.",
        ),
        Field(
            "summary", _STR,
            "One line the way redis-cli shows it: `SET key value`, `OK`, `(integer) 2`, "
            "`(error) ERR ...`, `\"value\"`, `(nil)`, `[\"message\", \"chan\", \"hi\"]`; at "
            "most 200 characters.",
        ),
    ),
)

REDIS_PUBSUB = TableSpec(
    "redis_pubsub",
    1,
    "One row per Redis publish/subscribe event: a PUBLISH or SPUBLISH a client sent, a "
    "message the server delivered (`message`, `pmessage`, `smessage`), or a subscription "
    "change the server confirmed (`subscribe`, `psubscribe`, `ssubscribe` and the "
    "`unsubscribe` forms, one per channel). Each row is a child of the `redis` row it was "
    "read from (`parent_record_id`).",
    (
        Field(
            "event", _STR,
            "publish, spublish, message, pmessage, smessage, subscribe, psubscribe, "
            "ssubscribe, unsubscribe, punsubscribe or sunsubscribe.",
            False,
        ),
        Field(
            "channel", _STR,
            "The channel (shard channel for s* events); null for pattern subscriptions and "
            "for an unsubscribe-from-all with no subscriptions left.",
        ),
        Field(
            "pattern", _STR,
            "pmessage: the pattern that matched; psubscribe / punsubscribe: the pattern.",
        ),
        Field(
            "subscriptions", _I64,
            "Subscription changes: how many channels and patterns the connection is "
            "subscribed to afterwards (as the server counts them).",
        ),
        *payload_fields("payload", "message"),
    ),
)

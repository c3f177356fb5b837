"""The ``stan`` table: one row per NATS Streaming message carried in a NATS message.

Columns are grouped by the STAN messages that carry them (protocol-facts §2.2).  For
the columns of the row's own message type, a field that is not on the wire holds the
proto3 default the receiver decodes (0, false, empty string or bytes), because that is
what the peer acted on; columns of other message types are null.  Exceptions: `crc32`
is null when the field is absent (`crc_status` = absent), and a row whose protobuf was
damaged (`malformed`) holds only the fields decoded before the damage.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.payload import decoded_fields
from dissectors.tables import TS, Field, TableSpec, register_table

__all__ = ["MSG_TYPES", "STAN_TABLE"]

MSG_TYPES = (
    "ConnectRequest",
    "ConnectResponse",
    "SubscriptionRequest",
    "SubscriptionResponse",
    "UnsubscribeRequest",
    "CloseRequest",
    "CloseResponse",
    "PubMsg",
    "PubAck",
    "MsgProto",
    "Ack",
    "Ping",
    "PingResponse",
    "Heartbeat",
    "HeartbeatReply",
)

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()
_BIN = pa.binary()

STAN_TABLE = register_table(
    TableSpec(
        "stan",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: payload_decoded columns
        "One row per NATS Streaming (STAN) protocol message, decoded from the payload of a "
        "NATS PUB/HPUB/MSG/HMSG (`parent_record_id` = that `nats` row; a message published "
        "once and delivered to a subscriber gives two rows, one per NATS operation). STAN "
        "payloads carry no type tag: the type comes from the subject (STAN default subjects, "
        "subjects learned from ConnectRequest/ConnectResponse/SubscriptionRequest/"
        "SubscriptionResponse traffic, the reply inbox of the request that asked for a "
        "response) or, with `inferred` = true, from trying the candidate types. Damaged "
        "protobuf gives a row flagged `malformed` plus an `anomalies` row (kinds `stan.*`).",
        (
            Field(
                "msg_type", _STR,
                "STAN message type: ConnectRequest, ConnectResponse, SubscriptionRequest, "
                "SubscriptionResponse, UnsubscribeRequest, CloseRequest, CloseResponse, PubMsg, "
                "PubAck, MsgProto, Ack, Ping, PingResponse, Heartbeat (the server's empty "
                "request on the client's heartbeat inbox) or HeartbeatReply (the client's empty "
                "reply).", False,
            ),
            Field(
                "typed_by", _STR,
                "How msg_type was decided: `default_subject` (a STAN default subject such as "
                "`_STAN.pub.<X>.<channel>`), `learned` (a subject or reply inbox learned from "
                "earlier STAN messages in this capture and NATS server), `inference` (no subject "
                "knowledge: the payload was tried against the candidate types).", False,
            ),
            Field(
                "inferred", _BOOL,
                "True when the type rests on inference: typed_by = inference, or a subject "
                "learned from a message that was itself inferred (e.g. MsgProto on the inbox "
                "of an inferred SubscriptionRequest).", False,
            ),
            Field(
                "inferred_alternatives", pa.list_(_STR),
                "For inferred rows: other message types the payload fitted equally well (empty "
                "list when the choice was unique); null when not inferred.",
            ),
            Field(
                "malformed", _BOOL,
                "True when the protobuf could not be decoded to its end (truncated, wrong wire "
                "type, bad length, ...) or a Heartbeat/HeartbeatReply was not empty; the row "
                "then holds only what was decoded before the problem.", False,
            ),
            Field(
                "decode_error", _STR,
                "What was wrong with the payload, with its byte offset; null when decoding "
                "succeeded.",
            ),
            Field(
                "unknown_fields", pa.list_(_STR),
                "Protobuf field numbers present on the wire but not in the message type "
                "(skipped, as the Go peers do); empty when none.",
            ),
            Field(
                "sub_close", _BOOL,
                "UnsubscribeRequest: true when sent to the subCloseRequests subject (close the "
                "subscription, keep the durable), false for a real unsubscribe; null when not "
                "known (typed by inference).",
            ),
            # --- identities
            Field(
                "client_id", _STR,
                "clientID of ConnectRequest, PubMsg, SubscriptionRequest, UnsubscribeRequest, "
                "CloseRequest.",
            ),
            Field(
                "conn_id", _BIN,
                "connID of ConnectRequest, PubMsg, Ping, exact bytes (stan.go sends an ASCII "
                "NUID; cast to string to read it).",
            ),
            Field(
                "guid", _STR,
                "PubMsg / PubAck: the publish GUID that pairs a PubMsg with its PubAck.",
            ),
            # --- channel and message
            Field(
                "channel", _STR,
                "STAN channel (the `subject` protobuf field, without any prefix) of PubMsg, "
                "MsgProto, Ack, SubscriptionRequest, UnsubscribeRequest.",
            ),
            Field(
                "reply", _STR,
                "PubMsg / MsgProto: the STAN-level `reply` field (not the NATS reply).",
            ),
            Field(
                "sequence", _I64,
                "MsgProto / Ack: message sequence in the channel. Protobuf uint64: a value above "
                "2^63-1 cannot be stored in int64 and gives null plus a `stan.uint64_overflow` "
                "anomaly holding the exact value.",
            ),
            Field(
                "timestamp", TS,
                "MsgProto: the server's receive time (Unix nanoseconds on the wire), UTC.",
            ),
            Field("redelivered", _BOOL, "MsgProto: the server redelivers this message."),
            Field("redelivery_count", _I64, "MsgProto: redeliveryCount (protobuf uint32)."),
            Field("data_len", _I64, "PubMsg / MsgProto: size of `data` in bytes."),
            Field(
                "data_sha256", _STR,
                "PubMsg / MsgProto: lower-case hex SHA-256 of the whole data.",
            ),
            Field(
                "data", _BIN,
                "PubMsg / MsgProto: the data bytes, at most `payload_cap` (option, default 4096; "
                "shared with the nats table).",
            ),
            Field(
                "data_truncated", _BOOL,
                "True when `data` holds fewer bytes than data_len (cap).",
            ),
            *decoded_fields("stan", payload="data", truncated="data_truncated",
                            subject="channel"),
            Field(
                "crc32", _I64,
                "MsgProto: the CRC32 field (protobuf uint32); null when not on the wire.",
            ),
            Field(
                "crc_status", _STR,
                "MsgProto: `ok` when crc32 equals the IEEE CRC-32 of data, `mismatch` when not "
                "(also a `stan.crc_mismatch` anomaly), `absent` when the field is not on the wire.",
            ),
            Field(
                "pub_sha256", _BIN,
                "PubMsg: the `sha256` field (10) as sent (no known client fills it); empty when "
                "absent.",
            ),
            Field(
                "pub_sha256_status", _STR,
                "PubMsg: `ok` when pub_sha256 equals SHA-256 of data, `mismatch` when not, "
                "`absent` when the field is empty.",
            ),
            # --- subscriptions
            Field("q_group", _STR, "SubscriptionRequest: queue group (qGroup)."),
            Field(
                "inbox", _STR,
                "SubscriptionRequest: the client's delivery inbox (where MsgProto arrive); "
                "UnsubscribeRequest: the inbox identifying the subscription.",
            ),
            Field("durable_name", _STR, "SubscriptionRequest / UnsubscribeRequest: durable name."),
            Field("max_in_flight", _I32, "SubscriptionRequest: maxInFlight."),
            Field("ack_wait_secs", _I32, "SubscriptionRequest: ackWaitInSecs (seconds)."),
            Field(
                "start_position", _STR,
                "SubscriptionRequest: startPosition name (NewOnly, LastReceived, TimeDeltaStart, "
                "SequenceStart, First); the number in decimal when it is not one of these.",
            ),
            Field(
                "start_sequence", _I64,
                "SubscriptionRequest: startSequence (protobuf uint64; overflow as for sequence).",
            ),
            Field(
                "start_time_delta_ns", _I64,
                "SubscriptionRequest: startTimeDelta, how far back to start, in nanoseconds "
                "(a Go time.Duration in stan.go).",
            ),
            Field(
                "ack_inbox", _STR,
                "SubscriptionResponse: the subject the client sends its Acks to (chosen by "
                "the server).",
            ),
            # --- connection
            Field(
                "heartbeat_inbox", _STR,
                "ConnectRequest: the client's inbox for server heartbeats.",
            ),
            Field(
                "protocol", _I32,
                "ConnectRequest / ConnectResponse: protocol version (1 = with pings).",
            ),
            Field(
                "ping_interval", _I32,
                "ConnectRequest / ConnectResponse: ping interval (seconds; stan.go's tests use "
                "negative values for milliseconds).",
            ),
            Field(
                "ping_max_out", _I32,
                "ConnectRequest / ConnectResponse: pings without answer before the connection is "
                "declared lost.",
            ),
            Field(
                "pub_prefix", _STR,
                "ConnectResponse: prefix of publish subjects (`<pubPrefix>.<channel>`).",
            ),
            Field("sub_requests", _STR, "ConnectResponse: subject for SubscriptionRequests."),
            Field("unsub_requests", _STR, "ConnectResponse: subject for UnsubscribeRequests."),
            Field("close_requests", _STR, "ConnectResponse: subject for CloseRequests."),
            Field(
                "sub_close_requests", _STR,
                "ConnectResponse: subject for subscription-close requests (UnsubscribeRequest).",
            ),
            Field("ping_requests", _STR, "ConnectResponse: subject for Pings."),
            Field("public_key", _STR, "ConnectResponse: publicKey (field 100)."),
            Field(
                "error", _STR,
                "Error text of ConnectResponse, PubAck, SubscriptionResponse, CloseResponse, "
                "PingResponse (empty string: no error).",
            ),
        ),
    )
)

"""The ``liftbridge`` table (one row per envelope or known-stream plain message carried in
a NATS message) and its child table ``liftbridge_entries`` (one row per message-set
entry of a ReplicationResponse).

Columns are grouped by the message types that fill them (protocol-facts §3).  As in
``stan``: for the row's own message type, a protobuf field that is not on the wire
holds the proto3 default the receiver decodes, except timestamps (null when absent:
a 1970 timestamp would be invented); other types' columns are null; a `malformed` row
holds only what was decoded before the damage.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.payload import decoded_fields
from dissectors.tables import TS, Field, TableSpec, register_table

__all__ = ["ENTRIES_TABLE", "LIFTBRIDGE_TABLE", "MSG_TYPES"]

# envelope MsgType → name (protocol-facts §3.1)
MSG_TYPES = (
    "Publish",
    "Ack",
    "ReplicationRequest",
    "ReplicationResponse",
    "RaftJoinRequest",
    "RaftJoinResponse",
    "LeaderEpochOffsetRequest",
    "LeaderEpochOffsetResponse",
    "PropagatedRequest",
    "PropagatedResponse",
    "ServerInfoRequest",
    "ServerInfoResponse",
    "PartitionStatusRequest",
    "PartitionStatusResponse",
    "PartitionNotification",
)

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()
_BIN = pa.binary()
_HEADERS = pa.map_(_STR, _BIN)

_VALUE_COLUMNS = (
    Field("value_len", _I64, "Size of the message value in bytes (null for a null value)."),
    Field("value_sha256", _STR, "Lower-case hex SHA-256 of the whole value."),
    Field(
        "value", _BIN,
        "The value bytes, at most `payload_cap` (option, default 4096; shared with nats).",
    ),
    Field("value_truncated", _BOOL, "True when `value` holds fewer bytes than value_len (cap)."),
)

LIFTBRIDGE_TABLE = register_table(
    TableSpec(
        "liftbridge",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: payload_decoded columns
        "One row per Liftbridge envelope (magic B9 0E 43 B4) carried in a NATS message "
        "payload, and one per plain (non-envelope) message on a subject known to be a "
        "Liftbridge stream subject (`magic_ok` = false, `msg_type` null). `parent_record_id` "
        "is the carrying `nats` row (a message published once and delivered once gives two "
        "rows). Known stream subjects are learned in the capture (CreateStream operations, "
        "acks, forwarded publishes, replicated entries); plain messages seen before that are "
        "only in `nats`. ReplicationResponse entries are child rows in `liftbridge_entries`. "
        "Problems are `anomalies` rows (kinds `liftbridge.*`).",
        (
            Field(
                "magic_ok", _BOOL,
                "True: the payload starts with the envelope magic B9 0E 43 B4. False: a plain "
                "message on a known stream subject, stored by Liftbridge as the value as is.",
                False,
            ),
            Field("version", _I32, "Envelope version byte (0 is the only version)."),
            Field(
                "header_len", _I32,
                "Envelope HeaderLen byte: where the payload starts (8, or 12 with a CRC).",
            ),
            Field("flags", _I32, "Envelope flags byte (bit 0: CRC-32C present)."),
            Field("msg_type_code", _I32, "Envelope MsgType byte as sent."),
            Field(
                "msg_type", _STR,
                "MsgType name: Publish, Ack, ReplicationRequest, ReplicationResponse, "
                "RaftJoinRequest, RaftJoinResponse, LeaderEpochOffsetRequest, "
                "LeaderEpochOffsetResponse, PropagatedRequest, PropagatedResponse, "
                "ServerInfoRequest, ServerInfoResponse, PartitionStatusRequest, "
                "PartitionStatusResponse, PartitionNotification; null for an unknown code "
                "(see msg_type_code) and for plain stream messages.",
            ),
            Field(
                "crc32c", _I64,
                "The envelope's CRC-32C (big-endian u32 at bytes 8..11) when flag bit 0 is set.",
            ),
            Field(
                "crc_status", _STR,
                "`ok` when crc32c equals the CRC-32C (Castagnoli) of the payload after the "
                "header, `mismatch` when not (plus a `liftbridge.crc_mismatch` anomaly), "
                "`absent` when the flag is clear (what every Go marshaller writes).",
            ),
            Field(
                "payload_len", _I64,
                "Bytes after the envelope header (the protobuf, or the ReplicationResponse "
                "body); for plain messages the whole NATS payload.",
            ),
            Field(
                "malformed", _BOOL,
                "True when the envelope or its payload could not be decoded to the end "
                "(short header, bad HeaderLen, unknown version or type, damaged protobuf or "
                "message set); the row holds what was decoded before the problem.", False,
            ),
            Field("decode_error", _STR, "What was wrong, with its byte offset; null if nothing."),
            Field(
                "unknown_fields", pa.list_(_STR),
                "Protobuf field numbers not in the message type (dotted for nested messages); "
                "skipped as the Go peers do.",
            ),
            # --- Publish: api.proto Message
            Field(
                "offset", _I64,
                "Publish: Message.offset, the expected offset for optimistic concurrency (-1 "
                "from go-liftbridge); Ack: offset assigned; ReplicationRequest: the follower's "
                "fetch offset.",
            ),
            Field("key", _BIN, "Publish: Message.key."),
            *_VALUE_COLUMNS,
            *decoded_fields("liftbridge", payload="value", truncated="value_truncated"),
            Field(
                "timestamp", TS,
                "Publish: Message.timestamp (Unix ns on the wire), UTC; null when not set "
                "(go-liftbridge's direct publishes leave it empty).",
            ),
            Field(
                "stream", _STR,
                "Stream name: Message.stream, Ack.stream, PartitionStatusRequest / "
                "PartitionNotification stream, the stream of a PropagatedRequest operation; "
                "for ReplicationRequest/Response and LeaderEpochOffsetRequest/Response taken "
                "from the request's `<ns>.<stream>.<partition>.replicate|offset` subject; for "
                "plain messages from what taught us the subject (may be empty).",
            ),
            Field(
                "partition", _I32,
                "Partition number (same sources as `stream`).",
            ),
            Field(
                "subject", _STR,
                "Publish: Message.subject (set by the API server when it forwards a publish); "
                "plain messages: the NATS subject they were published to.",
            ),
            Field("reply_subject", _STR, "Publish: Message.replySubject."),
            Field("headers", _HEADERS, "Publish: Message.headers (map of name to bytes)."),
            Field("ack_inbox", _STR, "Publish / Ack: the subject the Ack is published to."),
            Field("correlation_id", _STR, "Publish / Ack: correlationId pairing them."),
            Field("ack_policy", _STR, "Publish / Ack: AckPolicy name (LEADER, ALL, NONE)."),
            Field(
                "value_decoded_as", _STR,
                "Publish to the internal `<ns>.activity` / `<ns>.cursors` streams: "
                "`ActivityStreamEvent` / `Cursor` when the value decoded as such.",
            ),
            Field("value_json", _STR, "The decoded internal value as JSON (see value_decoded_as)."),
            # --- Ack
            Field("partition_subject", _STR, "Ack: partitionSubject (a stream subject)."),
            Field(
                "msg_subject", _STR,
                "Ack: msgSubject, the subject the message was published to.",
            ),
            Field("reception_timestamp", TS, "Ack: when the leader received the message, UTC."),
            Field("commit_timestamp", TS, "Ack: when the message was committed, UTC."),
            Field(
                "ack_error", _STR,
                "Ack: ackError name (OK, UNKNOWN, INCORRECT_OFFSET, TOO_LARGE, ENCRYPTION).",
            ),
            # --- internal RPCs
            Field("replica_id", _STR, "ReplicationRequest: replicaID of the follower."),
            Field(
                "leader_epoch", _I64,
                "ReplicationRequest / LeaderEpochOffsetRequest / ReplicationResponse: leader "
                "epoch (protobuf or wire uint64; above 2^63-1: null plus a "
                "`liftbridge.uint64_overflow` anomaly).",
            ),
            Field(
                "high_watermark", _I64,
                "ReplicationResponse: the leader's high watermark (-1: none).",
            ),
            Field(
                "entry_count", _I32,
                "ReplicationResponse: message-set entries found (one `liftbridge_entries` child "
                "row each).",
            ),
            Field("end_offset", _I64, "LeaderEpochOffsetResponse: endOffset."),
            Field("node_id", _STR, "RaftJoinRequest: nodeID."),
            Field("node_addr", _STR, "RaftJoinRequest: nodeAddr."),
            Field(
                "op", _STR,
                "PropagatedRequest / PropagatedResponse: Op name (CREATE_STREAM, SHRINK_ISR, ...).",
            ),
            Field(
                "op_json", _STR,
                "PropagatedRequest: the operation message that is set (createStreamOp, "
                "shrinkISROp, ...) as JSON {field: value}, bytes base64.",
            ),
            Field(
                "replica", _STR,
                "ShrinkISROp replicaToRemove / ExpandISROp replicaToAdd / ReportLeaderOp replica.",
            ),
            Field("leader", _STR, "ShrinkISROp / ExpandISROp / ReportLeaderOp: leader."),
            Field("group_id", _STR, "Consumer-group operations: groupId."),
            Field("consumer_id", _STR, "Consumer-group operations: consumerId."),
            Field(
                "coordinator", _STR,
                "ReportConsumerGroupCoordinatorOp / PropagatedResponse.joinConsumerGroupResp: "
                "coordinator.",
            ),
            Field("epoch", _I64, "Coordinator epoch (protobuf uint64, overflow as leader_epoch)."),
            Field("error_code", _I64, "PropagatedResponse: error.code (protobuf uint32)."),
            Field(
                "error", _STR,
                "RaftJoinResponse.error / PropagatedResponse.error.msg (empty: no error).",
            ),
            Field("server_id", _STR, "ServerInfoRequest / ServerInfoResponse: id."),
            Field("host", _STR, "ServerInfoResponse: host."),
            Field("port", _I32, "ServerInfoResponse: port."),
            Field("exists", _BOOL, "PartitionStatusResponse: exists."),
            Field("is_leader", _BOOL, "PartitionStatusResponse: isLeader."),
        ),
    )
)

ENTRIES_TABLE = register_table(
    TableSpec(
        "liftbridge_entries",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: payload_decoded columns
        "One row per message-set entry of a Liftbridge ReplicationResponse (envelope type 3: "
        "leader epoch, high watermark, then entries of a 28-byte header and a serialized "
        "commit-log message). `parent_record_id` is the `liftbridge` row of the response; "
        "the provenance columns are those of the carrying NATS message.",
        (
            Field(
                "entry_index", _I32, "Position of the entry in the message set (0-based).", False
            ),
            Field("offset", _I64, "Entry header: offset in the partition."),
            Field("timestamp", TS, "Entry header: timestamp (Unix ns on the wire), UTC."),
            Field(
                "leader_epoch", _I64,
                "Entry header: leader epoch (u64; above 2^63-1: null plus an anomaly).",
            ),
            Field("size", _I64, "Entry header: size of the serialized message in bytes."),
            Field("crc32c", _I64, "Message: stored CRC-32C (u32) over the bytes that follow it."),
            Field(
                "crc_status", _STR,
                "`ok` / `mismatch` (plus a `liftbridge.entry_crc_mismatch` anomaly); null when "
                "the message is cut short.",
            ),
            Field("magic", _I32, "Message: magic byte (the server writes 1)."),
            Field("attributes", _I32, "Message: attributes byte (0)."),
            Field("key", _BIN, "Message key; null for a null key (length -1)."),
            *_VALUE_COLUMNS,
            *decoded_fields("liftbridge_entries", payload="value", truncated="value_truncated"),
            Field(
                "headers", _HEADERS,
                "Message headers (the server always adds `subject` and `reply`).",
            ),
            Field("subject", _STR, "The `subject` header: the NATS subject the message came on."),
            Field("reply", _STR, "The `reply` header: the NATS reply subject (often empty)."),
            Field(
                "malformed", _BOOL,
                "True when the entry could not be decoded to its end.", False,
            ),
            Field("decode_error", _STR, "What was wrong, with its byte offset; null if nothing."),
        ),
    )
)

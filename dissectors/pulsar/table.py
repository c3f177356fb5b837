"""The ``pulsar_commands`` and ``pulsar_messages`` tables (DESIGN §5).

``pulsar_commands`` has one row per frame; ``pulsar_messages`` one row per application
message, a child of the SEND / MESSAGE row it came from (``parent_record_id``).  Columns
a command does not carry are null.  Protocol ``uint64`` ids are stored as ``int64``
(two's complement, as Pulsar's Java side reads them: a `highest_sequence_id` of
2^64-1 on the wire is -1 here).  The correlation post-pass joins on the id columns
(request_id; producer_id + sequence_id; consumer_id + ledger_id/entry_id) within a flow.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.payload import decoded_fields
from dissectors.tables import TS, Field, TableSpec, register_table

__all__ = ["MESSAGE_ID", "PULSAR_COMMANDS", "PULSAR_MESSAGES"]

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()
_BIN = pa.binary()
_KV = pa.map_(_STR, _STR)

MESSAGE_ID = pa.struct([
    pa.field("ledger_id", _I64),
    pa.field("entry_id", _I64),
    pa.field("partition", _I32),
    pa.field("batch_index", _I32),
])

PULSAR_COMMANDS = register_table(
    TableSpec(
        "pulsar_commands",
        2,  # 2: timestamps in microseconds + exact `_ns` columns
        "One row per Pulsar binary-protocol frame (TCP 6650), in stream order per direction: "
        "every BaseCommand type by name, with typed columns for the fields users join and "
        "filter on, the checksum verdict of SEND/MESSAGE frames, and the whole decoded "
        "command as JSON. Authentication data is never stored, only its length and SHA-256. "
        "Malformed frames, checksum mismatches, oversize frames and resyncs are `anomalies` "
        "rows (kinds `pulsar.*`).",
        (
            Field(
                "command", _STR,
                "BaseCommand type name (CONNECT, SEND, MESSAGE, ...; protocol-facts §4.2, "
                "types up to 81); an unknown type number is kept as its decimal text, and `?` "
                "means the type field itself did not decode (`pulsar.bad_command`).", False,
            ),
            Field("command_type", _I32, "BaseCommand type number as on the wire."),
            Field(
                "frame_size", _I64,
                "Whole frame in bytes: 4 + the declared totalSize.", False,
            ),
            Field("command_size", _I32, "Declared commandSize (BaseCommand bytes)."),
            Field(
                "request_id", _I64,
                "request_id of requests and their responses (LOOKUP, PRODUCER, SUBSCRIBE, "
                "CLOSE_*, SUCCESS, ERROR, ...).",
            ),
            Field(
                "producer_id", _I64,
                "PRODUCER, SEND, SEND_RECEIPT, SEND_ERROR, CLOSE_PRODUCER; TOPIC_MIGRATED of a "
                "producer.",
            ),
            Field(
                "consumer_id", _I64,
                "SUBSCRIBE, MESSAGE, ACK, FLOW, CLOSE_CONSUMER, SEEK, REDELIVER_*, ...; "
                "TOPIC_MIGRATED of a consumer.",
            ),
            Field("sequence_id", _I64, "SEND / SEND_RECEIPT / SEND_ERROR sequence_id."),
            Field(
                "highest_sequence_id", _I64,
                "SEND / SEND_RECEIPT highest_sequence_id (batches with external sequence ids).",
            ),
            Field(
                "topic", _STR,
                "Topic named by the command (PRODUCER, SUBSCRIBE, LOOKUP, ...), else resolved "
                "from producer_id / consumer_id via the PRODUCER / SUBSCRIBE seen earlier on this "
                "connection; partition suffix (`-partition-N`) kept.",
            ),
            Field(
                "subscription", _STR,
                "SUBSCRIBE subscription name; for consumer commands resolved from consumer_id.",
            ),
            Field("sub_type", _STR, "SUBSCRIBE: Exclusive, Shared, Failover or Key_Shared."),
            Field("producer_name", _STR, "PRODUCER / PRODUCER_SUCCESS producer_name; SEND / "
                  "MESSAGE: producer_name of the message metadata."),
            Field("consumer_name", _STR, "SUBSCRIBE consumer_name."),
            Field(
                "ledger_id", _I64,
                "Message id ledger: SEND_RECEIPT, MESSAGE, SEEK, GET_LAST_MESSAGE_ID_RESPONSE; "
                "ACK / REDELIVER: the first id (all in `message_ids`).",
            ),
            Field("entry_id", _I64, "Message id entry (as ledger_id)."),
            Field("partition", _I32, "Message id partition (-1: not partitioned), as sent."),
            Field("batch_index", _I32, "Message id batch_index (-1: whole entry), as sent."),
            Field(
                "message_ids", pa.list_(MESSAGE_ID),
                "ACK and REDELIVER_UNACKNOWLEDGED_MESSAGES: every message id, in order.",
            ),
            Field("ack_type", _STR, "ACK: Individual or Cumulative."),
            Field(
                "validation_error", _STR,
                "ACK validation_error: why the client discarded a message "
                "(e.g. ChecksumMismatch).",
            ),
            Field("message_permits", _I64, "FLOW messagePermits."),
            Field(
                "num_messages", _I32,
                "SEND num_messages (1 when absent, the proto2 default); MESSAGE: "
                "num_messages_in_batch of its metadata (1 when absent).",
            ),
            Field("redelivery_count", _I32, "MESSAGE redelivery_count."),
            Field("is_chunk", _BOOL, "SEND is_chunk: one chunk of a chunked message."),
            Field(
                "error_code", _STR,
                "ServerError name of ERROR, SEND_ERROR, *_RESPONSE error fields "
                "(e.g. TopicNotFound); an unknown number as decimal text.",
            ),
            Field("error_message", _STR, "The error text that goes with error_code."),
            Field(
                "lookup_response", _STR,
                "LOOKUP_RESPONSE: Redirect, Connect or Failed; PARTITIONED_METADATA_RESPONSE: "
                "Success or Failed.",
            ),
            Field(
                "broker_service_url", _STR,
                "LOOKUP_RESPONSE brokerServiceUrl; CLOSE_* assignedBrokerServiceUrl; "
                "TOPIC_MIGRATED brokerServiceUrl.",
            ),
            Field("broker_service_url_tls", _STR, "The TLS variant of broker_service_url."),
            Field("authoritative", _BOOL, "LOOKUP / LOOKUP_RESPONSE authoritative."),
            Field(
                "proxy_through_service_url", _BOOL,
                "LOOKUP_RESPONSE: the client must keep connecting through the service URL.",
            ),
            Field("partitions", _I32, "PARTITIONED_METADATA_RESPONSE partitions (0: not "
                  "partitioned)."),
            Field("protocol_version", _I32, "CONNECT / CONNECTED / AUTH_* protocol_version."),
            Field("client_version", _STR, "CONNECT / AUTH_RESPONSE client_version."),
            Field("server_version", _STR, "CONNECTED / AUTH_CHALLENGE server_version."),
            Field("max_message_size", _I32, "CONNECTED max_message_size."),
            Field(
                "feature_flags", pa.list_(_STR),
                "CONNECT / CONNECTED feature flags set to true (names as in protocol-facts "
                "§4.4, e.g. supports_broker_entry_metadata).",
            ),
            Field("proxy_to_broker_url", _STR, "CONNECT proxy_to_broker_url."),
            Field("original_principal", _STR, "CONNECT / LOOKUP original_principal (proxies)."),
            Field(
                "auth_method", _STR,
                "CONNECT auth_method_name (else the deprecated auth_method enum name); "
                "AUTH_CHALLENGE / AUTH_RESPONSE: auth_method_name of their AuthData.",
            ),
            Field(
                "auth_data_len", _I64,
                "Length of the authentication data (CONNECT auth_data, AUTH_* AuthData); "
                "the data itself is never stored.",
            ),
            Field(
                "auth_data_sha256", _STR,
                "Lower-case hex SHA-256 of the authentication data, to compare without "
                "storing it (a short password's hash can be guessed: treat as sensitive).",
            ),
            Field("producer_access_mode", _STR, "PRODUCER producer_access_mode name."),
            Field("last_sequence_id", _I64, "PRODUCER_SUCCESS last_sequence_id."),
            Field("initial_position", _STR, "SUBSCRIBE initialPosition: Latest or Earliest."),
            Field("durable", _BOOL, "SUBSCRIBE durable (null when absent; default true)."),
            Field(
                "metadata", _KV,
                "PRODUCER / SUBSCRIBE metadata key/values (duplicates kept, in order).",
            ),
            Field("txnid_least_bits", _I64, "Transaction id, low half (SEND, ACK, *_TXN*)."),
            Field("txnid_most_bits", _I64, "Transaction id, high half."),
            Field(
                "broker_timestamp", TS,
                "MESSAGE broker entry metadata (0x0e02) broker_timestamp.",
            ),
            Field("broker_index", _I64, "MESSAGE broker entry metadata index."),
            Field(
                "crc_status", _STR,
                "SEND / MESSAGE: `ok` (CRC-32C over metadata and payload verified), `mismatch`"
                " (also a `pulsar.checksum_mismatch` anomaly) or `absent` (no 0x0e01 magic, as "
                "pre-v6 clients send). Null for frames without a payload section.",
            ),
            Field("checksum", _I64, "The CRC-32C the frame carries (unsigned 32-bit)."),
            Field("metadata_size", _I32, "SEND / MESSAGE declared metadataSize."),
            Field(
                "payload_size", _I64,
                "SEND / MESSAGE payload bytes on the wire (after the metadata; compressed, "
                "the whole batch or chunk).",
            ),
            Field(
                "unknown_fields", pa.list_(_STR),
                "Field numbers the schema does not know (dotted with the sub-command name), "
                "e.g. from a newer protocol version; empty when none.",
            ),
            Field(
                "decode_error", _STR,
                "Why the BaseCommand did not decode to the end (a `pulsar.bad_command` "
                "anomaly too); the columns hold what decoded before it.",
            ),
            Field(
                "command_json", _STR,
                "The whole decoded sub-command as JSON (field names from msgcap's "
                "pulsar.proto; bytes as hex; auth data replaced by {len, sha256}).",
            ),
        ),
    )
)

PULSAR_MESSAGES = register_table(
    TableSpec(
        "pulsar_messages",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: payload_decoded columns
        "One row per application message in SEND (c2s) and MESSAGE (s2c) frames: a "
        "non-batched message is one row, a batch one row per entry (batch_index and the "
        "SingleMessageMetadata fields), a chunked message one row once all its chunks are "
        "seen (or one `incomplete` row). Payloads are decompressed (LZ4, ZLIB, ZSTD, "
        "SNAPPY) with a size cap. `parent_record_id` is the `pulsar_commands` row of the "
        "frame (for a chunked message: of its last chunk).",
        (
            Field("command", _STR, "SEND or MESSAGE: the frame type it came from.", False),
            Field(
                "topic", _STR,
                "Topic of the producer_id / consumer_id on this connection (from its PRODUCER "
                "/ SUBSCRIBE), partition suffix kept; null when that command was not seen.",
            ),
            Field("subscription", _STR, "MESSAGE: subscription of the consumer_id."),
            Field("producer_id", _I64, "SEND producer_id."),
            Field("consumer_id", _I64, "MESSAGE consumer_id."),
            Field("producer_name", _STR, "MessageMetadata producer_name."),
            Field(
                "sequence_id", _I64,
                "Sequence id of this message: the entry's SingleMessageMetadata sequence_id "
                "when set, else the metadata sequence_id + batch_index (what clients do).",
            ),
            Field("ledger_id", _I64, "MESSAGE message id ledger."),
            Field("entry_id", _I64, "MESSAGE message id entry."),
            Field("partition", _I32, "MESSAGE message id partition (-1: not partitioned)."),
            Field(
                "batch_index", _I32,
                "Position in its batch (0-based); null for a message not sent in a batch.",
            ),
            Field(
                "num_messages_in_batch", _I32,
                "MessageMetadata num_messages_in_batch; null when absent (not a batch).",
            ),
            Field("redelivery_count", _I32, "MESSAGE redelivery_count."),
            Field("publish_time", TS, "MessageMetadata publish_time (ms precision)."),
            Field(
                "event_time", TS,
                "Event time of the entry (SingleMessageMetadata) or message; null when 0/absent.",
            ),
            Field("deliver_at_time", TS, "MessageMetadata deliver_at_time (delayed delivery)."),
            Field(
                "properties", _KV,
                "Message properties (of the batch entry for batches), duplicates kept in order.",
            ),
            Field("partition_key", _STR, "Partition (routing) key."),
            Field("partition_key_b64_encoded", _BOOL, "The partition key is base64 of bytes."),
            Field("null_partition_key", _BOOL, "The key is explicitly null."),
            Field("ordering_key", _BIN, "Ordering key (Key_Shared)."),
            Field("null_value", _BOOL, "The message value is explicitly null (tombstone)."),
            Field("compacted_out", _BOOL, "Batch entry removed by compaction."),
            Field(
                "compression", _STR,
                "NONE, LZ4, ZLIB, ZSTD, SNAPPY (or the unknown number as text).",
            ),
            Field(
                "uncompressed_size", _I64,
                "Declared uncompressed_size of the whole (batch or chunked) payload.",
            ),
            Field(
                "wire_payload_len", _I64,
                "Payload bytes on the wire for the whole frame (or all chunks), compressed.",
            ),
            Field("chunk_uuid", _STR, "Chunked message: uuid shared by its chunks."),
            Field("chunk_id", _I32, "Chunked message: id of the last chunk seen."),
            Field(
                "chunk_ids", pa.list_(_I32),
                "Chunked message: chunk ids received, in order.",
            ),
            Field("num_chunks", _I32, "Chunked message: num_chunks_from_msg."),
            Field("total_chunk_msg_size", _I64, "Chunked message: total_chunk_msg_size."),
            Field(
                "chunk_offsets", pa.list_(_I64),
                "Chunked message: stream offset of each chunk's frame (find their "
                "pulsar_commands rows by offset_start).",
            ),
            Field(
                "payload_len", _I64,
                "Application payload length (decompressed; the entry for batches); null when "
                "the payload could not be recovered (see incomplete).",
            ),
            Field(
                "payload_sha256", _STR,
                "Lower-case hex SHA-256 of the whole application payload, even when `payload` "
                "is capped.",
            ),
            Field(
                "payload", _BIN,
                "Application payload, the first `payload_cap` bytes (option, default 4096). "
                "Encrypted messages: the encrypted bytes as sent.",
            ),
            Field("payload_truncated", _BOOL, "payload holds fewer than payload_len bytes."),
            Field("replicated_from", _STR, "Source cluster of a geo-replicated message."),
            Field("replicate_to", pa.list_(_STR), "Clusters the message is restricted to."),
            Field("schema_version", _BIN, "Schema version the message was written with."),
            Field("txnid_least_bits", _I64, "Transaction id, low half."),
            Field("txnid_most_bits", _I64, "Transaction id, high half."),
            Field("highest_sequence_id", _I64, "MessageMetadata highest_sequence_id."),
            Field("marker_type", _I32, "Marker message type (internal, non-application)."),
            Field(
                "encrypted", _BOOL,
                "End-to-end encrypted (encryption_keys present): payload kept as sent, "
                "batches not split.",
            ),
            Field("encryption_algo", _STR, "MessageMetadata encryption_algo."),
            Field("broker_timestamp", TS, "MESSAGE broker entry metadata broker_timestamp."),
            Field("broker_index", _I64, "MESSAGE broker entry metadata index."),
            Field("crc_status", _STR, "crc_status of the frame (ok / mismatch / absent)."),
            Field(
                "incomplete", _BOOL,
                "True when the payload could not be recovered: a chunked message missing "
                "chunks, or a payload that failed to decompress / split (an anomaly says why).",
                False,
            ),
            *decoded_fields("pulsar_messages", subject="topic"),
        ),
    )
)

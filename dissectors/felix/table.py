"""The ``felix`` and ``felix_messages`` tables (DESIGN §5, protocol-facts §5).

``felix`` has one row per frame; ``felix_messages`` one row per application message a
frame carries (JSON ``publish`` / ``event``: one; ``publish_batch``, ``event_batch``,
``publish_idempotent`` and every binary publish / event batch: one per entry), a child
of the frame's row (``parent_record_id``).  Felix ``u64`` ids and offsets are stored as
``int64`` two's complement (2^64-1 on the wire is -1 here).  Columns a frame does not
carry are null.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.api import payload_fields
from dissectors.payload import decoded_fields
from dissectors.tables import TS, Field, TableSpec, register_table

__all__ = ["DEFAULT_JSON_CAP", "FELIX", "FELIX_MESSAGES"]

# JSON text kept per row (option `json_cap`): control messages are small, but a JSON
# publish of a large payload is its base64 -- the payload columns hold those bytes.
DEFAULT_JSON_CAP = 65536

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()

_STREAM_KIND = Field(
    "stream_kind", _STR,
    "Kind of the QUIC stream (`stream_id`'s low two bits): `bidi-client` (control / publish "
    "/ cache stream), `uni-server` (event stream of a subscription), `uni-client` "
    "(publish-only stream), `bidi-server`; null over TCP (or when the pipeline did not "
    "pass the stream id).",
)

FELIX = register_table(
    TableSpec(
        "felix",
        2,  # 2: timestamps in microseconds + exact `_ns` columns
        "One row per Felix client-protocol frame (QUIC, UDP 5000 by default, decrypted with "
        "a TLS key log; or any TCP stream carrying the same frames), in stream order per "
        "QUIC stream and direction: the 12-byte header, the payload kind its flags select, "
        "JSON messages labelled by their `type` with the JSON text kept, typed columns for "
        "the fields users filter on, and every binary layout of protocol-facts §5.5 "
        "(messages of batches in `felix_messages`). Bad magic, oversize lengths and resyncs, "
        "unknown or inconsistent flag bits, bad JSON and short binary layouts are `anomalies` "
        "rows (kinds `felix.*`).",
        (
            _STREAM_KIND,
            Field(
                "magic_ok", _BOOL,
                "The header starts with the `FLX1` magic. Always true in this table: bytes "
                "without it are not a frame but a `felix.bad_magic` anomaly, after which the "
                "direction resynchronises on the next `FLX1`.", False,
            ),
            Field(
                "version", _I32,
                "Header version (1; any other is kept, with a `felix.bad_version` anomaly, "
                "and the payload left undecoded).", False,
            ),
            Field("flags", _I32, "Header flags (u16) as sent; 0 means a JSON payload.", False),
            Field(
                "flag_names", pa.list_(_STR),
                "Names of the known flag bits set (BINARY_PUBLISH_BATCH, "
                "BINARY_EVENT_BATCH, BINARY_EVENT_BATCH_SHARED, BINARY_PUBLISH_ACKED, "
                "BINARY_PUBLISH_ACK, EVENT_BATCH_OFFSETS, BINARY_PUBLISH_KEYED, "
                "BINARY_PUBLISH_ACK_OWNER, BINARY_PUBLISH_IDEMPOTENT, BINARY_PUBLISH_ACK_CODE, "
                "BINARY_PUBLISH_ACK_DETAIL, EVENT_BATCH_SKIPPED, BINARY_PUBLISH_ACK_OFFSET, "
                "EVENT_BATCH_PUBLISHER, EVENT_BATCH_TIMESTAMPS), lowest bit first.", False,
            ),
            Field(
                "unknown_flags", _I32,
                "Flag bits outside the newest known set 0x7FFF (a `felix.unknown_flags` "
                "anomaly; the payload is then kept undecoded); null when none.",
            ),
            Field("length", _I64, "Declared payload length (u32): the frame is 12 + length "
                  "bytes.", False),
            Field(
                "kind", _STR,
                "Payload kind the flags select: `json`, `binary_publish_batch`, "
                "`binary_acked_publish_batch` (0x0008, with request_id and ack_mode), "
                "`binary_publish_ack`, `binary_event_batch` (per subscriber), "
                "`binary_shared_event_batch`, or `unknown` (unknown bits, an invalid "
                "combination, or a version other than 1).", False,
            ),
            Field(
                "type", _STR,
                "JSON frames: the `\"type\"` tag as sent (auth, auth_ok, ok, error, publish, "
                "publish_batch, publish_ok, subscribe, subscribed, event_stream_hello, event, "
                "cache_put, cache_value, ... -- any value is kept: the set grows).",
            ),
            Field(
                "json", _STR,
                "JSON frames: the payload text exactly as sent, the first `json_cap` bytes "
                "(option, default 65536; invalid UTF-8 as \\xNN). The auth `token` is "
                "replaced by `<redacted len=N sha256=HEX>` (UTF-8 length and SHA-256 of the "
                "value) unless the run keeps secrets (`keep_secrets`).",
            ),
            Field("json_truncated", _BOOL, "`json` holds fewer bytes than the payload."),
            Field("tenant_id", _STR, "Tenant (JSON `tenant_id`; binary publish batches)."),
            Field("namespace", _STR, "Namespace (JSON `namespace`; binary publish batches)."),
            Field("stream", _STR, "Stream name (JSON `stream`; binary publish batches)."),
            Field("cache", _STR, "Cache name of cache_* messages."),
            Field(
                "key", _STR,
                "cache_* key (a string); publish routing key (JSON base64 / binary "
                "BINARY_PUBLISH_KEYED bytes, shown as UTF-8 with \\xNN for invalid bytes).",
            ),
            Field(
                "request_id", _I64,
                "request_id (a JSON number, u64; acked binary publish and binary publish "
                "ack prefix).",
            ),
            Field(
                "subscription_id", _I64,
                "subscription_id (subscribe, subscribed, event_stream_hello, shard_moved, ...; "
                "binary per-subscriber event batches).",
            ),
            Field(
                "ack_mode", _STR,
                "Requested acknowledgement: JSON `ack` (none, per_message, per_batch) or the "
                "binary ack_mode byte (1 per_message, 2 per_batch; another value as its "
                "number, with a `felix.bad_ack_mode` anomaly).",
            ),
            Field("ttl_ms", _I64, "cache_put `ttl_ms` (null when sent as null: no expiry)."),
            Field(
                "start", _STR,
                "subscribe `start` as sent: `latest`, `earliest`, or the JSON of "
                "`{\"offset\":n}`; null: from the tail.",
            ),
            Field(
                "offset", _I64,
                "Record offset the frame names: publish_ok / binary ack (0x1000) offset of "
                "the first record written, event offset, event_batch and binary event batch "
                "(0x0020) base_offset, shard_moved / subscription_lagged resume_from.",
            ),
            Field("skipped_before", _I64, "Binary event batch (0x0800) skipped_before."),
            Field("producer_id", _I64, "Idempotent producer id (JSON; binary 0x0100)."),
            Field("sequence", _I64, "Idempotent producer sequence of the batch."),
            Field(
                "ack_status", _STR,
                "Publish outcome: binary publish ack status (`ok`, `error`, another value as "
                "its number), or `ok` / `error` for JSON publish_ok / publish_error.",
            ),
            Field(
                "error_message", _STR,
                "Error text: JSON `message` (error, publish_error, publish_refused, ...) or the "
                "binary ack message (null on a successful ack without one).",
            ),
            Field(
                "error_code", _STR,
                "Error code: JSON `code` as text, or the binary ack code (0x0200) name "
                "(unauthenticated, forbidden, not_found, ...; another number as text).",
            ),
            Field(
                "retry", _STR,
                "Retry class: JSON `retry` as text, or the binary ack retry (retry, "
                "retry_after, redirect, outcome_unknown, fatal; another number as text, which "
                "Felix treats as fatal).",
            ),
            Field("retry_after_ms", _I64, "Suggested wait (JSON detail; binary 0x0400)."),
            Field(
                "reason", _STR,
                "Why: JSON detail.reason, publish_refused / subscribe_cursor_error `reason` "
                "(the JSON of an object reason), or the binary ack reason (0x0400).",
            ),
            Field("node_id", _STR, "Broker named by not_leader / shard_moved, or the owner of "
                  "a forwarded binary publish (0x0080)."),
            Field("addr", _STR, "Client address of that broker (null: not published)."),
            Field("generation", _I64, "Ownership generation that goes with node_id."),
            Field(
                "advertised_flags", _I32,
                "Frame flags a peer supports: auth `client_flags` / auth_ok `server_flags`.",
            ),
            Field("features", _I64, "auth `client_features` / auth_ok `server_features` (u32)."),
            Field("features_hi", _I64, "The `*_features_hi` word (after EXTENDED, 0x80000000)."),
            Field(
                "feature_names", pa.list_(_STR),
                "Names of the bits set in `features` (TOPOLOGY, REDIRECT, ..., EXTENDED; "
                "unknown bits as 0x...).",
            ),
            Field("publisher", _STR, "Binary event batch (0x2000) publisher principal."),
            Field(
                "payload_count", _I64,
                "Messages the frame carries (publish / event: 1; batches: their count, as "
                "declared in binary layouts); one `felix_messages` row each.",
            ),
            *payload_fields(
                "payload",
                "single payload of the frame (publish / event `payload`, cache_put / "
                "cache_value `value`, base64-decoded; null for batches, see felix_messages)",
            ),
            Field(
                "body", pa.binary(),
                "The raw frame payload, first `payload_cap` bytes, only for frames left "
                "undecoded (kind `unknown`); one `<redacted ...>` marker instead when it "
                "mentions a token and secrets are not kept.",
            ),
            Field(
                "body_sha256", _STR,
                "Lower-case hex SHA-256 of the whole frame payload (after the header).", False,
            ),
            Field(
                "decode_error", _STR,
                "Why the payload did not decode to the end (bad JSON, a binary layout "
                "shorter than declared, ...); the columns hold what decoded before. An "
                "anomaly says the same.",
            ),
        ),
    )
)

FELIX_MESSAGES = register_table(
    TableSpec(
        "felix_messages",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: payload_decoded columns
        "One row per application message in a Felix frame: JSON publish / event (one), "
        "publish_batch / publish_idempotent / event_batch (one per base64 entry) and every "
        "binary publish or event batch (one per entry, in order). `parent_record_id` is the "
        "`felix` row of the frame; the envelope (offsets, times, frames) is the frame's.",
        (
            _STREAM_KIND,
            Field(
                "type", _STR,
                "What carried it: the JSON type (publish, publish_batch, event, event_batch, "
                "...) or the binary kind (binary_publish_batch, binary_acked_publish_batch, "
                "binary_event_batch, binary_shared_event_batch).", False,
            ),
            Field("index", _I32, "Position in the frame (0-based).", False),
            Field("batch_size", _I32, "Messages in the frame.", False),
            Field("tenant_id", _STR, "Tenant (publishes; JSON events)."),
            Field("namespace", _STR, "Namespace."),
            Field("stream", _STR, "Stream."),
            Field("key", _STR, "Publish routing key (UTF-8, \\xNN for invalid bytes)."),
            Field("request_id", _I64, "request_id of the publish."),
            Field("ack_mode", _STR, "Requested acknowledgement of the publish."),
            Field("producer_id", _I64, "Idempotent producer id."),
            Field("sequence", _I64, "Idempotent producer sequence of the batch."),
            Field(
                "subscription_id", _I64,
                "Per-subscriber binary event batch: its subscription (shared batches name "
                "none; JSON events and QUIC event streams: see event_stream_hello on the "
                "same stream).",
            ),
            Field(
                "offset", _I64,
                "Record offset: the JSON event `offset`, or base_offset + index for event "
                "batches with offsets; null when the frame carries none.",
            ),
            Field("publisher", _STR, "Publisher principal of the event batch (0x2000)."),
            Field(
                "append_time", TS,
                "Append time of the event (0x4000 EVENT_BATCH_TIMESTAMPS, a u64 in "
                "microseconds before each event's length; that placement is unconfirmed "
                "upstream, protocol-facts §7).",
            ),
            *payload_fields("payload", "message payload"),
            *decoded_fields("felix_messages", subject="stream"),
        ),
    )
)

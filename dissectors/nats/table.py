"""The ``nats`` table: one row per NATS client-protocol operation (DESIGN §5).

Columns are grouped by the operations that fill them; a column an operation does not
carry is null (``op`` says which columns to expect).  The envelope columns come first.
"""

from __future__ import annotations

import pyarrow as pa

from dissectors.nats.jetstream import ACK_FIELDS
from dissectors.payload import decoded_fields
from dissectors.tables import Field, TableSpec, register_table

__all__ = ["DEFAULT_HEADER_CAP", "NATS_TABLE"]

# Header block bytes kept (and parsed) per row.  Option `header_cap`.
DEFAULT_HEADER_CAP = 65536

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()

NATS_TABLE = register_table(
    TableSpec(
        "nats",
        3,  # 2: timestamps in microseconds + exact `_ns` columns; 3: js_* ack columns
        "One row per NATS client-protocol operation (INFO, CONNECT, PUB, HPUB, SUB, UNSUB, "
        "MSG, HMSG, PING, PONG, +OK, -ERR), in stream order per direction. A row's offsets "
        "cover its control line, headers, payload and trailing CRLF. Malformed or "
        "unrecognised bytes produce `anomalies` rows (kinds `nats.*`), never silent skips. "
        "NATS over TLS (decrypted with a key log) or over WebSocket lands here too: the "
        "flow's `layers` (`flows` table) names the transport, and the offsets then count "
        "the decrypted / unframed byte stream the rows were read from. Route, gateway and "
        "leaf-node links are in `nats_cluster`.",
        (
            Field(
                "op", _STR,
                "Operation, canonical upper case: INFO, CONNECT, PUB, HPUB, SUB, UNSUB, MSG, "
                "HMSG, PING, PONG, +OK or -ERR (the wire spelling may be any case).", False,
            ),
            Field(
                "subject", _STR,
                "PUB/HPUB/MSG/HMSG: subject published to or delivered on; SUB: subject "
                "(wildcards `*`/`>` as sent). Invalid UTF-8 is shown as \\xNN escapes.",
            ),
            Field(
                "reply_to", _STR,
                "PUB/HPUB/MSG/HMSG: reply subject (e.g. an `_INBOX.` subject); null if none.",
            ),
            Field(
                "sid", _STR,
                "SUB/UNSUB/MSG/HMSG: subscription id, a client-chosen token (kept as text, "
                "not a number).",
            ),
            Field("queue_group", _STR, "SUB: queue group name; null for a plain subscription."),
            Field(
                "max_msgs", _I64,
                "UNSUB: messages after which the subscription ends; null when absent (immediate).",
            ),
            Field(
                "header_len", _I64,
                "HPUB/HMSG: declared header block size in bytes, including the final CRLF CRLF.",
            ),
            Field(
                "payload_len", _I64,
                "PUB/HPUB/MSG/HMSG: payload size in bytes as declared, headers excluded "
                "(for HPUB/HMSG: total size - header_len).",
            ),
            Field(
                "payload", pa.binary(),
                "Payload bytes (headers excluded), the first `payload_cap` bytes only (option, "
                "default 4096); null when not captured (see `incomplete`).",
            ),
            Field(
                "payload_truncated", _BOOL,
                "True when `payload` holds fewer bytes than payload_len because of the cap.",
            ),
            Field(
                "payload_sha256", _STR,
                "Lower-case hex SHA-256 of the whole payload (headers excluded), computed even "
                "when `payload` is capped; null only when payload bytes were lost (`incomplete`).",
            ),
            Field(
                "headers", pa.map_(_STR, pa.list_(_STR)),
                "HPUB/HMSG: header fields, name as sent to the list of its values in order. "
                "Map key order may not survive every reader; `headers_raw` keeps the block.",
            ),
            Field(
                "headers_raw", pa.binary(),
                "HPUB/HMSG: the raw header block (`NATS/1.0...` through the final CRLF CRLF), "
                "first `header_cap` bytes (option, default 65536).",
            ),
            Field(
                "status_code", _I32,
                "HPUB/HMSG: inline status from the header preamble, e.g. 503 in "
                "`NATS/1.0 503 No Responders`; null when absent.",
            ),
            Field(
                "status_description", _STR,
                "HPUB/HMSG: text after the status code, e.g. `No Responders`.",
            ),
            Field("error", _STR, "-ERR: the error text without the surrounding quotes."),
            Field("server_id", _STR, "INFO `server_id`."),
            Field("server_name", _STR, "INFO `server_name`."),
            Field("server_version", _STR, "INFO `version` (nats-server version)."),
            Field("server_go", _STR, "INFO `go` (Go version of the server build)."),
            Field("server_host", _STR, "INFO `host` the server listens on."),
            Field("server_port", _I32, "INFO `port` the server listens on."),
            Field(
                "max_payload", _I64,
                "INFO `max_payload`: largest payload the server accepts; later PUB/HPUB of "
                "this connection are checked against it (`max_payload_exceeded`).",
            ),
            Field("info_headers", _BOOL, "INFO `headers`: the server supports HPUB/HMSG."),
            Field(
                "tls_required", _BOOL,
                "INFO: the server requires TLS (the handshake follows the INFO); CONNECT: the "
                "client asks for TLS.",
            ),
            Field("tls_available", _BOOL, "INFO `tls_available`: TLS offered but not required."),
            Field(
                "auth_required", _BOOL,
                "INFO `auth_required`: the client must authenticate in CONNECT.",
            ),
            Field("jetstream", _BOOL, "INFO `jetstream`: JetStream enabled on the server."),
            Field("proto", _I32, "INFO `proto`: protocol level of the server."),
            Field(
                "client_id", _I64,
                "INFO `client_id`: connection id the server gave this client.",
            ),
            Field("client_ip", _STR, "INFO `client_ip`: client address as the server sees it."),
            Field("nonce", _STR, "INFO `nonce` the client must sign (nkey / JWT authentication)."),
            Field("cluster", _STR, "INFO `cluster`: the server's cluster name."),
            Field(
                "connect_urls", pa.list_(_STR),
                "INFO `connect_urls`: other servers of the cluster advertised to clients.",
            ),
            Field(
                "lame_duck_mode", _BOOL,
                "INFO `ldm`: the server is in lame duck mode (shutting down).",
            ),
            Field(
                "connect_info", _BOOL,
                "INFO `connect_info`: set on the second INFO a server sends after CONNECT.",
            ),
            Field("client_name", _STR, "CONNECT `name` given by the client application."),
            Field(
                "client_lang", _STR,
                "CONNECT `lang`: client library language (go, python3, ...).",
            ),
            Field("client_version", _STR, "CONNECT `version`: client library version."),
            Field(
                "verbose", _BOOL,
                "CONNECT `verbose`: the server acknowledges every op with +OK.",
            ),
            Field("pedantic", _BOOL, "CONNECT `pedantic`: the server checks subjects strictly."),
            Field("echo", _BOOL, "CONNECT `echo`: the client receives its own publishes."),
            Field(
                "protocol", _I32,
                "CONNECT `protocol`: client protocol level (1 = dynamic cluster INFO).",
            ),
            Field("connect_headers", _BOOL, "CONNECT `headers`: the client supports HPUB/HMSG."),
            Field(
                "no_responders", _BOOL,
                "CONNECT `no_responders`: the client wants 503 status messages when a request "
                "has no subscriber.",
            ),
            Field(
                "client_user", _STR,
                "CONNECT `user` (an account name, kept; the password is not).",
            ),
            Field(
                "auth_fields", pa.list_(_STR),
                "CONNECT: names of the credential fields present, among user, pass, "
                "auth_token, jwt, nkey, sig (their values: see `json_raw`).",
            ),
            Field(
                "json_raw", _STR,
                "INFO/CONNECT: the JSON argument exactly as sent (also when it does not "
                "parse; a `nats.bad_json` anomaly says why), except that the values of "
                "CONNECT's pass, auth_token, jwt, sig and nkey (names matched like nats-server "
                "does: any case, escapes resolved) are replaced by the JSON string "
                "`<redacted len=N sha256=HEX>` (UTF-8 length and SHA-256 of the value) unless "
                "`msgcap dissect --keep-secrets`; if a secret cannot be located, the whole "
                "text is one such marker.",
            ),
            Field(
                "max_payload_exceeded", _BOOL,
                "PUB/HPUB: the declared total size exceeds the `max_payload` of this "
                "connection's last INFO (nats-server answers -ERR 'Maximum Payload "
                "Violation' and closes); null when no INFO with max_payload was seen.",
            ),
            Field(
                "incomplete", _BOOL,
                "True when a gap or the end of the stream cut this operation after its control "
                "line: sizes are the declared ones, `payload`/`payload_sha256` (and `headers` if "
                "they were cut) are null. An anomaly (`nats.gap_in_payload`, "
                "`nats.eof_in_payload`) gives the details.", False,
            ),
            *ACK_FIELDS,
            *decoded_fields("nats"),
        ),
    )
)

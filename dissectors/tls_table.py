"""The ``tls`` table (one row per TLS-over-TCP connection) and the TLS / layer facts of a
flow row.

The rows come from ``reassembly.events.TlsConnection`` events (the TLS layer lives in
``reassembly.tls``: TLS is below the dissectors, its decrypted bytes reach them as
stream events).  ``tls_row`` gives the protocol columns; the pipeline adds the envelope:
``direction`` ``c2s``, ``offset_start``/``offset_end`` the TCP stream offsets (client
direction) where the TLS records began and ended, ``ts_*``/``frame_*`` those of the
first and last record.

``tls_flow_values`` fills the flow row's ``tls_*`` columns (declared with QUIC's, see
``dissectors.quic.table``); ``LAYER_FLOW_FIELDS`` declares the flow row's ``layers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from dissectors.layers import LayerDissector, LayerFacts, LayerRow
from dissectors.tables import Field, TableSpec, register_table
from reassembly.events import Direction, TlsConnection

# ``reassembly.tls.records`` (the names of versions and suites) is imported by the
# functions that name them: importing it loads the TLS and QUIC layers and
# ``cryptography`` (~50 ms), which the commands that read no capture (``schema``,
# ``protocols``, the views of a dataset) never need, while they import this module for
# the table's declaration.

__all__ = ["LAYER_FLOW_FIELDS", "TLS_TABLE", "TlsLayer", "tls_flow_values", "tls_row"]

_STR = pa.string()
_I32 = pa.int32()
_I64 = pa.int64()
_BOOL = pa.bool_()


def _per_dir(name: str, what: str) -> tuple[Field, Field]:
    return (
        Field(f"{name}_c2s", _I64, f"{what}, client to server.", False),
        Field(f"{name}_s2c", _I64, f"{what}, server to client.", False),
    )


TLS_TABLE = register_table(
    TableSpec(
        "tls",
        2,  # 2: timestamps in microseconds + exact `_ns` columns
        "One row per TLS connection over TCP (TLS 1.0-1.3 record layer; QUIC's TLS is in "
        "`quic_packets` and the flow row), written when its flow ends. A flow is TLS from "
        "its first byte or after a plaintext STARTTLS-style exchange (NATS INFO with "
        "`tls_required`, SMTP/IRC STARTTLS), on any port. Records are decrypted with "
        "secrets from an NSS key log (`--keylog`) or the capture's pcapng Decryption "
        "Secrets Blocks: TLS 1.3 traffic secrets, TLS 1.2 `CLIENT_RANDOM` master secrets; "
        "AEAD suites (AES-GCM, ChaCha20-Poly1305). Decrypted application data is what the "
        "protocol dissectors of the flow read (their rows' offsets count decrypted bytes); "
        "a connection that cannot be decrypted is passed on unchanged and reported once "
        "in `anomalies` (`tls.undecryptable`, with its client random, SNI and ALPN). "
        "Envelope offsets are TCP offsets of the client direction.",
        (
            Field("version", _STR, "Negotiated version: `TLS 1.2`, `TLS 1.3` ...; null when "
                  "no ServerHello was seen."),
            Field("version_code", _I32, "Negotiated version as its wire code (0x0303 = 771 "
                  "for TLS 1.2, 0x0304 = 772 for TLS 1.3)."),
            Field("cipher_suite", _STR, "Cipher suite the ServerHello selects, IANA name "
                  "(e.g. `TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), "
                  "`0x....` when unnamed."),
            Field("cipher_suite_code", _I32, "Selected cipher suite as its wire code."),
            Field("sni", _STR, "Server name (SNI) from the ClientHello."),
            Field("alpn_offered", pa.list_(_STR), "ALPN protocols the ClientHello offers, "
                  "in order.", False),
            Field("alpn", _STR, "ALPN protocol the server chose (TLS 1.2: ServerHello; TLS "
                  "1.3: EncryptedExtensions, so only when decrypted)."),
            Field("client_random", _STR, "ClientHello random, lower-case hex: the key the "
                  "connection's secrets are filed under in an SSLKEYLOGFILE."),
            Field("client_versions", pa.list_(_STR), "Versions the ClientHello offers "
                  "(supported_versions extension), GREASE values left out.", False),
            Field("client_cipher_suites", pa.list_(_STR), "Cipher suites the ClientHello "
                  "offers, in order, GREASE values left out.", False),
            Field("early_data", _BOOL, "The client offered 0-RTT early data (TLS 1.3)."),
            Field("hello_retry", _BOOL, "The server sent a HelloRetryRequest.", False),
            Field("resumed", _BOOL, "A resumed session: TLS 1.3 PSK offered, or a TLS 1.2 "
                  "ServerHello echoing the client's session id.", False),
            Field("decrypted", _BOOL, "True when the records were decrypted with keys from "
                  "the key log (see `undecrypted_records_*` for records that still failed).",
                  False),
            Field("undecrypted_reason", _STR, "Why not (or not all) decrypted: `no-keys` "
                  "(no secrets for `client_random`), `unsupported-cipher` (not an AEAD "
                  "suite), `unsupported-version` (before TLS 1.2), `no-client-hello` / "
                  "`no-handshake` (capture started later), `no-server-hello`, "
                  "`gap-in-handshake`, `memory-limit` (the run's memory budget was reached while "
                  "the handshake was held), `bad-record`, `bad-server-hello`, `partial` (some "
                  "records did not authenticate or were lost); null when all went well."),
            Field("starttls", _BOOL, "TLS started after plaintext bytes of the same "
                  "connection (`tls_start_*` > 0), e.g. after NATS's INFO.", False),
            Field("tls_start_c2s", _I64, "TCP stream offset (client to server) of the first "
                  "TLS record."),
            Field("tls_start_s2c", _I64, "TCP stream offset (server to client) of the first "
                  "TLS record."),
            *_per_dir("records", "TLS records read"),
            *_per_dir("record_bytes", "TCP bytes of the TLS records read (headers included)"),
            *_per_dir("app_bytes", "Decrypted application-data bytes handed to dissectors"),
            *_per_dir("undecrypted_records", "Protected records that could not be opened "
                      "(auth failure, cut by a gap) while decrypting"),
            *_per_dir("lost_bytes", "TCP bytes of TLS lost to gaps or skipped while "
                      "looking for the next record"),
            *_per_dir("key_updates", "TLS 1.3 KeyUpdate messages followed"),
            Field("alerts", pa.list_(_STR), "Alerts in order (at most 16), e.g. `c2s "
                  "warning close_notify`, `s2c fatal handshake_failure`; `encrypted` when "
                  "one could not be read.", False),
        ),
    )
)


def _names(codes: tuple[int, ...], name: Callable[[int], str | None]) -> list[str | None]:
    # (`name` returns None only for a None code; reassembly.tls.records has no overloads)
    from reassembly.tls.records import is_grease

    return [name(c) for c in codes if not is_grease(c)]


def tls_row(ev: TlsConnection) -> dict[str, Any]:
    """The protocol columns of ``tls`` for one ``TlsConnection`` event."""
    from reassembly.tls.records import suite_name, version_name

    c, s = ev.start_offsets
    row: dict[str, Any] = {
        "version": version_name(ev.tls_version),
        "version_code": ev.tls_version,
        "cipher_suite": suite_name(ev.cipher_suite),
        "cipher_suite_code": ev.cipher_suite,
        "sni": ev.sni,
        "alpn_offered": list(ev.alpn),
        "alpn": ev.alpn_selected,
        "client_random": ev.client_random,
        "client_versions": _names(ev.tls_versions, version_name),
        "client_cipher_suites": _names(ev.cipher_suites, suite_name),
        "early_data": ev.early_data if ev.client_random is not None else None,
        "hello_retry": ev.hello_retry,
        "resumed": ev.resumption,
        "decrypted": ev.decrypted,
        "undecrypted_reason": ev.undecrypted_reason,
        "starttls": bool(c or s),
        "tls_start_c2s": c,
        "tls_start_s2c": s,
        "alerts": list(ev.alerts),
    }
    for name in ("records", "record_bytes", "app_bytes", "undecrypted_records", "lost_bytes",
                 "key_updates"):
        pair = getattr(ev, name)
        row[f"{name}_c2s"], row[f"{name}_s2c"] = pair
    return row


def tls_envelope(ev: TlsConnection) -> dict[str, Any]:
    """Suggested envelope values (see the module docstring)."""
    c, s = ev.start_offsets
    ce, _se = ev.end_offsets
    start = c if c is not None else s
    return {
        "direction": "c2s",
        "offset_start": start,
        "offset_end": ce if ce is not None else start,
        "ts_first": ev.ts_ns,
        "ts_last": ev.ts_last_ns,
        "frame_first": ev.frame,
        "frame_last": ev.frame_last,
    }


def tls_flow_values(ev: TlsConnection) -> dict[str, Any]:
    """The flow row's ``tls_*`` columns from a ``TlsConnection``."""
    from reassembly.tls.records import suite_name, version_name

    return {
        "tls_sni": ev.sni,
        "tls_alpn": list(ev.alpn),
        "tls_alpn_selected": ev.alpn_selected,
        "tls_client_random": ev.client_random,
        "tls_version": version_name(ev.tls_version),
        "tls_cipher_suite": suite_name(ev.cipher_suite),
    }


LAYER_FLOW_FIELDS: tuple[Field, ...] = (
    Field(
        "layers", pa.list_(_STR),
        "Layers between TCP and the dissector, outermost first: `tls` (decrypted TLS; "
        "`tls-encrypted` when it could not be decrypted), `websocket`. Empty for plain "
        "TCP, UDP and QUIC. When not empty, `stream_bytes`/`gap_bytes`/`decoded_bytes` "
        "count the bytes of the innermost layer (what the dissector read) and the "
        "protocol rows' offsets are in that byte stream; the `tls` and `websocket` "
        "tables hold the outer layers' facts.",
    ),
)


class TlsLayer(LayerDissector):
    """The ``tls`` row of a TLS-over-TCP connection, its ``tls_*`` flow columns, and
    the outermost entry of the flow's ``layers``."""

    events = (TlsConnection,)
    tables = (TLS_TABLE,)

    @classmethod
    def rows(cls, ev: TlsConnection, facts: LayerFacts) -> list[LayerRow]:
        facts.values = tls_flow_values(ev)
        facts.layers.insert(0, "tls" if ev.decrypted else "tls-encrypted")
        facts.claim("tls", 0)
        return [LayerRow(TLS_TABLE, Direction.C2S, {**tls_envelope(ev), **tls_row(ev)})]

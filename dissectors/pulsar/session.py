"""Pulsar per-connection state: framing, topic resolution, chunk reassembly.

Strategy: each direction has a ``LengthPrefixedFramer`` (the protocol only supplies
``pdu_length``); a whole frame is taken apart by ``frame.parse_frame`` and becomes one
``pulsar_commands`` row.  SEND and MESSAGE frames also yield ``pulsar_messages`` rows
(children of the frame's row): the payload is decompressed under a cap and a batch is
split into its entries (with the columnar fast path on, ``fastpath.py``, a plain batch's
entries go to column buffers instead, announced by a ``ColumnBatch`` right after the
frame's row; this module stays the definition of those rows).  What the connection
teaches is small and bounded by the connection's own commands: producer_id → topic
(PRODUCER), consumer_id → topic and subscription (SUBSCRIBE), and the chunked messages
being reassembled.

Decisions:

* Frames above ``max_frame_bytes`` (default 5 MiB + 10 KiB, the official clients' own
  frame limit) are skipped as they stream past, never buffered: one
  ``pulsar.oversize_frame`` anomaly each.  A header that cannot start a frame (sizes
  inconsistent, no BaseCommand type tag) gives ``pulsar.bad_header`` and the direction
  resynchronises on the next plausible header with a known command type
  (``pulsar.resync`` says how much was skipped).  A gap inside a frame drops it
  (``pulsar.gap_in_frame``); parsing resumes right after it when its length was known.
* The checksum is verified (``crc_status``); a mismatch is an anomaly but the frame is
  still decoded: a forensic reader wants to see what was sent.
* Chunks are collected per (direction, producer/consumer id, uuid) and joined when the
  last one arrives with every earlier chunk seen in order; a gap in the ids, a missing
  first chunk, too many pending bytes (``max_chunked_bytes``) or the end of the
  connection yield one ``incomplete`` row per message plus an anomaly.  Chunk 0 again
  starts over (consumers may get chunks redelivered); a repeated chunk id is ignored.
* Auth data is never kept: its length and SHA-256 go into columns and the JSON.

Options (the dict given to ``PulsarDissector.session``):

``max_frame_bytes``        largest frame accepted (default 5 MiB + 10 KiB)
``payload_cap``            payload bytes kept per message row (default 4096; None: all)
``max_uncompressed_bytes`` largest decompressed payload (default 64 MiB)
``max_chunked_bytes``      chunk bytes held per connection while reassembling (64 MiB)
``max_pending_chunked``    chunked messages in progress per connection (default 100)
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache
from typing import Any

from dissectors.api import ColumnarSession, ColumnBatch, Direction, Record
from dissectors.framing import Dropped, Invalid, LengthPrefixedFramer, Oversize, Pdu, Resynced
from dissectors.options import read_payload_cap, session_option
from dissectors.proto.columns import RowsFormat
from dissectors.proto.wire import Decoded, FieldSpec, Kind
from dissectors.pulsar import codec, fastpath, pb
from dissectors.pulsar.codes import CommandType, PulsarAnomaly, ResourceType
from dissectors.pulsar.frame import (
    COMMAND_NAMES,
    DEFAULT_MAX_FRAME_BYTES,
    PAYLOAD_COMMANDS,
    Frame,
    command_name,
    make_pdu_length,
    make_resync,
    parse_frame,
    peek_type,
)
from dissectors.pulsar.table import PULSAR_COMMANDS
from dissectors.sessions import LIMIT_MEMORY, FramedSession

__all__ = [
    "DEFAULT_MAX_CHUNKED_BYTES",
    "DEFAULT_MAX_PENDING_CHUNKED",
    "PulsarSession",
]

# Chunk bytes held per connection while waiting for a message's last chunk.  Clients
# default to at most 10-100 pending chunked messages of up to a few MiB each.
DEFAULT_MAX_CHUNKED_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_PENDING_CHUNKED = 100

CMD = "pulsar_commands"
MSG = "pulsar_messages"


@cache
def _command_rows() -> RowsFormat:
    """The format of command rows as columns (one for the process: it keeps nothing of a
    session's, and the conveyor makes one accumulator per table from the first one)."""
    return RowsFormat(PULSAR_COMMANDS, carried=False)
_U64 = 1 << 64
_MAX_MS = (2**63 - 1) // 1_000_000  # larger millisecond values do not fit ns timestamps

_BASE = pb.schema("BaseCommand")
_SUB_FIELD: dict[int, str] = {n: f.name for n, f in _BASE.fields.items() if n != 1}
_SINGLE = pb.schema("SingleMessageMetadata")
_OMITTED = {
    f"{_SUB_FIELD[n]}.{num}"
    for n, f in _BASE.fields.items()
    if f.message is not None and f.message.full_name in pb.OMITTED
    for num in pb.OMITTED[f.message.full_name]
}
_COMPRESSION = pb.enum_names("CompressionType")
_SERVER_ERROR = pb.enum_names("ServerError")
_AUTH_FIELDS = frozenset({"auth_data", "original_auth_data"})
_FEATURES = [f.name for f in pb.schema("FeatureFlags").fields.values()]
# json.dumps(..., separators=(",", ":"), ensure_ascii=False) without making an encoder
# per frame (dumps does, for any non-default argument)
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# commands that only ever go one way (a first one the other way is reported)
_C = CommandType
# (keyed by int: the other direction is looked up as ``1 - direction``)
_ONLY: dict[int, frozenset[CommandType]] = {
    Direction.C2S: frozenset({_C.CONNECT, _C.SUBSCRIBE, _C.PRODUCER, _C.SEND, _C.ACK, _C.FLOW,
                              _C.PARTITIONED_METADATA, _C.LOOKUP}),
    Direction.S2C: frozenset({_C.CONNECTED, _C.SEND_RECEIPT, _C.MESSAGE, _C.PRODUCER_SUCCESS,
                              _C.PARTITIONED_METADATA_RESPONSE, _C.LOOKUP_RESPONSE}),
}

# sub-command field name → (column, how); how: "id" (uint64 → int64), "u32" (uint32 →
# int32, two's complement), "enum" (name), "" (as is).  Fields with other meanings are
# handled in ``_columns``.
_SIMPLE: dict[str, tuple[str, str]] = {
    "request_id": ("request_id", "id"),
    "producer_id": ("producer_id", "id"),
    "consumer_id": ("consumer_id", "id"),
    "sequence_id": ("sequence_id", "id"),
    "highest_sequence_id": ("highest_sequence_id", "id"),
    "consumer_name": ("consumer_name", ""),
    "producer_name": ("producer_name", ""),
    "sub_type": ("sub_type", "enum"),
    "ack_type": ("ack_type", "enum"),
    "validation_error": ("validation_error", "enum"),
    "message_permits": ("message_permits", ""),
    "num_messages": ("num_messages", ""),
    "redelivery_count": ("redelivery_count", "u32"),
    "is_chunk": ("is_chunk", ""),
    "error": ("error_code", "enum"),
    "error_code": ("error_code", "enum"),
    "error_message": ("error_message", ""),
    "response": ("lookup_response", "enum"),
    "broker_service_url": ("broker_service_url", ""),
    "broker_service_url_tls": ("broker_service_url_tls", ""),
    "assigned_broker_service_url": ("broker_service_url", ""),
    "assigned_broker_service_url_tls": ("broker_service_url_tls", ""),
    "authoritative": ("authoritative", ""),
    "proxy_through_service_url": ("proxy_through_service_url", ""),
    "partitions": ("partitions", "u32"),
    "protocol_version": ("protocol_version", ""),
    "client_version": ("client_version", ""),
    "server_version": ("server_version", ""),
    "max_message_size": ("max_message_size", ""),
    "proxy_to_broker_url": ("proxy_to_broker_url", ""),
    "original_principal": ("original_principal", ""),
    "producer_access_mode": ("producer_access_mode", "enum"),
    "last_sequence_id": ("last_sequence_id", ""),
    "initial_position": ("initial_position", "enum"),
    "durable": ("durable", ""),
    "txnid_least_bits": ("txnid_least_bits", "id"),
    "txnid_most_bits": ("txnid_most_bits", "id"),
}


# sub-command fields ``_columns`` looks for beyond ``_SIMPLE`` and message_id
_RARE_FIELDS = frozenset({"message", "topic", "subscription", "last_message_id",
                          "message_ids", "feature_flags", "metadata"})
# commands ``_columns`` reads more of (auth data, resource ids)
_TYPED = frozenset({CommandType.CONNECT, CommandType.AUTH_CHALLENGE, CommandType.AUTH_RESPONSE,
                    CommandType.TOPIC_MIGRATED})
_REDELIVER = int(CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES)
_SEND = int(CommandType.SEND)


def _s64(v: int) -> int:
    return v - _U64 if v >= 1 << 63 else v


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _limit(options: Mapping[str, Any], name: str, default: int, minimum: int = 1) -> int:
    """An int option, None refused (every Pulsar limit is one)."""
    v = session_option(options, name, default, minimum=minimum, owner="pulsar")
    assert v is not None  # none_ok False and an int default: session_option gives an int
    return v


def _kv(items: list[Any] | None) -> list[tuple[str, str]] | None:
    """Repeated KeyValue → map entries (duplicates and order kept)."""
    if not items:
        return None
    out = []
    for d in items:
        if isinstance(d, Decoded):
            out.append((str(d.values.get("key", "")), str(d.values.get("value", ""))))
    return out


def _message_id(d: object) -> dict[str, int | None] | None:
    if not isinstance(d, Decoded):
        return None
    v = d.values
    led = v.get("ledger_id")
    ent = v.get("entry_id")
    return {
        "ledger_id": None if led is None else _s64(led),
        "entry_id": None if ent is None else _s64(ent),
        "partition": v.get("partition"),
        "batch_index": v.get("batch_index"),
    }


_FIELDS_BY_NAME: dict[str, dict[str, FieldSpec]] = {}  # message full name → name → spec
# message full name → the names whose scalars ``_plain_value`` changes (enums, auth data)
_SPECIAL: dict[str, frozenset[str]] = {}
_AS_IS = (int, str, bool, float)  # scalar types kept as they are outside _SPECIAL


def _fields(d: Decoded) -> dict[str, FieldSpec]:
    """The name → spec map of ``d``'s message (made once per message type, not per frame)."""
    fields = _FIELDS_BY_NAME.get(d.schema.full_name)
    if fields is None:
        fields = _FIELDS_BY_NAME[d.schema.full_name] = {
            f.name: f for f in d.schema.fields.values()}
        _SPECIAL[d.schema.full_name] = frozenset(
            [f.name for f in fields.values() if f.kind is Kind.ENUM and f.enum is not None]
        ) | _AUTH_FIELDS
    return fields


def _plain(d: Decoded) -> dict[str, Any]:
    """JSON-ready view: enum names, bytes as hex, auth data as {len, sha256}."""
    out: dict[str, Any] = {}
    fields = _fields(d)
    special = _SPECIAL[d.schema.full_name]
    for k, v in d.values.items():
        # most values are plain ints and strings: as they are, without the calls
        if type(v) in _AS_IS and k not in special:
            out[k] = v
        else:
            out[k] = _plain_value(k, v, fields.get(k))
    return out


def _plain_value(name: str, v: Any, spec: FieldSpec | None) -> Any:
    if isinstance(v, list):
        return [_plain_value(name, x, spec) for x in v]
    if isinstance(v, Decoded):
        return _plain(v)
    if name in _AUTH_FIELDS:
        raw = v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape")
        return {"len": len(raw), "sha256": _sha(raw)}
    if isinstance(v, bytes):
        return v.hex()
    if spec is not None and spec.kind is Kind.ENUM and spec.enum is not None:
        return spec.enum.get(v, v)
    return v


def _enum(spec: FieldSpec | None, v: object) -> str | None:
    if not isinstance(v, int):
        return None
    if spec is not None and spec.enum is not None:
        return spec.enum.get(v) or str(v)
    return str(v)


class _Chunked:
    """A chunked message being reassembled."""

    __slots__ = ("base", "md", "parts", "ids", "offsets", "nbytes", "num_chunks", "broken",
                 "start", "ts_first", "frame_first", "end", "ts_last", "frame_last", "why",
                 "wire_len")

    def __init__(self, base: dict[str, Any], md: dict[str, Any], rec: Record) -> None:
        self.base = base
        self.md = md
        self.parts: list[bytes] = []
        self.ids: list[int] = []
        self.offsets: list[int] = []
        self.nbytes = 0
        self.wire_len = 0
        self.num_chunks = md.get("num_chunks_from_msg")
        self.broken = False
        self.why = ""
        self.start = rec.offset_start
        self.ts_first = rec.ts_first_ns
        self.frame_first = rec.frame_first
        self.end = rec.offset_end  # of the last chunk's frame seen
        self.ts_last = rec.ts_last_ns
        self.frame_last = rec.frame_last


class PulsarSession(FramedSession, ColumnarSession):
    """One Pulsar connection (both directions)."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = options or {}
        self.max_frame_bytes = _limit(options, "max_frame_bytes", DEFAULT_MAX_FRAME_BYTES,
                                      minimum=16)
        self.payload_cap = read_payload_cap(options, "pulsar")
        self._watched: frozenset[str] = frozenset(options.get("watched_tables") or ())
        self.max_uncompressed = _limit(options, "max_uncompressed_bytes",
                                       codec.DEFAULT_MAX_UNCOMPRESSED_BYTES)
        self.max_chunked_bytes = _limit(options, "max_chunked_bytes",
                                        DEFAULT_MAX_CHUNKED_BYTES, minimum=0)
        self.max_pending_chunked = _limit(options, "max_pending_chunked",
                                          DEFAULT_MAX_PENDING_CHUNKED)
        pdu_length = make_pdu_length(self.max_frame_bytes)
        resync = make_resync(self.max_frame_bytes)
        super().__init__(
            LengthPrefixedFramer(pdu_length, max_pdu_bytes=self.max_frame_bytes, resync=resync),
            LengthPrefixedFramer(pdu_length, max_pdu_bytes=self.max_frame_bytes, resync=resync),
        )
        self.budget = options.get("memory_budget")
        for fr in self.framers:  # a frame being buffered draws from the run's budget
            fr.budget = self.budget
        self.producers: dict[int, str] = {}
        self.consumers: dict[int, tuple[str, str | None]] = {}
        self._chunks: OrderedDict[tuple[int, int, str], _Chunked] = OrderedDict()
        self._chunk_bytes = 0
        self._wrong_dir: set[tuple[int, int]] = set()
        self.frames = [0, 0]  # command rows per direction
        self.messages = [0, 0]  # message rows per direction
        # columnar fast path (fastpath.py), switched on by columnar(): the message rows
        # of plain batches go to fast_rows (None: counted only) as ColumnBatch records
        self.fast_on = False
        self.fast_rows: fastpath.MessageRows | None = None
        self._command_rows: RowsFormat | None = None

    def columnar(self, keep_rows: bool) -> None:
        """``ColumnarSession``: batch entries into columns (``fastpath``), and each
        frame's command row as a ``ColumnBatch`` of one row (``RowsFormat.record_of``: no
        envelope dict per row in the pipeline, no dict row in the sink), when the
        extension is built and the fast path not turned off."""
        if fastpath.enabled():
            self.fast_on = True
            self.fast_rows = fastpath.MessageRows() if keep_rows else None
            # (not when the sink reads command rows as they come: ``watched_tables``)
            if CMD not in self._watched:
                self._command_rows = _command_rows()

    # ---- driver hooks --------------------------------------------------------------

    def on_close(self, ts_ns: int, out: list[Record]) -> None:
        """Chunked messages still waiting for their last chunk are reported incomplete."""
        for key in list(self._chunks):
            ctx = self._chunks.pop(key)
            self._chunk_bytes -= ctx.nbytes
            self._incomplete(Direction(key[0]), ctx, out, PulsarAnomaly.CHUNK_INCOMPLETE,
                             "the connection ended before the last chunk")

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        t = type(ev)
        if t is Pdu:
            self._frame(direction, ev, out)
        elif t is Oversize:
            typ, _ = peek_type(ev.head)
            what = command_name(typ) if typ is not None else "frame"
            self.anomaly(out, PulsarAnomaly.OVERSIZE_FRAME,
                         f"{what} of {ev.nbytes} bytes exceeds max_frame_bytes "
                         f"{self.max_frame_bytes}; skipped without decoding", direction, ev)
        elif t is Invalid:
            self.anomaly(out, PulsarAnomaly.BAD_HEADER,
                         f"no Pulsar frame starts here (header {ev.head[:12].hex()}: sizes "
                         "inconsistent or no BaseCommand type); resynchronising",
                         direction, ev)
        elif t is Resynced:
            how = ("until a plausible frame header" if ev.found
                   else "(cut by a gap or the end of the stream)")
            self.anomaly(out, PulsarAnomaly.RESYNC, f"skipped {ev.end - ev.start} bytes {how}",
                         direction, ev)
        elif t is Dropped:
            at_close = self.closing
            where = "the end of the stream" if at_close else "a gap"
            if ev.kind == "oversize":
                detail = (f"oversize frame of {ev.declared_end - ev.start} bytes (above "
                          f"max_frame_bytes {self.max_frame_bytes}) being skipped was cut by "
                          f"{where} after {ev.end - ev.start} bytes")
            else:
                declared = (f" of {ev.declared_end - ev.start} bytes"
                            if ev.declared_end is not None else "")
                after = ("; parsing resumes where it ends" if ev.resume_at is not None
                         else "; resynchronising" if not at_close else "")
                detail = (f"partial frame{declared} cut by {where} after "
                          f"{ev.end - ev.start} bytes{after}")
            kind = PulsarAnomaly.EOF_IN_FRAME if at_close else PulsarAnomaly.GAP_IN_FRAME
            self.anomaly(out, kind, detail, direction, ev)

    # ---- one frame -----------------------------------------------------------------

    def _frame(self, direction: Direction, pdu: Pdu, out: list[Record]) -> None:
        fr = fastpath.frame(pdu.data) if self.fast_on else parse_frame(pdu.data)
        t = fr.type
        values: dict[str, Any] = {
            "command": "?" if t is None else command_name(t),
            "command_type": t,
            "frame_size": len(pdu.data),
            "command_size": fr.command_size if fr.command_size < 1 << 31 else None,
        }
        row = Record(CMD, direction, pdu.start, pdu.end, pdu.ts_first_ns, pdu.ts_last_ns,
                     pdu.frame_first, pdu.frame_last, values)
        at = len(out)
        out.append(row)
        self.frames[direction] += 1
        problems = fr.problems  # (the frame's own list)
        cmd = fr.command
        sub_name = _SUB_FIELD.get(t) if t is not None else None
        sub = cmd.values.get(sub_name) if sub_name else None
        if t is None:
            problems.append((PulsarAnomaly.BAD_COMMAND, "BaseCommand type did not decode"))
        elif t not in COMMAND_NAMES:
            problems.append((PulsarAnomaly.UNKNOWN_COMMAND,
                             f"BaseCommand type {t} is not in the schema (newest known: "
                             f"{int(max(CommandType))})"))
        elif sub is None:
            problems.append((PulsarAnomaly.MISSING_SUBCOMMAND,
                             f"{values['command']} without its sub-command (BaseCommand field "
                             f"{t})"))
        if cmd.error is not None:
            values["decode_error"] = cmd.error
            problems.append((PulsarAnomaly.BAD_COMMAND,
                             f"{values['command']}: BaseCommand does not decode: {cmd.error}"))
        values["unknown_fields"] = [u for u in cmd.unknown if u not in _OMITTED] \
            if cmd.unknown else []
        if isinstance(sub, Decoded) and t is not None:  # (a sub-command implies a type)
            self._columns(direction, t, sub, values)
            js = fastpath.plain_json(sub, _AUTH_FIELDS) if self.fast_on else None
            values["command_json"] = _COMPACT_JSON(_plain(sub)) if js is None else js
        elif isinstance(sub, bytes):
            values["command_json"] = json.dumps({"raw": sub.hex()})
        if cmd.bad_utf8:
            problems.append((PulsarAnomaly.BAD_UTF8,
                             f"{values['command']}: string fields not valid UTF-8: "
                             f"{', '.join(cmd.bad_utf8)} (shown with \\x escapes)"))
        if t is not None and t in _ONLY[1 - direction]:
            key = (int(direction), t)
            if key not in self._wrong_dir:
                self._wrong_dir.add(key)
                problems.append((PulsarAnomaly.WRONG_DIRECTION,
                                 f"{values['command']} sent {direction.short}; Pulsar sends it "
                                 "the other way (reported once per command and direction; "
                                 "client/server roles may be swapped)"))
        if fr.has_payload_section:
            self._payload_columns(fr, values)
        if t in PAYLOAD_COMMANDS and fr.metadata is not None:
            self._messages(direction, t, fr, values, row, out, problems)
        for kind, detail in problems:
            self.anomaly(out, kind, detail, direction, pdu)
        if self._command_rows is not None:  # (the row is whole: its values, its children)
            out[at] = self._command_rows.record_of(row, len(pdu.data),
                                                   self.fast_rows is not None)

    def _columns(self, direction: Direction, t: int, sub: Decoded, values: dict[str, Any]
                 ) -> None:
        v = sub.values
        specs = _fields(sub)
        for name, raw in v.items():
            m = _SIMPLE.get(name)
            if m is None:
                continue
            col, how = m
            if how == "id":
                if isinstance(raw, int):
                    values[col] = _s64(raw)
            elif how == "u32":
                if isinstance(raw, int):
                    values[col] = raw - (1 << 32) if raw >= 1 << 31 else raw
            elif how == "enum":
                values[col] = _enum(specs.get(name), raw)
            elif isinstance(raw, bool | int | str):
                if isinstance(raw, int) and not isinstance(raw, bool) and not (
                    -(1 << 63) <= raw < 1 << 63
                ):
                    continue
                values[col] = raw
        topic = None
        # (the fields below are absent from the frequent commands, SEND, MESSAGE, ACK,
        # FLOW, SEND_RECEIPT: one check instead of a look-up each)
        rare = not _RARE_FIELDS.isdisjoint(v)
        if rare:
            if isinstance(v.get("message"), str):
                values["error_message"] = v["message"]
            topic = v.get("topic")
            if isinstance(topic, str):
                values["topic"] = topic
            subscription = v.get("subscription")
            if isinstance(subscription, str):
                values["subscription"] = subscription
            elif isinstance(subscription, Decoded):  # END_TXN_ON_SUBSCRIPTION
                values["topic"] = subscription.values.get("topic")
                values["subscription"] = subscription.values.get("subscription")
        # message ids
        mid = v.get("message_id")
        ids = None
        if rare:
            if mid is None:
                mid = v.get("last_message_id")
            if t == _REDELIVER:
                ids = v.get("message_ids")
        if isinstance(mid, list):
            ids = mid
            mid = mid[0] if mid else None
        elif ids:
            mid = ids[0]
        first = _message_id(mid)
        if first is not None:
            values.update(first)
        if ids:
            values["message_ids"] = [x for x in map(_message_id, ids) if x is not None]
        # feature flags, metadata, auth
        if rare:
            ff = v.get("feature_flags")
            if isinstance(ff, Decoded):
                values["feature_flags"] = [n for n in _FEATURES if ff.values.get(n) is True]
            md = _kv(v.get("metadata"))
            if md is not None:
                values["metadata"] = md
        if t not in _TYPED:
            pass
        elif t == CommandType.CONNECT:
            method = v.get("auth_method_name")
            if method is None and "auth_method" in v:
                method = _enum(specs.get("auth_method"), v["auth_method"])
            values["auth_method"] = method
            data = v.get("auth_data")
            if isinstance(data, bytes):
                values["auth_data_len"] = len(data)
                values["auth_data_sha256"] = _sha(data)
        elif t in (CommandType.AUTH_CHALLENGE, CommandType.AUTH_RESPONSE):
            ad = v.get("challenge" if t == CommandType.AUTH_CHALLENGE else "response")
            if isinstance(ad, Decoded):
                values["auth_method"] = ad.values.get("auth_method_name")
                data = ad.values.get("auth_data")
                if isinstance(data, bytes):
                    values["auth_data_len"] = len(data)
                    values["auth_data_sha256"] = _sha(data)
        elif t == CommandType.TOPIC_MIGRATED:
            rid = v.get("resource_id")
            if isinstance(rid, int):
                col = ("consumer_id" if v.get("resource_type") == ResourceType.CONSUMER
                       else "producer_id")
                values[col] = _s64(rid)
        if t == _SEND and "num_messages" not in v:
            values["num_messages"] = 1
        # topic bookkeeping and resolution
        pid = values.get("producer_id")
        cid = values.get("consumer_id")
        if isinstance(topic, str):
            if t == CommandType.PRODUCER and pid is not None:
                self.producers[pid] = topic
            elif t == CommandType.SUBSCRIBE and cid is not None:
                self.consumers[cid] = (topic, values.get("subscription"))
        if values.get("topic") is None:
            if pid is not None and pid in self.producers:
                values["topic"] = self.producers[pid]
            elif cid is not None and cid in self.consumers:
                values["topic"], sub_name = self.consumers[cid]
                if values.get("subscription") is None:
                    values["subscription"] = sub_name

    @staticmethod
    def _payload_columns(fr: Frame, values: dict[str, Any]) -> None:
        values["crc_status"] = fr.crc_status
        values["checksum"] = fr.checksum
        if fr.metadata_size is not None and fr.metadata_size < 1 << 31:
            values["metadata_size"] = fr.metadata_size
        if fr.metadata is not None:
            values["payload_size"] = len(fr.payload)
            md = fr.metadata.values
            if values.get("producer_name") is None and isinstance(md.get("producer_name"), str):
                values["producer_name"] = md["producer_name"]
            if values["command"] == "MESSAGE":
                n = md.get("num_messages_in_batch")
                values["num_messages"] = n if isinstance(n, int) else 1
        bem = fr.broker_entry_metadata
        if bem is not None:
            values["broker_timestamp"] = _ms_to_ns(bem.values.get("broker_timestamp"))
            idx = bem.values.get("index")
            values["broker_index"] = None if idx is None else _s64(idx)

    # ---- messages ------------------------------------------------------------------

    def _messages(self, direction: Direction, t: int, fr: Frame, cmd_values: dict[str, Any],
                  row: Record, out: list[Record], problems: list[tuple[str, str]]) -> None:
        meta = fr.metadata
        assert meta is not None
        md = meta.values
        base: dict[str, Any] = {
            "command": "SEND" if t == CommandType.SEND else "MESSAGE",
            "topic": cmd_values.get("topic"),
            "crc_status": fr.crc_status,
            "broker_timestamp": cmd_values.get("broker_timestamp"),
            "broker_index": cmd_values.get("broker_index"),
        }
        if t == CommandType.SEND:
            base["producer_id"] = cmd_values.get("producer_id")
        else:
            for k in ("consumer_id", "subscription", "ledger_id", "entry_id", "partition",
                      "redelivery_count"):
                base[k] = cmd_values.get(k)
        self._metadata_columns(md, base, problems)
        if meta.error is not None:
            problems.append((PulsarAnomaly.BAD_METADATA,
                             f"MessageMetadata does not decode: {meta.error}; payload not "
                             "interpreted"))
            base["wire_payload_len"] = len(fr.payload)
            base["incomplete"] = True
            row.children.append(self._msg_record(row, base))
            self.messages[direction] += 1
            return
        if "uuid" in md and "chunk_id" in md and "num_chunks_from_msg" in md:
            self._chunk(direction, md, base, fr.payload, row, out, problems)
            return
        base["wire_payload_len"] = len(fr.payload)
        fast = (row, out) if self.fast_on else None
        for values in self._payload_rows(md, base, fr.payload, problems, fast):
            row.children.append(self._msg_record(row, values))
            self.messages[direction] += 1

    @staticmethod
    def _msg_record(row: Record, values: dict[str, Any]) -> Record:
        return Record(MSG, row.direction, row.offset_start, row.offset_end, row.ts_first_ns,
                      row.ts_last_ns, row.frame_first, row.frame_last, values)

    @staticmethod
    def _metadata_columns(md: dict[str, Any], base: dict[str, Any],
                          problems: list[tuple[str, str]]) -> None:
        base["producer_name"] = md.get("producer_name")
        for k in ("publish_time", "deliver_at_time"):
            if k in md:
                ns = _ms_to_ns(md[k])
                if ns is None and md[k] != 0:
                    problems.append((PulsarAnomaly.BAD_TIMESTAMP,
                                     f"MessageMetadata {k} {md[k]} ms is out of range"))
                base[k] = ns
        comp = md.get("compression", 0)
        base["compression"] = _COMPRESSION.get(comp) or str(comp)
        if "uncompressed_size" in md:
            base["uncompressed_size"] = md["uncompressed_size"]
        for k in ("replicated_from", "marker_type", "encryption_algo"):
            if k in md:
                base[k] = md[k]
        for k in ("txnid_least_bits", "txnid_most_bits", "highest_sequence_id"):
            if k in md:
                base[k] = _s64(md[k])
        if md.get("replicate_to"):
            base["replicate_to"] = list(md["replicate_to"])
        if "schema_version" in md:
            base["schema_version"] = md["schema_version"]
        if "num_messages_in_batch" in md:
            base["num_messages_in_batch"] = md["num_messages_in_batch"]
        base["encrypted"] = bool(md.get("encryption_keys"))

    def _payload_rows(self, md: dict[str, Any], base: dict[str, Any], raw: bytes,
                      problems: list[tuple[str, str]],
                      fast: tuple[Record, list[Record]] | None = None) -> list[dict[str, Any]]:
        """Message rows for one whole payload (a frame's, or a reassembled chunked one).
        ``fast``: the frame's (row, out) when a plain batch may go to the columns
        (``_fast_batch``; then no dict row is returned)."""
        seq = md.get("sequence_id")
        if base["encrypted"]:
            values = dict(base)
            values["sequence_id"] = None if seq is None else _s64(seq)
            _single_fields(md, values)
            self._payload(values, raw)
            return [values]
        res = self._decompress(md, raw)
        if res.problem is not None:
            problems.append(res.problem)
        if res.data is None:
            values = dict(base)
            values["sequence_id"] = None if seq is None else _s64(seq)
            values["incomplete"] = True
            return [values]
        data = res.data
        if "num_messages_in_batch" not in md:
            values = dict(base)
            values["sequence_id"] = None if seq is None else _s64(seq)
            _single_fields(md, values)
            self._payload(values, data)
            return [values]
        if fast is not None and self._fast_batch(md, base, data, *fast):
            return []
        return self._split_batch(md, base, data, problems)

    def _fast_batch(self, md: dict[str, Any], base: dict[str, Any], data: bytes,
                    row: Record, out: list[Record]) -> bool:
        """A plain batch's rows into the fast path's columns, announced by a
        ``ColumnBatch`` right after the frame's row (where its child records would be
        numbered); False when ``fastpath.split`` leaves the batch to ``_split_batch``."""
        n = md["num_messages_in_batch"]
        # (properties and partition_key are the entries'; a refused batch's rows are
        # made from ``base`` itself, so this copy is the chunk's alone)
        shared = dict(base)
        shared["incomplete"] = False
        chunk = fastpath.split(data, n, md.get("sequence_id"), self.payload_cap, shared, (
            row.offset_start, row.offset_end, row.ts_first_ns, row.ts_last_ns,
            row.frame_first, row.frame_last))
        if chunk is None:
            return False
        direction = row.direction
        rows = self.fast_rows
        if rows is not None:
            rows.chunks.append(chunk)
        # the ColumnarSession contract: ``out`` (typed by FramedSession) takes ColumnBatch
        batches: list[Record | ColumnBatch] = out  # type: ignore[assignment]
        batches.append(ColumnBatch(MSG, direction, n, rows, fastpath.FORMAT))
        self.messages[direction] += n
        return True

    def _decompress(self, md: dict[str, Any], raw: bytes) -> codec.Result:
        """Decompress a payload, its output drawn from the run's memory budget while it
        is made: the size it declares (else the cap) is held first, which makes older
        holders give memory back; if that cannot make room, it is not decompressed (a
        ``limit.memory`` anomaly) rather than grow past the budget."""
        compression = md.get("compression", 0)
        declared = md.get("uncompressed_size")
        budget = self.budget
        # (the fast path's reuses a recent equal payload's result, and so its split)
        inflate = fastpath.decompress if self.fast_on else codec.decompress
        if budget is None or compression == codec.Codec.NONE:
            return inflate(compression, raw, declared, self.max_uncompressed)
        need = min(declared, self.max_uncompressed) if declared else self.max_uncompressed
        budget.hold(self, need)
        try:
            if budget.used > budget.limit_bytes:
                return codec.Result(None, (
                    LIMIT_MEMORY,
                    f"memory budget of {budget.limit_bytes} bytes reached: a payload of "
                    f"{len(raw)} compressed bytes ({need} bytes to decompress) was not "
                    "decompressed"))
            return inflate(compression, raw, declared, self.max_uncompressed)
        finally:
            budget.hold(self, 0)

    def release_memory(self, need: int) -> None:
        """Held only while a payload is decompressed: nothing can be given back then."""

    def _split_batch(self, md: dict[str, Any], base: dict[str, Any], data: bytes,
                     problems: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Entries of a batch: [u32 size, SingleMessageMetadata, payload] x n (§4.1)."""
        n = md["num_messages_in_batch"]
        seq = md.get("sequence_id")
        rows: list[dict[str, Any]] = []
        pos = 0
        end = len(data)
        mv = memoryview(data)
        i = 0
        while i < n:
            if end - pos < 4:
                problems.append((PulsarAnomaly.BAD_BATCH,
                                 f"batch declares {n} messages but its payload ends after "
                                 f"{i}"))
                break
            size = int.from_bytes(data[pos : pos + 4], "big")
            if size > end - pos - 4:
                problems.append((PulsarAnomaly.BAD_BATCH,
                                 f"batch entry {i}: metadata of {size} bytes runs past the "
                                 "payload end"))
                break
            single = pb.decode(data[pos + 4 : pos + 4 + size], _SINGLE)
            pos += 4 + size
            psize = single.values.get("payload_size")
            if single.error is not None or not isinstance(psize, int) or psize < 0 \
                    or psize > end - pos:
                why = single.error or (f"payload_size {psize} does not fit the "
                                       f"{end - pos} bytes left")
                problems.append((PulsarAnomaly.BAD_BATCH, f"batch entry {i}: {why}"))
                break
            values = dict(base)
            values["batch_index"] = i
            sv = single.values
            eseq = sv.get("sequence_id")
            if eseq is not None:
                values["sequence_id"] = _s64(eseq)
            elif seq is not None:
                values["sequence_id"] = _s64((seq + i) % _U64)
            _single_fields(sv, values)
            if sv.get("compacted_out") is not None:
                values["compacted_out"] = sv["compacted_out"]
            self._payload(values, bytes(mv[pos : pos + psize]))
            pos += psize
            rows.append(values)
            i += 1
        if i == n and pos != end:
            problems.append((PulsarAnomaly.BAD_BATCH,
                             f"{end - pos} bytes left after the {n} entries of a batch"))
        if not rows:
            values = dict(base)
            values["incomplete"] = True
            rows.append(values)
        return rows

    def _payload(self, values: dict[str, Any], data: bytes) -> None:
        cap = self.payload_cap
        kept = data if cap is None or len(data) <= cap else data[:cap]
        values["payload_len"] = len(data)
        values["payload_sha256"] = _sha(data)
        values["payload"] = bytes(kept)
        values["payload_truncated"] = len(kept) < len(data)
        values["incomplete"] = False

    # ---- chunks --------------------------------------------------------------------

    def _chunk(self, direction: Direction, md: dict[str, Any], base: dict[str, Any],
               payload: bytes, row: Record, out: list[Record],
               problems: list[tuple[str, str]]) -> None:
        cid = md["chunk_id"]
        nc = md["num_chunks_from_msg"]
        owner = base.get("producer_id") if direction == Direction.C2S else base.get("consumer_id")
        key = (int(direction), -1 if owner is None else owner, str(md["uuid"]))
        ctx = self._chunks.get(key)
        if cid == 0 or ctx is None:
            if ctx is not None:
                self._drop_ctx(key)
                self._incomplete(direction, ctx, out, PulsarAnomaly.CHUNK_INCOMPLETE,
                                 "chunk 0 of the same uuid started it over")
            ctx = _Chunked(base, md, row)
            if cid != 0:
                ctx.broken = True
                ctx.why = f"chunk {cid} arrived without chunk 0"
            self._chunks[key] = ctx
            while len(self._chunks) > self.max_pending_chunked:
                old_key, old = next(iter(self._chunks.items()))
                self._drop_ctx(old_key)
                self._incomplete(Direction(old_key[0]), old, out, PulsarAnomaly.CHUNK_LIMIT,
                                 f"more than max_pending_chunked {self.max_pending_chunked} "
                                 "chunked messages in progress; the oldest was given up")
        elif ctx.ids and cid <= ctx.ids[-1]:
            problems.append((PulsarAnomaly.CHUNK_DUPLICATE,
                             f"chunk {cid} of {md['uuid']} seen again; ignored"))
            return
        elif ctx.ids and cid != ctx.ids[-1] + 1 and not ctx.broken:
            ctx.broken = True
            ctx.why = f"chunks {ctx.ids[-1] + 1}..{cid - 1} missing"
        ctx.ids.append(cid)
        ctx.offsets.append(row.offset_start)
        ctx.end, ctx.ts_last, ctx.frame_last = row.offset_end, row.ts_last_ns, row.frame_last
        ctx.wire_len += len(payload)
        if not ctx.broken:
            if self._chunk_bytes + len(payload) > self.max_chunked_bytes:
                ctx.broken = True
                ctx.why = f"more than max_chunked_bytes {self.max_chunked_bytes} pending"
                self._chunk_bytes -= ctx.nbytes
                ctx.parts.clear()
                ctx.nbytes = 0
            else:
                ctx.parts.append(payload)
                ctx.nbytes += len(payload)
                self._chunk_bytes += len(payload)
        if cid < nc - 1:
            return
        self._drop_ctx(key)
        if ctx.broken:
            self._incomplete(direction, ctx, out, PulsarAnomaly.CHUNK_INCOMPLETE, ctx.why, row)
            return
        data = b"".join(ctx.parts)
        total = ctx.md.get("total_chunk_msg_size")
        if isinstance(total, int) and total != len(data):
            problems.append((PulsarAnomaly.CHUNK_SIZE_MISMATCH,
                             f"chunks of {md['uuid']} add up to {len(data)} bytes, "
                             f"total_chunk_msg_size says {total}"))
        values = self._chunk_values(ctx)
        rows = self._payload_rows(ctx.md, values, data, problems)
        for v in rows:
            rec = Record(MSG, direction, ctx.start, row.offset_end, ctx.ts_first, row.ts_last_ns,
                         ctx.frame_first, row.frame_last, v)
            row.children.append(rec)
            self.messages[direction] += 1

    def _drop_ctx(self, key: tuple[int, int, str]) -> None:
        ctx = self._chunks.pop(key)
        self._chunk_bytes -= ctx.nbytes

    @staticmethod
    def _chunk_values(ctx: _Chunked) -> dict[str, Any]:
        values = dict(ctx.base)
        md = ctx.md
        values["chunk_uuid"] = str(md.get("uuid"))
        values["chunk_id"] = ctx.ids[-1] if ctx.ids else None
        values["chunk_ids"] = list(ctx.ids)
        values["num_chunks"] = ctx.num_chunks
        total = md.get("total_chunk_msg_size")
        values["total_chunk_msg_size"] = total if isinstance(total, int) else None
        values["chunk_offsets"] = list(ctx.offsets)
        values["wire_payload_len"] = ctx.wire_len
        return values

    def _incomplete(self, direction: Direction, ctx: _Chunked, out: list[Record], kind: str,
                    why: str, row: Record | None = None) -> None:
        """One ``incomplete`` row for a chunked message that cannot be reassembled (a child
        of ``row`` when given), plus the anomaly."""
        values = self._chunk_values(ctx)
        seq = ctx.md.get("sequence_id")
        values["sequence_id"] = None if seq is None else _s64(seq)
        _single_fields(ctx.md, values)
        values["incomplete"] = True
        rec = Record(MSG, direction, ctx.start, ctx.end, ctx.ts_first, ctx.ts_last,
                     ctx.frame_first, ctx.frame_last, values)
        if row is not None:
            row.children.append(rec)
        else:
            out.append(rec)
        self.messages[direction] += 1
        out.append(Record.anomaly(
            kind,
            f"chunked message {values['chunk_uuid']} ({ctx.num_chunks} chunks, got "
            f"{values['chunk_ids']}): {why}; reported as incomplete",
            direction, rec.offset_start, rec.offset_end, rec.ts_first_ns, rec.ts_last_ns,
            rec.frame_first, rec.frame_last,
        ))


def _single_fields(src: dict[str, Any], values: dict[str, Any]) -> None:
    """Per-message fields shared by MessageMetadata and SingleMessageMetadata."""
    values["properties"] = _kv(src.get("properties")) or []
    for k in ("partition_key", "partition_key_b64_encoded", "null_partition_key",
              "ordering_key", "null_value"):
        if k in src:
            values[k] = src[k]
    if "event_time" in src:
        values["event_time"] = _ms_to_ns(src["event_time"])


def _ms_to_ns(ms: object) -> int | None:
    if not isinstance(ms, int) or ms <= 0 or ms > _MAX_MS:
        return None
    return ms * 1_000_000

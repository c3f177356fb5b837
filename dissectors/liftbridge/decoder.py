"""The Liftbridge decoder: envelopes, protobuf bodies, replicated entries and the
subjects learned from them (``dissectors.liftbridge``'s strategy).

A module apart from the dissector's declaration (``dissectors.liftbridge``, which the
registry loads on every run), so that a run whose captures carry no Liftbridge imports
neither this, the envelope reader nor ``dissectors.proto``: ``LiftbridgeDissector.decode``
imports it with the first message it is asked about.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from typing import Any

from dissectors.api import Bindings, CarriedMessage, Record
from dissectors.liftbridge import NAME, LiftbridgeState
from dissectors.liftbridge.envelope import (
    HEADER_LEN,
    MAGIC,
    VERSION,
    Entry,
    parse_entries,
    parse_header,
)
from dissectors.liftbridge.table import ENTRIES_TABLE, MSG_TYPES
from dissectors.proto import Decoded, Kind, decode, schema
from dissectors.proto.columns import rows_for
from dissectors.proto.walk import (
    WalkPlan,
    capper,
    compiled_walk,
    present_fields,
    tree,
    tree_plan,
    walk_plan,
)
from dissectors.proto.wire import ABSENT, FieldSpec, MessageSchema, planned_values, zero_value

__all__ = ["MAX_STREAM_SUBJECTS", "LiftbridgeDecoder"]

_API = "msgcap.liftbridge.api."
_INTERNAL = "msgcap.liftbridge.internal."

# MsgType → protobuf message (None: ReplicationResponse, not protobuf)
_SCHEMAS: dict[int, str | None] = {
    0: _API + "Message",
    1: _API + "Ack",
    2: _INTERNAL + "ReplicationRequest",
    3: None,
    4: _INTERNAL + "RaftJoinRequest",
    5: _INTERNAL + "RaftJoinResponse",
    6: _INTERNAL + "LeaderEpochOffsetRequest",
    7: _INTERNAL + "LeaderEpochOffsetResponse",
    8: _INTERNAL + "PropagatedRequest",
    9: _INTERNAL + "PropagatedResponse",
    10: _INTERNAL + "ServerInfoRequest",
    11: _INTERNAL + "ServerInfoResponse",
    12: _INTERNAL + "PartitionStatusRequest",
    13: _INTERNAL + "PartitionStatusResponse",
    14: _INTERNAL + "PartitionNotification",
}

# (message, field) → column where the names differ
_RENAME = {
    ("ServerInfoRequest", "id"): "server_id",
    ("ServerInfoResponse", "id"): "server_id",
}
_TS_FIELDS = frozenset({"timestamp", "reception_timestamp", "commit_timestamp"})
_U64_FIELDS = frozenset({"leader_epoch", "epoch"})
_I64_MAX = (1 << 63) - 1
_HINT_STREAM = "stream"
# whitespace as ``str.isspace`` has it (re's ``\s`` on str patterns is the same test)
_SPACE = re.compile(r"\s")
_HINT_REPLY = "reply"


# Stream subjects remembered per scope (oldest forgotten first; the dispatcher's own
# binding table is capped the same way), so a capture full of acks naming made-up
# partition subjects cannot grow memory without bound.
MAX_STREAM_SUBJECTS = 100_000


def _hint(kind: str, stream: str, partition: int | None) -> str:
    return f"{kind}|{stream}|{'' if partition is None else partition}"


@lru_cache(maxsize=4096)  # (a scope's hints are few: one per stream and partition)
def _parse_hint(hint: str) -> tuple[str, str | None, int | None]:
    kind, _, rest = hint.partition("|")
    stream, _, part = rest.partition("|")
    try:
        partition = int(part) if part else None
    except ValueError:
        partition = None
    return kind, (stream or None), partition


def _value_columns(values: dict[str, Any], value: bytes | None, cap: int | None) -> None:
    if value is None:
        values["value_len"] = None
        return
    _capped_value(values, value, cap)


# ``walk.capped_py``'s columns of a message's value (compiled when built)
_capped_value = capper(("value_len", "value_sha256", "value", "value_truncated"))


def _subject_stream(subject: str, suffix: str) -> tuple[str | None, int | None]:
    """``<ns>.<stream>.<partition>.<suffix>`` → (stream, partition)."""
    toks = subject.split(".")
    if len(toks) >= 4 and toks[-1] == suffix:
        try:
            return toks[-3], int(toks[-2])
        except ValueError:
            return None, None
    return None, None


def _json_value(v: object, spec: FieldSpec | None = None) -> object:
    if isinstance(v, Decoded):
        return _json_obj(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, list):
        return [_json_value(x, spec) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if spec is not None and spec.kind is Kind.ENUM and spec.enum and isinstance(v, int):
        return spec.enum.get(v, v)
    return v


def _json_obj(d: Decoded) -> dict[str, object]:
    by_name = {s.name: s for s in d.schema.fields.values()}
    return {k: _json_value(v, by_name.get(k)) for k, v in d.values.items()}


# one encoder for every JSON column (``json.dumps`` with these options builds one per call)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dumps(obj: object) -> str:
    return _ENCODER.encode(obj)


def _fields_of(v: object) -> Mapping[str, Any] | None:
    """The fields of a nested message as the reader (a ``Decoded``) or the compiled
    ``tree`` (a dict) gives it; None for anything else."""
    if isinstance(v, Decoded):
        return v.values
    return v if isinstance(v, dict) else None


def _envelope(payload: bytes, anomalies: list[tuple[str, str]]
              ) -> tuple[dict[str, Any], int | None, int | None]:
    """(the row's values from the envelope header of ``payload``, its MsgType, where the
    payload to decode starts: None when it is not decoded, for a fatal header problem
    or an unknown MsgType), the header's problems added to ``anomalies``."""
    values: dict[str, Any] = {"magic_ok": True, "malformed": False, "decode_error": None,
                              "unknown_fields": []}
    header = parse_header(payload)
    values["version"] = header.version
    values["header_len"] = header.header_len
    values["flags"] = header.flags
    values["msg_type_code"] = header.msg_type
    code = header.msg_type
    values["msg_type"] = MSG_TYPES[code] if code is not None and code < len(MSG_TYPES) else None
    values["crc32c"] = header.crc
    values["crc_status"] = header.crc_status
    anomalies.extend(header.problems)
    if header.fatal is not None:
        values["malformed"] = True
        values["decode_error"] = header.fatal
        return values, code, None
    if values["msg_type"] is None:
        detail = f"unknown envelope MsgType {code}; payload not decoded"
        values["malformed"] = True
        values["decode_error"] = detail
        anomalies.append(("liftbridge.unknown_msg_type", detail))
        return values, code, None
    return values, code, header.payload_at or 0


# Envelope header bytes 4..8 (version 0, HeaderLen 8, no flags, a known MsgType) -> the
# row's values ``_envelope`` gives such a header (which has no problem to report and
# nothing past those bytes to read): worked out once, not per message.  (A row copies
# it and gets its own ``unknown_fields`` list.)
_PLAIN_HEADERS: dict[bytes, dict[str, Any]] = {
    bytes([VERSION, HEADER_LEN, 0, code]): _envelope(MAGIC + bytes([VERSION, HEADER_LEN, 0,
                                                                    code]), [])[0]
    for code in range(len(MSG_TYPES))
}


class LiftbridgeDecoder:
    """``LiftbridgeDissector.decode`` and what it calls (the dissector's shell delegates
    here: see the module docstring)."""

    @classmethod
    def decode(
        cls, state: LiftbridgeState, bindings: Bindings, msg: CarriedMessage, hint: str
    ) -> list[Record]:
        payload = msg.payload
        kind, h_stream, h_partition = _parse_hint(hint) if hint else ("", None, None)
        if payload[:4] != MAGIC:
            if kind != _HINT_STREAM:
                return []
            return [cls._plain(state, bindings, msg, h_stream, h_partition)]
        anomalies: list[tuple[str, str]] = []
        plain = _PLAIN_HEADERS.get(payload[4:8])
        if plain is not None:  # (the usual header: its columns as ``_envelope`` gives them)
            values = plain.copy()
            values["unknown_fields"] = []
            code: int | None = payload[7]
            at: int | None = HEADER_LEN
        else:
            values, code, at = _envelope(payload, anomalies)
        children: list[Record] = []
        if at is not None:
            assert code is not None  # (a payload to decode: MSG_TYPES names its type)
            values["payload_len"] = len(payload) - at
            if kind == _HINT_REPLY or code in (2, 6):
                if kind == _HINT_REPLY:
                    values["stream"], values["partition"] = h_stream, h_partition
                else:
                    suffix = "replicate" if code == 2 else "offset"
                    values["stream"], values["partition"] = _subject_stream(msg.subject, suffix)
            if code == 3:
                children = cls._replication_response(state, bindings, msg, values,
                                                     payload[at:], at, anomalies)
            else:
                cls._protobuf(state, bindings, msg, code, values, at, anomalies)
        fmt = None if anomalies else rows_for(state.columns, bindings)
        if fmt is not None:  # (entries ride as the row's children either way)
            out = [fmt.record(msg, values, children)]
        else:
            rec = msg.record(NAME, values)
            rec.children = children
            out = [rec]
            out.extend(msg.anomaly(k, d) for k, d in anomalies)
        cls._learn_reply(bindings, msg, code, values)
        return out

    # -- plain stream data ------------------------------------------------------------

    @classmethod
    def _plain(cls, state: LiftbridgeState, bindings: Bindings, msg: CarriedMessage,
               stream: str | None, partition: int | None) -> Record:
        values: dict[str, Any] = {
            "magic_ok": False,
            "malformed": False,
            "payload_len": len(msg.payload),
            "subject": msg.subject,
            "stream": stream,
            "partition": partition,
        }
        _value_columns(values, msg.payload, state.payload_cap)
        fmt = rows_for(state.columns, bindings)
        return msg.record(NAME, values) if fmt is None else fmt.record(msg, values)

    # -- protobuf types ---------------------------------------------------------------

    @classmethod
    def _protobuf(cls, state: LiftbridgeState, bindings: Bindings, msg: CarriedMessage,
                  code: int, values: dict[str, Any], at: int,
                  anomalies: list[tuple[str, str]]) -> None:
        full = _SCHEMAS[code]
        assert full is not None
        walked = _walk_plans(full) if code not in (8, 9) else None  # (8, 9: their own rows)
        got = None
        if walked is not None:
            plan = walked[0]
            got = _walk(msg.payload, at, plan.table, _NO_BASE, plan.defaults)
        if got is not None:  # a clean message of plain fields: the walk's values
            assert walked is not None  # (it walked)
            fields, present = got
            _, columns, has_value = walked
            values.update(fields)
            if has_value:  # (its raw value, kept by ``present_fields`` below)
                _value_columns(values, fields["value"], state.payload_cap)
            if code < 2:  # (a Message or an Ack: the other types teach nothing here)
                held = present_fields(fields, present, columns)
                if code == 0:
                    cls._internal_value(msg, values, held)
                cls._learn_streams(state, bindings, code, values, held)
            return
        if code in (8, 9) and cls._walked_nested(state, bindings, msg, code, values, at,
                                                 anomalies):
            return
        d = decode(msg.payload[at:], schema(full), base=at)
        clean_end = d.error is None
        if not clean_end:
            values["malformed"] = True
            values["decode_error"] = d.error
            anomalies.append((
                "liftbridge.truncated_protobuf" if d.truncated else "liftbridge.bad_protobuf",
                f"{MSG_TYPES[code]}: {d.error}; {len(d.values)} field(s) decoded before it",
            ))
        values["unknown_fields"] = list(d.unknown)
        if d.bad_utf8:
            anomalies.append((
                "liftbridge.invalid_utf8",
                f"{MSG_TYPES[code]}: string field(s) {', '.join(d.bad_utf8)} not valid UTF-8",
            ))
        if code == 8:
            cls._request_columns(values, d.values, d.schema, clean_end, anomalies,
                                 _ops_json)
        elif code == 9:
            cls._propagated_response(values, d.values, d.schema, clean_end, anomalies)
        else:
            for (_, col, _, spec, how), v in planned_values(d.values, _plan(full), clean_end):
                if how == _COPY:
                    values[col] = v
                elif how == _VALUE:
                    _value_columns(values, v, state.payload_cap)
                else:
                    _set(values, col, v, spec, anomalies, MSG_TYPES[code])
        if code == 0:
            cls._internal_value(msg, values, d.values)
        cls._learn_streams(state, bindings, code, values, d.values)

    @classmethod
    def _walked_nested(cls, state: LiftbridgeState, bindings: Bindings, msg: CarriedMessage,
                       code: int, values: dict[str, Any], at: int,
                       anomalies: list[tuple[str, str]]) -> bool:
        """A clean PropagatedRequest (8) or PropagatedResponse (9) at ``payload[at:]``
        through the compiled ``tree``, as ``_protobuf`` does it with the reader; False:
        the reader's (anything the tree refuses, or no tree)."""
        full = _SCHEMAS[code]
        assert full is not None
        node = _tree_plan(full, False)
        got = tree(msg.payload, at, node) if node is not None else None
        if got is None:
            return False
        values["unknown_fields"] = []  # (clean: the reader's fields, the ops JSON-ready)
        if code == 9:
            cls._propagated_response(values, got, schema(full), True, anomalies)
            return True  # (nothing to learn from a PropagatedResponse)
        cls._request_columns(values, got, schema(full), True, anomalies, _dumps)
        cls._learn_streams(state, bindings, code, values, got)
        return True

    @classmethod
    def _request_columns(cls, values: dict[str, Any], got: Mapping[str, Any],
                         sch: MessageSchema, clean_end: bool,
                         anomalies: list[tuple[str, str]],
                         render: Callable[[dict[str, Any]], str]) -> None:
        """A PropagatedRequest's columns from its fields ``got``: the reader's
        ``Decoded.values`` (operations as ``Decoded``, ``render`` = ``_ops_json``) or
        the compiled ``tree``'s (operations as JSON-ready dicts, ``render`` = ``_dumps``)."""
        fields = sch.fields
        if "op" in got or clean_end:
            _set(values, "op", got.get("op", 0), fields[1], anomalies, "PropagatedRequest")
        set_ops = {k: v for k, v in got.items() if _fields_of(v) is not None}
        if not set_ops:
            return
        values["op_json"] = render(set_ops)
        opname, op = next(iter(set_ops.items()))
        ov = _fields_of(op)
        assert ov is not None  # (set_ops holds messages only)
        if opname == "create_stream_op":
            stream = _fields_of(ov.get("stream"))
            if stream is not None:
                values["stream"] = stream.get("name", "")
            return
        op_clean = op.error is None if isinstance(op, Decoded) else True
        specs = _op_specs(sch.full_name, opname)
        for field_name, col in _OP_COLUMNS:
            if field_name in ov:
                _set(values, col, ov[field_name], specs[field_name], anomalies, opname)
            elif field_name in specs and op_clean and col not in values:
                _set(values, col, zero_value(specs[field_name].kind), specs[field_name],
                     anomalies, opname)

    @classmethod
    def _propagated_response(cls, values: dict[str, Any], got: Mapping[str, Any],
                             sch: MessageSchema, clean_end: bool,
                             anomalies: list[tuple[str, str]]) -> None:
        """A PropagatedResponse's columns from its fields ``got``: the reader's
        ``Decoded.values`` or the compiled ``tree``'s (nested messages as dicts)."""
        fields = sch.fields
        if "op" in got or clean_end:
            _set(values, "op", got.get("op", 0), fields[1], anomalies, "PropagatedResponse")
        err = _fields_of(got.get("error"))
        if err is not None:
            values["error_code"] = err.get("code", 0)
            values["error"] = err.get("msg", "")
        elif clean_end:
            values["error_code"] = 0
            values["error"] = ""
        resp = _fields_of(got.get("join_consumer_group_resp"))
        if resp is not None:
            values["coordinator"] = resp.get("coordinator", "")
            resp_sch = fields[11].message
            assert resp_sch is not None  # (a message field)
            _set(values, "epoch", resp.get("epoch", 0), resp_sch.fields[2], anomalies,
                 "PropagatedResponse")

    @classmethod
    def _internal_value(cls, msg: CarriedMessage, values: dict[str, Any],
                        got: Mapping[str, Any]) -> None:
        """Values of the internal `__activity` / `__cursors` streams, when they decode
        (``got``: the message's fields, ``Decoded.values``)."""
        value = got.get("value")
        if not value:
            return
        last = msg.subject.rsplit(".", 1)[-1]
        stream = got.get("stream", "")
        if last == "activity" or stream == "__activity":
            full = _API + "ActivityStreamEvent"
        elif last == "cursors" or stream == "__cursors":
            full = _INTERNAL + "Cursor"
        else:
            return
        node = _tree_plan(full, True)
        walked = tree(value, 0, node) if node is not None else None
        if walked is not None:  # clean: its fields JSON-ready (enums named)
            values["value_decoded_as"] = schema(full).name
            values["value_json"] = _dumps(walked)
            return
        inner = decode(value, schema(full))
        if not inner.clean:
            return
        values["value_decoded_as"] = inner.schema.name
        values["value_json"] = _dumps(_json_obj(inner))

    # -- ReplicationResponse ----------------------------------------------------------

    @classmethod
    def _replication_response(cls, state: LiftbridgeState, bindings: Bindings,
                              msg: CarriedMessage, values: dict[str, Any], body: bytes,
                              at: int, anomalies: list[tuple[str, str]]) -> list[Record]:
        epoch, hw, entries, problems = parse_entries(body, at)
        if epoch is not None:
            _set_u64(values, "leader_epoch", epoch, anomalies, "ReplicationResponse")
        values["high_watermark"] = hw
        values["entry_count"] = len(entries)
        anomalies.extend(problems)
        if problems and any(k == "liftbridge.bad_message_set" for k, _ in problems):
            values["malformed"] = True
            values["decode_error"] = next(d for k, d in problems
                                          if k == "liftbridge.bad_message_set")
        children = []
        for e in entries:
            row = cls._entry_values(state, e, anomalies)
            children.append(msg.record(ENTRIES_TABLE.name, row))
            subject = row.get("subject")
            if subject and e.error is None:
                cls._bind_stream(state, bindings, subject, values.get("stream") or "",
                                 values.get("partition"))
        return children

    @classmethod
    def _entry_values(cls, state: LiftbridgeState, e: Entry,
                      anomalies: list[tuple[str, str]]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "entry_index": e.index,
            "offset": e.offset,
            "timestamp": e.timestamp_ns,
            "size": e.size,
            "crc32c": e.crc,
            "crc_status": e.crc_status,
            "magic": e.magic,
            "attributes": e.attributes,
            "key": e.key,
            "malformed": e.error is not None,
            "decode_error": e.error,
        }
        if e.leader_epoch is not None:
            _set_u64(row, "leader_epoch", e.leader_epoch, anomalies, f"entry {e.index}")
        if e.headers is not None or e.error is None:
            _value_columns(row, e.value, state.payload_cap)
        if e.headers is not None:
            row["headers"] = list(e.headers.items())
            for hk, col in (("subject", "subject"), ("reply", "reply")):
                hv = e.headers.get(hk)
                if hv is not None:
                    row[col] = hv.decode("utf-8", "backslashreplace")
        return row

    # -- learning ---------------------------------------------------------------------

    @classmethod
    def _bind_stream(cls, state: LiftbridgeState, bindings: Bindings, subject: object,
                     stream: str, partition: int | None) -> None:
        if not isinstance(subject, str) or not subject or _SPACE.search(subject):
            return
        old = state.stream_subjects.get(subject)
        if old is not None and (old[0] or not stream) and (old[1] is not None or partition is None):
            return  # nothing new
        stream = stream or (old[0] if old else "")
        if partition is None and old is not None:
            partition = old[1]
        state.stream_subjects[subject] = (stream, partition)
        state.stream_subjects.move_to_end(subject)
        if len(state.stream_subjects) > MAX_STREAM_SUBJECTS:
            state.stream_subjects.popitem(last=False)
        hint = _hint(_HINT_STREAM, stream, partition)
        toks = subject.split(".")
        if "*" in toks or ">" in toks:
            bindings.bind_pattern(subject, NAME, hint)
        else:
            bindings.bind_subject(subject, NAME, hint)

    @classmethod
    def _learn_streams(cls, state: LiftbridgeState, bindings: Bindings, code: int,
                       values: dict[str, Any], got: Mapping[str, Any]) -> None:
        """Stream subjects a message names (``got``: its fields, ``Decoded.values``)."""
        if code == 0:  # a forwarded publish names its stream subject
            stream = got.get("stream", "")
            subj = got.get("subject")
            if stream and subj:
                cls._bind_stream(state, bindings, subj, stream, got.get("partition"))
        elif code == 1:
            cls._bind_stream(state, bindings, got.get("partition_subject"),
                             got.get("stream", ""), None)
        elif code == 8:  # (``got``: the reader's fields or the compiled ``tree``'s)
            op = _fields_of(got.get("create_stream_op"))
            stream = _fields_of(op.get("stream")) if op is not None else None
            if stream is None:
                return
            name = stream.get("name", "")
            parts = stream.get("partitions", [])
            for p in parts:
                pv = _fields_of(p)
                if pv is not None:
                    cls._bind_stream(state, bindings, pv.get("subject"),
                                     pv.get("stream", name), pv.get("id", 0))
            if not parts:
                cls._bind_stream(state, bindings, stream.get("subject"), name, 0)

    @classmethod
    def _learn_reply(cls, bindings: Bindings, msg: CarriedMessage, code: int | None,
                     values: dict[str, Any]) -> None:
        if code in (2, 6) and msg.reply_to and values.get("stream") is not None:
            bindings.bind_subject(
                msg.reply_to, NAME, _hint(_HINT_REPLY, values["stream"], values.get("partition"))
            )


_COPY, _VALUE, _SET = 0, 1, 2  # straight to its column / the value columns / ``_set``


@cache
def _plan(full: str) -> tuple[tuple[str, str, object, FieldSpec, int], ...]:
    """``(field, column, value when absent, spec, how)`` of each field of ``full``, in
    schema order: what ``_protobuf`` does per field, worked out once per message type
    (as ``dissectors.stan.decode._plan``)."""
    sch = schema(full)
    out = []
    for spec in sch.fields.values():
        name = spec.name
        col = _RENAME.get((sch.name, name), name)
        default: object = ABSENT
        if name not in _TS_FIELDS and spec.kind is not Kind.MESSAGE:
            # (a map's default is never changed: ``_set`` lists its items)
            default = {} if spec.kind is Kind.MAP else zero_value(spec.kind)
        how = (_VALUE if name == "value" else
               _SET if spec.kind in (Kind.ENUM, Kind.UINT64, Kind.MAP) or col in _U64_FIELDS
               else _COPY)
        out.append((name, col, default, spec, how))
    return tuple(out)


# the fields of a Message or Ack that ``_internal_value`` and ``_learn_streams`` read
_HELD = frozenset({"value", "stream", "subject", "partition", "partition_subject"})
_walk = compiled_walk()  # (``walk.walk`` without its frame)
_NO_BASE: dict[str, Any] = {}  # (the walk's values go into the row's own dict)


@cache
def _walk_plans(full: str) -> tuple[WalkPlan, tuple[tuple[int, str, str], ...], bool] | None:
    """The compiled walk's plan of ``full`` (``dissectors.proto.walk``), the (number,
    field, column) of its fields ``_internal_value`` and ``_learn_streams`` read
    (``_HELD``) and whether it has the ``value`` field: ``_plan`` as
    ``_protobuf`` applies it to a clean message (enums by name, absent ones too; maps
    only when absent, as an empty list; unsigned 64-bit values only while they fit
    int64, which ``_set`` reports otherwise).  None: no walk."""
    entries = []
    for _, col, default, spec, how in _plan(full):
        extra: object = None
        if how == _SET and spec.kind is Kind.ENUM:
            extra = spec.enum or {}
            if default is not ABSENT:  # (named when absent too, as ``_set`` names it)
                default = _enum_name(spec, default)
        elif how == _SET and spec.kind is Kind.UINT64:
            extra = True
        elif how == _SET and spec.kind is Kind.MAP:
            default = []  # (``_set`` lists a map's items)
        entries.append((spec, col, default, extra))
    plan = walk_plan(entries, _NO_BASE, maps=True)  # (a map: listed, as ``_set`` does)
    if plan is None:
        return None
    columns = tuple((spec.number, spec.name, col) for _, col, _, spec, _ in _plan(full)
                    if spec.name in _HELD)
    return plan, columns, any(how == _VALUE for *_, how in _plan(full))


@cache
def _tree_plan(full: str, names: bool) -> list[Any] | None:
    """The compiled ``tree``'s node of ``full`` (``dissectors.proto.walk``), enums of its
    own fields named or not (``names``; nested ones always, as a JSON column shows
    them); None: no tree."""
    return tree_plan(schema(full), names)


# (op field, column) a PropagatedRequest's operation fills (``_request_columns``)
_OP_COLUMNS = (
    ("stream", "stream"), ("partition", "partition"), ("replica_to_remove", "replica"),
    ("replica_to_add", "replica"), ("replica", "replica"), ("leader", "leader"),
    ("leader_epoch", "leader_epoch"), ("group_id", "group_id"),
    ("consumer_id", "consumer_id"), ("coordinator", "coordinator"), ("epoch", "epoch"),
)


@cache
def _op_specs(full: str, opname: str) -> dict[str, FieldSpec]:
    """Field name -> spec of the operation ``opname`` of the PropagatedRequest ``full``."""
    sub = next(s.message for s in schema(full).fields.values() if s.name == opname)
    return {} if sub is None else {s.name: s for s in sub.fields.values()}


def _ops_json(ops: dict[str, Any]) -> str:
    """A PropagatedRequest's ``op_json``: its operations (``Decoded``) as JSON."""
    return _dumps({k: _json_obj(v) for k, v in ops.items()})


def _set_u64(values: dict[str, Any], col: str, v: int, anomalies: list[tuple[str, str]],
             where: str) -> None:
    if v > _I64_MAX:
        anomalies.append((
            "liftbridge.uint64_overflow",
            f"{where}: {col} = {v} does not fit int64; column left null",
        ))
        values[col] = None
    else:
        values[col] = v


def _enum_name(spec: FieldSpec, v: Any) -> str:
    return spec.enum.get(v, str(v)) if spec.enum else str(v)


def _set(values: dict[str, Any], col: str, v: Any, spec: FieldSpec,
         anomalies: list[tuple[str, str]], where: str) -> None:
    if spec.kind is Kind.ENUM:
        v = _enum_name(spec, v)
    elif spec.kind is Kind.UINT64 or col in _U64_FIELDS:
        _set_u64(values, col, v, anomalies, where)
        return
    elif spec.kind is Kind.MAP:
        v = list(v.items())
    values[col] = v

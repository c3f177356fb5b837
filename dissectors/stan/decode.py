"""STAN message decoding: protobuf → ``stan`` row values, and type inference.

Pure functions, no state (the dissector in ``__init__`` owns bindings and learning).
Message layouts: protocol-facts §2.2, compiled from ``dissectors/proto/stan.proto``.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeGuard

from dissectors.proto import Decoded, decode, enum_names, schema
from dissectors.proto.walk import WalkPlan, capper, compiled_walk, walk_plan
from dissectors.proto.wire import ABSENT, field_keys, planned_values, scan, zero_value

__all__ = [
    "FIRST_BYTES",
    "INFER_THRESHOLD",
    "KINDS",
    "REPLY_KINDS",
    "Decision",
    "Problem",
    "clean_values",
    "decode_kind",
    "infer",
    "plausible_subject",
    "score",
    "stamped_plan",
    "walked_values",
]

# Internal kinds: the 15 message types plus SubCloseRequest (an UnsubscribeRequest sent
# to subCloseRequests).  kind → (protobuf message, msg_type column)
KINDS: dict[str, tuple[str | None, str]] = {
    "ConnectRequest": ("msgcap.stan.ConnectRequest", "ConnectRequest"),
    "ConnectResponse": ("msgcap.stan.ConnectResponse", "ConnectResponse"),
    "SubscriptionRequest": ("msgcap.stan.SubscriptionRequest", "SubscriptionRequest"),
    "SubscriptionResponse": ("msgcap.stan.SubscriptionResponse", "SubscriptionResponse"),
    "UnsubscribeRequest": ("msgcap.stan.UnsubscribeRequest", "UnsubscribeRequest"),
    "SubCloseRequest": ("msgcap.stan.UnsubscribeRequest", "UnsubscribeRequest"),
    "CloseRequest": ("msgcap.stan.CloseRequest", "CloseRequest"),
    "CloseResponse": ("msgcap.stan.CloseResponse", "CloseResponse"),
    "PubMsg": ("msgcap.stan.PubMsg", "PubMsg"),
    "PubAck": ("msgcap.stan.PubAck", "PubAck"),
    "MsgProto": ("msgcap.stan.MsgProto", "MsgProto"),
    "Ack": ("msgcap.stan.Ack", "Ack"),
    "Ping": ("msgcap.stan.Ping", "Ping"),
    "PingResponse": ("msgcap.stan.PingResponse", "PingResponse"),
    "Heartbeat": (None, "Heartbeat"),
    "HeartbeatReply": (None, "HeartbeatReply"),
}

# The response each request kind expects on its NATS reply inbox.
REPLY_KINDS = {
    "ConnectRequest": "ConnectResponse",
    "SubscriptionRequest": "SubscriptionResponse",
    "UnsubscribeRequest": "SubscriptionResponse",
    "SubCloseRequest": "SubscriptionResponse",
    "CloseRequest": "CloseResponse",
    "PubMsg": "PubAck",
    "Ping": "PingResponse",
    "Heartbeat": "HeartbeatReply",
}

# field name → column, where they differ
_COLUMN = {
    "subject": "channel",
    "ack_wait_in_secs": "ack_wait_secs",
    "start_time_delta": "start_time_delta_ns",
    "sha256": "pub_sha256",
}
_UINT64_FIELDS = frozenset({"sequence", "start_sequence"})
_I64_MAX = (1 << 63) - 1
_START_POSITION = enum_names("msgcap.stan.StartPosition")


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str  # anomaly kind, e.g. "stan.bad_protobuf"
    detail: str


# ----------------------------------------------------------------------- row values


def decode_kind(
    kind: str, payload: bytes, payload_cap: int | None
) -> tuple[dict[str, Any], Decoded | None, list[Problem]]:
    """Row values (without typed_by/inferred), the decoded message, and problems."""
    full, msg_type = KINDS[kind]
    values: dict[str, Any] = {"msg_type": msg_type, "malformed": False, "decode_error": None,
                              "unknown_fields": []}
    problems: list[Problem] = []
    if full is None:  # Heartbeat / HeartbeatReply: an empty payload
        if payload:
            detail = f"{msg_type} carries {len(payload)} bytes; STAN sends an empty payload"
            values["malformed"] = True
            values["decode_error"] = detail
            problems.append(Problem("stan.heartbeat_not_empty", detail))
        return values, None, problems
    values.update(_SUB_CLOSE.get(kind, ()))
    d = decode(payload, schema(full))
    clean_end = d.error is None
    if not clean_end:
        values["malformed"] = True
        values["decode_error"] = d.error
        problems.append(Problem(
            "stan.truncated_protobuf" if d.truncated else "stan.bad_protobuf",
            f"{msg_type}: {d.error}; {len(d.values)} field(s) decoded before it",
        ))
    values["unknown_fields"] = list(d.unknown)
    if d.bad_utf8:
        problems.append(Problem(
            "stan.invalid_utf8",
            f"{msg_type}: string field(s) {', '.join(d.bad_utf8)} not valid UTF-8 (shown with "
            "\\x escapes; Go peers accept them)",
        ))
    got = d.values
    data_digest = None
    for (name, column, _, special), v in planned_values(got, _plan(full), clean_end):
        if special:
            if special == _DATA:
                data_digest = _data_columns(values, v, payload_cap)
                continue
            if special == _UINT64 and v > _I64_MAX:
                problems.append(Problem(
                    "stan.uint64_overflow",
                    f"{msg_type}.{name} = {v} does not fit int64; column left null",
                ))
                continue
            if special == _ENUM:
                v = _START_POSITION.get(v, str(v))
        values[column] = v
    if msg_type == "MsgProto":
        _crc(values, d, problems)
    elif msg_type == "PubMsg" and clean_end:
        got = values.get("pub_sha256", b"")
        if got and data_digest is None:  # (a clean end gives data its default b"")
            data_digest = hashlib.sha256(d.values.get("data", b"")).digest()
        values["pub_sha256_status"] = _digest_status(got, data_digest)
    return values, d, problems


def _digest_status(sha256: bytes, data_digest: bytes | None) -> str:
    """A PubMsg's ``pub_sha256_status``: its own digest field against its data's."""
    return "absent" if not sha256 else "ok" if sha256 == data_digest else "mismatch"


_SUB_CLOSE = {"UnsubscribeRequest": {"sub_close": False}, "SubCloseRequest": {"sub_close": True}}


def clean_values(kind: str, payload: bytes, payload_cap: int | None) -> dict[str, Any] | None:
    """``decode_kind``'s values when it would report no problem and the compiled walk
    (``dissectors.proto.walk``) takes the message; else None (ask ``decode_kind``).

    Why: the walk fills the row from the wire in one pass, where the reader and the plan
    loop cost about half of a message's Python (``walk``'s docstring)."""
    plan = _walk_plans(kind)
    return None if plan is None else walked_values(plan, payload, payload_cap)


def walked_values(plan: WalkPlan, payload: bytes, payload_cap: int | None
                  ) -> dict[str, Any] | None:
    """``clean_values`` with the plan given: ``_walk_plans``' own, or ``stamped_plan``'s
    (whose base holds the columns saying how the row was typed).  What the walk leaves
    to this function is what ``decode_kind`` does after the plan loop for a cleanly
    ended message: the data columns, the MsgProto CRC (a mismatch is a problem: None)
    and the PubMsg digest status, which the walk does itself (its plan's ``post``:
    ``_POST``)."""
    got = _walk(payload, 0, *plan, payload_cap)
    return None if got is None else got[0]


def stamped_plan(kind: str, stamp: dict[str, Any]) -> WalkPlan | None:
    """``kind``'s walk plan whose rows start with ``stamp`` too (None: no walk).  Why: a
    binding's hint settles how its rows were typed (``typed_by``, ``inferred``, ...), so
    that a walked row comes out whole, no update of its values per message; ``stamp``'s
    columns are none of the message's fields (``walk_plan`` would refuse those)."""
    plan = _walk_plans(kind)
    if plan is None:
        return None
    return plan._replace(base={**plan.base, **stamp})


@cache
def _walk_plans(kind: str) -> WalkPlan | None:
    """The walk's plan of ``kind`` (None: a heartbeat kind, or no walk): the fields of
    ``_plan`` with their columns and values when absent, start positions by name,
    unsigned sequences only while they fit int64 (above, ``decode_kind`` reports them)."""
    full, msg_type = KINDS[kind]
    if full is None:
        return None
    fields = {spec.name: spec for spec in schema(full).fields.values()}
    entries = []
    for name, column, default, special in _plan(full):
        extra: object = None
        if special == _UINT64:
            extra = True
        elif special == _ENUM:  # (named when absent too, as decode_kind names it)
            extra = _START_POSITION
            default = _START_POSITION.get(default, str(default))  # type: ignore[call-overload]
        entries.append((fields[name], column, default, extra))
    base = {"msg_type": msg_type, "malformed": False, "decode_error": None,
            **_SUB_CLOSE.get(kind, {})}
    plan = walk_plan(entries, base, (("unknown_fields", []),))
    post = _POST.get(msg_type)
    return plan if plan is None or post is None else plan._replace(post=post)


_DATA_COLUMNS = ("data_len", "data_sha256", "data", "data_truncated")  # (``capper``'s)
# the walk's post step (``_walk.values``): what ``walked_values`` leaves to it
_POST = {"MsgProto": (1, "data", "crc32", "crc_status", _DATA_COLUMNS),
         "PubMsg": (2, "data", "pub_sha256", "pub_sha256_status", _DATA_COLUMNS)}


_DATA, _UINT64, _ENUM = 1, 2, 3  # fields that need more than a copy to their column


@cache
def _plan(full: str) -> tuple[tuple[str, str, object, int], ...]:
    """``(field, column, value when absent, special)`` of each field of ``full``, in
    schema order: what ``decode_kind`` does per field, worked out once per message type."""
    out = []
    for spec in schema(full).fields.values():
        name = spec.name
        # crc32 / timestamp: absent stays null (crc_status says so; no invented 1970 time)
        default = ABSENT if name in ("crc32", "timestamp") else zero_value(spec.kind)
        special = (_DATA if name == "data" else _UINT64 if name in _UINT64_FIELDS
                   else _ENUM if name == "start_position" else 0)
        out.append((name, _COLUMN.get(name, name), default, special))
    return tuple(out)


# ``walk.capped_py``: the ``data`` columns; returns its SHA-256 (a PubMsg checks it
# against its own)
_data_columns = capper(_DATA_COLUMNS)


_walk = compiled_walk()  # (``walk.walk`` without its frame: once per message)


def _crc(values: dict[str, Any], d: Decoded, problems: list[Problem]) -> None:
    if "crc32" not in d.values:
        values["crc_status"] = "absent" if d.error is None else None
        return
    if "data" not in d.values and d.error is not None:
        values["crc_status"] = None  # cannot verify: data not decoded
        return
    want = d.values["crc32"]
    got = zlib.crc32(d.values.get("data", b""))
    if want == got:
        values["crc_status"] = "ok"
    else:
        values["crc_status"] = "mismatch"
        problems.append(Problem(
            "stan.crc_mismatch",
            f"MsgProto seq {d.values.get('sequence')} on {d.values.get('subject', '')!r}: "
            f"CRC32 field 0x{want:08x}, IEEE CRC-32 of the {len(d.values.get('data', b''))} "
            f"data bytes is 0x{got:08x}",
        ))


# ------------------------------------------------------------------------ inference

# A candidate type must score at least this to be inferred.  Shapes that any protobuf
# with one string field 1 has (PubAck, CloseRequest, CloseResponse, Ping, PingResponse
# alone) score below it: too ambiguous to claim someone else's message.
INFER_THRESHOLD = 3

_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]+\Z")
_TS_MIN_NS = 946_684_800 * 10**9  # 2000-01-01
_TS_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01

# kinds that are sent as NATS requests (with a reply subject) / without one
_WITH_REPLY = ("ConnectRequest", "SubscriptionRequest", "UnsubscribeRequest", "PubMsg",
               "CloseRequest", "Ping")
_NO_REPLY = ("ConnectResponse", "MsgProto", "SubscriptionResponse", "Ack", "PubAck",
             "CloseResponse", "PingResponse")


def plausible_subject(s: object, literal: bool = True) -> TypeGuard[str]:
    """A NATS subject a STAN peer would use: non-empty tokens, no whitespace, and no
    wildcards when ``literal``."""
    if not isinstance(s, str) or not s or len(s) > 1024:
        return False
    # (asked for every learned subject: string methods, no loop over characters)
    if s[0] == "." or s[-1] == "." or ".." in s:
        return False  # an empty token
    if literal and ("*" in s or ">" in s) and any(t in ("*", ">") for t in s.split(".")):
        return False
    # every whitespace character but the space is unprintable (checked over all of Unicode)
    return " " not in s and s.isprintable()


def _token(s: object, max_len: int = 128) -> bool:
    return isinstance(s, str) and 0 < len(s) <= max_len and s.isprintable() and " " not in s


def score(kind: str, d: Decoded) -> int:
    """How well a cleanly decoded message fits ``kind`` (0 = not at all)."""
    v = d.values
    if kind == "ConnectRequest":
        if not (_CLIENT_ID.match(v.get("client_id", "")) and
                plausible_subject(v.get("heartbeat_inbox"))):
            return 0
        s = 6
        s += 2 if v.get("protocol", 0) >= 1 else 0
        s += 1 if v["heartbeat_inbox"].startswith("_INBOX.") else 0
        conn = v.get("conn_id", b"")
        s += 1 if conn and b"." not in conn else 0
        return s
    if kind == "SubscriptionRequest":
        if not (_CLIENT_ID.match(v.get("client_id", "")) and plausible_subject(v.get("subject"))
                and plausible_subject(v.get("inbox")) and v.get("max_in_flight", 0) > 0
                and v.get("ack_wait_in_secs", 0) > 0):
            return 0
        return 8 if v["inbox"].startswith("_INBOX.") else 6
    if kind == "UnsubscribeRequest":
        if not (_CLIENT_ID.match(v.get("client_id", "")) and plausible_subject(v.get("subject"))
                and plausible_subject(v.get("inbox"))):
            return 0
        return 8 if v["inbox"].startswith("_INBOX.") else 6
    if kind == "PubMsg":
        if not (_CLIENT_ID.match(v.get("client_id", "")) and _token(v.get("guid"))
                and plausible_subject(v.get("subject"))):
            return 0
        # data / connID cannot be in an UnsubscribeRequest, which has the same fields 1-4
        return 8 if "data" in v or "conn_id" in v else 6
    if kind == "ConnectResponse":
        if v.get("error") or not all(
            plausible_subject(v.get(f))
            for f in ("pub_prefix", "sub_requests", "unsub_requests", "close_requests")
        ):
            return 0
        return 10
    if kind == "MsgProto":
        if not (v.get("sequence", 0) >= 1 and plausible_subject(v.get("subject"))
                and _TS_MIN_NS <= v.get("timestamp", 0) < _TS_MAX_NS):
            return 0
        return 8
    if kind == "SubscriptionResponse":
        return 5 if plausible_subject(v.get("ack_inbox")) and not v.get("error") else 0
    if kind == "Ack":
        return 3 if plausible_subject(v.get("subject")) and v.get("sequence", 0) >= 1 else 0
    if kind in ("PubAck", "CloseRequest", "Ping"):
        first = next(iter(v.values()), None)
        return 2 if first else 0
    if kind in ("CloseResponse", "PingResponse"):
        return 1 if v.get("error") else 0
    return 0


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str
    score: int
    alternatives: tuple[str, ...]


def infer(payload: bytes, has_reply: bool | None) -> Decision | None:
    """The best-fitting kind for a payload no subject knowledge typed, or None.

    Candidates are the kinds sent with a reply subject (requests, PubMsg) when
    ``has_reply``, the others when not, all when None (``probe_payload``).  A candidate
    must decode cleanly (to the end, no unknown field, valid UTF-8) and score at least
    ``INFER_THRESHOLD``; ties are reported as alternatives."""
    if not payload or payload[0] not in _FIRST_BYTES:
        return None
    seen = scan(payload)  # one schema-free pass rules out most foreign payloads
    if seen is None:
        return None
    kinds: tuple[str, ...]
    if has_reply is None:
        kinds = _WITH_REPLY + _NO_REPLY
    else:
        kinds = _WITH_REPLY if has_reply else _NO_REPLY
    best: list[tuple[int, str]] = []
    for kind in kinds:
        if not seen <= _KEYS[kind]:
            continue  # a field this type does not have: it would not decode cleanly
        full = KINDS[kind][0]
        if full is None:
            continue  # (a heartbeat kind: no protobuf; none is a candidate)
        d = decode(payload, schema(full))
        if not d.clean:
            continue
        s = score(kind, d)
        if s:
            best.append((s, kind))
    if not best:
        return None
    top = max(s for s, _ in best)
    if top < INFER_THRESHOLD:
        return None
    winners = [k for s, k in best if s == top]
    return Decision(winners[0], top, tuple(winners[1:]))


def _first_bytes() -> frozenset[int]:
    out = set()
    for full, _ in KINDS.values():
        if full is None:
            continue
        for spec in schema(full).fields.values():
            tag = (spec.number << 3) | spec.wire_type
            out.add(tag & 0x7F | (0x80 if tag > 0x7F else 0))
    return frozenset(out)


_FIRST_BYTES = _first_bytes()
FIRST_BYTES = _FIRST_BYTES  # the first bytes infer() looks further at
_KEYS = {k: field_keys(schema(full)) for k, (full, _) in KINDS.items() if full is not None}

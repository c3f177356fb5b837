"""NATS client protocol: pure parse functions (no state, no I/O).

Follows the NATS client protocol reference (nats-io/nats.docs
``reference/nats-protocol/nats-protocol/README.md``; our restatement is
``protocol-facts.md`` §1) and, where the reference is silent, what nats-server's parser
accepts:

* operation names are case-insensitive; arguments are separated by runs of spaces or
  tabs (the server's argument splitter also splits on CR and LF);
* sizes are 1 to 9 ASCII digits (nats-server ``parseSize`` rejects anything longer,
  signs, and the empty string);
* ``PING``/``PONG``/``+OK`` ignore whatever follows the op name up to the LF;
* the payload is exactly the declared number of bytes, never scanned for CRLF;
* ``HPUB``/``HMSG`` header sizes include the header block's final CRLF CRLF and must not
  exceed the total size.

Every function here returns problems as ``Problem(kind, detail)`` values instead of
raising; the session turns them into anomaly rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import StrEnum
from itertools import compress, repeat
from operator import is_not
from typing import Any, NamedTuple

from dissectors.api import Direction, Verdict
from dissectors.framing import line_op_resync
from dissectors.nats.jetstream import ACK_PREFIX, parse_ack
from dissectors.redaction import redact_bytes

__all__ = [
    "C2S_OPS",
    "KNOWN_OPS",
    "NatsAnomaly",
    "S2C_OPS",
    "Problem",
    "json_object",
    "parse_connect",
    "parse_headers",
    "parse_info",
    "parse_line",
    "parse_size",
    "probe",
    "resync",
    "show",
    "text",
]

# nats-server parseSize: at most 9 digits (999,999,999 bytes)
MAX_SIZE_DIGITS = 9
# INT32/INT64 bounds for JSON numbers going into fixed-width columns
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)


class NatsAnomaly(StrEnum):
    """Anomaly kinds of the NATS client protocol (``anomalies.kind``; the parser's
    ``Problem`` kinds and the session's own; values are the documented strings)."""

    BAD_ARGS = "nats.bad_args"
    BAD_HEADERS = "nats.bad_headers"
    BAD_JSON = "nats.bad_json"
    BAD_SIZE = "nats.bad_size"
    BAD_TRAILER = "nats.bad_trailer"
    DROPPED = "nats.dropped"
    EOF_IN_LINE = "nats.eof_in_line"
    EOF_IN_PAYLOAD = "nats.eof_in_payload"
    GAP_IN_LINE = "nats.gap_in_line"
    GAP_IN_PAYLOAD = "nats.gap_in_payload"
    LINE_TOO_LONG = "nats.line_too_long"
    MAX_PAYLOAD_EXCEEDED = "nats.max_payload_exceeded"
    MISSING_TRAILER = "nats.missing_trailer"
    RESYNC = "nats.resync"
    TLS = "nats.tls"
    UNKNOWN_OP = "nats.unknown_op"
    WRONG_DIRECTION = "nats.wrong_direction"


class Problem(NamedTuple):
    kind: str  # anomaly kind, a ``NatsAnomaly``
    detail: str


# Ops a client sends / a server sends (protocol-facts §1).
C2S_OPS = frozenset({"CONNECT", "PUB", "HPUB", "SUB", "UNSUB", "PING", "PONG"})
S2C_OPS = frozenset({"INFO", "MSG", "HMSG", "PING", "PONG", "+OK", "-ERR"})
KNOWN_OPS = C2S_OPS | S2C_OPS
# Ops of route / gateway / leafnode connections (not the client protocol; see nats_cluster)
_CLUSTER_OPS = frozenset({b"RS+", b"RS-", b"LS+", b"LS-", b"RMSG", b"LMSG", b"A+", b"A-"})

_ARG_RE = re.compile(rb"[^ \t\r\n]+")


def text(b: bytes) -> str:
    """Bytes as text: UTF-8, with invalid bytes kept visible as ``\\xNN`` escapes."""
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b.decode("utf-8", "backslashreplace")


def show(b: bytes, limit: int = 120) -> str:
    """Short printable rendering of wire bytes for anomaly details.  The bytes pass the
    redaction gate first, raw and cut as they will be shown (a credential can hide in
    any quoted line: ``dissectors.redaction``; off under ``keeping_secrets``)."""
    s = repr(redact_bytes(bytes(b[:limit])))[2:-1]
    return s + "..." if len(b) > limit else s


def split_args(line: bytes) -> list[bytes]:
    """Split a control line like nats-server's ``splitArg`` (space, tab, CR, LF)."""
    if b"\x0b" in line or b"\x0c" in line:
        # bytes.split() would also split on VT/FF, which NATS keeps inside arguments
        return _ARG_RE.findall(line)
    return line.split()


def parse_size(tok: bytes) -> int:
    """A NATS size: 1-9 ASCII digits, else -1 (nats-server ``parseSize``)."""
    if 0 < len(tok) <= MAX_SIZE_DIGITS and tok.isdigit():
        return int(tok)
    return -1


# ----------------------------------------------------------------------- control lines

# parse_line result: (op, values, header_len, total_len, problems)
#   op None      -> the line is rejected; problems[0] says why
#   total_len -1 -> the op carries no payload
ParseResult = tuple[str | None, dict[str, Any], int, int, tuple[Problem, ...]]

_NO_PROBLEMS: tuple[Problem, ...] = ()


def _reject(kind: str, detail: str) -> ParseResult:
    return None, {}, -1, -1, (Problem(kind, detail),)


def _bad_args(op: str, got: int, want: str, line: bytes) -> ParseResult:
    return _reject(NatsAnomaly.BAD_ARGS, f"{op} takes {want} arguments, got {got}: {show(line)}")


def _bad_size(op: str, what: str, tok: bytes, line: bytes) -> ParseResult:
    return _reject(
        NatsAnomaly.BAD_SIZE,
        f"{op} {what} {show(tok, 20)!s} is not 1-9 decimal digits: {show(line)}",
    )


def _pub(line: bytes, args: list[bytes]) -> ParseResult:
    # PUB <subject> [reply-to] <#bytes>
    n = len(args)
    if n == 3:
        reply = None
    elif n == 4:
        reply = text(args[2])
    else:
        return _bad_args("PUB", n - 1, "2 or 3", line)
    size = parse_size(args[-1])
    if size < 0:
        return _bad_size("PUB", "size", args[-1], line)
    return "PUB", {"op": "PUB", "subject": text(args[1]), "reply_to": reply}, -1, size, _NO_PROBLEMS


def _msg(line: bytes, args: list[bytes]) -> ParseResult:
    # MSG <subject> <sid> [reply-to] <#bytes>
    n = len(args)
    if n == 4:
        reply = None
    elif n == 5:
        reply = text(args[3])
    else:
        return _bad_args("MSG", n - 1, "3 or 4", line)
    size = parse_size(args[-1])
    if size < 0:
        return _bad_size("MSG", "size", args[-1], line)
    values = {"op": "MSG", "subject": text(args[1]), "sid": text(args[2]), "reply_to": reply}
    if reply is not None and reply.startswith(ACK_PREFIX):  # a JetStream delivery
        values.update(parse_ack(reply) or ())
    return "MSG", values, -1, size, _NO_PROBLEMS


def _sizes(op: str, hdr_tok: bytes, tot_tok: bytes, line: bytes) -> tuple[int, int] | ParseResult:
    hdr = parse_size(hdr_tok)
    if hdr < 0:
        return _bad_size(op, "header size", hdr_tok, line)
    total = parse_size(tot_tok)
    if total < 0:
        return _bad_size(op, "total size", tot_tok, line)
    if hdr > total:
        return _reject(
            NatsAnomaly.BAD_SIZE, f"{op} header size {hdr} exceeds total size {total}: {show(line)}"
        )
    return hdr, total


def _hpub(line: bytes, args: list[bytes]) -> ParseResult:
    # HPUB <subject> [reply-to] <#header bytes> <#total bytes>
    n = len(args)
    if n == 4:
        reply = None
    elif n == 5:
        reply = text(args[2])
    else:
        return _bad_args("HPUB", n - 1, "3 or 4", line)
    sizes = _sizes("HPUB", args[-2], args[-1], line)
    if len(sizes) != 2:
        return sizes
    hdr, total = sizes
    values = {"op": "HPUB", "subject": text(args[1]), "reply_to": reply}
    return "HPUB", values, hdr, total, _NO_PROBLEMS


def _hmsg(line: bytes, args: list[bytes]) -> ParseResult:
    # HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>
    n = len(args)
    if n == 5:
        reply = None
    elif n == 6:
        reply = text(args[3])
    else:
        return _bad_args("HMSG", n - 1, "4 or 5", line)
    sizes = _sizes("HMSG", args[-2], args[-1], line)
    if len(sizes) != 2:
        return sizes
    hdr, total = sizes
    values = {"op": "HMSG", "subject": text(args[1]), "sid": text(args[2]), "reply_to": reply}
    if reply is not None and reply.startswith(ACK_PREFIX):  # a JetStream delivery
        values.update(parse_ack(reply) or ())
    return "HMSG", values, hdr, total, _NO_PROBLEMS


def _sub(line: bytes, args: list[bytes]) -> ParseResult:
    # SUB <subject> [queue group] <sid>
    n = len(args)
    if n == 3:
        queue = None
    elif n == 4:
        queue = text(args[2])
    else:
        return _bad_args("SUB", n - 1, "2 or 3", line)
    values = {"op": "SUB", "subject": text(args[1]), "queue_group": queue, "sid": text(args[-1])}
    return "SUB", values, -1, -1, _NO_PROBLEMS


def _unsub(line: bytes, args: list[bytes]) -> ParseResult:
    # UNSUB <sid> [max_msgs]
    n = len(args)
    if n == 2:
        max_msgs = None
    elif n == 3:
        max_msgs = parse_size(args[2])
        if max_msgs < 0:
            return _bad_size("UNSUB", "max_msgs", args[2], line)
    else:
        return _bad_args("UNSUB", n - 1, "1 or 2", line)
    values = {"op": "UNSUB", "sid": text(args[1]), "max_msgs": max_msgs}
    return "UNSUB", values, -1, -1, _NO_PROBLEMS


def _bare(op: str) -> Callable[[bytes, list[bytes]], ParseResult]:
    def parse(line: bytes, args: list[bytes]) -> ParseResult:
        problems = _NO_PROBLEMS
        if len(args) > 1:
            problems = (
                Problem(
                    NatsAnomaly.BAD_ARGS,
                    f"text after {op} (nats-server ignores it): {show(line)}",
                ),
            )
        return op, {"op": op}, -1, -1, problems

    return parse


def _rest(line: bytes, verb: bytes) -> bytes:
    """The raw argument text after the op name and its separators."""
    return line[len(verb) :].lstrip(b" \t")


def _err(line: bytes, args: list[bytes]) -> ParseResult:
    # -ERR '<text>'  (clients trim spaces, then the single quotes)
    msg = text(line[len(args[0]) :].strip(b" \t").strip(b"'"))
    return "-ERR", {"op": "-ERR", "error": msg}, -1, -1, _NO_PROBLEMS


def _info(line: bytes, args: list[bytes]) -> ParseResult:
    raw = _rest(line, args[0])
    if not raw:
        return _reject(NatsAnomaly.BAD_ARGS, f"INFO without its JSON argument: {show(line)}")
    values, problems = parse_info(raw)
    return "INFO", values, -1, -1, problems


def _connect(line: bytes, args: list[bytes]) -> ParseResult:
    raw = _rest(line, args[0])
    if not raw:
        return _reject(NatsAnomaly.BAD_ARGS, f"CONNECT without its JSON argument: {show(line)}")
    values, problems = parse_connect(raw)
    return "CONNECT", values, -1, -1, problems


_HANDLERS = {
    b"PUB": _pub,
    b"MSG": _msg,
    b"HPUB": _hpub,
    b"HMSG": _hmsg,
    b"SUB": _sub,
    b"UNSUB": _unsub,
    b"PING": _bare("PING"),
    b"PONG": _bare("PONG"),
    b"+OK": _bare("+OK"),
    b"-ERR": _err,
    b"INFO": _info,
    b"CONNECT": _connect,
}
_PREFIX_OPS = (b"PING", b"PONG", b"+OK")


def parse_line(line: bytes) -> ParseResult:
    """Parse one control line (terminator already removed).

    Returns ``(op, values, header_len, total_len, problems)``: ``op`` is the canonical
    upper-case op name or None when the line is rejected (``problems[0]`` says why);
    ``values`` are the row's columns known from the line; ``total_len`` is -1 for ops
    without a payload and ``header_len`` -1 for ops without headers.  Problems that come
    with a valid ``op`` are additional anomalies (the row is still emitted).
    """
    if not line:
        return _reject(NatsAnomaly.UNKNOWN_OP, "empty control line")
    if line[0] in (0x20, 0x09):
        return _reject(NatsAnomaly.UNKNOWN_OP,
                       f"control line starts with white space: {show(line)}")
    args = split_args(line)
    if not args:  # only CRs (or VT/FF-separated blanks): split_args finds no token
        return _reject(NatsAnomaly.UNKNOWN_OP, f"control line of white space only: {show(line)}")
    verb = args[0].upper()
    handler = _HANDLERS.get(verb)
    if handler is not None:
        return handler(line, args)
    for op in _PREFIX_OPS:
        # nats-server ignores everything between these op names and the LF
        if verb.startswith(op):
            name = op.decode()
            detail = f"text after {name} (nats-server ignores it): {show(line)}"
            return name, {"op": name}, -1, -1, (Problem(NatsAnomaly.BAD_ARGS, detail),)
    if verb in _CLUSTER_OPS:
        return _reject(
            NatsAnomaly.UNKNOWN_OP,
            f"route/gateway/leafnode operation {text(args[0])!r} on a client connection: "
            f"{show(line)}",
        )
    return _reject(NatsAnomaly.UNKNOWN_OP, f"unknown operation {show(args[0], 24)!r}: {show(line)}")


# -------------------------------------------------------------------------------- JSON

# (JSON key, column, kind); kinds: str, bool, i32, i64, strs (list of strings)
INFO_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("server_id", "server_id", "str"),
    ("server_name", "server_name", "str"),
    ("version", "server_version", "str"),
    ("go", "server_go", "str"),
    ("host", "server_host", "str"),
    ("port", "server_port", "i32"),
    ("max_payload", "max_payload", "i64"),
    ("headers", "info_headers", "bool"),
    ("proto", "proto", "i32"),
    ("auth_required", "auth_required", "bool"),
    ("tls_required", "tls_required", "bool"),
    ("tls_available", "tls_available", "bool"),
    ("jetstream", "jetstream", "bool"),
    ("client_id", "client_id", "i64"),
    ("client_ip", "client_ip", "str"),
    ("nonce", "nonce", "str"),
    ("cluster", "cluster", "str"),
    ("connect_urls", "connect_urls", "strs"),
    ("ldm", "lame_duck_mode", "bool"),
    ("connect_info", "connect_info", "bool"),
)
CONNECT_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("name", "client_name", "str"),
    ("lang", "client_lang", "str"),
    ("version", "client_version", "str"),
    ("verbose", "verbose", "bool"),
    ("pedantic", "pedantic", "bool"),
    ("tls_required", "tls_required", "bool"),
    ("echo", "echo", "bool"),
    ("protocol", "protocol", "i32"),
    ("headers", "connect_headers", "bool"),
    ("no_responders", "no_responders", "bool"),
    ("user", "client_user", "str"),
)
# CONNECT keys that carry or prove credentials; their *names* go to `auth_fields`
AUTH_KEYS = ("user", "pass", "auth_token", "jwt", "nkey", "sig")


def _typed(v: object, kind: str) -> tuple[bool, object]:
    if kind == "str":
        return type(v) is str, v
    if kind == "bool":
        return type(v) is bool, v
    if kind == "i32" or kind == "i64":
        lo, hi = _I32 if kind == "i32" else _I64
        return type(v) is int and lo <= v <= hi, v
    if kind == "strs":
        return type(v) is list and set(map(type, v)) <= _STR_ONLY, v
    return False, v  # pragma: no cover


# the Python type a kind's value must have exactly, for the kinds that need no more check
# (``_parse_json`` tests it inline: ``_typed`` as a call per field cost ~15% of the
# Python an INFO or CONNECT line takes, three per connection)
_EXACT_TYPE: dict[str, type] = {"str": str, "bool": bool}
# a list of kind strs: each item's exact type in this set
_STR_ONLY = frozenset({str})


class _Plan(NamedTuple):
    """A field list made ready for ``_parse_json``: ``fields`` with each kind's exact type
    (None: ``_typed`` decides); and for its one-pass check, the JSON keys, the columns,
    per field the value types that need no more check but ints' ranges and lists' items
    (None's included: an absent or null member sets nothing), the int fields' positions
    and bounds, and the list fields' positions."""

    fields: tuple[tuple[str, str, str, type | None], ...]
    keys: tuple[str, ...]
    cols: tuple[str, ...]
    types: tuple[frozenset[type], ...]
    ints: tuple[tuple[int, int, int], ...]
    lists: tuple[int, ...]


_KIND_TYPES: dict[str, type] = {"str": str, "bool": bool, "i32": int, "i64": int, "strs": list}


def _plan(fields: tuple[tuple[str, str, str], ...]) -> _Plan:
    return _Plan(
        tuple((key, col, kind, _EXACT_TYPE.get(kind)) for key, col, kind in fields),
        tuple(key for key, _, _ in fields),
        tuple(col for _, col, _ in fields),
        tuple(frozenset({_KIND_TYPES[kind], type(None)}) for _, _, kind in fields),
        tuple((i, *(_I32 if kind == "i32" else _I64)) for i, (_, _, kind) in enumerate(fields)
              if kind in ("i32", "i64")),
        tuple(i for i, (_, _, kind) in enumerate(fields) if kind == "strs"),
    )


def _all_typed(plan: _Plan, got: list[object]) -> bool:
    """Whether ``got`` (a JSON object's value of each of ``plan``'s keys, None if absent)
    holds only values ``_typed`` accepts for their kinds, or None."""
    if not all(map(frozenset.__contains__, plan.types, map(type, got))):
        return False
    for i, lo, hi in plan.ints:  # (ints only here)
        v = got[i]
        if v is not None and not lo <= v <= hi:  # type: ignore[operator]
            return False
    for i in plan.lists:  # (lists only here)
        v = got[i]
        if v is not None and not set(map(type, v)) <= _STR_ONLY:  # type: ignore[call-overload]
            return False
    return True


# the last JSON text ``json_object`` parsed (None: none yet), and its object: NATS
# detection's probe parses the first INFO/CONNECT of a connection
# (``cluster.is_cluster_json``), the session the same bytes right after.  One entry only;
# its callers read the object, never change it.
_LAST_JSON: list[Any] = [None, None]
_decode_json = json.JSONDecoder().decode


def json_object(raw: bytes) -> object:
    """``json.loads(raw)``, the same value or exception: bytes that open with ``{`` and
    no NUL are UTF-8 to ``json.detect_encoding``, so they are decoded as ``json.loads``
    decodes them and given to the decoder it uses (no Python-level encoding sniff); the
    last object parsed is remembered (``_LAST_JSON``) unless it has a credential member
    (``AUTH_KEYS``)."""
    last = _LAST_JSON
    if raw == last[0]:
        return last[1]
    if type(raw) is not bytes or raw[:1] != b"{" or raw[1:2] == b"\x00":
        return json.loads(raw)
    obj = _decode_json(raw.decode("utf-8", "surrogatepass"))
    if type(obj) is dict and obj.keys().isdisjoint(AUTH_KEYS):  # (no credential kept)
        last[0] = raw
        last[1] = obj
    return obj


# INFO/CONNECT texts ``_parse_json`` took without a problem, by (op, text): their row
# values (copied out, the session adds to them) and object.  A server repeats its INFO
# (again after the client's CONNECT; one INFO per client id), clients their CONNECT: on
# bench_stan's capture 3 JSON lines a connection, 10 distinct INFO texts in 280.  The
# values depend only on the text (no anomaly detail, hence no redaction gate, in them).
# Bounded like ``redaction._CLEAN_JSON``: at most this many, each at most this long; a
# text with a credential member (``AUTH_KEYS``) is not kept.
_JSON_ROWS: dict[tuple[str, bytes], tuple[dict[str, Any], dict[str, Any]]] = {}
_JSON_ROWS_MAX = 256
_JSON_ROWS_LEN = 4096


def _copied(values: dict[str, Any], plan: _Plan) -> dict[str, Any]:
    """``values`` copied with its lists: no row shares a list with another row, with the
    remembered values (``_JSON_ROWS``) or with a remembered object (``json_object``), as
    when every line was parsed anew."""
    out = dict(values)
    for i in plan.lists:
        col = plan.cols[i]
        if col in out:
            out[col] = list(out[col])
    return out


def _parse_json(op: str, raw: bytes, plan: _Plan
                ) -> tuple[dict[str, Any], list[Problem], dict[str, Any] | None]:
    known = _JSON_ROWS.get((op, raw))
    if known is not None:
        return _copied(known[0], plan), [], known[1]
    values: dict[str, Any] = {"op": op, "json_raw": text(raw)}
    problems: list[Problem] = []
    try:
        obj = json_object(raw)
    except (ValueError, RecursionError) as e:
        problems.append(Problem(NatsAnomaly.BAD_JSON,
                                f"{op} JSON does not parse ({e}): {show(raw)}"))
        return values, problems, None
    if type(obj) is not dict:
        problems.append(
            Problem(NatsAnomaly.BAD_JSON, f"{op} JSON is a {type(obj).__name__}, not an object")
        )
        return values, problems, None
    # one pass in C over every field: each value absent, null or of its kind's type, and
    # the ints in range and lists of strings; then the columns set are the fields not
    # None, in the plan's order, as the loop below sets them (the loop's definition)
    got = list(map(obj.get, plan.keys))
    if _all_typed(plan, got):
        values.update(compress(zip(plan.cols, got, strict=True), map(is_not, got, repeat(None))))
        values = _copied(values, plan)  # (not the parsed object's lists: json_object's memo)
        if len(raw) <= _JSON_ROWS_LEN and type(raw) is bytes and obj.keys().isdisjoint(
                AUTH_KEYS):  # (a CONNECT with credentials is not kept)
            if len(_JSON_ROWS) >= _JSON_ROWS_MAX:
                _JSON_ROWS.clear()
            _JSON_ROWS[op, raw] = _copied(values, plan), obj
        return values, problems, obj
    for key, col, kind, exact in plan.fields:
        if key in obj:
            v = obj[key]
            if v is None:
                continue
            ok = type(v) is exact if exact is not None else _typed(v, kind)[0]
            if ok:
                # (a list of its own: the parsed object may be json_object's memo's)
                values[col] = list(v) if type(v) is list else v
            else:
                problems.append(
                    Problem(
                        NatsAnomaly.BAD_JSON,
                        f"{op} field {key!r} is {show(json.dumps(obj[key]).encode(), 40)}, "
                        f"expected {kind}; column {col} left null",
                    )
                )
    return values, problems, obj


_INFO_PLAN = _plan(INFO_FIELDS)
_CONNECT_PLAN = _plan(CONNECT_FIELDS)


def parse_info(raw: bytes) -> tuple[dict[str, Any], tuple[Problem, ...]]:
    """``INFO <json>`` argument → row values (unknown keys stay in ``json_raw`` only)."""
    values, problems, _ = _parse_json("INFO", raw, _INFO_PLAN)
    return values, tuple(problems)


def parse_connect(raw: bytes) -> tuple[dict[str, Any], tuple[Problem, ...]]:
    """``CONNECT <json>`` argument → row values, including which credential fields appear."""
    values, problems, obj = _parse_json("CONNECT", raw, _CONNECT_PLAN)
    if obj is not None:
        values["auth_fields"] = [k for k in AUTH_KEYS if k in obj]
    return values, tuple(problems)


# ----------------------------------------------------------------------------- headers

_PREAMBLE = b"NATS/1.0"


def parse_headers(
    block: bytes,
) -> tuple[dict[str, list[str]] | None, int | None, str | None, tuple[Problem, ...]]:
    """Parse an HPUB/HMSG header block (ADR-4 "NATS Message Headers").

    ``NATS/1.0[ <3-digit status>[ <description>]]`` CRLF, then ``Name: value`` CRLF lines
    (order and repeats kept, names as sent), then an empty line.  Returns
    ``(headers, status_code, status_description, problems)``; ``headers`` is None when
    the block does not even start with the ``NATS/`` preamble.
    """
    problems: list[Problem] = []
    if not block.startswith(b"NATS/"):
        problems.append(
            Problem(NatsAnomaly.BAD_HEADERS,
                    f"header block does not start with NATS/1.0: {show(block)}")
        )
        return None, None, None, tuple(problems)
    lines = block.split(b"\n")
    bare_lf = False
    for i, ln in enumerate(lines):
        if ln.endswith(b"\r"):
            lines[i] = ln[:-1]
        elif i < len(lines) - 1:
            bare_lf = True
    first = lines[0]
    code: int | None = None
    desc: str | None = None
    if not first.startswith(_PREAMBLE):
        problems.append(Problem(NatsAnomaly.BAD_HEADERS,
                                f"unknown header version {show(first, 40)}"))
    status = first[len(_PREAMBLE) :].strip(b" \t")
    if status:
        tok = status[:3]
        if len(tok) == 3 and tok.isdigit():
            code = int(tok)
            d = status[3:].strip(b" \t")
            desc = text(d) if d else None
        else:
            problems.append(
                Problem(NatsAnomaly.BAD_HEADERS, f"status {show(status, 40)} is not a 3-digit code")
            )
            desc = text(status)
    headers: dict[str, list[str]] = {}
    ended = False
    trailing = False
    # the split leaves one empty string after the final LF
    body = lines[1:-1] if lines[-1] == b"" else lines[1:]
    for ln in body:
        if ended:
            if ln:
                trailing = True
            continue
        if not ln:
            ended = True
            continue
        colon = ln.find(b":")
        if colon <= 0:
            detail = f"header line without a name: {show(ln, 60)}"
            problems.append(Problem(NatsAnomaly.BAD_HEADERS, detail))
            continue
        headers.setdefault(text(ln[:colon].strip(b" \t")), []).append(
            text(ln[colon + 1 :].strip(b" \t"))
        )
    if not ended or lines[-1] != b"":
        problems.append(Problem(NatsAnomaly.BAD_HEADERS,
                                "header block does not end with an empty line"))
    if trailing:
        problems.append(Problem(NatsAnomaly.BAD_HEADERS,
                                "bytes after the header block's empty line"))
    if bare_lf:
        problems.append(Problem(NatsAnomaly.BAD_HEADERS,
                                "header lines end with a bare LF, not CRLF"))
    return headers, code, desc, tuple(problems)


# ------------------------------------------------------------------- probe and resync

# op name -> what may follow it: b" \t" (arguments) or b" \t\r\n" (no arguments needed)
_ARGS = b" \t"
_ANY = b" \t\r\n"
_C2S_STRONG = {b"CONNECT": _ARGS, b"PUB": _ARGS, b"HPUB": _ARGS, b"SUB": _ARGS, b"UNSUB": _ARGS}
_S2C_STRONG = {b"INFO": _ARGS, b"MSG": _ARGS, b"HMSG": _ARGS}
_C2S_WEAK = {b"PING": _ANY, b"PONG": _ANY}
_S2C_WEAK = {b"PING": _ANY, b"PONG": _ANY, b"+OK": _ANY, b"-ERR": _ANY}
_ALL_OPS = {**_C2S_STRONG, **_S2C_STRONG, **_C2S_WEAK, **_S2C_WEAK}
# per direction for ``probe``: (strong ops, strong and weak ops)
_C2S_PROBE = _C2S_STRONG, {**_C2S_STRONG, **_C2S_WEAK}
_S2C_PROBE = _S2C_STRONG, {**_S2C_STRONG, **_S2C_WEAK}
_MAX_VERB = max(len(v) for v in _ALL_OPS)
# probe: lines of keep-alives / acks looked through before answering
_PROBE_LINES = 8
_PROBE_LINE_BYTES = 4096


def _verb_at(buf: bytes, p: int, table: dict[bytes, bytes]) -> tuple[bytes | None, bool]:
    """Which op of ``table`` starts at ``buf[p]`` followed by an allowed separator.

    Returns ``(verb, True)`` on a match, ``(None, True)`` when none can match, and
    ``(None, False)`` when ``buf`` ends before it can be decided.
    """
    head = buf[p : p + _MAX_VERB + 1].upper()
    undecided = False
    for verb, seps in table.items():
        n = len(verb)
        if len(head) > n:
            if head.startswith(verb) and head[n] in seps:
                return verb, True
        elif verb.startswith(head):
            undecided = True
    return None, not undecided


def probe(direction: Direction, prefix: bytes) -> Verdict:
    """YES when this direction opens like NATS, NO when it cannot, else NEED_MORE.

    Strong evidence: a client's ``CONNECT {``/``PUB``/``HPUB``/``SUB``/``UNSUB``, a
    server's ``INFO {``/``MSG``/``HMSG``.  Keep-alives and acks (``PING``, ``PONG``,
    ``+OK``, ``-ERR``) are shared with other text protocols (Redis), so they are skipped
    and the next line decides.  ``CONNECT`` and ``INFO`` must be followed by a JSON object
    (an HTTP proxy's ``CONNECT host:port`` is not NATS).
    """
    try:
        strong, both = _C2S_PROBE if direction == Direction.C2S else _S2C_PROBE
        p = 0
        for _ in range(_PROBE_LINES):
            if p >= len(prefix):
                return Verdict.NEED_MORE
            verb, decided = _verb_at(prefix, p, both)
            if not decided:
                return Verdict.NEED_MORE
            if verb is None:
                return Verdict.NO
            if verb in strong:
                if verb in (b"CONNECT", b"INFO"):
                    rest = prefix[p + len(verb) :].lstrip(b" \t")
                    if not rest:
                        return Verdict.NEED_MORE
                    if rest[:1] != b"{":
                        return Verdict.NO
                    # a route / gateway / leaf-node link is not a client connection
                    # (dissectors.nats.cluster): its INFO/CONNECT JSON says so
                    lf = prefix.find(b"\n", p)
                    if lf >= 0 and _is_cluster_json(prefix[p:lf]):
                        return Verdict.NO
                    return Verdict.YES
                return Verdict.YES
            lf = prefix.find(b"\n", p)
            if lf < 0:
                return Verdict.NEED_MORE if len(prefix) - p < _PROBE_LINE_BYTES else Verdict.NO
            p = lf + 1
        return Verdict.NEED_MORE
    except Exception:  # a probe never raises
        return Verdict.NO


def _is_cluster_json(line: bytes) -> bool:
    global _cluster_json
    if _cluster_json is None:
        # imported on first use (it imports this module), then kept: an import statement
        # here ran on every probe of a connection's INFO line, and the module's lazy
        # ``__getattr__`` made each one raise and catch an AttributeError (``__path__``)
        from dissectors.nats.cluster import is_cluster_json

        _cluster_json = is_cluster_json
    return _cluster_json(line)


_cluster_json: Callable[[bytes], bool] | None = None


resync = line_op_resync(_ALL_OPS)
"""Resync rule (``framing.ResyncFn``): the next line that starts with a known op.

A line starts at ``buf[0]`` when the previous byte was LF or is unknown (right after a
gap: TCP segments usually begin at an operation), and after every LF in ``buf``.  One
regular-expression scan (``framing.line_op_resync``): linear and fast on any junk."""

"""Per-connection state of the Redis dissector.

Strategy: RESP is line-oriented with exact-length bulk strings, so each direction gets a
``LineFramer``: a header line (``*3``, ``$5``, ``+OK``, ...) is parsed here and a bulk
string asks the framer for exactly its bytes and CRLF (``read_exact``), so bulk bytes are
never scanned for line ends and at most ``payload_cap`` of them are kept.  Aggregates
(arrays, maps, sets, pushes, attributes) are a stack of counters; a message is complete
when the stack empties, and becomes one ``redis`` row (plus ``redis_pubsub`` children).

State that spans messages is small: the message being read per direction, a message
counter per direction, and whether the server put the connection in pub/sub mode (it
sent a subscribe confirmation; a ``+RESET`` reply or an unsubscribe leaving 0
subscriptions ends it).  That decision uses the server's stream only, so it does not
depend on how the two directions interleave.

Decisions:

* Any client message that does not start with ``*`` is an inline command, split the way
  Redis's ``sdssplitargs`` does; an empty inline line is ignored (as Redis does).
* A malformed line or a bulk string not followed by CRLF abandons the message being
  read: one anomaly, its bytes counted undecoded, and the direction resynchronises on
  the next line that looks like a message start (``resp.resync_*``).
* A gap or the end of the stream in the middle of a message drops that message (one
  ``redis.gap_in_message`` / ``redis.eof_in_message`` anomaly), never a partial row.
* Streamed RESP3 values (``$?``, ``*?``: reserved by the spec, sent by no Redis server)
  are reported as ``redis.unsupported`` and skipped by resynchronising.
* Columnar fast path (``ColumnarSession``, switched on by the pipeline when its sink
  takes Arrow batches): a ``redis`` row without ``redis_pubsub`` children goes to a
  column buffer (``msgcap_redis.columns``) and the session returns a ``ColumnBatch``
  for it; a row with children, and every anomaly, stays a ``Record``.  Same rows either
  way, in the same order.
"""

from __future__ import annotations

import re
from typing import Any

from dissectors.api import (
    DEFAULT_PAYLOAD_CAP,
    Block,
    ColumnarSession,
    ColumnBatch,
    Direction,
    Dropped,
    FramedSession,
    Line,
    LineFramer,
    Oversize,
    Record,
    Resynced,
    TrailerStatus,
    anomaly_from,
    decode_text,
    payload_values,
    record_from,
    session_option,
)

from msgcap_redis.columns import FORMAT, RowBuffer
from msgcap_redis.resp import (
    AGGREGATE_TYPES,
    BULK_TYPES,
    MAX_AGGREGATE,
    MAX_BULK_BYTES,
    TYPE_NAMES,
    RespType,
    parse_int,
    resync_c2s,
    resync_s2c,
    split_inline,
)

__all__ = ["MAX_DEPTH", "MAX_KEPT_ELEMENTS", "RedisSession"]

# Redis's PROTO_INLINE_MAX_SIZE: the server refuses longer inline commands and header
# lines; replies' simple strings are far shorter.  Longer lines are skipped, not buffered.
MAX_LINE_BYTES = 64 * 1024
# Nesting of aggregates; real replies nest a handful of levels (XREAD: 4).
MAX_DEPTH = 64
# Elements kept per message for `args` and `summary`; the rest are counted only, so a
# reply with millions of elements costs no memory.
MAX_KEPT_ELEMENTS = 1024
SUMMARY_CHARS = 200

_CRLF = b"\r\n"
_TABLE = "redis"
_PUBSUB = "redis_pubsub"
_SUB_EVENTS = frozenset(
    (b"subscribe", b"psubscribe", b"ssubscribe", b"unsubscribe", b"punsubscribe",
     b"sunsubscribe")
)
_DOUBLE = re.compile(rb"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
_BIG = re.compile(rb"[+-]?\d+\Z")
_ERROR_CODE = re.compile(r"[A-Z][A-Z_]*\Z")
_BARE = re.compile(rb"[A-Za-z0-9_.:*/@#=+-]+\Z")


class _Node:
    """One RESP value: scalar (``value``), bulk (``value`` = kept bytes, ``nbytes``,
    ``sha``) or aggregate (``count`` declared, ``children`` kept, ``dropped`` not kept)."""

    __slots__ = ("rtype", "value", "nbytes", "sha", "count", "children", "dropped", "is_null")

    def __init__(self, rtype: int, value: Any = None, nbytes: int = 0, sha: str | None = None,
                 count: int = 0, is_null: bool = False) -> None:
        self.rtype = rtype
        self.value = value
        self.nbytes = nbytes
        self.sha = sha
        self.count = count
        self.children: list[_Node] | None = [] if rtype in AGGREGATE_TYPES else None
        self.dropped = 0
        self.is_null = is_null

    def word(self) -> bytes | None:
        """The bytes of a complete bulk / simple string, else None."""
        if self.rtype == RespType.BULK_STRING and self.value is not None:
            return self.value if len(self.value) == self.nbytes else None
        if self.rtype == RespType.SIMPLE_STRING:
            return self.value.encode()
        return None


class _Msg:
    """A message being read: where it started, the open aggregates, what is awaited."""

    __slots__ = ("first", "last", "stack", "kept", "attributes", "pending")

    def __init__(self, first: Line) -> None:
        self.first = first
        self.last: Any = first
        self.stack: list[list[Any]] = []  # [node, slots left, is_attribute]
        self.kept = 0
        self.attributes: int | None = None
        self.pending: int | None = None  # bulk type whose bytes were asked for


class RedisSession(FramedSession, ColumnarSession):
    """One Redis client connection (both directions)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(
            LineFramer(max_line_bytes=MAX_LINE_BYTES, resync=resync_c2s),
            LineFramer(max_line_bytes=MAX_LINE_BYTES, resync=resync_s2c),
        )
        # bytes kept per bulk string / argument: the run's payload_cap, msgcap's default
        self.cap = session_option(options or {}, "payload_cap", DEFAULT_PAYLOAD_CAP,
                                  none_ok=True, owner="redis")
        self._msgs: list[_Msg | None] = [None, None]
        self.messages = [0, 0]  # rows of the redis table per direction
        self.subscribed = False
        self.fast = False  # ``columnar`` was called: childless rows go to columns
        self.rows: RowBuffer | None = None  # ... here (None: counted only)

    def columnar(self, keep_rows: bool) -> None:
        self.fast = True
        self.rows = RowBuffer() if keep_rows else None

    # ---- events ------------------------------------------------------------------

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        t = type(ev)
        if t is Line:
            self._line(direction, ev, out)
        elif t is Block:
            self._block(direction, ev, out)
        elif t is Oversize:
            self._oversize(direction, ev, out)
        elif t is Resynced:
            how = "to the next plausible message start" if ev.found else "(cut by a gap or the end)"
            out.append(anomaly_from("redis.resync", f"skipped {ev.end - ev.start} bytes {how}",
                                    direction, ev))
        elif t is Dropped:
            self._dropped(direction, ev, out)

    def on_gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int,
               out: list[Record]) -> None:
        m = self._msgs[direction]
        if m is not None:  # the gap fell between two lines of a message
            self._cut(direction, m, m.last, m.last.end, out, f"a gap of {nbytes} bytes")

    def on_close(self, ts_ns: int, out: list[Record]) -> None:
        for direction in Direction:
            m = self._msgs[direction]
            if m is not None:
                self._cut(direction, m, m.last, m.last.end, out, "the end of the stream")

    # ---- lines -------------------------------------------------------------------

    def _line(self, direction: Direction, ev: Line, out: list[Record]) -> None:
        m = self._msgs[direction]
        line = ev.data
        if m is None:
            if direction == Direction.C2S and line[:1] != b"*":
                self._inline(ev, out)
                return
            m = self._msgs[direction] = _Msg(ev)
        m.last = ev
        if not line:
            self._fail(direction, m, ev, out, "redis.protocol_error",
                       "empty line where a RESP value was expected")
            return
        t = line[0]
        body = line[1:]
        node: _Node | None = None
        if t == RespType.SIMPLE_STRING or t == RespType.SIMPLE_ERROR:
            node = _Node(t, decode_text(body))
        elif t == RespType.INTEGER:
            v = parse_int(body)
            if v is None or not -(2**63) <= v < 2**63:
                self._fail(direction, m, ev, out, "redis.protocol_error",
                           f"bad integer {body[:40]!r}")
                return
            node = _Node(t, v)
        elif t == RespType.NULL:
            node = _Node(t, is_null=True) if not body else None
        elif t == RespType.BOOLEAN:
            node = _Node(t, body == b"t") if body in (b"t", b"f") else None
        elif t == RespType.DOUBLE:
            low = body.lower()
            if low in (b"inf", b"-inf", b"+inf", b"nan") or _DOUBLE.match(body):
                node = _Node(t, float(low))
        elif t == RespType.BIG_NUMBER:
            node = _Node(t, body.decode()) if _BIG.match(body) else None
        elif t in BULK_TYPES or t in AGGREGATE_TYPES:
            self._length(direction, m, t, body, ev, out)
            return
        else:
            self._fail(direction, m, ev, out, "redis.protocol_error",
                       f"unknown RESP type byte {chr(t)!r} in line {line[:40]!r}")
            return
        if node is None:
            self._fail(direction, m, ev, out, "redis.protocol_error",
                       f"bad {TYPE_NAMES[t]} line {line[:40]!r}")
            return
        self._complete(direction, m, node, ev, out)

    def _length(self, direction: Direction, m: _Msg, t: int, body: bytes, ev: Line,
                out: list[Record]) -> None:
        if body == b"?":
            self._fail(direction, m, ev, out, "redis.unsupported",
                       f"streamed {TYPE_NAMES[t]} (`{chr(t)}?`) is not supported")
            return
        n = parse_int(body)
        if n == -1 and t in (RespType.BULK_STRING, RespType.ARRAY):  # RESP2 nulls
            self._complete(direction, m, _Node(t, is_null=True), ev, out)
            return
        limit = MAX_BULK_BYTES if t in BULK_TYPES else MAX_AGGREGATE
        if n is None or not 0 <= n <= limit:
            self._fail(direction, m, ev, out, "redis.protocol_error",
                       f"bad {TYPE_NAMES[t]} length {body[:40]!r}")
            return
        if t in BULK_TYPES:
            m.pending = t
            self.framers[direction].read_exact(n, keep_bytes=self.cap, sha256=True,
                                               trailer=_CRLF)
            return
        if len(m.stack) >= MAX_DEPTH:
            self._fail(direction, m, ev, out, "redis.too_deep",
                       f"aggregates nested deeper than {MAX_DEPTH}")
            return
        slots = 2 * n if t in (RespType.MAP, RespType.ATTRIBUTE) else n
        node = _Node(t, count=n)
        if t == RespType.ATTRIBUTE:
            node.children = None  # attributes are counted, not kept
            if not slots:
                if not m.stack:
                    m.attributes = (m.attributes or 0)
                return
        elif not slots:
            self._complete(direction, m, node, ev, out)
            return
        m.stack.append([node, slots, t == RespType.ATTRIBUTE])

    def _block(self, direction: Direction, ev: Block, out: list[Record]) -> None:
        m = self._msgs[direction]
        if m is None or m.pending is None:  # pragma: no cover - framer/session out of step
            return
        t = m.pending
        m.pending = None
        m.last = ev
        if ev.trailer is TrailerStatus.MISSING:
            where = "the end of the stream" if self.closing else "a gap"
            self._cut(direction, m, ev, ev.end, out, where)
            return
        if ev.trailer is not TrailerStatus.OK:
            self._fail(direction, m, ev, out, "redis.protocol_error",
                       f"{TYPE_NAMES[t]} of {ev.nbytes} bytes is followed by "
                       f"{ev.trailer_found[:1]!r}, not CRLF (wrong length?)")
            return
        self._complete(direction, m, _Node(t, ev.data, ev.nbytes, ev.sha256), ev, out)

    def _complete(self, direction: Direction, m: _Msg, node: _Node, ev: Any,
                  out: list[Record]) -> None:
        """``node`` is complete: fill its parent's slot, closing finished aggregates."""
        stack = m.stack
        while stack:
            frame = stack[-1]
            agg: _Node = frame[0]
            if not frame[2]:
                if agg.children is not None and m.kept < MAX_KEPT_ELEMENTS:
                    agg.children.append(node)
                    m.kept += 1
                else:
                    agg.dropped += 1
            frame[1] -= 1
            if frame[1]:
                return
            stack.pop()
            if frame[2]:  # an attribute precedes a value and fills no slot itself
                if not stack:
                    m.attributes = (m.attributes or 0) + agg.count
                return
            node = agg
        self._msgs[direction] = None
        self._finish(direction, m, node, ev, out)

    # ---- rows --------------------------------------------------------------------

    def _finish(self, direction: Direction, m: _Msg, root: _Node, ev: Any,
                out: list[Record]) -> None:
        values: dict[str, Any] = {
            "resp_type": TYPE_NAMES[root.rtype],
            "msg_index": self.messages[direction],
            "attributes": m.attributes,
            "is_null": root.is_null,
        }
        problems: list[str] = []
        children: list[dict[str, Any]] = []
        if direction == Direction.C2S:
            values["kind"] = "command"
            self._command(root, values, children, problems)
        else:
            values["kind"] = "reply"
            self._reply(root, values, children)
        if self.fast and not children:
            self._column_row(direction, values, m.first, ev, out)
        else:
            row = record_from(_TABLE, direction, values, m.first, ev)
            row.children = [record_from(_PUBSUB, direction, c, m.first, ev) for c in children]
            out.append(row)
        self.messages[direction] += 1
        for p in problems:
            out.append(anomaly_from("redis.bad_command", p, direction, m.first, ev))

    def _column_row(self, direction: Direction, values: dict[str, Any], first: Any, last: Any,
                    out: list[Any]) -> None:
        """A ``redis`` row into the column buffer, counted by a ``ColumnBatch`` in ``out``
        (the previous one when it is the last record: consecutive rows share one)."""
        if self.rows is not None:
            self.rows.append(values, first, last)
        prev = out[-1] if out else None
        if type(prev) is ColumnBatch and prev.direction == direction:
            out[-1] = prev._replace(n=prev.n + 1)
        else:
            out.append(ColumnBatch(_TABLE, direction, 1, self.rows, FORMAT))

    def _command(self, root: _Node, values: dict[str, Any], children: list, problems: list
                 ) -> None:
        elems = root.children or []
        values["arg_count"] = max(root.count - 1, 0)
        if not elems:
            values["summary"] = "(empty command)"
            return
        bad = [i for i, e in enumerate(elems) if e.rtype != RespType.BULK_STRING or e.is_null]
        if bad:
            problems.append(
                f"command element {bad[0]} is a {TYPE_NAMES[elems[bad[0]].rtype]}"
                f"{' (null)' if elems[bad[0]].is_null else ''}; Redis accepts only bulk strings "
                "in a command (it answers with a protocol error and closes the connection)"
            )
        words = [e.value if e.rtype == RespType.BULK_STRING and e.value is not None
                 else _render(e).encode() for e in elems]
        name = decode_text(words[0]).upper()
        values["command"] = name
        values["args"] = words[1:]
        values["args_truncated"] = bool(root.dropped) or any(
            e.rtype == RespType.BULK_STRING and e.value is not None and len(e.value) < e.nbytes
            for e in elems[1:]
        )
        values["summary"] = _summary_command(name, words[1:], bool(root.dropped))
        if name in ("PUBLISH", "SPUBLISH") and root.count == 3 and len(elems) == 3 and not bad:
            chan, msg = elems[1], elems[2]
            children.append({
                "event": name.lower(),
                "channel": decode_text(chan.value),
                **payload_values(msg.value, self.cap, nbytes=msg.nbytes, sha256=msg.sha),
            })

    def _inline(self, ev: Line, out: list[Record]) -> None:
        words = split_inline(ev.data)
        framer = self.framers[Direction.C2S]
        if words is None:
            framer.reject(ev.end - ev.start)
            out.append(anomaly_from(
                "redis.bad_inline",
                f"inline command with unbalanced quotes: {ev.data[:60]!r} (Redis answers "
                "with a protocol error and closes the connection)",
                Direction.C2S, ev,
            ))
            return
        if not words:
            return  # an empty line: Redis ignores it
        cap = self.cap
        name = decode_text(words[0]).upper()
        args = words[1:]
        kept = args if cap is None else [a[:cap] for a in args]
        values: dict[str, Any] = {
            "kind": "command",
            "resp_type": "inline",
            "msg_index": self.messages[Direction.C2S],
            "command": name,
            "args": kept,
            "arg_count": len(args),
            "is_null": False,
            "args_truncated": any(len(k) < len(a) for k, a in zip(kept, args, strict=True)),
            "summary": _summary_command(name, kept, False),
        }
        if self.fast and not (name in ("PUBLISH", "SPUBLISH") and len(args) == 2):
            self._column_row(Direction.C2S, values, ev, ev, out)
            self.messages[Direction.C2S] += 1
            return
        row = record_from(_TABLE, Direction.C2S, values, ev)
        if name in ("PUBLISH", "SPUBLISH") and len(args) == 2:
            row.children.append(record_from(_PUBSUB, Direction.C2S, {
                "event": name.lower(),
                "channel": decode_text(args[0]),
                **payload_values(args[1], cap),
            }, ev))
        self.messages[Direction.C2S] += 1
        out.append(row)

    def _reply(self, root: _Node, values: dict[str, Any], children: list) -> None:
        t = root.rtype
        values["summary"] = _clip(_render(root, top=True))
        if root.is_null:
            return
        if t == RespType.SIMPLE_STRING or t == RespType.BIG_NUMBER:
            values["text"] = root.value
            if t == RespType.SIMPLE_STRING and root.value == "RESET":
                self.subscribed = False
        elif t == RespType.SIMPLE_ERROR:
            self._error(values, root.value)
        elif t == RespType.INTEGER:
            values["integer"] = root.value
        elif t == RespType.DOUBLE:
            values["double"] = root.value
        elif t == RespType.BOOLEAN:
            values["boolean"] = root.value
        elif t in BULK_TYPES:
            values.update(payload_values(root.value, self.cap, "bulk", nbytes=root.nbytes,
                                         sha256=root.sha))
            if t == RespType.BULK_ERROR:
                self._error(values, decode_text(root.value))
            elif t == RespType.VERBATIM_STRING:
                data = root.value
                if data[3:4] == b":":
                    values["verbatim_format"] = decode_text(data[:3])
                    data = data[4:]
                values["text"] = decode_text(data)
        else:  # aggregates
            values["elements"] = root.count
            self._pubsub(root, values, children)

    @staticmethod
    def _error(values: dict[str, Any], message: str) -> None:
        values["error"] = message
        code = message.split(" ", 1)[0]
        values["error_code"] = code if _ERROR_CODE.match(code) else None

    def _pubsub(self, root: _Node, values: dict[str, Any], children: list) -> None:
        """Pub/sub shapes (Redis docs, "Pub/Sub", "Format of pushed messages")."""
        if root.rtype not in (RespType.ARRAY, RespType.PUSH):
            return
        if root.rtype == RespType.PUSH:
            values["kind"] = "push"
        el = root.children or []
        if not el or root.dropped:
            return
        kind = el[0].word()
        if kind is None:
            return
        kind = kind.lower()
        n = len(el)
        if kind in _SUB_EVENTS and n == 3 and el[2].rtype == RespType.INTEGER:
            target = el[1].word()
            name = decode_text(target) if target is not None else None
            is_pattern = kind.startswith(b"p")
            children.append({
                "event": kind.decode(),
                "channel": None if is_pattern else name,
                "pattern": name if is_pattern else None,
                "subscriptions": el[2].value,
            })
            if kind.startswith((b"unsub", b"punsub", b"sunsub")):
                self.subscribed = el[2].value > 0
            else:
                self.subscribed = True
            return
        if not (self.subscribed or root.rtype == RespType.PUSH):
            return
        if kind in (b"message", b"smessage") and n == 3:
            chan, msg, pattern = el[1], el[2], None
        elif kind == b"pmessage" and n == 4:
            pattern, chan, msg = el[1], el[2], el[3]
        else:
            return
        if any(e.rtype != RespType.BULK_STRING or e.is_null
               for e in (chan, msg) + ((pattern,) if pattern is not None else ())):
            return
        values["kind"] = "push"
        children.append({
            "event": kind.decode(),
            "channel": decode_text(chan.value),
            "pattern": decode_text(pattern.value) if pattern is not None else None,
            **payload_values(msg.value, self.cap, nbytes=msg.nbytes, sha256=msg.sha),
        })

    # ---- trouble -----------------------------------------------------------------

    def _fail(self, direction: Direction, m: _Msg, ev: Any, out: list[Record], kind: str,
              detail: str) -> None:
        """Malformed bytes: drop the message being read, count it undecoded, resync."""
        framer = self.framers[direction]
        framer.reject(ev.end - m.first.start)
        self._msgs[direction] = None
        out.append(anomaly_from(kind, f"{detail}; message dropped, resynchronising",
                                direction, m.first, ev))
        framer.start_resync()

    def _cut(self, direction: Direction, m: _Msg, last: Any, decoded_end: int,
             out: list[Record], where: str) -> None:
        """A gap or the end cut the message being read: drop it (never a partial row)."""
        framer = self.framers[direction]
        framer.reject(decoded_end - m.first.start)
        self._msgs[direction] = None
        kind = "redis.eof_in_message" if self.closing else "redis.gap_in_message"
        out.append(anomaly_from(
            kind, f"{where} cut a message after {decoded_end - m.first.start} bytes; dropped",
            direction, m.first, last,
        ))
        if not self.closing:
            framer.start_resync()

    def _oversize(self, direction: Direction, ev: Oversize, out: list[Record]) -> None:
        m = self._msgs[direction]
        first = ev
        if m is not None:
            self.framers[direction].reject(ev.start - m.first.start)
            self._msgs[direction] = None
            first = m.first
        out.append(anomaly_from(
            "redis.line_too_long",
            f"line of {ev.nbytes} bytes exceeds {MAX_LINE_BYTES} (Redis's inline limit); "
            "skipped, resynchronising", direction, first, ev,
        ))
        self.framers[direction].start_resync()

    def _dropped(self, direction: Direction, ev: Dropped, out: list[Record]) -> None:
        m = self._msgs[direction]
        where = "the end of the stream" if self.closing else "a gap"
        if m is not None:
            m.last = ev
            self._cut(direction, m, ev, ev.start, out, where)
            return
        kind = "redis.eof_in_message" if self.closing else "redis.gap_in_message"
        out.append(anomaly_from(kind, f"{where} cut a line after {ev.end - ev.start} bytes; "
                                "dropped", direction, ev))


# -------------------------------------------------------------------------- summary


def _quote(b: bytes) -> str:
    out = ['"']
    for c in b:
        if c == 0x22 or c == 0x5C:
            out.append("\\" + chr(c))
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        elif c == 10:
            out.append("\\n")
        elif c == 13:
            out.append("\\r")
        elif c == 9:
            out.append("\\t")
        else:
            out.append(f"\\x{c:02x}")
    out.append('"')
    return "".join(out)


def _clip(s: str) -> str:
    return s if len(s) <= SUMMARY_CHARS else s[: SUMMARY_CHARS - 1] + "…"


def _summary_command(name: str, args: list[bytes], more: bool) -> str:
    parts = [name]
    size = len(name)
    for a in args:
        if size > SUMMARY_CHARS:
            break
        a = a[:64]
        shown = a.decode() if a and _BARE.match(a) else _quote(a)
        parts.append(shown)
        size += len(shown) + 1
    if more:
        parts.append("…")
    return _clip(" ".join(parts))


def _render(node: _Node, top: bool = False) -> str:
    """redis-cli's way of showing a value, on one line."""
    t = node.rtype
    if node.is_null:
        return "(nil)" if top else "nil"
    if t == RespType.SIMPLE_STRING:
        return node.value if top else _quote(node.value.encode())
    if t == RespType.SIMPLE_ERROR:
        return f"(error) {node.value}"
    if t == RespType.INTEGER:
        return f"(integer) {node.value}" if top else str(node.value)
    if t == RespType.DOUBLE:
        return f"(double) {node.value!r}" if top else repr(node.value)
    if t == RespType.BOOLEAN:
        v = "true" if node.value else "false"
        return f"({v})" if top else v
    if t == RespType.BIG_NUMBER:
        return f"(big number) {node.value}" if top else node.value
    if t in BULK_TYPES:
        data = node.value[:64]
        shown = _quote(data) + ("…" if node.nbytes > len(data) else "")
        return f"(error) {shown}" if t == RespType.BULK_ERROR else shown
    kids = [_render(c) for c in node.children[:32]] if node.children else []
    if node.dropped or (node.children and len(node.children) > 32):
        kids.append("…")
    if t == RespType.MAP:
        pairs = [f"{kids[i]}: {kids[i + 1]}" for i in range(0, len(kids) - 1, 2)]
        if len(kids) % 2:
            pairs.append(kids[-1])
        return "{" + ", ".join(pairs) + "}"
    return "[" + ", ".join(kids) + "]"

"""The session of NATS server links (table ``nats_cluster``): routes, gateways, leaf
nodes.  The facts and the strategy are in ``dissectors.nats.cluster``'s docstring; that
module declares the dissector and its table and imports this one only when a run meets a
server link (the S2 decoder, the framing rule and the redaction are not every run's)."""

from __future__ import annotations

import base64
import binascii
from collections import deque
from collections.abc import Mapping
from enum import IntEnum, StrEnum
from typing import Any

from dissectors.api import Direction, Record, Span
from dissectors.framing import (
    Block,
    Dropped,
    Line,
    LineFramer,
    Oversize,
    Resynced,
    TrailerStatus,
    line_op_resync,
)
from dissectors.nats import parser as nats_parser
from dissectors.nats import s2
from dissectors.nats.cluster import (
    _GATEWAY_KEYS,
    _LEAF_KEYS,
    _OP_BYTES,
    _ROUTE_KEYS,
    _TABLE,
    _verb,
)
from dissectors.options import read_payload_cap
from dissectors.redaction import redact_connect_json
from dissectors.sessions import LIMIT_MEMORY, FramedSession

__all__ = ["GatewayCmd", "NatsClusterAnomaly", "NatsClusterSession"]

# Control lines of server links are bounded by nats-server's max_control_line (4 KiB by
# default) except INFO, which lists URLs; this bound only caps memory.
MAX_LINE_BYTES = 65536


class GatewayCmd(IntEnum):
    """``gateway_cmd`` of a gateway INFO (nats-server ``gateway.go``)."""

    GOSSIP = 1
    ALL_SUBS_START = 2
    ALL_SUBS_COMPLETE = 3


class NatsClusterAnomaly(StrEnum):
    """Anomaly kinds of server links (``anomalies.kind``; values are the documented
    strings)."""

    BAD_ARGS = "nats_cluster.bad_args"
    BAD_TRAILER = "nats_cluster.bad_trailer"
    COMPRESSED = "nats_cluster.compressed"
    EOF = "nats_cluster.eof"
    GAP = "nats_cluster.gap"
    LINE_TOO_LONG = "nats_cluster.line_too_long"
    RESYNC = "nats_cluster.resync"
    S2_CORRUPT = "nats_cluster.s2_corrupt"
    S2_CRC = "nats_cluster.s2_crc"
    UNKNOWN_OP = "nats_cluster.unknown_op"



def _gateway_cmd(obj: dict[str, Any], v: dict[str, Any]) -> None:
    """``gateway_cmd`` and its payload (an account name; Go's ``[]byte`` is base64 in
    JSON) into the row."""
    cmd = obj.get("gateway_cmd")
    if type(cmd) is not int or cmd == 0:
        return
    try:
        v["gateway_cmd"] = GatewayCmd(cmd).name.lower()
    except ValueError:
        v["gateway_cmd"] = f"unknown {cmd}"
    raw = obj.get("gateway_cmd_payload")
    if isinstance(raw, str) and raw and cmd != GatewayCmd.GOSSIP:
        try:
            v["account"] = nats_parser.text(base64.b64decode(raw, validate=True))
        except (binascii.Error, ValueError):
            v["account"] = raw


def _link_of(obj: dict[str, Any], op: str) -> str | None:
    if any(k in obj for k in _GATEWAY_KEYS):
        return "gateway"
    if any(k in obj for k in _LEAF_KEYS):
        return "leaf"
    if any(k in obj for k in _ROUTE_KEYS) or (op == "CONNECT" and "cluster" in obj):
        return "route"
    return None


resync = line_op_resync({op: bytes(range(256)) for op in _OP_BYTES})
"""The next line that starts with an op of server links, followed by any byte
(``framing.ResyncFn``; one regular-expression scan, linear on any junk)."""


class _Dir:
    __slots__ = ("framer", "values", "line", "stage", "hdr_len", "pay_len", "after_info",
                 "plain", "handed", "s2", "s2_map", "map_base", "dec_off")

    def __init__(self, framer: LineFramer) -> None:
        self.framer = framer  # the session's framer of this direction (the inner one once S2)
        self.values: dict[str, Any] | None = None
        self.line: Line | None = None
        self.stage = 0
        self.hdr_len = -1
        self.pay_len = -1
        self.after_info = False  # an INFO was just read: an S2 stream may start here
        # compressed direction: the wire framer (accounting of the bytes before the
        # switch), bytes it handed to the S2 decoder, the decoder, and the map of the
        # decompressed stream to wire chunks: (decompressed end, wire start, wire end,
        # CRC ok), starting at decompressed offset ``map_base``
        self.plain: LineFramer | None = None
        self.handed = 0
        self.s2: s2.S2Stream | None = None
        self.s2_map: deque[tuple[int, int, int, bool]] = deque()
        self.map_base = 0
        self.dec_off = 0


class _S2Layer:
    """A compressed direction (``dissectors.sessions.Layer``): its wire bytes go to the S2
    decoder, the decoded chunks to the session's inner framer of that direction."""

    __slots__ = ("direction", "session", "st")

    def __init__(self, session: NatsClusterSession, direction: Direction, st: _Dir) -> None:
        self.session = session
        self.direction = direction
        self.st = st

    def feed(self, data: bytes, span: Span, out: list[Record]) -> None:
        st = self.st
        assert st.s2 is not None
        self.session._s2_events(self.direction, st, st.s2.feed(data, span), out)

    def gap(self, offset: int, nbytes: int, ts_ns: int, out: list[Record]) -> None:
        st = self.st
        assert st.s2 is not None
        self.session._s2_events(self.direction, st, st.s2.gap(offset, nbytes, ts_ns), out)

    def close(self, out: list[Record]) -> None:
        session, direction, st = self.session, self.direction, self.st
        assert st.s2 is not None
        session._s2_events(direction, st, st.s2.close(), out)
        inner: list[Record] = []
        session.flush(direction, st.framer.close(), inner, closing=True)
        out += session._remap(st, inner)
        if session.budget is not None:
            session.budget.hold(st.s2, 0)


class NatsClusterSession(FramedSession):
    """One route / gateway / leaf-node connection (both directions)."""

    redact_details = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = options or {}
        self.payload_cap = read_payload_cap(options, "nats_cluster")
        self.keep_secrets = options.get("keep_secrets", False) is True
        budget = options.get("memory_budget")
        self.budget = budget if callable(getattr(budget, "hold", None)) else None
        block = options.get("s2_max_block_bytes", s2.MAX_BLOCK_BYTES)
        self.s2_max_block = block if type(block) is int and block > 0 else s2.MAX_BLOCK_BYTES
        c2s = LineFramer(max_line_bytes=MAX_LINE_BYTES, resync=resync)
        s2c = LineFramer(max_line_bytes=MAX_LINE_BYTES, resync=resync)
        super().__init__(c2s, s2c)
        self._dirs = (_Dir(c2s), _Dir(s2c))
        for fr in self.framers:  # a line being buffered draws from the run's budget
            fr.budget = self.budget
        self.link: str | None = None
        self.pinned: bool | None = None  # a route that does not send the account
        self.bound_account: str | None = None  # leaf: the account of the link

    # -- driver hooks ---------------------------------------------------------------------

    def drain_fed(self, direction: Direction, out: list[Record]) -> None:
        st = self._dirs[direction]
        if st.after_info:
            self._s2_check(direction, st, out)
        self.drain(direction, out)

    def on_gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int,
               out: list[Record]) -> None:
        self._dirs[direction].after_info = False  # what follows a gap is no stream start

    def account(self, direction: Direction) -> None:
        st = self._dirs[direction]
        if st.s2 is not None and st.plain is not None:
            self.decoded_bytes[direction] = st.plain.decoded_bytes + st.s2.decoded_bytes
            self.undecoded_bytes[direction] = (st.plain.undecoded_bytes - st.handed
                                               + st.s2.undecoded_bytes)
            return
        self.decoded_bytes[direction] = st.framer.decoded_bytes
        self.undecoded_bytes[direction] = st.framer.undecoded_bytes

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        st = self._dirs[direction]
        t = type(ev)
        if t is Line:
            self._on_line(direction, st, ev, out)
        elif t is Block:
            self._on_block(direction, st, ev, out)
        elif t is Oversize:
            self.anomaly(out, NatsClusterAnomaly.LINE_TOO_LONG,
                         f"control line of {ev.nbytes} bytes skipped", direction, ev)
            st.framer.start_resync()
        elif t is Resynced:
            self.anomaly(out, NatsClusterAnomaly.RESYNC, f"skipped {ev.end - ev.start} bytes",
                         direction, ev)
        elif t is Dropped:
            self._on_dropped(direction, st, ev, out)
        if st.after_info:
            self._s2_check(direction, st, out)

    # -- S2-compressed directions ---------------------------------------------------------

    def _s2_starts(self, st: _Dir) -> bool | None:
        """After an INFO: True when the buffered bytes open an S2 stream, None when too
        few bytes are buffered to tell."""
        head = st.framer.peek(len(s2.STREAM_IDENTIFIER))
        if head == s2.STREAM_IDENTIFIER:
            return True
        if s2.STREAM_IDENTIFIER.startswith(head):  # (includes nothing buffered yet)
            return None
        return False

    def _s2_check(self, direction: Direction, st: _Dir, out: list[Record]) -> None:
        """After an INFO, between lines: switch to S2 when the buffered bytes open an S2
        stream (undecided while they are a prefix of its identifier: those bytes hold no
        line end, so the framer waits for more bytes anyway)."""
        if not st.framer.at_line:
            return
        starts = self._s2_starts(st)
        if starts is None:
            return  # wait for the bytes that tell
        st.after_info = False
        if starts:
            self._to_s2(direction, st, out)

    def _to_s2(self, direction: Direction, st: _Dir, out: list[Record]) -> None:
        """Hand the rest of this direction to an S2 decoder (see the module docstring)."""
        buf, pos, base, chunks = st.framer.scan_view()
        start = base + pos
        pieces: list[tuple[bytes, Span]] = []
        chunk_start = base
        for end, t0, t1, f0, f1 in chunks:
            if end > start:
                a = max(start, chunk_start)
                pieces.append((bytes(buf[a - base : end - base]), Span(a, t0, t1, f0, f1)))
            chunk_start = end
        st.handed = len(buf) - pos
        st.framer.abandon()  # counts the handed bytes undecoded; account takes them back
        st.plain = st.framer
        st.s2 = s2.S2Stream(start_offset=start, max_block_bytes=self.s2_max_block,
                            budget=self.budget)
        st.framer = LineFramer(max_line_bytes=MAX_LINE_BYTES, resync=resync, start_offset=0)
        st.framer.budget = self.budget
        self.framers[direction] = st.framer
        self.layers[direction] = _S2Layer(self, direction, st)
        st.after_info = False
        for data, span in pieces:
            self._s2_events(direction, st, st.s2.feed(data, span), out)

    def _s2_events(self, direction: Direction, st: _Dir, events: list[s2.Data | s2.Corrupt],
                   out: list[Record]) -> None:
        """Decoded chunks into the inner framer; corrupt ones become anomalies + a hole."""
        assert st.s2 is not None
        events = st.s2.take_events() + events  # a memory release since the last call
        for ev in events:
            if isinstance(ev, s2.Data):  # (isinstance: mypy narrows the union's else so)
                if ev.crc is not s2.CrcStatus.OK:
                    self.anomaly(out, NatsClusterAnomaly.S2_CRC,
                                 f"{ev.kind.name.lower()} S2 chunk of {ev.end - ev.start} "
                                 f"bytes fails its CRC-32C; its {len(ev.data)} decoded bytes "
                                 "are read, rows from them say crc_status mismatch",
                                 direction, ev)
                if not ev.data:
                    continue
                st.s2_map.append((st.dec_off + len(ev.data), ev.start, ev.end,
                                  ev.crc is s2.CrcStatus.OK))
                st.framer.feed(ev.data, Span(st.dec_off, ev.ts_first_ns, ev.ts_last_ns,
                                             ev.frame_first, ev.frame_last))
                st.dec_off += len(ev.data)
                inner: list[Record] = []
                self.drain(direction, inner)
                out += self._remap(st, inner)
                continue
            kind = (LIMIT_MEMORY if ev.reason.startswith(LIMIT_MEMORY)
                    else NatsClusterAnomaly.S2_CORRUPT)
            self.anomaly(out, kind, f"S2 stream: {ev.reason}", direction, ev)
            # what the lost chunk held is unknown: a one-byte hole in the decompressed
            # stream cuts the message in progress, and the parser resynchronises
            st.s2_map.append((st.dec_off + 1, ev.start, ev.end, True))
            inner = []
            self.flush(direction, st.framer.gap(st.dec_off, 1), inner)
            st.dec_off += 1
            st.framer.start_resync()
            out += self._remap(st, inner)

    def _remap(self, st: _Dir, records: list[Record]) -> list[Record]:
        """Give rows made from decompressed bytes the wire offsets of the chunks their
        bytes came from, and those chunks' CRC verdict."""
        for r in records:
            lo, hi = r.offset_start, max(r.offset_start + 1, r.offset_end)
            first = last = -1
            ok = True
            start = st.map_base
            for end, wire_a, wire_b, chunk_ok in st.s2_map:
                if end > lo and start < hi:
                    if first < 0:
                        first = wire_a
                    last = wire_b
                    ok = ok and chunk_ok
                start = end
            if first < 0 and st.s2_map:  # pragma: no cover - map pruned too early
                first, last = st.s2_map[-1][1], st.s2_map[-1][2]
            r.offset_start, r.offset_end = first, last
            if r.table == _TABLE:
                r.values["compression"] = "s2"
                r.values["crc_status"] = "ok" if ok else "mismatch"
        # forget chunks wholly before what the framer may still refer to
        keep = st.framer.offset if st.line is None else min(st.framer.offset, st.line.start)
        while len(st.s2_map) > 1 and st.s2_map[0][0] <= keep:
            st.map_base = st.s2_map.popleft()[0]
        return records

    def _on_dropped(self, direction: Direction, st: _Dir, ev: Dropped,
                    out: list[Record]) -> None:
        if ev.kind == "block" and st.values is not None and st.line is not None:
            values, line = st.values, st.line
            values["incomplete"] = True
            values["payload_len"] = st.pay_len if st.pay_len >= 0 else None
            if st.hdr_len >= 0:
                values["header_len"] = st.hdr_len
            out.append(Record(_TABLE, direction, line.start, max(ev.end, line.end),
                              line.ts_first_ns, ev.ts_last_ns, line.frame_first,
                              ev.frame_last, values))
            st.values = st.line = None
            st.stage = 0
        at_close = self.closing
        where = "the end of the stream" if at_close else "a gap"
        self.anomaly(out, NatsClusterAnomaly.GAP if not at_close else NatsClusterAnomaly.EOF,
                     f"partial {ev.kind} of {ev.end - ev.start} bytes cut by {where}",
                     direction, ev)

    def _on_line(self, direction: Direction, st: _Dir, ev: Line, out: list[Record]) -> None:
        line = ev.data
        if line[:4] == b"\xff\x06\x00\x00":  # S2 stream identifier chunk: compressed
            st.framer.reject(ev.end - ev.start)
            self.anomaly(out, NatsClusterAnomaly.COMPRESSED,
                         "S2-compressed stream (the link negotiated compression); the rest "
                         "of this direction is left undecoded", direction, ev)
            st.framer.abandon()
            return
        op, args = _verb(line)
        if op is None:
            st.framer.reject(ev.end - ev.start)
            self.anomaly(out, NatsClusterAnomaly.UNKNOWN_OP,
                         f"not an operation of server links: {nats_parser.show(line)}",
                         direction, ev)
            st.framer.start_resync()
            return
        values: dict[str, Any] = {"op": op, "incomplete": False}
        try:
            hdr, total = self._parse(op, args, line, values)
        except ValueError as exc:
            st.framer.reject(ev.end - ev.start)
            self.anomaly(out, NatsClusterAnomaly.BAD_ARGS, f"{exc}: {nats_parser.show(line)}",
                         direction, ev)
            st.framer.start_resync()
            return
        values["link"] = self.link or "unknown"
        if op == "INFO" and st.s2 is None:
            st.after_info = True  # an S2 stream may start after it
        if total < 0:
            out.append(Record(_TABLE, direction, ev.start, ev.end, ev.ts_first_ns,
                              ev.ts_last_ns, ev.frame_first, ev.frame_last, values))
            return
        st.values, st.line = values, ev
        st.hdr_len = hdr
        st.pay_len = total - max(hdr, 0)
        if hdr > 0:
            st.stage = 1
            st.framer.read_exact(hdr, keep_bytes=65536)
        else:
            st.stage = 2
            if hdr == 0:
                values["header_len"] = 0
            st.framer.read_exact(st.pay_len, keep_bytes=self.payload_cap, sha256=True,
                                 trailer=b"\r\n", lenient_trailers=(b"\n",))

    def _on_block(self, direction: Direction, st: _Dir, ev: Block, out: list[Record]) -> None:
        values, line = st.values, st.line
        if values is None or line is None:  # pragma: no cover - framer/session out of step
            return
        if st.stage == 1:
            values["header_len"] = ev.nbytes
            headers, _code, _desc, _problems = nats_parser.parse_headers(ev.data)
            values["headers"] = headers
            st.stage = 2
            st.framer.read_exact(st.pay_len, keep_bytes=self.payload_cap, sha256=True,
                                 trailer=b"\r\n", lenient_trailers=(b"\n",))
            return
        data = ev.data
        values["payload"] = data
        values["payload_len"] = ev.nbytes
        values["payload_sha256"] = ev.sha256
        values["payload_truncated"] = len(data) < ev.nbytes
        out.append(Record(_TABLE, direction, line.start, ev.end, line.ts_first_ns,
                          ev.ts_last_ns, line.frame_first, ev.frame_last, values))
        st.values = st.line = None
        st.stage = 0
        if ev.trailer not in (TrailerStatus.OK, TrailerStatus.LENIENT):
            self.anomaly(out, NatsClusterAnomaly.BAD_TRAILER,
                         f"{values['op']} payload of {ev.nbytes} bytes not followed by CRLF",
                         direction, ev)
            if ev.trailer is not TrailerStatus.MISSING:
                st.framer.start_resync()

    # -- parsing --------------------------------------------------------------------------

    def _learn(self, link: str | None) -> None:
        if link is not None and self.link is None:
            self.link = link

    def _parse(self, op: str, args: list[bytes], line: bytes, v: dict[str, Any]) -> tuple[int, int]:
        """Fill ``v``; returns (header size or -1, total size or -1)."""
        txt = nats_parser.text
        rest = args[1:]
        if op in ("PING", "PONG", "+OK"):
            return -1, -1
        if op == "-ERR":
            v["error"] = txt(line[4:].strip().strip(b"'"))
            return -1, -1
        if op in ("INFO", "CONNECT"):
            raw = line.split(None, 1)[1] if len(args) > 1 else b""
            v["json_raw"] = txt(raw)
            if op == "CONNECT" and not self.keep_secrets:
                v["json_raw"] = redact_connect_json(v["json_raw"])
            try:
                # (the shared memo: a route repeats its INFO; only read here, never changed)
                obj = nats_parser.json_object(raw)
            except (ValueError, UnicodeDecodeError):
                obj = None
            if isinstance(obj, dict):
                self._learn(_link_of(obj, op))
                if "route_account" in obj:
                    self.pinned = True
                for col, key in (("server_id", "server_id"), ("server_name", "server_name"),
                                 ("cluster", "cluster"), ("gateway", "gateway")):
                    val = obj.get(key)
                    if isinstance(val, str):
                        v[col] = val
                if op == "CONNECT" and isinstance(obj.get("name"), str):
                    v.setdefault("server_id", obj["name"])
                acc = obj.get("remote_account")
                if isinstance(acc, str) and acc:
                    self.bound_account = acc
                if op == "INFO":
                    _gateway_cmd(obj, v)
            return -1, -1
        if op in ("A+", "A-"):
            self._learn("gateway")
            if len(rest) != 1:
                raise ValueError(f"{op} takes 1 argument, got {len(rest)}")
            v["account"] = txt(rest[0])
            return -1, -1
        if op in ("RS+", "RS-"):
            self._learn("route")
            return self._sub(op, rest, v, origin=False)
        if op in ("LS+", "LS-"):
            if self.link is None:
                # on a route LS± carries origin + account; on a leaf neither
                self._learn("route" if len(rest) in (3, 5) and not rest[-1].isdigit()
                            or len(rest) == 5 else "leaf")
            return self._sub(op, rest, v, origin=self.link in ("route", "gateway"))
        # messages
        if op == "RMSG":
            self._learn("route")
        lead = 0
        with_hdr = op == "HMSG"
        if op == "LMSG" and self.link is None:
            self._learn("route" if len(rest) >= 5 and rest[-2].isdigit() else "leaf")
        if self.link in ("route", "gateway"):
            lead = 0 if self.pinned and self.link == "route" else 1
            if op == "LMSG":
                lead += 1
                with_hdr = True
        return self._msg(op, rest, lead, with_hdr, v)

    def _sub(self, op: str, rest: list[bytes], v: dict[str, Any], origin: bool) -> tuple[int, int]:
        txt = nats_parser.text
        plus = op.endswith("+")
        if origin:
            if not rest:
                raise ValueError(f"{op} without arguments")
            v["origin"] = txt(rest[0])
            rest = rest[1:]
        n = len(rest)
        # [account] subject [queue [weight]]: the count tells whether the account is there
        if plus:
            if n not in (1, 2, 3, 4):
                raise ValueError(f"{op} takes 1 to 4 arguments, got {n}")
            has_acc = n in (2, 4)
        else:
            if n not in (1, 2, 3):
                raise ValueError(f"{op} takes 1 to 3 arguments, got {n}")
            # 2 arguments: "account subject", or "subject queue" where no account is sent
            has_acc = n == 3 or (n == 2 and not self.pinned and self.link != "leaf")
        if self.link == "route" and not origin and plus:
            self.pinned = not has_acc
        if has_acc:
            v["account"] = txt(rest[0])
            rest = rest[1:]
        elif self.link == "leaf" and self.bound_account:
            v["account"] = self.bound_account
        v["subject"] = txt(rest[0])
        if len(rest) >= 2:
            v["queue"] = txt(rest[1])
        if plus and len(rest) >= 3:
            w = nats_parser.parse_size(rest[2])
            if w < 0:
                raise ValueError(f"bad queue weight {nats_parser.show(rest[2], 20)!r}")
            v["queue_weight"] = w
        return -1, -1

    def _msg(self, op: str, rest: list[bytes], lead: int, with_hdr: bool,
             v: dict[str, Any]) -> tuple[int, int]:
        txt = nats_parser.text
        nsizes = 2 if with_hdr else 1
        if len(rest) < lead + 1 + nsizes:
            raise ValueError(f"{op} with too few arguments ({len(rest)})")
        fixed = rest[:lead]
        if lead == 2:
            v["origin"], v["account"] = txt(fixed[0]), txt(fixed[1])
        elif lead == 1:
            if op == "LMSG" and self.link in ("route", "gateway"):
                v["origin"] = txt(fixed[0])
            else:
                v["account"] = txt(fixed[0])
        elif self.link == "leaf" and self.bound_account:
            v["account"] = self.bound_account
        v["subject"] = txt(rest[lead])
        middle = rest[lead + 1 : len(rest) - nsizes]
        sizes = rest[len(rest) - nsizes :]
        queues: list[str] = []
        if len(middle) == 1:
            v["reply_to"] = txt(middle[0])
        elif len(middle) >= 2:
            mark = middle[0]
            if mark == b"+":
                v["reply_to"] = txt(middle[1])
                queues = [txt(q) for q in middle[2:]]
            elif mark == b"|":
                queues = [txt(q) for q in middle[1:]]
            else:
                raise ValueError(f"bad reply indicator {nats_parser.show(mark, 20)!r}")
        v["queues"] = queues
        total = nats_parser.parse_size(sizes[-1])
        hdr = nats_parser.parse_size(sizes[0]) if with_hdr else -1
        if total < 0 or (with_hdr and (hdr < 0 or hdr > total)):
            raise ValueError("bad size")
        return hdr, total

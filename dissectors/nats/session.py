"""NATS per-flow state: framing, pending operations, and what the connection taught us.

Strategy: each direction has a ``LineFramer``.  A control line is parsed by the pure
functions in ``parser``; an op with a payload asks the framer for exactly its header and
payload bytes (then CRLF), so payload bytes are never scanned for line ends.  The row is
emitted when the op's last byte is in.  Connection-wide knowledge is small: the
``max_payload`` of the server's last INFO (checked against the client's PUB/HPUB) and
which wrong-direction ops were already reported.

Decisions (see also the table descriptions):

* Rejected control lines (unknown op, bad sizes, wrong argument count) become one
  anomaly each, count as undecoded, and the direction resynchronises on the next line
  that starts with a known op; the bytes skipped meanwhile become one ``nats.resync``
  anomaly.
* A gap or the stream end after a complete control line but before the payload's end
  still yields the op's row, with the declared sizes, ``incomplete`` = true and null
  ``payload``/``payload_sha256`` (never a partial hash), plus ``nats.gap_in_payload`` /
  ``nats.eof_in_payload``.  Since the op's end is known, parsing resumes exactly there
  when the gap ends before it; otherwise it resynchronises.
* The payload trailer must be CRLF (nats-server rejects anything else).  A bare LF is
  accepted with a ``nats.bad_trailer`` anomaly; other bytes give the row (its payload is
  complete), an anomaly, and a resync from the byte after the payload.
* A line starting with a TLS handshake record (``16 03``) means the connection was
  upgraded to TLS (INFO ``tls_required``): one ``nats.tls`` anomaly, and the rest of that
  direction is left undecoded.
* Ops sent the wrong way (``MSG`` from a client, ``PUB`` from a server) still get rows;
  the first of each kind per direction also raises ``nats.wrong_direction``.

Carried protocols (STAN, Liftbridge): the pipeline calls ``carry(scope)`` (the
``dissectors.api.CarrierSession`` capability), which sets ``session.on_message`` to a
callable ``(row, payload) -> list[Record]`` offering a ``CarriedMessage`` to the scope.
It is called for every complete PUB/HPUB/MSG/HMSG row
with the *whole* payload (not the capped column copy) when the payload is at most
``carry_max`` bytes (option, default 64 MiB); the records it returns become the row's
``children``.  Rows cut by a gap, or with a larger payload, are not offered.

Credentials (``dissectors.redaction``): unless the option ``keep_secrets`` is true, the
values of CONNECT's ``pass``, ``auth_token``, ``jwt``, ``sig`` and ``nkey`` members are
replaced in ``json_raw`` by a marker with their length and SHA-256, then ``json_raw`` and
every anomaly detail pass the redaction gate (wire bytes are gated raw, before ``repr``, in
``parser.show``).  With ``keep_secrets`` the session runs inside ``keeping_secrets()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from dissectors.api import (
    MAX_VERDICTS,
    CarriedMessage,
    CarrierScope,
    CarrierSession,
    ColumnarSession,
    ColumnBatch,
    Direction,
    Record,
    Span,
)
from dissectors.framing import (
    NEED_MORE,
    Block,
    Dropped,
    Line,
    LineFramer,
    Oversize,
    Resynced,
    TrailerStatus,
)
from dissectors.nats import fastpath, parser
from dissectors.nats.parser import NatsAnomaly
from dissectors.nats.table import DEFAULT_HEADER_CAP
from dissectors.options import read_payload_cap, session_option
from dissectors.redaction import redact_connect_json
from dissectors.sessions import FramedSession
from reassembly.provenance import Chunk

__all__ = [
    "DEFAULT_CARRY_MAX",
    "DEFAULT_MAX_CONTROL_LINE",
    "DEFAULT_MAX_SERVER_LINE",
    "MessageHook",
    "NatsSession",
]

MessageHook = Callable[[Record, bytes], list[Record]]

# nats-server's default max_control_line: the longest control line it accepts from a
# client (option `max_control_line`).
DEFAULT_MAX_CONTROL_LINE = 4096
# Server-to-client lines are not bounded by max_control_line (an INFO listing many
# connect_urls can exceed 4 KiB); this bound only caps memory (option `max_server_line`).
DEFAULT_MAX_SERVER_LINE = 65536
# Largest payload kept whole for ``on_message``: a memory bound (one payload per direction
# is held at a time), far above NATS's default max_payload of 1 MiB (option `carry_max`).
DEFAULT_CARRY_MAX = 64 * 1024 * 1024

_CRLF = b"\r\n"
_LENIENT = (b"\n",)
_ALLOWED = {Direction.C2S: parser.C2S_OPS, Direction.S2C: parser.S2C_OPS}
_TABLE = "nats"
# the scan and its answers, bound once (``fastpath``; unused when it is not built)
_scan_with: Any = getattr(fastpath, "scan_with", None)
_NEED_MORE: int = getattr(fastpath, "NEED_MORE", 0)
_REFUSE: int = getattr(fastpath, "REFUSE", 1)
_NEED_VERDICT: int = getattr(fastpath, "NEED_VERDICT", 2)
_STOPS = (_NEED_MORE, _REFUSE)  # answers that end a ``_scan``


def _option(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    """Every NATS option is an int >= 0 or None (``dissectors.options`` policy)."""
    return session_option(options, name, default, none_ok=True, owner="nats")


def _read_options(options: Mapping[str, Any]) -> tuple[
        int | None, int | None, bool, int | None, int, int, Any]:
    """``(payload_cap, carry_max, keep_secrets, header_cap, max_control_line,
    max_server_line, memory_budget or None)``, checked.  Read anew for every session:
    a caller may change its options between sessions, and a module-level memo would keep
    the last run's options (its memory budget, and through it every holder) alive."""
    payload_cap = read_payload_cap(options, "nats")
    carry_max = _option(options, "carry_max", DEFAULT_CARRY_MAX)
    keep_secrets = options.get("keep_secrets", False) is True
    header_cap = _option(options, "header_cap", DEFAULT_HEADER_CAP)
    c2s_line = _option(options, "max_control_line", DEFAULT_MAX_CONTROL_LINE)
    s2c_line = _option(options, "max_server_line", DEFAULT_MAX_SERVER_LINE)
    if not c2s_line or not s2c_line:
        raise ValueError("nats options max_control_line/max_server_line must be >= 1")
    budget = options.get("memory_budget")
    if not callable(getattr(budget, "hold", None)):
        budget = None
    return payload_cap, carry_max, keep_secrets, header_cap, c2s_line, s2c_line, budget


class _Direction:
    """State of one direction: its framer and the op waiting for its payload."""

    __slots__ = ("framer", "values", "line", "stage", "hdr_len", "pay_len", "problems",
                 "wait_at", "wait_for")

    def __init__(self, framer: LineFramer) -> None:
        self.framer = framer
        self.values: dict[str, Any] | None = None  # row of the op waiting for its bytes
        self.line: Line | None = None
        self.stage = 0  # 1: reading headers, 2: reading payload
        self.hdr_len = -1
        self.pay_len = -1
        self.problems: tuple[parser.Problem, ...] = ()
        # the compiled scanner stopped at stream offset ``wait_at`` for an operation that
        # is complete only once the buffered bytes reach ``wait_for`` (0: not waiting)
        self.wait_at = -1
        self.wait_for = 0


class NatsSession(FramedSession, CarrierSession, ColumnarSession):
    """One NATS client connection (both directions)."""

    redact_details = True
    # the compiled scan reads a feed straight from its bytes when it can (``feed_framer``)
    direct_feed: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = options or {}
        (self.payload_cap, self.carry_max, self.keep_secrets, self.header_cap, c2s_line,
         s2c_line, budget) = _read_options(options)
        self.on_message: MessageHook | None = None
        c2s = LineFramer(max_line_bytes=c2s_line, resync=parser.resync)
        s2c = LineFramer(max_line_bytes=s2c_line, resync=parser.resync)
        super().__init__(c2s, s2c)
        self._dirs = (_Direction(c2s), _Direction(s2c))
        # directions whose start was not captured (option ``joined``, from detection):
        # read from the first line the resync rule finds, not from byte 0 (a partial
        # line there is no op, and no ``nats.unknown_op``); True until that resync
        self._joined = [False, False]
        for d in options.get("joined") or ():
            self._joined[d] = True
            self.framers[d].start_resync()
        if budget is not None:  # a line being buffered draws from it
            c2s.budget = s2c.budget = budget
        self.max_payload: int | None = None  # from the server's last INFO
        self._wrong_dir: set[tuple[int, str]] = set()
        self.ops = [0, 0]  # rows emitted per direction
        self._carrier: CarrierScope | None = None  # set by carry()
        # compiled fast path (fastpath.py), switched on by columnar(): rows go to
        # fast_rows (None: parsed and counted only) and ColumnBatch records to the output
        self.fast_on = False
        self.fast_rows: Any = None
        self._fast_first: bytes | None = None
        self._fast_verdicts: dict[str, bool] | None = None
        self._fast_verdict: Callable[[str], bool] | None = None
        self._fast_probe: Callable[[bytes], bool] | None = None
        # carry()'s hook, and whether the scanner takes the PUB/MSG it offers itself
        self._carry_hook: MessageHook | None = None
        self._fast_carry = False
        # what the scan needs to append ColumnBatch records and offer carried messages
        # itself (``fastpath``): per direction (ColumnBatch, table, direction, rows,
        # format), set by enable_fast; (offer, fastpath.MAKE_CARRIED, flow_id, carry_max), by carry
        self._batch: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())
        self._offer: tuple[Any, ...] | None = None
        # per direction, ``_scan_config``'s answer (None: to be made again)
        self._scan_configs: list[tuple[Any, tuple[Any, ...], int] | None] = [None, None]

    def carry(self, scope: CarrierScope) -> None:
        """``CarrierSession``: offer each whole PUB/HPUB/MSG/HMSG payload to ``scope`` as a
        ``CarriedMessage`` built from this session's row (through ``on_message``)."""
        self._carrier = scope
        flow_id = scope.flow_id
        offer = scope.offer

        def on_message(row: Record, payload: bytes) -> list[Record]:
            v = row.values
            return offer(CarriedMessage(
                _TABLE, v["op"], v.get("subject") or "", v.get("reply_to"), v.get("sid"),
                v.get("headers"), payload, row.direction, flow_id, row.offset_start,
                row.offset_end, row.ts_first_ns, row.ts_last_ns, row.frame_first,
                row.frame_last,
            ))

        self.on_message = self._carry_hook = on_message
        cmax = self.carry_max
        self._offer = (offer, fastpath.MAKE_CARRIED, flow_id, -1 if cmax is None else cmax)
        self._scan_configs = [None, None]

    def columnar(self, keep_rows: bool) -> None:
        """``ColumnarSession``: the compiled fast path, when it is built and not turned
        off (``fastpath.enabled``), told what the carrier scope needs (``carry``)."""
        if not fastpath.enabled():
            return
        rows = fastpath.new_columns() if keep_rows else None
        sc = self._carrier
        if sc is None:
            self.enable_fast(rows)
        else:
            self.enable_fast(rows, sc.first_bytes, sc.verdicts, sc.bound, sc.probed)

    def enable_fast(self, rows: object, first_bytes: bytes | None = None,
                    verdicts: dict[str, bool] | None = None,
                    verdict: Callable[[str], bool] | None = None,
                    probe: Callable[[bytes], bool] | None = None) -> None:
        """Use the compiled fast path (``fastpath``).  ``rows``: a ``Columns`` buffer the
        rows go to, or None to parse and count only.  With payload dissectors hooked
        (``on_message``): ``verdicts`` caches ``verdict(subject)`` ("a binding covers
        this subject"), ``first_bytes`` flags the payload first bytes for which
        ``probe(payload)`` ("a probe claims it") must be asked."""
        self.fast_on = True
        self.fast_rows = rows
        self._fast_first = first_bytes
        self._fast_verdicts = verdicts
        self._fast_verdict = verdict
        self._fast_probe = probe
        self._fast_carry = fastpath.carry_enabled()
        self._batch = ((ColumnBatch, _TABLE, Direction.C2S, rows, fastpath.FORMAT),
                       (ColumnBatch, _TABLE, Direction.S2C, rows, fastpath.FORMAT))
        self._scan_configs = [None, None]

    # ---- driver hooks --------------------------------------------------------------

    def feed_framer(self, direction: Direction, data: bytes, span: Span,
                    chunks: Sequence[Chunk] | None, out: list[Record]) -> None:
        """The compiled scan reads a feed straight from ``data`` when the framer holds
        nothing and waits at a line start (``LineFramer.direct_ready``): on a STAN or
        Liftbridge capture, nearly every TCP segment, one whole operation.  Its input
        is then what the framer's buffer would have shown it (the same bytes at
        position 0, the same offset and provenance records), so its rows, offers and
        stops are the same; a feed it reads whole leaves the framer as ``feed`` and
        ``consumed`` would (``LineFramer.took``), and for any other the bytes go into
        the framer after all, the ones taken marked consumed, and the turn goes on as
        ``drain_fed``'s would after that scan.  ``direct_feed`` False: always
        ``FramedSession.feed_framer`` (the differential tests compare both)."""
        st = self._dirs[direction]
        fr = st.framer
        if not (self.fast_on and self.direct_feed and st.values is None and not st.wait_for
                and data and fr.direct_ready(span.offset)):
            fr.feed(data, span, chunks)
            self.drain_fed(direction, out)
            return
        base = span.offset
        end = len(data)
        table = chunks if chunks is not None else ((
            base + end, span.ts_first_ns, span.ts_last_ns, span.frame_first, span.frame_last),)
        got = self._scan_configs[direction]
        if got is None or got[0] is not self.on_message:
            got = self._scan_config(direction)
        first = _scan_with(got[1], data, 0, base, table, False, got[2], out)
        if first[0] == _NEED_MORE and first[1] == end:  # the usual: every byte taken
            self.ops[direction] += first[2]
            st.wait_at = base + end
            fr.took(data, table[-1])
            self.account(direction)
            return
        status = self._scan(direction, st, out, (data, base, table, first))
        taken = st.wait_at - base
        fr.feed(data, span, chunks)
        if taken:
            fr.consumed(taken)
        if status == _NEED_MORE:
            fr.hold_budget()  # stopped for more bytes: what it holds draws from the budget
        else:  # REFUSE: the reference's turn, then on as drain_fed
            self._take_turns(direction, st, out, False)
        self.account(direction)

    def drain_fed(self, direction: Direction, out: list[Record]) -> None:
        if not self.fast_on:
            self.drain(direction, out)
            return
        st = self._dirs[direction]
        fr = st.framer
        if st.wait_for and self._still_short(st, fr):
            # a large payload arriving in many segments: scanning again before all of
            # it is in would stop at the same operation with the same answer
            fr.hold_budget()
        else:
            self._take_turns(direction, st, out, True)
        self.account(direction)

    def _take_turns(self, direction: Direction, st: _Direction, out: list[Record],
                    scan: bool) -> None:
        """The compiled scanner (runs of ordinary operations) and the reference (one
        operation the scanner refused, then back), in turn, the scanner first when
        ``scan``, until the bytes fed are used."""
        fr = st.framer
        while True:
            if scan and st.values is None and fr.at_line and \
                    self._scan(direction, st, out) == _NEED_MORE:
                fr.hold_budget()  # stopped for more bytes: what it holds draws from the budget
                return
            scan = True
            if not self._reference_step(direction, st, out):
                return

    @staticmethod
    def _still_short(st: _Direction, fr: LineFramer) -> bool:
        """The scanner waits for the operation at the read position (nothing read or
        handed to the reference since), and the bytes it needs are not all in yet."""
        end = fr.next_offset
        return (end is not None and end < st.wait_for and fr.offset == st.wait_at
                and st.values is None and fr.at_line)

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        st = self._dirs[direction]
        t = type(ev)
        if t is Line:
            self._on_line(direction, st, ev, out)
        elif t is Block:
            self._on_block(direction, st, ev, out)
        elif t is Oversize:
            self._on_oversize(direction, st, ev, out)
        elif t is Resynced:
            self._on_resynced(direction, ev, out)
        elif t is Dropped:
            self._on_dropped(direction, st, ev, out, self.closing)

    # ---- compiled fast path --------------------------------------------------------

    @staticmethod
    def _between_ops(st: _Direction) -> bool:
        fr = st.framer
        return st.values is None and fr.at_line

    def _reference_step(self, direction: Direction, st: _Direction, out: list[Record]) -> bool:
        """Reference events until between operations again; False once it needs bytes."""
        nxt = st.framer.next_event
        handle = self.handle
        while True:
            ev = nxt()
            if ev is NEED_MORE:
                return False
            handle(direction, ev, out)
            if self._between_ops(st):
                return True

    def _scan_config(self, direction: Direction) -> tuple[Any, tuple[Any, ...], int]:
        """``(on_message, config, carry)``: the arguments of ``fastpath.scan_with`` that
        stay the same between calls while ``on_message`` does (``_scan_configs`` is
        emptied when anything else in them changes)."""
        hook = self.on_message
        verdicts = self._fast_verdicts if hook is not None else None
        first = self._fast_first if verdicts is not None else None
        # carried PUB/MSG stay on the fast path only behind carry()'s own hook, which the
        # scanner offers them to itself (``fastpath``: the scan's ``records``)
        carry = 1 if self._fast_carry and hook is not None and hook is self._carry_hook else 0
        mp, cap, hcap = self.max_payload, self.payload_cap, self.header_cap
        config = (self.fast_rows, direction == Direction.C2S,
                  self._dirs[direction].framer.max_line_bytes,
                  -1 if mp is None else mp, -1 if cap is None else cap,
                  -1 if hcap is None else hcap, first, verdicts, self._batch[direction],
                  self._offer)
        got = self._scan_configs[direction] = (hook, config, carry)
        return got

    def _scan(self, direction: Direction, st: _Direction, out: list[Record],
              direct: tuple[bytes, int, Sequence[Chunk], Any] | None = None) -> int:
        """Scan the framer's unresolved bytes (``scan_view``; what it takes is
        ``consumed`` as it goes), or, ``direct``, ``(data, offset, chunks, first)``: a
        feed's bytes the framer has not seen, ``first`` the answer of the scan of them
        from their start (``feed_framer``, which settles the framer after).  Returns the
        stop, NEED_MORE or REFUSE; ``st.wait_at`` is then the stream offset it stopped
        at."""
        fr = st.framer
        got = self._scan_configs[direction]
        if got is None or got[0] is not self.on_message:
            got = self._scan_config(direction)
        _, config, carry = got
        cleared = False
        status: int
        new_pos: int
        n: int
        buf: bytes | bytearray
        first = None
        if direct is not None:
            buf, base, chunks, first = direct
            pos = 0
        while True:
            if direct is None:
                buf, pos, base, chunks = fr.scan_view()
            if first is not None:
                status, new_pos, n, subject = first
                first = None
            else:
                # (the scan appends the rows' ColumnBatch records to ``out`` itself, a
                # carried message's records the children of the batch ending with it)
                status, new_pos, n, subject = _scan_with(config, buf, pos, base, chunks,
                                                         cleared, carry, out)
            if n:
                if direct is None:
                    fr.consumed(new_pos - pos)
                else:
                    pos = new_pos
                self.ops[direction] += n
                carry = carry and 1  # (a probe-claimed first operation was taken)
            if status in _STOPS:
                # NEED_MORE for a payload: where the bytes must reach (None: its line is
                # not all in); REFUSE: None
                st.wait_at = base + new_pos
                st.wait_for = subject or 0
                return status
            cleared = False
            if status == _NEED_VERDICT:
                verdicts = config[7]
                if len(verdicts) >= MAX_VERDICTS:
                    verdicts.clear()  # (see MAX_VERDICTS)
                verdicts[subject] = self._fast_verdict(subject)  # type: ignore[misc]
            elif self._fast_probe(subject):  # type: ignore[misc]  # (NEED_PROBE)
                if not carry:
                    st.wait_at = base + new_pos
                    st.wait_for = 0
                    return _REFUSE  # a payload dissector's: the reference offers it
                carry = 2  # scan it as carried
            else:
                cleared = True

    def _on_line(self, direction: Direction, st: _Direction, ev: Line, out: list[Record]) -> None:
        line = ev.data
        if line[:2] == b"\x16\x03":
            st.framer.reject(ev.end - ev.start)
            self._tls(direction, st, ev, out)
            return
        op, values, hdr, total, problems = parser.parse_line(line)
        if op == "CONNECT" and not self.keep_secrets and "json_raw" in values:
            values["json_raw"] = redact_connect_json(values["json_raw"])
        if op is None:
            st.framer.reject(ev.end - ev.start)
            p = problems[0]
            self.anomaly(out, p.kind, p.detail, direction, ev)
            st.framer.start_resync()
            return
        if op not in _ALLOWED[direction]:
            key = (int(direction), op)
            if key not in self._wrong_dir:
                self._wrong_dir.add(key)
                self.anomaly(
                    out, NatsAnomaly.WRONG_DIRECTION,
                    f"{op} sent {direction.short}; NATS sends it the other way (reported once "
                    "per op and direction; client/server roles may be swapped)",
                    direction, ev,
                )
        if total < 0:
            values["incomplete"] = False
            out.append(Record(_TABLE, direction, ev.start, ev.end, ev.ts_first_ns, ev.ts_last_ns,
                              ev.frame_first, ev.frame_last, values))
            self.ops[direction] += 1
            for p in problems:
                self.anomaly(out, p.kind, p.detail, direction, ev)
            if op == "INFO" and direction == Direction.S2C:
                mp = values.get("max_payload")
                if mp is not None and mp != self.max_payload:
                    if self.fast_on:
                        # a client operation the fast path holds back (not all its bytes
                        # are in) was checked against the old limit by the reference,
                        # which reads lines as they come: let it read that line now
                        self._dirs[Direction.C2S].wait_for = 0
                        self.drain(Direction.C2S, out)
                    self.max_payload = mp
                    self._scan_configs = [None, None]  # (the scanner checks PUBs against it)
            return
        # an op with a payload: wait for its bytes
        if op == "PUB" or op == "HPUB":
            mp = self.max_payload
            values["max_payload_exceeded"] = None if mp is None else total > mp
        st.values = values
        st.line = ev
        st.problems = problems
        if hdr >= 0:
            st.stage = 1
            st.hdr_len = hdr
            st.pay_len = total - hdr
            st.framer.read_exact(hdr, keep_bytes=self.header_cap)
        else:
            st.stage = 2
            st.hdr_len = -1
            st.pay_len = total
            st.framer.read_exact(total, keep_bytes=self._keep(total), sha256=True,
                                 trailer=_CRLF, lenient_trailers=_LENIENT)

    def _on_block(self, direction: Direction, st: _Direction, ev: Block, out: list[Record]) -> None:
        values = st.values
        line = st.line
        if values is None or line is None:  # pragma: no cover - framer/session out of step
            return
        if st.stage == 1:
            self._headers(values, ev.data, ev.nbytes, st)
            st.stage = 2
            st.framer.read_exact(st.pay_len, keep_bytes=self._keep(st.pay_len), sha256=True,
                                 trailer=_CRLF, lenient_trailers=_LENIENT)
            return
        data = ev.data
        cap = self.payload_cap
        values["payload_len"] = ev.nbytes
        values["payload"] = data if cap is None or len(data) <= cap else data[:cap]
        values["payload_truncated"] = len(values["payload"]) < ev.nbytes
        values["payload_sha256"] = ev.sha256
        values["incomplete"] = False
        if st.hdr_len >= 0:
            values["header_len"] = st.hdr_len
        row = Record(_TABLE, direction, line.start, ev.end, line.ts_first_ns, ev.ts_last_ns,
                     line.frame_first, ev.frame_last, values)
        out.append(row)
        hook = self.on_message
        if hook is not None and len(data) == ev.nbytes:
            row.children.extend(hook(row, data))
        self.ops[direction] += 1
        st.values = st.line = None
        if st.problems or values.get("max_payload_exceeded"):
            self._op_problems(direction, st, values, line, out)
        status = ev.trailer
        if status is TrailerStatus.OK:
            return
        op = values["op"]
        if status is TrailerStatus.LENIENT:
            self.anomaly(out, NatsAnomaly.BAD_TRAILER,
                         f"{op} payload ends with a bare LF, not CRLF (accepted)", direction, ev)
        elif status is TrailerStatus.MISSING:
            self.anomaly(out, NatsAnomaly.MISSING_TRAILER,
                         f"{op} payload complete but its CRLF was not captured (gap or end of "
                         "stream)", direction, ev)
        else:
            self.anomaly(out, NatsAnomaly.BAD_TRAILER,
                         f"{op} payload of {ev.nbytes} bytes is followed by "
                         f"{parser.show(ev.trailer_found)!r}, not CRLF; the declared size may "
                         "be wrong; resynchronising", direction, ev)
            st.framer.start_resync()

    def _keep(self, nbytes: int) -> int | None:
        """Payload bytes to keep: the column's cap, or all of it for ``on_message``."""
        cap = self.payload_cap
        if self.on_message is not None and (self.carry_max is None or nbytes <= self.carry_max):
            return None
        return cap

    def _headers(self, values: dict[str, Any], block: bytes, nbytes: int, st: _Direction) -> None:
        values["header_len"] = nbytes
        values["headers_raw"] = block
        headers, code, desc, problems = parser.parse_headers(block)
        if len(block) < nbytes:
            problems = (*problems, parser.Problem(
                NatsAnomaly.BAD_HEADERS,
                f"header block of {nbytes} bytes exceeds header_cap; only the first "
                f"{len(block)} bytes were kept and parsed"))
        values["headers"] = headers
        values["status_code"] = code
        values["status_description"] = desc
        if problems:
            st.problems = (*st.problems, *problems)

    def _op_problems(self, direction: Direction, st: _Direction, values: dict[str, Any],
                     line: Line, out: list[Record]) -> None:
        for p in st.problems:
            self.anomaly(out, p.kind, p.detail, direction, line)
        st.problems = ()
        if values.get("max_payload_exceeded"):
            total = values["payload_len"] + (values.get("header_len") or 0)
            self.anomaly(
                out, NatsAnomaly.MAX_PAYLOAD_EXCEEDED,
                f"{values['op']} to {values['subject']!r} declares {total} bytes, more than the "
                f"server's max_payload {self.max_payload}", direction, line,
            )

    def _on_oversize(self, direction: Direction, st: _Direction, ev: Oversize,
                     out: list[Record]) -> None:
        if ev.head[:2] == b"\x16\x03":
            self._tls(direction, st, ev, out)
            return
        self.anomaly(out, NatsAnomaly.LINE_TOO_LONG,
                     f"control line of {ev.nbytes} bytes exceeds the limit of "
                     f"{st.framer.max_line_bytes}; skipped: {parser.show(ev.head, 64)}",
                     direction, ev)
        st.framer.start_resync()

    def _on_resynced(self, direction: Direction, ev: Resynced, out: list[Record]) -> None:
        how = "until the next NATS operation" if ev.found else "(cut by a gap or the end)"
        if self._joined[direction]:
            self._joined[direction] = False
            how += ": the start of this direction was not captured (joined mid-stream)"
        self.anomaly(out, NatsAnomaly.RESYNC,
                     f"skipped {ev.end - ev.start} bytes {how}", direction, ev)

    def _tls(self, direction: Direction, st: _Direction, ev: Line | Oversize,
             out: list[Record]) -> None:
        self.anomaly(out, NatsAnomaly.TLS,
                     f"TLS handshake at offset {ev.start}: the connection was upgraded to TLS; "
                     "the rest of this direction is encrypted and left undecoded",
                     direction, ev)
        st.framer.abandon()

    def _on_dropped(self, direction: Direction, st: _Direction, ev: Dropped, out: list[Record],
                    at_close: bool) -> None:
        where = "the end of the stream" if at_close else "a gap"
        if ev.kind == "block" and st.values is not None and st.line is not None:
            values = st.values
            line = st.line
            values["payload_len"] = st.pay_len
            values["incomplete"] = True
            if st.stage == 1 or st.hdr_len >= 0:
                values["header_len"] = st.hdr_len
            got = ev.end > ev.start
            out.append(Record(_TABLE, direction, line.start, ev.end if got else line.end,
                              line.ts_first_ns, ev.ts_last_ns if got else line.ts_last_ns,
                              line.frame_first, ev.frame_last if got else line.frame_last,
                              values))
            self.ops[direction] += 1
            st.values = st.line = None
            self._op_problems(direction, st, values, line, out)
            part = "headers" if st.stage == 1 else "payload"
            after = (f"parsing resumes at offset {ev.resume_at}" if ev.resume_at is not None
                     else "resynchronising")
            if at_close:
                after = "nothing follows"
            kind = NatsAnomaly.EOF_IN_PAYLOAD if at_close else NatsAnomaly.GAP_IN_PAYLOAD
            self.anomaly(
                out, kind,
                f"{values['op']} {values.get('subject')!r}: {where} at offset {ev.end} cut its "
                f"{part} ({ev.end - ev.start} of {st.hdr_len if st.stage == 1 else st.pay_len} "
                f"bytes received, operation declared to end at {ev.declared_end}); row emitted "
                f"without payload; {after}",
                direction, ev, start=line.start, end=ev.declared_end,
            )
            st.stage = 0
            return
        if ev.kind == "line":
            kind = NatsAnomaly.EOF_IN_LINE if at_close else NatsAnomaly.GAP_IN_LINE
            self.anomaly(out, kind,
                         f"partial control line of {ev.end - ev.start} bytes dropped at {where}",
                         direction, ev)
            return
        if ev.kind == "long_line":
            self.anomaly(out, NatsAnomaly.LINE_TOO_LONG,
                         f"control line of at least {ev.end - ev.start} bytes exceeds the limit "
                         f"of {st.framer.max_line_bytes}, cut by {where}", direction, ev)
            return
        self.anomaly(out, NatsAnomaly.DROPPED,  # pragma: no cover - no other kinds from LineFramer
                     f"partial {ev.kind} dropped at {where}", direction, ev)

"""The TLS layer: TCP stream events in, decrypted stream events out.

Strategy (sans-IO; one object per capture, one ``_Conn`` per TLS flow):

* **Detection.**  A TCP direction is *plain* until TLS shows up in it.  The client
  side turns TLS when a chunk starts with a record header carrying a ClientHello
  (``16 03 0x LL LL 01``): at offset 0 (TLS first: HTTPS, NATS ``handshake_first``,
  Pulsar on 6651), or later within the first ``STARTTLS_WINDOW_BYTES`` of the
  direction (NATS's INFO + ``tls_required``, SMTP/IRC STARTTLS).  Once a ClientHello
  was seen, the server side turns TLS at its ServerHello record, wherever it starts in
  a chunk; the plaintext before it (NATS's INFO line) is passed on as it is.  A flow
  captured mid-stream whose first bytes are a TLS application-data record is reported
  as TLS that cannot be decrypted.  Ports are never looked at.
* **The decision.**  From the ClientHello to the ServerHello the TLS bytes are *held*
  (at most ``Limits.tls_max_held_bytes`` per direction) while the records are read.
  With the ServerHello the version and cipher suite are known, and the key log is
  asked for the connection's secrets (TLS 1.3: handshake and traffic secrets; TLS 1.2:
  the ``CLIENT_RANDOM`` master secret).  If they are there and the suite is an AEAD one
  we decrypt, the connection is *decrypted* and its records are consumed.  Otherwise
  it is *transparent*: the held bytes and everything after are passed on unchanged
  (so dissectors see the TCP stream as before, and NATS still says ``nats.tls``), the
  records are still read to count them and read plaintext alerts, and one
  ``tls.undecryptable`` anomaly names the client random, SNI and ALPN to look for.
* **Decryption.**  TLS 1.3: every encrypted record is opened with the keys of the
  current epoch (early data, handshake, application; key updates followed) or, failing
  that, of a later one with sequence number 0 — so a missing handshake secret, a
  rejected 0-RTT or an unreadable Finished costs nothing.  TLS 1.2: keys from the key
  block take over after each side's ChangeCipherSpec.  Application data becomes
  ``StreamData`` in the *plaintext offset space* of the direction: plaintext bytes that
  came before TLS keep their TCP offsets, decrypted bytes continue from there; each
  chunk is stamped with the time/frame of the packets carrying the record's first and
  last byte.  Handshake, alert and ChangeCipherSpec records produce no stream bytes.
* **Loss.**  A TCP gap inside a record whose header was read costs that record (its
  plaintext length is known up to TLS 1.3 padding); a gap across record boundaries
  loses the record framing, which is found again by the first ``17 03 03`` header
  whose record opens with one of the next ``MAX_RESYNC_RECORDS`` sequence numbers.
  The plaintext lost becomes one ``StreamGap`` (size: the plaintext of the records
  known to be lost, else the TCP bytes lost) before the next decrypted byte.  A record
  that does not authenticate is a gap too (``tls.auth_failed`` once per direction).

Byte accounting: for a decrypted connection ``FlowInfo.stream_bytes``/``gap_bytes``
count the plaintext stream (what dissectors see); the TCP-level counts are in the
``TlsConnection`` event (``record_bytes``, ``lost_bytes``).  Transparent connections
keep the TCP counts.

Imports: the engine puts this layer in every run, and most captures carry no TLS, so
the handshake parsers (``reassembly.tlscommon``) and record protection
(``reassembly.tls.protection``, ``cryptography``) are imported by the methods of a TLS
connection, not with this module; detection needs only ``reassembly.tls.records``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from reassembly.events import (
    Anomaly,
    CaptureEvent,
    Direction,
    Event,
    FlowInfo,
    LayerEvent,
    StreamClose,
    StreamData,
    StreamDone,
    StreamGap,
    TlsConnection,
)
from reassembly.limits import Limits
from reassembly.passing import Passing
from reassembly.provenance import CoalescedData, Extent, ProvenanceBuffer, Span, SpanLike
from reassembly.quic.keylog import KeyLog, Labels
from reassembly.tls.records import (
    HEADER_BYTES,
    MAX_RECORD_BYTES,
    ContentType,
    alert_text,
    is_plausible_header,
    suite_name,
    version_name,
)

if TYPE_CHECKING:
    # the handshake parsers and record protection (``cryptography``) are imported where a
    # TLS connection needs them (see "Imports" above)
    from reassembly.tls.protection import Tls12Keys, Tls13Keys
    from reassembly.tlscommon import ClientHello, ServerHello

__all__ = ["MAX_RESYNC_RECORDS", "STARTTLS_WINDOW_BYTES", "TlsLayer"]

# A plaintext client direction is watched for a ClientHello this far into the stream:
# STARTTLS-style upgrades happen in the first exchange; past it a record-like byte
# pattern inside application data is not taken for a handshake.
STARTTLS_WINDOW_BYTES = 64 * 1024
# After record framing was lost, sequence numbers tried past the last one known (so up
# to this many whole records may be lost in one gap and decryption still picks up).
MAX_RESYNC_RECORDS = 64
# Bytes of a lost-sync direction scanned for the next record before they are dropped.
RESYNC_WINDOW_BYTES = 4 * MAX_RECORD_BYTES
# Alerts remembered per connection (a peer could send thousands).
MAX_ALERTS = 16

_CLIENT, _SERVER = Direction.C2S, Direction.S2C
_PLAIN, _TLS, _OPAQUE = 0, 1, 2  # side modes (see the module docstring)


def _client_hello_at(data: bytes | bytearray, pos: int) -> bool | None:
    """Does a ClientHello record start at ``pos``?  None: too few bytes to tell."""
    n = len(data) - pos
    if n <= 0:
        return None
    head = (0x16, 0x03)
    for i in range(min(n, 2)):
        if data[pos + i] != head[i]:
            return False
    if n < 9:
        return None
    if data[pos + 2] > 4:
        return False
    rlen = (data[pos + 3] << 8) | data[pos + 4]
    hlen = (data[pos + 6] << 16) | (data[pos + 7] << 8) | data[pos + 8]
    return data[pos + 5] == 1 and 40 <= rlen <= MAX_RECORD_BYTES and 38 <= hlen < 1 << 17


def _server_hello_at(data: bytes | bytearray, pos: int) -> bool:
    if len(data) - pos < 9 or data[pos] != 0x16 or data[pos + 1] != 0x03 or data[pos + 2] > 4:
        return False
    rlen = (data[pos + 3] << 8) | data[pos + 4]
    return data[pos + 5] == 2 and 38 <= rlen <= MAX_RECORD_BYTES


def _find_server_hello(data: bytes) -> int:
    pos = data.find(b"\x16\x03")
    while pos >= 0:
        if _server_hello_at(data, pos):
            return pos
        pos = data.find(b"\x16\x03", pos + 1)
    return -1


class _Side:
    """One direction of a TLS flow."""

    __slots__ = (
        "direction", "mode", "start", "tcp_end", "out_off", "held", "held_bytes",
        "buf", "skip_to", "lost_sync", "observing", "hs",
        "seq", "keys12", "ccs", "epochs", "ep", "app_ep", "pending_gap", "gap_ts",
        "gap_frame", "gap_reason", "records", "record_bytes", "app_bytes",
        "undecrypted", "lost_bytes", "key_updates", "auth_reported", "probe",
        "last_ts", "last_frame",
    )

    def __init__(self, direction: Direction, max_handshake: int) -> None:
        self.direction = direction
        self.mode = _PLAIN
        self.start: int | None = None  # TCP offset where TLS began
        self.tcp_end: int | None = None  # TCP offset after the last byte seen
        self.out_off: int | None = None  # next offset in the plaintext space
        self.held: list[Event] = []  # raw events held until the decision
        self.held_bytes = 0
        # TLS bytes not yet read as records, in TCP offsets, with their packets
        self.buf = ProvenanceBuffer(0)
        self.skip_to: int | None = None  # TCP offset up to which bytes are dropped
        self.lost_sync = False
        self.observing = True  # records are read (False: framing lost while transparent)
        from reassembly.tlscommon import HandshakeReader

        self.hs = HandshakeReader(max_handshake)
        self.seq = 0
        self.keys12: Tls12Keys | None = None
        self.ccs = False  # TLS 1.2: ChangeCipherSpec seen, records are protected
        self.epochs: list[tuple[str, Tls13Keys]] = []
        self.ep = -1
        self.app_ep = -1
        self.pending_gap = 0
        self.gap_ts = 0
        self.gap_frame = 0
        self.gap_reason = ""
        self.records = 0
        self.record_bytes = 0
        self.app_bytes = 0
        self.undecrypted = 0
        self.lost_bytes = 0
        self.key_updates = 0
        self.auth_reported = False
        self.probe: list[StreamData] = []  # a short chunk that may begin a ClientHello
        self.last_ts = 0
        self.last_frame = 0


class _Conn:
    """A TCP flow on which TLS was seen."""

    __slots__ = (
        "flow", "sides", "ch", "sh", "hello_retry", "version", "suite", "decided",
        "decrypt", "reason", "alpn_selected", "alerts", "first_ts", "first_frame",
        "reported", "layer",
    )

    def __init__(self, flow: FlowInfo, max_handshake: int, layer: TlsLayer | None = None
                 ) -> None:
        self.flow = flow
        self.layer = layer  # for the memory budget: giving up what this connection holds
        self.sides = (_Side(_CLIENT, max_handshake), _Side(_SERVER, max_handshake))
        self.ch: ClientHello | None = None
        self.sh: ServerHello | None = None
        self.hello_retry = False
        self.version: int | None = None
        self.suite: int | None = None
        self.decided = False
        self.decrypt = False
        self.reason: str | None = None
        self.alpn_selected: str | None = None
        self.alerts: list[str] = []
        self.first_ts = 0
        self.first_frame = 0
        self.reported: set[str] = set()

    def release_memory(self, need: int) -> None:
        if self.layer is not None:
            self.layer.release_memory(self)


class _FlowWatch:
    """What a plain flow needs to tell whether TLS starts on it."""

    __slots__ = ("skew", "started")

    def __init__(self) -> None:
        # per direction: its stream offset less the bytes looked at, i.e. where its first
        # chunk began plus the gaps since; the bytes looked at before a chunk at ``offset``
        # are ``offset - skew``.  Why not a count: a run that skips the layer
        # (``reassembly.passing``) is never looked at, yet counts.
        self.skew = [0, 0]
        self.started = [False, False]  # a first chunk was looked at


class TlsLayer:
    """TCP stream events → TLS-decrypted stream events (see the module docstring)."""

    def __init__(
        self, limits: Limits, keylog: KeyLog | None = None,
        emit: Callable[[Event | LayerEvent | CoalescedData], None] | None = None,
        passing: Passing | None = None,
    ) -> None:
        """``passing``: the runs of flow directions this layer passes on as they are may
        skip it (``reassembly.passing``)."""
        self.limits = limits
        self._passing = passing
        self._member = passing.join() if passing is not None else -1
        self.keylog = keylog if keylog is not None else KeyLog()
        self._out: list[CaptureEvent | CoalescedData] = []
        self._emit = emit or self._out.append
        self._conns: dict[int, _Conn] = {}
        self._reading: set[int] = set()  # id() of sides inside _read_records
        self._watch: dict[int, _FlowWatch] = {}
        self.counters = {"connections": 0, "decrypted": 0, "records": 0}

    # -- event stream -------------------------------------------------------------------

    def process(self, events: Iterable[CaptureEvent | CoalescedData]
                ) -> Iterator[CaptureEvent | CoalescedData]:
        """Wrap an event stream: TLS flows' stream events are replaced by this layer's."""
        out = self._out
        for ev in events:
            t = type(ev)
            if t is StreamData or t is StreamGap:
                if ev.stream_id is None:  # type: ignore[union-attr]
                    self.stream(ev)  # type: ignore[arg-type]
                else:
                    out.append(ev)
            elif t is CoalescedData:
                self.coalesced(ev)  # type: ignore[arg-type]
            elif t is StreamClose:
                self.close(ev)  # type: ignore[arg-type]
            elif t is StreamDone:
                if ev.flow.flow_id not in self._conns:  # type: ignore[union-attr]
                    out.append(ev)  # (a TLS flow's inner session ends at its close)
            else:
                out.append(ev)
            if out:
                yield from out
                out.clear()

    def stream(self, ev: StreamData | StreamGap) -> None:
        """One TCP ``StreamData``/``StreamGap``."""
        fid = ev.flow.flow_id
        conn = self._conns.get(fid)
        if conn is None:
            if isinstance(ev, StreamGap):
                w = self._watch.get(fid)
                if w is not None and w.started[ev.direction]:
                    w.skew[ev.direction] += ev.nbytes
                    self._passes(fid, ev.direction, w, ev.offset + ev.nbytes)  # (it moved)
                self._emit(ev)
            elif not self._starts_tls(ev):
                self._emit(ev)
                if self._passing is not None:
                    self._passes(fid, ev.direction, self._watch[fid], ev.offset + len(ev.data))
            return
        side = conn.sides[ev.direction]
        if side.mode == _PLAIN:
            self._plain_side(conn, side, ev)
        else:
            self._tls_input(conn, side, ev)

    def coalesced(self, ev: CoalescedData) -> None:
        """A run of segments of one TCP direction (``CoalescedData``): passed on whole
        when its flow is not TLS and that direction can no longer turn TLS (its first
        chunk was looked at, and a client side is past ``STARTTLS_WINDOW_BYTES``: what
        ``_starts_tls`` would answer False to for every segment, with the same count of
        bytes seen); otherwise its segments one by one, as if they came so."""
        fid = ev.flow.flow_id
        d = ev.direction
        w = self._watch.get(fid)
        if (fid not in self._conns and w is not None and w.started[d]
                and (d != _CLIENT or ev.offset - w.skew[d] >= STARTTLS_WINDOW_BYTES)):
            self._emit(ev)
            if self._passing is not None:
                # so until the flow turns TLS (``_new_conn``): the bytes looked at are only
                # compared with the window, which this direction is past (or is not
                # asked of)
                self._passing.passes(self._member, fid, d)
            return
        for part in ev.split():
            self.stream(part)

    def _passes(self, fid: int, d: int, w: _FlowWatch, end: int) -> None:
        """Tell ``Passing`` that this plain direction, its first chunk looked at, passes
        on as it is until the flow turns TLS (``_new_conn``), a client direction that
        has not reached the window's end at stream offset ``end`` (where its next bytes
        begin) except a segment that begins as a handshake record within the window
        (what ``_starts_tls`` looks for)."""
        if self._passing is None:
            return
        before = w.skew[d] + STARTTLS_WINDOW_BYTES
        if d == _CLIENT and end < before:
            self._passing.passes(self._member, fid, d, (before, int(ContentType.HANDSHAKE)))
        else:
            self._passing.passes(self._member, fid, d)

    def close(self, ev: StreamClose) -> None:
        fid = ev.flow.flow_id
        self._watch.pop(fid, None)
        if self._passing is not None:
            self._passing.holds(self._member, fid)
        conn = self._conns.pop(fid, None)
        if conn is not None:
            self._finish(conn, ev.ts_ns)
            if self.limits.budget is not None:
                self.limits.budget.hold(conn, 0)
        self._emit(ev)

    # -- detection ------------------------------------------------------------------------

    def _starts_tls(self, ev: StreamData) -> bool:
        """Look at a chunk of a flow not known as TLS; True when it was taken."""
        flow = ev.flow
        d = ev.direction
        w = self._watch.get(flow.flow_id)
        if w is None:
            w = self._watch[flow.flow_id] = _FlowWatch()
        first = not w.started[d]
        if first:
            w.started[d] = True
            w.skew[d] = ev.offset
        seen = ev.offset - w.skew[d]
        data = ev.data
        if d == _CLIENT and seen < STARTTLS_WINDOW_BYTES and data[:1] == b"\x16":
            hit = _client_hello_at(data, 0)
            if hit is None:  # too short to tell: wait for more (tiny, rare)
                conn = self._new_conn(flow, ev)
                conn.sides[_CLIENT].probe.append(ev)
                return True
            if hit:
                conn = self._new_conn(flow, ev)
                self._begin_tls(conn, conn.sides[_CLIENT], ev)
                return True
        if first and data[:2] == b"\x16\x03" and d == _SERVER and _server_hello_at(data, 0):
            # the ClientHello was not captured: TLS that cannot be decrypted
            conn = self._new_conn(flow, ev)
            self._decide(conn, False, "no-client-hello", ev.ts_first_ns, ev.frame_first)
            self._begin_tls(conn, conn.sides[_SERVER], ev)
            return True
        if first and flow.mid_stream[d] and data[:3] == b"\x17\x03\x03" and is_plausible_header(
            data, 0
        ):
            conn = self._new_conn(flow, ev)
            self._decide(conn, False, "no-handshake", ev.ts_first_ns, ev.frame_first)
            self._begin_tls(conn, conn.sides[d], ev)
            return True
        return False

    def _new_conn(self, flow: FlowInfo, ev: StreamData) -> _Conn:
        conn = self._conns[flow.flow_id] = _Conn(flow, self.limits.tls_max_handshake_bytes,
                                                 self)
        conn.first_ts = ev.ts_first_ns
        conn.first_frame = ev.frame_first
        self.counters["connections"] += 1
        self._watch.pop(flow.flow_id, None)
        if self._passing is not None:
            self._passing.holds(self._member, flow.flow_id)
        return conn

    def _plain_side(self, conn: _Conn, side: _Side, ev: StreamData | StreamGap) -> None:
        """A direction of a TLS flow in which TLS has not started (yet)."""
        if side.probe:
            if type(ev) is StreamGap:
                self._flush_probe(side)
                self._pass(side, ev)
                return
            joined = b"".join(p.data for p in side.probe) + ev.data  # type: ignore[union-attr]
            first = side.probe[0]
            merged = StreamData(ev.flow, ev.direction, first.offset, joined, first.ts_first_ns,
                                ev.ts_last_ns, first.frame_first, ev.frame_last)  # type: ignore[union-attr]
            hit = _client_hello_at(joined, 0)
            if hit is None:
                side.probe.append(ev)  # type: ignore[arg-type]
                return
            side.probe.clear()
            if hit:
                self._begin_tls(conn, side, merged)
            else:
                self._pass(side, merged)
            return
        if type(ev) is StreamGap:
            self._pass(side, ev)
            return
        data = ev.data  # type: ignore[union-attr]
        if side.direction == _SERVER and conn.ch is not None:
            pos = _find_server_hello(data)
            if pos >= 0:
                if pos:
                    self._pass(side, _slice(ev, 0, pos))  # type: ignore[arg-type]
                    ev = _slice(ev, pos, len(data))  # type: ignore[arg-type]
                self._begin_tls(conn, side, ev)  # type: ignore[arg-type]
                return
        elif (side.direction == _CLIENT and data[:1] == b"\x16"
              and (side.out_off or 0) < STARTTLS_WINDOW_BYTES and conn.ch is None):
            hit = _client_hello_at(data, 0)
            if hit is None:
                side.probe.append(ev)  # type: ignore[arg-type]
                return
            if hit:
                self._begin_tls(conn, side, ev)  # type: ignore[arg-type]
                return
        self._pass(side, ev)

    def _flush_probe(self, side: _Side) -> None:
        for p in side.probe:
            self._pass(side, p)
        side.probe.clear()

    def _pass(self, side: _Side, ev: Event) -> None:
        """Deliver a raw event unchanged (plain or transparent)."""
        if type(ev) is StreamData:
            side.out_off = ev.offset + len(ev.data)
        elif type(ev) is StreamGap:
            side.out_off = ev.offset + ev.nbytes
        self._emit(ev)

    def _begin_tls(self, conn: _Conn, side: _Side, ev: StreamData) -> None:
        side.mode = _TLS
        side.start = ev.offset
        side.buf.reset(ev.offset)
        if side.out_off is None:
            side.out_off = ev.offset
        if conn.decided and not conn.decrypt:
            side.mode = _OPAQUE
        self._tls_input(conn, side, ev)

    # -- TLS input ------------------------------------------------------------------------

    def _tls_input(self, conn: _Conn, side: _Side, ev: StreamData | StreamGap) -> None:
        is_gap = type(ev) is StreamGap
        n = ev.nbytes if is_gap else len(ev.data)  # type: ignore[union-attr]
        side.tcp_end = ev.offset + n
        if is_gap:
            side.last_ts, side.last_frame = ev.ts_ns, ev.frame  # type: ignore[union-attr]
        else:
            side.last_ts, side.last_frame = ev.ts_last_ns, ev.frame_last  # type: ignore[union-attr]
        if side.mode == _OPAQUE:
            self._pass(side, ev)
            if side.observing:
                if is_gap:
                    side.observing = False
                    side.lost_bytes += n
                else:
                    self._add_bytes(side, ev)  # type: ignore[arg-type]
                    self._read_records(conn, side)
            return
        flow = conn.flow
        d = side.direction
        if not conn.decided:
            side.held.append(ev)
            side.held_bytes += n
            if is_gap:
                side.observing = False
                side.lost_bytes += n
                self._decide(conn, False, "gap-in-handshake", ev.ts_ns, ev.frame)  # type: ignore[union-attr]
                return
            self._add_bytes(side, ev)  # type: ignore[arg-type]
            self._read_records(conn, side)
            if not conn.decided and side.held_bytes > self.limits.tls_max_held_bytes:
                self._anomaly(conn, side, "limit.tls_held",
                              f"{side.held_bytes} bytes held in {d.short} waiting for the "
                              "ServerHello (limit tls_max_held_bytes); the connection is "
                              "passed on undecrypted", ev.ts_last_ns, ev.frame_last)  # type: ignore[union-attr]
                self._decide(conn, False, "no-server-hello", ev.ts_last_ns, ev.frame_last)  # type: ignore[union-attr]
            elif not conn.decided and self.limits.budget is not None:
                # what is held until the decision draws from the run's memory budget
                self.limits.budget.hold(conn, sum(s.held_bytes for s in conn.sides))
            return
        # decrypting: the TCP bytes are consumed (accounting: see the module docstring)
        if is_gap:
            flow.gap_bytes[d] -= n
            self._tcp_gap(conn, side, ev)  # type: ignore[arg-type]
            return
        flow.stream_bytes[d] -= n
        self._add_bytes(side, ev)  # type: ignore[arg-type]
        self._read_records(conn, side)

    def _add_bytes(self, side: _Side, ev: StreamData) -> None:
        data = ev.data
        off = ev.offset
        b = side.buf
        span: SpanLike = ev
        if side.skip_to is not None:
            if off + len(data) <= side.skip_to:
                b.reset(off + len(data))
                return
            if off < side.skip_to:
                data = data[side.skip_to - off :]
                off = side.skip_to
                span = Span(off, ev.ts_first_ns, ev.ts_last_ns, ev.frame_first, ev.frame_last)
            side.skip_to = None
        if b.base + len(b.data) != off:  # (after a skip; a TCP stream is otherwise contiguous)
            b.reset(off)
        b.feed(data, span)

    def _at(self, side: _Side, offset: int) -> Extent:
        """Provenance of the TCP byte at ``offset`` (a whole record's comes from
        ``ProvenanceBuffer.skip``).  Ask in stream order: the buffer forgets the packets
        of bytes before ``offset``.  With no bytes buffered: the side's latest packet (a
        gap's, when a gap came last)."""
        if not side.buf.data:
            ts, frame = side.last_ts, side.last_frame
            return Extent(offset, offset + 1, ts, ts, frame, frame)
        return side.buf.extent(offset, offset + 1)

    def _read_records(self, conn: _Conn, side: _Side) -> None:
        key = id(side)
        if key in self._reading:
            return  # a decision made while reading this side: the outer loop goes on
        self._reading.add(key)
        try:
            self._read_loop(conn, side)
        finally:
            self._reading.discard(key)

    def _read_loop(self, conn: _Conn, side: _Side) -> None:
        b = side.buf
        while True:
            if side.lost_sync and not self._resync(conn, side):
                break
            buf = b.data
            pos = b.pos
            if len(buf) - pos < HEADER_BYTES:
                break
            if not is_plausible_header(buf, pos):
                self._bad_record(conn, side)
                continue
            length = (buf[pos + 3] << 8) | buf[pos + 4]
            end = pos + HEADER_BYTES + length
            if end > len(buf):
                break
            ctype = buf[pos]
            if not conn.decided and self._needs_keys(conn, side, ctype):
                break  # protected record before the decision: wait for the ServerHello
            header = bytes(buf[pos : pos + HEADER_BYTES])
            fragment = bytes(buf[pos + HEADER_BYTES : end])
            start = b.base + pos
            b.pos = end
            side.records += 1
            side.record_bytes += end - pos
            self.counters["records"] += 1
            self._record(conn, side, ctype, header, fragment, start, start + end - pos)
            if side.mode == _OPAQUE and not side.observing:
                break
        if b.pos > 65536 or b.pos >= len(b.data):
            b.compact()

    def _needs_keys(self, conn: _Conn, side: _Side, ctype: int) -> bool:
        if ctype == ContentType.APPLICATION_DATA:
            return True
        return side.ccs and conn.version != 0x0304

    def _bad_record(self, conn: _Conn, side: _Side) -> None:
        buf, pos = side.buf.data, side.buf.pos
        off = side.buf.offset
        at = self._at(side, off)
        ts, frame = at.ts_first_ns, at.frame_first
        self._anomaly(conn, side, "tls.bad_record",
                      f"{side.direction.short} bytes at TCP offset {off} are not a TLS record "
                      f"header ({bytes(buf[pos:pos + HEADER_BYTES]).hex()}); looking for the "
                      "next record", ts, frame, off)
        if side.mode == _OPAQUE or not conn.decided:
            side.observing = False
            side.buf.pos = len(buf)
            if not conn.decided:
                self._decide(conn, False, "bad-record", ts, frame)
            return
        side.lost_sync = True

    # -- records --------------------------------------------------------------------------

    def _record(self, conn: _Conn, side: _Side, ctype: int, header: bytes, fragment: bytes,
                start: int, end: int) -> None:
        """One whole record, TCP bytes ``[start, end)``.  Where it came from (``rec``,
        ``side.buf.extent``) is asked only by the branches that report or deliver
        something, at most once per record (the buffer forgets packets as it is
        asked, in stream order): most records of a connection passed on undecrypted
        need none."""
        buf = side.buf
        decrypting = conn.decided and conn.decrypt
        tls13 = conn.version == 0x0304
        if ctype == ContentType.CHANGE_CIPHER_SPEC:
            # after a HelloRetryRequest (TLS 1.3 only) both sides' ChangeCipherSpec is the
            # middlebox-compatibility one (RFC 8446 D.4), sent before the real
            # ServerHello fixes the version: it protects nothing
            if not tls13 and not conn.hello_retry:
                if side.ccs and decrypting:
                    self._once(conn, side, "tls.renegotiation",
                               "a second ChangeCipherSpec (renegotiation): its new keys cannot "
                               "be derived; the following records stay encrypted",
                               buf.extent(start, end))
                side.ccs = True
                side.seq = 0
                if decrypting:
                    side.keys12 = self._keys12(conn, side.direction)
            return
        protected = ctype == ContentType.APPLICATION_DATA or (not tls13 and side.ccs)
        if not protected:
            if ctype == ContentType.HANDSHAKE:
                self._handshake_bytes(conn, side, fragment, buf.extent(start, end))
            elif ctype == ContentType.ALERT:
                self._alert(conn, side, alert_text(fragment))
            return
        if not decrypting:
            if ctype == ContentType.ALERT:
                self._alert(conn, side, "encrypted")
            return
        if not tls13 and not side.ccs:
            self._once(conn, side, "tls.bad_record",
                       f"application data before the handshake protected it "
                       f"({side.direction.short}, TCP offset {start})", buf.extent(start, end))
            return
        rec = buf.extent(start, end)
        if tls13:
            opened = self._open13(side, header, fragment)
            if opened is None:
                if side.ep < side.app_ep and not any(n == "handshake" for n, _ in side.epochs):
                    return  # a handshake record whose secret the key log lacks: skipped
                # a record of the handshake epoch carries no application data
                lost = len(fragment) - 17 if side.ep >= side.app_ep else 0
                self._undecrypted(conn, side, lost, rec)
                return
            inner, content = opened
        else:
            keys = side.keys12
            plain = None if keys is None else keys.open(side.seq, ctype, _u16(header, 1),
                                                        fragment)
            if plain is None:
                over = keys.overhead() if keys is not None else 24
                # the first protected record after ChangeCipherSpec is the Finished
                lost = len(fragment) - over if side.seq else 0
                self._undecrypted(conn, side, lost, rec)
                return
            side.seq += 1
            inner, content = ctype, plain
        if inner == ContentType.APPLICATION_DATA:
            if content:
                self._deliver(conn, side, content, rec)
        elif inner == ContentType.HANDSHAKE:
            self._handshake_bytes(conn, side, content, rec)
        elif inner == ContentType.ALERT:
            self._alert(conn, side, alert_text(content))
        elif inner == ContentType.HEARTBEAT:
            self._once(conn, side, "tls.heartbeat",
                       f"TLS heartbeat record ({len(content)} bytes) {side.direction.short}",
                       rec)
        else:
            self._once(conn, side, "tls.bad_record",
                       f"decrypted record of unknown content type {inner}", rec)

    def _open13(self, side: _Side, header: bytes, fragment: bytes) -> tuple[int, bytes] | None:
        epochs = side.epochs
        for i in range(max(side.ep, 0), len(epochs)):
            seq = side.seq if i == side.ep else 0
            got = epochs[i][1].open(seq, header, fragment)
            if got is not None:
                side.ep = i
                side.seq = seq + 1
                return got
        return None

    def _undecrypted(self, conn: _Conn, side: _Side, plain_len: int, rec: Extent) -> None:
        side.undecrypted += 1
        side.seq += 1
        start, end = rec.start, rec.end
        ts, frame = rec.ts_first_ns, rec.frame_first
        if not side.auth_reported:
            side.auth_reported = True
            self._anomaly(conn, side, "tls.auth_failed",
                          f"a {side.direction.short} TLS record (TCP offset {start}, "
                          f"{end - start} bytes) did not authenticate with the keys from the "
                          "key log (wrong secrets, or a corrupt/forged record); its plaintext "
                          "becomes a gap (reported once per direction; see tls."
                          "undecrypted_records)", ts, frame, start)
        self._lose(side, max(plain_len, 0), ts, frame, "tls-auth-failed")

    def _lose(self, side: _Side, nbytes: int, ts: int, frame: int, reason: str) -> None:
        if nbytes <= 0:
            return
        if not side.pending_gap:
            side.gap_ts, side.gap_frame, side.gap_reason = ts, frame, reason
        side.pending_gap += nbytes

    def _flush_gap(self, conn: _Conn, side: _Side) -> None:
        n = side.pending_gap
        if not n:
            return
        side.pending_gap = 0
        d = side.direction
        off = side.out_off or 0  # (set when TLS began)
        self._emit(StreamGap(conn.flow, d, off, n, side.gap_ts, side.gap_frame,
                             side.gap_reason))
        conn.flow.gap_bytes[d] += n
        side.out_off = off + n

    def _deliver(self, conn: _Conn, side: _Side, content: bytes, rec: Extent) -> None:
        self._flush_gap(conn, side)
        d = side.direction
        off = side.out_off or 0  # (set when TLS began)
        self._emit(StreamData(conn.flow, d, off, content, rec.ts_first_ns, rec.ts_last_ns,
                              rec.frame_first, rec.frame_last))
        conn.flow.stream_bytes[d] += len(content)
        side.out_off = off + len(content)
        side.app_bytes += len(content)

    def _alert(self, conn: _Conn, side: _Side, text: str) -> None:
        if len(conn.alerts) < MAX_ALERTS:
            conn.alerts.append(f"{side.direction.short} {text}")

    # -- handshake ------------------------------------------------------------------------

    def _handshake_bytes(self, conn: _Conn, side: _Side, data: bytes, rec: Extent) -> None:
        reader = side.hs
        if reader.error:
            return
        for mtype, body in reader.feed(data):
            self._handshake(conn, side, mtype, body, rec)
        if reader.error:
            self._anomaly(conn, side, "limit.tls_handshake", reader.error, rec.ts_first_ns,
                          rec.frame_first, rec.start)

    def _handshake(self, conn: _Conn, side: _Side, mtype: int, body: bytes, rec: Extent) -> None:
        """One handshake message of the record ``rec``."""
        from reassembly.tlscommon import (
            HandshakeType,
            parse_client_hello,
            parse_encrypted_extensions,
            parse_server_hello,
            safe_parse,
        )

        d = side.direction
        if mtype == HandshakeType.CLIENT_HELLO and d == _CLIENT:
            ch, err = safe_parse(parse_client_hello, body)
            if ch is None:
                self._once(conn, side, "tls.handshake_error", f"malformed ClientHello: {err}",
                           rec)
                return
            if conn.decided:  # a renegotiation ClientHello (TLS 1.2, encrypted)
                self._once(conn, side, "tls.renegotiation",
                           "ClientHello after the handshake (renegotiation)", rec)
            else:  # the first, or the second after a HelloRetryRequest
                conn.ch = ch
            return
        if mtype == HandshakeType.SERVER_HELLO and d == _SERVER:
            sh, err = safe_parse(parse_server_hello, body)
            if sh is None:
                self._once(conn, side, "tls.handshake_error", f"malformed ServerHello: {err}",
                           rec)
                if not conn.decided:
                    ts, frame = rec.ts_first_ns, rec.frame_first
                    self._decide(conn, False, "bad-server-hello", ts, frame)
                return
            if sh.hello_retry:
                conn.hello_retry = True
                return
            if conn.sh is not None:
                return
            conn.sh = sh
            conn.suite = sh.cipher_suite
            conn.version = sh.selected_version or sh.legacy_version
            if sh.alpn is not None:
                conn.alpn_selected = sh.alpn
            if not conn.decided:
                ts, frame = rec.ts_first_ns, rec.frame_first
                ok, reason = self._setup_keys(conn)
                self._decide(conn, ok, reason, ts, frame)
            return
        if mtype == HandshakeType.ENCRYPTED_EXTENSIONS and d == _SERVER:
            ee, _err = safe_parse(parse_encrypted_extensions, body)
            if ee is not None and ee.alpn is not None:
                conn.alpn_selected = ee.alpn
            return
        if conn.version != 0x0304:
            return
        if mtype == HandshakeType.FINISHED or mtype == HandshakeType.END_OF_EARLY_DATA:
            # the next epoch (handshake after early data, application after Finished)
            want = "app" if mtype == HandshakeType.FINISHED else "handshake"
            for i, (name, _k) in enumerate(side.epochs):
                if name == want and i > side.ep:
                    side.ep, side.seq = i, 0
                    break
        elif mtype == HandshakeType.KEY_UPDATE and side.ep >= 0:
            name, keys = side.epochs[side.ep]
            if name == "app":
                side.epochs[side.ep] = (name, keys.updated())
                side.seq = 0
                side.key_updates += 1

    def _setup_keys(self, conn: _Conn) -> tuple[bool, str | None]:
        """Keys for both directions from the key log; (ok, reason when not)."""
        ch, sh = conn.ch, conn.sh
        if ch is None or sh is None:
            return False, "no-client-hello"
        from reassembly.tls.protection import TLS12_AEAD, Tls13Keys

        version, suite = conn.version, conn.suite
        log = self.keylog
        if version == 0x0304:
            if not Tls13Keys.supported(suite or 0):
                return False, "unsupported-cipher"
            labels = {
                _CLIENT: (("early", Labels.CLIENT_EARLY), ("handshake", Labels.CLIENT_HANDSHAKE),
                          ("app", Labels.CLIENT_TRAFFIC_0)),
                _SERVER: (("handshake", Labels.SERVER_HANDSHAKE), ("app", Labels.SERVER_TRAFFIC_0)),
            }
            any_app = False
            for side in conn.sides:
                for name, label in labels[side.direction]:
                    if name == "early" and not ch.early_data:
                        continue
                    secret = log.get(ch.random, label)
                    if secret is None:
                        continue
                    try:
                        keys = Tls13Keys(suite, secret)  # type: ignore[arg-type]
                    except (KeyError, ValueError):
                        continue
                    side.epochs.append((name, keys))
                    if name == "app":
                        any_app = True
                        side.app_ep = len(side.epochs) - 1
            if not any_app:
                return False, "no-keys"
            return True, None
        if version not in (0x0303,):
            return False, "unsupported-version"
        if suite not in TLS12_AEAD:
            return False, "unsupported-cipher"
        if log.get(ch.random, Labels.CLIENT_RANDOM) is None:
            return False, "no-keys"
        return True, None

    def _keys12(self, conn: _Conn, d: Direction) -> Tls12Keys | None:
        from reassembly.tls.protection import TLS12_AEAD, Tls12Keys, tls12_key_block

        ch, sh = conn.ch, conn.sh
        if ch is None or sh is None or conn.suite not in TLS12_AEAD:
            return None
        master = self.keylog.get(ch.random, Labels.CLIENT_RANDOM)
        if master is None:
            return None
        try:
            ck, sk, civ, siv = tls12_key_block(conn.suite, master, ch.random, sh.random)
            return Tls12Keys(conn.suite, ck, civ) if d == _CLIENT else Tls12Keys(conn.suite, sk,
                                                                                  siv)
        except (KeyError, ValueError):
            return None

    # -- the decision ---------------------------------------------------------------------

    def _decide(self, conn: _Conn, decrypt: bool, reason: str | None, ts: int,
                frame: int) -> None:
        if conn.decided:
            return
        conn.decided = True
        if self.limits.budget is not None:
            self.limits.budget.hold(conn, 0)  # nothing is held once decided
        conn.decrypt = decrypt
        conn.reason = reason
        flow = conn.flow
        if decrypt:
            self.counters["decrypted"] += 1
            for side in conn.sides:
                for ev in side.held:
                    if type(ev) is StreamData:
                        flow.stream_bytes[side.direction] -= len(ev.data)
                    else:
                        flow.gap_bytes[side.direction] -= ev.nbytes  # type: ignore[union-attr]
                side.held.clear()
                side.held_bytes = 0
            for side in conn.sides:  # records that waited for the keys
                if side.mode == _TLS:
                    self._read_records(conn, side)
            return
        self._report_undecryptable(conn, ts, frame)
        for side in conn.sides:
            held = side.held
            side.held = []
            side.held_bytes = 0
            if side.mode == _TLS:
                side.mode = _OPAQUE
            for ev in held:
                self._pass(side, ev)
            if side.mode == _OPAQUE and side.observing:
                self._read_records(conn, side)

    def _report_undecryptable(self, conn: _Conn, ts: int, frame: int) -> None:
        ch = conn.ch
        f = conn.flow
        what = f"TLS connection {f.client}->{f.server}"
        if ch is None:
            detail = (f"{what}: stays encrypted ({conn.reason}): no ClientHello was seen, so "
                      "its client random (the key-log lookup key) is unknown")
        else:
            alpn = ",".join(ch.alpn) or "none"
            why = {
                "no-keys": f"no secrets for client random {ch.random.hex()} in the key log "
                           f"({len(self.keylog)} connection(s) known)",
                "unsupported-cipher": f"cipher suite {suite_name(conn.suite)} is not "
                                      "decrypted (AEAD suites only)",
                "unsupported-version": f"{version_name(conn.version)} is not decrypted",
            }.get(conn.reason or "", conn.reason or "")
            detail = (f"{what} (SNI {ch.sni or 'none'}, ALPN {alpn}, client random "
                      f"{ch.random.hex()}) stays encrypted: {why}; its bytes are passed on "
                      "undecrypted")
        self._emit(Anomaly("tls.undecryptable", detail, ts or None, frame or None, conn.flow))

    # -- loss -----------------------------------------------------------------------------

    def _tcp_gap(self, conn: _Conn, side: _Side, ev: StreamGap) -> None:
        """A TCP gap in a decrypted direction."""
        buf, pos, start = side.buf.data, side.buf.pos, side.buf.offset
        gap_end = ev.offset + ev.nbytes
        side.lost_bytes += ev.nbytes
        lost_known = False
        if not side.lost_sync and len(buf) - pos >= HEADER_BYTES and is_plausible_header(buf, pos):
            rec_end = start + HEADER_BYTES + _u16(buf, pos + 3)
            if gap_end <= rec_end:
                # the gap is inside this record: it is lost, the next one starts at rec_end
                over = 17 if conn.version == 0x0304 else (
                    side.keys12.overhead() if side.keys12 else 24)
                side.records += 1
                side.record_bytes += rec_end - start
                side.undecrypted += 1
                side.seq += 1
                side.skip_to = rec_end
                self._lose(side, max(_u16(buf, pos + 3) - over, 0), ev.ts_ns, ev.frame,
                           ev.reason)
                lost_known = True
        if not lost_known:
            side.lost_sync = True
            side.lost_bytes += len(buf) - pos
            self._lose(side, ev.nbytes + len(buf) - pos, ev.ts_ns, ev.frame, ev.reason)
            self._once(conn, side, "tls.lost_sync",
                       f"a TCP gap of {ev.nbytes} bytes at offset {ev.offset} "
                       f"({side.direction.short}) crosses TLS record boundaries; decryption "
                       "resumes at the next record that authenticates",
                       self._at(side, ev.offset))
        side.buf.reset(gap_end)

    def _resync(self, conn: _Conn, side: _Side) -> bool:
        """Find the next record after lost framing; True when found (pos is there)."""
        buf = side.buf.data  # (``_drop`` compacts it in place)
        pos = side.buf.pos
        while True:
            cand = buf.find(b"\x17\x03\x03", pos)
            if cand < 0:
                keep = max(len(buf) - 2, pos)
                self._drop(side, keep)
                return False
            if len(buf) - cand < HEADER_BYTES:
                self._drop(side, cand)
                return False
            length = _u16(buf, cand + 3)
            if not 0 < length <= MAX_RECORD_BYTES:
                pos = cand + 1
                continue
            if len(buf) - cand < HEADER_BYTES + length:
                self._drop(side, cand)
                if side.buf.held > RESYNC_WINDOW_BYTES:
                    self._drop(side, side.buf.pos + 1)
                return False
            header = bytes(buf[cand : cand + HEADER_BYTES])
            fragment = bytes(buf[cand + HEADER_BYTES : cand + HEADER_BYTES + length])
            seq = self._find_seq(conn, side, header, fragment)
            if seq is None:
                pos = cand + 1
                continue
            self._drop(side, cand)
            side.seq = seq
            side.lost_sync = False
            return True

    def _find_seq(self, conn: _Conn, side: _Side, header: bytes, fragment: bytes) -> int | None:
        base = side.seq
        if conn.version == 0x0304:
            if side.ep < 0 or not side.epochs:
                return None
            keys = side.epochs[side.ep][1]
            for seq in range(base, base + MAX_RESYNC_RECORDS):
                if keys.open(seq, header, fragment) is not None:
                    return seq
            return None
        k12 = side.keys12
        if k12 is None:
            return None
        cands = list(range(base, base + MAX_RESYNC_RECORDS))
        hint = k12.explicit_seq(fragment)
        if hint is not None and hint >= base:
            cands.insert(0, hint)
        for seq in cands:
            if k12.open(seq, ContentType.APPLICATION_DATA, _u16(header, 1), fragment) is not None:
                return seq
        return None

    def _drop(self, side: _Side, upto: int) -> None:
        """Bytes before ``side.buf.data[upto]`` are skipped while resynchronising."""
        b = side.buf
        if upto > b.pos:
            at = self._at(side, b.offset)
            n = b.discard_to(b.base + upto)
            side.lost_bytes += n
            self._lose(side, n, at.ts_first_ns, at.frame_first, "tls-resync")
        b.compact()

    # -- end ------------------------------------------------------------------------------

    def _finish(self, conn: _Conn, ts_ns: int) -> None:
        for side in conn.sides:
            if side.probe:
                self._flush_probe(side)
        if not conn.decided:
            reason = "no-server-hello" if conn.ch is not None else "no-client-hello"
            self._decide(conn, False, reason, conn.first_ts, conn.first_frame)
        for side in conn.sides:
            if conn.decrypt and side.mode == _TLS:
                rest = side.buf.held
                if rest and not side.lost_sync:
                    at = self._at(side, side.buf.offset)
                    self._once(conn, side, "tls.truncated_record",
                               f"{rest} bytes of an unfinished TLS record at TCP offset "
                               f"{at.start} ({side.direction.short}) when the flow ended", at)
                    side.lost_bytes += rest
                    self._lose(side, max(rest - HEADER_BYTES - 17, 0), at.ts_first_ns,
                               at.frame_first, "tls-truncated-record")
                elif rest:
                    self._lose(side, rest, side.last_ts, side.last_frame, "tls-resync")
                self._flush_gap(conn, side)
            side.buf.clear()
        self._emit(self._summary(conn, ts_ns))

    def _summary(self, conn: _Conn, ts_ns: int) -> TlsConnection:
        ch, c, s = conn.ch, conn.sides[0], conn.sides[1]
        reason = conn.reason
        if conn.decrypt and (c.undecrypted or s.undecrypted) and reason is None:
            reason = "partial"
        last_ts = max(c.last_ts, s.last_ts) or ts_ns
        last_frame = max(c.last_frame, s.last_frame)
        return TlsConnection(
            conn.flow,
            conn.first_ts,
            conn.first_frame,
            last_ts,
            last_frame,
            (c.start, s.start),
            (c.tcp_end if c.start is not None else None,
             s.tcp_end if s.start is not None else None),
            ch.random.hex() if ch else None,
            ch.sni if ch else None,
            ch.alpn if ch else (),
            conn.alpn_selected,
            ch.supported_versions if ch else (),
            conn.version,
            ch.cipher_suites if ch else (),
            conn.suite,
            ch.early_data if ch else False,
            conn.hello_retry,
            _resumed(conn),
            conn.decrypt,
            reason,
            (c.records, s.records),
            (c.record_bytes, s.record_bytes),
            (c.app_bytes, s.app_bytes),
            (c.undecrypted, s.undecrypted),
            (c.lost_bytes, s.lost_bytes),
            (c.key_updates, s.key_updates),
            tuple(conn.alerts),
        )

    # -- anomalies ------------------------------------------------------------------------

    def release_memory(self, conn: _Conn) -> None:
        """The run's memory budget is reached and this connection's bytes held waiting
        for the ServerHello are the oldest holder: it is decided at once, undecrypted
        (``memory-limit``), and what was held is passed on as it came."""
        if not conn.decided:
            budget = self.limits.budget
            flow = conn.flow
            held = ", ".join(f"{s.direction.short} {s.held_bytes}" for s in conn.sides
                             if s.held_bytes)
            self._emit(Anomaly(
                "limit.memory",
                f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: gave "
                f"up waiting for the ServerHello of TLS connection {flow.client}->"
                f"{flow.server}, the least recently active, and passed on undecrypted the "
                f"bytes held ({held})", flow.ts_last_ns or None, flow.frame_last or None, flow))
            self._decide(conn, False, "memory-limit", flow.ts_last_ns, flow.frame_last)
        elif self.limits.budget is not None:
            self.limits.budget.hold(conn, 0)

    def _anomaly(self, conn: _Conn, side: _Side, kind: str, detail: str, ts: int, frame: int,
                 offset: int | None = None) -> None:
        self._emit(Anomaly(kind, detail, ts or None, frame or None, conn.flow, side.direction,
                           offset))

    def _once(self, conn: _Conn, side: _Side, kind: str, detail: str, at: Extent) -> None:
        """An anomaly reported once per direction, about the bytes at ``at``."""
        key = f"{kind}:{side.direction}"
        if key in conn.reported:
            return
        conn.reported.add(key)
        self._anomaly(conn, side, kind, detail, at.ts_first_ns, at.frame_first, at.start)


def _u16(b: bytes | bytearray, pos: int) -> int:
    return (b[pos] << 8) | b[pos + 1]


def _slice(ev: StreamData, a: int, b: int) -> StreamData:
    """Bytes [a, b) of a chunk as a chunk of their own (same packets' provenance)."""
    return StreamData(ev.flow, ev.direction, ev.offset + a, ev.data[a:b], ev.ts_first_ns,
                      ev.ts_last_ns, ev.frame_first, ev.frame_last, ev.stream_id)


def _resumed(conn: _Conn) -> bool:
    """TLS 1.3: the client offered a PSK; TLS 1.2: the server echoed the client's session
    id (an abbreviated handshake)."""
    ch, sh = conn.ch, conn.sh
    if ch is None:
        return False
    if ch.psk:
        return True
    return bool(conn.version == 0x0303 and sh is not None and ch.session_id
                and sh.session_id == ch.session_id)

"""What runs inside the Spark tasks of the split path (plain Python; Spark-free).

* ``flow_key``: a cheap link/IP peek giving the unordered IP address pair of a frame, so
  both directions of every flow and all fragments of every datagram share a key.
* ``range_stats`` (pass 2; ``range_stats_batches`` on the native engine's batches, with
  the same result): runs the real ``NetworkDecoder`` over one range to learn the
  facts whose local-path behaviour depends on the *whole* capture: the running maximum
  of frame times (the idle-sweep clock), which frames are IP fragments (their times
  expire other fragment sets), the first snaplen-cut packet (reported individually, the
  rest summed), the first frame of each undecodable link type (reported once), and which
  IP pairs share a transport endpoint (payload-dispatch scopes, see ``ingest``).
* ``TaskReassembler``: the very same ``Reassembler`` with its clock replaced by the
  capture's global sweep schedule and those global firsts, so a task that sees only
  some flows expires and reports them exactly as the whole-capture run does;
  ``native_events`` runs it under the native engine (``reassembly.native``), whose C
  core takes the common path between the frames that the schedule's sweeps come before.
* ``RunSink``: stands in for ``DatasetWriter`` under ``CaptureDissection``: rows become
  Arrow batches per table (``rows_to_batch``, validated like the local sink) and are
  written as runs (Arrow IPC files, declared schema) into a staging
  directory, which the part-file writers read back (``ingest._write_piece``).
* ``keyed_batches`` (pass 3a; ``keyed_batches_native`` likewise): a range's frames as
  Arrow batches keyed by the task that dissects them.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from analyzer.sink import BATCH_BYTES, RowSink, binary_columns, gated_rows, row_bytes
from dissectors.core_tables import FLOWS
from dissectors.liftbridge.envelope import MAGIC as LIFTBRIDGE_MAGIC
from dissectors.schema import arrow_schema, rows_to_batch, validate_batch
from dissectors.tables import TableSpec
from reassembly import native
from reassembly.capture import Frame
from reassembly.engine import Reassembler
from reassembly.events import Event
from reassembly.flows import DEFAULT_SERVER_PORTS
from reassembly.limits import SECOND_NS, Limits
from reassembly.link import L3_IP, L3_IPV4, L3_IPV6, decode_link
from reassembly.network import FirstReports, L4Packet, NetworkDecoder
from reassembly.provenance import CoalescedData

if TYPE_CHECKING:
    from reassembly._engine import Batch

NO_KEY = b""  # frames with no IP pair (non-IP, broken): their rows are per frame anyway
_TCP, _UDP = 6, 17
_U16 = struct.Struct("!H")
_V6_EXT = frozenset({0, 43, 60})  # hop-by-hop, routing, destination options
_V6_FRAG, _V6_AH = 44, 51

# Bytes in a TCP payload that mean "a payload dissector may bind here" (STAN subjects,
# the Liftbridge envelope magic): their server endpoint keeps all its connections in one
# task from the start.  Only an optimisation: the dissection tasks report every scope
# that really used cross-flow state, and the driver re-runs with it merged if needed.
PAYLOAD_HINTS = (b"_STAN.", LIFTBRIDGE_MAGIC)


class ConnKey(NamedTuple):
    """Where a frame goes (see ``conn_key``)."""

    key: bytes  # the task key
    frag: bytes | None  # IP fragment id (src, dst, protocol, IP id) of a fragment
    later: bool  # a fragment other than the first (no transport header)
    ends: tuple[bytes, bytes] | None  # both transport endpoints (address + port)


_NONE = ConnKey(NO_KEY, None, False, None)


def _pair(a: bytes, b: bytes) -> bytes:
    return a + b if a <= b else b + a


def conn_key(linktype: int, data: bytes) -> ConnKey:
    """The connection a frame belongs to, from a cheap link/IP/transport peek: TCP and
    UDP by unordered 5-tuple (both directions, port reuse included, share a key); other
    IP by the unordered address pair.  A fragment other than the first carries no ports:
    its ``frag`` id is looked up in the map learned in pass 2 (``range_stats``)."""
    kind, off, _vlans = decode_link(linktype, data)
    n = len(data)
    if kind == L3_IP:
        if off >= n:
            return _NONE
        version = data[off] >> 4
        kind = L3_IPV4 if version == 4 else L3_IPV6 if version == 6 else -9
    if kind == L3_IPV4:
        if n < off + 20:
            return _NONE
        src, dst = data[off + 12 : off + 16], data[off + 16 : off + 20]
        proto = data[off + 9]
        flags = _U16.unpack_from(data, off + 6)[0]
        fragmented = bool(flags & 0x3FFF)
        frag = (b"4" + src + dst + bytes((proto,)) + data[off + 4 : off + 6]) if fragmented \
            else None
        later = bool(flags & 0x1FFF)
        l4 = off + (data[off] & 0x0F) * 4
    elif kind == L3_IPV6:
        if n < off + 40:
            return _NONE
        src, dst = data[off + 8 : off + 24], data[off + 24 : off + 40]
        proto = data[off + 6]
        l4 = off + 40
        frag, later = None, False
        for _ in range(8):  # a few extension headers, as far as they are present
            if proto in _V6_EXT and n >= l4 + 2:
                proto, l4 = data[l4], l4 + (data[l4 + 1] + 1) * 8
            elif proto == _V6_AH and n >= l4 + 2:
                proto, l4 = data[l4], l4 + (data[l4 + 1] + 2) * 4
            elif proto == _V6_FRAG and n >= l4 + 8:
                word = _U16.unpack_from(data, l4 + 2)[0]
                frag = b"6" + src + dst + data[l4 + 4 : l4 + 8]
                later = bool(word & 0xFFF8)
                proto, l4 = data[l4], l4 + 8
            else:
                break
    else:
        return _NONE
    pair = _pair(src, dst)
    if later or proto not in (_TCP, _UDP) or n < l4 + 4:
        return ConnKey(pair, frag, later, None)
    a, b = src + data[l4 : l4 + 2], dst + data[l4 + 2 : l4 + 4]
    return ConnKey(bytes((proto,)) + _pair(a, b), frag, False, (a, b))


def flow_key(linktype: int, data: bytes) -> bytes:
    """Unordered (lower, higher) IP address pair of a frame, as bytes; ``NO_KEY`` when
    the frame carries no readable IP header (the coarse key: every connection between
    two hosts)."""
    got = conn_key(linktype, data)
    if got.key == NO_KEY or got.ends is None:
        return got.key
    a, b = got.ends
    return _pair(a[:-2], b[:-2])


# The Arrow schema of pass 3's frames keyed by connection (``keyed_batches``)
PACKET_SCHEMA = pa.schema(
    [("key", pa.binary()), ("frame", pa.int64()), ("ts", pa.int64()),
     ("linktype", pa.int32()), ("data", pa.binary()), ("orig_len", pa.int64()),
     ("iface", pa.int32())]
)
PACKET_BATCH = 8192  # frames per Arrow batch of ``keyed_batches``


def task_key(ck: ConnKey, frag_keys: Mapping[bytes, bytes | None],
             rep: Mapping[bytes, bytes]) -> bytes:
    """The dissection task key of a frame of connection ``ck``: a later fragment goes
    with its first fragment's connection (``frag_keys``, from pass 2), and the
    connections of a merged endpoint under its representative key (``rep``)."""
    key = ck.key
    if ck.later and ck.frag is not None:  # no ports: the connection of its first fragment
        key = frag_keys.get(ck.frag) or key
    return rep.get(key, key)


def keyed_batches(frames: Iterable[Frame], frag_keys: Mapping[bytes, bytes | None],
                  rep: Mapping[bytes, bytes], by_pair: bool) -> Iterator[pa.RecordBatch]:
    """Pass 3a: a range's frames as Arrow batches (``PACKET_SCHEMA``) keyed by the task
    that dissects them (``task_key``; ``by_pair``: all under ``NO_KEY``, one task).
    Frame by frame: the definition of ``keyed_batches_native``."""
    cols: list[list] = [[] for _ in range(7)]
    for fr in frames:
        cols[0].append(NO_KEY if by_pair else task_key(conn_key(fr.linktype, fr.data),
                                                         frag_keys, rep))
        for k, v in enumerate(fr, 1):
            cols[k].append(v)
        if len(cols[1]) >= PACKET_BATCH:
            yield pa.RecordBatch.from_arrays(cols, schema=PACKET_SCHEMA)
            cols = [[] for _ in range(7)]
    if cols[1]:
        yield pa.RecordBatch.from_arrays(cols, schema=PACKET_SCHEMA)


def keyed_batches_native(batches: Iterable[Batch], frag_keys: Mapping[bytes, bytes | None],
                         rep: dict[bytes, bytes], by_pair: bool) -> Iterator[pa.RecordBatch]:
    """``keyed_batches`` of the range's records as C batches (``native.range_batches``):
    the same rows, the keys of the records the engine decodes as fast made in C
    (``_engine.conn_keys``: TCP or UDP, no fragment), the others' by ``conn_key``, and
    the columns from the batch's buffers (``Batch.columns``), no Python object a frame."""
    from reassembly._engine import conn_keys

    for batch in batches:
        n = len(batch)
        if by_pair:
            keys: list[bytes | None] = [NO_KEY] * n
        else:
            keys, slow = conn_keys(batch, rep)
            for i in slow:
                fr = batch.frame(i)
                keys[i] = task_key(conn_key(fr[2], fr[3]), frag_keys, rep)
        start = 0
        while start < n:
            stop, numbers, ts, linktypes, orig, ifaces, offsets, data = batch.columns(start)
            m = stop - start
            yield pa.RecordBatch.from_arrays([
                pa.array(keys[start:stop], pa.binary()),
                pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(numbers)]),
                pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(ts)]),
                pa.Array.from_buffers(pa.int32(), m, [None, pa.py_buffer(linktypes)]),
                pa.Array.from_buffers(pa.binary(), m,
                                      [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
                pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(orig)]),
                pa.Array.from_buffers(pa.int32(), m, [None, pa.py_buffer(ifaces)]),
            ], schema=PACKET_SCHEMA)
            start = stop


# ----------------------------------------------------------------------------- pass 2


class _NotedFirsts(FirstReports):
    """The whole-capture policy, noting which frames hit the once-per-capture reports:
    every snaplen-cut packet, and the first frame of each undecodable link type."""

    def __init__(self) -> None:
        super().__init__()
        self.unknown_first: dict[int, int] = {}
        self.snaplen_frames: list[int] = []

    def snaplen_cut(self, frame: Any) -> bool:
        self.snaplen_frames.append(frame.number)
        return super().snaplen_cut(frame)

    def unknown_linktype(self, frame: Any) -> bool:
        first = super().unknown_linktype(frame)
        if first:
            self.unknown_first[frame.linktype] = frame.number
        return first


_FLUSH_EVERY = 65536  # frames between two flushes of pass 2's fragment table


class _RangeFacts:
    """What pass 2 learns of one range (``range_stats``, ``range_stats_batches``)."""

    def __init__(self, limits: Limits, endpoints: bool) -> None:
        self.noted = _NotedFirsts()
        self.dec = NetworkDecoder(limits, lambda _anomaly: None, self.noted)
        self.counters = self.dec.counters
        self.rec_frames: list[Any] = []  # (lists of ints, or of numpy arrays)
        self.rec_ts: list[Any] = []
        self.running = 0  # the engine's clock starts at 0 and only moves forward
        self.n = 0
        self.first_ts: int | None = None
        self.frag_max: int | None = None
        self.pairs: set[tuple[bytes, bytes]] | None = set() if endpoints else None
        self.frag_keys: dict[bytes, bytes | None] = {}
        self.hints: set[bytes] = set()
        self.flushed = 0  # the frame number of the decoder's last flush

    def flush_before(self, number: int) -> None:
        """The decoder's flushes ``range_stats`` makes after every ``_FLUSH_EVERY``-th
        frame, those after frames before ``number`` (the batch path's frames between
        two slow ones are not fed to it one by one)."""
        while self.flushed + _FLUSH_EVERY < number:
            self.flushed += _FLUSH_EVERY
            self.dec.flush(None)  # fragments of this pass are not kept: bound the memory

    def frame(self, frame: Frame) -> None:
        """One frame's connection facts, through the real decoder (the clock apart)."""
        ts = frame.ts_ns
        ck = conn_key(frame.linktype, frame.data)
        if ck.ends is not None:
            if self.pairs is not None:
                self.pairs.add((ck.ends[0], ck.key))
                self.pairs.add((ck.ends[1], ck.key))
            if ck.frag is not None:
                known = self.frag_keys.setdefault(ck.frag, ck.key)
                if known is not None and known != ck.key:
                    self.frag_keys[ck.frag] = None  # an IP id reused by another connection
        counters = self.counters
        before = counters["fragments"]
        pkt = self.dec.decode(frame)
        if counters["fragments"] != before and (self.frag_max is None or ts > self.frag_max):
            self.frag_max = ts
        if pkt is not None and pkt.proto in (_TCP, _UDP) and len(pkt.payload) >= 8:
            seg = pkt.payload
            if pkt.proto == _UDP:
                hinted = len(seg) > 8 and seg[8] & 0xC0 == 0xC0  # QUIC long header
            else:
                body = seg[(seg[12] >> 4) * 4 :] if len(seg) >= 20 else b""
                hinted = any(h in body for h in PAYLOAD_HINTS)
            if hinted:
                self.hints.add(pkt.src + seg[0:2])
                self.hints.add(pkt.dst + seg[2:4])

    def result(self) -> dict[str, Any]:
        import numpy as np

        def joined(parts: list[Any]) -> Any:
            if parts and not isinstance(parts[0], int):
                return np.concatenate(parts).astype(np.int64, copy=False)
            return np.asarray(parts, dtype=np.int64)

        noted = self.noted
        return {
            "frames": self.n,
            "first_ts": self.first_ts,
            "rec_frames": joined(self.rec_frames),
            "rec_ts": joined(self.rec_ts),
            "frag_max": self.frag_max,
            "snaplen_first": noted.snaplen_frames[0] if noted.snaplen_frames else None,
            "snaplen_cuts": len(noted.snaplen_frames),
            "unknown_first": dict(noted.unknown_first),
            "pairs": sorted(self.pairs or ()),
            "frag_keys": self.frag_keys,
            "hints": sorted(self.hints),
        }


def range_stats(frames: Iterable[Frame], limits: Limits, endpoints: bool) -> dict[str, Any]:
    """Pass 2 over one range (see the module docstring).  Also what splitting by
    connection needs: the 5-tuple key of each fragmented datagram's first fragment
    (``frag_keys``; ``None`` when one fragment id names two connections), the endpoints
    of each connection key (``pairs``, with ``endpoints``) and the endpoints whose
    packets carry ``PAYLOAD_HINTS`` or a QUIC long header (``hints``).  Frame by frame:
    the definition of ``range_stats_batches``."""
    facts = _RangeFacts(limits, endpoints)
    for frame in frames:
        facts.n += 1
        ts = frame.ts_ns
        if facts.first_ts is None:
            facts.first_ts = ts
        if ts > facts.running:
            facts.running = ts
            facts.rec_frames.append(frame.number)
            facts.rec_ts.append(ts)
        facts.frame(frame)
        facts.flush_before(facts.n + 1)
    return facts.result()


def range_stats_batches(batches: Iterable[Batch], limits: Limits, endpoints: bool
                        ) -> dict[str, Any]:
    """``range_stats`` of the range's records as C batches (``native.range_batches``),
    with the same result: the clock from the batch's times in numpy, the facts of the
    records the engine decodes as fast (TCP or UDP, no fragment: nothing but counters of
    the decoder's state moves for them) in C (``_engine.conn_facts``), and every other
    record through ``_RangeFacts.frame``, in order, with the decoder's flushes where
    ``range_stats`` makes them."""
    import numpy as np

    from reassembly._engine import conn_facts

    facts = _RangeFacts(limits, endpoints)
    for batch in batches:
        m = len(batch)
        if not m:
            continue
        numbers_b, ts_b = batch.times()
        numbers, ts = np.frombuffer(numbers_b, np.int64), np.frombuffer(ts_b, np.int64)
        if facts.first_ts is None:
            facts.first_ts = int(ts[0])
        before = np.maximum.accumulate(np.concatenate(([facts.running], ts[:-1])))
        rises = ts > before  # the records that move the clock
        facts.rec_frames.append(numbers[rises])
        facts.rec_ts.append(ts[rises])
        facts.running = max(facts.running, int(ts.max()))
        slow = conn_facts(batch, facts.pairs, facts.hints, PAYLOAD_HINTS)
        base = facts.n
        for i in slow:
            facts.flush_before(base + i + 1)
            facts.frame(Frame._make(batch.frame(i)))
        facts.flush_before(base + m + 1)
        facts.n = base + m
    return facts.result()


def sweep_schedule(stats: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, int]]:
    """The clock events of ``reassembly.engine.CaptureClock`` over the whole capture, from the
    per-range stats (in range order): ``(after_frame, kind, ts)`` with kind 0 = restamp
    untimed flows, 1 = sweep (expire idle flows, flush stale fragments)."""
    import numpy as np

    first_ts = next((s["first_ts"] for s in stats if s["frames"]), None)
    if first_ts is None:
        return []
    frames_l, ts_l = [], []
    running = 0
    for s in stats:
        f, t = s["rec_frames"], s["rec_ts"]
        if len(t):  # a range's records rise; a global one also beats earlier ranges
            keep = t > running
            frames_l.append(f[keep])
            ts_l.append(t[keep])
            running = max(running, int(t.max()))
    if not ts_l:
        return []
    frames = np.concatenate(frames_l)
    ts = np.concatenate(ts_l)
    events: list[tuple[int, int, int]] = []
    # restamp: the first frame whose time moves the clock off zero (a no-op when no
    # flow was seen before it, which is the usual case)
    events.append((int(frames[0]), 0, int(ts[0])))
    last = first_ts  # the first frame's time starts the sweep clock
    i = 0
    while True:
        i = int(np.searchsorted(ts, last + SECOND_NS, side="left"))
        if i >= len(ts):
            break
        events.append((int(frames[i]), 1, int(ts[i])))
        last = int(ts[i])
    return events


# ----------------------------------------------------------------------------- pass 3


class GlobalFirsts(FirstReports):
    """The once-per-capture reports of one task: the capture's first snaplen cut and
    the first frame of each undecodable link type are known from pass 2, so only the
    task holding that frame reports it; the driver writes the snaplen summary."""

    summary = False

    def __init__(self, snaplen_first: int | None, unknown_first: Mapping[int, int]) -> None:
        super().__init__()
        self.snaplen_first = snaplen_first
        self.unknown_first = dict(unknown_first)

    def snaplen_cut(self, frame: Any) -> bool:
        return bool(frame.number == self.snaplen_first)

    def unknown_linktype(self, frame: Any) -> bool:
        return bool(self.unknown_first.get(frame.linktype) == frame.number)


class ScheduleClock:
    """A ``reassembly.engine.Clock`` that ignores the task's own frame times: the
    capture's global schedule (``sweep_schedule``) is applied between frames instead
    (``apply_until``, called by ``TaskReassembler.step``).

    ``ticks = False`` and the ``now_ns``/``last_sweep_ns`` it keeps (the global clock as
    of the events applied, moved as ``CaptureClock`` moves its own) are what the native
    engine needs to take frames under it (``reassembly.native``): no frame's time
    triggers anything, and a change of either says any flow may have changed."""

    ticks = False

    def __init__(self, schedule: Sequence[tuple[int, int, int]]) -> None:
        self.events = list(schedule)
        self.applied = 0  # events of ``schedule`` applied so far
        self.now_ns = 0
        self.last_sweep_ns: int | None = None

    def tick(self, reassembler: Reassembler, ts_ns: int) -> None:
        return None

    def apply_until(self, reassembler: Reassembler, frame_no: float) -> None:
        """Apply the events that came after frames before ``frame_no``."""
        events, i = self.events, self.applied
        while i < len(events) and events[i][0] < frame_no:
            _after, kind, ts = events[i]
            if kind == 0:
                reassembler.flows.restamp_untimed(ts)
                self.now_ns = ts
            else:
                reassembler.sweep(ts)
                self.last_sweep_ns = ts
            i += 1
        self.applied = i


class TaskReassembler(Reassembler):
    """``Reassembler`` driven by the capture's global clock (see ``sweep_schedule``).

    Frames must come in frame-number order.  Before each frame (``step``), the clock
    events that the whole-capture run met after earlier frames are applied; the task's
    own frame times move no clock (``ScheduleClock``).  Before the end-of-capture flush
    (``finish``), the rest are, and fragment sets are expired at the time of the
    capture's last fragment (another pair's fragments expire them lazily in the
    whole-capture run).  ``native_events`` runs it under the native engine."""

    clock: ScheduleClock

    def __init__(
        self,
        limits: Limits | None,
        schedule: Sequence[tuple[int, int, int]],
        *,
        snaplen_first: int | None = None,
        unknown_first: Mapping[int, int] | None = None,
        frag_max: int | None = None,
        server_ports: Collection[int] = DEFAULT_SERVER_PORTS,  # as for ``Reassembler``
    ) -> None:
        super().__init__(limits, clock=ScheduleClock(schedule),
                         firsts=GlobalFirsts(snaplen_first, unknown_first or {}),
                         server_ports=server_ports)
        self.frag_max = frag_max

    def apply_until(self, frame_no: float) -> None:
        """Apply the schedule's events that came after frames before ``frame_no``."""
        self.clock.apply_until(self, frame_no)

    def step(self, frame: Frame) -> L4Packet | None:
        self.clock.apply_until(self, frame.number)
        return super().step(frame)

    def finish(self) -> Iterator[Event]:
        self.clock.apply_until(self, float("inf"))
        if self.frag_max is not None:
            self.network.flush(self.frag_max)
        return super().finish()

    def batches(self, frames: Iterable[Frame], hand_back: Callable[[], None],
                max_records: int = native.BATCH_RECORDS) -> Iterator[Batch]:
        """``frames`` as C batches for a ``NativeReassembler`` over this reassembler: a
        frame before which the schedule has events starts a batch, and ``hand_back()``
        (``NativeReassembler.hand_back``) runs when that batch is asked for, so the
        reference handles the frame (``step`` applies the events first) and re-reads
        every flow before the C core takes anything after it."""
        events, start = self.clock.events, self.clock.applied
        due = start

        def events_before(frame: Frame) -> int:
            nonlocal due
            while due < len(events) and events[due][0] < frame.number:
                due += 1
            return due

        for before, stretch in groupby(frames, events_before):
            batches = native.frame_batches(stretch, max_records)
            if before > start:  # (every stretch but maybe the first)
                first = next(batches)
                hand_back()
                yield first
            yield from batches

    def column_batches(self, batches: Iterable[pa.RecordBatch], hand_back: Callable[[], None]
                       ) -> Iterator[Batch]:
        """``batches`` (``PacketBatches``) as C batches cut where ``batches`` cuts a task's
        frames, straight from the Arrow buffers (``_engine.batch_of_columns``: no Frame
        tuple, no copy of the frames' bytes)."""
        import numpy as np

        from reassembly._engine import batch_of_columns

        events, start = self.clock.events, self.clock.applied
        after = np.fromiter((e[0] for e in events[start:]), np.int64, len(events) - start)
        last = start  # the schedule's events before the frames handed out so far
        for rb in batches:
            n = rb.num_rows
            if not n:
                continue
            cols = _column_buffers(rb)
            due = np.searchsorted(after, rb.column("frame").to_numpy(), "left") + start
            bounds = [0, *(np.flatnonzero(due[1:] != due[:-1]) + 1).tolist(), n]
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                batch = batch_of_columns(*cols, lo, hi)
                if due[lo] > last:  # (as ``batches``: the reference first re-reads the flows)
                    last = int(due[lo])
                    hand_back()
                yield batch


def native_events(reasm: TaskReassembler, frames: Iterable[Frame] | PacketBatches,
                  chunks: bool = False) -> Iterator[Event | CoalescedData]:
    """``reasm.process(frames)`` on the native engine (``reassembly.native``), with the
    same events: its C core takes the common path between the frames the schedule's
    events come before (``TaskReassembler.batches``; pass 3's Arrow batches, wrapped in
    ``PacketBatches``: ``TaskReassembler.column_batches``).  ``chunks``: the engine's
    runs of segments as ``CoalescedData``, as ``reassembly.engine.capture_events`` gives
    them to a consumer that takes them (``coalesce="adjacent"``); else one ``StreamData``
    each."""
    engine = native.NativeReassembler(reference=reasm,
                                      coalesce="adjacent" if chunks else "none")
    if isinstance(frames, PacketBatches):
        batches = reasm.column_batches(frames.batches, engine.hand_back)
    else:
        batches = reasm.batches(frames, engine.hand_back)
    return engine.process(batches) if chunks else engine.events(batches)


class PacketBatches(NamedTuple):
    """A dissection task's input: pass 3's Arrow batches (``PACKET_SCHEMA`` columns, in
    frame order), for ``native_events``; ``frames()`` for the reference."""

    batches: Iterable[pa.RecordBatch]

    def frames(self) -> Iterator[Frame]:
        new = tuple.__new__
        for batch in self.batches:
            if not batch.num_rows:
                continue
            cols = [batch.column(name).to_pylist()
                    for name in ("frame", "ts", "linktype", "data", "orig_len", "iface")]
            for row in zip(*cols, strict=True):
                yield new(Frame, row)


_COLUMN_WIDTHS = {"frame": 8, "ts": 8, "linktype": 4, "orig_len": 8, "iface": 4}


def _column_buffers(batch: pa.RecordBatch) -> tuple[Any, ...]:
    """The buffers ``_engine.batch_of_columns`` reads of one Arrow batch of
    ``PACKET_SCHEMA`` (columns of another width, a large binary say, cast to it)."""
    if not batch.schema.equals(PACKET_SCHEMA):
        batch = batch.select(PACKET_SCHEMA.names).cast(PACKET_SCHEMA)
    out: list[Any] = []
    for name, width in _COLUMN_WIDTHS.items():
        arr = batch.column(name)
        if arr.null_count:
            raise ValueError(f"pass 3's column {name} holds nulls")
        out.append(arr.buffers()[1].slice(arr.offset * width))
    data = batch.column("data")
    if data.null_count:
        raise ValueError("pass 3's column data holds nulls")
    _valid, offsets, values = data.buffers()
    out.append(offsets.slice(data.offset * 4))
    out.append(values if values is not None else b"")
    return tuple(out)


# Runs are Arrow IPC files, lz4-compressed: staging read once, by ``ingest._write_piece``.
# Against Parquet with lz4 (until 2026-11-28), on the 103 MB bulk NATS recording's nats
# table (274 MB of Arrow): written in 0.17-0.24 CPU s instead of 0.40-0.45, read in
# 0.09-0.10 instead of 0.25-0.83, 28 % bigger (127 against 99 MB)
_RUN_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


class RunSink(RowSink):
    """``DatasetWriter`` stand-in for ``CaptureDissection`` inside a task.

    Rows are converted to Arrow every ``chunk`` rows or ``run_bytes`` of captured bytes
    (``analyzer.sink.row_bytes``), anomaly details through the redaction gate
    (``analyzer.sink.gated_rows``) as the local writer does; every ``run_rows`` rows or
    ``run_bytes`` bytes of Arrow data of a table, whichever comes first (and at
    ``close``), the buffered batches are written, in the order the rows came, as one run
    file ``<staging>/<table>/run-<piece>-<n>.arrow``.  Why bytes too: with rows alone a
    task held up to 262,144 rows of a table before writing any, payloads and all (rows of
    1 MiB payloads under ``--payload-cap 1048576``: 256 GiB); ``run_bytes`` is the local
    writer's batch bound (``analyzer.sink.BATCH_BYTES``).  Flow rows also feed
    ``flows_seen`` (local flow id, first frame) for the id remapping.  Columnar: a
    compiled fast path's Arrow batches (``write_batch``) join the same runs, after the
    dict rows that came before them.  Why not sorted by record id (as until 2026-11-28):
    the sort here and the merge of the runs by ``_write_piece`` copied every row twice,
    payloads and all (passes 3c-3d on the 103 MB bulk NATS recording: 3.2 -> 2.2 CPU s
    without them), and the local path's files are in this order too."""

    def __init__(self, staging: str | os.PathLike, piece: int, *, validate: bool,
                 keep_secrets: bool = False, run_rows: int = 262144,
                 run_bytes: int = BATCH_BYTES, chunk: int = 4096) -> None:
        self.staging = Path(staging)
        self.piece = piece
        self.validate = validate
        self.keep_secrets = keep_secrets
        self.run_rows = run_rows
        self.run_bytes = run_bytes
        self.chunk = chunk
        self._rows: dict[str, list[Mapping[str, Any]]] = {}
        self._rows_bytes: dict[str, int] = {}  # captured bytes ``_rows`` hold (``row_bytes``)
        self._batches: dict[str, list[pa.RecordBatch]] = {}
        self._pending: dict[str, tuple[int, int]] = {}  # rows and Arrow bytes buffered
        self._specs: dict[str, TableSpec] = {}
        self._runs: Counter = Counter()
        self.rows: Counter = Counter()
        self.flows_seen: list[tuple[int, int]] = []
        self.quic_servers: set[tuple[str, int]] = set()  # server endpoints of QUIC flows
        self.files: list[str] = []

    # The conveyor switches compiled fast paths (the NATS one) on only for a sink of Arrow
    # batches; without them a split capture's NATS traffic went through the pure-Python
    # sessions (pass 3 cost ~1.4x the local dissection's CPU: bench_spark --profile-split).
    columnar = True

    def write_batch(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
        """A fast path's columns, after the table's dict rows that came before them."""
        name = spec.name
        if name == FLOWS.name:  # flows feed flows_seen row by row (never columnar today)
            self.write_rows(spec, batch.to_pylist())
            return
        self._specs.setdefault(name, spec)
        self._convert(name)
        schema = arrow_schema(spec)
        for b in (batch.to_batches() if isinstance(batch, pa.Table) else [batch]):
            if not b.schema.equals(schema):
                b = pa.RecordBatch.from_arrays(b.columns, schema=schema)
            self._buffer(name, b)

    def write_rows(self, spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> None:
        name = spec.name
        self._specs.setdefault(name, spec)
        buf = self._rows.setdefault(name, [])
        binary = binary_columns(spec)
        held = self._rows_bytes.get(name, 0)
        for row in rows:
            if name == FLOWS.name:
                self.flows_seen.append((row["flow_id"], row["frame_first"]))
                if row.get("quic_version") is not None or "quic" in (row.get("layers") or ()):
                    self.quic_servers.add((row["server_ip"], row["server_port"]))
            buf.append(row)
            if binary:
                held += row_bytes(binary, row)
            if len(buf) >= self.chunk or held >= self.run_bytes:
                self._convert(name)
                buf, held = self._rows[name], 0
        self._rows_bytes[name] = held

    def _convert(self, name: str) -> None:
        rows = self._rows.get(name)
        if not rows:
            return
        spec = self._specs[name]
        # undeclared keys raise, as in analyzer.sink
        batch = rows_to_batch(spec, gated_rows(name, rows, self.keep_secrets))
        if self.validate:
            validate_batch(spec, batch)
        self._rows[name] = []
        self._rows_bytes[name] = 0
        self._buffer(name, batch)

    def _buffer(self, name: str, batch: pa.RecordBatch) -> None:
        """Hold a converted batch for the table's next run; write the run once it holds
        ``run_rows`` rows or ``run_bytes`` bytes."""
        self._batches.setdefault(name, []).append(batch)
        rows, nbytes = self._pending.get(name, (0, 0))
        rows, nbytes = rows + batch.num_rows, nbytes + batch.nbytes
        self._pending[name] = (rows, nbytes)
        if rows >= self.run_rows or nbytes >= self.run_bytes:
            self._write_run(name)

    def _write_run(self, name: str) -> None:
        batches = self._batches.pop(name, [])
        self._pending[name] = (0, 0)
        if not batches:
            return
        spec = self._specs[name]
        schema = arrow_schema(spec)
        table = pa.Table.from_batches(batches, schema=schema)
        out = self.staging / name / f"run-{self.piece:06d}-{self._runs[name]:06d}.arrow"
        self._runs[name] += 1
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name("." + out.name + ".tmp")
        with pa.ipc.new_file(tmp, schema, options=_RUN_OPTIONS) as f:
            for batch in table.to_batches(max_chunksize=65536):
                f.write_batch(batch)
        os.replace(tmp, out)
        self.rows[name] += table.num_rows
        self.files.append(str(out))

    def close(self) -> None:
        for name in list(self._rows):
            self._convert(name)
        for name in list(self._batches):
            self._write_run(name)

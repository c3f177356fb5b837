"""What runs inside the Spark tasks of the split path (plain Python; Spark-free).

* ``flow_key``: a cheap link/IP peek giving the unordered IP address pair of a frame, so
  both directions of every flow and all fragments of every datagram share a key.
* ``range_stats`` (pass 2): runs the real ``NetworkDecoder`` over one range to learn the
  facts whose local-path behaviour depends on the *whole* capture: the running maximum
  of frame times (the idle-sweep clock), which frames are IP fragments (their times
  expire other fragment sets), the first snaplen-cut packet (reported individually, the
  rest summed), the first frame of each undecodable link type (reported once), and which
  IP pairs share a transport endpoint (payload-dispatch scopes, see ``ingest``).
* ``TaskReassembler``: the very same ``Reassembler`` with its clock replaced by the
  capture's global sweep schedule and those global firsts, so a task that sees only
  some flows expires and reports them exactly as the whole-capture run does.
* ``RunSink``: stands in for ``DatasetWriter`` under ``CaptureDissection``: rows become
  Arrow batches per table (``rows_to_batch``, validated like the local sink) and are
  written as sorted runs (Parquet, declared schema, ns timestamps) into a staging
  directory that the driver merges.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dissectors.core_tables import FLOWS
from dissectors.schema import arrow_schema, rows_to_batch, validate_batch
from dissectors.tables import TableSpec
from reassembly.capture import Frame
from reassembly.engine import Reassembler
from reassembly.events import Anomaly
from reassembly.limits import SECOND_NS, Limits
from reassembly.link import L3_IP, L3_IPV4, L3_IPV6, LINK_DECODERS, decode_link
from reassembly.network import NetworkDecoder

NO_KEY = b""  # frames with no IP pair (non-IP, broken): their rows are per frame anyway
_TCP, _UDP = 6, 17


def flow_key(linktype: int, data: bytes) -> bytes:
    """Unordered (lower, higher) IP address pair of a frame, as bytes; ``NO_KEY`` when
    the frame carries no readable IP header.  Reads the same header fields the
    ``NetworkDecoder`` takes addresses from."""
    kind, off, _vlans = decode_link(linktype, data)
    if kind == L3_IP:
        if off >= len(data):
            return NO_KEY
        version = data[off] >> 4
        kind = L3_IPV4 if version == 4 else L3_IPV6 if version == 6 else -9
    if kind == L3_IPV4:
        if len(data) < off + 20:
            return NO_KEY
        a, b = data[off + 12 : off + 16], data[off + 16 : off + 20]
    elif kind == L3_IPV6:
        if len(data) < off + 40:
            return NO_KEY
        a, b = data[off + 8 : off + 24], data[off + 24 : off + 40]
    else:
        return NO_KEY
    return a + b if a <= b else b + a


# ----------------------------------------------------------------------------- pass 2


class _StatsDecoder(NetworkDecoder):
    """A ``NetworkDecoder`` that notes which frames hit the global-by-nature reports."""

    def __init__(self, limits: Limits) -> None:
        self.unknown_first: dict[int, int] = {}
        super().__init__(limits, self._note)
        self.snaplen_frames: list[int] = []
        self._frame: Any = None

    def _note(self, ev: Anomaly) -> None:
        if ev.kind == "link.unknown_type" and self._frame is not None:
            self.unknown_first.setdefault(self._frame.linktype, ev.frame)

    def _truncated(self, frame: Any, detail: str) -> None:
        if self._snaplen_cut(frame, frame.data):
            self.snaplen_frames.append(frame.number)
        super()._truncated(frame, detail)


def range_stats(frames: Iterable[Frame], limits: Limits, endpoints: bool) -> dict[str, Any]:
    """Pass 2 over one range (see the module docstring)."""
    import numpy as np

    dec = _StatsDecoder(limits)
    counters = dec.counters
    rec_frames: list[int] = []
    rec_ts: list[int] = []
    running = 0  # the engine's clock starts at 0 and only moves forward
    n = 0
    first_ts = None
    frag_max = None
    pairs: set[tuple[bytes, bytes]] = set()
    for frame in frames:
        n += 1
        if first_ts is None:
            first_ts = frame.ts_ns
        ts = frame.ts_ns
        if ts > running:
            running = ts
            rec_frames.append(frame.number)
            rec_ts.append(ts)
        before = counters["fragments"]
        dec._frame = frame
        pkt = dec.decode(frame)
        if counters["fragments"] != before and (frag_max is None or ts > frag_max):
            frag_max = ts
        if endpoints and pkt is not None and pkt.proto in (_TCP, _UDP) and len(pkt.payload) >= 4:
            a, b = pkt.src, pkt.dst
            key = a + b if a <= b else b + a
            pairs.add((a + pkt.payload[0:2], key))
            pairs.add((b + pkt.payload[2:4], key))
        if n % 65536 == 0:
            dec.flush(None)  # fragments of this pass are not kept: bound the memory
    return {
        "frames": n,
        "first_ts": first_ts,
        "rec_frames": np.asarray(rec_frames, dtype=np.int64),
        "rec_ts": np.asarray(rec_ts, dtype=np.int64),
        "frag_max": frag_max,
        "snaplen_first": dec.snaplen_frames[0] if dec.snaplen_frames else None,
        "snaplen_cuts": len(dec.snaplen_frames),
        "unknown_first": dict(dec.unknown_first),
        "pairs": sorted(pairs),
    }


def sweep_schedule(stats: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, int]]:
    """The clock events of ``Reassembler._tick`` over the whole capture, from the
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


class _TaskNetwork(NetworkDecoder):
    """Reports exactly what the whole-capture decoder reports for these frames."""

    def __init__(self, limits: Limits, report, snaplen_first: int | None,
                 unknown_first: Mapping[int, int]) -> None:
        super().__init__(limits, report)
        self._snap_first = snaplen_first
        self._unknown_first = dict(unknown_first)
        self.snaplen_cuts = 0

    def _truncated(self, frame: Any, detail: str) -> None:
        if self._snaplen_cut(frame, frame.data):
            self.snaplen_cuts += 1
            # only the capture's first snaplen cut is reported one by one
            self._snaplen_reported = frame.number != self._snap_first
        super()._truncated(frame, detail)

    def decode(self, frame: Any):
        lt = frame.linktype
        if lt not in LINK_DECODERS:  # reported once per capture, at its first frame
            if self._unknown_first.get(lt) == frame.number:
                self._unknown_reported.discard(lt)
            else:
                self._unknown_reported.add(lt)
        return super().decode(frame)


class TaskReassembler(Reassembler):
    """``Reassembler`` driven by the capture's global clock (see ``sweep_schedule``).

    Frames must come in frame-number order.  Before each frame, the clock events that
    the whole-capture run met after earlier frames are applied; the task's own ticks do
    nothing.  Before the end-of-capture flush, fragment sets are expired at the time of
    the capture's last fragment (another pair's fragments expire them lazily in the
    whole-capture run)."""

    def __init__(
        self,
        limits: Limits | None,
        schedule: Sequence[tuple[int, int, int]],
        *,
        snaplen_first: int | None = None,
        unknown_first: Mapping[int, int] | None = None,
        frag_max: int | None = None,
    ) -> None:
        super().__init__(limits)
        self.network = _TaskNetwork(self.limits, self._out.append, snaplen_first,
                                    unknown_first or {})
        self._events = list(schedule)
        self._next = 0
        self._frag_max = frag_max

    def _apply_until(self, frame_no: float) -> None:
        events, i = self._events, self._next
        while i < len(events) and events[i][0] < frame_no:
            _after, kind, ts = events[i]
            if kind == 0:
                self.flows.restamp_untimed(ts)
            else:
                self.flows.expire(ts)
                self.network.flush(ts)
            i += 1
        self._next = i

    def _clocked(self, frames: Iterable[Frame]) -> Iterator[Frame]:
        for frame in frames:
            self._apply_until(frame.number)
            yield frame
        self._apply_until(float("inf"))
        if self._frag_max is not None:
            self.network.flush(self._frag_max)

    def process(self, frames: Iterable[Frame]) -> Iterator:
        return super().process(self._clocked(frames))

    def _tick(self, ts_ns: int) -> None:  # the global schedule is the clock
        return

    def finish(self) -> list:
        # the snaplen summary row is built once for the whole capture by the driver
        self.network._snaplen_unreported = 0
        return super().finish()


def _sort_key(spec: TableSpec) -> str:
    names = spec.column_names
    return "record_id" if "record_id" in names else "flow_id"


class RunSink:
    """``DatasetWriter`` stand-in for ``CaptureDissection`` inside a task.

    Rows are converted to Arrow every ``chunk`` rows; every ``run_rows`` rows of a table
    (and at ``close``) the buffered batches are sorted by record id (``flows``: flow id)
    and written as one run file ``<staging>/<table>/run-<piece>-<n>.parquet``.  Flow
    rows also feed ``flows_seen`` (local flow id, first frame) for the id remapping."""

    def __init__(self, staging: str | os.PathLike, piece: int, *, validate: bool,
                 run_rows: int = 262144, chunk: int = 4096) -> None:
        self.staging = Path(staging)
        self.piece = piece
        self.validate = validate
        self.run_rows = run_rows
        self.chunk = chunk
        self._rows: dict[str, list[Mapping[str, Any]]] = {}
        self._batches: dict[str, list[pa.RecordBatch]] = {}
        self._pending: dict[str, int] = {}
        self._specs: dict[str, TableSpec] = {}
        self._runs: Counter = Counter()
        self.rows: Counter = Counter()
        self.flows_seen: list[tuple[int, int]] = []
        self.files: list[str] = []

    def write_rows(self, spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> None:
        name = spec.name
        self._specs.setdefault(name, spec)
        buf = self._rows.setdefault(name, [])
        for row in rows:
            if name == FLOWS.name:
                self.flows_seen.append((row["flow_id"], row["frame_first"]))
            buf.append(row)
            if len(buf) >= self.chunk:
                self._convert(name)
                buf = self._rows[name]

    def _convert(self, name: str) -> None:
        rows = self._rows.get(name)
        if not rows:
            return
        spec = self._specs[name]
        batch = rows_to_batch(spec, rows, check_keys=self.validate)
        if self.validate:
            validate_batch(spec, batch)
        self._batches.setdefault(name, []).append(batch)
        self._pending[name] = self._pending.get(name, 0) + batch.num_rows
        self._rows[name] = []
        if self._pending[name] >= self.run_rows:
            self._write_run(name)

    def _write_run(self, name: str) -> None:
        batches = self._batches.pop(name, [])
        self._pending[name] = 0
        if not batches:
            return
        spec = self._specs[name]
        schema = arrow_schema(spec)
        table = pa.Table.from_batches(batches, schema=schema)
        table = table.sort_by(_sort_key(spec))
        out = self.staging / name / f"run-{self.piece:06d}-{self._runs[name]:06d}.parquet"
        self._runs[name] += 1
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name("." + out.name + ".tmp")
        pq.write_table(table, tmp, compression="lz4", row_group_size=65536)
        os.replace(tmp, out)
        self.rows[name] += table.num_rows
        self.files.append(str(out))

    def close(self) -> None:
        for name in list(self._rows):
            self._convert(name)
        for name in list(self._batches):
            self._write_run(name)

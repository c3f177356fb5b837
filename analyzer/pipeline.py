"""Capture → reassembly → detection → dissectors → rows → Parquet dataset.

Strategy: one pass over the reassembly events of a capture.  ``CaptureDissection`` is a
conveyor that names no protocol and does three things:

* route events to sessions: stream bytes, gaps and closes (and UDP datagrams) go to the
  flow's detection state, then its session (``analyzer.detect``); the events of the
  layers below the dissectors go to the layer dissectors that declare them
  (``dissectors.layers``); a session that raises is abandoned;
* turn records into rows in one place: every row gets its envelope (capture, flow,
  endpoints), its record id and its parent's, whether it came from a session's
  ``Record``, a ``ColumnBatch`` (a compiled fast path's columns) or a layer's ``LayerRow``;
* write to one ``analyzer.sink.Sink``: dict rows, and Arrow batches when the sink takes
  them (``Sink.columnar``; only then are ``ColumnarSession``s switched on).

Sessions learn their capabilities from ``dissectors.api``: a ``CarrierSession`` is hooked
into payload dispatch (``dissectors.dispatch``), a ``ColumnarSession`` asked to return
``ColumnBatch`` records.  Memory holds one batch per table plus the live flows — never
the capture.  Row ids are given out in emission order, which is fixed by the capture and
the options, so the same input gives the same rows in the same order.

A dissector that raises is a bug, not bad input: the pipeline records a
``pipeline.dissector_error`` anomaly, stops feeding that flow (the rest of its bytes
count as undecoded) and goes on; with ``strict`` (tests) it re-raises.  "Raises" means
any ``BaseException`` but ``KeyboardInterrupt``: a plugin whose library calls
``sys.exit()`` must not end the run as if it had succeeded.  A probe that raises drops
its dissector for that flow, with the same anomaly.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from analyzer.detect import Detector, FlowDispatch
from analyzer.digest import file_sha256
from analyzer.flowsummary import flow_row
from analyzer.manifest import CaptureRun, InputInfo, update_manifest
from analyzer.serverports import server_ports
from analyzer.sink import (
    BATCH_BYTES,
    CaptureLock,
    DatasetWriter,
    OutputError,
    OutputWriteError,
    Sink,
    binary_columns,
    row_bytes,
)
from dissectors.api import (
    DEFAULT_PAYLOAD_CAP,
    ColumnAccumulator,
    ColumnarSession,
    ColumnBatch,
    Dissector,
    Record,
    SessionOptions,
    Span,
)
from dissectors.arrowops import from_numpy, nulls, take
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.dispatch import PayloadDispatcher
from dissectors.entrypoints import version
from dissectors.layers import LayerDissector, LayerFacts, builtin_layers, stream_gap_anomaly
from dissectors.registry import Registry, discover
from dissectors.schema import arrow_schema, register_table, rows_to_batch
from dissectors.sessions import FramedSession
from dissectors.tables import TableSpec
from reassembly.capture import CaptureInfo, CaptureReader, open_capture
from reassembly.engine import KeyLog, capture_events
from reassembly.events import (
    DIRECTION_SHORT,
    DIRECTIONS,
    Anomaly,
    Datagram,
    Direction,
    FlowEnd,
    FlowInfo,
    StreamClose,
    StreamData,
    StreamDone,
    StreamGap,
)
from reassembly.flows import RoleSwaps
from reassembly.limits import Limits
from reassembly.native import maker
from reassembly.provenance import CoalescedData

TOOL_VERSION = version("msgcap") or "0+unknown"  # (not installed: a source tree)

FLOW_ROW_BITS = 32  # rows per flow before ids would collide: 4 G
FLOWLESS_BASE = 1 << 62
_FRAME_ROWS_KEPT = 65536  # frames remembered for numbering flowless rows
_FAST_BATCH_ROWS = 16384  # fast-path rows held before they become one Arrow batch
# ... or this much column data: the writer's batch bound (``BATCH_BYTES``).  Until
# 2026-11-28 256 MiB (below int32 Arrow offsets): with rows of large payloads (a
# ``--payload-cap`` above the default) an accumulator held up to that, outside the
# memory budget, and its batch was copied once more: 600 messages of 256 KiB (158 MB)
# peaked at 466 MB with ``--payload-cap 1048576`` (docs/performance.md, "Memory").
_FAST_BATCH_BYTES = BATCH_BYTES
# ``MSGCAP_FLOW_COALESCE=0``: ``dissect_capture`` takes the engine's runs in the
# reference's event order only (``CaptureDissection.may_reorder`` is never asked)
FLOW_COALESCE_SWITCH = "MSGCAP_FLOW_COALESCE"
_span = maker(Span)  # ``Span`` made in C: one a segment, run or datagram (``handle``)
# the flows table's byte counts by direction number (``_flow_row``)
_DECODED_BYTES = tuple(f"decoded_bytes_{short}" for short in DIRECTION_SHORT)
_UNDECODED_BYTES = tuple(f"undecoded_bytes_{short}" for short in DIRECTION_SHORT)


def flow_coalescing() -> bool:
    """Whether a run may take the engine's runs joined per flow (``run_dissection``'s
    ``reorder``): unless ``MSGCAP_FLOW_COALESCE=0``."""
    return os.environ.get(FLOW_COALESCE_SWITCH, "1") != "0"


class FlowOrderUnproven(Exception):
    """A run that took stretches of runs joined per flow (``may_reorder``) used state
    shared across flows: its rows are not proven to be the reference order's, so
    ``dissect_capture`` throws them away and dissects the capture again without."""


@dataclass
class Options:
    """The run's options.  Commands build it from their arguments with
    ``analyzer.runoptions.options_from_args`` (every check in one place); sessions get
    the part they need as a ``SessionOptions`` dict."""

    payload_cap: int | None = DEFAULT_PAYLOAD_CAP  # None keeps every byte
    decode_as: dict[int, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    keylog: str | None = None  # NSS key log file (SSLKEYLOGFILE format): decrypts captures
    strict: bool = False  # re-raise dissector exceptions (tests)
    validate: bool = False  # run every batch through the schema validator (tests)
    overwrite: bool = False
    # keep credentials (passwords, tokens, JWTs, ... of a CONNECT) in the tables; by
    # default they are replaced by their length and SHA-256 (dissectors.redaction)
    keep_secrets: bool = False
    # compiled fast paths (dissectors.api.ColumnarSession); False runs every dissector's
    # pure-Python reference alone.  Same output either way, so not part of as_json().
    fast: bool = True
    # payload decoding (dissectors.payload): None = off; else the --schema specs
    # (PATTERN=FILE), possibly none (--decode: detection by structure only)
    payload_schemas: tuple[str, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        """What goes into the manifest and Parquet metadata (reproducibility)."""
        lim = self.limits
        out = {
            "payload_cap": self.payload_cap,
            "decode_as": {str(k): v for k, v in sorted(self.decode_as.items())},
            "keylog": self.keylog,
            "keep_secrets": self.keep_secrets,
            "limits": {k: getattr(lim, k) for k in lim.__slots__ if k != "budget"},
        }
        if self.payload_schemas is not None:  # only when asked: older manifests unchanged
            out["payload_schemas"] = list(self.payload_schemas)
        return out


@dataclass
class CaptureResult:
    capture_id: str
    path: str
    rows: dict[str, int]
    anomalies: Counter
    flows_by_protocol: Counter
    packets: int
    bytes: int
    manifest: dict[str, Any]


def _anomaly_source(kind: str) -> str:
    return kind.split(".", 1)[0] if "." in kind else "pipeline"


def _move_ends(fd: FlowDispatch) -> tuple[Any, ...]:
    """What ``ColumnAccumulator.move`` takes after the record id, per direction (direction
    number, stream id, source and destination ip and port), then the client it was read
    with: ``FlowDispatch.ends``.  Why: ``_column_rows`` moves one or two batches per
    carried message, and getting the endpoints and their four fields each time cost ~25
    bytecodes and a call a batch.  A flow's endpoints change only when its roles are swapped
    (``FlowTable.swap_roles`` exchanges client and server), which makes ``flow.client``
    another object: the caller reads this again then."""
    flow = fd.flow
    sid = fd.stream_id
    ends: list[Any] = []
    for d in DIRECTIONS:  # (``FlowInfo.endpoint`` says which end is the source)
        src, dst = flow.endpoint(d)
        ends.append((int(d), sid, src.ip, src.port, dst.ip, dst.port))
    return (*ends, flow.client)


class CaptureDissection:
    """Turns the events of one capture into table rows (the conveyor: see the module
    docstring)."""

    def __init__(
        self,
        capture_id: str,
        writer: Sink,
        registry: Registry,
        options: Options,
    ) -> None:
        self.capture_id = capture_id
        if options.payload_schemas is not None:  # the payload_decoded columns
            from dissectors.payload.schemas import decoding_for
            from dissectors.payload.writer import DecodingWriter

            writer = DecodingWriter(writer, decoding_for(options.payload_schemas),
                                    keep_secrets=options.keep_secrets)
        self.writer: Sink = writer
        self.options = options
        # the payload schemas a DecodingWriter learned (state shared across flows)
        self._learned = getattr(writer, "engine", None) if options.payload_schemas is not None \
            else None
        # a stretch of runs was taken joined per flow (``may_reorder``), and the sessions
        # its runs went to
        self.reordered = False
        self._moved: list[Any] = []
        decode_as = {port: registry.get(name) for port, name in options.decode_as.items()}
        # one memory budget for the run: reassembly (``capture_events(job.limits)``) and
        # the sessions' buffers and decompressors (``options["memory_budget"]``) draw from it
        self.limits = options.limits.with_budget()
        # the ports that mark a flow's server side for reassembly (every dissector's)
        self.server_ports = server_ports(registry, options.decode_as)
        # ColumnarSessions fill columns (ColumnBatch records) only for a sink of batches;
        # payload dissectors read it as the ``columnar`` option
        self.columnar = options.fast and writer.columnar
        session_options: SessionOptions = {
            "payload_cap": options.payload_cap, "keep_secrets": options.keep_secrets,
            "memory_budget": self.limits.budget, "columnar": self.columnar,
            "watched_tables": getattr(writer, "watched_tables", frozenset())}
        self.payloads = PayloadDispatcher(
            list(registry.payload.values()), session_options, strict=options.strict
        )
        self.detector = Detector(
            list(registry.dissectors.values()), decode_as, session_options, self._on_session
        )
        self.detector.on_probe_error = self._probe_error
        # a flow joined late may show its roles (``capture_events(roles=...)``); the
        # anomaly saying so is written right after the bytes that showed them
        self.roles = RoleSwaps(immediate=True)
        self.detector.swap_roles = self.roles
        # rows of ColumnBatch records, per table, until they become an Arrow batch
        self._accs: dict[str, ColumnAccumulator] = {}
        # dict rows of an accumulator's table that follow its first N rows: (N, row)
        self._between: dict[str, list[tuple[int, dict]]] = {}
        self._between_bytes: dict[str, int] = {}  # captured bytes in them (``row_bytes``)
        layers = builtin_layers()
        self._layer_of: dict[type, type[LayerDissector]] = {
            ev: layer for layer in layers for ev in layer.events}
        self.tables: dict[str, TableSpec] = {s.name: s for s in registry.tables()}
        for spec in (FLOWS, ANOMALIES, *(t for layer in layers for t in layer.tables)):
            self.tables[spec.name] = spec
        self._facts: dict[int, LayerFacts] = {}  # what the layers learned, per flow
        # per session class: a ``FramedSession`` (takes a run of segments in one call)?
        self._framed: dict[type, bool] = {}
        # (flow id, inner stream id or None) -> detection state / session
        self._flows: dict[tuple[int, int | None], FlowDispatch] = {}
        self._inner_streams: dict[int, list[int]] = {}  # inner stream ids seen per flow
        # bytes of datagrams fed so far per UDP flow and direction (the next offset)
        self._udp_offsets: dict[tuple[int, Direction], int] = {}
        self._flow_rows: dict[int, int] = {}  # rows emitted so far per live flow
        self._frame_rows: OrderedDict[int, int] = OrderedDict()  # flowless rows per frame
        self.anomalies: Counter = Counter()
        self.flows_by_protocol: Counter = Counter()

    def _on_session(self, fd: FlowDispatch) -> None:
        """A flow has its session: give it the capabilities it declares (payload
        dispatch for a carrier, columns for a columnar fast path)."""
        session = fd.session
        flow = fd.flow
        name = fd.dissector.name if fd.dissector else ""
        server = (flow.server.ip, flow.server.port)
        for failed, exc in self.payloads.carry(session, name, server, flow.flow_id):
            self._anomaly_row(  # a payload dissector's new_state raised
                "pipeline.payload_dissector_error",
                f"{failed} new_state raised {exc!r}; it decodes nothing for this server",
                flow, None, None, None, None, None, "pipeline",
            )
        if self.columnar and isinstance(session, ColumnarSession):
            session.columnar(self.writer.owns(flow.flow_id))

    # -- rows -------------------------------------------------------------------------

    def _record_id(self, flow_id: int | None, frame: int | None) -> int:
        """Row ids that do not depend on how flows interleave in the capture.

        A flow's rows are numbered in the flow's own emission order under its flow id
        (``flow_id << 32 | n``); rows tied to no flow (link/IP/capture anomalies) under
        their frame (``2**62 + frame << 16 | k``).  The Spark split path, which sees each
        flow in a different task, reproduces exactly these ids.
        """
        if flow_id is not None:
            n = self._flow_rows.get(flow_id, 0)
            self._flow_rows[flow_id] = n + 1
            return (flow_id << FLOW_ROW_BITS) | n
        key = frame or 0
        k = self._frame_rows.pop(key, 0)
        self._frame_rows[key] = k + 1
        if len(self._frame_rows) > _FRAME_ROWS_KEPT:
            self._frame_rows.popitem(last=False)
        return FLOWLESS_BASE + (key << 16) + k

    def _envelope(self, fd: FlowDispatch, rec: Record, parent: int | None) -> dict[str, Any]:
        flow = fd.flow
        src, dst = flow.endpoint(rec.direction)
        return {
            "capture_id": self.capture_id,
            "flow_id": flow.flow_id,
            "record_id": self._record_id(flow.flow_id, None),
            "parent_record_id": parent,
            "direction": rec.direction.short,
            "stream_id": fd.stream_id,
            "src_ip": src.ip,
            "src_port": src.port,
            "dst_ip": dst.ip,
            "dst_port": dst.port,
            "ts_first": rec.ts_first_ns,
            "ts_last": rec.ts_last_ns,
            "offset_start": rec.offset_start,
            "offset_end": rec.offset_end,
            "frame_first": rec.frame_first,
            "frame_last": rec.frame_last,
        }

    def _emit_records(self, fd: FlowDispatch, records: list) -> None:
        """Rows of one event's records, handed to the sink one list per table."""
        pending: dict[str, list[dict]] = {}
        if len(records) == 1 and type(records[0]) is ColumnBatch:
            # the usual bulk case, and a carried message's (its row's children), kept short
            self._column_rows(fd, records[0], pending)
        else:
            self._collect(fd, records, None, pending)
        if pending:  # (most events' rows all went to the accumulators)
            for table, rows in pending.items():
                self._write_rows(table, rows)

    def _write_rows(self, table: str, rows: list[dict]) -> None:
        """Dict rows, after the columnar rows of the same table that precede them.

        They wait with the accumulator (each knowing how many of its rows come first)
        and are merged into its batch: flushing the accumulator for every dict row
        would make thousands of tiny batches of a capture full of gaps."""
        acc = self._accs.get(table)
        if acc is None or not len(acc):
            self.writer.write_rows(self.tables[table], rows)
            return
        waiting = self._between.setdefault(table, [])
        at = len(acc)
        waiting.extend((at, row) for row in rows)
        binary = binary_columns(self.tables[table])
        held = self._between_bytes.get(table, 0)
        if binary:  # (rows that may hold a payload kept whole: bounded by bytes too)
            for row in rows:
                held += row_bytes(binary, row)
            self._between_bytes[table] = held
        if at + len(waiting) >= _FAST_BATCH_ROWS or acc.nbytes + held >= _FAST_BATCH_BYTES:
            self._flush_columns(table)

    def _column_rows(self, fd: FlowDispatch, batch: ColumnBatch,
                     pending: dict[str, list[dict]]) -> None:
        """Rows a session's fast path left in its column buffer: ids and envelope here,
        in the order the ``ColumnBatch`` stands among the session's records."""
        flow = fd.flow
        fid = flow.flow_id
        table, d, n, rows, fmt, kids = batch
        flow_rows = self._flow_rows
        n0 = flow_rows.get(fid, 0)
        flow_rows[fid] = n0 + n
        if kids:  # from the last row's payload
            if len(kids) == 1 and type(kids[0]) is ColumnBatch:
                # a carried message's row (what ``_collect`` would do with it, its frame
                # and loop left out: one a message)
                self._column_rows(fd, kids[0], pending)
            else:
                self._collect(fd, kids, (fid << FLOW_ROW_BITS) | (n0 + n - 1), pending)
        if rows is None:  # parsed and counted only: another worker writes this flow
            return
        if pending:
            before = pending.pop(table, None)
            if before:
                self._write_rows(table, before)
        acc = self._accs.get(table)
        if acc is None:
            acc = self._accs[table] = fmt.accumulator()
        ends = fd.ends
        if ends is None or ends[2] is not flow.client:  # (first row, or roles swapped)
            ends = fd.ends = _move_ends(fd)
        # (unpacked, not ``*ends[d]``: a call with a star argument builds its tuple of
        # arguments, ~0.1 µs more per call than the ~10 more bytecodes this takes)
        dn, sid, src_ip, src_port, dst_ip, dst_port = ends[d]
        acc.move(rows, n, fid, (fid << FLOW_ROW_BITS) | n0, dn, sid, src_ip, src_port,
                 dst_ip, dst_port)
        if len(acc) >= _FAST_BATCH_ROWS or acc.nbytes >= _FAST_BATCH_BYTES:
            self._flush_columns(table)

    def _flush_columns(self, table: str) -> None:
        acc = self._accs.get(table)
        waiting = self._between.pop(table, [])
        self._between_bytes.pop(table, None)
        if acc is None or not len(acc):
            if waiting:
                self.writer.write_rows(self.tables[table], [row for _, row in waiting])
            return
        spec = self.tables[table]
        schema = arrow_schema(spec)
        batch = acc.to_batch(schema, self.capture_id)
        if waiting:
            batch = _interleave(spec, schema, batch, waiting)
        self.writer.write_batch(spec, batch)

    def finish(self) -> None:
        """Write what the accumulators still hold (call before closing the writer)."""
        for table in list(self._accs):
            self._flush_columns(table)

    def _collect(
        self,
        fd: FlowDispatch,
        records: Iterable[Record],
        parent: int | None,
        pending: dict[str, list[dict]],
    ) -> None:
        for rec in records:
            if type(rec) is ColumnBatch:
                self._column_rows(fd, rec, pending)
                continue
            # (the name only for a Record: a carried message's ColumnBatch comes through
            # here, one call each, and needs none)
            name = fd.dissector.name if fd.dissector else "?"
            if rec.table == ANOMALIES.name:
                v = rec.values
                self._anomaly_row(
                    v.get("kind", f"{name}.anomaly"),
                    v.get("detail", ""),
                    fd.flow,
                    rec.direction,
                    rec.ts_first_ns,
                    rec.frame_first,
                    rec.offset_start,
                    rec.offset_end - rec.offset_start,
                    f"dissector:{name}",
                )
                continue
            row = self._envelope(fd, rec, parent)
            row.update(rec.values)
            spec = self.tables.get(rec.table)
            if spec is None:
                self._anomaly_row(
                    "pipeline.unknown_table",
                    f"{name} produced a row for undeclared table {rec.table!r}",
                    fd.flow,
                    rec.direction,
                    rec.ts_first_ns,
                    rec.frame_first,
                    None,
                    None,
                    "pipeline",
                )
                continue
            rows = pending.get(rec.table)
            if rows is None:
                rows = pending[rec.table] = []
            rows.append(row)
            if rec.children:
                self._collect(fd, rec.children, row["record_id"], pending)

    def _layer_rows(self, layer: type[LayerDissector], ev: Any) -> None:
        """The rows of a layer's event (``dissectors.layers``), and its flow facts."""
        flow = ev.flow
        facts = self._facts.get(flow.flow_id)
        if facts is None:
            facts = self._facts[flow.flow_id] = LayerFacts()
        for spec, direction, row in layer.rows(ev, facts):
            src, dst = flow.endpoint(direction)
            row.update({
                "capture_id": self.capture_id,
                "flow_id": flow.flow_id,
                "record_id": self._record_id(flow.flow_id, None),
                "src_ip": src.ip,
                "src_port": src.port,
                "dst_ip": dst.ip,
                "dst_port": dst.port,
            })
            self.writer.write_rows(spec, [row])

    def _anomaly_row(self, kind, detail, flow, direction, ts_ns, frame, offset, nbytes, source):
        self.anomalies[kind] += 1
        self.writer.write_rows(
            ANOMALIES,
            [
                {
                    "capture_id": self.capture_id,
                    "record_id": self._record_id(flow.flow_id if flow is not None else None, frame),
                    "flow_id": flow.flow_id if flow is not None else None,
                    "direction": direction.short if direction is not None else None,
                    "kind": kind,
                    "detail": detail,
                    "ts": ts_ns,
                    "frame": frame,
                    "offset": offset,
                    "nbytes": nbytes,
                    "source": source,
                }
            ],
        )

    def _flow_row(self, info: FlowInfo, fds: list[FlowDispatch]) -> None:
        """The flow's summary; for a flow of inner streams, accounting summed over them."""
        row = flow_row(info)
        row["capture_id"] = self.capture_id
        row["ts_first"] = row.pop("ts_first_ns")
        row["ts_last"] = row.pop("ts_last_ns")
        claimed = [fd for fd in fds if fd.session is not None and fd.dissector is not None]
        facts = self._facts.get(info.flow_id) or LayerFacts()
        # nobody read what the layers carried: the layer names the flow
        protocol = claimed[0].dissector.name if claimed else facts.protocol
        row["protocol"] = protocol
        self.flows_by_protocol[protocol or "(unclaimed)"] += 1
        sessions = [fd.session for fd in claimed]
        # a session that raised (_Abandoned) lost the count of the call that raised: what
        # it did not decode is, by definition, undecoded; so is what unclaimed streams
        # carried.  (Loops, not generators and the enum's iterator: one flow row each.)
        exact = bool(sessions) and not facts.inner_streams
        for s in sessions:
            if isinstance(s, _Abandoned):
                exact = False
        for d in DIRECTIONS:
            decoded = undecoded = 0
            for s in sessions:
                decoded += s.decoded_bytes[d]
                undecoded += s.undecoded_bytes[d]
            if not exact:  # everything delivered and not decoded stayed undecoded
                undecoded = info.stream_bytes[d] - decoded
            row[_DECODED_BYTES[d]] = decoded
            row[_UNDECODED_BYTES[d]] = undecoded
        row.update(facts.values)
        row["layers"] = list(facts.layers)
        self.writer.write_rows(FLOWS, [row])

    # -- events -----------------------------------------------------------------------

    def _guarded(
        self,
        fd: FlowDispatch,
        call: Callable[..., list[Record]],
        ts_ns: int | None,
        frame: int | None,
        *args: Any,
    ) -> None:
        """``call(*args)``: its records as rows; an exception it raises becomes the
        flow's dissector error (``_dissector_error``)."""
        try:
            records = call(*args)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit of a plugin too
            self._dissector_error(fd, exc, ts_ns, frame)
            return
        if records:
            self._emit_records(fd, records)

    def _dissector_error(self, fd: FlowDispatch, exc: BaseException, ts_ns: int | None,
                         frame: int | None) -> None:
        """A dissector raised: record it and stop decoding the flow (strict: re-raise)."""
        if self.options.strict:
            raise exc
        name = fd.dissector.name if fd.dissector else "?"
        self._anomaly_row(
            "pipeline.dissector_error",
            f"{name} raised {exc!r}; the rest of this flow is left undecoded",
            fd.flow,
            None,
            ts_ns,
            frame,
            None,
            None,
            "pipeline",
        )
        self._abandon(fd)

    def _probe_error(self, fd: FlowDispatch, cand: type[Dissector],
                     exc: BaseException) -> None:
        """``cand.probe`` raised on this flow's first bytes: it is no longer offered the
        flow (``Detector``); recorded at the segment that made it raise (strict: raised)."""
        if self.options.strict:
            raise exc
        span = fd.held[-1][3] if fd.held and fd.held[-1][0] == "data" else None
        self._anomaly_row(
            "pipeline.dissector_error",
            f"{cand.name} probe raised {exc!r}; {cand.name} is not tried on this flow",
            fd.flow,
            None,
            span.ts_first_ns if span is not None else None,
            span.frame_first if span is not None else None,
            None,
            None,
            "pipeline",
        )

    def _abandon(self, fd: FlowDispatch) -> None:
        """After a dissector bug: keep counting, stop decoding."""
        if fd.session is not None:
            fd.session = _Abandoned(fd.session)
        else:  # it raised before the flow had a session (in session()): stop probing,
            fd.unclaimed = True  # else every later segment would retry and raise again
            fd.held.clear()

    def _dispatch(self, flow: FlowInfo, stream_id: int | None = None) -> FlowDispatch:
        """The dispatch of a flow, or of one inner stream of a flow (``stream_id``)."""
        key = (flow.flow_id, stream_id)
        fd = self._flows.get(key)
        if fd is None:
            fd = self._flows[key] = self.detector.start(flow, stream_id)
            if stream_id is not None:
                self._inner_streams.setdefault(flow.flow_id, []).append(stream_id)
        return fd

    def handle(self, ev: object) -> None:
        cls = type(ev)
        if cls is CoalescedData:  # (first: the bulk of a capture's events)
            self._coalesced(ev)
            return
        if cls is StreamData:
            flow, sid = ev.flow, ev.stream_id
            fd = self._flows.get((flow.flow_id, sid))  # (``_dispatch``, inline)
            if fd is None:
                fd = self._dispatch(flow, sid)
            self._feed(fd, ev.direction, ev.data, _span(ev.offset, ev.ts_first_ns, ev.ts_last_ns,
                                                        ev.frame_first, ev.frame_last))
            ready = self.roles.ready
            while ready:  # detection swapped the flow's roles (``RoleSwaps``)
                self.handle(ready.pop(0))
            return
        self._other(ev)

    def _other(self, ev: object) -> None:
        """``handle`` for every event but stream data (apart: the closures here would make
        ``handle`` build three cells per call, one call per segment)."""
        layer = self._layer_of.get(type(ev))
        if layer is not None:
            self._layer_rows(layer, ev)
        elif isinstance(ev, StreamGap):
            fd = self._dispatch(ev.flow, ev.stream_id)
            # lost stream bytes are an anomaly of their own, whatever a dissector makes of
            # them: a capture with missing data is never "clean" (docs/robustness.md)
            kind, detail, source = stream_gap_anomaly(ev)
            self._anomaly_row(kind, detail, ev.flow, ev.direction, ev.ts_ns, ev.frame,
                              ev.offset, ev.nbytes, source)
            self._guarded(
                fd,
                lambda: self.detector.gap(fd, ev.direction, ev.offset, ev.nbytes, ev.ts_ns),
                ev.ts_ns,
                ev.frame,
            )
        elif isinstance(ev, StreamClose):
            fd = self._dispatch(ev.flow)
            self._guarded(fd, lambda: self.detector.close(fd, ev.ts_ns), ev.ts_ns, None)
            self._flow_row(ev.flow, [fd])
            self._forget(ev.flow.flow_id, [None])
        elif isinstance(ev, Datagram):
            self._datagram(ev)
        elif isinstance(ev, StreamDone):
            self._done(ev)
        elif isinstance(ev, FlowEnd):
            # inner streams are closed with their flow (their own end events are not)
            sids = self._inner_streams.pop(ev.flow.flow_id, [])
            fds = [self._flows[(ev.flow.flow_id, sid)] for sid in sorted(sids)]
            plain = self._flows.get((ev.flow.flow_id, None))  # a UDP flow's datagrams
            if plain is not None:
                fds.insert(0, plain)
                sids = [None, *sids]
                for d in Direction:
                    self._udp_offsets.pop((ev.flow.flow_id, d), None)
            for fd in fds:
                self._guarded(fd, lambda fd=fd: self.detector.close(fd, ev.ts_ns), ev.ts_ns, None)
            self._flow_row(ev.flow, fds)
            self._forget(ev.flow.flow_id, sids)
        elif isinstance(ev, Anomaly):
            self._anomaly_row(
                ev.kind,
                ev.detail,
                ev.flow,
                ev.direction,
                ev.ts_ns,
                ev.frame,
                ev.offset,
                ev.nbytes,
                _anomaly_source(ev.kind),
            )

    def _done(self, ev: StreamDone) -> None:
        """Both sides of a TCP flow closed with every byte delivered: its session is
        closed now and an ``_Ended`` keeps its counts until the flow's ``StreamClose``
        (one linger later: the flow row, written then, counts the last ACK and late
        duplicates).  Why: the sessions of lingering flows were most of what a capture
        of many short connections held, and what every collection of the garbage
        collector walked again (``StreamDone``)."""
        fid = ev.flow.flow_id
        fd = self._flows.get((fid, None))
        if fd is None or fid in self._inner_streams:
            return
        self._guarded(fd, lambda: self.detector.close(fd, ev.ts_ns), ev.ts_ns, None)
        session = fd.session
        if session is not None and type(session) is not _Abandoned:
            fd.session = _Ended(session, fd.flow, self._after_close)

    def _after_close(self, flow: FlowInfo, direction: Direction, data: bytes,
                     span: Span) -> None:
        """Bytes reached a flow whose decoding ended at its ``StreamDone`` (``_Ended``)."""
        self._anomaly_row(
            "pipeline.data_after_close",
            f"{len(data)} bytes at offset {span.offset} came after both sides had closed "
            "with every byte delivered, when this flow's decoding had ended: counted "
            "undecoded (the flow's undecoded bytes), as is any later byte of the flow",
            flow, direction, span.ts_first_ns, span.frame_first, span.offset, len(data),
            "pipeline")

    def cross_flow(self) -> list[str]:
        """The state shared across flows this run has used so far: a payload dissector's
        decode that is not flow-local, and the scopes' other lasting changes (a probe that
        raised, exact bindings dropped), a payload schema learned, the memory budget
        asking a holder to give memory back (which holder depends on the order of all
        flows' holds)."""
        reasons = []
        payloads = self.payloads
        if payloads.decoded or any(sd.probe_failed or sd.dropped_bindings
                                   for sd in payloads.scopes.values()):
            reasons.append("payload")
        if self._learned is not None and self._learned.learned_from:
            reasons.append("payload schema")
        budget = self.limits.budget
        if budget is not None and budget.releases:
            reasons.append("memory budget")
        return reasons

    def may_reorder(self, flows: list[tuple[FlowInfo, int]]) -> bool | None:
        """``capture_events``' ``reorder``: whether a stretch of runs joined per flow
        (each flow's events in its order, flows interleaved otherwise; the engine checked
        that the stretch's bytes fit in the budget's room, so no order of them makes the
        budget reclaim) may be fed so.  Only while no state shared across flows was used
        (``cross_flow``): then the order of flows is invisible in every row and record id
        (``_record_id`` numbers per flow); and only when every run goes to a flow whose
        session is decided and draws from the budget no more than the bytes it is fed (a
        ``FramedSession`` whose framers hold what they buffer: no layer in front of them,
        the session itself no memory holder), or to a flow nobody decodes, and which no
        layer above TCP has taken (no ``LayerFacts``: what a layer's connection holds, a
        decompressor's, is not bounded by the bytes fed).  None once
        shared state was used: a run that took such a stretch before is not proven
        (``FlowOrderUnproven``), one that took none goes on in the reference's order.
        Same when a session the last such stretch fed put a layer in front of its framer
        (a decompressor may hold more than the bytes fed)."""
        if self._unproven():
            if self.reordered:
                raise FlowOrderUnproven(", ".join(self.cross_flow()) or "a layer")
            return None
        moved = []
        flows_fd = self._flows
        for info, _direction in flows:
            fd = flows_fd.get((info.flow_id, None))
            if fd is None or info.flow_id in self._facts:  # (a layer took it: it may
                return False  # hold more than the bytes fed)
            session = fd.session
            if session is None:
                if not fd.unclaimed:
                    return False
                continue
            if type(session) in _STAND_INS:
                continue
            framed = self._framed.get(type(session))
            if framed is None:
                framed = self._framed[type(session)] = isinstance(session, FramedSession)
            if (not framed or hasattr(session, "release_memory")
                    or session.layers[0] is not None or session.layers[1] is not None):
                return False
            moved.append(session)
        self.reordered = True
        self._moved = moved
        return True

    def _unproven(self) -> bool:
        """Whether a stretch joined per flow could now differ from the reference order."""
        return bool(self.cross_flow()) or any(
            layer is not None for session in self._moved for layer in session.layers)

    def check_order(self) -> None:
        """At the end of a run: raise ``FlowOrderUnproven`` if it took a stretch joined
        per flow and state shared across flows was used since (``may_reorder``)."""
        if self.reordered and self._unproven():
            raise FlowOrderUnproven(", ".join(self.cross_flow()) or "a layer")

    def _coalesced(self, ev: CoalescedData) -> None:
        """A run of in-order segments of one TCP direction (``CoalescedData``): one
        ``FramedSession.feed_chunks`` call when the flow has such a session and the run's
        memory budget has room for all of its bytes (so the budget asks no holder to give
        memory back where one feed per segment would not have, and the other way round);
        nothing for a flow nobody decodes (``Detector.data`` drops its bytes), one count
        for a session that raised (``_Abandoned``); else, as before its session is
        decided, the ``StreamData`` it stands for."""
        fd = self._flows.get((ev.flow.flow_id, None))
        if fd is not None:
            session = fd.session
            if session is None:
                if fd.unclaimed:
                    return
            elif type(session) in _STAND_INS:
                session.feed(ev.direction, ev.data, ev.span())
                return
            else:
                framed = self._framed.get(type(session))
                if framed is None:
                    framed = self._framed[type(session)] = isinstance(session, FramedSession)
                data = ev.data
                budget = self.limits.budget
                if framed and (budget is None or budget.limit_bytes - budget.used >= len(data)):
                    chunks = ev.chunks()  # (the span from its records: no second unpack)
                    first, last = chunks[0], chunks[-1]
                    self._guarded(fd, session.feed_chunks,  # type: ignore[attr-defined]
                                  first[1], first[3], ev.direction, data,
                                  _span(ev.offset, first[1], last[2], first[3], last[4]), chunks)
                    return
        # a part is turned once an earlier one showed the roles swapped, unless the run
        # came already turned (``RoleSwaps.events``: it was emitted before a swap)
        turned = self.roles.turns(ev.flow)
        for part in ev.split():
            self.handle(part if turned else self.roles.turn(part))

    def _datagram(self, ev: Datagram) -> None:
        """A UDP datagram that no layer took (a layer takes its own) is one ``feed`` of
        its flow's session: a datagram protocol's message is the datagram, so dissectors
        of ``Transport.UDP`` get whole datagrams.  Offsets count the direction's datagram
        bytes, the same bytes ``flows.stream_bytes`` counts for UDP."""
        fd = self._dispatch(ev.flow)
        key = (ev.flow.flow_id, ev.direction)
        offset = self._udp_offsets.get(key, 0)
        self._udp_offsets[key] = offset + len(ev.data)
        self._feed(fd, ev.direction, ev.data, _span(offset, ev.ts_ns, ev.ts_ns, ev.frame, ev.frame))

    def _feed(self, fd: FlowDispatch, direction: Direction, data: bytes, span: Span) -> None:
        """Bytes of a stream or a datagram to the flow's detection or session
        (``_guarded`` without its closure: this is the per-segment path).  A flow with
        its session is fed directly: all ``Detector.data`` would do."""
        session = fd.session
        try:
            if session is not None:
                records = session.feed(direction, data, span)
            else:
                records = self.detector.data(fd, direction, data, span)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit of a plugin too
            self._dissector_error(fd, exc, span.ts_first_ns, span.frame_first)
            return
        if records:
            self._emit_records(fd, records)

    def _forget(self, flow_id: int, stream_ids: list[int | None]) -> None:
        for sid in stream_ids:
            self._flows.pop((flow_id, sid), None)
        self._flow_rows.pop(flow_id, None)
        self._facts.pop(flow_id, None)


MAX_INTERLEAVED_PIECES = 16
"""Above this many slices, ``_interleave`` copies its result into one batch."""

MAX_TAKE_BYTES = 16 << 20
"""A batch's stretch among its dict rows up to this size is interleaved by one ``take``
when it would be cut into more than ``MAX_INTERLEAVED_PIECES`` slices (``_interleave``)."""


def _interleave(spec: TableSpec, schema: pa.Schema, batch: pa.RecordBatch,
                waiting: list[tuple[int, dict]]) -> pa.Table:
    """``batch`` (fast-path rows) with the dict rows ``(n, row)`` put after its first
    ``n`` rows: one conversion of the dict rows, then slices of both, no copy.  Why: a
    ``take`` copied the whole batch, payloads and all, and on bulk traffic nearly every
    batch has a few dict rows (a connection's PING/PONG); the sink writes a row group from
    slices as it does from one batch (``DatasetWriter._drain_batches``).

    A batch that would be cut into many slices is copied anyway (below), and for one of
    at most ``MAX_TAKE_BYTES`` a ``take`` of batch and rows in one index makes that copy
    (~3x less CPU than slicing then joining, on a capture of many short flows: three
    INFO/CONNECT rows per flow between the fast path's rows): its transient is a third
    copy of the batch (Arrow joins the two sources first), hence the bound.  Only the
    stretch of the batch from the first dict row's place to the last's is taken; the rows
    before and after it stay slices.  Why: the first batch of a bulk run holds every
    connection's opening rows (handshake, subscriptions) among its first few dozen rows,
    and taking the whole batch (11 MB of payloads) was 15-32 ms of a 0.75 s run (the 103
    MB bulk recording of docs/performance.md; 7 ms now)."""
    # (an undeclared key raises, validating or not: as the sink's and the columns' rows)
    rows = rows_to_batch(spec, [row for _, row in waiting])
    if not rows.schema.equals(schema):  # (a cast of an equal schema costs ~0.5 ms)
        rows = rows.cast(schema)
    m = len(waiting)
    ats = [at for at, _ in waiting] if m > MAX_INTERLEAVED_PIECES // 2 else None
    if ats is not None and _slices(ats, batch.num_rows) > MAX_INTERLEAVED_PIECES:
        lo, hi = ats[0], ats[-1]
        span = batch.slice(lo, hi - lo)
        if span.nbytes <= MAX_TAKE_BYTES:
            # (``arrowops``: ``Table.take`` would import ``pyarrow.compute``, ~45 ms)
            # column by column: one null in both is a kept null column, not taken (~40 %
            # of a carrier batch's columns; ~35 % less CPU than taking the whole table)
            order = _interleaved_order([at - lo for at in ats], hi - lo)
            joined = pa.Table.from_batches([span, rows], schema=schema)
            size = joined.num_rows
            middle = pa.Table.from_arrays(
                [nulls(c.type, size) if c.null_count == size else take(c, order)
                 for c in joined.columns], schema=schema)
            pieces = [middle]
            if lo:
                pieces.insert(0, pa.Table.from_batches([batch.slice(0, lo)], schema=schema))
            if hi < batch.num_rows:
                pieces.append(pa.Table.from_batches([batch.slice(hi)], schema=schema))
            return pa.concat_tables(pieces)
    parts = []
    done = i = 0  # rows of ``batch`` / of ``rows`` placed so far
    while i < m:
        at = waiting[i][0]
        j = i + 1
        while j < m and waiting[j][0] == at:  # dict rows that follow one another
            j += 1
        if at > done:
            parts.append(batch.slice(done, at - done))
            done = at
        parts.append(rows.slice(i, j - i))
        i = j
    if done < batch.num_rows:
        parts.append(batch.slice(done))
    table = pa.Table.from_batches(parts, schema=schema)
    # many pieces are joined into one batch (a copy, as the ``take`` was): each piece is a
    # chunk the sink carries and Parquet encodes on its own, and a stream cut by gaps every
    # few rows made thousands of them (tests/hostile's endless out-of-order segments: peak
    # RSS 327 MB against its bound of 150 MB over the baseline, and 3x the time)
    return table.combine_chunks() if len(parts) > MAX_INTERLEAVED_PIECES else table


def _slices(ats: list[int], n: int) -> int:
    """How many slices ``_interleave`` cuts a batch of ``n`` rows and the dict rows placed
    at ``ats`` (non-decreasing, at most ``n``) into: each group of adjacent dict rows, and
    the batch rows before each group and after the last."""
    groups = 1 + sum(1 for a, b in zip(ats, ats[1:], strict=False) if a != b)
    return 2 * groups - 1 + (ats[0] > 0) + (ats[-1] < n)


def _interleaved_order(ats: list[int], n: int) -> pa.Array:
    """Indexes into ``batch`` + ``rows`` (``n`` batch rows, then one per ``ats``) that put
    dict row ``i`` after the first ``ats[i]`` batch rows.  ``ats`` is non-decreasing
    (the accumulator only grew while rows waited) and at most ``n``."""
    import numpy as np

    m = len(ats)
    landing = np.array(ats, np.int64) + np.arange(m)  # where dict row i stands in the result
    order = np.empty(n + m, np.int64)
    from_batch = np.ones(n + m, bool)
    from_batch[landing] = False
    order[landing] = np.arange(n, n + m)
    order[from_batch] = np.arange(n)
    return from_numpy(order)


class _StandIn:
    """Stands in for a session that no longer decodes: keeps its counts and counts what
    still comes undecoded (the flow row reads them)."""

    __slots__ = ("decoded_bytes", "undecoded_bytes")

    def __init__(self, session: Any) -> None:
        self.decoded_bytes = list(session.decoded_bytes)
        self.undecoded_bytes = list(session.undecoded_bytes)

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        self.undecoded_bytes[direction] += len(data)
        return []

    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        return []

    def close(self, ts_ns: int) -> list[Record]:
        return []


class _Abandoned(_StandIn):
    """Stands in for a session that raised (``pipeline.dissector_error``)."""

    __slots__ = ("_broken",)

    def __init__(self, broken: Any) -> None:
        super().__init__(broken)
        self._broken = broken


class _Ended(_StandIn):
    """Stands in for a session ended at its flow's ``StreamDone`` (``CaptureDissection.
    _done``) until the flow's close, without it: bytes that still come (sent after a FIN:
    ``tcp.data_after_fin``) are counted undecoded, the first of them reported
    (``report``), once a flow."""

    __slots__ = ("_flow", "_report")

    def __init__(self, ended: Any, flow: FlowInfo,
                 report: Callable[[FlowInfo, Direction, bytes, Span], None]) -> None:
        super().__init__(ended)
        self._flow = flow
        self._report: Callable[[FlowInfo, Direction, bytes, Span], None] | None = report

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        if data and self._report is not None:
            self._report(self._flow, direction, data, span)
            self._report = None
        return super().feed(direction, data, span)


# the sessions' stand-ins: they take bytes only to count them
_STAND_INS = (_Abandoned, _Ended)


def dissect_capture(
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    options: Options | None = None,
    registry: Registry | None = None,
    wrap: Callable[[CaptureReader, Iterable], Iterable] | None = None,
    *,
    workers: int = 1,
) -> CaptureResult:
    """Dissect one capture into ``out_dir`` (one Hive partition) and update the manifest.

    ``workers`` > 1: ``analyzer.parallel.dissect_parallel`` (the same rows, written by
    that many processes split by flow, one part file each); ``wrap`` then runs in
    worker 0 and must be picklable."""
    if workers != 1:
        from analyzer.parallel import dissect_parallel

        return dissect_parallel(path, out_dir, workers, options, registry, wrap)
    options = options or Options()
    registry = registry or discover()
    for spec in registry.tables():
        register_table(spec)
    sha = file_sha256(path)
    capture_id = sha[:16]
    lock = CaptureLock(out_dir, capture_id, path).acquire()  # CaptureBusyError: refused
    settled = True  # False while this run has files or an outcome not yet recorded
    # runs joined per flow (``CaptureDissection.may_reorder``) unless switched off; a
    # run whose rows that leaves unproven is thrown away and made again without
    reorder = flow_coalescing()
    try:
        while True:
            writer = DatasetWriter(
                out_dir,
                capture_id,
                sha,
                TOOL_VERSION,
                options.as_json(),
                validate=options.validate,
                overwrite=options.overwrite,
            )
            settled = False
            try:
                job = CaptureDissection(capture_id, writer, registry, options)
                try:
                    info, error = run_dissection(job, path, writer, wrap, reorder=reorder)
                except FlowOrderUnproven:
                    writer.abort()
                    settled, reorder = True, False
                    continue
                writer.close(ensure_tables=list(job.tables.values()))
                run = CaptureRun.from_writer(writer, input_info(path, sha, info), error)
                manifest = write_manifest(out_dir, run)
            except OutputError as exc:
                settled = record_output_fault(out_dir, writer, bare_input_info(path, sha), exc)
                raise
            except BaseException:  # not a capture, a bug, strict, Ctrl-C: nothing is kept
                writer.abort()
                settled = True
                raise
            settled = True
            break
    finally:
        lock.release(finished=settled)
    return CaptureResult(
        capture_id,
        str(path),
        run.rows,
        job.anomalies,
        job.flows_by_protocol,
        info.packets,
        info.file_size,
        manifest,
    )


def run_dissection(
    job: CaptureDissection,
    path: str | os.PathLike,
    writer: Any,
    wrap: Callable[[CaptureReader, Iterable], Iterable] | None = None,
    split: Any = None,
    *,
    reorder: bool = False,
) -> tuple[CaptureInfo, str | None]:
    """The read loop of one capture (also each worker's, ``analyzer.parallel``): every
    event through ``job``, then what the fast path still holds.  Returns the reader's
    facts and the error that ended the run early, if any (strict: raised, output
    aborted).  The caller hashed the file (the capture id names the partition).
    ``split`` (``reassembly.engine.FlowSplit``): reassemble only the flows it owns.
    ``reorder``: the engine may join runs per flow (``CaptureDissection.may_reorder``);
    raises ``FlowOrderUnproven`` when that run's rows are not proven (output left to the
    caller), also for a run that ended in an error after such a stretch."""
    options = job.options
    error: str | None = None
    with open_capture(path, digest=False) as reader:
        try:
            keylog = KeyLog.from_file(options.keylog) if options.keylog else None
            events = capture_events(reader, job.limits, keylog, split, job.server_ports,
                                    job.roles, chunks=True,
                                    reorder=job.may_reorder if reorder else None,
                                    stream_done=True)
            for ev in wrap(reader, events) if wrap is not None else events:
                job.handle(ev)
            job.check_order()
        except (OutputError, FlowOrderUnproven):  # the caller ends or repeats the run
            raise
        except Exception as exc:
            if job.reordered:  # (where it stopped may depend on the order of flows)
                raise FlowOrderUnproven(f"{type(exc).__name__}: {exc}") from exc
            if options.strict:
                writer.abort()
                raise
            error = f"{type(exc).__name__}: {exc}"
        info = reader.info
    job.finish()
    return info, error


def write_manifest(out_dir: str | os.PathLike, run: CaptureRun) -> dict[str, Any]:
    """``update_manifest``, its OS errors (a full disk) as ``OutputWriteError``."""
    try:
        return update_manifest(out_dir, run)
    except OutputError:
        raise
    except OSError as exc:
        raise OutputWriteError.from_os_error(exc, out_dir) from exc


def record_output_fault(out_dir: str | os.PathLike, writer: DatasetWriter, info: InputInfo,
                        exc: OutputError) -> bool:
    """After ``exc`` ended a run: delete the files of the run that are not finished
    (Parquet without its footer is unreadable; deleting also gives back the space a
    manifest needs) and record the capture as failed, with ``exc``'s message, in the
    manifest (rows: none, or those of the finished files when only the manifest could
    not be written).  False when even that could not be written: the run's lock file
    then stays in OUT as the mark of a capture that did not finish."""
    if not writer.closed:
        writer.abort()
    run = CaptureRun.from_writer(writer, info, f"output: {exc.message}")
    try:
        update_manifest(out_dir, run)
    except OSError:
        return False
    return True


def bare_input_info(path: str | os.PathLike, sha: str) -> InputInfo:
    """Input facts without a dissection (a run that ended before giving its own)."""
    fmt = "unknown"
    with contextlib.suppress(Exception), open_capture(path) as reader:
        info = reader.info
        fmt = info.format + ("" if info.compression == "none" else f"+{info.compression}")
    return InputInfo(str(path), os.path.getsize(path), sha, fmt)


def input_info(path: str | os.PathLike, sha: str, info: CaptureInfo) -> InputInfo:
    """The manifest's facts about the input file."""
    return InputInfo(
        str(path),
        info.file_size,
        sha,
        info.format + ("" if info.compression == "none" else f"+{info.compression}"),
        [str(lt) for lt in info.link_types],
        info.packets,
        [{"offset": d.offset, "reason": d.reason, "frame": d.frame} for d in info.damage],
    )


def tables_for(registry: Registry) -> list[TableSpec]:
    layers = [t for layer in builtin_layers() for t in layer.tables]
    return [FLOWS, ANOMALIES, *layers, *registry.tables()]


def dissector_classes(registry: Registry) -> list[type[Dissector]]:
    return [registry.dissectors[n] for n in sorted(registry.dissectors)]


def output_dir_exists(out_dir: str | os.PathLike) -> bool:
    return Path(out_dir).exists()

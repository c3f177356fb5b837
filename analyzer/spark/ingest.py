"""``msgcap spark ingest``: captures → the same Parquet dataset as ``msgcap dissect``
(user guide and the full account of each pass: docs/spark.md).

* **Many captures**: one Spark task per file, each running the local path's dissection
  (``analyzer.pipeline.run_dissection``), so its rows are those of ``msgcap dissect`` by
  construction.  Compressed captures, captures of at most ``split_bytes`` and captures
  the split path refuses (damaged ones) go this way.
* **One huge capture**: byte ranges (``analyzer.spark.split``): pass 1 finds record
  boundaries and frame counts, pass 2 learns the facts the local run derives from the
  whole capture (``analyzer.spark.task.range_stats``), pass 3 re-keys frames **by
  connection** (``conn_key``; a hinted server's connections under one key), gives each
  dissection task whole connections in capture order and runs the very same reassembly
  and ``CaptureDissection``; flow ids are made capture-wide from the flows' first frames
  (metadata only) and one write task per dissection task writes the part files.

**Executors write, the driver commits**: every task attempt writes under hidden,
attempt-specific names (``_AttemptWriter``); the driver renames the successful attempts'
files (``_commit``) and deletes whatever any other attempt of the job left
(``_remove_attempts``), then records the manifest entry.  No row passes through the
driver.  CAPTURES and OUT may be URIs of any pyarrow filesystem (``analyzer.spark.storage``:
on S3 the commit is copy + delete).

What is global by nature and may differ from the local path: the flow-table cap, the
fragment-table cap, the memory budget, the QUIC connection cap and, in a capture whose
timestamps go backwards, which flows an idle sweep finds first.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import re
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.manifest import CaptureRun, InputInfo, update_manifest
from analyzer.pipeline import (
    FLOWLESS_BASE,
    TOOL_VERSION,
    CaptureDissection,
    CaptureResult,
    Options,
    file_sha256,
    input_info,
    run_dissection,
)
from analyzer.sink import (
    DatasetWriter,
    RowSink,
    check_capture_absent,
    commit_files,
    part_file,
    remove_stale_parts,
)
from analyzer.spark import storage
from analyzer.spark.split import (
    Layout,
    RangePlan,
    iter_range_frames,
    link_types,
    plan_ranges,
    probe_layout,
    range_batches,
    scan_range,
    verify_chain,
)
from analyzer.spark.storage import Store
from analyzer.spark.task import (
    PACKET_SCHEMA,
    PacketBatches,
    RunSink,
    TaskReassembler,
    keyed_batches,
    keyed_batches_native,
    native_events,
    range_stats,
    range_stats_batches,
    sweep_schedule,
)
from dissectors.payload.writer import DecodingWriter
from dissectors.registry import Registry, discover
from dissectors.schema import register_table
from dissectors.tables import PARTITION_KEY, TableSpec
from reassembly import native
from reassembly.capture import Frame
from reassembly.events import Anomaly
from reassembly.flows import RoleSwaps
from reassembly.ip import KIND_TRUNCATED

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_SPLIT_BYTES", "IngestReport", "ingest"]

DEFAULT_SPLIT_BYTES = 128 << 20
_BLOB_SCHEMA = "idx long, blob binary"
_STAGING_PREFIX = ".msgcap-spark-staging-"


@dataclass
class IngestReport:
    """What ``ingest`` did: one ``CaptureResult`` per capture plus how it was run."""

    results: list[CaptureResult] = field(default_factory=list)
    how: dict[str, str] = field(default_factory=dict)  # path -> "file" | "split:N" | "whole: why"
    # split captures: seconds per phase (scan, stats, dissect, merge) by path
    timings: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def manifest(self) -> dict[str, Any] | None:
        return self.results[-1].manifest if self.results else None


def _blobs(spark: SparkSession, n: int, fn) -> list[Any]:
    """Run ``fn(i)`` for i in range(n), one Spark task each; results unpickled, in order."""

    def run(batches):
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield pa.RecordBatch.from_pydict(
                    {"idx": [i], "blob": [pickle.dumps(fn(i), protocol=5)]},
                    schema=pa.schema([("idx", pa.int64()), ("blob", pa.binary())]),
                )

    rows = spark.range(0, n, 1, max(n, 1)).mapInArrow(run, _BLOB_SCHEMA).toArrow()
    out: list[Any] = [None] * n
    for i, blob in zip(rows.column("idx").to_pylist(), rows.column("blob").to_pylist(),
                       strict=True):
        out[i] = pickle.loads(blob)
    return out


class _AttemptWriter(DatasetWriter):
    """A coordinated ``DatasetWriter`` whose in-progress files carry the task attempt's
    tag (``.part-<k>[-<seq>].parquet.<job>-t<attempt>.inprogress``): two attempts of one task
    (a retry after a lost executor, a speculative copy) never write the same file, and
    readers ignore hidden names.  ``close`` leaves them for the driver to commit."""

    def __init__(self, out: str, capture_id: str, sha: str, options: Options, part: int,
                 tag: str) -> None:
        super().__init__(out, capture_id, sha, TOOL_VERSION, options.as_json(),
                         validate=options.validate, overwrite=True, part=part,
                         coordinated=True)
        self._tag = tag

    def _tmp_name(self, seq: int) -> str:
        return f".{part_file(self.part, seq)}.{self._tag}.inprogress"


def _attempt_tag(job: str) -> str:
    """``<job>-t<task attempt id>``: unique per attempt in the Spark application."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"{job}-t{ctx.taskAttemptId() if ctx else 0}"


SHIP_FIX = (
    "give the executors a Python that has msgcap: install it on every node, or ship a "
    "packed virtualenv with --archives and point spark.pyspark.python at it "
    "(docs/spark.md, 'Shipping msgcap to a cluster')"
)


SCHEMA_FIX = (
    "put the --schema files where every executor reads them at the same path (shared "
    "storage, or installed on every node), or give the path the executors see"
)


def check_executors(spark: SparkSession, schemas: Sequence[str] | None = None) -> None:
    """At job start: every executor slot runs Python, imports msgcap and (``schemas``:
    ``Options.payload_schemas``) loads the ``--schema`` files, or a ``UserError`` says
    so (instead of a ``ModuleNotFoundError`` or ``SchemaSpecError`` traceback after four
    task attempts).  The probe is a nested function, so it is shipped by value and needs
    nothing of msgcap to run; it catches its errors itself, so nothing retries."""
    from analyzer.cliutil import UserError

    specs = list(schemas or ())

    def probe(_i: int) -> tuple[str, str] | None:
        import importlib
        import sys

        try:
            importlib.import_module("analyzer.pipeline")
        except Exception as exc:
            return "import", f"{type(exc).__name__}: {exc} (Python {sys.executable})"
        if not specs:
            return None
        try:  # the driver checked them: what fails here is the executor's view
            importlib.import_module("dissectors.payload.schemas").decoding_for(specs)
        except Exception as exc:
            return "schema", f"{exc}"
        return None

    sc = spark.sparkContext
    n = max(1, sc.defaultParallelism)
    try:
        errors = [e for e in sc.parallelize(range(n), n).map(probe).collect() if e]
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "Error" in ln]
        raise UserError(f"the Spark executors could not run Python ({lines[-1] if lines else exc})",
                        SHIP_FIX) from None
    for kind, text in errors:
        if kind == "import":
            raise UserError(f"the Spark executors cannot import msgcap: {text}", SHIP_FIX)
    if errors:
        raise UserError(f"the Spark executors cannot load a --schema file: {errors[0][1]}",
                        SCHEMA_FIX)


OutDir = Path | Store  # OUT: a local (or shared) directory, or a URI (storage.Store)


@contextlib.contextmanager
def _writer_dir(out: OutDir) -> Iterator[str]:
    """Where a task's ``DatasetWriter`` writes: OUT itself, or for a remote OUT a
    scratch directory whose finished files the task then uploads (``Store.upload_pending``)."""
    if isinstance(out, Store):
        scratch = tempfile.mkdtemp(prefix="msgcap-out-")
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        yield str(out)


def _pending(out: OutDir, scratch: str, writer: DatasetWriter) -> list[tuple[str, str]]:
    if isinstance(out, Store):
        return out.upload_pending(scratch, writer.pending_files())
    return writer.pending_files()


def _whole_file_task(path: str, out: OutDir, options: Options, job: str) -> dict[str, Any]:
    """One capture, on an executor: the local path's dissection, written by this
    attempt under its own hidden names; only metadata goes back to the driver.  A
    capture given as a URI is copied to the task's scratch directory first."""
    try:
        registry = discover()
        for spec in registry.tables():
            register_table(spec)
        with storage.local_copy(path) as (local, sha), _writer_dir(out) as wdir:
            capture_id = sha[:16]
            writer = _AttemptWriter(wdir, capture_id, sha, options, 0, _attempt_tag(job))
            dissection = CaptureDissection(capture_id, writer, registry, options)
            info, error = run_dissection(dissection, local, writer)
            writer.close(ensure_tables=list(dissection.tables.values()))
            pending = _pending(out, wdir, writer)
        return {
            "run": CaptureRun.from_writer(writer, input_info(path, sha, info), error),
            "pending": pending,
            "anomalies": Counter(dissection.anomalies),
            "protocols": Counter(dissection.flows_by_protocol),
            "packets": info.packets,
            "size": info.file_size,
        }
    except Exception as exc:  # shipped back to the driver and raised there
        return {"error": exc}


def _commit(out: OutDir, capture_id: str, pending: Sequence[tuple[str, str]],
            overwrite: bool) -> None:
    """Make one capture's successful attempt visible: renames only (metadata; on S3 and
    GCS copy + delete, ``Store.commit``).  Without ``overwrite`` a capture that another
    run put in OUT meanwhile is not replaced."""
    if isinstance(out, Store):
        out.commit(capture_id, pending, overwrite)
        return
    if not overwrite:
        check_capture_absent(out, capture_id)
    commit_files(pending)
    if overwrite:
        remove_stale_parts(out, capture_id, storage.keep_names(pending))


def _check_absent(out: OutDir, capture_id: str) -> None:
    if isinstance(out, Store):
        out.check_capture_absent(capture_id)
    else:
        check_capture_absent(out, capture_id)


def _update_manifest(out: OutDir, run: CaptureRun) -> dict[str, Any]:
    return out.update_manifest(run) if isinstance(out, Store) else update_manifest(out, run)


def _remove_attempts(out: OutDir, job: str) -> None:
    """Delete what any attempt of ``job`` left uncommitted (failed, retried, speculative
    or refused attempts) and the partition directories that leaves empty."""
    if isinstance(out, Store):
        out.remove_matching(re.compile(
            rf"[^/]+/{PARTITION_KEY}=[^/]+/\.part-\d+(?:-\d+)?\.parquet\.{job}-t\d+\.inprogress"))
        return
    for f in out.glob(f"*/{PARTITION_KEY}=*/.part-*.parquet.{job}-t*.inprogress"):
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
        with contextlib.suppress(OSError):
            f.parent.rmdir()  # only when empty


def _resolve_out(out: str | os.PathLike) -> OutDir:
    """OUT as an absolute path of the *driver* (executors run in scratch directories
    of their own, where a relative path would silently land the files), or a URI."""
    loc = storage.normalize(out)
    return Store(loc) if storage.is_uri(loc) else Path(loc)


def ingest(
    spark: SparkSession,
    captures: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    options: Options | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    partitions: int | None = None,
    merge_scopes: bool | None = None,
    progress: Any = None,
) -> IngestReport:
    """Dissect ``captures`` into the dataset at ``out`` with Spark (see the module doc).

    ``split_bytes``: captures larger than this are split into ranges of this size.
    ``partitions``: tasks of the dissection stage of a split capture (default: twice
    the default parallelism).  ``merge_scopes``: key IP pairs that share an endpoint
    together (default: only when payload dissectors are registered).  ``progress``: an
    ``analyzer.spark.progress.Progress`` told the phases and the bytes of finished
    captures."""
    options = options or Options()
    progress = progress or _NoProgress()
    registry = discover()
    check_executors(spark, options.payload_schemas)
    out_path = _resolve_out(out)
    if isinstance(out_path, Store):
        out_path.mkdirs()
    else:
        out_path.mkdir(parents=True, exist_ok=True)
    captures = [storage.normalize(c) for c in captures]
    job = uuid.uuid4().hex[:12]
    report = IngestReport()
    whole: list[str] = []
    split: list[tuple[str, Layout]] = []
    sizes: dict[str, int] = {}
    for path in captures:
        size = sizes[path] = storage.file_size(path)
        layout = probe_layout(path, size) if size > split_bytes else None
        if layout is None:
            whole.append(path)
            report.how[path] = "file" if size <= split_bytes else "whole: not splittable"
        else:
            split.append((path, layout))
    results: dict[str, CaptureResult] = {}
    try:
        for path, layout in split:
            timing: dict[str, float] = {}
            res, how = _ingest_split(spark, layout, out_path, options, registry, split_bytes,
                                     partitions, merge_scopes, timing, job, progress)
            report.timings[path] = timing
            report.how[path] = how
            if res is None:
                whole.append(path)
            else:
                results[path] = res
                progress.add_bytes(sizes[path])
        if whole:
            progress.phase(f"{len(whole)} capture(s), one task each")
            out_s = out_path if isinstance(out_path, Store) else str(out_path)
            outs = _blobs(spark, len(whole),
                          lambda i: _whole_file_task(whole[i], out_s, options, job))
            errors = [got["error"] for got in outs if "error" in got]
            if errors:
                raise errors[0]
            for path, got in zip(whole, outs, strict=True):
                run: CaptureRun = got["run"]
                _commit(out_path, run.capture_id, got["pending"], options.overwrite)
                manifest = _update_manifest(out_path, run)
                results[path] = CaptureResult(
                    run.capture_id, path, run.rows, got["anomalies"], got["protocols"],
                    got["packets"], got["size"], manifest,
                )
                progress.add_bytes(sizes[path])
    finally:
        _remove_attempts(out_path, job)
    report.results = [results[p] for p in captures if p in results]
    return report


# ------------------------------------------------------------------------ split path


def _union_pairs(pairs: Sequence[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """IP-pair key -> representative key, merging pairs that share an endpoint."""
    parent: dict[bytes, bytes] = {}

    def find(x: bytes) -> bytes:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    by_endpoint: dict[bytes, bytes] = {}
    for endpoint, key in pairs:
        other = by_endpoint.setdefault(endpoint, key)
        a, b = find(other), find(key)
        if a != b:
            lo, hi = (a, b) if a < b else (b, a)
            parent[hi] = lo
    return {k: find(k) for k in list(parent) if find(k) != k}


def _ingest_split(
    spark: SparkSession,
    layout: Layout,
    out: OutDir,
    options: Options,
    registry: Registry,
    split_bytes: int,
    partitions: int | None,
    merge_scopes: bool | None,
    timing: dict[str, float],
    job: str,
    progress: Any,
) -> tuple[CaptureResult | None, str]:
    path = layout.path
    clock = time.perf_counter()
    name = path.rsplit("/", 1)[-1]
    progress.phase(f"{name}: scanning ranges")
    steps = {"sha256": "reading facts of the whole capture", "stats": "dissecting by connection"}

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timing[step] = round(now - clock, 3)
        clock = now
        if step in steps:
            progress.phase(f"{name}: {steps[step]}")

    # the digest (the capture's id) is made on the driver while pass 1 runs, which needs
    # none (~0.75 s of a 1 GB capture's run, and a first Spark job costs ~4 s anyway)
    with ThreadPoolExecutor(1, thread_name_prefix="msgcap-sha256") as hashing:
        digest = hashing.submit(
            storage.sha256 if storage.is_uri(path) else file_sha256, path)
        # pass 1: record boundaries and frame counts per range
        ranges = plan_ranges(layout, split_bytes)
        scans = _blobs(spark, len(ranges), lambda i: scan_range(layout, i, *ranges[i]))
        plans, why = verify_chain(
            layout, scans, lambda i, a, b, first: scan_range(layout, i, a, b, first)
        )
        lap("scan")
        sha = digest.result()
    lap("sha256")  # (the wait for the digest after pass 1)
    capture_id = sha[:16]
    if not options.overwrite:
        _check_absent(out, capture_id)
    if why:
        return None, f"whole: {why}"

    # pass 2: the facts that depend on the whole capture
    limits = options.limits

    def stats_task(i: int) -> dict[str, Any]:
        problems: list[str] = []
        if native.enabled():
            st = range_stats_batches(range_batches(layout, plans[i], problems), limits, True)
        else:
            st = range_stats(iter_range_frames(layout, plans[i], problems), limits, True)
        if st["frames"] != plans[i].frames:
            problems.append(f"range {i}: {st['frames']} frames, pass 1 counted {plans[i].frames}")
        st["problems"] = problems
        return st

    stats = _blobs(spark, len(plans), stats_task)
    problems = [p for st in stats for p in st["problems"]]
    if problems:
        return None, f"whole: {problems[0]}"
    schedule = sweep_schedule(stats)
    snap = [st["snaplen_first"] for st in stats if st["snaplen_first"] is not None]
    snaplen_first = min(snap) if snap else None
    snaplen_cuts = sum(st["snaplen_cuts"] for st in stats)
    unknown_first: dict[int, int] = {}
    for st in stats:
        for lt, fr in st["unknown_first"].items():
            unknown_first[lt] = min(fr, unknown_first.get(lt, fr))
    frags = [st["frag_max"] for st in stats if st["frag_max"] is not None]
    frag_max = max(frags) if frags else None
    pairs = [p for st in stats for p in st["pairs"]]
    frag_keys: dict[bytes, bytes | None] = {}
    for st in stats:
        for fk, key in st["frag_keys"].items():
            known = frag_keys.setdefault(fk, key)
            if known != key:
                frag_keys[fk] = None
    # an IP id that names two connections: fragments cannot be placed by 5-tuple, so
    # the dissection runs as one task (still on executors, still exact)
    by_pair = any(v is None for v in frag_keys.values())
    if merge_scopes is None:  # endpoints whose traffic hints at cross-flow state
        marked = {h for st in stats for h in st["hints"]}
    else:
        marked = {e for e, _k in pairs} if merge_scopes else set()
    packets = sum(p.frames for p in plans)
    lap("stats")
    result, reruns = None, 0
    for _round in range(2):
        rep = _union_pairs([p for p in pairs if p[0] in marked])
        result, used = _dissect_split(
            spark, layout, plans, scans, out, capture_id, sha, options, registry, packets,
            snaplen_cuts, job, partitions, schedule, snaplen_first, unknown_first, frag_max,
            rep, frag_keys, by_pair, marked, _round)
        missing = used - marked
        if result is not None or not missing:
            break
        # a scope used state shared across its connections but they were spread over
        # tasks: dissect again with that server's connections under one key
        marked |= missing
        reruns += len(missing)
    lap("dissect")
    how = f"split:{len(plans)}"
    if by_pair:
        how += " (one dissection task: IP ids reused)"
    elif reruns:
        how += f" (dissected again with {reruns} endpoint(s) merged)"
    return result, how


def _dissect_split(spark, layout, plans, scans, out: OutDir, capture_id: str, sha: str,
                   options: Options, registry: Registry, packets: int, snaplen_cuts: int,
                   job: str, partitions: int | None, schedule, snaplen_first, unknown_first,
                   frag_max, rep: dict[bytes, bytes], frag_keys: dict[bytes, bytes | None],
                   by_pair: bool, marked: set[bytes], attempt: int
                   ) -> tuple[CaptureResult | None, set[bytes]]:
    """Pass 3 and the commit (see the module doc): frames keyed by connection, whole
    connections per task in capture order, reassembly + dissection, then the part files.
    Returns ``(None, scopes)`` without writing anything when a scope used cross-flow
    state while its connections were not all under one key (``scopes`` then names the
    server endpoints that must be merged)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    path = layout.path

    # pass 3: frames keyed by IP pair → whole pairs per task → reassembly + dissection
    staging_name = f"{_STAGING_PREFIX}{capture_id}-{job}-{attempt}"
    if isinstance(out, Store):
        staging: Path | str = staging_name
    else:
        staging = out / staging_name
        staging.mkdir(parents=True)
    nparts = partitions or max(2, 2 * spark.sparkContext.defaultParallelism)
    def packets_task(batches):
        for batch in batches:
            for i in batch.column(0).to_pylist():
                if native.enabled():
                    yield from keyed_batches_native(range_batches(layout, plans[i]), frag_keys,
                                                    rep, by_pair)
                else:
                    yield from keyed_batches(iter_range_frames(layout, plans[i]), frag_keys,
                                             rep, by_pair)

    staging_s = str(staging)
    store = out if isinstance(out, Store) else None

    def dissect_task(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        piece = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        run_dir = f"p{piece:05d}-a{attempt}"
        with _writer_dir(store) if store else contextlib.nullcontext(staging_s) as base:
            summary = _dissect_partition(
                PacketBatches(batches), capture_id, options, schedule, snaplen_first,
                unknown_first, frag_max, os.path.join(base, run_dir), piece,
            )
            if store is not None and summary is not None:  # runs to the shared staging
                summary["files"] = [
                    store.upload(f, f"{staging_s}/{os.path.relpath(f, base)}")
                    for f in summary["files"]]
        if summary is not None:
            yield pa.RecordBatch.from_pydict(
                {"idx": [piece], "blob": [pickle.dumps(summary, protocol=5)]},
                schema=pa.schema([("idx", pa.int64()), ("blob", pa.binary())]),
            )

    try:
        df = (
            spark.range(0, len(plans), 1, max(len(plans), 1))
            .mapInArrow(packets_task, from_arrow_schema(PACKET_SCHEMA))
            .repartition(nparts, "key")
            .sortWithinPartitions("frame")
            .mapInArrow(dissect_task, _BLOB_SCHEMA)
        )
        got = df.toArrow()
        summaries = [pickle.loads(b) for b in got.column("blob").to_pylist()]
        used: set[bytes] = set().union(*(s["scopes"] for s in summaries))
        if used - marked and not by_pair:
            return None, used
        errors = [s["error"] for s in summaries if s.get("error")]
        if errors and options.strict:
            raise RuntimeError(f"split ingest of {path} failed: {errors[0]}")
        result = _finish_split(
            spark, layout, plans, scans, out, capture_id, sha, options, registry, summaries,
            packets, snaplen_cuts, errors[0] if errors else None, job,
        )
    finally:
        if store is not None:
            store.delete_dir(staging_s)
        else:
            shutil.rmtree(staging, ignore_errors=True)
    return result, used


class _NoProgress:
    def phase(self, name: str) -> None:
        pass

    def add_bytes(self, n: int) -> None:
        pass


def task_events(reasm: TaskReassembler, frames: Iterable[Frame] | PacketBatches,
                options: Options, roles: RoleSwaps | None = None) -> Iterator:
    """The layers of ``reassembly.engine.capture_events`` over a task's frames: TCP/UDP
    reassembly (on the native engine unless ``MSGCAP_NATIVE_ENGINE=0``: ``native_events``,
    its runs of segments as ``CoalescedData``), then QUIC, TLS and WebSocket
    (keys from ``options.keylog``; captures with Decryption Secrets Blocks are not split,
    so no key comes from the capture itself).
    The roles are swapped as there: by a QUIC Initial, by WebSocket masking (the layers
    get the task's flow table) and, through ``roles`` (the dissection's ``RoleSwaps``),
    by the ops of a NATS flow joined late."""
    from reassembly import native
    from reassembly.engine import layered_events
    from reassembly.passing import Passing
    from reassembly.quic.keylog import KeyLog
    from reassembly.quic.layer import QuicLayer

    keylog = KeyLog.from_file(options.keylog) if getattr(options, "keylog", None) else None
    out: list = []
    quic = QuicLayer(options.limits, out.append, keylog, reasm.flows.swap_roles)
    if native.enabled():  # as in capture_events: runs no layer takes go past the layers
        layered = layered_events(native_events(reasm, frames, chunks=True), quic, out,
                                 options.limits, reasm.flows, Passing())
    else:
        if isinstance(frames, PacketBatches):
            frames = frames.frames()
        layered = layered_events(reasm.process(frames), quic, out, options.limits,
                                 reasm.flows)
    if roles is None:
        return layered
    return roles.connect(reasm.flows, layered)


def _dissect_partition(packets: PacketBatches, capture_id, options, schedule, snaplen_first,
                       unknown_first, frag_max, staging, piece) -> dict[str, Any] | None:
    """One dissection task: whole IP pairs, frames in capture order → runs of rows."""
    registry = discover()
    for spec in registry.tables():
        register_table(spec)
    it = iter(packets.batches)
    first = next((b for b in it if b.num_rows), None)
    if first is None:
        return None
    sink = RunSink(staging, piece, validate=options.validate, keep_secrets=options.keep_secrets)
    job = CaptureDissection(capture_id, sink, registry, options)
    reasm = TaskReassembler(options.limits, schedule, snaplen_first=snaplen_first,
                            unknown_first=unknown_first, frag_max=frag_max,
                            server_ports=job.server_ports)
    reasm.flows.stream_done = True  # (as ``run_dissection``'s ``capture_events`` has it)

    error = None
    try:
        for ev in task_events(reasm, PacketBatches(itertools.chain([first], it)), options,
                              job.roles):
            job.handle(ev)
    except Exception as exc:
        if options.strict:
            raise
        error = f"{type(exc).__name__}: {exc}"
    job.finish()  # what the columnar fast paths still hold, as run_dissection does
    sink.close()
    return {
        "piece": piece,
        "files": list(sink.files),
        "flows": sink.flows_seen,
        "rows": dict(sink.rows),
        "anomalies": Counter(job.anomalies),
        "flows_by_protocol": Counter(job.flows_by_protocol),
        "truncated": reasm.network.counters["truncated"],
        "error": error,
        "scopes": _scopes_used(job, sink),
    }


def _raw_endpoint(ip: str, port: int) -> bytes:
    """An endpoint as ``conn_key`` spells it (address bytes + big-endian port)."""
    import ipaddress

    return ipaddress.ip_address(ip).packed + int(port).to_bytes(2, "big")


def _scopes_used(job: CaptureDissection, sink: RunSink) -> set[bytes]:
    """Server endpoints whose connections shared state in this task: a payload dissector
    decoded a message in the server's scope (bindings cross connections), the QUIC
    layer took the flow (connection ids cross 5-tuples), or payload decoding learned a
    schema there (a Pulsar producer's schema decodes a consumer's messages)."""
    used = {_raw_endpoint(*server) for server, sd in job.payloads.scopes.items()
            if sd.decoded}
    used |= {_raw_endpoint(ip, port) for ip, port in sink.quic_servers}
    if isinstance(job.writer, DecodingWriter):
        used |= {_raw_endpoint(ip, port) for ip, port in job.writer.engine.learned_from}
    return used


# ------------------------------------------------------------------------ merge


class _ListSink(RowSink):
    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def write_rows(self, spec: TableSpec, rows) -> None:
        self.rows.setdefault(spec.name, []).extend(rows)


def _fill(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    mask = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
    vals = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return vals, mask


def _remap(batch: pa.RecordBatch, lut: np.ndarray) -> pa.RecordBatch:
    """Task-local flow ids → capture-wide ones in every flow-id / record-id column."""
    cols = []
    top = len(lut) - 1
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name == "flow_id" or name.endswith("_flow_id"):
            v, mask = _fill(col)
            col = pa.array(lut[np.clip(v, 0, top)], type=pa.int64(), mask=mask)
        elif name == "record_id" or name.endswith("_record_id"):
            v, mask = _fill(col)
            flow = v < FLOWLESS_BASE
            hi = np.clip(np.where(flow, v >> 32, 0), 0, top)
            new = np.where(flow, (lut[hi] << 32) | (v & 0xFFFFFFFF), v)
            col = pa.array(new, type=pa.int64(), mask=mask)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def _file_batches(path: str, lut: np.ndarray, store: Store | None = None
                  ) -> Iterator[pa.RecordBatch]:
    with (store.fs.open_input_file(path) if store is not None else pa.OSFile(path)) as f:
        run = pa.ipc.open_file(f)  # (task.RunSink's runs)
        for i in range(run.num_record_batches):
            batch = run.get_batch(i)
            if batch.num_rows:
                yield _remap(batch, lut)


def _flow_luts(summaries: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """Per piece, task-local flow id -> capture-wide flow id: the rank of the flow's
    first frame over the whole capture (the local path numbers flows in that order).
    Metadata only: two integers per flow."""
    owners = [(ff, s["piece"], lid) for s in summaries for lid, ff in s["flows"]]
    owners.sort()
    sizes = Counter(piece for _ff, piece, _lid in owners)
    luts = {s["piece"]: np.zeros(max(sizes[s["piece"]], 1), dtype=np.int64)
            for s in summaries}
    for gid, (_ff, piece, lid) in enumerate(owners):
        luts[piece][lid] = gid
    return luts


def _write_piece(out: str | Store, capture_id: str, sha: str, options: Options, job: str,
                 tables: list[TableSpec], summary: dict[str, Any], lut: np.ndarray,
                 extra: dict[str, list[dict[str, Any]]], first: bool) -> dict[str, Any]:
    """On an executor: one dissection task's runs, flow ids made capture-wide, written
    in the order the task made their rows as ``part-<piece>.parquet`` of each table by
    this attempt (the ``first`` piece also writes the whole-capture rows, after the
    others as the local run does, and every table's empty file)."""
    for spec in tables:
        register_table(spec)
    store = out if isinstance(out, Store) else None
    with _writer_dir(store or Path(out)) as wdir:
        writer = _AttemptWriter(wdir, capture_id, sha, options, summary["piece"],
                                _attempt_tag(job))
        try:
            for spec in tables:  # (runs in the order the task wrote them)
                for f in summary["files"]:
                    if Path(f).parent.name == spec.name:
                        for batch in _file_batches(f, lut, store):
                            writer.write_batch(spec, batch)
                if first and extra.get(spec.name):  # (what the local run writes last)
                    writer.write_rows(spec, extra[spec.name])  # (through the redaction gate)
            rows = writer.close(ensure_tables=tables if first else ())
        except BaseException:
            writer.abort()
            raise
        pending = _pending(store or Path(out), wdir, writer)
    return {"pending": pending, "rows": rows,
            "versions": {n: s.version for n, s in writer.tables.items()}}


def _finish_split(spark: SparkSession, layout, plans: list[RangePlan], scans, out: OutDir,
                  capture_id: str, sha: str, options: Options, registry: Registry,
                  summaries: list[dict[str, Any]], packets: int, snaplen_cuts: int,
                  error: str | None, job: str) -> CaptureResult:
    luts = _flow_luts(summaries)

    # a dissection with no input: the same table set as the local run, and the rows
    # the whole-capture decoder writes once at the end
    sink = _ListSink()
    dissection = CaptureDissection(capture_id, sink, registry, options)  # type: ignore[arg-type]
    tables = list(dissection.tables.values())
    anomalies: Counter = Counter()
    protocols: Counter = Counter()
    truncated = 0
    for s in summaries:
        anomalies.update(s["anomalies"])
        protocols.update(s["flows_by_protocol"])
        truncated += s["truncated"]
    if snaplen_cuts > 1:
        n = snaplen_cuts - 1
        dissection.handle(Anomaly(
            KIND_TRUNCATED,
            f"{n} more packets were cut by the capture snaplen ({truncated} truncated "
            "packets in all); only the first was reported individually",
            None, None, nbytes=n,
        ))
        anomalies.update(dissection.anomalies)
    extra = sink.rows

    # executors write the part files; the driver only renames them
    pieces = sorted(summaries, key=lambda s: s["piece"]) or [
        {"piece": 0, "files": [], "flows": []}]
    bc = spark.sparkContext.broadcast(luts)
    out_s = out if isinstance(out, Store) else str(out)
    try:
        written = _blobs(spark, len(pieces), lambda i: _write_piece(
            out_s, capture_id, sha, options, job, tables, pieces[i],
            bc.value.get(pieces[i]["piece"], np.zeros(1, dtype=np.int64)), extra, i == 0))
    finally:
        bc.unpersist()
    rows: Counter = Counter()
    versions: dict[str, int] = {}
    pending: list[tuple[str, str]] = []
    for w in written:
        for name, n in w["rows"].items():
            rows[name] += n
        versions.update(w["versions"])
        pending.extend(w["pending"])
    _commit(out, capture_id, pending, options.overwrite)
    run = CaptureRun(
        capture_id=capture_id,
        input=InputInfo(layout.path, layout.size, sha, layout.format,
                        [str(lt) for lt in link_types(layout, scans)], packets, []),
        tool_version=TOOL_VERSION,
        options=options.as_json(),
        rows=dict(sorted(rows.items())),
        table_versions=dict(sorted(versions.items())),
        error=error,
    )
    manifest = _update_manifest(out, run)
    return CaptureResult(capture_id, layout.path, run.rows, anomalies, protocols, packets,
                         layout.size, manifest)

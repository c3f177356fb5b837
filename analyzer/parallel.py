"""One capture dissected by N worker processes, split by flow (``msgcap dissect
--workers N`` with one capture); the output is the output of one process.

Strategy: worker k of N writes the rows of the flows a plan gives it
(``reassembly.flowplan``: worker 1's one pass of the C record walk sums each flow's
bytes, and the flows are shared out biggest first to the worker with the fewest bytes;
flows past the plan by ``flow_id % N``); rows without a flow (capture, link and IP
anomalies) are worker 0's.  ``OwnedRowsWriter`` does that filtering in front of the
``DatasetWriter``.  Every worker reads the whole capture and runs the flow table over
every packet, so flow numbering, eviction, idle expiry and port reuse are decided over
the whole capture as in one process.  Two ways to run:

* **light** (tried first): a worker reassembles and dissects only its own flows — the
  flow table follows the others without reassembling them and emits none of their
  events (``reassembly.engine.FlowSplit``), so stream work is divided, not repeated;
  on the native engine (classic pcap) the others' ACK packets are bookkeeping done in
  C (``reassembly.native``, light flows), so what a worker repeats of the others' work
  is the C record walk and little more.
  This is exact as long as no state shared across flows was used: payload dissectors
  (STAN, Liftbridge, plugins) learn on one connection what they use on another of the
  same server, QUIC links UDP flows by connection id.  Each worker reports what of it
  it touched (a payload dissector's ``decode`` ran, ``ScopeDispatcher.decoded``; the
  QUIC layer took a datagram; ``FlowSplit.cross_flow``) — none of it happened in any
  worker exactly when none of it happened in one process (until the first such use,
  the shared state is the initial one in every process).  The run is kept when every
  worker ended normally (no error, no exception, no death) and touched none of it.  A
  worker that touches it stops reading (within 64 events) and the parent stops the
  others, so a light run thrown away costs little when that happens early (STAN and
  QUIC touch it in their first packets).  A light worker takes the engine's runs joined
  per flow as one process does (``analyzer.pipeline.flow_coalescing``); when their order
  is not proven it raises ``FlowOrderUnproven``, which makes the light run unproven too;
* **exact** (otherwise): the light run's files are deleted (still under their
  in-progress names, nothing was committed) and the capture is dissected again with
  every worker reading, reassembling and dissecting the **whole** capture exactly as
  ``analyzer.pipeline.dissect_capture`` does; only the *writing* is split, and
  ``OwnedRowsWriter.owns`` lets the dissection skip building rows it would throw away.
  A failing run (error, exception, dead worker) also lands here, so failures are those
  of the exact mode, described below.

``SplitResult.split`` says which way the rows were made (``"light"``/``"exact"``) and
``fallback`` why the light run was not kept; the manifest entry is the same either way.

Each worker writes ``part-<k>.parquet`` in every partition directory
(``OUT/<table>/capture=<id>/``) through a coordinated ``DatasetWriter``: it leaves its
finished files under their hidden in-progress names.  Worker 0 is the parent process
itself; workers 1..N-1 are child processes, started first: while the parent hashes the
capture once (the capture id and the provenance metadata come from it), takes the
capture's lock and checks that the capture is not in OUT yet (unless ``overwrite``),
worker 1 sizes the flows for the plan (``_child``); then the children get the hash
and the plan and all dissect.  Once all have ended the parent renames their files,
removes the parts an earlier run left (``overwrite``) and writes ONE manifest entry:
row counts summed, the anomaly and protocol tallies read back from every part file,
the input facts of worker 0 — the entry one process would write.  Worker k > 0 writes
a file only for tables in which it owns rows; worker 0 also writes the empty files of
tables nobody wrote (as one process does).

Speed: light — reading the file, IP decoding and the flow table are done by every
worker (in C for the common path of a classic pcap), reassembly, parsing and writing
are divided; exact — only building rows, converting and writing them is divided, after
the light run that was stopped (up to one more run's time when the shared state is
first touched late in the capture).  Shares are balanced by the flows' bytes (a
capture of one big flow still has one worker doing most of it).
Memory: light, each worker holds its own flows' streams and sessions (plus a small
record per foreign flow); exact, each holds the whole dissection state (N times one
run's).  The Arrow batches a writer holds before a row group is written — most of a
bulk run's memory besides the imports — are one process's amount divided among the
workers (``run_worker``), so the run's writers together hold what one process's does.

Failures:

* a worker whose dissection failed (an exception while reading events, not
  ``strict``) closes its files like one process does: the capture is recorded as
  failed with what was written, and ``error`` is that worker's error;
* a worker that ends without a result (killed, crashed interpreter, exit code) also
  makes the capture failed (``error`` names the worker and its exit code); the other
  workers finish and their parts are kept, the dead worker's files are deleted and an
  earlier run's part of the same number is removed, so no file of another run is
  presented with this entry;
* an exception raised by a worker outside the event loop (not a capture, I/O error, a
  bug, or anything under ``strict``) is raised again by the parent, as one process
  would raise it: the other workers are stopped, every file of this run is deleted and
  the manifest is not touched.

Children are forked when the parent runs no other Python thread, else spawned
(``_start_method``).  A forked child starts at once with the parent's imports (a
spawned one pays an interpreter start and the imports, ~1 s, before its first packet)
and inherits nothing a worker depends on beyond its task: it registers its tables and
opens its own writer, and the parent forks before it takes the capture's lock or opens
a file.  The threads a fork could leave holding a lock in the child are Python's (a
rich progress refresher, a Parquet writer thread, a py4j gateway of a Spark driver):
with one of them running, children are spawned, which needs a registry that pickles
(importable dissector classes) and, for scripts calling this, the usual ``if __name__
== "__main__":`` guard.  The native threads of a ``msgcap dissect`` process (jemalloc's
background thread from the pyarrow import, OpenBLAS's from numpy, Arrow's CPU pool
once a file was read) reset their state in the child through their own at-fork
handlers; Python 3.12+ still warns about a fork beside native threads.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.manifest import UNCLAIMED, CaptureRun, InputInfo, update_manifest, value_counts
from analyzer.pipeline import (
    TOOL_VERSION,
    CaptureDissection,
    CaptureResult,
    FlowOrderUnproven,
    Options,
    bare_input_info,
    file_sha256,
    flow_coalescing,
    input_info,
    run_dissection,
    write_manifest,
)
from analyzer.progress import ProgressWrap
from analyzer.sink import (
    BATCH_BYTES,
    CaptureLock,
    DatasetWriter,
    OutputError,
    check_capture_absent,
    commit_files,
    remove_in_progress,
    remove_stale_parts,
)
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.registry import Registry, discover
from dissectors.schema import register_table
from dissectors.tables import TableSpec
from reassembly.capture import CaptureReader
from reassembly.engine import FlowSplit
from reassembly.flowplan import FlowPlan, by_flow_id, plan_flows

__all__ = [
    "OwnedRowsWriter",
    "ProgressWrap",
    "SplitResult",
    "WorkerResult",
    "dissect_parallel",
    "run_worker",
]

log = logging.getLogger(__name__)

_CHUNK = 4096  # rows taken at a time from an iterable that is not a sequence


class OwnedRowsWriter:
    """A ``DatasetWriter`` that keeps only worker ``worker``'s share of ``workers``:
    rows of the flows ``plan`` gives it (default: ``flow_id % workers == worker``), and
    rows without a flow (or of a table without a ``flow_id`` column) when
    ``worker == 0``.

    Same interface as the writer for the dissection (``write_rows``, ``write_batch``,
    ``owns``; anything else is the wrapped writer's).  It tallies the anomaly kinds and
    flow protocols of the rows it keeps (``anomalies``, ``flows_by_protocol``), so the
    shares of all workers add up to what one process counts.  A ``Sink`` that takes
    Arrow batches.
    """

    columnar = True

    def __init__(self, writer: DatasetWriter, worker: int, workers: int,
                 plan: FlowPlan | None = None) -> None:
        if workers < 1 or not 0 <= worker < workers:
            raise ValueError(f"worker {worker} of {workers}: need 0 <= worker < workers")
        if plan is not None and plan.workers != workers:
            raise ValueError(f"a plan for {plan.workers} workers, not {workers}")
        self.writer = writer
        self.worker = worker
        self.workers = workers
        self.plan = plan if plan is not None else by_flow_id(workers)
        self._shares = pa.array(self.plan.shares, type=pa.uint16())
        self.anomalies: Counter = Counter()
        self.flows_by_protocol: Counter = Counter()

    def owns(self, flow_id: int | None) -> bool:
        """Whether the rows of ``flow_id`` (None: rows tied to no flow) are written here."""
        if flow_id is None:
            return self.worker == 0
        return self.plan.worker_of(flow_id) == self.worker

    def write_rows(self, spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> None:
        if not isinstance(rows, Sequence):
            it = iter(rows)
            while chunk := list(itertools.islice(it, _CHUNK)):
                self._write_rows(spec, chunk)
            return
        self._write_rows(spec, rows)

    def _write_rows(self, spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> None:
        k, worker_of = self.worker, self.plan.worker_of
        if k == 0:
            owned = [r for r in rows if (f := r.get("flow_id")) is None or worker_of(f) == 0]
        else:
            owned = [r for r in rows
                     if (f := r.get("flow_id")) is not None and worker_of(f) == k]
        if not owned:
            return
        if spec.name == ANOMALIES.name:
            self.anomalies.update(r["kind"] for r in owned)
        elif spec.name == FLOWS.name:
            self.flows_by_protocol.update(r.get("protocol") or UNCLAIMED for r in owned)
        self.writer.write_rows(spec, owned)

    def write_batch(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
        if "flow_id" in batch.schema.names:
            mask = self._owned_mask(batch.column("flow_id"))
            # (a light worker's batches are all its own: filtering one anyway copied every
            # column, ~3 s of CPU in a 1 GB bulk NATS run with --workers 2)
            if (pc.sum(mask).as_py() or 0) != batch.num_rows:
                batch = batch.filter(mask)
        elif self.worker != 0:
            return
        if batch.num_rows == 0:
            return
        if spec.name == ANOMALIES.name:
            self.anomalies.update(value_counts(batch.column("kind")))
        elif spec.name == FLOWS.name:
            self.flows_by_protocol.update(value_counts(batch.column("protocol"), UNCLAIMED))
        self.writer.write_batch(spec, batch)

    def _owned_mask(self, flow: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """``owns`` of every row of a ``flow_id`` column (null: no flow)."""
        k, shares = self.worker, self._shares
        mine = pc.equal(pc.modulo(flow, self.workers), k)
        if len(shares):
            planned = pc.less(flow, len(shares))
            by_plan = pc.equal(pc.take(shares, pc.if_else(planned, flow, 0)), k)
            mine = pc.if_else(planned, by_plan, mine)
        return pc.fill_null(mine, k == 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    def __enter__(self) -> OwnedRowsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.__exit__(*exc)




# ---------------------------------------------------------------------------- worker


@dataclass
class _Task:
    path: str
    out_dir: str
    capture_id: str | None  # None (with sha256): sent by the parent once it hashed
    sha256: str | None
    options: Options
    registry: Registry
    wrap: Callable[[CaptureReader, Iterable], Iterable] | None
    worker: int
    workers: int
    light: bool = False  # reassemble and dissect only this worker's flows
    plan: FlowPlan | None = None  # which worker owns which flow (None: flow_id % workers)


@dataclass
class SplitResult(CaptureResult):
    """``CaptureResult`` of ``dissect_parallel``, and how the rows were made: ``split``
    ``"light"`` (each worker dissected its own flows) or ``"exact"`` (each dissected
    the whole capture); ``fallback``, why a light run was not kept."""

    split: str = "exact"
    fallback: list[str] = field(default_factory=list)


@dataclass
class WorkerResult:
    """What a worker reports to the parent."""

    worker: int
    rows: dict[str, int]  # rows per table written by this worker
    table_versions: dict[str, int]
    anomalies: Counter  # kinds of the anomaly rows it wrote
    flows_by_protocol: Counter  # protocols of the flow rows it wrote
    input: InputInfo
    packets: int
    bytes: int
    error: str | None  # the dissection failed (partial output), as in one process
    pending: list[tuple[str, str]] = field(default_factory=list)  # (in-progress, final)
    # light: the state shared across flows that this worker used (empty: none), which
    # makes its rows unproven (module docstring)
    cross_flow: list[str] = field(default_factory=list)
    budget_peak: int = 0  # most bytes its memory budget held at once (``_over_budget``)


class _Events:
    """``wrap`` for ``run_dissection`` in a worker: its events (a light worker's are only
    its own flows', ``run_dissection(split=...)``), then ``inner`` (progress) over them.

    The events end early once ``touched()`` (a light worker used state shared across
    flows: the run will be thrown away) or ``abandon()`` (worker 0, in the parent: the
    run ends for another worker's reason), looked at every ``CHECK_EVERY`` events:
    reading on would be wasted."""

    CHECK_EVERY = 64  # events between two looks at ``touched`` and ``abandon``

    def __init__(self, inner: Callable[[CaptureReader, Iterable], Iterable] | None,
                 touched: Callable[[], bool], abandon: Callable[[], bool]) -> None:
        self.inner, self.touched, self.abandon = inner, touched, abandon

    def __call__(self, reader: CaptureReader, events: Iterable) -> Iterable:
        mine = self._events(events)
        return self.inner(reader, mine) if self.inner is not None else mine

    def _events(self, events: Iterable) -> Iterable:
        touched, abandon, every = self.touched, self.abandon, self.CHECK_EVERY
        for n, ev in enumerate(events):
            if not n % every and (touched() or abandon()):
                return
            yield ev
        touched()


def _never() -> bool:
    return False


def run_worker(task: _Task, abandon: Callable[[], bool] = _never) -> WorkerResult:
    """Worker ``task.worker``: the capture through ``CaptureDissection`` — the whole of
    it, or (``task.light``) only its own flows' events — and its share of the rows into
    its part files (left unrenamed for the parent).  ``abandon()`` true ends its events
    early (the run is being given up).

    The read loop is ``analyzer.pipeline.run_dissection``, as in one process; only the
    writer, the events, the file name and the end differ.  The writer's Arrow bytes
    held before a row group is written (``BATCH_BYTES``, most of what a bulk run holds
    besides its imports) are one process's divided among the workers, so N workers
    hold about what one does (row groups get smaller; the rows are the same)."""
    options, registry = task.options, task.registry
    assert task.capture_id is not None and task.sha256 is not None
    for spec in registry.tables():
        register_table(spec)
    inner = DatasetWriter(
        task.out_dir,
        task.capture_id,
        task.sha256,
        TOOL_VERSION,
        options.as_json(),
        validate=options.validate,
        overwrite=options.overwrite,
        part=task.worker,
        coordinated=True,
        batch_bytes=max(1, BATCH_BYTES // task.workers),
    )
    writer = OwnedRowsWriter(inner, task.worker, task.workers, task.plan)
    job = CaptureDissection(task.capture_id, writer, registry, options)
    split = FlowSplit(writer.plan.owner(task.worker)) if task.light else None
    cross_flow: list[str] = []

    budget = job.limits.budget

    def touched() -> bool:
        """State shared across flows was used (named in ``cross_flow``): the layers'
        (``FlowSplit.cross_flow``) and the conveyor's (``CaptureDissection.cross_flow``:
        payload decoding, a Pulsar schema announced, the memory budget reclaiming)."""
        if split is None:
            return False
        cross_flow[:] = split.cross_flow() + job.cross_flow()
        return bool(cross_flow)

    wrap = (_Events(task.wrap, touched, abandon)
            if split is not None or abandon is not _never else task.wrap)
    try:
        # a light worker takes runs joined per flow as one process does; if their order
        # is not proven (FlowOrderUnproven), it raised: the light run is not kept
        info, error = run_dissection(job, task.path, inner, wrap, split,
                                     reorder=split is not None and flow_coalescing())
        touched()  # also after an error, or an end before the next look
        # worker 0 also writes the empty files of tables nobody wrote, as one process does
        rows = inner.close(ensure_tables=list(job.tables.values()) if task.worker == 0
                           else ())
    except BaseException:
        # close and delete its unfinished files now: worker 0 runs in the parent, which
        # goes on (a file held open would keep the space a full disk's manifest needs)
        if not inner.closed:
            inner.abort()
        raise
    return WorkerResult(
        worker=task.worker,
        rows=rows,
        table_versions={n: s.version for n, s in inner.tables.items()},
        anomalies=writer.anomalies,
        flows_by_protocol=writer.flows_by_protocol,
        input=input_info(task.path, task.sha256, info),
        packets=info.packets,
        bytes=info.file_size,
        error=error,
        pending=inner.pending_files(),
        cross_flow=cross_flow,
        budget_peak=budget.peak if budget is not None else 0,
    )


def _child(conn: Connection, task: _Task) -> None:
    """Process entry point of workers 1..N-1: one message to the parent, the result or
    the exception.  A worker started before the parent hashed the capture
    (``task.sha256`` None) first waits for ``("go", sha256, plan)``; worker 1 of such a
    start proposes the plan (``("plan", FlowPlan)``) meanwhile, so the C walk that
    sizes the flows overlaps the parent's hashing.  The pipe closed instead of a go:
    the run was refused (the capture is in OUT or being written), nothing is written.

    A worker whose parent is gone (killed: nobody will take its files) stops reading
    at its next look (``_Events``); the next run of the capture removes its files.

    A spawned worker is a fresh interpreter: like ``msgcap dissect`` in one process, it
    keeps pyarrow from importing pandas (``skip_pandas_probe``, ~0.4 s of CPU a worker),
    as the dissection hands pyarrow no pandas objects."""
    from analyzer.cliutil import skip_pandas_probe

    skip_pandas_probe()
    parent = os.getppid()
    try:
        if task.sha256 is None:
            if task.plan is None and task.worker == 1:
                conn.send(("plan", plan_flows(task.path, task.workers)))
            try:
                _, sha, plan = conn.recv()
            except EOFError:  # refused before it began
                raise SystemExit(0) from None
            task = replace(task, capture_id=sha[:16], sha256=sha, plan=plan)
        result = run_worker(task, lambda: os.getppid() != parent)
    except BaseException as exc:  # noqa: BLE001 - everything goes to the parent
        if isinstance(exc, SystemExit) and exc.code == 0:
            raise
        text = traceback.format_exc()
        try:
            conn.send(("raised", exc, text))
        except Exception:  # the exception does not pickle: its text does
            conn.send(("raised", RuntimeError(f"{type(exc).__name__}: {exc}"), text))
        conn.close()
        raise SystemExit(1) from None
    conn.send(("ok", result))
    conn.close()


class _RemoteTraceback(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n{self.text}"


# ---------------------------------------------------------------------------- parent


def _start_method() -> str:
    """``fork`` when this process runs no other Python thread, else ``spawn``.

    Why fork: a spawned worker pays a whole interpreter start and the imports (~0.7 s
    of CPU, ~1 s before it reads a packet); a forked one starts reading at once, and
    shares the parent's imported pages until it writes them.  Why only then: a fork
    copies the memory of every thread but runs only the calling one, so a lock another
    Python thread holds (a rich progress refresher, a Parquet writer thread, a py4j
    gateway of a Spark driver) stays locked forever in the child.  The native threads
    a ``msgcap dissect`` process has at this point — jemalloc's background thread and
    OpenBLAS's (pyarrow and numpy imports), Arrow's CPU pool once a file was read —
    re-create their state in the child through their own ``pthread_atfork`` handlers,
    as they do under multiprocessing's ``fork`` default of Python <= 3.13."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


class _Workers:
    """Worker 0 in this process, workers 1..N-1 in child processes started at
    construction (``_start_method``), and the outcome of each:
    ``("ok", WorkerResult)``, ``("raised", exception, traceback text)``,
    ``("died", exit code)`` or ``("stopped", exit code)``.

    Why worker 0 runs here: a process less to start (no second interpreter start, no
    second set of imports) and the RSS of one process less, while this process would
    otherwise only wait."""

    def __init__(self, tasks: Sequence[_Task], method: str) -> None:
        ctx = multiprocessing.get_context(method)
        self.procs: dict[int, multiprocessing.process.BaseProcess] = {}
        self.conns: dict[Connection, int] = {}  # of children with no outcome yet
        self.outcomes: dict[int, tuple] = {}
        self.proposed: FlowPlan | None = None
        self._stopped: set[int] = set()
        self._stop: Callable[[tuple], bool] | None = None
        try:
            for task in tasks:
                here, there = ctx.Pipe()
                p = ctx.Process(target=_child, args=(there, task),
                                name=f"msgcap-dissect-{task.worker}")
                p.start()
                there.close()
                self.procs[task.worker] = p
                self.conns[here] = task.worker
        except BaseException:
            self.close()
            raise

    def plan(self) -> FlowPlan | None:
        """The plan worker 1 proposes (None: it ended without one)."""
        conn = next((c for c, k in self.conns.items() if k == 1), None)
        while self.proposed is None and conn is not None and conn in self.conns:
            self._receive(conn)
        return self.proposed

    def go(self, sha: str, plan: FlowPlan) -> None:
        """Let the workers waiting for the capture's hash begin."""
        for conn in list(self.conns):
            try:
                conn.send(("go", sha, plan))
            except OSError:  # it ended already: its outcome says how
                self._receive(conn)

    def run(self, task: _Task, stop: Callable[[tuple], bool] | None = None) -> dict[int, tuple]:
        """Worker 0 (``task``) here, then wait for the others.  A worker that raised, or
        whose outcome ``stop`` names, ends the others that still run (those then end
        "stopped", not "died"; worker 0 at its next look, ``_Events``)."""
        self._stop = stop
        self.outcomes[task.worker] = self._here(task)
        self._settle(task.worker)
        while self.conns:
            for conn in wait(list(self.conns)):
                self._receive(conn)
        return dict(sorted(self.outcomes.items()))

    def _here(self, task: _Task) -> tuple:
        try:
            result = run_worker(task, self._abandon)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - an outcome, as from a child
            return ("raised", exc, traceback.format_exc())
        return ("stopped", None) if self._ending() else ("ok", result)

    def _abandon(self) -> bool:
        """Worker 0's look at the others (cheap: a poll of their pipes)."""
        if self.conns:
            for conn in wait(list(self.conns), 0):
                self._receive(conn)
        return self._ending()

    def _ending(self) -> bool:
        return bool(self._stopped) or any(self._ends(o) for o in self.outcomes.values())

    def _ends(self, outcome: tuple) -> bool:
        return outcome[0] == "raised" or (self._stop is not None and self._stop(outcome))

    def _receive(self, conn: Connection) -> None:
        """One message of a child: a proposed plan, or its outcome (then it is done)."""
        k = self.conns[conn]
        try:
            message = conn.recv()
        except EOFError:
            self.procs[k].join()
            message = ("stopped" if k in self._stopped else "died", self.procs[k].exitcode)
        except Exception:  # a message cut short by the stop
            if k not in self._stopped:
                raise
            self.procs[k].join()
            message = ("stopped", self.procs[k].exitcode)
        if message[0] == "plan":
            self.proposed = message[1]
            return
        del self.conns[conn]
        conn.close()
        self.outcomes[k] = message
        self._settle(k)

    def _settle(self, k: int) -> None:
        """Worker ``k``'s outcome ends the run: stop the children that still run."""
        if not self._ends(self.outcomes[k]):
            return
        for j, other in self.procs.items():
            if other.is_alive() and j not in self.outcomes:
                self._stopped.add(j)
                other.terminate()

    def close(self) -> None:
        """Leave no process behind (any exit, Ctrl-C included)."""
        for p in self.procs.values():
            if p.is_alive() and self.conns:  # interrupted: stop what still runs
                p.terminate()
            p.join()
        for conn in self.conns:
            conn.close()
        self.conns = {}

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dissect_parallel(
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    workers: int,
    options: Options | None = None,
    registry: Registry | None = None,
    wrap: Callable[[CaptureReader, Iterable], Iterable] | None = None,
    *,
    light: bool = True,
) -> SplitResult:
    """``dissect_capture`` of one capture with ``workers`` processes split by flow: the
    same rows, manifest entry and result as one process (rows in ``workers`` part
    files).  Worker 0 is this process; ``wrap`` (progress) runs in it (twice when a
    light run is not kept).  ``light=False``: the exact mode only.

    The other workers start first, before this process hashes the capture: they
    import (spawned) and size the flows for the plan while it hashes, and begin once
    it sent them the hash (``_child``)."""
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    options = options or Options()
    registry = registry or discover()
    method = _start_method()
    if method == "spawn" and workers > 1:
        try:
            pickle.dumps(registry)
        except Exception as exc:
            raise TypeError(
                f"registry cannot be sent to worker processes ({exc}); with workers > 1 "
                "use importable (module-level) dissector classes"
            ) from exc
    light = light and workers > 1
    early = [_Task(str(path), str(out_dir), None, None, options, registry, None, k, workers,
                   light) for k in range(1, workers)]
    with _Workers(early, method) as started:
        sha = file_sha256(path)
        capture_id = sha[:16]
        out = Path(out_dir)
        # held by this (parent) process for the whole run: CaptureBusyError when another
        # run writes the same capture into OUT; a dead run's in-progress files are removed
        lock = CaptureLock(out, capture_id, path).acquire()
        settled = True  # False while this run has files or an outcome not yet recorded
        try:
            if not options.overwrite:
                check_capture_absent(out, capture_id)
            settled = False
            plan = (started.plan() or plan_flows(path, workers)) if workers > 1 else None
            started.go(sha, plan or by_flow_id(workers))
            try:
                result = _dissect_locked(path, out, workers, options, registry, wrap, light,
                                         sha, capture_id, plan or by_flow_id(workers),
                                         started)
            except OutputError as exc:
                # the workers' unfinished files are gone (_remove_in_progress): record it
                run = CaptureRun(capture_id, bare_input_info(path, sha), TOOL_VERSION,
                                 options.as_json(), {}, {}, f"output: {exc.message}")
                with contextlib.suppress(OSError):
                    update_manifest(out, run)
                    settled = True
                raise
            except BaseException:  # the workers' files are gone (_run_exact), as is the run
                settled = True
                raise
            settled = True
        finally:
            lock.release(finished=settled)
    return result


def _dissect_locked(
    path: str | os.PathLike,
    out: Path,
    workers: int,
    options: Options,
    registry: Registry,
    wrap: Callable[[CaptureReader, Iterable], Iterable] | None,
    light: bool,
    sha: str,
    capture_id: str,
    plan: FlowPlan,
    started: _Workers,
) -> SplitResult:
    """``dissect_parallel`` once the capture's lock is held and the ``started`` workers
    (light when ``light``) were sent the hash and ``plan``."""

    def tasks(light: bool) -> list[_Task]:
        return [
            _Task(str(path), str(out), capture_id, sha, options, registry,
                  wrap if k == 0 else None, k, workers, light, plan)
            for k in range(workers)
        ]

    split, fallback = "exact", list[str]()
    if light:
        try:
            # a worker whose share is not proven ends the run for all
            outcomes = started.run(tasks(light=True)[0],
                                   stop=lambda o: bool(_unproven({0: o})))
            for outcome in outcomes.values():  # OUT is full or failing: so would a rerun be
                if outcome[0] == "raised" and isinstance(outcome[1], OutputError):
                    raise outcome[1]
            fallback = _unproven(outcomes) or _over_budget(outcomes, options)
            if not fallback:
                split = "light"
                results = [o[1] for _, o in sorted(outcomes.items())]
                commit_files(f for r in results for f in r.pending)
        finally:
            _remove_in_progress(out, capture_id, workers)  # a discarded run's files too
        if fallback:
            log.debug("%s: light split not proven exact (%s); dissecting again with every "
                      "worker reading every flow", path, "; ".join(fallback))
    died = None
    if split == "exact":
        results, died = _run_exact(tasks(light=False), out, capture_id, workers, options,
                                   None if light else started)
    log.debug("%s: %d workers, %s split", path, workers, split)

    if options.overwrite:
        keep: dict[str, list[str]] = {}
        for r in results:
            for _tmp, final in r.pending:
                keep.setdefault(Path(final).parent.parent.name, []).append(Path(final).name)
        remove_stale_parts(out, capture_id, keep)

    error = next((r.error for r in results if r.error is not None), died)
    rows: Counter = Counter()
    versions: dict[str, int] = {}
    anomalies: Counter = Counter()
    protocols: Counter = Counter()
    for r in results:
        for name, n in r.rows.items():
            rows[name] += n  # keeps tables with 0 rows
        versions.update(r.table_versions)
        anomalies.update(r.anomalies)
        protocols.update(r.flows_by_protocol)
    info = results[0].input if results else bare_input_info(path, sha)
    run = CaptureRun(
        capture_id=capture_id,
        input=info,
        tool_version=TOOL_VERSION,
        options=options.as_json(),
        rows=dict(sorted(rows.items())),
        table_versions=dict(sorted(versions.items())),
        error=error,
    )
    manifest = write_manifest(out, run)
    return SplitResult(
        capture_id,
        str(path),
        run.rows,
        anomalies,
        protocols,
        info.packets,
        info.size,
        manifest,
        split,
        fallback,
    )


def _unproven(outcomes: dict[int, tuple]) -> list[str]:
    """Why the rows of a light run are not proven those of one process (empty: they
    are): a worker that did not end normally, or used state shared across flows (the
    workers stopped because of another one say nothing)."""
    reasons = []
    for k, outcome in sorted(outcomes.items()):
        if outcome[0] == "stopped":
            continue
        if outcome[0] == "raised" and isinstance(outcome[1], FlowOrderUnproven):
            # it took runs joined per flow, then used what it names (state shared
            # across flows, or a layer): as ``cross_flow``
            reasons.append(f"worker {k}: {outcome[1]}")
        elif outcome[0] == "raised":
            reasons.append(f"worker {k} raised {type(outcome[1]).__name__}")
        elif outcome[0] == "died":
            reasons.append(f"worker {k} ended without a result (exit code {outcome[1]})")
        else:
            result: WorkerResult = outcome[1]
            if result.error is not None:
                reasons.append(f"worker {k} failed: {result.error}")
            reasons += [f"worker {k}: {what}" for what in result.cross_flow]
    return reasons


def _over_budget(outcomes: dict[int, tuple], options: Options) -> list[str]:
    """The memory budget (``Limits.memory_limit_bytes``), state shared across flows: a
    light worker holds only its own flows' buffers, so it may stay under the budget
    where one process would have reached it and made holders give memory back (other
    rows).  A worker that reached it is unproven (``cross_flow``); and unless the
    workers' peaks together fit one run's budget, one process might have reached it
    (it holds at most their sum at any point), so the run is unproven too.  Kept, a
    light run so also held no more than one run's budget in all."""
    limit = options.limits.memory_limit_bytes
    peaks = sum(o[1].budget_peak for o in outcomes.values() if o[0] == "ok")
    if limit <= 0 or peaks <= limit:
        return []
    return [f"memory budget: the workers held {peaks} bytes together, one run may hold "
            f"{limit}"]


def _run_exact(
    tasks: list[_Task], out: Path, capture_id: str, workers: int, options: Options,
    started: _Workers | None = None,
) -> tuple[list[WorkerResult], str | None]:
    """Run the workers (exact mode; ``started``: its children already run ``tasks[1:]``,
    else they start here) and commit their files: the results of those that ended
    normally, and the error naming a worker that died (None: none did).  A worker that
    raised, or one that died under ``strict``, is raised here (nothing kept)."""
    try:
        with started or _Workers(tasks[1:], _start_method()) as pool:
            outcomes = pool.run(tasks[0])
        raised = [o for o in outcomes.values() if o[0] == "raised"]
        if raised:
            _, exc, text = raised[0]
            raise exc from _RemoteTraceback(text)
        dead = [(k, o[1]) for k, o in sorted(outcomes.items()) if o[0] == "died"]
        died = None
        if dead:
            k, code = dead[0]
            died = f"worker {k} of {workers} ended without a result (exit code {code})"
            if options.strict:
                raise RuntimeError(died)
        results = [o[1] for _, o in sorted(outcomes.items()) if o[0] == "ok"]
        commit_files(f for r in results for f in r.pending)
    finally:
        _remove_in_progress(out, capture_id, workers)
    return results, died


def _remove_in_progress(out: Path, capture_id: str, workers: int) -> None:
    """Delete the in-progress files of this run's workers that were not renamed, and
    the partition directories left empty (a later run would take them for data)."""
    remove_in_progress(out, capture_id, range(workers))

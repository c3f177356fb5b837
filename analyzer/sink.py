"""Parquet dataset sink: rows in, one Hive-partitioned Parquet dataset out.

Layout (DESIGN §5)::

    OUT/<table>/capture=<capture_id>/part-0.parquet
    OUT/<table>/capture=<capture_id>/part-<k>.parquet  (``--workers N``: one per worker)
    OUT/<table>/capture=<capture_id>/part-<k>-<m>.parquet  (the m-th file after the first)
    OUT/manifest.json                                  (analyzer.manifest)

Strategy: rows are buffered per table as plain dicts, converted column-wise to Arrow
every 4096 rows (Python dicts cost ~10x the memory of the Arrow values) and validated
against the declaration; as soon as ``rows_per_batch`` rows are pending they are
written as exactly one row group by a ``pq.ParquetWriter`` that stays open for the
whole run.  Only the current batch of each table is in memory.  Row groups have the
same boundaries however the caller chunks its calls, so the same rows give
byte-identical files.

Files are written under a hidden name (``.part-0.parquet.inprogress``, ignored by
pyarrow, Spark, DuckDB and polars) and renamed on ``close``, so a reader never sees a
half-written file as data.

A file holds at most ``file_row_groups`` row groups (``FILE_ROW_GROUPS``); the next ones
go to the writer's next file (``part-<k>-1.parquet``, ``part-<k>-2.parquet``, ...).  Why:
a Parquet writer keeps the metadata of every row group it wrote until it writes the
footer, ~57 KB a row group of the 83-column nats table: ~7 MB per GB of bulk NATS
capture, growing without bound with the capture (measured 2026-11-28: peak RSS of
``msgcap dissect`` 216 MB for 1 GB, 235 MB for 3 GB, the anonymous memory still rising
at the end).

Several part files: ``msgcap dissect --workers N`` splits one capture by flow across N
processes (``analyzer.parallel``); worker k writes ``part-<k>.parquet`` through a
*coordinated* writer (``coordinated=True``), which neither checks for an existing
capture nor renames its files on ``close``: the coordinating process checks before the
workers start, renames every worker's files once all have finished
(``commit_files``) and removes what an earlier run left (``remove_stale_parts``).  A
partition is read as a whole (``open_dataset``, ``read_spark_table``, any reader given
the table directory), never as one named file; row order across part files follows
the file names, so compare runs with different worker counts sorted by ``record_id``
(``flows``: ``flow_id``).

Partition key: the directory key is ``capture`` (a string holding the capture id), not
``capture_id``, so it never clashes with the ``capture_id`` column inside the files;
readers that add partition columns see both.  A capture id made only of digits would
be typed as an integer by readers that *infer* partition types (pyarrow's
``partitioning="hive"`` shorthand, Spark's default), so ``open_dataset`` and
``read_spark_table`` declare it as a string explicitly.  Other readers: declare the
partition as string too (Spark: ``spark.sql.sources.partitionColumnTypeInference.enabled
=false``).

Timestamps (table version 2) are stored as Parquet ``TIMESTAMP(MICROS, UTC)``, the type
plain ``spark.read.parquet`` reads with default settings, each followed by its exact
value in nanoseconds as an int64 ``<name>_ns`` column (``dissectors.tables.TS``).
Version 1 stored ``TIMESTAMP(NANOS)``, which Spark 4 cannot read as a timestamp.

Validation (``validate=True``, ``validate_batch``): measured on a 65536-row ``flows``
batch (31 columns), ~0.03 ms (per column, not per row: Arrow keeps null counts).  A row
key that is not a declared column raises ``SchemaError`` whether or not the writer
validates, as a value Arrow cannot convert always has, and as the payload rows' columnar
path (``dissectors.proto.columns``) always did: a decoder's undeclared key (a typo, a
column not yet declared) must not be silently dropped from one path's output and fail
the other's.  The check is one comparison of the keys ``rows_to_batch`` collects anyway
(it was a second pass over every row, ~37 ms of a 65536-row batch, when it was tied to
``validate``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import functools
import itertools
import json
import os
import queue
import re
import shutil
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.sinkapi import RowSink, Sink  # noqa: F401 - re-exported: the sink protocol
from dissectors.redaction import redact_text
from dissectors.schema import arrow_schema, rows_to_batch, spark_schema, validate_batch
from dissectors.tables import NS_SUFFIX, PARTITION_KEY, TableSpec, get_table

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "META_CAPTURE_ID",
    "META_INPUT_SHA256",
    "META_OPTIONS",
    "META_TOOL_VERSION",
    "PART_FILE",
    "DatasetWriter",
    "RowSink",
    "Sink",
    "canonical_json",
    "CaptureBusyError",
    "CaptureExistsError",
    "CaptureLock",
    "OutputError",
    "OutputWriteError",
    "binary_columns",
    "check_capture_absent",
    "commit_files",
    "dataset_schema",
    "exact_timestamps",
    "existing_partitions",
    "gated_rows",
    "open_dataset",
    "part_file",
    "part_files",
    "parquet_options",
    "partition_dir",
    "read_spark_table",
    "remove_stale_parts",
    "row_bytes",
    "table_dir",
    "with_exact_columns",
]

PART_FILE = "part-0.parquet"  # the (first) file of a one-process run (part 0)
_PART_RE = re.compile(r"part-(\d+)(?:-(\d+))?\.parquet\Z")
# Row groups per file (module docstring): 64 of at most ``BATCH_BYTES`` of Arrow data,
# ~3.6 MB of the nats table's row-group metadata held until the file is closed
FILE_ROW_GROUPS = 64
_CONVERT_ROWS = 4096  # row dicts held before conversion to Arrow
# A row group is written when ``rows_per_batch`` rows or this many Arrow bytes are
# pending, whichever comes first: a wide table (the nats table has 83 columns, ~470 bytes
# a row) would otherwise hold ~30 MB per batch, and the batch being filled, its combined
# copy and the one the Parquet thread encodes are all alive at once.
BATCH_BYTES = 16 * 2**20

META_TOOL_VERSION = b"msgcap.tool_version"
META_INPUT_SHA256 = b"msgcap.input_sha256"
META_CAPTURE_ID = b"msgcap.capture_id"
META_OPTIONS = b"msgcap.options"

_CAPTURE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


def table_dir(out_dir: str | os.PathLike[str], table: str) -> Path:
    return Path(out_dir) / table


def partition_dir(out_dir: str | os.PathLike[str], table: str, capture_id: str) -> Path:
    return Path(out_dir) / table / f"{PARTITION_KEY}={capture_id}"


def part_file(part: int = 0, seq: int = 0) -> str:
    """Name of the ``seq``-th file written by worker ``part`` (``part-0.parquet``, the
    first of one process; ``part-<part>-<seq>.parquet`` after the first)."""
    if part < 0 or seq < 0:
        raise ValueError(f"part and seq must be >= 0, got {part}, {seq}")
    return f"part-{part}.parquet" if seq == 0 else f"part-{part}-{seq}.parquet"


def _tmp_file(part: int = 0, seq: int = 0) -> str:
    return f".{part_file(part, seq)}.inprogress"


def part_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The finished part files of a partition directory, by part number."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [((int(m.group(1)), int(m.group(2) or 0)), p) for p in d.iterdir()
             if (m := _PART_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def existing_partitions(out_dir: str | os.PathLike[str], capture_id: str) -> list[Path]:
    """The partition directories of ``capture_id`` in ``out_dir`` (every table)."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    return sorted(p for p in out.glob(f"*/{PARTITION_KEY}={capture_id}") if p.is_dir())


class OutputError(OSError):
    """The dataset cannot be written as asked: OUT is full or failing, busy with the same
    capture, or already holds it.  Not a bug and not bad input, so the command line shows
    ``message`` and ``fix`` (what to do, in command-line terms) and exits 2, without a
    traceback.  An ``OSError`` (with no errno), so callers that handle file-system
    failures as such keep doing so."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}"

    def __reduce__(self) -> tuple:  # pickles across --workers processes
        return (type(self), (self.message, self.fix))


class CaptureExistsError(OutputError, FileExistsError):
    """The capture already has finished files in OUT (a ``FileExistsError`` too)."""

    def __init__(self, message: str, fix: str) -> None:
        OutputError.__init__(self, message, fix)


class CaptureBusyError(OutputError):
    """Another live process is writing the same capture into the same OUT."""


class OutputWriteError(OutputError):
    """Writing OUT failed (disk full, quota, I/O error): the run ends, its unfinished
    files are removed and the manifest records the capture as failed."""

    @classmethod
    def from_os_error(cls, exc: OSError, out_dir: str | os.PathLike[str]) -> OutputWriteError:
        # pyarrow words it "[Errno 28] Error writing bytes to file. Detail: ..."
        code = exc.errno
        text = str(exc)
        if code is None:
            code = next((c for c in (errno.ENOSPC, errno.EDQUOT)
                         if os.strerror(c) in text), None)
        if code in (errno.ENOSPC, errno.EDQUOT):
            return cls(
                f"cannot write the dataset in {out_dir}: {os.strerror(code)}",
                f"free space on the file system that holds {out_dir} (or give -o a "
                "directory on a larger one), then run the same command again with "
                "--overwrite",
            )
        reason = exc.strerror or text
        return cls(
            f"cannot write the dataset in {out_dir}: {reason}",
            f"make {out_dir} writable (or give -o a directory you can write to), then run "
            "the same command again",
        )


def check_capture_absent(out_dir: str | os.PathLike[str], capture_id: str) -> None:
    """``CaptureExistsError`` when ``capture_id`` already has finished part files in
    ``out_dir`` (in-progress files of a run that died do not count)."""
    out = Path(out_dir)
    existing = [p for p in existing_partitions(out, capture_id) if part_files(p)]
    if existing:
        shown = ", ".join(str(p.relative_to(out)) for p in existing[:3])
        raise CaptureExistsError(
            f"capture {capture_id} is already in {out} ({shown})",
            "add --overwrite to replace it, or give -o another directory",
        )


def remove_in_progress(
    out_dir: str | os.PathLike[str], capture_id: str, parts: Iterable[int] | None = None
) -> None:
    """Delete the in-progress files of ``capture_id`` (of parts ``parts``; None: every
    part) and the partition directories left empty, which a later run would take for
    data.  Only for the holder of the capture's ``CaptureLock``."""
    keep = None if parts is None else {str(k) for k in parts}
    for part in existing_partitions(out_dir, capture_id):
        for f in part.glob(".part-*.parquet.inprogress"):
            m = _PART_RE.match(f.name[1:-len(".inprogress")])
            if keep is None or (m is not None and m.group(1) in keep):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
        for d in (part, part.parent):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty


class CaptureLock:
    """Held by the one process writing ``capture_id`` into ``out_dir``.

    Why: two runs writing the same capture into one OUT would interleave renames and
    manifest entries, and a run killed with ``kill -9`` leaves in-progress files that
    must not block the next one.  The lock is ``OUT/.msgcap-run-<capture id>.lock``,
    locked with ``fcntl.flock`` (the kernel drops the lock when its process dies, however
    it dies) and holding the holder's pid, host, start and input.  A second run finds it
    locked and is refused (``CaptureBusyError``); a run that takes the lock of a file left
    by a dead run (a *stale* lock: ``stale`` holds what that run wrote) removes that
    run's in-progress files.  The file is deleted when the run has recorded its outcome
    in the manifest (``release(finished=True)``); a file left behind marks a run of the
    capture that did not finish.  On a file system without ``flock`` the holder's pid is
    checked instead (same host only)."""

    def __init__(self, out_dir: str | os.PathLike[str], capture_id: str,
                 input_path: str | os.PathLike[str] = "") -> None:
        self.out_dir = Path(out_dir)
        self.capture_id = capture_id
        self.input_path = str(input_path)
        self.path = self.out_dir / f".msgcap-run-{capture_id}.lock"
        self.stale: dict[str, Any] | None = None
        self._fd: int | None = None

    def acquire(self) -> CaptureLock:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._acquire()
            me = {"pid": os.getpid(), "host": os.uname().nodename,
                  "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "input": self.input_path}
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (json.dumps(me, sort_keys=True) + "\n").encode(), 0)
        except OutputError:  # busy
            self._close()
            raise
        except OSError as exc:
            self._close()
            raise OutputWriteError.from_os_error(exc, self.out_dir) from exc
        if self.stale is not None:
            # (``logging`` imported here: this warning is its only use, and a run that
            # never gives it need not import the module, ~2.4 ms of every start-up)
            import logging

            logging.getLogger(__name__).warning(
                "an earlier run of capture %s into %s (pid %s, started %s) did not finish; "
                "its unfinished files are removed", self.capture_id, self.out_dir,
                self.stale.get("pid", "?"), self.stale.get("started", "?"))
        remove_in_progress(self.out_dir, self.capture_id)  # no live run owns them
        return self

    def _acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_lock(fd)
                os.close(fd)
                raise self._busy(holder) from None
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    os.close(fd)
                    raise
                holder = _read_lock(fd)  # no flock here: is the holder alive?
                if holder and _alive(holder):
                    os.close(fd)
                    raise self._busy(holder) from None
            # a run that just finished may have unlinked the file we opened: lock the
            # file that is at the path, or two runs would each hold "the" lock
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                self.stale = _read_lock(fd)
                return
            os.close(fd)

    def _busy(self, holder: dict[str, Any] | None) -> CaptureBusyError:
        who = (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
               f"{holder.get('started', '?')}" if holder else "pid unknown")
        return CaptureBusyError(
            f"capture {self.capture_id} is being written into {self.out_dir} by another "
            f"msgcap run ({who})",
            "wait for that run to end, or give -o another directory; one capture cannot be "
            "written into one output directory by two runs at once",
        )

    def release(self, finished: bool = True) -> None:
        """Unlock; ``finished``: the manifest has this run's outcome, delete the file
        (else it stays as the mark of a run that did not finish)."""
        if self._fd is None:
            return
        if finished:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()  # while locked: nobody holds a lock on it after us
        self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> CaptureLock:
        return self.acquire()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.release(finished=exc_type is None)


def _read_lock(fd: int) -> dict[str, Any] | None:
    """What the holder of a lock file wrote about itself (None: nothing readable)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(holder: dict[str, Any]) -> bool:
    if holder.get("host") != os.uname().nodename:
        return True  # cannot tell: assume it runs
    try:
        os.kill(int(holder.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True
    return True


def commit_files(files: Iterable[tuple[str | os.PathLike[str], str | os.PathLike[str]]]) -> None:
    """Rename finished in-progress files ``(tmp, final)`` to their final names."""
    for tmp, final in files:
        os.replace(tmp, final)


def remove_stale_parts(
    out_dir: str | os.PathLike[str], capture_id: str, keep: Mapping[str, Iterable[str]]
) -> None:
    """After a run of ``capture_id``: drop the partitions of tables the run did not
    write and, in the others, every part file other than ``keep[table]`` (file names)."""
    for part in existing_partitions(out_dir, capture_id):
        names = keep.get(part.parent.name)
        if names is None:
            shutil.rmtree(part)
            continue
        names = set(names)
        for f in part.glob("part-*.parquet"):
            if f.name not in names:
                f.unlink()


def gated_rows(table: str, rows: Sequence[Mapping[str, Any]], keep_secrets: bool
               ) -> Sequence[Mapping[str, Any]]:
    """``rows`` of ``table`` as they may leave the process: an anomaly's free text may
    quote wire bytes, so its ``detail`` passes the one redaction gate
    (``dissectors.redaction.redact_text``) unless the run keeps secrets.  Every sink of
    dict rows calls it (``DatasetWriter``, the Spark tasks' ``RunSink``), so no path
    writes a detail another path would have redacted."""
    if table != "anomalies" or keep_secrets:
        return rows
    return [r if not r.get("detail") else {**r, "detail": redact_text(r["detail"])}
            for r in rows]


@functools.cache
def binary_columns(spec: TableSpec) -> tuple[str, ...]:
    """The columns of ``spec``'s table that hold captured bytes (Arrow binary): what makes
    one dict row large (a payload kept whole); every other value is bounded by a cap of
    its own (a line's length, a JSON text's)."""
    return tuple(f.name for f in arrow_schema(spec)
                 if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))


def row_bytes(binary: tuple[str, ...], row: Mapping[str, Any]) -> int:
    """The captured bytes a dict row holds in the ``binary`` columns (``binary_columns``):
    what a sink counts, next to the rows, to bound what it holds before converting."""
    n = 0
    for name in binary:
        value = row.get(name)
        if value:
            n += len(value)
    return n


def canonical_json(obj: Any) -> str:
    """Key-sorted compact JSON (options in file metadata; stable across runs)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def parquet_options(spec: TableSpec) -> dict[str, Any]:
    """``pq.ParquetWriter`` keyword arguments for ``spec``'s table.

    Why these (measured with ``benchmarks/bench_parquet.py``, docs/performance.md
    "Parquet settings"): zstd at Arrow's default level, since higher levels cost up to
    2.4x the CPU for 1 % of the bytes (payloads dominate and hardly compress); the
    dictionary on every column (repeated payloads of a fan-out are stored once) except
    those declaring an ``encoding`` (``Field.encoding``: ordered integers, where the
    differences are smaller than any dictionary); statistics on (a lookup by record id
    or time skips row groups; off saves nothing measurable).  A dictionary page may hold
    a whole row group (``BATCH_BYTES``): with Arrow's default of 1 MiB a column chunk
    with more distinct values fell back to plain encoding there, so the payloads a
    fan-out or a Pulsar SEND and its MESSAGE repeat further on were stored again (the
    103 MB bulk NATS recording's dataset 62 -> 40 MB, the 1 GB one's 624 -> 399 MB, for
    the same CPU; ~12 MB more peak RSS on the 1 GB one)."""
    encoded = {f.name: f.encoding for f in spec.columns if f.encoding}
    options: dict[str, Any] = {"compression": "zstd", "write_statistics": True,
                               "dictionary_pagesize_limit": BATCH_BYTES}
    if encoded:
        # pyarrow takes no dictionary default next to ``column_encoding``: name every
        # other column, nested ones by their leaves (a map's "m" would not cover them)
        options["use_dictionary"] = [p for p in _leaf_paths(spec) if p not in encoded]
        options["column_encoding"] = encoded
    return options


@functools.cache
def _leaf_paths(spec: TableSpec) -> tuple[str, ...]:
    """The Parquet column paths of ``spec``'s table (``headers.key_value.key``...), as
    pyarrow's writer names them with compliant nested types (its default since pyarrow
    13): a struct's leaves ``<name>.<field>``, a list's ``<name>.list.element``, a map's
    ``<name>.key_value.key`` and ``.value``.

    Derived from the Arrow schema: reading them from the footer of an empty file written
    for the schema cost ~3 ms a table, ~40 ms of every run.  tests/analyzer/test_sink.py
    checks them against such a footer for every table."""
    return tuple(path for f in arrow_schema(spec) for path in _type_paths(f.type, f.name))


def _type_paths(t: pa.DataType, prefix: str) -> Iterator[str]:
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            child = t.field(i)
            yield from _type_paths(child.type, f"{prefix}.{child.name}")
    elif pa.types.is_map(t):
        yield from _type_paths(t.key_type, f"{prefix}.key_value.key")
        yield from _type_paths(t.item_type, f"{prefix}.key_value.value")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        yield from _type_paths(t.value_type, f"{prefix}.list.element")
    else:
        yield prefix


class _ParquetThread:
    """One thread that runs the Parquet writers' calls, in the order they were made.

    Why: encoding and zstd-compressing row groups is about a third of a bulk run, and
    pyarrow does it without the GIL, so on a second core it overlaps the dissection
    instead of pausing it.  One thread and one FIFO keep every call in order, so the
    files are byte-identical to writing inline.  At most ``depth`` batches wait: memory
    stays bounded.  An error surfaces on the next call or at ``drain``; the calls after
    it are skipped (a Parquet writer that failed is closed: writing on would only raise
    "Operation on closed file" and hide the first error, e.g. a full disk)."""

    def __init__(self, depth: int = 1) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="msgcap-parquet", daemon=True)
        self._thread.start()

    def submit(self, fn: Any, *args: Any) -> None:
        self._raise()
        self._q.put((fn, args))

    def drain(self) -> None:
        """Wait until everything submitted ran; raise the first error."""
        self._q.join()
        self._raise()

    def stop(self) -> None:
        self._q.put(None)
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                if not self._failed:  # after an error, skip (the files are lost anyway)
                    fn, args = item
                    fn(*args)
            except BaseException as exc:  # handed to the caller's thread
                self._error = exc
                self._failed = True
            finally:
                self._q.task_done()


class _Table:
    """One table's file being written.  A plain class: a dataclass is built (its methods
    generated and compiled) at every import, ~0.8 ms of each run's start, for a record
    that is never compared or shown."""

    __slots__ = ("spec", "schema", "pdir", "files", "writer", "file_row_groups", "rows",
                 "rows_bytes", "batches", "batch_rows", "batch_bytes", "count", "row_groups")

    def __init__(self, spec: TableSpec, schema: pa.Schema, pdir: Path) -> None:
        self.spec = spec
        self.schema = schema  # declared schema + provenance metadata (file key-value metadata)
        self.pdir = pdir  # the partition directory
        self.files: list[tuple[Path, Path]] = []  # (in-progress, final) of each file opened
        self.writer: pq.ParquetWriter | None = None  # of the last of ``files``, while open
        self.file_row_groups = 0  # row groups in that file (the Parquet thread's count)
        self.rows: list[Mapping[str, Any]] = []
        self.rows_bytes = 0  # captured bytes ``rows`` hold (``row_bytes``)
        self.batches: list[pa.RecordBatch] = []  # precede ``rows``
        self.batch_rows = 0
        self.batch_bytes = 0  # Arrow bytes of ``batches``
        self.count = 0  # rows written to the file
        self.row_groups = 0


class DatasetWriter:
    """Writes the rows of one capture into the dataset at ``out_dir``.

    ``write_rows``/``write_batch`` may be called for any table in any interleaving;
    ``close`` finishes every file and returns the row count per table.  Use it as a
    context manager to have ``close`` called (also on error: what was written so far
    is kept, and the manifest says the run failed).

    A capture already present in ``out_dir`` raises ``FileExistsError`` unless
    ``overwrite``; then its old partitions are replaced when ``close`` succeeds.

    ``part`` numbers the files (``part-<part>.parquet``, then ``part-<part>-<seq>.parquet``
    every ``file_row_groups`` row groups: module docstring); ``coordinated`` makes this one
    of several writers of the capture under ``analyzer.parallel``: no existing-capture
    check, and ``close`` leaves the finished files under their in-progress names
    (``pending_files``) for the coordinator to ``commit_files`` and clean up.

    A ``Sink`` that takes Arrow batches and every flow's rows.
    """

    columnar = True

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        capture_id: str,
        input_sha256: str,
        tool_version: str,
        options: Mapping[str, Any],
        rows_per_batch: int = 65536,
        validate: bool = True,
        *,
        batch_bytes: int = BATCH_BYTES,
        overwrite: bool = False,
        part: int = 0,
        coordinated: bool = False,
        file_row_groups: int = FILE_ROW_GROUPS,
    ) -> None:
        if not _CAPTURE_ID_RE.match(capture_id):
            raise ValueError(f"capture id {capture_id!r} is not a safe directory name")
        if not _SHA256_RE.match(input_sha256):
            raise ValueError(f"input_sha256 must be 64 lowercase hex digits, got {input_sha256!r}")
        if rows_per_batch < 1:
            raise ValueError("rows_per_batch must be >= 1")
        if file_row_groups < 1:
            raise ValueError("file_row_groups must be >= 1")
        self.out_dir = Path(out_dir)
        self.capture_id = capture_id
        self.input_sha256 = input_sha256
        self.tool_version = tool_version
        self.options = dict(options)
        self.rows_per_batch = rows_per_batch
        self.batch_bytes = batch_bytes
        self.validate = validate
        self.overwrite = overwrite
        self.part = part
        self.coordinated = coordinated
        self.file_row_groups = file_row_groups
        self._options_json = canonical_json(self.options)
        self._chunk = min(rows_per_batch, _CONVERT_ROWS)
        self._tables: dict[str, _Table] = {}
        self._counts: dict[str, int] | None = None
        self._thread: _ParquetThread | None = None  # started by the first row group
        if not overwrite and not coordinated:
            check_capture_absent(self.out_dir, capture_id)
        with self._output():
            self.out_dir.mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- public API

    def write_rows(self, spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows (dicts keyed by column name; missing keys are null) to ``spec``'s
        table.  Full batches of ``rows_per_batch`` rows are written immediately."""
        t = self._table(spec)
        if not isinstance(rows, Sequence):
            it = iter(rows)
            while chunk := list(itertools.islice(it, self._chunk)):
                self._add_rows(t, chunk)
            return
        self._add_rows(t, rows)

    def write_batch(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
        """Append an Arrow batch (declared columns, order and types) to ``spec``'s table."""
        t = self._table(spec)
        if self.validate:
            validate_batch(spec, batch)
        parts = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        self._convert_rows(t)
        for b in parts:
            if b.num_rows:
                self._push(t, self._conform(t, b))
        if self._full(t):
            self._drain_batches(t, final=False)

    def owns(self, flow_id: int | None) -> bool:
        """Whether rows of ``flow_id`` are this writer's to write: always, for a writer
        that takes every row (``analyzer.parallel.OwnedRowsWriter`` keeps one share)."""
        return True

    def buffered_rows(self, table: str) -> int:
        """Rows of ``table`` accepted but not yet written to its file."""
        t = self._tables.get(table)
        return 0 if t is None else len(t.rows) + t.batch_rows

    @property
    def closed(self) -> bool:
        return self._counts is not None

    @property
    def tables(self) -> dict[str, TableSpec]:
        """The specs of the tables written (or ensured) so far, by name."""
        return {name: self._tables[name].spec for name in sorted(self._tables)}

    def close(self, ensure_tables: Iterable[TableSpec | str] = ()) -> dict[str, int]:
        """Write what is buffered, finish every file and return rows per table (sorted
        by name).  Tables in ``ensure_tables`` that got no rows get an empty file with
        the right schema.  Calling ``close`` again returns the same counts."""
        if self._counts is not None:
            return dict(self._counts)
        for item in ensure_tables:
            spec = get_table(item) if isinstance(item, str) else item
            self._table(spec)
        with self._output():
            for name in sorted(self._tables):
                t = self._tables[name]
                self._convert_rows(t)
                if t.batches:
                    self._drain_batches(t, final=True)
            # the tables with no row at all get their empty files (the schema) while the
            # writer thread still encodes the others' last row groups: ~2 ms a table,
            # ~13 tables in a NATS-only run, that the main thread otherwise spent after
            # waiting for the thread
            # (``count``, not ``files``: the thread opens a table's first file itself, so a
            # table with rows queued may have none yet)
            for name in sorted(self._tables):
                t = self._tables[name]
                if not t.count:
                    self._open(t, empty=True)
                    self._close_writer(t)
            self._join_thread()
            # every file finished before any is renamed: a failure here (disk full while
            # writing footers) leaves no table of this run under its final name
            for name in sorted(self._tables):
                self._close_writer(self._tables[name])
            if not self.coordinated:
                commit_files(f for _, t in sorted(self._tables.items()) for f in t.files)
            if self.overwrite and not self.coordinated:
                self._remove_stale()
        self._counts = {name: self._tables[name].count for name in sorted(self._tables)}
        return dict(self._counts)

    def pending_files(self) -> list[tuple[str, str]]:
        """``(in-progress, final)`` paths of the files a closed coordinated writer left
        for its coordinator to rename (empty for a writer that renames its own)."""
        if self._counts is None or not self.coordinated:
            return []
        return [
            (str(tmp), str(final))
            for _, t in sorted(self._tables.items())
            for tmp, final in t.files
            if tmp.exists()
        ]

    def abort(self) -> None:
        """Close and delete the files of this run that were not finished."""
        with contextlib.suppress(Exception):  # already failing: just release
            self._join_thread()
        for t in self._tables.values():
            if t.writer is not None:
                with contextlib.suppress(Exception):  # already failing: just release
                    t.writer.close()
                # a close that failed (disk full) leaves pyarrow's writer "open": its
                # __del__ would try again and print a traceback at exit
                t.writer.is_open = False
                t.writer = None
            for tmp, _final in t.files:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            if self.coordinated:
                # the partition directories are shared with the other workers or task
                # attempts, one of which may have just made it to open its file there
                # (``_open``: mkdir, then open): removing it "because it is empty" failed
                # that one's open (a given-up light run of --workers 2, seen in CI).
                # --workers' coordinator removes what is left empty once every worker
                # ended (``remove_in_progress``); after a failed Spark job an empty one
                # may stay, which holds no file and is no capture (``check_capture_absent``)
                continue
            for d in (t.pdir, t.pdir.parent):  # left empty: not a capture
                with contextlib.suppress(OSError):
                    d.rmdir()
        self._counts = {}

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._counts is not None:
            return
        if exc_type is None:
            self.close()
            return
        try:
            self.close()  # keep what was written: partial data of a failed run
        except Exception:  # the original error matters more
            self.abort()

    # ----------------------------------------------------------------- internals

    def _remove_stale(self) -> None:
        remove_stale_parts(
            self.out_dir, self.capture_id,
            {name: [final.name for _, final in t.files] for name, t in self._tables.items()}
        )

    def _table(self, spec: TableSpec) -> _Table:
        if self._counts is not None:
            raise RuntimeError("DatasetWriter is closed")
        t = self._tables.get(spec.name)
        if t is not None:
            if t.spec is not spec and t.spec != spec:
                raise ValueError(f"table {spec.name!r} written with two different declarations")
            return t
        meta = dict(arrow_schema(spec).metadata or {})
        meta.update(
            {
                META_TOOL_VERSION: self.tool_version.encode(),
                META_INPUT_SHA256: self.input_sha256.encode(),
                META_CAPTURE_ID: self.capture_id.encode(),
                META_OPTIONS: self._options_json.encode(),
            }
        )
        t = _Table(spec, arrow_schema(spec).with_metadata(meta),
                   partition_dir(self.out_dir, spec.name, self.capture_id))
        self._tables[spec.name] = t
        return t

    def _add_rows(self, t: _Table, rows: Sequence[Mapping[str, Any]]) -> None:
        # row dicts are converted to Arrow every ``_chunk`` rows (Python objects are far
        # bigger than Arrow values) or once they hold ``batch_bytes`` of captured bytes
        # (``row_bytes``: a payload kept whole under a large ``payload_cap``, which the
        # row count alone let 4,096 rows hold); Arrow chunks are written once a batch is
        # full
        binary = binary_columns(t.spec)
        step, limit = self._chunk, self.batch_bytes
        held, nbytes = t.rows, t.rows_bytes
        for row in rows:
            held.append(row)
            if binary:
                nbytes += row_bytes(binary, row)
            if len(held) >= step or nbytes >= limit:
                self._convert_rows(t)
                held, nbytes = t.rows, 0
                if self._full(t):
                    self._drain_batches(t, final=False)
        t.rows_bytes = nbytes
        if held and t.batch_rows + len(held) >= self.rows_per_batch:
            self._convert_rows(t)
            self._drain_batches(t, final=False)

    def _convert_rows(self, t: _Table) -> None:
        """The table's held dict rows as one Arrow batch among its batches."""
        if t.rows:
            self._push(t, self._rows_batch(t, t.rows))
            t.rows, t.rows_bytes = [], 0

    @staticmethod
    def _push(t: _Table, batch: pa.RecordBatch) -> None:
        t.batches.append(batch)
        t.batch_rows += batch.num_rows
        t.batch_bytes += batch.nbytes

    def _full(self, t: _Table) -> bool:
        return t.batch_rows >= self.rows_per_batch or t.batch_bytes >= self.batch_bytes

    def _rows_batch(self, t: _Table, rows: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
        rows = gated_rows(t.spec.name, rows, self.options.get("keep_secrets") is True)
        batch = rows_to_batch(t.spec, rows)  # undeclared keys raise (module docstring)
        if self.validate:
            validate_batch(t.spec, batch)
        return self._conform(t, batch)

    @staticmethod
    def _conform(t: _Table, batch: pa.RecordBatch) -> pa.RecordBatch:
        # same buffers, declared field nullability and the file's metadata
        if batch.schema.equals(t.schema, check_metadata=True):
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=t.schema)

    def _drain_batches(self, t: _Table, final: bool) -> None:
        n = self.rows_per_batch
        table = pa.Table.from_batches(t.batches, schema=t.schema)
        # past the byte bound, everything pending is one (shorter) row group
        by_bytes = t.batch_bytes >= self.batch_bytes and table.num_rows < n
        end = table.num_rows if final or by_bytes else (table.num_rows // n) * n
        # a row group is written from the batches' slices as they are: Parquet encodes
        # a column chunk piece by piece, so joining them first (``combine_chunks``) only
        # copied every byte once more (~14 % of a bulk run's main thread, most of it
        # faulting in fresh pages); the rows and row groups are the same either way
        for start in range(0, end, n):
            self._write(t, table.slice(start, min(n, end - start)))
        rest = table.slice(end)
        t.batches = rest.to_batches() if rest.num_rows else []
        t.batch_rows = rest.num_rows
        t.batch_bytes = sum(b.nbytes for b in t.batches)

    @contextlib.contextmanager
    def _output(self) -> Iterator[None]:
        """OS errors of writing OUT (disk full, I/O error) as ``OutputWriteError``."""
        try:
            yield
        except OutputError:
            raise
        except OSError as exc:
            raise OutputWriteError.from_os_error(exc, self.out_dir) from exc

    @staticmethod
    def _close_writer(t: _Table) -> None:
        if t.writer is not None:
            t.writer.close()
            t.writer = None

    def _open(self, t: _Table, empty: bool = False) -> None:
        """``empty``: the file gets no row; it is written without ``parquet_options``.
        Why: those options only shape column chunks, and an empty file has none (its
        footer is the schema and metadata, byte for byte the same: test_sink checks it for
        every table); naming every leaf for ``use_dictionary`` was ~45,000 bytecodes of a
        NATS-only run, whose other ~13 tables are empty."""
        seq = len(t.files)
        tmp, final = t.pdir / self._tmp_name(seq), t.pdir / part_file(self.part, seq)
        # listed before it is made: a writer that fails once it has made its file (the
        # disk full) leaves that file for ``abort`` to delete
        t.files.append((tmp, final))
        t.pdir.mkdir(parents=True, exist_ok=True)
        options = {} if empty else parquet_options(t.spec)
        t.writer = pq.ParquetWriter(tmp, t.schema, **options)
        t.file_row_groups = 0

    def _tmp_name(self, seq: int) -> str:
        """The in-progress name of this writer's ``seq``-th file of a table."""
        return _tmp_file(self.part, seq)

    def _write(self, t: _Table, batch: pa.Table) -> None:
        # every batch reaching here was validated when it entered the buffer
        if batch.num_rows == 0:
            return
        t.count += batch.num_rows
        t.row_groups += 1
        if self._thread is None:
            self._thread = _ParquetThread()
        with self._output():  # raises what the thread met on an earlier row group
            self._thread.submit(self._write_row_group, t, batch)

    def _write_row_group(self, t: _Table, rows: pa.Table) -> None:
        """In the Parquet thread (``_ParquetThread``): one row group of ``rows`` (at
        most ``rows_per_batch``, in as many chunks as they came)."""
        if t.writer is None:
            self._open(t)
        t.writer.write_table(rows, row_group_size=self.rows_per_batch)
        t.file_row_groups += 1
        if t.file_row_groups >= self.file_row_groups:  # the next row group: the next file
            t.writer.close()
            t.writer = None

    def _join_thread(self) -> None:
        """Wait for the row groups still being written; raise what went wrong there."""
        thread, self._thread = self._thread, None
        if thread is not None:
            try:
                thread.drain()
            finally:
                thread.stop()


# ---------------------------------------------------------------------------- readers


def dataset_schema(spec: TableSpec) -> pa.Schema:
    """Schema a reader of the dataset sees: the declaration plus the ``capture``
    partition column (string)."""
    return arrow_schema(spec).append(pa.field(PARTITION_KEY, pa.string()))


def open_dataset(out_dir: str | os.PathLike[str], spec: TableSpec) -> ds.Dataset:
    """``pyarrow.dataset`` over every capture of ``spec``'s table, with the declared
    schema and ``capture`` as a string partition column (never inferred)."""
    import pyarrow.dataset as ds

    partitioning = ds.partitioning(pa.schema([(PARTITION_KEY, pa.string())]), flavor="hive")
    return ds.dataset(
        table_dir(out_dir, spec.name),
        format="parquet",
        partitioning=partitioning,
        schema=dataset_schema(spec),
    )


EXACT_TS = pa.timestamp("ns", tz="UTC")


def exact_timestamps(table: pa.Table) -> pa.Table:
    """``table`` with each timestamp column ``X`` that has its ``X_ns`` companion beside it
    replaced by the exact value (``timestamp[ns, UTC]``, a zero-copy cast of ``X_ns``) and
    the companion dropped: what msgcap's own in-memory readers (summary, report,
    transcript) work on, so they never see the microsecond rounding Spark needs."""
    names = table.column_names
    for name in [n for n in names if pa.types.is_timestamp(table.schema.field(n).type)]:
        exact = name + NS_SUFFIX
        if exact not in table.column_names:
            continue
        i = table.column_names.index(name)
        table = table.set_column(i, name, table[exact].cast(EXACT_TS))
        table = table.drop_columns([exact])
    return table


def with_exact_columns(schema: pa.Schema, columns: Sequence[str]) -> list[str]:
    """``columns`` plus the ``X_ns`` companion of each timestamp column among them (for
    ``exact_timestamps``), in order, the ones ``schema`` lacks left out."""
    names = set(schema.names)
    out: list[str] = []
    for c in columns:
        if c not in names:
            continue
        out.append(c)
        if pa.types.is_timestamp(schema.field(c).type) and c + NS_SUFFIX in names:
            out.append(c + NS_SUFFIX)
    return list(dict.fromkeys(out))


def _uri_join(base: str | os.PathLike[str], *parts: str) -> str:
    """``base/part/...`` for a local path or a URI (``s3://b/x``: ``Path`` would fold
    the ``//``)."""
    text = os.fspath(base)
    if "://" in text:
        return "/".join([text.rstrip("/"), *parts])
    return str(Path(text, *parts))


def read_spark_table(
    spark: SparkSession,
    out_dir: str | os.PathLike[str],
    spec: TableSpec,
) -> DataFrame:
    """Read ``spec``'s table (all captures; ``out_dir`` a path or a URI Spark knows) into
    a Spark DataFrame whose columns are ``spark_schema(spec)`` (types and comments; Spark
    makes every column nullable) plus ``capture`` (string, never inferred).

    Nothing special is needed for timestamps any more (table version 2): they are
    stored as microseconds, which plain ``spark.read.parquet`` reads as
    ``TimestampType``; the exact nanoseconds are the ``<name>_ns`` long columns.
    """
    from pyspark.sql import types as T

    declared = spark_schema(spec)
    fields = [T.StructField(sf.name, sf.dataType, True, sf.metadata) for sf in declared.fields]
    fields.append(T.StructField(PARTITION_KEY, T.StringType(), True))
    return spark.read.schema(T.StructType(fields)).parquet(_uri_join(out_dir, spec.name))

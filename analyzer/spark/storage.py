"""Where ``spark ingest`` reads captures and writes the dataset: a local (or shared) path,
or a URI of any filesystem pyarrow knows (``s3://``, ``gs://``, ``hdfs://`` where the
client library is present, ``file://``).

Strategy: a local path keeps the code path it always had (``analyzer.sink`` and
``analyzer.manifest`` work on directories).  For a URI:

* captures are read through ``pyarrow.fs`` random-access files (``open_input``): the
  split path's byte-range reads seek like they do in a local file; a task that dissects a
  whole capture first copies it to its scratch directory (``local_copy``), because the
  local reader wants a path (and a compressed capture is read from the start anyway);
* a writer on an executor writes into its scratch directory with the ordinary
  ``DatasetWriter``, then uploads each finished file under its attempt's hidden name
  (``Store.upload``); the driver commits with ``FileSystem.move``.  On HDFS that is a
  rename; on S3 and GCS there is no rename, and pyarrow moves a file by copy + delete,
  so the commit is not atomic there: a reader listing during the commit may see some
  of a capture's part files and not others (never a partial file: an object appears
  whole or not at all);
* the manifest is read, updated with the local code (``update_manifest``, in a scratch
  copy holding the capture's ``flows``/``anomalies`` parts it counts) and written back.
  There is no lock on object storage: two ingests into one OUT at the same time can
  lose one manifest entry (their part files are unaffected).

A ``Store`` pickles as its URI and resolves the filesystem again where it is used, so
executors authenticate with their own environment (``spark.executorEnv.AWS_*`` or the
node's credentials), never with secrets shipped in task closures.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_COPY_BLOCK = 1 << 20


def is_uri(location: str | os.PathLike) -> bool:
    """True for ``scheme://...`` other than ``file://`` (which is a local path)."""
    s = os.fspath(location)
    return bool(_URI_RE.match(s)) and not s.startswith("file://")


def local_path(location: str | os.PathLike) -> str:
    """A local location made absolute against the *driver's* working directory
    (executors run in scratch directories of their own); ``file://`` stripped."""
    s = os.fspath(location)
    if s.startswith("file://"):
        s = s[len("file://"):]
    return os.path.abspath(s)


def normalize(location: str | os.PathLike) -> str:
    """What the driver hands to tasks: a URI as given (no trailing slash), else an
    absolute local path."""
    s = os.fspath(location)
    return s.rstrip("/") if is_uri(s) else local_path(s)


def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` of a URI (pyarrow's ``FileSystem.from_uri``:
    ``s3://bucket/key?endpoint_override=host:port&scheme=http`` and the standard AWS_*
    variables, ``AWS_ENDPOINT_URL`` included, configure S3)."""
    fs, path = pafs.FileSystem.from_uri(location)
    return fs, path.rstrip("/")


def file_size(location: str) -> int:
    if not is_uri(location):
        return os.path.getsize(location)
    fs, path = resolve(location)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{location}: no such file")
    return int(info.size)


def open_input(location: str) -> IO[bytes]:
    """A seekable binary file (``seek``/``read``/``close``) on any filesystem."""
    if not is_uri(location):
        return open(location, "rb")  # noqa: SIM115 - the caller closes it
    fs, path = resolve(location)
    return fs.open_input_file(path)


def sha256(location: str) -> str:
    h = hashlib.sha256()
    with contextlib.closing(open_input(location)) as f:
        while block := f.read(_COPY_BLOCK):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def local_copy(location: str) -> Iterator[tuple[str, str]]:
    """``(local path, sha256)`` of a capture; a URI's bytes are copied to a scratch
    file first (removed afterwards), hashed on the way."""
    if not is_uri(location):
        from analyzer.pipeline import file_sha256

        yield location, file_sha256(location)
        return
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix="msgcap-capture-", suffix="-" + Path(location).name)
    try:
        with os.fdopen(fd, "wb") as out, contextlib.closing(open_input(location)) as src:
            while block := src.read(_COPY_BLOCK):
                h.update(block)
                out.write(block)
        yield tmp, h.hexdigest()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class Store:
    """The dataset OUT on a remote filesystem (a URI): the operations the driver and
    the executors of ``spark ingest`` need, by path relative to OUT."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.root = resolve(self.uri)

    def __reduce__(self) -> tuple[Any, tuple[str]]:  # ship the URI, not the credentials
        return (Store, (self.uri,))

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def rel(self, path: str) -> str:
        return path[len(self.root) + 1:]

    def mkdirs(self) -> None:
        self.fs.create_dir(self.root, recursive=True)

    def upload(self, local: str | os.PathLike, rel: str) -> str:
        """Copy a local file to OUT/rel; returns its path in the filesystem."""
        dest = self.path(rel)
        with open(local, "rb") as src, self.fs.open_output_stream(dest) as out:
            shutil.copyfileobj(src, out, _COPY_BLOCK)
        return dest

    def upload_pending(self, scratch: str | os.PathLike,
                       pending: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """A coordinated writer's ``(in-progress, final)`` files, written under the
        local ``scratch`` OUT, uploaded under the same names; the remote pairs."""
        out = []
        for tmp, final in pending:
            rtmp = os.path.relpath(tmp, scratch)
            rfinal = os.path.relpath(final, scratch)
            out.append((self.upload(tmp, rtmp), self.path(rfinal)))
        return out

    def listing(self, rel: str = "") -> list[pafs.FileInfo]:
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=True)
        return self.fs.get_file_info(sel)

    def files(self, rel: str = "") -> list[str]:
        return [i.path for i in self.listing(rel) if i.type == pafs.FileType.File]

    def capture_parts(self, capture_id: str) -> list[str]:
        """Finished part files of ``capture_id`` (``<table>/capture=<id>/part-*``)."""
        from dissectors.tables import PARTITION_KEY

        found = []
        for f in self.files():
            parts = self.rel(f).split("/")
            if (len(parts) == 3 and parts[1] == f"{PARTITION_KEY}={capture_id}"
                    and parts[2].startswith("part-") and parts[2].endswith(".parquet")):
                found.append(f)
        return sorted(found)

    def check_capture_absent(self, capture_id: str) -> None:
        from analyzer.sink import CaptureExistsError

        existing = self.capture_parts(capture_id)
        if existing:
            shown = ", ".join(self.rel(p) for p in existing[:3])
            raise CaptureExistsError(
                f"capture {capture_id} is already in {self.uri} ({shown})",
                "add --overwrite to replace it, or give -o another directory",
            )

    def commit(self, capture_id: str, pending: Sequence[tuple[str, str]],
               overwrite: bool) -> None:
        """``analyzer.spark.ingest._commit`` on this filesystem: ``move`` each file (S3:
        copy + delete), then drop the parts of an earlier run (``overwrite``)."""
        if not overwrite:
            self.check_capture_absent(capture_id)
        for tmp, final in pending:
            self.fs.move(tmp, final)
        if overwrite:
            keep = {final for _tmp, final in pending}
            for f in self.capture_parts(capture_id):
                if f not in keep:
                    self.fs.delete_file(f)

    def remove_matching(self, pattern: re.Pattern[str]) -> None:
        """Delete every file whose path relative to OUT matches ``pattern``."""
        for f in self.files():
            if pattern.fullmatch(self.rel(f)):
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(f)

    def delete_dir(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(self.path(rel))

    def open_parquet(self, path: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(path))

    def update_manifest(self, run: Any) -> dict[str, Any]:
        """``analyzer.manifest.update_manifest`` on a scratch copy of what it reads
        (``manifest.json``, the capture's ``flows`` and ``anomalies`` parts), then
        ``manifest.json`` written back (one object write: readers see old or new)."""
        from analyzer.manifest import MANIFEST_NAME, update_manifest
        from dissectors.tables import PARTITION_KEY

        with tempfile.TemporaryDirectory(prefix="msgcap-manifest-") as scratch:
            wanted = [f"{t}/{PARTITION_KEY}={run.capture_id}/" for t in ("flows", "anomalies")]
            for f in self.files():
                rel = self.rel(f)
                if rel == MANIFEST_NAME or any(rel.startswith(w) for w in wanted):
                    local = Path(scratch, rel)
                    local.parent.mkdir(parents=True, exist_ok=True)
                    with self.fs.open_input_stream(f) as src, open(local, "wb") as out:
                        shutil.copyfileobj(src, out, _COPY_BLOCK)
            manifest = update_manifest(scratch, run)
            self.upload(Path(scratch, MANIFEST_NAME), MANIFEST_NAME)
        return manifest


def upload_dir(store: Store, local: str | os.PathLike, rel: str) -> list[str]:
    """Every file under ``local`` uploaded under OUT/rel; their remote paths."""
    out = []
    for dirpath, _dirs, names in os.walk(local):
        for name in sorted(names):
            f = os.path.join(dirpath, name)
            out.append(store.upload(f, f"{rel}/{os.path.relpath(f, local)}"))
    return out


def keep_names(pending: Iterable[tuple[str, str]]) -> Mapping[str, list[str]]:
    """``remove_stale_parts``' ``keep`` of a commit: file names by table."""
    keep: dict[str, list[str]] = {}
    for _tmp, final in pending:
        keep.setdefault(Path(final).parent.parent.name, []).append(Path(final).name)
    return keep

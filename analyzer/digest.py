"""SHA-256 of capture files, begun while the command is still loading.

Why: a capture's id is the start of its SHA-256 (it names the output partition, the
capture lock and every row's ``capture_id``), so the digest is needed before the first
row.  Hashing is ~0.9 s of one core for 1 GB, and the command spends ~0.3 s importing
pyarrow and the dissectors before it opens the capture.  File reads and ``hashlib``
release the GIL for large blocks, so a thread started first (``prefetch``) hashes on the
second core while the imports run on the first, and ``file_sha256`` then only waits
for what is left.

A prefetched digest is used only for the file it was made of: the path, device, inode,
size and modification time must still be the same when it is asked for; otherwise the
file is hashed again where it is needed, as without a prefetch."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterable

# bytes read and hashed at a time, into one reused buffer.  Why 4 MiB: the thread takes
# the GIL back after every read and every ``update`` (both release it), and while the
# command imports, the main thread holds it for up to the switch interval (5 ms) each
# time; with 1 MiB reads the 103 MB bulk NATS recording hashed in 0.16-0.20 s beside the
# imports and the dissection waited 0.04 s for it, with 4 MiB 0.13-0.15 s and ~0.01 s
# (3 runs each, alternated; the whole run 0.76-0.80 -> 0.72-0.75 s).
_BLOCK = 4 << 20


class _Pending:
    """One file's digest being made in the thread: ``result()`` waits for it (or raises
    what hashing raised).  concurrent.futures' ``Future`` would do, but importing it
    costs every run ~1 ms (and it brings logging)."""

    __slots__ = ("_done", "_value", "_error")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value = ""
        self._error: BaseException | None = None

    def set_result(self, value: str) -> None:
        self._value = value
        self._done.set()

    def set_exception(self, exc: BaseException) -> None:
        self._error = exc
        self._done.set()

    def result(self) -> str:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


# the identity of a file when its prefetch began -> its digest (set by the thread)
_Identity = tuple[str, int, int, int, int]
_prefetched: dict[_Identity, _Pending] = {}
_lock = threading.Lock()


def _identity(path: str | os.PathLike[str]) -> _Identity | None:
    """Who a regular file is now, or None (not a regular file, or gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _forget_in_child() -> None:
    """After a fork: the hashing thread is not in the child, so a digest it had not
    finished would be waited for forever (``msgcap dissect A B --workers 2`` hung so:
    its pool's children are forked while the parent hashes).  The child keeps the
    finished digests, each in a new ``_Pending`` (the parent's thread may have held an
    old one's lock at the fork), and hashes the others itself; its lock is new too."""
    global _lock
    _lock = threading.Lock()
    done = {}
    for ident, fut in _prefetched.items():
        if fut._value:  # (set before its event, by the thread, in one store)
            done[ident] = _Pending()
            done[ident].set_result(fut._value)
    _prefetched.clear()
    _prefetched.update(done)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _hash(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    block = bytearray(_BLOCK)  # (``read`` would allocate, and fault in, a new one each time)
    view = memoryview(block)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(block):
            h.update(view[:n])
    return h.hexdigest()


def _run(jobs: list[tuple[str, _Pending]]) -> None:
    for path, fut in jobs:
        try:
            fut.set_result(_hash(path))
        except BaseException as exc:  # said again, where the digest is asked for
            fut.set_exception(exc)


def prefetch(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Begin hashing these files, in order, in one background (daemon) thread.  What is
    not a regular file (standard input, a FIFO) is left to ``file_sha256``."""
    jobs: list[tuple[str, _Pending]] = []
    with _lock:
        for path in paths:
            ident = _identity(path)
            if ident is None or ident in _prefetched:
                continue
            fut = _Pending()
            _prefetched[ident] = fut
            jobs.append((os.fspath(path), fut))
    if jobs:
        threading.Thread(target=_run, args=(jobs,), name="msgcap-sha256", daemon=True).start()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex SHA-256 of the file's bytes: the prefetched one if the file is unchanged
    since its prefetch began, else hashed here."""
    ident = _identity(path)
    if ident is not None:
        with _lock:
            fut = _prefetched.pop(ident, None)
        if fut is not None:
            try:
                digest = fut.result()
            except OSError:
                digest = None  # hashed again below, so the error is the usual one
            if digest is not None and _identity(path) == ident:
                return digest
    return _hash(path)

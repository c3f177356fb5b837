"""The capture digest begun in the background (analyzer.digest) is the file's SHA-256,
and only ever the digest of the file as it is when asked for."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from analyzer import digest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_prefetched_digest_is_the_files(tmp_path: Path) -> None:
    data = os.urandom(2 * digest._BLOCK + 17)  # several blocks and a short one
    path = tmp_path / "a.pcap"
    path.write_bytes(data)
    digest.prefetch([str(path), "-", str(tmp_path / "missing.pcap")])
    assert digest.file_sha256(path) == _sha(data)
    assert not any(k[0] == str(path.resolve()) for k in digest._prefetched)  # used once


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_read_in_short_pieces(tmp_path: Path) -> None:
    """A FIFO hands ``readinto`` what its writer wrote so far, not a whole block."""
    import threading

    data = os.urandom(digest._BLOCK + 70_001)
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb", buffering=0) as f:
            for at in range(0, len(data), 50_000):
                f.write(data[at:at + 50_000])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert digest.file_sha256(fifo) == _sha(data)
    finally:
        writer.join()


def test_file_changed_after_prefetch_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "b.pcap"
    path.write_bytes(b"first")
    digest.prefetch([path])
    digest._prefetched[digest._identity(path)].result()  # the old bytes' digest is ready
    path.write_bytes(b"second, longer")  # size and mtime change
    assert digest.file_sha256(path) == _sha(b"second, longer")


def test_same_size_rewrite_is_caught_by_mtime(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    path.write_bytes(b"aaaa")
    digest.prefetch([path])
    ident = digest._identity(path)
    digest._prefetched[ident].result()
    path.write_bytes(b"bbbb")
    os.utime(path, ns=(ident[4] + 10**9, ident[4] + 10**9))
    assert digest.file_sha256(path) == _sha(b"bbbb")


def test_unreadable_prefetch_gives_the_usual_error(tmp_path: Path) -> None:
    path = tmp_path / "gone.pcap"
    path.write_bytes(b"x")
    digest.prefetch([path])
    path.unlink()
    with pytest.raises(FileNotFoundError):
        digest.file_sha256(path)


def test_without_prefetch(tmp_path: Path) -> None:
    path = tmp_path / "d.pcap"
    path.write_bytes(b"plain")
    assert digest.file_sha256(path) == _sha(b"plain")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_does_not_wait_for_the_parents_thread(tmp_path: Path) -> None:
    """A child forked while a digest was still being made has no hashing thread: it
    hashes that file itself (it waited forever before: ``msgcap dissect A B --workers
    2``'s pool children), and keeps the digests already finished."""
    import select
    import signal

    unfinished, finished = tmp_path / "u.pcap", tmp_path / "f.pcap"
    unfinished.write_bytes(b"not hashed yet")
    finished.write_bytes(b"hashed")
    digest._prefetched[digest._identity(unfinished)] = digest._Pending()  # never set here
    done = digest._Pending()
    done.set_result("f" * 64)  # a stand-in value: only the carried-over digest says it
    digest._prefetched[digest._identity(finished)] = done
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, then leave without pytest's teardown
        try:
            os.write(write, (digest.file_sha256(unfinished) + " "
                             + digest.file_sha256(finished)).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 60)
        got = os.read(read, 200).decode() if ready else "hung"
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        digest._prefetched.clear()
    assert got == _sha(b"not hashed yet") + " " + "f" * 64

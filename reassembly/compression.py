"""Byte sources for the capture readers: on-disk hashing plus transparent decompression.

Strategy: every byte taken from the file on disk passes exactly once through
:class:`HashingReader`, which feeds SHA-256 and counts bytes for progress reporting, so
the digest of the stored file costs no second pass.  On top of it sits an optional
streaming decompressor (gzip from the stdlib, zstd from the ``zstandard`` package).
:class:`ByteSource` exposes one primitive, ``read_some(n)``, that returns *up to*
``n`` decompressed bytes, ``b""`` at the end, and never raises: a decompression or I/O
error ends the stream and is kept in ``error`` for the reader to report as damage.

Cut-short compressed files must deliver every byte decompressible before the cut
*and* be reported.  For gzip, ``GzipFile.read1`` does at most one read of the
compressed input, so the ``EOFError`` for a missing end-of-stream marker comes on a
call that has nothing left to return (``GzipFile.read(n)`` would drop the partial
buffer with the exception).  For zstd, ``zstandard``'s ``stream_reader`` silently
reports a clean EOF when the input stops inside a frame, so :class:`ZstdStream`
drives a ``decompressobj`` itself (one per frame, concatenated frames supported) and
raises ``EOFError`` when the input ends inside a frame.  It feeds the decompressor
small slices of input so the output of a single call stays bounded.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import zlib
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12 on

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_DRAIN_CHUNK = 1 << 20

# Errors a decompressor or the disk can raise while streaming; they become damage.
# (zstandard.ZstdError joins them for a zstd capture: zstandard is imported only for one.)
_STREAM_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # includes gzip.BadGzipFile
    EOFError,
    zlib.error,
    ValueError,
)


class HashingReader(io.RawIOBase):
    """Read-only wrapper over the on-disk file that hashes and counts what passes."""

    def __init__(self, raw: BinaryIO, digest: bool = True) -> None:
        super().__init__()
        self._raw = raw
        # digest=False: the caller hashed the file already (msgcap dissect needs the
        # capture id before it reads a frame); hashing it again costs ~10% of a run
        self._sha = hashlib.sha256() if digest else None
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if data:
            if self._sha is not None:
                self._sha.update(data)
            self.bytes_read += len(data)
        return data

    def readinto(self, b: Buffer, /) -> int:
        # io hands a bytearray or a byte memoryview; a view of either takes the slice
        with memoryview(b) as view:
            data = self.read(len(view))
            n = len(data)
            view[:n] = data
        return n

    def drain(self) -> None:
        """Hash the rest of the file (after the reader stopped early or at EOF)."""
        if self._sha is None:
            return
        try:
            while chunk := self.read(_DRAIN_CHUNK):
                del chunk
        except OSError:
            pass

    def hexdigest(self) -> str:
        return "" if self._sha is None else self._sha.hexdigest()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class ZstdStream:
    """Streaming zstd decoder over ``src.read`` that notices truncated frames."""

    FEED = 2048  # compressed bytes per decompress() call: bounds one call's output
    READ = 1 << 16  # compressed bytes per read from the source

    def __init__(self, src: HashingReader) -> None:
        import zstandard  # ~10 ms to import: only for a zstd capture

        self._src = src
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._pending = b""
        self._pos = 0
        self._in_frame = False

    def read1(self, size: int = -1) -> bytes:  # size: only a hint
        feed = self.FEED
        while True:
            if self._pos >= len(self._pending):
                self._pending = self._src.read(self.READ)
                self._pos = 0
                if not self._pending:
                    if self._in_frame:
                        raise EOFError("zstd input ended inside a frame")
                    return b""
            piece = self._pending[self._pos : self._pos + feed]
            self._pos += len(piece)
            self._in_frame = True
            out = self._obj.decompress(piece)
            if self._obj.eof:
                rest = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._in_frame = False
                if rest:
                    self._pending = rest + self._pending[self._pos :]
                    self._pos = 0
            if out:
                return out

    def close(self) -> None:
        self._pending = b""


class ByteSource:
    """A never-raising stream of (possibly decompressed) capture bytes."""

    def __init__(self, path: str | os.PathLike[str], digest: bool = True) -> None:
        raw = open(path, "rb")  # noqa: SIM115 - owned by this object, closed in close()
        try:
            self.file_size = os.fstat(raw.fileno()).st_size
            head = raw.peek(4)[:4]
        except BaseException:
            raw.close()
            raise
        self.hasher = HashingReader(raw, digest)
        self.error: str | None = None
        self._stream: object
        self._errors = _STREAM_ERRORS
        if head[:2] == GZIP_MAGIC:
            self.compression = "gzip"
            gz = gzip.GzipFile(fileobj=self.hasher, mode="rb")
            self._stream = gz
            self._read = gz.read1
        elif head == ZSTD_MAGIC:
            import zstandard  # only for a zstd capture

            self.compression = "zstd"
            zr = ZstdStream(self.hasher)
            self._errors = (*_STREAM_ERRORS, zstandard.ZstdError)
            self._stream = zr
            self._read = zr.read1
        else:
            self.compression = "none"
            self._stream = self.hasher
            self._read = self.hasher.read

    @property
    def bytes_read(self) -> int:
        return self.hasher.bytes_read

    def read_some(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at the end or after an error (see ``error``)."""
        if self.error is not None:
            return b""
        try:
            return self._read(size)
        except self._errors as exc:
            self.error = f"{self.compression} stream error: {type(exc).__name__}: {exc}"
            return b""

    def read_at_least(self, size: int, chunk: int) -> bytes:
        """Read until ``size`` bytes are collected or the stream ends (may return less)."""
        parts = []
        have = 0
        while have < size:
            data = self.read_some(max(chunk, size - have))
            if not data:
                break
            parts.append(data)
            have += len(data)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def finish_hash(self) -> str:
        """Hash whatever is left on disk and return the file's SHA-256 (hex)."""
        self.hasher.drain()
        return self.hasher.hexdigest()

    def close(self) -> None:
        stream = self._stream
        try:
            if stream is not self.hasher:
                stream.close()  # type: ignore[attr-defined]
        except self._errors:
            pass
        finally:
            self.hasher.close()

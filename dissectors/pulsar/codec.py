"""Payload decompression with a bound on the output (protocol-facts §4.1, "Compression").

Pulsar compresses the whole payload (after batching) with LZ4 (raw block, not the frame
format), ZLIB (zlib stream with header), ZSTD (a zstd frame) or SNAPPY (raw block, not
the framed format); ``uncompressed_size`` in the metadata gives the output length.

Strategy: output memory is decided *before* decompressing.  The limit is the declared
``uncompressed_size`` (every Pulsar client sets it), or the cap when it is missing; a
declared size above the cap is a decompression bomb and nothing is decompressed.  Each
codec is then driven so it cannot produce more than limit + 1 bytes: LZ4 and SNAPPY
decode into a buffer of the declared length (SNAPPY's own length prefix is checked
first), ZLIB gets ``max_length``, ZSTD is read from a stream reader in bounded steps.
Nothing raises: problems come back as ``(kind, detail)``.

ZLIB is inflated by ISA-L (``isal``, ~2.3x zlib's speed: 38 against 87 ms for the 527
ZLIB batches of bench_pulsar.py's capture, the largest codec cost of a Pulsar run) when
it is installed and the stream starts with the usual header (32 KiB window, no preset
dictionary): its output is kept only when it reached the stream's end within the bound;
anything else (an error, a truncated stream, a larger output, another header: ISA-L
accepts window sizes zlib refuses) is inflated again by zlib, whose result and messages
stay the definition.  Inflating is deterministic, so where both finish they agree
(tests/pulsar/test_frames.py compares them on mutated streams).
"""

from __future__ import annotations

import threading
import zlib
from enum import IntEnum
from types import ModuleType
from typing import Any, NamedTuple

from dissectors.pulsar.codes import PulsarAnomaly

_isal_zlib: ModuleType | None
try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # optional: zlib alone
    _isal_zlib = None

__all__ = ["DEFAULT_MAX_UNCOMPRESSED_BYTES", "Codec", "Result", "decompress"]

# Largest decompressed payload accepted (option `max_uncompressed_bytes`).  A 5 MiB frame
# of well-compressible text (JSON logs compress 5-10x) stays below it; a payload that
# declares or expands to more is reported as a decompression bomb, not decoded.
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024

_ZSTD_STEP = 1 << 20


class Codec(IntEnum):
    """CompressionType (protocol-facts §4.3)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


_NAMES = {int(c): c.name for c in Codec}


class Result(NamedTuple):
    data: bytes | None  # None: not decompressed (see problem)
    problem: tuple[str, str] | None  # (anomaly kind, detail); may be set with data too


def _bomb(name: str, nbytes: int, cap: int, declared: bool) -> Result:
    how = "declares" if declared else "expands to more than"
    return Result(None, (PulsarAnomaly.DECOMPRESSION_BOMB,
                         f"{name} payload {how} {nbytes} bytes uncompressed, above the cap of "
                         f"{cap} bytes (option max_uncompressed_bytes); not decompressed"))


def decompress(codec: int, data: bytes, declared: int | None, cap: int) -> Result:
    """Decompress ``data``; ``declared`` is ``uncompressed_size`` (None or 0: absent)."""
    if codec == Codec.NONE:
        return Result(data, None)
    name = _NAMES.get(codec)
    if name is None:
        return Result(None, (PulsarAnomaly.UNKNOWN_COMPRESSION,
                             f"compression type {codec} is not one of NONE, LZ4, ZLIB, ZSTD, "
                             "SNAPPY; payload left compressed"))
    if declared and declared > cap:
        return _bomb(name, declared, cap, True)
    limit = declared if declared else cap
    try:
        if codec == Codec.LZ4:
            out = _lz4(data, declared)
        elif codec == Codec.ZLIB:
            out = _zlib(data, limit)
        elif codec == Codec.ZSTD:
            out = _zstd(data, limit)
        else:
            n = _snappy_len(data)
            if n > limit:
                if not declared:
                    return _bomb(name, n, cap, True)
                return Result(None, (PulsarAnomaly.UNCOMPRESSED_SIZE_MISMATCH,
                                     f"{name} raw block declares {n} bytes, uncompressed_size "
                                     f"says {declared}; not kept"))
            out = _snappy(data, n)
    except _Problem as p:
        return Result(None, (p.kind, f"{name}: {p.detail}"))
    except Exception as exc:  # the codec libraries raise their own error types
        return Result(None, (PulsarAnomaly.DECOMPRESSION_FAILED,
                             f"{name} payload of {len(data)} bytes does not decompress: {exc}"))
    if len(out) > limit:
        if not declared:
            return _bomb(name, limit, cap, False)
        return Result(None, (PulsarAnomaly.UNCOMPRESSED_SIZE_MISMATCH,
                             f"{name} payload expands to more than the declared "
                             f"uncompressed_size {declared}; not kept"))
    if declared and len(out) != declared:
        return Result(out, (PulsarAnomaly.UNCOMPRESSED_SIZE_MISMATCH,
                            f"{name} payload expands to {len(out)} bytes, uncompressed_size "
                            f"says {declared} (kept as decompressed)"))
    return Result(out, None)


class _Problem(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail


_lz4_block: Any = None  # lz4.block, imported with the first LZ4 payload


def _lz4(data: bytes, declared: int | None) -> bytes:
    global _lz4_block
    if _lz4_block is None:
        import lz4.block

        _lz4_block = lz4.block
    if not declared:
        raise _Problem(PulsarAnomaly.DECOMPRESSION_FAILED,
                       "a raw LZ4 block cannot be decoded without uncompressed_size")
    out: bytes = _lz4_block.decompress(data, uncompressed_size=declared)
    return out


def _usual_zlib_header(data: bytes) -> bool:
    """Deflate with a 32 KiB window (CMF 0x78), a valid header check, no preset
    dictionary: the header every Pulsar client writes, and one ISA-L and zlib read alike."""
    return (len(data) >= 2 and data[0] == 0x78 and (0x7800 | data[1]) % 31 == 0
            and not data[1] & 0x20)


def _zlib(data: bytes, limit: int) -> bytes:
    if _isal_zlib is not None and _usual_zlib_header(data):
        try:
            fast = _isal_zlib.decompressobj()
            out: bytes = fast.decompress(data, limit + 1)
            if fast.eof and len(out) <= limit:
                return out
        except Exception:  # noqa: BLE001,S110 - zlib below decides, with its own message
            pass
    d = zlib.decompressobj()
    out = d.decompress(data, limit + 1)
    if len(out) <= limit and not d.eof:
        out += d.flush()
        if not d.eof:
            raise _Problem(PulsarAnomaly.DECOMPRESSION_FAILED, "zlib stream is truncated")
    return out


_LOCAL = threading.local()  # per thread: a decompression context is not thread-safe


def _zstd(data: bytes, limit: int) -> bytes:
    # one decompressor per thread, reused: making one per payload allocates a context
    # each time (its readers start from a clean state either way)
    dctx = getattr(_LOCAL, "zstd", None)
    if dctx is None:
        import zstandard

        dctx = _LOCAL.zstd = zstandard.ZstdDecompressor()
    reader = dctx.stream_reader(data, read_across_frames=True)
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = reader.read(min(_ZSTD_STEP, limit + 1 - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


_snappy_mod: Any = None  # cramjam.snappy, imported with the first SNAPPY payload


def _snappy_len(data: bytes) -> int:
    global _snappy_mod
    if _snappy_mod is None:
        import cramjam

        _snappy_mod = cramjam.snappy
    n: int = _snappy_mod.decompress_raw_len(data)
    return n


def _snappy(data: bytes, n: int) -> bytes:
    """A raw snappy block starts with its uncompressed length (checked by the caller)."""
    out = bytearray(n)
    written = _snappy_mod.decompress_raw_into(data, out)
    return bytes(memoryview(out)[:written])  # (one copy: a bytearray slice would be two)

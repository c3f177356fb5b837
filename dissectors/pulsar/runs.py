"""Arrow columns whose values repeat in runs, made without a gather.

Why: the Pulsar fast path's message batches repeat each frame's shared values (topic,
producer, publish time, ...) once per message of the frame
(``fastpath.MessageAccumulator.to_batch``).  Arrow's ``take`` gathers row by row:
0.1-0.3 ms per column of a ~16k-row batch for strings, values with nulls and bit-packed
booleans, which made it the largest part of ``to_batch`` (~0.24 of ~0.38 s over the
150 MB benchmark capture's 32 batches).  Runs need no gather: ``np.repeat`` of the
fixed-width values and of the validity bits, and Arrow's own run-end decoding for
strings and binaries (or, when they are all the same, that value times
the rows).  The result equals what ``take`` gives (tests/pulsar/test_runs.py).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dissectors.arrowops import call, from_numpy, nulls, repeated_bytes

__all__ = ["repeat_runs"]

# fixed-width types whose values are little-endian signed integers of their bit width
_INTEGERS = frozenset({pa.int32().id, pa.int64().id, pa.timestamp("us").id})


def repeat_runs(column: pa.Array, counts: npt.NDArray[np.int64]) -> pa.Array | None:
    """``column`` with its value i repeated ``counts[i]`` (> 0) times, or None for a type
    this does not handle (lists: the caller gathers those)."""
    typ = column.type
    n = int(counts.sum())
    if column.null_count == len(column):
        return nulls(typ, n)
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return _same_bytes(column, n) or _strings(column, counts)
    if not (pa.types.is_boolean(typ) or typ.id in _INTEGERS):
        return None
    bufs = column.buffers()
    lo, hi = column.offset, column.offset + len(column)
    bitmap = None
    if column.null_count:
        bitmap = pa.py_buffer(np.packbits(np.repeat(_bits(bufs[0], lo, hi), counts),
                                          bitorder="little"))
    if pa.types.is_boolean(typ):
        data = np.packbits(np.repeat(_bits(bufs[1], lo, hi), counts), bitorder="little")
    else:
        width = typ.bit_width // 8
        data = np.repeat(np.frombuffer(bufs[1], np.dtype(f"<i{width}"), hi)[lo:], counts)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(data)])


def _bits(buf: pa.Buffer, lo: int, hi: int) -> npt.NDArray[np.bool_]:
    """Bits ``lo``..``hi`` of an Arrow bitmap (validity or booleans) as bools."""
    bits = np.unpackbits(np.frombuffer(buf, np.uint8, (hi + 7) // 8), count=hi,
                         bitorder="little")
    return bits[lo:].astype(np.bool_)


def _same_bytes(column: pa.Array, n: int) -> pa.Array | None:
    """``n`` times the one value of a string or binary column without nulls whose values
    are all equal (the capture id, the endpoints of a flow, ``crc_status``...), or None."""
    if column.null_count:
        return None
    bufs = column.buffers()
    lo, hi = column.offset, column.offset + len(column)
    offsets = np.frombuffer(bufs[1], np.int32, hi + 1)[lo:]
    size = int(offsets[1] - offsets[0])
    if int(offsets[-1] - offsets[0]) != size * len(column) or size * n > np.iinfo(np.int32).max:
        return None
    raw = bufs[2].to_pybytes()[offsets[0]:offsets[-1]] if bufs[2] is not None else b""
    value = raw[:size]
    if raw != value * len(column):
        return None
    return repeated_bytes(column.type, value, n)


def _strings(column: pa.Array, counts: npt.NDArray[np.int64]) -> pa.Array:
    """A string or binary column by runs: each value's bytes times its count, joined, and
    the offsets from the repeated lengths (measured on a 166-value column repeated to
    16,400 rows: 80 us, Arrow's ``run_end_decode`` 113 us and its run-end array besides)."""
    bufs = column.buffers()
    lo, hi = column.offset, column.offset + len(column)
    offsets = np.frombuffer(bufs[1], np.int32, hi + 1)[lo:]
    data = bufs[2].to_pybytes() if bufs[2] is not None else b""
    at = offsets.tolist()
    joined = b"".join([data[a:b] * k
                       for a, b, k in zip(at[:-1], at[1:], counts.tolist(), strict=True)])
    lengths = np.repeat(np.diff(offsets), counts)
    if len(joined) > np.iinfo(np.int32).max:  # (not from a Pulsar batch: 256 MiB at most)
        return _run_end_decode(column, counts)
    out = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=out[1:])
    bitmap = None
    if column.null_count:
        bitmap = pa.py_buffer(np.packbits(np.repeat(_bits(bufs[0], lo, hi), counts),
                                          bitorder="little"))
    return pa.Array.from_buffers(column.type, len(lengths), [
        bitmap, pa.py_buffer(out), pa.py_buffer(joined)])


def _run_end_decode(column: pa.Array, counts: npt.NDArray[np.int64]) -> pa.Array:
    ends = np.cumsum(counts)
    run_ends = from_numpy(ends.astype(np.int64 if ends[-1] > np.iinfo(np.int32).max
                                      else np.int32))
    return call("run_end_decode", pa.RunEndEncodedArray.from_arrays(run_ends, column))

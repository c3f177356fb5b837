"""``take`` and numpy -> Arrow without importing ``pyarrow.compute`` or ``numpy.ma``.

Why: ``Table.take``/``Array.take`` import ``pyarrow.compute``, whose import wraps every
kernel (~290) in a Python function and parses its docstring (~50 ms of CPU), and
``pa.array`` over a numpy array looks up ``np.ma.MaskedArray``, which imports
``numpy.ma`` (~15 ms).  That is a large share of what a small capture's
``msgcap dissect`` costs beyond the interpreter and pyarrow.  The kernels themselves
are in ``pyarrow._compute`` (~5 ms to import), and a numpy array whose dtype is the
Arrow type's fixed-width layout already is that Arrow array's data buffer.

``call`` is ``pyarrow.compute.call_function``; ``take`` and ``from_numpy`` return what
``pyarrow.compute.take`` and ``pa.array`` return (tests/dissectors/test_arrowops.py
compares them).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pyarrow as pa

__all__ = ["call", "fixed_width_strings", "from_numpy", "from_parts", "nulls", "repeated_bytes",
           "take"]

# Arrow fixed-width types whose data buffer is a numpy array of this dtype, as it is
_SAME_LAYOUT = {
    pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype(np.int16),
    pa.int32(): np.dtype(np.int32), pa.int64(): np.dtype(np.int64),
    pa.uint8(): np.dtype(np.uint8), pa.uint16(): np.dtype(np.uint16),
    pa.uint32(): np.dtype(np.uint32), pa.uint64(): np.dtype(np.uint64),
    pa.float32(): np.dtype(np.float32), pa.float64(): np.dtype(np.float64),
}
_OF_DTYPE = {dtype: typ for typ, dtype in _SAME_LAYOUT.items()}

_Data = TypeVar("_Data", pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table)


def call(function: str, *args: object, options: object = None) -> pa.Array:
    """The compute ``function`` (a kernel's name, e.g. ``"value_counts"``) on ``args``:
    ``pyarrow.compute.<function>(*args)`` for a function without options (the result
    is an array for the kernels used here; ``take`` keeps its argument's kind)."""
    from pyarrow import _compute

    return _compute.call_function(function, list(args), options)


def take(data: _Data, indices: pa.Array) -> _Data:
    """``pyarrow.compute.take(data, indices)`` (bounds checked, as ``data.take`` does)
    for an Array, ChunkedArray, RecordBatch or Table."""
    from pyarrow import _compute

    return call("take", data, indices, options=_compute.TakeOptions(boundscheck=True))


def from_numpy(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type)`` for a one-dimensional numpy array (no nulls): numeric
    arrays of the type's own dtype, and booleans, are wrapped or packed directly;
    anything else (a cast, another dtype) is left to ``pa.array``."""
    if type is None:
        type = pa.bool_() if values.dtype == np.bool_ else _OF_DTYPE.get(values.dtype)
    if values.ndim == 1 and type is not None:
        if type == pa.bool_() and values.dtype == np.bool_:
            bits = np.packbits(values, bitorder="little")
            return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(bits)])
        if _SAME_LAYOUT.get(type) == values.dtype:
            data = np.ascontiguousarray(values)
            return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(data)])
    return pa.array(values, type)


def fixed_width_strings(type: pa.DataType, values: np.ndarray) -> pa.Array:
    """A string or binary column whose row i is the bytes of ``values[i]`` (a 2-D uint8
    array: every value has the same length), built from buffers: ``take`` and
    ``pa.array`` over numpy would import ``pyarrow.compute`` and ``numpy.ma``.  The
    caller keeps the total under the int32 offsets' 2 GiB."""
    n, width = values.shape
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(offsets),
                                           pa.py_buffer(np.ascontiguousarray(values))])


def repeated_bytes(type: pa.DataType, value: bytes, n: int) -> pa.Array:
    """A string or binary column of ``n`` rows that all hold ``value`` (a capture id, a
    direction, a flow's endpoints)."""
    # (``value * n``, not a broadcast row made contiguous: numpy copies those row by row,
    # ~145 us for 16,400 two-byte rows against ~6)
    offsets = np.arange(n + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(offsets),
                                           pa.py_buffer(value * n)])


# all-null columns kept per type, sliced to a batch's length: ``pa.nulls`` allocated and
# zeroed a fresh column for every batch (offsets and bitmap; ~1 % of a bulk NATS run, most
# of it faulting in new pages).  Only up to a fast-path batch's length: memory stays small.
_NULLS_KEPT = 1 << 15
_nulls_of: dict[pa.DataType, pa.Array] = {}


def nulls(type: pa.DataType, n: int) -> pa.Array:
    """``pa.nulls(n, type)``, sliced from one kept column when ``n`` is small."""
    if n > _NULLS_KEPT:
        return pa.nulls(n, type)
    kept = _nulls_of.get(type)
    if kept is None:
        kept = _nulls_of[type] = pa.nulls(_NULLS_KEPT, type)
    return kept.slice(0, n)


def from_parts(type: pa.DataType, n: int, parts: tuple[object, ...]) -> pa.Array:
    """The array of ``n`` rows a C column builder exported as ``parts``: (validity bitmap
    or None, null count, data) for a fixed-width type, (validity, null count, int32
    offsets, data) for a string or binary one; each buffer an object with the buffer
    protocol (``dissectors._rows.typed``, the NATS scanner's ``Columns.export``)."""
    valid = None if parts[0] is None else pa.py_buffer(parts[0])
    nulls = parts[1]
    buffers = [valid, *(pa.py_buffer(b) for b in parts[2:])]
    return pa.Array.from_buffers(type, n, buffers, null_count=nulls)

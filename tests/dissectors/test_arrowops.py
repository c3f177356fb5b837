"""``dissectors.arrowops`` gives what ``pyarrow.compute`` and ``pa.array`` give, without
importing them (the import itself is checked by tests/analyzer/test_cli_io.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dissectors.arrowops import call, fixed_width_strings, from_numpy, nulls, repeated_bytes, take


def _same(got: pa.Array, want: pa.Array) -> None:
    assert got.type == want.type
    assert got.equals(want)
    assert got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("values", [
    np.arange(-3, 7, dtype=np.int64), np.arange(5, dtype=np.int32)[::2],
    np.array([], dtype=np.int64), np.array([1.5, -0.0, np.inf]),
    np.array([True, False, True, True, False, False, True, False, True]),
    np.array([], dtype=np.bool_), np.arange(20, dtype=np.uint16)[3:],
])
@pytest.mark.parametrize("typed", [False, True])
def test_from_numpy_is_pa_array(values: np.ndarray, typed: bool) -> None:
    want = pa.array(values)
    _same(from_numpy(values, want.type if typed else None), want)


@pytest.mark.parametrize(("values", "typ"), [
    (np.arange(4, dtype=np.int64), pa.int32()),  # a cast: left to pa.array
    (np.arange(4, dtype=np.int32), pa.int64()),
    (np.array([1, 0, 2], dtype=np.int8), pa.bool_()),
    (np.arange(4, dtype=np.float64), pa.float32()),
])
def test_from_numpy_casts_as_pa_array(values: np.ndarray, typ: pa.DataType) -> None:
    _same(from_numpy(values, typ), pa.array(values, typ))


def test_take_and_call_are_the_compute_functions() -> None:
    col = pa.array(["a", None, "c", "a", "b"])
    idx = pa.array([4, 0, 0, None, 2])
    _same(take(col, idx), pc.take(col, idx))
    chunked = pa.chunked_array([col.slice(1), col.slice(0, 2)])
    assert take(chunked, idx).equals(pc.take(chunked, idx))
    batch = pa.record_batch({"s": col, "n": pa.array(range(5))})
    assert take(batch, idx).equals(pc.take(batch, idx))
    assert take(pa.Table.from_batches([batch, batch]), idx).equals(
        pc.take(pa.Table.from_batches([batch, batch]), idx))
    with pytest.raises(IndexError):
        take(col, pa.array([5]))
    assert call("value_counts", chunked).equals(pc.value_counts(chunked))


@pytest.mark.parametrize("typ", [pa.string(), pa.binary()])
@pytest.mark.parametrize("value,n", [(b"c2s", 5), (b"0123456789abcdef", 1), (b"", 4),
                                     (b"x", 0)])
def test_repeated_bytes_is_pa_array(typ: pa.DataType, value: bytes, n: int) -> None:
    want = pa.array([value.decode() if typ == pa.string() else value] * n, typ)
    _same(repeated_bytes(typ, value, n), want)


def test_fixed_width_strings_are_the_rows_bytes() -> None:
    rows = np.frombuffer(b"c2ss2c", np.uint8).reshape(2, 3)[[1, 0, 0, 1, 1]]
    _same(fixed_width_strings(pa.string(), rows),
          pa.array(["s2c", "c2s", "c2s", "s2c", "s2c"]))


@pytest.mark.parametrize("n", [0, 3, 1 << 15, (1 << 15) + 1])
@pytest.mark.parametrize("typ", [pa.string(), pa.int64(), pa.list_(pa.int32())])
def test_nulls_is_pa_nulls(typ: pa.DataType, n: int) -> None:
    _same(nulls(typ, n), pa.nulls(n, typ))

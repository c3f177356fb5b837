"""``dissectors.pulsar.runs.repeat_runs`` gives what ``take`` gives (the fast path's
shared message columns, repeated once per message of their frame)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors.pulsar.runs import repeat_runs

_TYPES = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "timestamp": (pa.timestamp("us", tz="UTC"), st.integers(-(2**62), 2**62)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=8)),
    "binary": (pa.binary(), st.binary(max_size=8)),
    "list": (pa.list_(pa.int32()), st.lists(st.integers(0, 9), max_size=3)),
}


@st.composite
def columns(draw: st.DrawFn) -> tuple[pa.Array, np.ndarray]:
    typ, values = _TYPES[draw(st.sampled_from(sorted(_TYPES)))]
    items = draw(st.lists(st.none() | values, min_size=1, max_size=30))
    if draw(st.booleans()):  # one value throughout (the capture id, a flow's endpoints)
        items = [items[0]] * len(items)
    column = pa.array(items, typ)
    lo = draw(st.integers(0, len(items) - 1))  # slices keep an offset into the buffers
    column = column.slice(lo, draw(st.integers(1, len(items) - lo)))
    counts = draw(st.lists(st.integers(1, 70), min_size=len(column), max_size=len(column)))
    return column, np.array(counts, np.int64)


@settings(max_examples=60, deadline=None)
@given(columns())
def test_repeat_runs_equals_take(case: tuple[pa.Array, np.ndarray]) -> None:
    column, counts = case
    want = column.take(pa.array(np.repeat(np.arange(len(column)), counts)))
    got = repeat_runs(column, counts)
    if got is None:  # (lists are left to the caller's take)
        assert pa.types.is_list(column.type) and column.null_count < len(column)
        return
    got.validate(full=True)
    assert got.type == want.type
    assert got.equals(want)


# values of any kind where a shared column's values go: those of the column's type, None,
# and what ``pa.array`` converts differently or refuses (bools and floats among integers,
# out-of-range integers, bytes among strings and the reverse, lone surrogates)
_ODD = (st.booleans() | st.floats(allow_nan=False, width=32) | st.integers(-(2**70), 2**70)
        | st.text(max_size=4) | st.binary(max_size=4))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["int64", "int32", "timestamp", "bool", "string", "binary"]),
       st.data(), st.booleans())
def test_repeat_values_is_the_conversion_repeated(kind_name: str, data: st.DataObject,
                                                  in_dicts: bool) -> None:
    """``_speedups.repeat_values`` (the shared columns of ``to_batch``, in C) gives what
    ``repeat_runs(pa.array(values, type), counts)`` gives, or None where it leaves a value
    to that way (which may raise)."""
    from dissectors.pulsar import fastpath

    typ, good = _TYPES[kind_name]
    kind = {"int64": 0, "timestamp": 0, "int32": 1, "bool": 2, "string": 3, "binary": 4}
    odd = data.draw(st.booleans())
    items = data.draw(st.lists(st.none() | good | (_ODD if odd else good), min_size=1,
                               max_size=30))
    counts = np.array(data.draw(st.lists(st.integers(1, 70), min_size=len(items),
                                         max_size=len(items))), np.int64)
    conv = pa.int64() if kind_name == "timestamp" else typ
    if in_dicts:  # (the chunks' shared dicts: a missing key is None)
        got = fastpath._speedups.repeat_values(
            [{} if v is None else {"k": v} for v in items], "k", counts, kind[kind_name])
    else:
        got = fastpath._speedups.repeat_values(items, None, counts, kind[kind_name])
    try:
        want = repeat_runs(pa.array(items, conv), counts)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeEncodeError):
        assert got is None
        return
    if got is None:  # left to pa.array: only for a value not exactly of the kind
        assert odd
        return
    out: dict[str, pa.Array] = {}
    field = type("F", (), {"name": "c", "type": typ})
    fastpath._repeated_column(out, field, got)  # type: ignore[arg-type]
    column = out["c_ns"] if kind_name == "timestamp" else out["c"]
    column.validate(full=True)
    assert column.type == want.type
    assert column.equals(want)

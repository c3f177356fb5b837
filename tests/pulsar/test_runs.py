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

"""``pipeline._interleave``: dict rows land after the fast-path rows that preceded them.

Why a test of its own: the golden and fast-path tests compare tables sorted by record id,
so they would not see dict rows put in the wrong place of a batch; the batch is now built
from slices instead of a ``take``."""

from __future__ import annotations

from analyzer.pipeline import _interleave
from dissectors.core_tables import ANOMALIES
from dissectors.schema import arrow_schema, rows_to_batch


def _row(name: str) -> dict:
    return {"capture_id": "c", "record_id": 0, "kind": name, "detail": "", "source": "t"}


def test_dict_rows_follow_the_fast_rows_before_them():
    schema = arrow_schema(ANOMALIES)
    fast = rows_to_batch(ANOMALIES, [_row(f"f{i}") for i in range(6)])
    for at in ([0, 0, 3, 6], [2], [6, 6], [0], [1, 2, 3, 4, 5]):
        waiting = [(a, _row(f"d{k}")) for k, a in enumerate(at)]
        want = [f"f{i}" for i in range(6)]
        for k, a in reversed(list(enumerate(at))):  # (later ones first: same position)
            want.insert(a, f"d{k}")
        got = _interleave(ANOMALIES, schema, fast, waiting, True)
        assert got.column("kind").to_pylist() == want, at
        assert got.schema.equals(schema)

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
        got = _interleave(ANOMALIES, schema, fast, waiting)
        assert got.column("kind").to_pylist() == want, at
        assert got.schema.equals(schema)


def test_many_groups_are_placed_alike_by_slices_and_by_take():
    """Above ``MAX_INTERLEAVED_PIECES`` slices a batch of at most ``MAX_TAKE_BYTES`` is
    interleaved by one ``take`` (a capture of short flows: INFO/CONNECT rows every few
    fast rows); with the bound at 0 the same input goes through the slices."""
    import random

    import analyzer.pipeline as pipeline

    schema = arrow_schema(ANOMALIES)
    n = 40
    fast = rows_to_batch(ANOMALIES, [_row(f"f{i}") for i in range(n)])
    rnd = random.Random(22)
    cases = [list(range(0, n + 1, 2)), [0] * 3 + list(range(1, n, 3)) + [n] * 2,
             list(range(1, 20)), list(range(7, 16))]  # (the last two: 37 and 17 slices)
    cases += [sorted(rnd.randint(0, n) for _ in range(rnd.randint(1, 60))) for _ in range(30)]
    for at in cases:
        waiting = [(a, _row(f"d{k}")) for k, a in enumerate(at)]
        want = [f"f{i}" for i in range(n)]
        for k, a in reversed(list(enumerate(at))):
            want.insert(a, f"d{k}")
        got = _interleave(ANOMALIES, schema, fast, waiting)
        saved = pipeline.MAX_TAKE_BYTES
        pipeline.MAX_TAKE_BYTES = 0
        try:
            sliced = _interleave(ANOMALIES, schema, fast, waiting)
        finally:
            pipeline.MAX_TAKE_BYTES = saved
        assert got.column("kind").to_pylist() == want, at
        assert got.equals(sliced) and got.schema.equals(schema)


def test_take_copies_only_the_stretch_between_the_first_and_last_dict_rows():
    """The rows before the first dict row's place and after the last one's stay slices
    of the batch (a bulk run's first batch: INFO/CONNECT/SUB rows among its first rows,
    then thousands of fast rows that a ``take`` of the whole batch copied)."""
    schema = arrow_schema(ANOMALIES)
    n = 60
    fast = rows_to_batch(ANOMALIES, [_row(f"f{i}") for i in range(n)])
    at = list(range(5, 30, 2))  # 13 groups: 27 slices, so the take
    waiting = [(a, _row(f"d{k}")) for k, a in enumerate(at)]
    got = _interleave(ANOMALIES, schema, fast, waiting)
    want = [f"f{i}" for i in range(n)]
    for k, a in reversed(list(enumerate(at))):
        want.insert(a, f"d{k}")
    kind = got.column("kind")
    assert kind.to_pylist() == want
    assert [len(c) for c in kind.chunks] == [5, 29 - 5 + len(at), n - 29]
    data = fast.column("kind").buffers()[2].address
    assert kind.chunks[0].buffers()[2].address == data  # a slice, not a copy
    assert kind.chunks[2].buffers()[2].address == data

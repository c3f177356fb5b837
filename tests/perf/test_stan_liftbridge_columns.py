"""STAN and Liftbridge rows as columns (issue 22, ``dissectors/proto/columns.py``): a run
whose payload rows go out as ``ColumnBatch`` records writes the tables the reference's
``Record`` rows give, value for value, with the same record ids and parents.

The messages are those of the sample captures (as the NATS dissector offers them), cut
to random stretches, damaged at random (flipped bytes, cut or lengthened payloads, so
that rows are malformed, inferred, carry unknown fields or anomalies), under several
payload caps, sometimes with a payload prober that raises (its anomaly then comes before
the decode's rows).  Each arm goes through a copy of the conveyor's id and envelope
rules (``_convey``), the columnar one through ``PayloadRows`` itself.  Whole captures
through the real pipeline, both ways: ``test_whole_captures_give_the_same_tables``
(the columnar arm must have taken rows), and tests/analyzer/test_golden.py.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from functools import cache
from typing import Any, ClassVar
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.pipeline import Options, dissect_capture
from dissectors.api import (
    CarriedMessage,
    ColumnBatch,
    Direction,
    PayloadDissector,
    Record,
    Verdict,
)
from dissectors.dispatch import ScopeDispatcher
from dissectors.liftbridge import ENTRIES_TABLE, LIFTBRIDGE_TABLE, LiftbridgeDissector
from dissectors.proto import columns
from dissectors.schema import arrow_schema, rows_to_batch
from dissectors.stan import STAN_TABLE, StanDissector
from tests.stan.capture_harness import SAMPLES, dispatch_capture

CAPTURES = ("stan-basic.pcap", "liftbridge-basic.pcap")
TABLES = {t.name: t for t in (STAN_TABLE, LIFTBRIDGE_TABLE, ENTRIES_TABLE)}
CAPTURE_ID = "c" * 16
FLOW = 7
ENDPOINTS = (("10.0.0.1", 40000), ("10.0.0.2", 4222))  # client, server
# rows of each sample that go to the columns: all of them (a ReplicationResponse with
# entries too: they are its ColumnBatch's children)
MOVED = {"stan-basic.pcap": 206, "liftbridge-basic.pcap": 88}


@cache
def _messages(name: str) -> tuple[CarriedMessage, ...]:
    """What the NATS dissector offers of a sample capture, in order."""
    seen: list[CarriedMessage] = []
    dispatch = ScopeDispatcher.dispatch

    def spy(self: ScopeDispatcher, msg: CarriedMessage) -> list[Record]:
        seen.append(msg)
        return dispatch(self, msg)

    with mock.patch.object(ScopeDispatcher, "dispatch", spy):
        dispatch_capture(SAMPLES / name)
    return tuple(seen)


class _RaisingProber(PayloadDissector):
    """A plugin whose probe raises: the dispatcher's anomaly then precedes the rows."""

    name: ClassVar[str] = "aaa_raises"
    tables: ClassVar[tuple] = ()

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        raise RuntimeError("probe bug")

    @classmethod
    def new_state(cls, options: Any) -> None:
        return None

    @classmethod
    def decode(cls, state: Any, bindings: Any, msg: CarriedMessage, hint: str) -> list[Record]:
        return []


def _convey(messages: list[CarriedMessage], options: dict[str, Any], raiser: bool
            ) -> tuple[dict[str, pa.Table], list[tuple[int, str, str]], int]:
    """The tables (sorted by record id), anomalies (id, kind, detail) and number of
    columnar rows of one arm: ids and envelope given as the conveyor gives them (each
    message's carrier row first, its records after it, children after their row)."""
    dissectors = [_RaisingProber] if raiser else []
    scope = ScopeDispatcher([*dissectors, StanDissector, LiftbridgeDissector], options,
                            strict=False)
    ids: Iterator[int] = itertools.count((FLOW << 32) | 1)
    dict_rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    accs: dict[str, Any] = {}
    anomalies: list[tuple[int, str, str]] = []
    moved = 0

    def walk(records: list[Record], parent: int) -> None:
        nonlocal moved
        for rec in records:
            rid = next(ids)
            src, dst = ENDPOINTS if rec.direction == Direction.C2S else ENDPOINTS[::-1]
            if type(rec) is ColumnBatch:
                acc = accs.get(rec.table) or accs.setdefault(rec.table, rec.fmt.accumulator())
                acc.move(rec.rows, rec.n, FLOW, rid, int(rec.direction), None, *src, *dst)
                moved += rec.n
                walk(list(rec.children), rid)  # (a ReplicationResponse's entries)
                continue
            if rec.table == "anomalies":
                anomalies.append((rid, rec.values["kind"], rec.values["detail"]))
                continue
            row = {"capture_id": CAPTURE_ID, "flow_id": FLOW, "record_id": rid,
                   "parent_record_id": parent, "direction": rec.direction.short,
                   "stream_id": None, "src_ip": src[0], "src_port": src[1], "dst_ip": dst[0],
                   "dst_port": dst[1], "ts_first": rec.ts_first_ns, "ts_last": rec.ts_last_ns,
                   "offset_start": rec.offset_start, "offset_end": rec.offset_end,
                   "frame_first": rec.frame_first, "frame_last": rec.frame_last,
                   **rec.values}
            dict_rows[rec.table].append(row)
            walk(rec.children, rid)

    for msg in messages:
        walk(scope.dispatch(msg), next(ids))
    tables = {}
    for name, spec in TABLES.items():
        parts = [rows_to_batch(spec, dict_rows[name])]
        if name in accs and len(accs[name]):
            parts.append(accs[name].to_batch(arrow_schema(spec), CAPTURE_ID))
        tables[name] = pa.Table.from_batches(parts).sort_by("record_id")
    return tables, anomalies, moved


def _damaged(msg: CarriedMessage, how: tuple[int, int, int, bytes]) -> CarriedMessage:
    kind, at, byte, tail = how
    p = bytearray(msg.payload)
    if kind == 1 and p:
        p[at % len(p)] = byte
    elif kind == 2:
        del p[at % (len(p) + 1):]
    elif kind == 3:
        p += tail
    return CarriedMessage(msg.carrier, msg.op, msg.subject, msg.reply_to, msg.sid,
                          msg.headers, bytes(p), msg.direction, msg.flow_id, msg.offset_start,
                          msg.offset_end, msg.ts_first_ns, msg.ts_last_ns, msg.frame_first,
                          msg.frame_last)


def _assert_same(messages: list[CarriedMessage], cap: int | None, raiser: bool) -> int:
    base = {"payload_cap": cap}
    with mock.patch.dict(os.environ, {columns.SWITCH: "1"}):  # Liftbridge's too
        ref, ref_anomalies, none = _convey(messages, {**base, "columnar": False}, raiser)
        got, got_anomalies, moved = _convey(messages, {**base, "columnar": True}, raiser)
    assert none == 0
    assert got_anomalies == ref_anomalies
    for name in TABLES:
        assert got[name].equals(ref[name]), name
    return moved


@pytest.mark.parametrize("name", CAPTURES)
def test_sample_messages_give_the_same_rows(name):
    messages = list(_messages(name))
    assert _assert_same(messages, 4096, raiser=False) == MOVED[name]


@pytest.mark.parametrize("name", CAPTURES)
def test_the_compiled_record_and_move_are_the_pys(name, monkeypatch):
    """``RowsFormat.record`` in C (``_walk.column_row``) makes ``record_py``'s batch, and
    ``PayloadRows.move`` in C (``_walk.move_row``) keeps what ``move_py`` keeps."""
    fast = columns.RowsFormat(STAN_TABLE)
    ref = columns.RowsFormat(STAN_TABLE, compiled=False)
    assert fast.record.__class__ is not ref.record.__class__  # (the extension is built)
    monkeypatch.setattr(columns, "CONVERT_ROWS", 5)  # (converted in parts)
    moved = columns.PayloadRows(STAN_TABLE), columns.PayloadRows(STAN_TABLE, compiled=False)
    for i, msg in enumerate(_messages(name)):
        values = {"msg_type": "PubAck", "guid": str(i), "data": msg.payload}
        for acc in moved:
            acc.move(fast.record(msg, values).rows, 1, FLOW, i, 0, None, *ENDPOINTS[0],
                     *ENDPOINTS[1])
        assert list(moved[0]) == list(moved[1])
        assert (moved[0].nbytes, moved[0]._parts) == (moved[1].nbytes, moved[1]._parts)
    schema = arrow_schema(STAN_TABLE)
    assert moved[0].to_batch(schema, CAPTURE_ID).equals(moved[1].to_batch(schema, CAPTURE_ID))
    for msg in _messages(name):
        values: dict[str, Any] = {"x": 1}
        for kids in ((), [msg.record("t", {})]):
            a = fast.record(msg, values, kids) if kids else fast.record(msg, values)
            b = ref.record(msg, values, kids) if kids else ref.record(msg, values)
            assert type(a) is type(b) is ColumnBatch
            assert (a.fmt, b.fmt, a.rows[0], b.rows[0]) == (fast, ref, values, values)
            assert a._replace(fmt=None) == b._replace(fmt=None)
            assert [type(v) for v in a.rows] == [type(v) for v in b.rows]


@pytest.mark.parametrize("name", CAPTURES)
def test_the_envelope_columns_in_python_give_the_same_rows(name, monkeypatch):
    """``_moved_columns_py`` (the definition) where the C buffers would be used."""
    monkeypatch.setattr(columns, "_moved_columns", lambda rows, carried: None)
    assert _assert_same(list(_messages(name)), 4096, raiser=False) == MOVED[name]


def test_the_envelope_columns_in_c_are_the_pys():
    """``_moved_columns`` (``_rows.typed_tuples``) gives ``_moved_columns_py``'s arrays,
    nulls included, and declines (None) what it does not take as ``pa.array`` would."""
    row = ({}, 0, 1, 2, 3, 4, 5, 6, FLOW, 9, 1, None, "10.0.0.1", 1, "10.0.0.2", 2)
    rows = [row, row[:2] + (None,) * 6 + (FLOW, 10, 0, 3, None, None, "::1", 65535)]
    rows += [row[:9] + (11 + i,) + row[10:] for i in range(20)]
    for carried in (True, False):  # (False: a session's own rows, no parent)
        got = columns._moved_columns(rows, carried)
        want = columns._moved_columns_py(rows, carried)
        assert got is not None and got.keys() == want.keys()
        for name, array in want.items():
            assert got[name].equals(array), name
        assert want["parent_record_id"].null_count == (0 if carried else len(rows))
    for at, value in ((10, None), (10, 2), (10, -1), (9, None), (2, 1.5), (8, True),
                      (13, 2**31), (12, b"x")):
        assert columns._moved_columns([row, row[:at] + (value,) + row[at + 1:]]) is None
    assert columns._moved_columns([row[:15]]) is None  # (a short tuple)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(CAPTURES),
    st.integers(0, 300),
    st.integers(1, 120),
    st.lists(st.tuples(st.integers(0, 119), st.tuples(st.integers(0, 3), st.integers(0, 999),
                                                      st.integers(0, 255),
                                                      st.binary(max_size=6))), max_size=12),
    st.sampled_from([None, 0, 7, 4096]),
    st.booleans(),
    st.sampled_from([1, 3, 50, columns.CONVERT_ROWS]),
)
def test_damaged_stretches_give_the_same_rows(name, start, length, damage, cap, raiser,
                                              convert_rows):
    messages = list(_messages(name))[start : start + length]
    for i, how in damage:
        if i < len(messages):
            messages[i] = _damaged(messages[i], how)
    with mock.patch.object(columns, "CONVERT_ROWS", convert_rows):  # converted in parts
        _assert_same(messages, cap, raiser)


@pytest.mark.parametrize(("env", "option", "stan", "liftbridge"), [
    (None, True, True, True), ("1", True, True, True), ("0", True, False, False),
    ("stan", True, True, False),
    ("liftbridge", True, False, True), ("stan,liftbridge", True, True, True),
    ("1", False, False, False), (None, False, False, False)])
def test_the_switch_and_the_option(monkeypatch, env, option, stan, liftbridge):
    if env is None:
        monkeypatch.delenv(columns.SWITCH, raising=False)
    else:
        monkeypatch.setenv(columns.SWITCH, env)
    for name, dissector, want in (("stan-basic.pcap", StanDissector, stan),
                                  ("liftbridge-basic.pcap", LiftbridgeDissector, liftbridge)):
        scope = ScopeDispatcher([dissector], {"columnar": option}, strict=True)
        first = next(r for m in _messages(name) for r in scope.dispatch(m))
        assert (type(first) is ColumnBatch) is want


def test_whole_captures_give_the_same_tables(tmp_path, monkeypatch):
    moves = 0
    move = columns.compiled_move_row()
    assert move is not None  # (the extension is built: its move is the one counted)

    def spy(self: columns.PayloadRows, *args: Any) -> None:
        nonlocal moves
        moves += 1
        move(self, *args)

    monkeypatch.setattr(columns, "compiled_move_row", lambda: spy)
    # parts of 3 rows: ``len`` must count them, or the dict rows that wait between the
    # accumulator's rows (ReplicationResponses with entries) would land elsewhere
    monkeypatch.setattr(columns, "CONVERT_ROWS", 3)
    for name in CAPTURES:
        tables = []
        for env in ("0", "1"):
            monkeypatch.setenv(columns.SWITCH, env)
            out = tmp_path / env
            shutil.rmtree(out, ignore_errors=True)
            dissect_capture(SAMPLES / name, out, Options(strict=True, validate=True))
            tables.append({d.name: pq.read_table(d) for d in out.iterdir() if d.is_dir()})
        ref, got = tables
        assert ref.keys() == got.keys()
        for table in ref:  # in file order: the rows' places are the reference's too
            assert got[table].equals(ref[table]), (name, table)
    assert moves == sum(MOVED.values())

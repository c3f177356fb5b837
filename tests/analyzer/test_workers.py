"""``--workers N`` on one capture (``analyzer.parallel``): N processes split the capture
by flow, and the dataset, manifest entry and result are those of one process — whether
the workers dissected only their own flows (``split == "light"``) or, because state
shared across flows was used, all of them (``"exact"``).

Every comparison reads each table whole (all part files) and sorts it by ``record_id``
(``flows``: ``flow_id``) — the one order that does not depend on how rows were spread
over files — then compares with ``pyarrow.Table.equals``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.manifest import read_manifest
from analyzer.parallel import OwnedRowsWriter, _Task, dissect_parallel, run_worker
from analyzer.pipeline import CaptureResult, Options, dissect_capture, file_sha256, tables_for
from analyzer.sink import DatasetWriter, commit_files, open_dataset, part_files
from analyzer.testing import dissect_with_cli
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.registry import discover
from dissectors.schema import register_table, rows_to_batch
from dissectors.tables import get_table
from reassembly import native
from reassembly.capture import open_capture
from reassembly.flowplan import FlowPlan, balance, plan_flows
from reassembly.limits import Limits
from tests.analyzer.conftest import CAPTURE_ID, SHA, anomaly_row, flow_row

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PCAPS = sorted(SAMPLES.glob("*.pcap"))
NATS_BASIC = SAMPLES / "nats-basic.pcap"
STAN = SAMPLES / "stan-basic.pcap"
LIFTBRIDGE = SAMPLES / "liftbridge-basic.pcap"
FELIX_QUIC = SAMPLES / "felix-quic.pcap"
# samples whose flows share state: payload dissectors bind subjects across connections
# (STAN, Liftbridge), QUIC links UDP flows by connection id
SHARED_STATE = {STAN.stem: "payload", LIFTBRIDGE.stem: "payload", FELIX_QUIC.stem: "quic"}


def _options(pcap: Path, **kw) -> Options:
    keys = pcap.with_suffix(".keys")
    if keys.exists():
        kw.setdefault("keylog", str(keys))
    return Options(strict=kw.pop("strict", True), validate=True, **kw)


def _dissect(pcap: Path, out: Path, workers: int, **kw) -> CaptureResult:
    return dissect_capture(pcap, out, _options(pcap, **kw), workers=workers)


def _tables(out: Path) -> dict[str, pa.Table]:
    """Every table of the dataset (all captures, all part files), sorted by row id."""
    for spec in tables_for(discover()):
        register_table(spec)
    res = {}
    for d in sorted(p for p in out.iterdir() if any(p.glob("*/*.parquet"))):
        table = open_dataset(out, get_table(d.name)).to_table()
        key = "flow_id" if d.name == FLOWS.name else "record_id"
        ids = table.column(key)
        assert ids.null_count == 0 and len(set(ids.to_pylist())) == table.num_rows, d.name
        res[d.name] = table.sort_by(key)
    return res


def _parts(out: Path, table: str) -> list[Path]:
    return [f for d in sorted((out / table).iterdir()) for f in part_files(d)]


def _entry(result: CaptureResult) -> dict:
    (entry,) = [i for i in result.manifest["inputs"] if i["capture_id"] == result.capture_id]
    return {k: v for k, v in entry.items() if k != "processed"}


def _assert_same_output(one: tuple[CaptureResult, Path], many: tuple[CaptureResult, Path]):
    (r1, out1), (rn, outn) = one, many
    t1, tn = _tables(out1), _tables(outn)
    assert sorted(tn) == sorted(t1)
    for name in t1:
        assert tn[name].num_rows == t1[name].num_rows, name
        assert tn[name].equals(t1[name]), f"table {name} differs"
    # the result one process returns, and the manifest entry it writes
    assert rn.rows == r1.rows
    assert rn.anomalies == r1.anomalies
    assert rn.flows_by_protocol == r1.flows_by_protocol
    assert (rn.packets, rn.bytes, rn.capture_id) == (r1.packets, r1.bytes, r1.capture_id)
    assert _entry(rn) == _entry(r1)
    assert rn.manifest["rows"] == r1.manifest["rows"]
    assert sum(rn.manifest["rows"].values()) == sum(t.num_rows for t in tn.values())
    # provenance metadata: the same in every part file as in the one file of one process
    meta1 = pq.read_schema(_parts(out1, FLOWS.name)[0]).metadata
    for name in tn:
        for f in _parts(outn, name):
            assert pq.read_schema(f).metadata == pq.read_schema(
                _parts(out1, name)[0]
            ).metadata
            assert pq.read_schema(f).metadata[b"msgcap.options"] == meta1[b"msgcap.options"]
    assert not list(outn.rglob("*.inprogress"))


# ------------------------------------------------------------------ every sample


@pytest.mark.parametrize("pcap", PCAPS, ids=[p.stem for p in PCAPS])
def test_two_workers_write_the_rows_of_one(tmp_path, pcap: Path) -> None:
    one = _dissect(pcap, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(pcap, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    why = SHARED_STATE.get(pcap.stem)
    assert two[0].split == ("exact" if why else "light"), two[0].fallback
    assert bool(two[0].fallback) == bool(why)
    assert all(r.endswith(f": {why}") for r in two[0].fallback)
    # one process: exactly the files of today, part-0 only
    assert {f.name for f in (tmp_path / "one").rglob("*.parquet")} == {"part-0.parquet"}
    # every row is in the file of the worker that owns its flow (by the flows' bytes)
    _writers_of_flows(tmp_path / "two", plan_flows(pcap, 2))


def _writers_of_flows(out: Path, plan: FlowPlan) -> set[int]:
    """The workers whose part files in ``out`` hold rows of a flow, after checking that
    every row is in the file of the worker ``plan`` gives its flow (worker 0: rows of
    no flow)."""
    writers = set()
    for name in _tables(out):
        for f in _parts(out, name):
            k = int(f.stem.split("-")[1])
            flows = pq.read_table(f, columns=["flow_id"]).column("flow_id").to_pylist()
            assert all((k == 0) if fid is None else plan.worker_of(fid) == k
                       for fid in flows), f
            writers |= {k for fid in flows if fid is not None}
    return writers


def test_pcapng_is_split_by_the_plan_as_pcap_is(tmp_path) -> None:
    """A pcapng capture is planned by bytes too (the pre-pass reads it with the C pcapng
    walk): two workers write the rows of one, each row in the file of the worker the
    plan gives its flow, and the plan is the one of the same records in classic pcap."""
    from tests.reassembly.test_flowplan import _as_pcapng

    ng = tmp_path / "nats-basic.pcapng"
    _as_pcapng(NATS_BASIC, ng)
    plan = plan_flows(ng, 2)
    assert plan == plan_flows(NATS_BASIC, 2)
    shares = list(plan.shares)  # by bytes, not by flow id
    assert len(shares) == 6 and shares != [fid % 2 for fid in range(6)]
    one = _dissect(ng, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(ng, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    assert _writers_of_flows(tmp_path / "two", plan) == {0, 1}


def test_workers_roll_their_files_over_as_one_process_does(tmp_path, monkeypatch) -> None:
    """Every writer starts a table's next file every ``file_row_groups`` row groups
    (``part-<k>-<seq>.parquet``, docs/tables.md): forced to 2 row groups of 8 rows, one
    process and two workers still give the same rows, and the coordinator commits the
    rolled files."""
    init = DatasetWriter.__init__

    def small(self, *args, **kw) -> None:  # noqa: ANN001
        kw.update(rows_per_batch=8, file_row_groups=2)
        init(self, *args, **kw)

    monkeypatch.setattr(DatasetWriter, "__init__", small)
    one = _dissect(NATS_BASIC, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(NATS_BASIC, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    # worker 0 is this process (its coordinated writer rolled over and left its files to
    # the commit); the other is forked or spawned (a thread alive in the test run makes
    # it spawned: it then writes with the defaults, this test's patch not in it)
    names = {f.name for f in (tmp_path / "two").rglob("*.parquet")}
    assert {"part-0-1.parquet", "part-0-2.parquet"} <= names, names
    assert any(n.startswith("part-1") for n in names), names
    assert {"part-0.parquet", "part-0-1.parquet", "part-0-2.parquet"} <= {
        f.name for f in (tmp_path / "one").rglob("*.parquet")}
    for f in (tmp_path / "two").rglob("*.parquet"):
        assert pq.read_metadata(f).num_row_groups <= 2, f


def test_several_flows_are_really_split_over_part_files(tmp_path) -> None:
    """nats-basic has six connections: with 2 workers both write NATS rows."""
    r = _dissect(NATS_BASIC, tmp_path, 2)
    nats = _parts(tmp_path, "nats")
    assert [f.name for f in nats] == ["part-0.parquet", "part-1.parquet"]
    counts = [pq.read_metadata(f).num_rows for f in nats]
    assert all(counts) and sum(counts) == r.rows["nats"]
    # a table without rows keeps one empty part-0 file, as with one process
    assert [f.name for f in _parts(tmp_path, "pulsar_commands")] == ["part-0.parquet"]


def test_three_workers_with_payload_bindings_across_connections(tmp_path) -> None:
    """STAN learns subject bindings on one connection and uses them on another: the
    light run is thrown away and every worker dissects every flow, so the split output
    is still exact."""
    one = _dissect(STAN, tmp_path / "one", 1), tmp_path / "one"
    three = _dissect(STAN, tmp_path / "three", 3), tmp_path / "three"
    _assert_same_output(one, three)
    assert three[0].split == "exact"
    # the first worker to decode a STAN payload ends the light run of all
    assert three[0].fallback and all(f.endswith(": payload") for f in three[0].fallback)
    assert one[0].rows["stan"] > 0
    assert [f.name for f in _parts(tmp_path / "three", "nats")] == [
        "part-0.parquet", "part-1.parquet", "part-2.parquet"
    ]
    assert len(_parts(tmp_path / "three", "stan")) > 1


@pytest.mark.parametrize("pcap", [NATS_BASIC, SAMPLES / "nats-tls.pcap"], ids=lambda p: p.stem)
def test_light_split_with_three_workers(tmp_path, pcap: Path) -> None:
    """Flows that share no state: each worker reassembles and dissects only its own."""
    one = _dissect(pcap, tmp_path / "one", 1), tmp_path / "one"
    three = _dissect(pcap, tmp_path / "three", 3), tmp_path / "three"
    _assert_same_output(one, three)
    assert (three[0].split, three[0].fallback) == ("light", [])


@pytest.mark.parametrize("pcap", [STAN, LIFTBRIDGE, FELIX_QUIC], ids=lambda p: p.stem)
def test_shared_state_falls_back_to_the_exact_split(tmp_path, pcap: Path) -> None:
    """A light run of these would lose bindings learned on a foreign connection (or a
    QUIC path on a foreign flow): the parent runs the exact split instead, the light
    run leaving no file behind."""
    one = _dissect(pcap, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(pcap, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    r = two[0]
    assert r.split == "exact"
    assert r.fallback and all(f.endswith(SHARED_STATE[pcap.stem]) for f in r.fallback)
    assert not list((tmp_path / "two").rglob("*.inprogress"))


@pytest.mark.parametrize("pcap", [STAN, FELIX_QUIC], ids=lambda p: p.stem)
def test_a_light_worker_stops_reading_once_shared_state_is_used(tmp_path, pcap,
                                                              monkeypatch) -> None:
    """Its run will be thrown away: it does not read the rest of the capture.  Checked on
    the reference reassembler: the native engine reads a classic pcap a batch ahead
    (``reassembly.native.BATCH_RECORDS`` records, more than these samples hold), so with
    it the worker stops at the end of the batch it is in."""
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    sha = file_sha256(pcap)
    task = _Task(str(pcap), str(tmp_path), sha[:16], sha, _options(pcap), discover(), None,
                 0, 2, light=True)
    r = run_worker(task)
    assert r.cross_flow == [SHARED_STATE[pcap.stem]] and r.error is None
    with open_capture(pcap) as reader:
        total = sum(1 for _ in reader)
    assert r.packets < total / 2


def test_exact_split_on_request(tmp_path) -> None:
    """``light=False``: every worker reads every flow (the mode of the fallback)."""
    one = _dissect(NATS_BASIC, tmp_path / "one", 1), tmp_path / "one"
    r = dissect_parallel(NATS_BASIC, tmp_path / "two", 2, _options(NATS_BASIC), light=False)
    _assert_same_output(one, (r, tmp_path / "two"))
    assert (r.split, r.fallback) == ("exact", [])


def test_a_memory_budget_reached_falls_back_to_the_exact_split(tmp_path) -> None:
    """The memory budget is shared across flows: one process reaches 64 KiB on nats-ws
    (holders give memory back: ``limit.memory`` rows, other NATS rows) where a light
    worker, holding only its own flows, would not.  Such a light run is not kept."""
    kw = {"limits": Limits(memory_limit_bytes=65536)}
    pcap = SAMPLES / "nats-ws.pcap"
    one = _dissect(pcap, tmp_path / "one", 1, **kw), tmp_path / "one"
    two = _dissect(pcap, tmp_path / "two", 2, **kw), tmp_path / "two"
    _assert_same_output(one, two)
    assert one[0].anomalies["limit.memory"] > 0
    assert two[0].split == "exact" and any("memory budget" in f for f in two[0].fallback)


def test_spawned_workers_write_the_rows_of_one(tmp_path, monkeypatch) -> None:
    """With another Python thread running (a progress refresher, a Spark gateway) the
    children are spawned, not forked: the same rows."""
    from analyzer import parallel

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert parallel._start_method() == "spawn"
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(parallel, "_start_method", lambda: "spawn")
    one = _dissect(NATS_BASIC, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(NATS_BASIC, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    assert (two[0].split, two[0].fallback) == ("light", [])


def _damaged(tmp_path: Path) -> Path:
    """nats-basic with two records dropped (TCP gaps, rows with a flow) and the last
    record cut short (``capture.damaged``, a row with no flow: worker 0's)."""
    data = NATS_BASIC.read_bytes()
    out, pos, n = bytearray(data[:24]), 24, 0
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        if n not in (60, 140):
            out += data[pos : pos + 16 + incl]
        pos += 16 + incl
        n += 1
    path = tmp_path / "damaged.pcap"
    path.write_bytes(bytes(out[:-37]))
    return path


def test_capture_level_anomalies_go_to_worker_0(tmp_path) -> None:
    pcap = _damaged(tmp_path)
    one = _dissect(pcap, tmp_path / "one", 1), tmp_path / "one"
    two = _dissect(pcap, tmp_path / "two", 2), tmp_path / "two"
    _assert_same_output(one, two)
    assert two[0].split == "light"
    assert two[0].manifest["status"] == "degraded"
    assert two[0].anomalies["capture.damaged"] == 1 and two[0].anomalies["tcp.gap"] >= 1
    for f in _parts(tmp_path / "two", "anomalies"):
        flows = pq.read_table(f, columns=["flow_id"]).column("flow_id")
        assert (flows.null_count > 0) == (f.name == "part-0.parquet")


# ------------------------------------------------------------- overwrite, refusal


def test_overwrite_between_worker_counts_leaves_only_the_new_parts(tmp_path) -> None:
    ref = tmp_path / "ref"
    _dissect(NATS_BASIC, ref, 1)
    out = tmp_path / "out"
    _dissect(NATS_BASIC, out, 3)
    with pytest.raises(FileExistsError, match="overwrite"):
        _dissect(NATS_BASIC, out, 2)
    assert len(_parts(out, "nats")) == 3  # a refused run changes nothing

    r = _dissect(NATS_BASIC, out, 1, overwrite=True)
    assert {f.name for f in out.rglob("*.parquet")} == {"part-0.parquet"}
    assert all(t.equals(_tables(ref)[n]) for n, t in _tables(out).items())

    r = _dissect(NATS_BASIC, out, 2, overwrite=True)
    assert [f.name for f in _parts(out, "nats")] == ["part-0.parquet", "part-1.parquet"]
    assert all(t.equals(_tables(ref)[n]) for n, t in _tables(out).items())
    assert len(read_manifest(out)["inputs"]) == 1
    assert r.manifest["rows"] == read_manifest(ref)["rows"]


# -------------------------------------------------------------------- failures


class Interrupt:
    """``wrap`` that ends the event stream after ``after`` events: ``how="raise"``
    raises ValueError (a failed dissection), ``"exit"`` kills the process with exit
    code 3.  As ``wrap`` it runs in worker 0 (this process); ``_in_worker_1`` puts it
    in worker 1 (a child) instead.  Worker 0 of 2 sees 73 events of nats-basic in a
    light run (its own flows), 153 in an exact one: 40 ends both; worker 1 sees more
    than 40 in either."""

    def __init__(self, after: int, how: str) -> None:
        self.after, self.how = after, how

    def __call__(self, reader, events):
        for n, ev in enumerate(events):
            if n == self.after:
                if self.how == "exit":
                    os._exit(3)
                raise ValueError("boom")
            yield ev


def _in_worker_1(monkeypatch, wrap) -> None:
    """Run ``wrap`` in worker 1, a child process: worker 0 runs in this (the tests')
    process, which an ``os._exit`` there would end.  The child is forked, so it
    inherits this patch."""
    from analyzer import parallel

    run = parallel.run_worker

    def run_worker(task, *args, **kwargs):
        if task.worker == 1:
            task = dataclasses.replace(task, wrap=wrap)
        return run(task, *args, **kwargs)

    monkeypatch.setattr(parallel, "run_worker", run_worker)
    monkeypatch.setattr(parallel, "_start_method", lambda: "fork")


def _on_disk(out: Path) -> dict[str, int]:
    """Rows per table on disk (tables with rows)."""
    return {n: t.num_rows for n, t in _tables(out).items() if t.num_rows}


def test_a_worker_that_dies_fails_the_capture_and_leaves_no_file_of_another_run(
    tmp_path, monkeypatch,
) -> None:
    _dissect(NATS_BASIC, tmp_path, 2)  # a complete run first: its part-1 files must go
    _in_worker_1(monkeypatch, Interrupt(40, "exit"))
    r = dissect_capture(
        NATS_BASIC, tmp_path, _options(NATS_BASIC, overwrite=True, strict=False), workers=2,
    )
    assert r.manifest["status"] == "failed" and r.manifest["exit_code"] == 2
    assert _entry(r)["error"] == "worker 1 of 2 ended without a result (exit code 3)"
    # the light run died first: not proven, so the exact run (which died too) counts
    assert r.split == "exact"
    assert r.fallback == ["worker 1 ended without a result (exit code 3)"]
    assert not list(tmp_path.rglob("part-1.parquet"))  # neither new nor old
    assert not list(tmp_path.rglob("*.inprogress"))
    assert {f.name for f in tmp_path.rglob("*.parquet")} == {"part-0.parquet"}
    assert _on_disk(tmp_path) == {n: c for n, c in r.rows.items() if c}


def test_a_worker_that_dies_under_strict_raises_and_writes_nothing(tmp_path,
                                                                  monkeypatch) -> None:
    _in_worker_1(monkeypatch, Interrupt(40, "exit"))
    with pytest.raises(RuntimeError, match="worker 1 of 2 ended without a result"):
        dissect_capture(NATS_BASIC, tmp_path, _options(NATS_BASIC), workers=2)
    assert not list(tmp_path.rglob("*.parquet")) and not list(tmp_path.rglob("*.inprogress"))
    assert read_manifest(tmp_path) is None


def test_a_failed_dissection_in_a_worker_is_a_failed_run_like_one_process(tmp_path) -> None:
    runs = {}
    for workers in (1, 2):
        out = tmp_path / str(workers)
        runs[workers] = dissect_capture(
            NATS_BASIC, out, _options(NATS_BASIC, strict=False),
            wrap=Interrupt(40, "raise"), workers=workers,
        )
        assert runs[workers].manifest["status"] == "failed"
        assert _entry(runs[workers])["error"] == "ValueError: boom"
        if workers == 2:
            assert runs[2].fallback == ["worker 0 failed: ValueError: boom"]
        assert _on_disk(out) == {n: c for n, c in runs[workers].rows.items() if c}
    # worker 1 was not interrupted: it wrote its whole share
    assert sum(runs[2].rows.values()) > sum(runs[1].rows.values())


def test_strict_reraises_the_workers_exception_and_keeps_the_old_run(tmp_path) -> None:
    _dissect(NATS_BASIC, tmp_path, 2)
    before = _tables(tmp_path)
    manifest = read_manifest(tmp_path)
    with pytest.raises(ValueError, match="boom"):
        dissect_capture(NATS_BASIC, tmp_path, _options(NATS_BASIC, overwrite=True),
                        wrap=Interrupt(40, "raise"), workers=2)
    assert not list(tmp_path.rglob("*.inprogress"))
    after = _tables(tmp_path)
    assert sorted(after) == sorted(before)
    assert all(after[n].equals(before[n]) for n in before)
    assert read_manifest(tmp_path) == manifest


def test_not_a_capture_raises_as_with_one_process(tmp_path) -> None:
    from reassembly.capture import CaptureFormatError

    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all" * 10)
    with pytest.raises(CaptureFormatError):
        dissect_capture(bad, tmp_path / "out", Options(), workers=2)
    assert not list((tmp_path / "out").rglob("*.parquet"))
    with pytest.raises(ValueError, match="workers"):
        dissect_capture(NATS_BASIC, tmp_path / "out", Options(), workers=0)


# ------------------------------------------------------------- the writer wrapper


def test_owned_rows_writer_splits_rows_and_batches_by_flow(tmp_path) -> None:
    flows = [flow_row(i) for i in range(50)]
    anomalies = [anomaly_row(i) for i in range(40)]  # every fourth has no flow
    n = 3
    for k in range(n):
        inner = DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0", {}, validate=True,
                              part=k, coordinated=True)
        w = OwnedRowsWriter(inner, k, n)
        assert [w.owns(f) for f in (None, 0, 1, 2, 3, 4)] == [
            k == 0, k == 0, k == 1, k == 2, k == 0, k == 1
        ]
        w.write_rows(FLOWS, iter(flows[:25]))  # an iterator, then a batch
        w.write_batch(FLOWS, pa.Table.from_batches([rows_to_batch(FLOWS, flows[25:])]))
        w.write_rows(ANOMALIES, anomalies)
        rows = w.close()
        assert not list(tmp_path.rglob(f"part-{k}.parquet"))  # left for the coordinator
        commit_files(inner.pending_files())
        mine_f = [r for r in flows if r["flow_id"] % n == k]
        mine_a = [r for r in anomalies if w.owns(r.get("flow_id"))]
        assert rows == {"anomalies": len(mine_a), "flows": len(mine_f)}
        assert w.anomalies == Counter(r["kind"] for r in mine_a)
        assert w.flows_by_protocol == Counter(r["protocol"] or "(unclaimed)" for r in mine_f)
    got = open_dataset(tmp_path, ANOMALIES).to_table().sort_by("record_id")
    assert got.column("record_id").to_pylist() == sorted(r["record_id"] for r in anomalies)
    got = open_dataset(tmp_path, FLOWS).to_table().sort_by("flow_id")
    assert got.column("flow_id").to_pylist() == list(range(50))
    assert DatasetWriter(tmp_path / "x", CAPTURE_ID, SHA, "0", {}).owns(7)


def test_owned_rows_writer_follows_a_flow_plan(tmp_path) -> None:
    """With a plan (``reassembly.flowplan``) rows and batches go where it says, flows
    past it by ``flow_id % workers``; every row lands in exactly one share."""
    plan = balance([90, 10, 10, 70, 5, 5], 2)  # flows 0..5 planned, 6.. by id
    flows = [flow_row(i) for i in range(12)]
    anomalies = [anomaly_row(i) for i in range(40)]
    for k in range(2):
        inner = DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0", {}, validate=True,
                              part=k, coordinated=True)
        w = OwnedRowsWriter(inner, k, 2, plan)
        assert [w.owns(f) for f in range(12)] == [plan.worker_of(f) == k for f in range(12)]
        assert w.owns(None) == (k == 0) and w.owns(7) == (k == 1)
        w.write_rows(FLOWS, flows[:5])
        w.write_batch(FLOWS, pa.Table.from_batches([rows_to_batch(FLOWS, flows[5:])]))
        w.write_batch(ANOMALIES, pa.Table.from_batches([rows_to_batch(ANOMALIES, anomalies)]))
        rows = w.close()
        commit_files(inner.pending_files())
        mine_a = [r for r in anomalies if (r.get("flow_id") is None and k == 0)
                  or (r.get("flow_id") is not None and plan.worker_of(r["flow_id"]) == k)]
        assert rows == {"anomalies": len(mine_a),
                        "flows": sum(plan.worker_of(f) == k for f in range(12))}
    got = open_dataset(tmp_path, FLOWS).to_table().sort_by("flow_id")
    assert got.column("flow_id").to_pylist() == list(range(12))
    got = open_dataset(tmp_path, ANOMALIES).to_table().sort_by("record_id")
    assert got.column("record_id").to_pylist() == sorted(r["record_id"] for r in anomalies)
    with pytest.raises(ValueError):
        OwnedRowsWriter(inner, 0, 3, plan)


# -------------------------------------------------------------------------- CLI


def test_cli_workers_on_one_capture(tmp_path) -> None:
    one = dissect_with_cli(NATS_BASIC, tmp_path / "one", "--workers", "1")
    two = dissect_with_cli(NATS_BASIC, tmp_path / "two", "--workers", "2")
    assert one.returncode == two.returncode == 0, two.stderr
    assert sorted(two.tables) == sorted(one.tables)
    t1, t2 = _tables(tmp_path / "one"), _tables(tmp_path / "two")
    assert sorted(t2) == sorted(t1)
    assert all(t2[n].equals(t1[n]) for n in t1)
    assert len(_parts(tmp_path / "two", "nats")) == 2
    r1, r2 = read_manifest(tmp_path / "one"), read_manifest(tmp_path / "two")
    assert r2["rows"] == r1["rows"] and r2["status"] == r1["status"]
    # the printed summary is the same (throughput line aside)
    summary = one.stderr.split("1 capture(s)")[0]
    assert "rows per table" in summary and two.stderr.split("1 capture(s)")[0] == summary

    bad = dissect_with_cli(NATS_BASIC, tmp_path / "bad", "--workers", "0")
    assert bad.returncode == 2 and "positive" in bad.stderr


def test_cli_workers_with_several_captures_keeps_one_process_per_capture(tmp_path) -> None:
    caps = [tmp_path / "a.pcap", NATS_BASIC]
    shutil.copy(STAN, caps[0])
    run = dissect_with_cli(caps, tmp_path / "out", "--workers", "2")
    assert run.returncode == 0, run.stderr
    assert {f.name for f in (tmp_path / "out").rglob("*.parquet")} == {"part-0.parquet"}
    assert len(read_manifest(tmp_path / "out")["inputs"]) == 2


# ------------------------------------------------------------------------ Spark


@pytest.mark.spark
def test_spark_reads_every_part(spark, tmp_path) -> None:
    from analyzer.sink import read_spark_table

    _dissect(NATS_BASIC, tmp_path / "one", 1)
    _dissect(NATS_BASIC, tmp_path / "two", 2)
    spec = get_table("nats")
    ids = [
        sorted(r.record_id for r in read_spark_table(spark, tmp_path / d, spec)
               .select("record_id").collect())
        for d in ("one", "two")
    ]
    assert ids[0] == ids[1] and len(ids[0]) == 205


def test_dissect_with_workers_forks_them(tmp_path, monkeypatch) -> None:
    """``msgcap dissect --workers 2`` starts no digest thread before its workers (a
    thread running then makes them spawned: an interpreter start and the imports each)."""
    import time

    from analyzer import cli, digest, parallel

    hash_here = digest._hash

    def slow_off_main(path):  # a large capture's digest: still running when workers start
        if threading.current_thread() is not threading.main_thread():
            time.sleep(2)
        return hash_here(path)

    monkeypatch.setattr(digest, "_hash", slow_off_main)
    running = []
    real = parallel._start_method

    def start_method():
        running.append(sorted(t.name for t in threading.enumerate()))
        return real()

    monkeypatch.setattr(parallel, "_start_method", start_method)
    code = cli.main(["dissect", str(NATS_BASIC), "-o", str(tmp_path / "out"), "-q",
                     "--workers", "2"])
    assert code == 0
    assert len(running) == 1 and "msgcap-sha256" not in running[0]  # (what ran before may
    # have left threads of its own in this test process)

"""The Parquet dataset sink and the manifest."""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analyzer.manifest import (
    EXIT_CODES,
    UNCLAIMED,
    CaptureRun,
    InputInfo,
    RunStatus,
    read_manifest,
    update_manifest,
)
from analyzer.sink import (
    DatasetWriter,
    commit_files,
    dataset_schema,
    open_dataset,
    part_files,
    partition_dir,
    remove_in_progress,
)
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.schema import SchemaError, arrow_schema, rows_to_batch
from dissectors.tables import DELTA, Field, TableSpec
from tests.analyzer.conftest import CAPTURE_ID, SHA, anomaly_row, flow_row

OPTIONS = {"payload_cap": 4096, "decode_as": {"4223": "nats"}}


def _writer(out: Path, capture_id: str = CAPTURE_ID, **kw) -> DatasetWriter:
    kw.setdefault("rows_per_batch", 64)
    return DatasetWriter(out, capture_id, SHA, "0.1.0", OPTIONS, validate=True, **kw)


def _plain(table: pa.Table) -> list[dict]:
    """Rows as Python values, timestamps as integer microseconds."""
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        cols[name] = col.to_pylist()
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def _expected(spec, rows: list[dict]) -> list[dict]:
    """Rows as ``_plain`` reads them back: a timestamp given in nanoseconds is stored in
    microseconds (rounded down) and exactly in its ``_ns`` companion."""
    out = []
    for r in rows:
        row = {}
        for f in spec.columns:
            v = r.get(f.exact_of or f.name)
            if v is not None and pa.types.is_timestamp(f.type):
                v //= 1000
            row[f.name] = v
        out.append(row)
    return out


# ----------------------------------------------------------------------- round trip


def test_dataset_reads_back_exactly_the_rows_written(tmp_path) -> None:
    flows = [flow_row(i) for i in range(300)]
    anomalies = [anomaly_row(i) for i in range(150)]
    with _writer(tmp_path) as w:
        for n, i in enumerate(range(0, 300, 37)):  # interleaved, odd chunk sizes
            w.write_rows(FLOWS, flows[i : i + 37])
            w.write_rows(ANOMALIES, anomalies[n * 19 : n * 19 + 19])
    assert w.close() == {"anomalies": 150, "flows": 300}

    for spec, rows in ((FLOWS, flows), (ANOMALIES, anomalies)):
        dataset = ds.dataset(tmp_path / spec.name, partitioning="hive")
        table = dataset.to_table()
        # declared schema plus the partition column, string-typed, no clash with capture_id
        assert table.schema.equals(dataset_schema(spec), check_metadata=False)
        assert table.schema.field("capture").type == pa.string()
        assert table.schema.field("capture_id").type == pa.string()
        got = _plain(table)
        assert [r.pop("capture") for r in got] == [CAPTURE_ID] * len(rows)
        assert got == _expected(spec, rows)
        # descriptions travel with the file
        assert table.schema.field("flow_id").metadata[b"description"] == (
            spec.column("flow_id").description.encode()
        )


def test_file_layout_metadata_and_row_groups(tmp_path) -> None:
    with _writer(tmp_path, rows_per_batch=50) as w:
        w.write_rows(FLOWS, [flow_row(i) for i in range(170)])
    part = tmp_path / "flows" / f"capture={CAPTURE_ID}" / "part-0.parquet"
    assert sorted(p.name for p in part.parent.iterdir()) == ["part-0.parquet"]
    md = pq.read_metadata(part)
    kv = md.metadata
    assert kv[b"msgcap.table"] == b"flows"
    assert kv[b"msgcap.table_version"] == b"2"
    assert kv[b"msgcap.tool_version"] == b"0.1.0"
    assert kv[b"msgcap.input_sha256"] == SHA.encode()
    assert kv[b"msgcap.capture_id"] == CAPTURE_ID.encode()
    assert json.loads(kv[b"msgcap.options"]) == OPTIONS
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [50, 50, 50, 20]
    assert md.row_group(0).column(0).compression == "ZSTD"
    # exact Arrow types come back, us and UTC included; non-nullable stays non-nullable
    schema = pq.read_schema(part)
    assert schema.equals(arrow_schema(FLOWS), check_metadata=False)


def test_same_rows_give_byte_identical_files_whatever_the_chunking(tmp_path) -> None:
    rows = [flow_row(i) for i in range(500)]
    with _writer(tmp_path / "a", rows_per_batch=128) as w:
        w.write_rows(FLOWS, rows)
    with _writer(tmp_path / "b", rows_per_batch=128) as w:
        for r in rows:
            w.write_rows(FLOWS, [r])
    with _writer(tmp_path / "c", rows_per_batch=128) as w:
        w.write_rows(FLOWS, iter(rows))  # any iterable
    rel = Path("flows") / f"capture={CAPTURE_ID}" / "part-0.parquet"
    a = (tmp_path / "a" / rel).read_bytes()
    assert a == (tmp_path / "b" / rel).read_bytes() == (tmp_path / "c" / rel).read_bytes()


def test_write_batch_mixes_with_write_rows_in_order(tmp_path) -> None:
    rows = [anomaly_row(i) for i in range(100)]
    with _writer(tmp_path, rows_per_batch=16) as w:
        w.write_rows(ANOMALIES, rows[:5])
        w.write_batch(ANOMALIES, rows_to_batch(ANOMALIES, rows[5:40]))
        w.write_rows(ANOMALIES, rows[40:41])
        w.write_batch(ANOMALIES, pa.Table.from_batches([rows_to_batch(ANOMALIES, rows[41:90])]))
        w.write_rows(ANOMALIES, rows[90:])
        assert w.buffered_rows("anomalies") < 16
    table = open_dataset(tmp_path, ANOMALIES).to_table()
    got = _plain(table.drop_columns(["capture"]))
    assert got == _expected(ANOMALIES, rows)
    md = pq.read_metadata(partition_dir(tmp_path, "anomalies", CAPTURE_ID) / "part-0.parquet")
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [16] * 6 + [4]


def test_ensure_tables_writes_empty_files_with_the_schema(tmp_path) -> None:
    w = _writer(tmp_path)
    w.write_rows(FLOWS, [flow_row(0)])
    counts = w.close(ensure_tables=[ANOMALIES, "flows"])
    assert counts == {"anomalies": 0, "flows": 1}
    table = ds.dataset(tmp_path / "anomalies", partitioning="hive").to_table()
    assert table.num_rows == 0
    assert table.schema.equals(dataset_schema(ANOMALIES), check_metadata=False)
    assert w.close() == counts  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        w.write_rows(FLOWS, [flow_row(1)])


def test_a_writer_that_fails_after_making_its_file_leaves_it_to_abort(tmp_path,
                                                                      monkeypatch) -> None:
    """The disk fills while an empty table's file is made at ``close`` (a CI run met it:
    the file existed, the writer raised, and nothing listed the file, so ``abort`` left
    ``.part-0.parquet.inprogress`` behind): every file made is listed before its writer,
    and ``abort`` deletes it."""
    import errno

    import analyzer.sink as sink

    real = sink.pq.ParquetWriter

    def full_disk(where, schema, **kw):
        if "anomalies" in str(where):
            Path(where).write_bytes(b"PAR1")  # made, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(where, schema, **kw)

    monkeypatch.setattr(sink.pq, "ParquetWriter", full_disk)
    w = _writer(tmp_path)
    w.write_rows(FLOWS, [flow_row(0)])
    with pytest.raises(OSError, match="No space left"):
        w.close(ensure_tables=[ANOMALIES, "flows"])
    w.abort()
    assert not list(tmp_path.rglob("*.inprogress"))


def test_several_captures_in_one_dataset(tmp_path) -> None:
    ids = ["00000000000000aa", "1234567890123456"]  # the second looks like a number
    for n, cid in enumerate(ids):
        with _writer(tmp_path, cid) as w:
            w.write_rows(FLOWS, [flow_row(i, cid) for i in range(n * 10, n * 10 + 10)])
    table = open_dataset(tmp_path, FLOWS).to_table().sort_by("flow_id")
    assert table.schema.field("capture").type == pa.string()
    assert table.column("capture").to_pylist() == [ids[0]] * 10 + [ids[1]] * 10
    assert table.column("capture").to_pylist() == table.column("capture_id").to_pylist()
    assert table.column("flow_id").to_pylist() == list(range(20))


def test_partition_type_must_be_declared_for_digit_only_capture_ids(tmp_path) -> None:
    """Why open_dataset declares ``capture`` as a string: inference turns an id made of
    digits into a number (and strips its leading zeros)."""
    cid = "0000000000000077"
    with _writer(tmp_path, cid) as w:
        w.write_rows(FLOWS, [flow_row(1, cid)])
    inferred = ds.dataset(tmp_path / "flows", partitioning="hive").to_table()
    assert inferred.column("capture").to_pylist() == [77]
    declared = open_dataset(tmp_path, FLOWS).to_table()
    assert declared.column("capture").to_pylist() == [cid]


def test_invalid_rows_raise_schema_error(tmp_path) -> None:
    w = _writer(tmp_path, rows_per_batch=4)
    bad = flow_row(1)
    bad["flow_id"] = None
    with pytest.raises(SchemaError, match="table 'flows', column 'flow_id': declared non-nullable"):
        w.write_rows(FLOWS, [flow_row(0), bad, flow_row(2), flow_row(3)])
    with pytest.raises(SchemaError, match="column 'fow_id': row has a key"):
        w.write_rows(ANOMALIES, [{"fow_id": 1}] * 4)
    with pytest.raises(SchemaError, match="column 'kind': missing column"):
        w.write_batch(ANOMALIES, rows_to_batch(ANOMALIES, [anomaly_row(0)]).drop_columns("kind"))
    w.abort()
    assert not list(tmp_path.rglob("*.parquet"))
    assert not list(tmp_path.rglob("*.inprogress"))


def test_undeclared_keys_raise_whether_or_not_the_writer_validates(tmp_path) -> None:
    # a decoder's undeclared key fails the dict-row path as it fails the payload rows'
    # columnar path (dissectors.proto.columns, which always checked): before, a writer
    # with validate=False (every command-line run) dropped the key silently
    from dissectors.proto.columns import PayloadRows
    from dissectors.stan import STAN_TABLE

    values = {"msg_type": "PubMsg", "typed_by": "subject", "inferred": False,
              "malformed": False, "channel_is_typo": "orders"}
    envelope = {"capture_id": CAPTURE_ID, "flow_id": 7, "record_id": 2, "direction": "c2s"}
    for validate in (False, True):
        w = DatasetWriter(tmp_path / str(validate), CAPTURE_ID, SHA, "0.1.0", OPTIONS,
                          validate=validate)
        with pytest.raises(SchemaError) as sink:
            w.write_rows(STAN_TABLE, [envelope | values])
            w.close()
        w.abort()
        acc = PayloadRows(STAN_TABLE)
        acc.move((values, 0, 0, 1, 10, 10, 1, 1), 1, 7, 2, 0, None, "10.0.0.1", 40000,
                 "10.0.0.2", 4222)
        with pytest.raises(SchemaError) as columnar:
            acc.to_batch(arrow_schema(STAN_TABLE), CAPTURE_ID)
        assert (sink.value.table, sink.value.column, str(sink.value)) == (
            "stan", "channel_is_typo", str(columnar.value))


def test_unfinished_files_are_invisible_to_readers(tmp_path) -> None:
    w = _writer(tmp_path, rows_per_batch=10)
    w.write_rows(FLOWS, [flow_row(i) for i in range(25)])  # two row groups on disk
    # the Parquet thread (sink._ParquetThread) creates the file: wait until it exists
    deadline = time.monotonic() + 30
    while not list(tmp_path.rglob(".part-0.parquet.inprogress")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.rglob(".part-0.parquet.inprogress"))
    assert not list(tmp_path.rglob("part-0.parquet"))
    assert ds.dataset(tmp_path / "flows", partitioning="hive").to_table().num_rows == 0
    w.close()
    assert ds.dataset(tmp_path / "flows", partitioning="hive").to_table().num_rows == 25


def test_files_roll_over_every_file_row_groups(tmp_path) -> None:
    """A file holds at most ``file_row_groups`` row groups (a Parquet writer keeps every
    row group's metadata until its footer): the next go to ``part-0-1.parquet`` and so
    on, read back in order; a rerun with fewer rows leaves none of the earlier files."""
    w = _writer(tmp_path, rows_per_batch=10, file_row_groups=3)
    w.write_rows(FLOWS, [flow_row(i) for i in range(95)])  # 10 row groups: 3 + 3 + 3 + 1
    w.write_rows(ANOMALIES, [anomaly_row(1)])
    assert w.close() == {"anomalies": 1, "flows": 95}
    pdir = partition_dir(tmp_path, "flows", CAPTURE_ID)
    assert part_files(pdir) == [pdir / n for n in (
        "part-0.parquet", "part-0-1.parquet", "part-0-2.parquet", "part-0-3.parquet")]
    assert [pq.read_metadata(f).num_row_groups for f in part_files(pdir)] == [3, 3, 3, 1]
    ids = [i for f in part_files(pdir) for i in pq.read_table(f).column("flow_id").to_pylist()]
    assert ids == [flow_row(i)["flow_id"] for i in range(95)]
    assert open_dataset(tmp_path, FLOWS).count_rows() == 95
    assert not list(tmp_path.rglob(".*inprogress"))
    with _writer(tmp_path, rows_per_batch=10, file_row_groups=3, overwrite=True) as w:
        w.write_rows(FLOWS, [flow_row(i) for i in range(35)])  # 4 row groups: 3 + 1
    assert [f.name for f in part_files(pdir)] == ["part-0.parquet", "part-0-1.parquet"]
    assert open_dataset(tmp_path, FLOWS).count_rows() == 35


def test_rolled_files_of_a_coordinated_writer_wait_for_their_commit(tmp_path) -> None:
    """A coordinated writer (``--workers``, Spark) leaves every file it rolled over to
    under its in-progress name for the coordinator; ``abort`` deletes them all."""
    w = _writer(tmp_path, rows_per_batch=10, file_row_groups=2, part=3, coordinated=True)
    w.write_rows(FLOWS, [flow_row(i) for i in range(45)])  # 5 row groups: 2 + 2 + 1
    w.close()
    pdir = partition_dir(tmp_path, "flows", CAPTURE_ID)
    assert [(Path(a).name, Path(b).name) for a, b in w.pending_files()] == [
        (f".{n}.inprogress", n) for n in ("part-3.parquet", "part-3-1.parquet",
                                          "part-3-2.parquet")]
    assert part_files(pdir) == []
    commit_files(w.pending_files())
    assert [f.name for f in part_files(pdir)] == [
        "part-3.parquet", "part-3-1.parquet", "part-3-2.parquet"]
    w = _writer(tmp_path, rows_per_batch=10, file_row_groups=2, part=4, coordinated=True)
    w.write_rows(FLOWS, [flow_row(i) for i in range(45)])
    w._join_thread()  # (the row groups on disk, as a run that then fails)
    w.abort()
    assert not list(tmp_path.rglob(".part-4*"))


def test_a_coordinated_writer_leaves_the_shared_directories_to_its_coordinator(
        tmp_path) -> None:
    """Workers share a table's partition directory: one aborting must not remove it
    while empty, as another may have just made it to open its file there (the race a
    given-up light run of ``--workers 2`` met); the coordinator removes it afterwards."""
    w = _writer(tmp_path, rows_per_batch=10, part=1, coordinated=True)
    w.write_rows(FLOWS, [flow_row(i) for i in range(25)])
    w._join_thread()
    pdir = partition_dir(tmp_path, "flows", CAPTURE_ID)
    assert list(pdir.glob(".part-1*"))
    w.abort()
    assert pdir.is_dir() and not list(pdir.iterdir())  # its file gone, the directory kept
    other = _writer(tmp_path, rows_per_batch=10, part=0, coordinated=True, overwrite=True)
    other.write_rows(FLOWS, [flow_row(i) for i in range(25)])
    other.close()  # (opens its file in the directory the first one left)
    commit_files(other.pending_files())
    assert [f.name for f in part_files(pdir)] == ["part-0.parquet"]
    remove_in_progress(tmp_path, CAPTURE_ID)  # the coordinator: only empty ones go
    assert pdir.is_dir()
    w = _writer(tmp_path, rows_per_batch=10, part=2, coordinated=True, overwrite=True)
    w.write_rows(ANOMALIES, [anomaly_row(i) for i in range(25)])
    w._join_thread()
    w.abort()
    apdir = partition_dir(tmp_path, "anomalies", CAPTURE_ID)
    assert apdir.is_dir()
    remove_in_progress(tmp_path, CAPTURE_ID)
    assert not apdir.exists()


def test_existing_capture_needs_overwrite_and_is_replaced_on_close(tmp_path) -> None:
    with _writer(tmp_path) as w:
        w.write_rows(FLOWS, [flow_row(i) for i in range(5)])
        w.write_rows(ANOMALIES, [anomaly_row(1)])
    with pytest.raises(FileExistsError, match="add --overwrite to replace it"):
        _writer(tmp_path)
    w = _writer(tmp_path, overwrite=True)
    w.write_rows(FLOWS, [flow_row(i) for i in range(3)])
    # the old partitions stay readable until the new run is complete
    assert open_dataset(tmp_path, ANOMALIES).count_rows() == 1
    w.close()
    assert open_dataset(tmp_path, FLOWS).count_rows() == 3
    assert not partition_dir(tmp_path, "anomalies", CAPTURE_ID).exists()


def test_exception_in_context_keeps_what_was_written(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="boom"), _writer(tmp_path, rows_per_batch=8) as w:
        w.write_rows(FLOWS, [flow_row(i) for i in range(12)])
        raise RuntimeError("boom")
    assert open_dataset(tmp_path, FLOWS).count_rows() == 12


def test_rejects_unsafe_capture_id_and_bad_sha(tmp_path) -> None:
    with pytest.raises(ValueError, match="safe directory name"):
        DatasetWriter(tmp_path, "../x", SHA, "0.1.0", {})
    with pytest.raises(ValueError, match="64 lowercase hex"):
        DatasetWriter(tmp_path, CAPTURE_ID, "abc", "0.1.0", {})


def test_million_rows_are_written_in_bounded_batches(tmp_path) -> None:
    """1M rows: write_rows flushes whenever rows_per_batch rows are buffered, so the
    writer never holds more than a few batches (plus the caller's chunk)."""
    n, per_batch, chunk = 1_000_000, 65536, 10_000
    template = anomaly_row(1)
    w = DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0.1.0", {}, rows_per_batch=per_batch)
    baseline = pa.total_allocated_bytes()
    peak_buffered = peak_arrow = 0
    for start in range(0, n, chunk):
        w.write_rows(ANOMALIES, [{**template, "record_id": i} for i in range(start, start + chunk)])
        peak_buffered = max(peak_buffered, w.buffered_rows("anomalies"))
        peak_arrow = max(peak_arrow, pa.total_allocated_bytes() - baseline)
    assert peak_buffered < per_batch
    # one batch of 65536 anomaly rows is ~8 MB of Arrow memory; 1M rows would be ~120 MB.
    # Held at most: the batch being filled, its combined copy and the row group the
    # Parquet thread is still encoding (sink._ParquetThread)
    assert peak_arrow < 3 * 8 * 2**20
    # Python-side, at most one conversion chunk of row dicts is held
    assert len(w._tables["anomalies"].rows) < 4096
    assert w.close() == {"anomalies": n}
    md = pq.read_metadata(partition_dir(tmp_path, "anomalies", CAPTURE_ID) / "part-0.parquet")
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert sizes == [per_batch] * (n // per_batch) + [n % per_batch]
    ids = pq.read_table(
        partition_dir(tmp_path, "anomalies", CAPTURE_ID) / "part-0.parquet", columns=["record_id"]
    ).column(0)
    # all rows, in order (checked in Arrow: a 1M-element Python list would cost 40 MB)
    assert len(ids) == n and ids[0].as_py() == 0
    assert pc.all(pc.equal(pc.pairwise_diff(ids.combine_chunks()), 1)).as_py()


def test_wide_rows_are_written_by_the_byte_bound(tmp_path) -> None:
    """A row group is written once ``batch_bytes`` of Arrow data are pending, before
    ``rows_per_batch`` rows: wide tables stay within the same memory as narrow ones."""
    n = 20_000
    template = anomaly_row(1)
    w = DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0.1.0", {}, rows_per_batch=65536,
                      batch_bytes=256 * 1024)
    for start in range(0, n, 1000):
        w.write_rows(ANOMALIES, [{**template, "record_id": i} for i in range(start, start + 1000)])
        held = w._tables["anomalies"]
        assert held.batch_bytes < 256 * 1024 + 2 * 4096 * 200  # the bound plus one chunk
    assert w.close() == {"anomalies": n}
    md = pq.read_metadata(partition_dir(tmp_path, "anomalies", CAPTURE_ID) / "part-0.parquet")
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert sum(sizes) == n and len(sizes) > 2 and max(sizes) < 65536
    ids = pq.read_table(
        partition_dir(tmp_path, "anomalies", CAPTURE_ID) / "part-0.parquet", columns=["record_id"]
    ).column(0)
    assert ids.to_pylist() == list(range(n))


# -------------------------------------------------------------------------- manifest


def _sha(cid: str) -> str:
    return hashlib.sha256(cid.encode()).hexdigest()


def _input(cid: str, damage: list | None = None) -> InputInfo:
    return InputInfo(
        path=f"/captures/{cid}.pcapng",
        size=12345,
        sha256=_sha(cid),
        format="pcapng",
        link_types=["EN10MB"],
        packets=99,
        damage=damage or [],
    )


def _run(tmp_path: Path, cid: str, flows: int, anomalies: int, **kw) -> CaptureRun:
    w = DatasetWriter(tmp_path, cid, _sha(cid), "0.1.0", OPTIONS, rows_per_batch=16)
    w.write_rows(FLOWS, [flow_row(i, cid) for i in range(flows)])
    w.write_rows(ANOMALIES, [anomaly_row(i, cid) for i in range(anomalies)])
    w.close(ensure_tables=[FLOWS, ANOMALIES])
    return CaptureRun.from_writer(w, _input(cid, kw.pop("damage", None)), **kw)


def test_manifest_single_capture(tmp_path) -> None:
    cid = "aaaaaaaaaaaaaaaa"
    run = _run(tmp_path, cid, flows=9, anomalies=7)
    m = update_manifest(tmp_path, run, now="2026-01-02T03:04:05Z")
    assert read_manifest(tmp_path) == m
    assert m["status"] == "degraded" and m["exit_code"] == 1
    assert m["exit_codes"] == EXIT_CODES
    assert set(EXIT_CODES) == {"0", "1", "2"}
    assert m["created"] == m["updated"] == "2026-01-02T03:04:05Z"
    assert m["tool_version"] == "0.1.0"
    assert m["options"] == OPTIONS
    assert m["rows"] == {"anomalies": 7, "flows": 9}
    assert m["tables"] == {
        "anomalies": {"rows": 7, "versions": [2]},
        "flows": {"rows": 9, "versions": [2]},
    }
    kinds = [anomaly_row(i)["kind"] for i in range(7)]
    assert m["anomalies_by_kind"] == {k: kinds.count(k) for k in sorted(set(kinds))}
    assert m["flows_by_protocol"] == {UNCLAIMED: 3, "nats": 3, "pulsar": 3}
    (entry,) = m["inputs"]
    assert entry["capture_id"] == cid
    assert entry["input"] == {
        "path": f"/captures/{cid}.pcapng",
        "size": 12345,
        "sha256": _sha(cid),
        "format": "pcapng",
        "link_types": ["EN10MB"],
        "packets": 99,
        "damage": [],
    }
    assert entry["error"] is None
    text = (tmp_path / "manifest.json").read_text()
    assert text == json.dumps(m, indent=2, sort_keys=True) + "\n"  # deterministic order


def test_manifest_status_clean_and_failed(tmp_path) -> None:
    clean = update_manifest(tmp_path, _run(tmp_path, "c1", 2, 0), now="t1")
    assert (clean["status"], clean["exit_code"]) == ("clean", 0)
    damaged = update_manifest(tmp_path / "d", _run(tmp_path / "d", "c2", 2, 0, damage=["cut"]))
    assert damaged["status"] == "degraded"
    failed = update_manifest(tmp_path / "f", _run(tmp_path / "f", "c3", 1, 0, error="boom"))
    assert (failed["status"], failed["exit_code"]) == ("failed", 2)
    assert failed["inputs"][0]["error"] == "boom"
    assert [s.exit_code for s in RunStatus] == [0, 1, 2]


def test_manifest_merges_captures_and_replaces_reruns(tmp_path) -> None:
    update_manifest(tmp_path, _run(tmp_path, "bbbbbbbbbbbbbbbb", 4, 0), now="t1")
    m = update_manifest(tmp_path, _run(tmp_path, "aaaaaaaaaaaaaaaa", 3, 2), now="t2")
    assert [i["capture_id"] for i in m["inputs"]] == ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]
    assert (m["created"], m["updated"]) == ("t1", "t2")
    assert m["rows"] == {"anomalies": 2, "flows": 7}
    assert m["status"] == "degraded"  # worst of clean + degraded
    assert [i["status"] for i in m["inputs"]] == ["degraded", "clean"]
    assert m["flows_by_protocol"] == {UNCLAIMED: 3, "nats": 2, "pulsar": 2}
    # both partitions are in the dataset
    assert open_dataset(tmp_path, FLOWS).count_rows() == 7
    # re-running a capture replaces its entry; totals are recomputed, not accumulated
    w = DatasetWriter(tmp_path, "aaaaaaaaaaaaaaaa", "a" * 64, "0.2.0", {"x": 1}, overwrite=True)
    w.write_rows(FLOWS, [flow_row(0, "aaaaaaaaaaaaaaaa")])
    w.close(ensure_tables=[ANOMALIES])
    m2 = update_manifest(tmp_path, CaptureRun.from_writer(w, _input("aaaaaaaaaaaaaaaa")), now="t3")
    assert m2["rows"] == {"anomalies": 0, "flows": 5}
    assert m2["status"] == "clean"
    assert m2["options"] is None  # the two captures used different options
    assert m2["inputs"][0]["options"] == {"x": 1}
    assert m2["tool_version"] == "0.2.0"
    assert open_dataset(tmp_path, FLOWS).count_rows() == 5


def test_manifest_requires_a_closed_writer(tmp_path) -> None:
    w = _writer(tmp_path)
    with pytest.raises(RuntimeError, match="close the DatasetWriter"):
        CaptureRun.from_writer(w, _input("x"))


def test_ordered_envelope_columns_delta_encoded_the_rest_dictionary(tmp_path) -> None:
    """``Field.encoding`` (the envelope's record ids, offsets, frames and times) is what
    the file uses; every other column keeps the dictionary, nested leaves included (a
    list of dictionary columns must name them); the rows read back unchanged."""
    spec = TableSpec("enc_demo", 1, "Encoding demo.", (
        Field("subject", pa.string(), "A subject."),
        Field("headers", pa.map_(pa.string(), pa.list_(pa.string())), "Headers."),
    ))
    rows = [{"capture_id": CAPTURE_ID, "flow_id": i % 3, "record_id": i, "direction": "c2s",
             "ts_first": 1_700_000_000_000_000_000 + 1000 * i, "offset_start": 10 * i,
             "frame_first": i + 1, "subject": f"s.{i % 4}", "headers": [("k", ["v"])]}
            for i in range(300)]
    with _writer(tmp_path) as w:
        w.write_rows(spec, rows)
    part = partition_dir(tmp_path, "enc_demo", CAPTURE_ID) / "part-0.parquet"
    rg = pq.read_metadata(part).row_group(0)
    encodings = {rg.column(j).path_in_schema: rg.column(j).encodings
                 for j in range(rg.num_columns)}
    delta = {f.name for f in spec.columns if f.encoding == DELTA}
    assert delta >= {"record_id", "ts_first", "ts_first_ns", "offset_start", "frame_first"}
    for path, enc in encodings.items():
        if path in delta:
            assert "DELTA_BINARY_PACKED" in enc, path
        elif spec.column(path.split(".")[0]).type != pa.bool_():
            assert "RLE_DICTIONARY" in enc, path
    got = pq.read_table(part, partitioning=None)
    assert got.equals(pa.Table.from_batches([rows_to_batch(spec, rows)]))


def test_payloads_repeated_across_a_row_group_are_stored_once(tmp_path) -> None:
    """A row group's dictionary holds all its distinct values (``parquet_options``'s
    ``dictionary_pagesize_limit``): 3 MiB of incompressible payloads sent twice, 1 MiB
    apart or more, take ~3 MiB in the file.  With Arrow's 1 MiB dictionary pages the
    column went on in plain encoding past the first MiB and stored the repeats again
    (zstd at level 1 looks back far less than that)."""
    spec = TableSpec("dict_demo", 1, "Dictionary demo.", (
        Field("payload", pa.binary(), "A payload."),
    ))
    rnd = random.Random(7)
    distinct = [rnd.randbytes(4096) for _ in range(768)]  # 3 MiB
    rows = [{"capture_id": CAPTURE_ID, "flow_id": 1, "record_id": i, "direction": "c2s",
             "ts_first": 1_700_000_000_000_000_000 + i, "offset_start": 4096 * i,
             "frame_first": i + 1, "payload": distinct[i % len(distinct)]}
            for i in range(2 * len(distinct))]
    with _writer(tmp_path, rows_per_batch=65536) as w:
        w.write_rows(spec, rows)
    part = partition_dir(tmp_path, "dict_demo", CAPTURE_ID) / "part-0.parquet"
    md = pq.read_metadata(part)
    assert md.num_row_groups == 1
    rg = md.row_group(0)
    payload = next(rg.column(j) for j in range(rg.num_columns)
                   if rg.column(j).path_in_schema == "payload")
    assert payload.total_compressed_size < 1.2 * 3 * 2**20
    assert pq.read_table(part, columns=["payload"]).column(0).to_pylist() == [
        r["payload"] for r in rows]


def test_leaf_paths_are_the_footers_of_every_table() -> None:
    """``_leaf_paths`` names each Parquet leaf from the Arrow schema; pyarrow's writer is
    the definition: the paths in the footer of an empty file of every table's schema
    (a pyarrow that named nested leaves otherwise would make the dictionary settings miss
    them silently)."""
    from analyzer.pipeline import tables_for
    from analyzer.sink import _leaf_paths
    from dissectors.registry import discover

    nested = 0
    for spec in tables_for(discover()):
        buf = pa.BufferOutputStream()
        pq.write_table(arrow_schema(spec).empty_table(), buf)
        footer = pq.ParquetFile(pa.BufferReader(buf.getvalue())).schema
        assert _leaf_paths(spec) == tuple(footer.column(i).path for i in range(len(footer)))
        nested += sum("." in p for p in _leaf_paths(spec))
    assert nested > 10  # lists, maps and a list of structs are among them


def test_empty_files_are_the_same_bytes_without_the_column_options(tmp_path) -> None:
    """``DatasetWriter`` writes a table that got no row without ``parquet_options`` (they
    only shape column chunks): the file is byte for byte the one the options would give,
    for every table, the flows table's delta-encoded columns included."""
    from analyzer.pipeline import tables_for
    from analyzer.sink import parquet_options
    from dissectors.registry import discover

    specs = tables_for(discover())
    w = _writer(tmp_path)
    w.close(ensure_tables=specs)
    for spec in specs:
        written = partition_dir(tmp_path, spec.name, CAPTURE_ID) / "part-0.parquet"
        buf = pa.BufferOutputStream()  # the file's schema: declaration + run metadata
        pq.ParquetWriter(buf, w._tables[spec.name].schema, **parquet_options(spec)).close()
        assert written.read_bytes() == buf.getvalue().to_pybytes(), spec.name
    assert any("column_encoding" in parquet_options(s) for s in specs)

"""``analyzer.spark.storage`` against a local S3-API server (moto), without Spark: byte
ranges of a capture read through S3 are the local file's frames, the commit on S3 (copy +
delete) makes one attempt visible and removes the others, and the CLI refuses a missing
object or an unusable filesystem with ``error:``/``fix:`` before Spark starts."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from analyzer.cli import main
from analyzer.pipeline import Options
from analyzer.sink import CaptureExistsError
from analyzer.spark.ingest import _AttemptWriter, _resolve_out
from analyzer.spark.split import (
    iter_range_frames,
    plan_ranges,
    probe_layout,
    scan_range,
    verify_chain,
)
from analyzer.spark.storage import Store, local_copy, sha256
from dissectors.core_tables import FLOWS
from tests.analyzer.conftest import CAPTURE_ID, SHA, flow_row
from tests.spark.conftest import S3

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.fixture
def s3env(s3: S3, monkeypatch) -> S3:
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3


def _fs(s3: S3) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=s3.endpoint, access_key="testing",
                             secret_key="testing", region="us-east-1")


def _frames(location: str, size: int, split: int) -> list[tuple]:
    layout = probe_layout(location, size)
    ranges = plan_ranges(layout, split)
    scans = [scan_range(layout, i, *r) for i, r in enumerate(ranges)]
    plans, why = verify_chain(layout, scans, lambda i, a, b, f: scan_range(layout, i, a, b, f))
    assert why is None
    return [(f.number, f.ts_ns, bytes(f.data)) for p in plans
            for f in iter_range_frames(layout, p)]


def test_byte_ranges_read_through_s3_are_the_local_frames(s3env: S3) -> None:
    cap = SAMPLES / "nats-basic.pcap"
    pafs.copy_files(str(cap), f"{s3env.bucket}/t1/{cap.name}",
                    destination_filesystem=_fs(s3env))
    uri = f"s3://{s3env.bucket}/t1/{cap.name}"
    size = cap.stat().st_size
    local = _frames(str(cap), size, size // 3)
    assert _frames(uri, size, size // 3) == local and len(local) > 100
    with local_copy(uri) as (path, digest):
        assert Path(path).read_bytes() == cap.read_bytes()
        assert digest == sha256(str(cap)) == sha256(uri)
    assert not Path(path).exists()  # the scratch copy is removed


def _attempt(scratch: Path, store: Store, tag: str, rows: int, part: int = 0
             ) -> list[tuple[str, str]]:
    w = _AttemptWriter(str(scratch), CAPTURE_ID, SHA, Options(), part, tag)
    w.write_rows(FLOWS, [flow_row(i) for i in range(rows)])
    w.close()
    return store.upload_pending(scratch, w.pending_files())


def test_commit_on_s3_is_copy_and_delete_of_one_attempt(s3env: S3, tmp_path: Path) -> None:
    store = _resolve_out(f"s3://{s3env.bucket}/t2/ds")
    assert isinstance(store, Store)
    won = _attempt(tmp_path / "a", store, "job1-t7", 5)
    _attempt(tmp_path / "b", store, "job1-t8", 3)  # a speculative copy of the same task
    _attempt(tmp_path / "c", store, "job2-t1", 2, part=1)  # another job's: not ours
    rel = sorted(store.rel(f) for f in store.files())
    part = f"flows/capture={CAPTURE_ID}"
    assert rel == [f"{part}/.part-0.parquet.job1-t7.inprogress",
                   f"{part}/.part-0.parquet.job1-t8.inprogress",
                   f"{part}/.part-1.parquet.job2-t1.inprogress"]
    store.commit(CAPTURE_ID, won, overwrite=False)
    store.remove_matching(re.compile(
        r"[^/]+/capture=[^/]+/\.part-\d+\.parquet\.job1-t\d+\.inprogress"))
    assert sorted(store.rel(f) for f in store.files()) == [
        f"{part}/.part-1.parquet.job2-t1.inprogress", f"{part}/part-0.parquet"]
    assert store.open_parquet(store.path(f"{part}/part-0.parquet")).metadata.num_rows == 5
    # a second run of the capture: refused, or replacing the earlier part with --overwrite
    again = _attempt(tmp_path / "d", store, "job3-t1", 6, part=3)
    with pytest.raises(CaptureExistsError):
        store.commit(CAPTURE_ID, again, overwrite=False)
    store.commit(CAPTURE_ID, again, overwrite=True)
    assert [store.rel(f) for f in store.capture_parts(CAPTURE_ID)] == [f"{part}/part-3.parquet"]
    with _fs(s3env).open_input_file(store.path(f"{part}/part-3.parquet")) as f:
        assert pq.read_table(f).num_rows == 6


def test_cli_refuses_missing_objects_and_unusable_filesystems(s3env: S3, capsys) -> None:
    missing = f"s3://{s3env.bucket}/nothing/here.pcap"
    assert main(["spark", "ingest", missing, "-o", "/tmp/never-written"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: {missing} is not a file there"
    assert err[1].startswith("fix: check the bucket and key")
    assert main(["spark", "ingest", str(SAMPLES / "nats-basic.pcap"), "-o",
                 "nosuchfs://host/ds"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: cannot open nosuchfs://host/ds: ")
    assert err[1].startswith("fix: give a local or shared path, or a URI")

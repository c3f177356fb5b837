"""The commit of ``spark ingest`` without Spark: attempts write under their own hidden
names, the driver's commit makes one attempt's files visible by renaming them, and what
other attempts (failed, retried, speculative) left is removed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options
from analyzer.spark.ingest import _AttemptWriter, _commit, _remove_attempts
from dissectors.core_tables import FLOWS
from tests.analyzer.conftest import CAPTURE_ID, SHA, flow_row


def _attempt(out: Path, tag: str, rows: int, part: int = 0) -> list[tuple[str, str]]:
    w = _AttemptWriter(str(out), CAPTURE_ID, SHA, Options(), part, tag)
    w.write_rows(FLOWS, [flow_row(i) for i in range(rows)])
    w.close()
    return w.pending_files()


def test_only_the_committed_attempt_is_visible(tmp_path: Path) -> None:
    part_dir = tmp_path / "flows" / f"capture={CAPTURE_ID}"
    won = _attempt(tmp_path, "job1-t7", 5)
    lost = _attempt(tmp_path, "job1-t8", 3)  # a speculative copy of the same task
    other = _attempt(tmp_path, "job2-t1", 2, part=1)  # another job's attempt: not ours
    names = sorted(p.name for p in part_dir.iterdir())
    assert names == [".part-0.parquet.job1-t7.inprogress", ".part-0.parquet.job1-t8.inprogress",
                     ".part-1.parquet.job2-t1.inprogress"]
    assert [Path(t).name for t, _ in won] == [".part-0.parquet.job1-t7.inprogress"]
    assert lost and other
    # before the commit no reader sees a row
    assert not list(part_dir.glob("part-*.parquet"))

    _commit(tmp_path, CAPTURE_ID, won, overwrite=False)
    _remove_attempts(tmp_path, "job1")
    assert sorted(p.name for p in part_dir.iterdir()) == [
        ".part-1.parquet.job2-t1.inprogress", "part-0.parquet"]
    assert pq.read_table(part_dir / "part-0.parquet").num_rows == 5


def test_commit_refuses_a_capture_already_there_unless_overwrite(tmp_path: Path) -> None:
    _commit(tmp_path, CAPTURE_ID, _attempt(tmp_path, "a-t1", 4), overwrite=False)
    again = _attempt(tmp_path, "b-t1", 6, part=3)
    with pytest.raises(FileExistsError):
        _commit(tmp_path, CAPTURE_ID, again, overwrite=False)
    _commit(tmp_path, CAPTURE_ID, again, overwrite=True)  # replaces the earlier part
    part_dir = tmp_path / "flows" / f"capture={CAPTURE_ID}"
    assert sorted(p.name for p in part_dir.glob("part-*.parquet")) == ["part-3.parquet"]
    assert pq.read_table(part_dir / "part-3.parquet").num_rows == 6


def test_an_attempt_rolls_its_files_over_under_its_own_names(tmp_path: Path,
                                                             monkeypatch) -> None:
    """An attempt's writer starts a table's next file every ``file_row_groups`` row
    groups, each under the attempt's hidden name; the commit makes all of them visible
    and the removal of another attempt's leaves none of its rolled files."""
    init = _AttemptWriter.__init__

    def small(self, *args, **kw) -> None:  # noqa: ANN001
        init(self, *args, **kw)
        self.rows_per_batch, self.file_row_groups = 4, 2

    monkeypatch.setattr(_AttemptWriter, "__init__", small)
    part_dir = tmp_path / "flows" / f"capture={CAPTURE_ID}"
    won = _attempt(tmp_path, "job1-t7", 20)  # 5 row groups: 2 + 2 + 1
    lost = _attempt(tmp_path, "job1-t8", 20)
    assert [(Path(t).name, Path(f).name) for t, f in won] == [
        (f".{n}.job1-t7.inprogress", n)
        for n in ("part-0.parquet", "part-0-1.parquet", "part-0-2.parquet")]
    assert len(lost) == 3
    _commit(tmp_path, CAPTURE_ID, won, overwrite=False)
    _remove_attempts(tmp_path, "job1")
    assert sorted(p.name for p in part_dir.iterdir()) == [
        "part-0-1.parquet", "part-0-2.parquet", "part-0.parquet"]
    assert sum(pq.read_metadata(p).num_rows for p in part_dir.iterdir()) == 20

"""The DuckDB views of a dataset's tables (``analyzer.analyses.duck.connect``): DuckDB's
own Parquet reader for files with exactly the declared columns, a ``pyarrow.dataset``
(which fills in what a file lacks) for anything else, and the same rows either way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.analyses import duck
from tests.analyses.datasets import dissect_into


@pytest.fixture(scope="module")
def nats_js(tmp_path_factory) -> Path:
    return dissect_into(tmp_path_factory.mktemp("js") / "ds", ["nats-js"])


def _view_sql(con, name: str) -> str:
    got = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [name])
    return got.fetchall()[0][0]


def _sorted(table) -> list[tuple]:
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))


def test_files_of_this_version_are_read_by_duckdb(nats_js: Path) -> None:
    con = duck.connect(nats_js)
    assert "read_parquet" in _view_sql(con, "nats")
    n = pq.read_table(nats_js / "nats").num_rows
    got = con.execute('SELECT count(*), count(DISTINCT capture) FROM "nats"').fetchall()
    assert got == [(n, 1)]


def test_a_file_lacking_a_column_reads_it_as_null_with_the_same_results(
        nats_js: Path, tmp_path: Path) -> None:
    """A dataset of an older version (here: nats files without ``js_pending``) goes
    through ``open_dataset``; the analyses give the same rows."""
    old = tmp_path / "old"
    shutil.copytree(nats_js, old)
    for f in (old / "nats").glob("*/*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["js_pending"]), f)
    new_con, old_con = duck.connect(nats_js), duck.connect(old)
    assert "read_parquet" not in _view_sql(old_con, "nats")
    n = pq.read_table(nats_js / "nats").num_rows
    assert old_con.execute('SELECT count(*), count(js_pending) FROM "nats"').fetchall() == [(n, 0)]
    wanted = ["nats_request_reply", "deliveries", "publish_ack_latency"]
    got_new = duck.run(None, wanted, con=new_con)
    got_old = duck.run(None, wanted, con=old_con)
    assert got_new["publish_ack_latency"].num_rows > 0  # the JetStream PubAcks
    for name in wanted:
        assert _sorted(got_new[name]) == _sorted(got_old[name]), name

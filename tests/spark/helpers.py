"""Comparing two msgcap datasets table by table, row by row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dissectors.tables import PARTITION_KEY


def read_tables(out: str | Path) -> dict:
    tables = {}
    for d in sorted(Path(out).iterdir()):
        if d.is_dir() and not d.name.startswith("."):
            # file by file: the part count differs between runs (one per Spark task),
            # and a directory read would add the partition column
            files = sorted(d.glob(f"{PARTITION_KEY}=*/*.parquet"))
            t = pa.concat_tables([pq.read_table(f) for f in files])
            key = "record_id" if "record_id" in t.column_names else "flow_id"
            tables[d.name] = t.sort_by(key)
    return tables


def assert_same_dataset(expected: str | Path, got: str | Path) -> dict:
    """Every table equal (all columns, rows sorted by record id / flow id) and the
    manifest entries equal but for the processing time; returns rows per table."""
    a, b = read_tables(expected), read_tables(got)
    assert sorted(a) == sorted(b)
    for name in a:
        ta, tb = a[name], b[name]
        assert ta.schema.equals(tb.schema), name
        if not ta.equals(tb):
            ra, rb = ta.to_pylist(), tb.to_pylist()
            assert len(ra) == len(rb), (name, len(ra), len(rb))
            for x, y in zip(ra, rb, strict=True):
                diff = {k: (x[k], y[k]) for k in x if x[k] != y[k]}
                assert not diff, (name, x.get("record_id", x.get("flow_id")), diff)
    ma = json.loads((Path(expected) / "manifest.json").read_text())
    mb = json.loads((Path(got) / "manifest.json").read_text())
    ia = {i["capture_id"]: i for i in ma["inputs"]}
    ib = {i["capture_id"]: i for i in mb["inputs"]}
    assert sorted(ia) == sorted(ib)
    for cid in ia:
        x, y = dict(ia[cid]), dict(ib[cid])
        for e in (x, y):
            e.pop("processed")
        assert x == y, cid
    for key in ("rows", "anomalies_by_kind", "flows_by_protocol", "status"):
        assert ma[key] == mb[key], key
    return {name: t.num_rows for name, t in a.items()}

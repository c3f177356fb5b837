"""Spark (local mode) reads the Parquet dataset the sink writes, with the declared schema."""

from __future__ import annotations

import hashlib

import pytest

from analyzer.sink import DatasetWriter, read_spark_table
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.schema import spark_schema
from tests.analyzer.conftest import CAPTURE_ID, SHA, T0, anomaly_row, flow_row
from tests.analyzer.test_schema import ALL_TYPES, _all_types_row

pytestmark = pytest.mark.spark


def _relaxed(dt):
    """``dt`` with every nullability flag set, which is how Spark reports Parquet columns."""
    from pyspark.sql import types as T

    if isinstance(dt, T.StructType):
        return T.StructType(
            [T.StructField(f.name, _relaxed(f.dataType), True, f.metadata) for f in dt.fields]
        )
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_relaxed(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(_relaxed(dt.keyType), _relaxed(dt.valueType), True)
    return dt


def _expected_schema(spec, extra=()):
    from pyspark.sql import types as T

    fields = list(spark_schema(spec).fields) + [T.StructField("capture", T.StringType(), True)]
    fields += [T.StructField(name, dt, True) for name, dt in extra]
    return _relaxed(T.StructType(fields))


def _ts_as_micros(df, spec):
    """Select timestamps as epoch microseconds so values compare without time zones."""
    from pyspark.sql import functions as F

    ts = {f.name for f in spec.columns if str(f.type).startswith("timestamp")}
    return df.select(
        *[F.unix_micros(F.col(c)).alias(c) if c in ts else F.col(c) for c in df.columns]
    )


def test_spark_reads_flows_with_the_declared_schema(spark, tmp_path) -> None:
    rows = [flow_row(i) for i in range(200)]
    with DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0.1.0", {}, rows_per_batch=64) as w:
        w.write_rows(FLOWS, rows)

    df = read_spark_table(spark, tmp_path, FLOWS)
    # names, order, types and comments as declared (+ capture); Spark relaxes nullability
    assert df.schema == _expected_schema(FLOWS)
    assert df.schema["ts_first"].metadata == {"comment": FLOWS.column("ts_first").description}
    assert df.count() == 200

    got = [r.asDict() for r in _ts_as_micros(df, FLOWS).orderBy("flow_id").collect()]
    for r, want in zip(got, rows, strict=True):
        assert r.pop("capture") == CAPTURE_ID
        expect = {f.name: want.get(f.name) for f in FLOWS.columns}  # unset columns: null
        for c in ("ts_first", "ts_last"):
            expect[c] = want[c] // 1000  # Spark keeps microseconds
            expect[f"{c}_ns"] = want[c]  # and the exact nanoseconds beside them
        assert r == expect


def test_plain_spark_read_parquet_gives_timestamps_and_exact_nanoseconds(spark, tmp_path) -> None:
    """Table version 2: no msgcap helper and no Spark setting needed."""
    from pyspark.sql import types as T

    rows = [anomaly_row(i) for i in range(40)]
    with DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0.1.0", {}) as w:
        w.write_rows(ANOMALIES, rows)
    df = spark.read.parquet(str(tmp_path / "anomalies"))
    assert df.schema["ts"].dataType == T.TimestampType()
    assert df.schema["ts_ns"].dataType == T.LongType()
    got = _ts_as_micros(df, ANOMALIES).orderBy("record_id").collect()
    assert [r["ts_ns"] for r in got] == [r.get("ts") for r in rows]
    micros = [None if r.get("ts") is None else r["ts"] // 1000 for r in rows]
    assert [r["ts"] for r in got] == micros
    assert [r["flow_id"] for r in got] == [r.get("flow_id") for r in rows]
    assert got[0]["ts_ns"] is None and got[1]["ts_ns"] == T0 + 1
    assert read_spark_table(spark, tmp_path, ANOMALIES).schema == _expected_schema(ANOMALIES)


def test_spark_reads_every_type(spark, tmp_path) -> None:
    rows = [_all_types_row(i) for i in range(30)] + [{"s": "nulls", "i64": -1}]
    with DatasetWriter(tmp_path, CAPTURE_ID, SHA, "0.1.0", {}, rows_per_batch=8) as w:
        w.write_rows(ALL_TYPES, rows)
    df = read_spark_table(spark, tmp_path, ALL_TYPES)
    assert df.schema == _expected_schema(ALL_TYPES)
    got = {r["s"]: r.asDict() for r in _ts_as_micros(df, ALL_TYPES).collect()}
    assert len(got) == 31
    for want in rows[:30]:
        r = got[want["s"]]
        assert r["i32"] == want["i32"] and r["i64"] == want["i64"]
        assert r["flag"] is want["flag"]
        assert bytes(r["blob"]) == want["blob"]
        assert r["f64"] == want["f64"]
        assert r["ts"] == want["ts"] // 1000
        assert r["ts_ns"] == want["ts"]
        assert r["ints"] == want["ints"]
        assert r["hdrs"] == dict(want["hdrs"])
    assert got["nulls"] == {
        "s": "nulls", "i32": None, "i64": -1, "flag": None, "blob": None, "f64": None,
        "ts": None, "ts_ns": None, "ints": None, "hdrs": None, "capture": CAPTURE_ID,
    }  # fmt: skip


def test_spark_reads_several_captures_and_empty_tables(spark, tmp_path) -> None:
    from pyspark.sql import functions as F

    ids = ["00000000000000aa", "1234567890123456"]  # the second would infer as a number
    for n, cid in enumerate(ids):
        sha = hashlib.sha256(cid.encode()).hexdigest()
        with DatasetWriter(tmp_path, cid, sha, "0.1.0", {}) as w:
            w.write_rows(FLOWS, [flow_row(i, cid) for i in range(n * 10, n * 10 + 5 + n)])
            w.close(ensure_tables=[ANOMALIES])
    flows = read_spark_table(spark, tmp_path, FLOWS)
    per_capture = {r["capture"]: r["count"] for r in flows.groupBy("capture").count().collect()}
    assert per_capture == {ids[0]: 5, ids[1]: 6}
    # the partition column and the in-file column agree and do not clash
    assert flows.filter(F.col("capture") != F.col("capture_id")).count() == 0
    anomalies = read_spark_table(spark, tmp_path, ANOMALIES)
    assert anomalies.count() == 0
    assert anomalies.schema == _expected_schema(ANOMALIES)

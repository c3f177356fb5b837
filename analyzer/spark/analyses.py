"""The analyses (``analyzer.analyses``, one SQL definition each) run on Spark.

Strategy: the dataset's tables are read once with their declared schemas
(``analyzer.sink.read_spark_table``; a declared table the dataset lacks is an empty
DataFrame of that schema) and registered as temporary views under their table names;
each analysis's SQL is then run with ``spark.sql`` and its result registered as a view
of its own name, so a later definition reads an earlier result exactly as it does on
DuckDB (``analyzer.analyses.duck``).  There is no Spark-only definition here:
tests/analyses/test_engines.py checks both engines give the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.analyses import ANALYSES as _ORDER
from analyzer.analyses import render, run_order

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ANALYSES", "SHIMS", "Tables", "load", "run", "run_all"]

ANALYSES: tuple[str, ...] = _ORDER

SHIMS: tuple[str, ...] = (
    # binary as UTF-8 text (DuckDB: ``try(decode(b))``, see ``duck.SPARK_SHIMS``)
    "CREATE OR REPLACE TEMPORARY FUNCTION payload_text(b BINARY) RETURNS STRING "
    "RETURN try_validate_utf8(cast(b AS STRING))",
)


@dataclass
class Tables:
    """The dataset's tables as DataFrames (absent tables are missing from ``dfs``)."""

    spark: SparkSession
    dataset: str
    dfs: dict[str, DataFrame] = field(default_factory=dict)

    def get(self, name: str) -> DataFrame | None:
        return self.dfs.get(name)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _exists(spark: SparkSession, path: str) -> bool:
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(hpath))


def load(spark: SparkSession, dataset: str) -> Tables:
    """Read every table of ``dataset`` that exists (declared by the installed dissectors)."""
    from analyzer.analyses.duck import table_specs
    from analyzer.sink import read_spark_table

    dataset = str(dataset)
    tables = Tables(spark, dataset)
    for spec in table_specs():
        if _exists(spark, _join(dataset, spec.name)):
            try:
                tables.dfs[spec.name] = read_spark_table(spark, dataset, spec)
            except NotImplementedError:  # a nested type Spark cannot read
                continue
    return tables


def _register(t: Tables) -> None:
    """Every declared table as a temporary view (empty with its schema when absent)."""
    from pyspark.sql import types as T

    from analyzer.analyses.duck import table_specs
    from dissectors.schema import spark_schema
    from dissectors.tables import PARTITION_KEY

    for spec in table_specs():
        df = t.dfs.get(spec.name)
        if df is None:
            schema = spark_schema(spec)
            schema = T.StructType([*schema.fields,
                                   T.StructField(PARTITION_KEY, T.StringType(), True)])
            df = t.spark.createDataFrame([], schema)
        df.createOrReplaceTempView(spec.name)


def run(t: Tables, names: list[str] | None = None,
        params: dict[str, int] | None = None) -> dict[str, DataFrame]:
    """The analyses (all, or ``names`` and the earlier results they read) as DataFrames;
    each result run is also a temporary view of its name.  All but the last are cached
    (a later one may read them)."""
    _register(t)
    for stmt in SHIMS:
        t.spark.sql(stmt)
    wanted = set(names) if names else set(ANALYSES)
    order = run_order(wanted)  # with the earlier results they read
    out: dict[str, DataFrame] = {}
    for name in order:
        df = t.spark.sql(render(name, params))
        if name != order[-1]:
            df = df.cache()
        df.createOrReplaceTempView(name)
        if name in wanted:
            out[name] = df
    return out


def run_all(spark: SparkSession, dataset: str, out: str, *, names: list[str] | None = None,
            mode: str = "overwrite", params: dict[str, int] | None = None,
            echo: Callable[[str], Any] = print) -> dict[str, int]:
    """``msgcap spark analyze``: write each result to ``out/<name>/`` (Parquet); returns
    the row count of each."""
    results = run(load(spark, dataset), names, params)
    counts = {}
    for name, df in results.items():
        df.write.mode(mode).parquet(_join(str(out), name))
        counts[name] = spark.read.parquet(_join(str(out), name)).count()
        echo(f"{name}: {counts[name]} rows")
    spark.catalog.clearCache()  # the intermediate results ``run`` cached
    return counts

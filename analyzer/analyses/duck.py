"""Run the analyses (``analyzer.analyses``) on DuckDB, embedded: no Spark, no JVM.

Strategy: each table of the dataset is a DuckDB view with the table's *declared*
schema: over DuckDB's own ``read_parquet`` when every file has exactly the declared
columns (what this version writes: DuckDB streams them within its memory limit), else
over a ``pyarrow.dataset`` (``analyzer.sink.open_dataset``), so a column an older
dataset lacks reads as null; a table the dataset lacks is an empty view with the right
columns.  DuckDB scans the Parquet files lazily with filter and projection pushdown.
The SQL is written in Spark's names; the few functions DuckDB lacks are defined as
macros (``SPARK_SHIMS``) with Spark's meaning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.analyses import ANALYSES, render, run_order

if TYPE_CHECKING:  # pragma: no cover
    import duckdb
    import pyarrow as pa

__all__ = ["SPARK_SHIMS", "connect", "run", "run_to_dir", "table_specs"]

SPARK_SHIMS: tuple[str, ...] = (
    # Spark: the JSON path's value as a string, null for invalid JSON or a missing path
    "CREATE OR REPLACE MACRO get_json_object(s, p) AS "
    "CASE WHEN json_valid(s) THEN json_extract_string(s, p) END",
    # Spark: map value by key / array element by 1-based index, null when absent
    "CREATE OR REPLACE MACRO try_element_at(x, k) AS x[k]",
    # Spark: one row per list element (in a SELECT list; none for an empty or null list)
    "CREATE OR REPLACE MACRO explode(x) AS unnest(x)",
    # msgcap's own (both engines, see ``analyzer.spark.analyses.SHIMS``): binary as UTF-8
    # text (a DuckDB cast would escape quotes as \\x22); null if not UTF-8
    "CREATE OR REPLACE MACRO payload_text(b) AS try(decode(b))",
)


def table_specs() -> list[Any]:
    """Every table the installed dissectors declare (plus flows and anomalies)."""
    from analyzer.pipeline import tables_for
    from dissectors.registry import discover
    from dissectors.schema import register_table

    registry = discover()
    for spec in registry.tables():
        register_table(spec)
    return list(tables_for(registry))


def _has_parquet(d: Path) -> bool:
    return d.is_dir() and any(d.glob("*/*.parquet"))


def _declared_files(table: Path, spec: Any) -> list[Path] | None:
    """The Parquet files of one table when each has exactly the declared columns (names,
    order, types: what this version writes), else None (no files, or a dataset of an
    older or newer version: read through ``open_dataset``, which fills in what a file
    lacks).  Why: DuckDB reads such files itself, within its memory limit, where a
    ``pyarrow.dataset`` scan hands it batches read ahead outside that limit: the five
    analyses the summary reads, on a 1 GB bulk NATS recording's dataset with a 500 MB
    limit, peaked at 2.8 GB RSS in 34 s that way, at 0.8 GB in 25 s reading the files
    natively (no limit is set by default: docs/performance.md, "Other commands")."""
    import pyarrow.parquet as pq

    from dissectors.schema import arrow_schema

    files = sorted(table.glob("*/*.parquet")) if table.is_dir() else []
    if not files:
        return None
    declared = arrow_schema(spec).remove_metadata()
    for f in files:
        if not pq.read_schema(f).remove_metadata().equals(declared):
            return None
    return files


def _read_parquet(files: list[Path]) -> str:
    """DuckDB's reader of ``files`` with the ``capture`` partition column as a string, as
    ``open_dataset`` has it."""
    from dissectors.tables import PARTITION_KEY

    paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    return (f"read_parquet([{paths}], hive_partitioning = true, "
            f"hive_types = {{'{PARTITION_KEY}': VARCHAR}})")


def connect(dataset: str | os.PathLike[str] | None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with every table of ``dataset`` as a view (an
    empty one for a declared table the dataset lacks) and the Spark shims; ``None``
    gives the declared tables, all empty."""
    import duckdb
    import pyarrow as pa

    from analyzer.sink import dataset_schema, open_dataset

    con = duckdb.connect(":memory:")
    for stmt in SPARK_SHIMS:
        con.execute(stmt)
    root = Path(dataset) if dataset is not None else None
    declared = set()
    for spec in table_specs():
        declared.add(spec.name)
        files = _declared_files(root / spec.name, spec) if root is not None else None
        if files:
            con.execute(f'CREATE VIEW "{spec.name}" AS SELECT * FROM {_read_parquet(files)}')
            continue
        if root is not None and _has_parquet(root / spec.name):
            source: Any = open_dataset(root, spec)
        else:
            source = pa.table({f.name: pa.array([], f.type) for f in dataset_schema(spec)})
        con.register(f"_src_{spec.name}", source)
        con.execute(f'CREATE VIEW "{spec.name}" AS SELECT * FROM "_src_{spec.name}"')
    if root is not None and root.is_dir():  # tables of dissectors not installed here
        for d in sorted(root.iterdir()):
            if d.name not in declared and not d.name.startswith(".") and _has_parquet(d):
                glob = str(d / "*" / "*.parquet").replace("'", "''")
                con.execute(
                    f'CREATE VIEW "{d.name}" AS SELECT * FROM read_parquet(\'{glob}\', '
                    "hive_partitioning = true, union_by_name = true)")
    return con


def run(
    dataset: str | os.PathLike[str] | None,
    names: Iterable[str] | None = None,
    params: dict[str, int] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    made: set[str] | None = None,
) -> dict[str, pa.Table]:
    """Run the analyses (all, or ``names`` and the earlier results they read) and return
    each of ``names`` as an Arrow table.  Every result run is also left in ``con`` as a
    table of that name, and added to ``made``: the results already in ``con`` (with the
    same ``params``), which are read, not run again."""
    con = con if con is not None else connect(dataset)
    made = made if made is not None else set()
    wanted = set(names) if names is not None else set(ANALYSES)
    out: dict[str, pa.Table] = {}
    for name in run_order(wanted):  # with the earlier results they read
        if name not in made:
            con.execute(f'CREATE OR REPLACE TABLE "{name}" AS {render(name, params)}')
            made.add(name)
        if name in wanted:
            out[name] = con.sql(f'SELECT * FROM "{name}"').to_arrow_table()
    return out


def run_to_dir(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    names: Iterable[str] | None = None,
    params: dict[str, int] | None = None,
    echo: Callable[[str], Any] = print,
) -> dict[str, pa.Table]:
    """``msgcap analyze``: write each result to ``OUT/<name>/part-0.parquet`` (the layout
    Spark writes, so one reader reads either)."""
    import pyarrow.parquet as pq

    results = run(dataset, names, params)
    for name, table in results.items():
        d = Path(out) / name
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.parquet"):
            old.unlink()
        pq.write_table(table, d / "part-0.parquet")
        echo(f"{name}: {table.num_rows} rows")
    return results

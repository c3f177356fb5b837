"""Generate ``docs/tables.md`` from the table declarations.

Usage::

    python -m analyzer.docs --write docs/tables.md   # regenerate
    python -m analyzer.docs --check docs/tables.md   # exit 1 if stale

Strategy: the page is a pure function of the registered ``TableSpec``s
(``render_tables_md``), so a test can compare the committed file with a fresh
rendering and fail when a declaration changed without the docs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from analyzer.sink import FILE_ROW_GROUPS
from dissectors.schema import load_all_tables
from dissectors.tables import ENVELOPE, PARTITION_KEY, TableSpec

__all__ = ["DEFAULT_PATH", "main", "render_tables_md", "type_name"]

DEFAULT_PATH = "docs/tables.md"

# core tables first (every run writes them), then protocol tables by name
_CORE_ORDER = ("flows", "anomalies")


def type_name(t: pa.DataType) -> str:
    """Compact, readable Arrow type name (``list<int32>``, ``timestamp[us, UTC]``)."""
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, {t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    if pa.types.is_map(t):
        return f"map<{type_name(t.key_type)}, {type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        inner = ", ".join(f"{f.name}: {type_name(f.type)}" for f in t)
        return f"struct<{inner}>"
    if pa.types.is_boolean(t):
        return "bool"
    return str(t)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _ordered(specs: Iterable[TableSpec]) -> list[TableSpec]:
    def key(s: TableSpec) -> tuple[int, str]:
        if s.name in _CORE_ORDER:
            return (_CORE_ORDER.index(s.name), "")
        return (len(_CORE_ORDER), s.name)

    return sorted(specs, key=key)


def _columns_table(fields: Sequence) -> list[str]:
    lines = ["| column | type | nullable | meaning |", "|---|---|---|---|"]
    for f in fields:
        lines.append(
            f"| `{f.name}` | `{type_name(f.type)}` | {'yes' if f.nullable else 'no'} "
            f"| {_cell(f.description)} |"
        )
    return lines


def render_tables_md(specs: Iterable[TableSpec]) -> str:
    """The whole ``docs/tables.md`` for ``specs`` (order: flows, anomalies, then by name)."""
    specs = _ordered(specs)
    out = [
        "# Output tables",
        "",
        "<!-- Generated from the table declarations by "
        f"`python -m analyzer.docs --write {DEFAULT_PATH}`. Do not edit by hand. -->",
        "",
        "Each table is a directory of a Parquet dataset (zstd), one Hive-style partition "
        "per capture:",
        "",
        "```",
        f"OUT/<table>/{PARTITION_KEY}=<capture_id>/part-0.parquet",
        "OUT/manifest.json",
        "```",
        "",
        "- `msgcap dissect --workers N` on one capture writes `part-0.parquet` … "
        "`part-<N-1>.parquet` (rows split by flow, the flows shared out by their bytes); the "
        "dataset has the same rows as one worker's, in a different file order: compare by "
        "`record_id`.",
        f"- A file holds at most {FILE_ROW_GROUPS} row groups (~1 GiB of Arrow data at most); "
        "a table's rows past that go to `part-0-1.parquet`, `part-0-2.parquet`, … (worker k: "
        "`part-k-1.parquet`, …), in order: a Parquet writer keeps every row group's metadata "
        "in memory until it closes the file, so one file per capture would make memory grow "
        "with the capture. Read a partition as a whole, never one named file.",
        f"- The partition column `{PARTITION_KEY}` (a string, equal to `capture_id`) is added "
        "by readers that understand Hive partitions; declare it as a string rather than "
        "letting the reader infer its type.",
        "- Parquet key-value metadata of every file: `msgcap.table`, `msgcap.table_version`, "
        "`msgcap.tool_version`, `msgcap.input_sha256`, `msgcap.capture_id`, "
        "`msgcap.options`.",
        "- Timestamps are `timestamp[us, UTC]` (Parquet `TIMESTAMP(MICROS, UTC)`), which "
        "`spark.read.parquet`, DuckDB, pandas and polars read as timestamps with default "
        "settings; each timestamp column `X` is followed by `X_ns` (`int64`), its exact value "
        "in nanoseconds since the Unix epoch (`X` is rounded down to the microsecond).",
        "- Table versions: 2 (this layout) for every table. Version 1 stored timestamps as "
        "Parquet `TIMESTAMP(NANOS, UTC)` without `_ns` columns, which Spark cannot read as "
        "timestamps; a dataset's versions are in each file's `msgcap.table_version`.",
        "- Same input and options give the same rows in the same order.",
        "",
        "## Tables",
        "",
    ]
    for s in specs:
        out.append(f"- [`{s.name}`](#{s.name}) (v{s.version})")
    out.append("")
    if any(s.envelope for s in specs):
        out += [
            "## Envelope",
            "",
            "Every protocol table starts with these columns (marked *envelope* below), so "
            "each row leads back to its capture, flow, frames and stream offsets.",
            "",
            *_columns_table(ENVELOPE),
            "",
        ]
    for s in specs:
        out += [f"## {s.name}", "", f"Version {s.version}. {_cell(s.description)}", ""]
        if s.envelope:
            out += [
                "Starts with the [envelope](#envelope) columns "
                f"(`{ENVELOPE[0].name}` … `{ENVELOPE[-1].name}`), then:",
                "",
            ]
            fields = s.fields
        else:
            fields = s.columns
        out += [*_columns_table(fields), ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analyzer.docs", description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="PATH", nargs="?", const=DEFAULT_PATH, help="regenerate")
    g.add_argument(
        "--check", metavar="PATH", nargs="?", const=DEFAULT_PATH, help="exit 1 if PATH is stale"
    )
    args = p.parse_args(argv)
    text = render_tables_md(load_all_tables())
    if args.write:
        path = Path(args.write)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return 0
    path = Path(args.check)
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current != text:
        print(
            f"{path} is stale: run `python -m analyzer.docs --write {path}`", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

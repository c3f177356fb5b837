"""``msgcap analyze DATASET -o OUT`` and ``msgcap query DATASET "SQL"``: the analyses and
ad-hoc SQL on the embedded DuckDB engine (no Spark, no JVM)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from analyzer.analyses import ANALYSES, DEFAULT_PARAMS
from analyzer.cliutil import UserError

__all__ = ["add_analyze_parser", "add_query_parser", "run_analyze", "run_query"]


def _check_dataset(path: str) -> Path:
    from analyzer.summary import Dataset

    p = Path(path)
    if not p.is_dir() or not Dataset.looks_like(p):
        what = "does not exist" if not p.exists() else "is not a msgcap dataset directory"
        raise UserError(f"{path} {what}",
                        "dissect a capture first: `msgcap dissect CAPTURE -o DIR`, then give DIR")
    return p


def run_analyze(args: argparse.Namespace) -> int:
    from analyzer.analyses import duck

    ds = _check_dataset(args.dataset)
    unknown = [n for n in args.only or [] if n not in ANALYSES]
    if unknown:
        raise UserError(f"unknown analyses {unknown}", f"give --only one of: {', '.join(ANALYSES)}")
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file", "give -o a directory (created if missing)")
    params = {"delivery_window_ns": int(args.delivery_window * 1e9)}
    duck.run_to_dir(ds, out, args.only or None, params,
                    echo=lambda line: print(line, file=sys.stdout))
    return 0


def _json_value(v):
    if isinstance(v, bytes | bytearray):
        return bytes(v).hex()
    return v


def run_query(args: argparse.Namespace) -> int:
    import duckdb

    from analyzer.analyses import duck

    ds = _check_dataset(args.dataset)
    con = duck.connect(ds)
    if args.with_analyses:
        duck.run(ds, con=con)
    try:
        rel = con.sql(args.sql)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"the query failed: {first}",
                        "every table is a view of its name (`msgcap schema` lists them and "
                        "their columns); quote a column named like a keyword: \"offset\"") from None
    if rel is None:  # a statement without rows
        return 0
    cols = rel.columns
    rows = rel.fetchall()
    if args.json:
        for r in rows:
            print(json.dumps({c: _json_value(v) for c, v in zip(cols, r, strict=True)},
                             default=str))
    elif args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        for r in rows:
            w.writerow([_json_value(v) for v in r])
    else:
        from analyzer.cliutil import out_console, print_table

        print_table(out_console(), None, cols,
                    [["" if v is None else str(_json_value(v)) for v in r] for r in rows])
    return 0


def add_analyze_parser(sub) -> None:
    p = sub.add_parser("analyze", help="cross-flow analyses of a dataset -> Parquet (DuckDB, "
                       "no Spark); docs/analyses.md")
    p.add_argument("dataset", metavar="DATASET", help="dataset directory (msgcap dissect -o)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="directory each analysis is written to, as OUT/<name>/part-0.parquet")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only these analyses (of: {', '.join(ANALYSES)})")
    p.add_argument("--delivery-window", type=float, metavar="SECONDS",
                   default=DEFAULT_PARAMS["delivery_window_ns"] / 1e9,
                   help="a delivery pairs with a publish at most this long before it "
                   "(default %(default)s)")
    p.set_defaults(func=lambda a: run_analyze(a))


def add_query_parser(sub) -> None:
    p = sub.add_parser("query", help="ad-hoc SQL over a dataset: every table is a view "
                       "(DuckDB)")
    p.add_argument("dataset", metavar="DATASET", help="dataset directory (msgcap dissect -o)")
    p.add_argument("sql", metavar="SQL", help='e.g. "SELECT op, count(*) FROM nats GROUP BY op"')
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object per row")
    fmt.add_argument("--csv", action="store_true", help="CSV with a header line")
    p.add_argument("--with-analyses", action="store_true",
                   help="also make every analysis result a view (docs/analyses.md)")
    p.set_defaults(func=lambda a: run_query(a))

"""docs/analyses.md, generated from the definitions themselves (``python -m
analyzer.analyses.docs``): each analysis's leading SQL comment is its definition, its
columns and types come from running it on DuckDB over an empty dataset, so the page
cannot drift from what runs.  tests/analyses/test_docs.py checks the file is current."""

from __future__ import annotations

from pathlib import Path

from analyzer.analyses import ANALYSES, DEFAULT_PARAMS, definition, parameters

DOC = Path(__file__).resolve().parents[2] / "docs" / "analyses.md"

_INTRO = """\
# Analyses

Cross-flow analyses of a msgcap dataset, each defined once as SQL
(`analyzer/analyses/sql/<name>.sql`) and run by either engine:

- `msgcap analyze DATASET -o OUT` — embedded DuckDB, no Spark and no JVM; writes
  `OUT/<name>/part-0.parquet`.
- `msgcap spark analyze DATASET -o OUT` — the same SQL on Spark (`spark.sql`), for datasets
  that outgrow one machine; writes `OUT/<name>/` (Parquet parts).
- `msgcap summary` and `msgcap report` show these results (DuckDB, in memory).
- `msgcap query DATASET "SQL" [--json|--csv] [--with-analyses]` — any SQL over the
  dataset: every table is a view of its name (`msgcap schema` lists their columns), and
  with `--with-analyses` every result below is a view too.

tests/analyses/test_engines.py runs every analysis on both engines over every sample and
asserts equal rows.  The SQL uses Spark's function names; DuckDB gets the few it lacks
(`get_json_object`, `try_element_at`, `explode`) as macros, and one helper of ours, `payload_text`
(binary payload as UTF-8 text, null when not UTF-8), is defined on both.  Times are the
exact int64 nanosecond columns (`*_ns`), so no engine rounds to microseconds.  Rows never
pair across captures (`capture_id` is part of every match), except in the three analyses
made for that: `vantage_matches`, `clock_offsets` and `one_way_delays` pair the same
message seen in several captures of the same traffic (taken at the client host and at the
broker, or at each server of a cluster) to estimate each capture's clock offset and the
one-way delay between the vantage points (samples/two-vantage/ is such a dataset).

## Parameters

| name | default | meaning |
| --- | --- | --- |
| `delivery_window_ns` | {delivery_window_ns:,} | a NATS delivery belongs to a publish of \
the same subject and payload at most this long before it (`msgcap analyze \
--delivery-window SECONDS`; `analyzer.analyses.DELIVERY_WINDOW_NS`) |
| `rate_window_ns` | {rate_window_ns:,} | width of the `rates` buckets, aligned on the Unix \
epoch (`analyzer.analyses.RATE_WINDOW_NS`) |

Analyses run in this order; a later one may read an earlier one's result by name.
"""


def _comment(sql: str) -> str:
    lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip() if line[2:3] != " " else line[3:])
    return "\n".join(lines)


def render_doc() -> str:
    from analyzer.analyses import duck

    con = duck.connect(None)
    duck.run(None, con=con)
    out = [_INTRO.format(**DEFAULT_PARAMS)]
    for name in ANALYSES:
        sql = definition(name)
        params = parameters(name)
        out.append(f"## `{name}`\n")
        out.append("```text\n" + _comment(sql) + "\n```\n")
        if params:
            out.append("Parameters: " + ", ".join(f"`{p}`" for p in params) + ".\n")
        cols = con.execute(f'DESCRIBE "{name}"').fetchall()
        out.append("| column | type |\n| --- | --- |")
        out.extend(f"| `{c[0]}` | {c[1]} |" for c in cols)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    DOC.write_text(render_doc(), "utf-8")
    print(f"wrote {DOC}")

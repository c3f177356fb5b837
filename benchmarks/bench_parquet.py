"""Parquet settings compared: write CPU, file size and DuckDB read CPU per candidate.

    python benchmarks/bench_parquet.py                                  # the samples
    python benchmarks/bench_parquet.py --capture /tmp/msgcap-bench/nats-bulk-100m.pcap
    python benchmarks/bench_parquet.py --dataset OUT --only zstd    # a dissected capture

Why this shape: the settings change how the tables are stored, never what they hold,
so the benchmark dissects each capture once (``msgcap dissect``, the settings of
``analyzer.sink``), reads every table back into Arrow and rewrites the same tables
under each candidate.  Every rewrite is read back and compared with the original
(``Table.equals``), so a candidate that changed content would be reported, not timed.

Figures are CPU seconds of this process (``time.process_time``), not wall time: the
machine is shared, and CPU time is what a setting costs whatever else runs.  DuckDB is
given one thread for the same reason.  Row groups are cut like the sink cuts them:
``rows_per_batch`` rows, or fewer when a row group would pass ``BATCH_BYTES`` of Arrow
data.

Queries (on the ``nats`` table when there is one, over all captures given):

* ``group``: rows and payload bytes per subject (a typical first look);
* ``scan``: total payload bytes and the largest record id (reads every payload);
* ``point``: the row of one record id (row-group statistics let a reader skip the rest).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import ROOT, dissect_command, msgcap_command, print_table  # noqa: E402

sys.path.insert(0, str(ROOT))
from analyzer.sink import BATCH_BYTES, parquet_options  # noqa: E402
from dissectors.schema import arrow_schema, get_table, load_all_tables  # noqa: E402
from dissectors.tables import TableSpec  # noqa: E402

Options = Callable[[TableSpec], dict[str, Any]]
ROWS_PER_BATCH = 65536


def _before(spec: TableSpec) -> dict[str, Any]:
    """The settings before issue 22: zstd at Arrow's default level, dictionary and
    statistics on every column."""
    return {"compression": "zstd", "write_statistics": True}


def _payload_like(f: pa.Field) -> bool:
    t = f.type
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or f.name.endswith("_sha256")


def _int64_like(f: pa.Field) -> bool:
    return f.type == pa.int64() or pa.types.is_timestamp(f.type)


def _with(base: Options = _before, **extra: Any) -> Options:
    def options(spec: TableSpec) -> dict[str, Any]:
        return {**base(spec), **extra}
    return options


def _no_dict_payload(spec: TableSpec) -> dict[str, Any]:
    return {**_before(spec),
            "use_dictionary": [f.name for f in arrow_schema(spec) if not _payload_like(f)]}


def _no_stats_payload(spec: TableSpec) -> dict[str, Any]:
    return {**_before(spec),
            "write_statistics": [f.name for f in arrow_schema(spec) if not _payload_like(f)]}


def _delta_int64(spec: TableSpec) -> dict[str, Any]:
    """DELTA_BINARY_PACKED on every int64 and timestamp column (flat ones: the nested
    columns lose their dictionary here, which this comparison can afford)."""
    schema = arrow_schema(spec)
    delta = [f.name for f in schema if _int64_like(f)]
    return {**_before(spec),
            "use_dictionary": [f.name for f in schema if f.name not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED")}


@dataclass(frozen=True)
class Candidate:
    name: str
    options: Options
    rows_per_batch: int = ROWS_PER_BATCH


CANDIDATES = [
    Candidate("before: zstd(1), dict+stats all", _before),
    Candidate("msgcap now: + delta on Field.encoding", parquet_options),
    Candidate("zstd level 3", _with(compression_level=3)),
    Candidate("zstd level 6", _with(compression_level=6)),
    Candidate("zstd level 9", _with(compression_level=9)),
    Candidate("lz4", _with(compression="lz4")),
    Candidate("snappy", _with(compression="snappy")),
    Candidate("no dictionary: payload/hash", _no_dict_payload),
    Candidate("no statistics: payload/hash", _no_stats_payload),
    Candidate("delta: every int64/timestamp", _delta_int64),
    Candidate("msgcap now + zstd level 3", _with(parquet_options, compression_level=3)),
    Candidate("content-defined chunking", _with(use_content_defined_chunking=True)),
    Candidate("msgcap now, row groups 16,384", parquet_options, 16384),
    Candidate("msgcap now, row groups 262,144", parquet_options, 262144),
    Candidate("msgcap now, dictionary pages <= 1 MiB (Arrow's default)",
              _with(parquet_options, dictionary_pagesize_limit=1 << 20)),
    Candidate("msgcap now, dictionary pages <= 16 MiB",
              _with(parquet_options, dictionary_pagesize_limit=16 << 20)),
    Candidate("msgcap now, data pages 8 MiB", _with(parquet_options, data_page_size=8 << 20)),
    Candidate("msgcap now, data pages 256 KiB", _with(parquet_options, data_page_size=256 << 10)),
]


# ------------------------------------------------------------------------------- data


def dissect(captures: list[Path], work: Path) -> list[Path]:
    """One ``msgcap dissect`` per capture; the output directories."""
    outs = []
    for i, cap in enumerate(captures):
        out = work / f"in-{i}"
        cmd = dissect_command(msgcap_command(), cap, out, None)
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{cap}: msgcap dissect exited {proc.returncode}: "
                             f"{proc.stderr.strip()[-300:]}")
        outs.append(out)
    return outs


def load_tables(outs: list[Path]) -> list[tuple[str, pa.Table]]:
    """Every table file of every output, as ``(table name, Arrow table)``."""
    known = {spec.name for spec in load_all_tables(plugins=True)}
    found = []
    for out in outs:
        for f in sorted(out.glob("*/capture=*/part-*.parquet")):
            name = f.parent.parent.name
            if name in known:  # not: a demo plugin's table the registry cannot name
                found.append((name, pq.read_table(f, partitioning=None)))
    return found


# ---------------------------------------------------------------------------- measure


def rows_per_group(table: pa.Table, rows_per_batch: int) -> int:
    """The sink's cut: ``rows_per_batch`` rows unless that passes ``BATCH_BYTES``."""
    if table.num_rows == 0:
        return rows_per_batch
    per_row = max(1, table.nbytes // table.num_rows)
    return max(1, min(rows_per_batch, BATCH_BYTES // per_row))


def write_all(tables: list[tuple[str, pa.Table]], cand: Candidate, dest: Path) -> float:
    """Write every table under ``dest/<table>/<i>.parquet``; CPU seconds of the writes."""
    cpu = 0.0
    for i, (name, table) in enumerate(tables):
        path = dest / name / f"{i}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.process_time()
        with pq.ParquetWriter(path, table.schema, **cand.options(get_table(name))) as w:
            w.write_table(table, row_group_size=rows_per_group(table, cand.rows_per_batch))
        cpu += time.process_time() - t0
    return cpu


def check_same(tables: list[tuple[str, pa.Table]], dest: Path) -> bool:
    return all(
        pq.read_table(dest / name / f"{i}.parquet", partitioning=None).equals(table)
        for i, (name, table) in enumerate(tables)
    )


def queries(dest: Path, tables: list[tuple[str, pa.Table]]) -> dict[str, str]:
    nats = [t for n, t in tables if n == "nats" and t.num_rows]
    if not nats:
        return {}
    ids = pa.concat_tables(nats)["record_id"]
    mid = ids[len(ids) // 2].as_py()
    src = f"read_parquet('{dest}/nats/*.parquet')"
    return {
        "group": f"SELECT subject, count(*), sum(payload_len) FROM {src} GROUP BY subject",
        "scan": f"SELECT sum(octet_length(payload)), max(record_id) FROM {src}",
        "point": f"SELECT * FROM {src} WHERE record_id = {mid}",
    }


def read_cpu(sql: str, runs: int) -> float:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        con.execute(sql).fetchall()
        times.append(time.process_time() - t0)
    con.close()
    return statistics.median(times)


def full_read_cpu(dest: Path, tables: list[tuple[str, pa.Table]]) -> float:
    t0 = time.process_time()
    for i, (name, _) in enumerate(tables):
        pq.read_table(dest / name / f"{i}.parquet", partitioning=None, use_threads=False)
    return time.process_time() - t0


def measure(tables: list[tuple[str, pa.Table]], cand: Candidate, work: Path,
            runs: int) -> dict[str, Any]:
    writes, sizes = [], []
    dest = work / "out"
    for _ in range(runs):
        shutil.rmtree(dest, ignore_errors=True)
        writes.append(write_all(tables, cand, dest))
        sizes.append(sum(f.stat().st_size for f in dest.rglob("*.parquet")))
    result: dict[str, Any] = {
        "write_cpu_s": statistics.median(writes),
        "bytes": sizes[-1],
        "same": check_same(tables, dest),
        "read_all_cpu_s": statistics.median(full_read_cpu(dest, tables) for _ in range(runs)),
    }
    for q, sql in queries(dest, tables).items():
        result[q] = read_cpu(sql, runs)
    shutil.rmtree(dest, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", action="append", type=Path,
                    help="captures to dissect (default: every samples/*.pcap)")
    ap.add_argument("--dataset", action="append", type=Path,
                    help="use this msgcap output directory instead of dissecting")
    ap.add_argument("--runs", type=int, default=3, help="runs per candidate (median)")
    ap.add_argument("--only", action="append", help="candidates whose name contains this")
    args = ap.parse_args(argv)
    captures = [] if args.dataset and not args.capture else (
        args.capture or sorted((ROOT / "samples").glob("*.pcap")))
    cands = [c for c in CANDIDATES if not args.only or any(o in c.name for o in args.only)]
    with tempfile.TemporaryDirectory(prefix="bench-parquet-") as tmp:
        work = Path(tmp)
        tables = load_tables([*(args.dataset or []), *dissect(captures, work)])
        rows = sum(t.num_rows for _, t in tables)
        arrow_mb = sum(t.nbytes for _, t in tables) / 1e6
        n = len(captures) + len(args.dataset or [])
        print(f"{n} capture(s), {len(tables)} table files, {rows:,} rows, "
              f"{arrow_mb:,.1f} MB in Arrow; CPU s, median of {args.runs}")
        results = []
        for cand in cands:
            r = measure(tables, cand, work, args.runs)
            results.append((cand, r))
            print(f"  measured: {cand.name}", file=sys.stderr, flush=True)
    base = results[0][1]
    headers = ["settings", "write s", "MB", "size %", "read all s", "group s", "scan s",
               "point s", "same"]
    out = []
    for cand, r in results:
        out.append([
            cand.name, f"{r['write_cpu_s']:.3f}", f"{r['bytes'] / 1e6:.2f}",
            f"{100 * r['bytes'] / base['bytes']:.0f}", f"{r['read_all_cpu_s']:.3f}",
            *(f"{r[q]:.3f}" if q in r else "-" for q in ("group", "scan", "point")),
            "yes" if r["same"] else "NO",
        ])
    print_table(headers, out)
    return 0 if all(r["same"] for _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

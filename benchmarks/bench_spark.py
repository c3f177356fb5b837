"""Ingestion time of one capture: the local path (``msgcap dissect``) vs ``msgcap spark
ingest`` (split into byte ranges) on Spark ``local[N]``.

Usage:
    python benchmarks/bench_spark.py CAPTURE [--split-bytes N] [--master local[2]]
    python benchmarks/bench_spark.py --generate-mb 1024          # synthetic multi-host NATS
    python benchmarks/bench_spark.py --generate-mb 200 --clients 64 --skip-local

``--generate-mb`` writes a capture with ``tests/spark/synth.py`` (one NATS server,
``--clients`` client hosts, pub/sub fan-out and request/reply; many IP address pairs, so
the dissection stage has many keys to spread).  A capture recorded on loopback
(``samples/record_nats.py``) has a single address pair: its whole dissection then runs in
one task (see docs/spark.md).  Both datasets are compared by rows per table.  Spark's
session start is timed apart from the ingestion.  Nothing is asserted; numbers are
printed for the closing notes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _generate(path: Path, mb: int, clients: int) -> None:
    from tests.spark.synth import write_nats_capture

    t = time.perf_counter()
    # ~3.1 KB per round per client with the default payload (measured on a small run)
    probe = path.with_suffix(".probe")
    write_nats_capture(probe, clients=clients, rounds=20, payload=200)
    per_round = max(probe.stat().st_size / 20, 1)
    probe.unlink()
    rounds = max(int(mb * 1e6 / per_round), 1)
    frames = write_nats_capture(path, clients=clients, rounds=rounds, payload=200)
    print(f"generated {path}: {path.stat().st_size / 1e6:.1f} MB, {frames:,} frames, "
          f"{clients} clients, {rounds:,} rounds in {time.perf_counter() - t:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?")
    ap.add_argument("--generate-mb", type=int, help="write a synthetic capture of ~N MB")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--split-bytes", type=int, default=64 << 20)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument(
        "--merge-scopes", action=argparse.BooleanOptionalAction, default=None,
        help="as `msgcap spark ingest` (default: on when STAN/Liftbridge are installed, "
        "which puts a one-server capture in one dissection task)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the datasets (printed)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    if args.capture:
        path = Path(args.capture)
    elif args.generate_mb:
        path = work / "synth.pcap"
        _generate(path, args.generate_mb, args.clients)
    else:
        ap.error("give a CAPTURE or --generate-mb")
    size = path.stat().st_size
    results = {"capture": str(path), "mb": round(size / 1e6, 1)}

    from analyzer.pipeline import Options, dissect_capture

    if not args.skip_local:
        t = time.perf_counter()
        local = dissect_capture(path, work / "local", Options())
        secs = time.perf_counter() - t
        results["local_s"] = round(secs, 1)
        results["packets"] = local.packets
        results["rows"] = local.rows
        print(f"local dissect: {secs:.1f} s ({size / 1e6 / secs:.1f} MB/s, "
              f"{local.packets / secs:,.0f} packets/s)")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from analyzer.spark.ingest import ingest
    from analyzer.spark.session import get_spark

    t = time.perf_counter()
    spark = get_spark(args.master, {"spark.ui.enabled": "false"}, "msgcap bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()
    results["spark_start_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    report = ingest(spark, [path], work / "spark", options=Options(),
                    split_bytes=args.split_bytes, partitions=args.partitions,
                    merge_scopes=args.merge_scopes)
    secs = time.perf_counter() - t
    res = report.results[0]
    results.update(spark_s=round(secs, 1), how=report.how[str(path)], master=args.master,
                   phases=report.timings.get(str(path)), spark_rows=res.rows)
    print(f"spark ingest ({args.master}, {report.how[str(path)]}): {secs:.1f} s "
          f"({size / 1e6 / secs:.1f} MB/s, {res.packets / secs:,.0f} packets/s); "
          f"session start {results['spark_start_s']} s; phases {results['phases']}")
    if "rows" in results:
        same = results["rows"] == res.rows
        results["same_rows"] = same
        print(f"rows per table equal: {same}")
    print(json.dumps(results, indent=1, default=str))
    spark.stop()
    if args.keep:
        print(f"datasets kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

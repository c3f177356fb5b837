"""Issue 19's acceptance benchmark: local ``msgcap dissect`` vs ``msgcap spark ingest
--master local[2]``, in one run on this machine.

(a) one ~150 MB capture taken at one broker with many clients, split into byte ranges
    (target: Spark wall <= 1.5x local);
(b) four ~100 MB captures, one task each (target: Spark wall <= 0.8x the sequential
    local runs).

Usage:
    python benchmarks/bench_spark.py                       # both, synthetic captures
    python benchmarks/bench_spark.py --only a --a-mb 150 --clients 64
    python benchmarks/bench_spark.py --a-capture big.pcap --b-captures c1 c2 c3 c4
    python benchmarks/bench_spark.py --profile-split --a-mb 30   # where pass 3 spends time
    MSGCAP_NATIVE_ENGINE=0 python benchmarks/bench_spark.py --only a --no-local \
        --a-capture big.pcap     # the split ingest alone, tasks on the reference engine

Captures are written by ``tests/spark/synth.py`` (one NATS server 10.1.0.1:4222, client
hosts 10.0.x.y, pub/sub fan-out and request/reply) unless given.  Local runs are
``python -m analyzer.cli dissect`` subprocesses (their memory is not the driver's); this
process is the Spark driver, and its peak RSS (``ru_maxrss``) is printed after each
scenario (the JVM is a separate process and not counted).  Rows per table are compared
between the local and the Spark dataset.  Spark's session start is timed apart.  Nothing
is asserted: the numbers are for docs/spark.md.  ``--no-local`` skips the local runs (and
the ratio); ``MSGCAP_NATIVE_ENGINE=0`` (inherited by the executors and the local runs)
puts every reassembly on the reference alone, for an A/B of the native engine
(docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _generate(path: Path, mb: int, clients: int, seed: int) -> Path:
    from tests.spark.synth import write_nats_capture

    probe = path.with_suffix(".probe")
    write_nats_capture(probe, clients=clients, rounds=20, payload=200, seed=seed)
    per_round = max(probe.stat().st_size / 20, 1)
    probe.unlink()
    rounds = max(int(mb * 1e6 / per_round), 1)
    frames = write_nats_capture(path, clients=clients, rounds=rounds, payload=200, seed=seed)
    print(f"generated {path.name}: {path.stat().st_size / 1e6:.1f} MB, {frames:,} frames, "
          f"{clients} clients", flush=True)
    return path


def _local(paths: list[Path], out: Path) -> float:
    t = time.perf_counter()
    for p in paths:
        subprocess.run([sys.executable, "-m", "analyzer.cli", "dissect", str(p), "-o", str(out),
                        "-q"], check=False, capture_output=True)
    return time.perf_counter() - t


def _rows(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["rows"]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _profile_split(path: Path, work: Path, local: bool = True) -> dict:
    """The split path's per-task work over the whole capture in this one process, without
    Spark (no JVM, no shuffle, no Arrow transfer to and from Python workers), step by step,
    next to the local path's dissection of the same file: CPU seconds of this process
    (``time.process_time``), so other load on the machine counts little."""
    import numpy as np

    from analyzer.pipeline import CaptureDissection, Options, run_dissection
    from analyzer.spark import ingest as I
    from analyzer.spark.split import (
        iter_range_frames,
        plan_ranges,
        probe_layout,
        range_batches,
        scan_range,
        verify_chain,
    )
    from analyzer.spark.task import (
        PacketBatches,
        keyed_batches,
        keyed_batches_native,
        range_stats,
        range_stats_batches,
        sweep_schedule,
    )
    from dissectors.registry import discover
    from dissectors.schema import register_table

    opts = Options()
    registry = discover()
    for spec in registry.tables():
        register_table(spec)
    out: dict[str, float] = {}

    def timed(name: str, fn):
        t = time.process_time()
        got = fn()
        out[name] = round(time.process_time() - t, 2)
        return got

    def dissect_local() -> None:
        from analyzer.pipeline import file_sha256
        from analyzer.sink import DatasetWriter

        sha = file_sha256(path)
        w = DatasetWriter(str(work / "p-local"), sha[:16], sha, "bench", opts.as_json())
        job = CaptureDissection(sha[:16], w, registry, opts)
        run_dissection(job, str(path), w)
        w.close(ensure_tables=list(job.tables.values()))

    if local:
        timed("local dissect (whole path, for reference)", dissect_local)
    layout = probe_layout(str(path), path.stat().st_size)
    ranges = plan_ranges(layout, path.stat().st_size + 1)  # one range: the whole file
    scans = timed("pass 1: scan", lambda: [scan_range(layout, 0, *ranges[0])])
    plans, _why = verify_chain(layout, scans, None)
    timed("pass 2: range_stats (Python reference)", lambda: [range_stats(
        iter_range_frames(layout, plans[0]), opts.limits, True)])
    stats = timed("pass 2: range_stats_batches (native engine)", lambda: [range_stats_batches(
        range_batches(layout, plans[0]), opts.limits, True)])
    schedule = sweep_schedule(stats)
    timed("pass 3a: frames read + keys + Arrow batches (Python reference)", lambda: list(
        keyed_batches(iter_range_frames(layout, plans[0]), {}, {}, False)))
    batches = timed("pass 3a: frames read + keys + Arrow batches (native engine)", lambda: list(
        keyed_batches_native(range_batches(layout, plans[0]), {}, {}, False)))
    summary = timed("pass 3b-c: Arrow batches to C batches, reassembly, dissection, runs",
                    lambda: I._dissect_partition(
                        PacketBatches(batches), "0" * 16, opts, schedule, None, {}, None,
                        str(work / "p-runs"), 0))
    luts = I._flow_luts([summary])
    dissection = CaptureDissection("0" * 16, I._ListSink(), registry, opts)
    tables = list(dissection.tables.values())
    timed("pass 3d: runs read, ids remapped, part files written",
          lambda: I._write_piece(str(work / "p-split"), "0" * 16, "0" * 64, opts, "bench",
                                 tables, summary, luts.get(0, np.zeros(1, dtype=np.int64)),
                                 {}, True))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["a", "b"])
    ap.add_argument("--a-capture")
    ap.add_argument("--b-captures", nargs=4)
    ap.add_argument("--a-mb", type=int, default=150)
    ap.add_argument("--b-mb", type=int, default=100)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--split-bytes", type=int, default=32 << 20)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-local", action="store_true",
                    help="skip the local runs (the split path alone)")
    ap.add_argument("--profile-split", action="store_true",
                    help="time the split path's steps in one process, without Spark")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    if args.profile_split:
        cap = Path(args.a_capture) if args.a_capture else _generate(
            work / "p.pcap", args.a_mb, args.clients, 7)
        res = _profile_split(cap, work, not args.no_local)
        for k, v in res.items():
            print(f"{v:8.2f} s CPU  {k}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    todo = [args.only] if args.only else ["a", "b"]
    caps: dict[str, list[Path]] = {}
    if "a" in todo:
        caps["a"] = [Path(args.a_capture)] if args.a_capture else [
            _generate(work / "a.pcap", args.a_mb, args.clients, 7)]
    if "b" in todo:
        caps["b"] = [Path(p) for p in args.b_captures] if args.b_captures else [
            _generate(work / f"b{k}.pcap", args.b_mb, args.clients // 2, 11 + k)
            for k in range(4)]

    from analyzer.pipeline import Options
    from analyzer.spark.ingest import ingest
    from analyzer.spark.session import get_spark

    t = time.perf_counter()
    spark = get_spark(args.master, {"spark.ui.enabled": "false"}, "msgcap bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()
    results: dict = {"master": args.master, "spark_start_s": round(time.perf_counter() - t, 1)}
    for name in todo:
        paths = caps[name]
        mb = sum(p.stat().st_size for p in paths) / 1e6
        local_s = None if args.no_local else _local(paths, work / f"{name}-local")
        split = args.split_bytes if name == "a" else 1 << 40
        t = time.perf_counter()
        report = ingest(spark, paths, work / f"{name}-spark", options=Options(),
                        split_bytes=split)
        spark_s = time.perf_counter() - t
        target = 1.5 if name == "a" else 0.8
        ratio = None if local_s is None else round(spark_s / local_s, 2)
        r = {
            "captures": len(paths), "mb": round(mb, 1),
            "local_s": None if local_s is None else round(local_s, 1),
            "spark_s": round(spark_s, 1), "ratio": ratio,
            "target_ratio": target,
            "met": None if local_s is None else spark_s / local_s <= target,
            "driver_peak_rss_mb": round(_peak_rss_mb(), 1),
            "how": sorted(set(report.how.values())),
            "same_rows": None if local_s is None else
            _rows(work / f"{name}-local") == _rows(work / f"{name}-spark"),
            "phases": {Path(k).name: v for k, v in report.timings.items()},
        }
        results[name] = r
        local = "-" if local_s is None else f"{local_s:.1f} s"
        print(f"({name}) {len(paths)} capture(s), {mb:.0f} MB: local {local}, "
              f"spark {spark_s:.1f} s, ratio {ratio} (target <= {target}), driver peak RSS "
              f"{r['driver_peak_rss_mb']} MB, same rows {r['same_rows']}", flush=True)
    print(json.dumps(results, indent=1, default=str))
    spark.stop()
    if args.keep:
        print(f"kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

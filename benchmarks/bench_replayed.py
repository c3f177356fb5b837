"""Throughput of ``msgcap dissect`` on a sample capture repeated to a large size.

    python benchmarks/bench_stan.py                 # samples/stan-basic.pcap to ~150 MB
    python benchmarks/bench_liftbridge.py --target-mb 50 --runs 1

The STAN and Liftbridge benchmarks share this script (each is one ``Protocol``): the
recorded sample is repeated by ``benchmarks/replay.py`` (new client addresses and later
times per round), dissected ``--runs`` times as a child process (``run_measured``: wall
time, peak RSS of the process tree), and the protocol's rows are counted per message
kind.  Messages/s is the protocol table's rows (one per STAN protobuf / Liftbridge
message) divided by the median wall time, start-up included.  The rows are checked
against the same sample repeated once and twice: ``one + (rounds - 1) * (two - one)``
(a round after the first may type more than the first did, because what the dissector
learnt of the server carries over: Liftbridge's message sent before its stream existed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import (  # noqa: E402  (sibling modules of this script)
    ROOT,
    Measured,
    count_rows,
    dissect_command,
    environment,
    fmt,
    loadavg,
    median,
    msgcap_command,
    print_table,
    refusal,
    run_measured,
    write_json,
)
from replay import replicate  # noqa: E402

DEFAULT_DATA = Path("/tmp/msgcap-bench")


@dataclass(frozen=True)
class Protocol:
    name: str  # as printed, and the cache file's prefix
    sample: str  # under samples/
    table: str  # one row per protocol message
    by: str  # the column the rows are counted by


STAN = Protocol("stan", "stan-basic.pcap", "stan", "msg_type")
LIFTBRIDGE = Protocol("liftbridge", "liftbridge-basic.pcap", "liftbridge", "msg_type")


def _rows(out: Path, proto: Protocol) -> dict[str, Any]:
    return {
        proto.table: count_rows(out, proto.table, proto.by) or {"rows": 0, "by": {}},
        "nats": count_rows(out, "nats") or {"rows": 0, "by": {}},
        "anomalies": count_rows(out, "anomalies", "kind") or {"rows": 0, "by": {}},
    }


def _dissect(msgcap: list[str], pcap: Path, data: Path, proto: Protocol,
             workers: int) -> tuple[Measured, dict[str, Any] | None]:
    out = Path(tempfile.mkdtemp(prefix=f"out-{proto.name}-", dir=data))
    try:
        m = run_measured(dissect_command(msgcap, pcap, out, workers if workers != 1 else None),
                         cwd=ROOT)
        return m, None if refusal(m) else _rows(out, proto)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(proto: Protocol, argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=f"msgcap dissect on samples/{proto.sample} repeated to a large capture")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, metavar="DIR",
                    help=f"capture cache and scratch directory (default {DEFAULT_DATA})")
    ap.add_argument("--target-mb", type=float, default=150.0,
                    help="repeat the sample until the capture has this many MB (default 150)")
    ap.add_argument("--runs", type=int, default=3, help="msgcap runs; median (default 3)")
    ap.add_argument("--workers", type=int, default=1, help="msgcap dissect --workers")
    ap.add_argument("--json", type=Path, metavar="PATH",
                    help=f"raw measurements (default DATA/{proto.name}-results.json)")
    args = ap.parse_args(argv)
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    sample = ROOT / "samples" / proto.sample
    pcap = data / f"{proto.name}-x{args.target_mb:g}mb.pcap"
    made = replicate(sample, pcap, int(args.target_mb * 1e6))
    size = pcap.stat().st_size
    msgcap = msgcap_command()
    print(f"{pcap}: samples/{proto.sample} x {made['rounds']:,} rounds, {size / 1e6:,.1f} MB, "
          f"{made['packets']:,} packets; {args.runs} run(s), load {loadavg()}", flush=True)

    ref = {}
    for n in (1, 2):
        small = data / f"{proto.name}-x{n}.pcap"
        replicate(sample, small, 2**62, max_rounds=n)
        ref[n] = (_dissect(msgcap, small, data, proto, 1)[1] or {}).get(proto.table)
        small.unlink()
    runs: list[Measured] = []
    rows: dict[str, Any] = {}
    na = None
    for i in range(args.runs):
        m, got = _dissect(msgcap, pcap, data, proto, args.workers)
        if got is None:
            na = refusal(m)
            break
        runs.append(m)
        rows = rows or got
        print(f"  run {i + 1}/{args.runs} msgcap dissect {m.wall_s:.2f} s", flush=True)

    wall = median(r.wall_s for r in runs)
    cpu = median(r.cpu_user_s + r.cpu_sys_s for r in runs)
    msgs = rows.get(proto.table, {}).get("rows", 0)
    print()
    print_table(
        ["row", "wall s", "CPU s", "packets/s", "MB/s", f"{proto.name} msgs/s",
         "msgs/CPU s", "peak RSS MB (tree)", "max proc MB"],
        [[f"msgcap dissect w={args.workers}", fmt(wall, ".2f"), fmt(cpu, ".2f"),
          fmt(made["packets"] / wall if wall else None, ",.0f"),
          fmt(size / 1e6 / wall if wall else None, ",.1f"),
          fmt(msgs / wall if wall else None, ",.0f"),
          fmt(msgs / cpu if cpu else None, ",.0f"),
          fmt(max((r.peak_rss_tree_mib for r in runs), default=None), ",.0f"),
          fmt(max((r.peak_rss_single_mib for r in runs), default=None), ",.0f")]],
    )
    if na:
        print(f"n/a: msgcap dissect {na}")
    for name, got in rows.items():
        print(f"{name}: {got['rows']:,} rows {got['by'] or ''}")
    check = None
    if ref[1] and ref[2] and rows:
        one, step = ref[1]["rows"], ref[2]["rows"] - ref[1]["rows"]
        want = one + (made["rounds"] - 1) * step
        check = {"one_round": one, "next_rounds": step, "rounds": made["rounds"],
                 "want": want, "got": msgs}
        print(f"vs the sample once and twice: {one:,} + ({made['rounds']:,} - 1) x {step:,} "
              f"= {want:,}, got {msgs:,} -> {'OK' if msgs == want else 'MISMATCH'}")
    print(f"wall s: median process wall time; CPU s: user + system of the tree (what the "
          f"run costs whatever else the machine runs); msgs/s = {proto.table} rows / wall s; "
          "RSS in MiB, tree = sampled sum over the process and its children.")
    json_path = args.json or data / f"{proto.name}-results.json"
    write_json(json_path, {
        "environment": environment(), "capture": made, "bytes": size,
        "runs": [r.as_json() for r in runs], "median_wall_s": wall, "median_cpu_s": cpu,
        "tables": rows,
        "check": check, "na": na,
    })
    print(f"\nraw measurements: {json_path}")
    return 0 if not na else 1

"""What a connection costs ``msgcap dissect``: CPU and memory per connection, next to tshark.

    python benchmarks/bench_connections.py                      # 3,000 and 12,000, open
    python benchmarks/bench_connections.py --closed --runs 1    # each closed (FIN both ways)

Why: a capture at a busy server holds thousands of client connections, each a handful of
packets (handshake, INFO, CONNECT, PING/PONG), and what msgcap spends on a connection,
not on a byte, decides its speed there (issue 22: the per-flow Python of the handshakes,
the detection and the session set-up) and its memory (the budget charges an open
connection ``reassembly.flows.FLOW_BYTES``).  The captures are generated
(``samples/hostile/generate.py`` ``write_nats_connections``, one client address and
1 ms per connection), at two sizes, so the cost of one more connection is the
difference between the two runs over the difference in connections: start-up and
other fixed costs cancel.

Each size is dissected ``--runs`` times with ``--memory-limit 0`` (no budget: the true
cost; under the default budget open connections past ~5,000 are evicted) and once at
default settings (its peak and ``limit.memory`` rows, for the record), and tshark's
``-q -z conv,tcp`` pass (the reference C dissector, every connection in its table) runs
over both.  Printed: per added connection, msgcap's wall and CPU microseconds and RSS
bytes (against ``FLOW_BYTES``), tshark's wall microseconds, and their ratio.  Nothing is
asserted (tests/hostile/test_memory_budget.py bounds the RSS); the raw measurements go to
``DATA/connections-results.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import (  # noqa: E402  (a sibling module of this script)
    ROOT,
    Measured,
    compile_bytecode,
    dissect_command,
    fmt,
    loadavg,
    median,
    msgcap_command,
    print_table,
    refusal,
    run_measured,
    write_json,
)

sys.path.insert(0, str(ROOT))
from reassembly.flows import FLOW_BYTES  # noqa: E402
from samples.hostile.generate import write_nats_connections  # noqa: E402


def capture(data: Path, connections: int, closed: bool) -> Path:
    """The generated capture (cached in ``data``: same arguments, same bytes)."""
    path = data / f"nats-{'closed' if closed else 'open'}-{connections}.pcap"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        write_nats_connections(tmp, connections, close=closed)
        tmp.replace(path)
    return path


def manifest_facts(out: Path) -> dict[str, Any]:
    m = json.loads((out / "manifest.json").read_text())
    return {"flows": m["rows"]["flows"], "anomalies": m["anomalies_by_kind"]}


def measure(msgcap: list[str], path: Path, out: Path, runs: int,
            tshark: str | None) -> dict[str, Any]:
    """msgcap without a budget ``runs`` times, once at default settings, tshark once."""
    free: list[Measured] = []
    for _ in range(runs):
        m = run_measured(dissect_command(msgcap, path, out, None, ["-q", "--memory-limit", "0"]),
                         cwd=ROOT)
        if refusal(m):
            raise SystemExit(f"msgcap failed on {path}: {refusal(m)}")
        free.append(m)
    facts = manifest_facts(out)
    budget = run_measured(dissect_command(msgcap, path, out, None, ["-q"]), cwd=ROOT)
    result: dict[str, Any] = {
        "wall_s": median(m.wall_s for m in free),
        "cpu_s": median(m.cpu_user_s + m.cpu_sys_s for m in free),
        "rss_mib": median(m.peak_rss_single_mib for m in free),
        "flows": facts["flows"],
        "budget": {"rc": budget.rc, "rss_mib": budget.peak_rss_single_mib,
                   **manifest_facts(out)},
        "runs": [m.as_json() for m in free],
        "tshark_s": None,
    }
    if tshark is not None:
        t = run_measured([tshark, "-r", str(path), "-q", "-z", "conv,tcp"], cwd=ROOT)
        result["tshark_s"] = None if refusal(t) else t.wall_s
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/msgcap-bench"),
                    help="capture cache and scratch directory (default /tmp/msgcap-bench)")
    ap.add_argument("--sizes", type=int, nargs=2, default=(3_000, 12_000),
                    metavar=("SMALL", "LARGE"), help="connections in the two captures")
    ap.add_argument("--closed", action="store_true",
                    help="each connection closed with a FIN each way (default: left open)")
    ap.add_argument("--runs", type=int, default=3, help="msgcap runs per size; median")
    ap.add_argument("--json", type=Path, help="raw measurements "
                    "(default DATA/connections-results.json)")
    args = ap.parse_args(argv)
    small, large = args.sizes
    if not 0 < small < large:
        ap.error("--sizes: SMALL must be positive and less than LARGE")
    args.data.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    msgcap = msgcap_command()
    tshark = shutil.which("tshark")
    kind = "closed" if args.closed else "open"
    print(f"== NATS connections ({kind}): {small:,} and {large:,}, {args.runs} run(s) each, "
          f"load {loadavg()}")
    results = {}
    out = args.data / "connections-out"
    for n in (small, large):
        path = capture(args.data, n, args.closed)
        results[n] = measure(msgcap, path, out, args.runs, tshark)
        r = results[n]
        print(f"  {n:,} connections ({path.stat().st_size / 1e6:.1f} MB): msgcap "
              f"{r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s, {r['rss_mib']:.0f} MiB; default "
              f"budget: {r['budget']['rss_mib']:.0f} MiB, anomalies {r['budget']['anomalies']}"
              f"; tshark {fmt(r['tshark_s'], '.2f')} s")
    shutil.rmtree(out, ignore_errors=True)
    a, b = results[small], results[large]
    added = large - small

    def per(key: str, scale: float) -> float | None:
        if a[key] is None or b[key] is None:
            return None
        return (b[key] - a[key]) * scale / added

    wall_us, cpu_us, tshark_us = per("wall_s", 1e6), per("cpu_s", 1e6), per("tshark_s", 1e6)
    rss_b = per("rss_mib", 2**20)
    ratio = None if wall_us is None or not tshark_us else wall_us / tshark_us
    print_table(["per added connection", "msgcap", "tshark", "msgcap / tshark"], [
        ["wall us", fmt(wall_us, ",.0f"), fmt(tshark_us, ",.0f"),
         fmt(ratio, ".2f") + ("x" if ratio is not None else "")],
        ["CPU us", fmt(cpu_us, ",.0f"), "-", "-"],
        ["peak RSS bytes", fmt(rss_b, ",.0f"), "-", f"budget charge {FLOW_BYTES:,}"],
    ])
    print("wall/CPU: medians of the runs without a budget (--memory-limit 0), process wall "
          "time and the CPU of the process and its threads (wait4); RSS: the process's "
          "peak (VmHWM); per added connection = (large - small) / connections added.")
    write_json(args.json or args.data / "connections-results.json",
               {"closed": args.closed, "sizes": [small, large],
                "results": {str(k): v for k, v in results.items()},
                "per_connection": {"wall_us": wall_us, "cpu_us": cpu_us, "rss_bytes": rss_b,
                                   "tshark_wall_us": tshark_us, "flow_bytes": FLOW_BYTES}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

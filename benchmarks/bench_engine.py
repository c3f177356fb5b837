"""Throughput of the native packet engine (issue 22) next to its floors and the Python
reference, in one run on one capture.

Usage:
    python benchmarks/bench_engine.py                      # generated bulk captures
    python benchmarks/bench_engine.py --segments 400000 --runs 3
    python benchmarks/bench_engine.py --capture some.pcap  # a recording (classic pcap)

Rows (each timed in this process, the file read once before timing so the page cache
is warm; medians of --runs):

  raw read         the file in 1 MiB reads (bench_dissect.raw_read): the I/O ceiling.
  struct walk      bench_dissect.struct_walk: a bare Python ``struct`` walk of the
                   records and their Ethernet/IP/TCP headers, the floor of any
                   per-packet Python code.
  C walk+decode    reassembly.native.pcap_batches: records and their headers, in C.
  native engine    reassembly.native.NativeReassembler over those batches, every
                   event consumed (coalesced chunks as they come; events in the
                   reference's order).
  native per flow  the same with coalesce="flow" (each flow's events in its order,
                   flows interleaved otherwise).
  reference        reassembly.engine.Reassembler over the reference reader, every event
                   consumed: what ``msgcap dissect`` runs below the layers today.

Captures (written to a temporary directory, deleted afterwards; never committed):
  synthetic        benchmarks/bench_reassembly.py's generator: 10 connections of
                   1,326-byte NATS PUB segments, one after the other, no ACKs.
  interleaved      11 connections with handshakes, segments of --mss bytes sent round
                   robin, the receiver ACKing every second segment, FIN at the end: the
                   shape of a bulk loopback recording with offload off.
Nothing is asserted; the table is for docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_dissect import raw_read, struct_walk  # noqa: E402  (sibling scripts)
from bench_reassembly import _synthetic  # noqa: E402

from reassembly import native  # noqa: E402
from reassembly.capture import open_capture  # noqa: E402
from reassembly.engine import Reassembler  # noqa: E402
from tests.reassembly.synth import ACK, PSH, SYN, PcapWriter, tcp_frame  # noqa: E402

FIN = 0x01


def interleaved(path: Path, segments: int, mss: int, conns: int = 11) -> Path:
    """``segments`` data segments over ``conns`` handshaken connections, round robin,
    an ACK from the server every second segment, FIN/ACK exchanges at the end."""
    w = PcapWriter(path)
    server = bytes([10, 0, 0, 2])
    clients = [bytes([10, 0, 1, 1 + i]) for i in range(conns)]
    seq = [1000 + 7919 * i for i in range(conns)]
    srv_seq = [500_000 + 104_729 * i for i in range(conns)]
    t = 1_700_000_000_000_000
    for i, c in enumerate(clients):
        w.write(t, tcp_frame(c, server, 40000 + i, 4222, seq[i] - 1, 0, SYN))
        w.write(t + 1, tcp_frame(server, c, 4222, 40000 + i, srv_seq[i] - 1, seq[i], SYN | ACK))
        w.write(t + 2, tcp_frame(c, server, 40000 + i, 4222, seq[i], srv_seq[i], ACK))
        t += 3
    line = b"PUB bench.subject %d\r\n" % (mss - 30)
    payload = (line + b"x" * mss)[:mss]
    for n in range(segments):
        i = n % conns
        t += 2
        w.write(t, tcp_frame(clients[i], server, 40000 + i, 4222, seq[i], srv_seq[i],
                             ACK | PSH, payload))
        seq[i] += len(payload)
        if (n // conns) % 2:
            w.write(t + 1, tcp_frame(server, clients[i], 4222, 40000 + i, srv_seq[i], seq[i],
                                     ACK))
    for i, c in enumerate(clients):
        t += 3
        w.write(t, tcp_frame(c, server, 40000 + i, 4222, seq[i], srv_seq[i], FIN | ACK))
        w.write(t + 1, tcp_frame(server, c, 4222, 40000 + i, srv_seq[i], seq[i] + 1, FIN | ACK))
        w.write(t + 2, tcp_frame(c, server, 40000 + i, 4222, seq[i] + 1, srv_seq[i] + 1, ACK))
    w.close()
    return path


def _c_walk(path: Path) -> int:
    return sum(len(batch) for batch in native.pcap_batches(path))  # type: ignore[arg-type]


def _native(path: Path, coalesce: str = "adjacent") -> int:
    engine = native.NativeReassembler(coalesce=coalesce)
    n = 0
    for _ in engine.process(native.pcap_batches(path)):
        n += 1
    return n


def _native_per_flow(path: Path) -> int:
    return _native(path, "flow")


def _reference(path: Path) -> int:
    n = 0
    with open_capture(path) as reader:
        for _ in Reassembler().process(reader):
            n += 1
    return n


def _timed(fn: Callable[[Path], object], path: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(path: Path, runs: int, label: str) -> None:
    size = path.stat().st_size
    raw_read(str(path))  # warm the page cache
    walk = struct_walk(str(path))
    packets = walk["packets"]
    rows = [
        ("raw read", lambda p: raw_read(str(p))),
        ("struct walk", lambda p: struct_walk(str(p))),
        ("C walk+decode", _c_walk),
        ("native engine", _native),
        ("native per flow", _native_per_flow),
        ("reference", _reference),
    ]
    engine = native.NativeReassembler()
    events = sum(1 for _ in engine.process(native.pcap_batches(path)))
    per_flow = _native_per_flow(path)
    ref_events = _reference(path)
    print(f"\n{label}: {path.name}, {size / 1e6:,.1f} MB, {packets:,} packets; "
          f"native: {engine.counters['taken']:,} packets taken in C, "
          f"{engine.counters['reference']:,} by the reference; events: reference "
          f"{ref_events:,}, native {events:,}, per flow {per_flow:,}")
    timings = {name: _timed(fn, path, runs) for name, fn in rows}
    floor = timings["struct walk"]
    print(f"{'row':<15} {'s':>8} {'MB/s':>9} {'packets/s':>12} {'x floor':>8}")
    for name, s in timings.items():
        s = max(s, 1e-9)
        print(f"{name:<15} {s:8.3f} {size / 1e6 / s:9.1f} {packets / s:12,.0f} {s / floor:8.2f}")
    ref, nat = timings["reference"], timings["native engine"]
    print(f"native engine vs reference: {ref / nat:.2f}x faster")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", type=Path, action="append", default=[],
                    help="a classic pcap capture to measure (repeatable)")
    ap.add_argument("--segments", type=int, default=200_000,
                    help="data segments of the generated captures (default 200,000)")
    ap.add_argument("--mss", type=int, default=1448, help="segment size of 'interleaved'")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not native.AVAILABLE:
        sys.exit("reassembly._engine is not built: python setup.py build_ext --inplace")
    for path in args.capture:
        bench(path, args.runs, "capture")
    if args.capture:
        return
    with tempfile.TemporaryDirectory(prefix="msgcap-bench-engine-") as tmp:
        synth = _synthetic(args.segments)
        try:
            bench(synth, args.runs, "synthetic")
        finally:
            synth.unlink(missing_ok=True)
        bench(interleaved(Path(tmp) / "interleaved.pcap", args.segments, args.mss),
              args.runs, "interleaved")


if __name__ == "__main__":
    main()

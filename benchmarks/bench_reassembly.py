"""Throughput of the reassembly pass next to a raw read and tshark on the same file.

Usage:
    python benchmarks/bench_reassembly.py CAPTURE [CAPTURE...]
    python benchmarks/bench_reassembly.py --synthetic 200000   # writes a bulk TCP capture

Each stage runs in its own child process so its peak RSS is its own:
  raw-read     read the file in 1 MiB blocks (the I/O ceiling)
  frames       msgcap's capture reader only (pcap/pcapng record walk)
  reassembly   reader + link/IP/defrag + TCP/UDP reassembly, all events consumed
  tshark       `tshark -r FILE -q -z conv,tcp` when tshark is installed
Nothing here is asserted; numbers are printed for the README / closing notes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAGES = {
    "raw-read": """
with open(PATH, "rb") as f:
    while f.read(1 << 20):
        pass
""",
    "frames": """
from reassembly.capture import open_capture
with open_capture(PATH) as r:
    for _ in r:
        pass
""",
    "reassembly": """
from reassembly.engine import read_events
for _ in read_events(PATH):
    pass
""",
}

_WRAPPER = """
import json, sys, time
PATH = sys.argv[1]
t0 = time.perf_counter()
{body}
elapsed = time.perf_counter() - t0
with open("/proc/self/status") as f:  # VmHWM: ru_maxrss would include the parent's
    rss_mb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
print(json.dumps({{"s": elapsed, "rss_mb": rss_mb}}))
"""


def _count_frames(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from reassembly.capture import open_capture

    with open_capture(path) as r:
        return sum(1 for _ in r)


def _child(body: str, path: Path) -> dict:
    code = _WRAPPER.format(body=body)
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _tshark(path: Path) -> dict | None:
    exe = shutil.which("tshark")
    if not exe:
        return None
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [exe, "-r", str(path), "-q", "-z", "conv,tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    return {"s": time.perf_counter() - t0, "rss_mb": usage.ru_maxrss / 1024, "status": status}


def bench(path: Path) -> None:
    size = path.stat().st_size
    frames = _count_frames(path)
    print(f"\n{path}  {size / 1e6:.1f} MB  {frames} frames")
    print(f"{'stage':<12} {'seconds':>8} {'packets/s':>12} {'MB/s':>8} {'peak RSS MB':>12}")
    results = {name: _child(body, path) for name, body in STAGES.items()}
    tshark = _tshark(path)
    if tshark:
        results["tshark"] = tshark
    for name, r in results.items():
        s = max(r["s"], 1e-9)
        print(f"{name:<12} {s:8.2f} {frames / s:12,.0f} {size / 1e6 / s:8.1f} {r['rss_mb']:12.0f}")
    if not tshark:
        print("tshark       not installed (apt-get install tshark) — no comparison")


def _synthetic(segments: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.reassembly.synth import ACK, PSH, PcapWriter, tcp_frame

    path = Path(tempfile.gettempdir()) / f"msgcap-bulk-{segments}.pcap"
    w = PcapWriter(path)
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    payload = b"PUB bench.subject 1300\r\n" + b"x" * 1300 + b"\r\n"
    for conn in range(10):
        seq = 1000 + conn
        for i in range(segments // 10):
            w.write(
                1_700_000_000_000_000 + i,
                tcp_frame(c, s, 40000 + conn, 4222, seq, 1, ACK | PSH, payload),
            )
            seq += len(payload)
    w.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument(
        "--synthetic",
        type=int,
        metavar="SEGMENTS",
        help="generate a bulk NATS-like TCP capture with this many segments",
    )
    args = ap.parse_args()
    paths = list(args.captures)
    if args.synthetic:
        paths.append(_synthetic(args.synthetic))
    if not paths:
        ap.error("give a capture or --synthetic N")
    for p in paths:
        bench(p)


if __name__ == "__main__":
    main()

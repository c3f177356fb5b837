"""Throughput of ``msgcap dissect`` on the Pulsar client sample repeated (its five codecs).

    python benchmarks/bench_pulsar_replayed.py                   # ~150 MB, 3 runs
    python benchmarks/bench_pulsar_replayed.py --target-mb 50 --runs 1

How the capture is made and what is printed: ``benchmarks/bench_replayed.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replayed import PULSAR, main  # noqa: E402  (a sibling module of this script)

if __name__ == "__main__":
    sys.exit(main(PULSAR))

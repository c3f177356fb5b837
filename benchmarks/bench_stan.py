"""Throughput of ``msgcap dissect`` on a large STAN capture (the sample repeated).

    python benchmarks/bench_stan.py                   # ~150 MB, 3 runs
    python benchmarks/bench_stan.py --target-mb 50 --runs 1

How the capture is made and what is printed: ``benchmarks/bench_replayed.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replayed import STAN, main  # noqa: E402  (a sibling module of this script)

if __name__ == "__main__":
    sys.exit(main(STAN))

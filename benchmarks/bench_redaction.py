"""Throughput of the redaction gate (``dissectors.redaction.redact_bytes``) on kinds of
text it sees: NATS lines without quotes, JSON lines, random bytes, CONNECT lines that all
carry a password.  CPU time of one call on about 1 MB each; prints MB/s, asserts nothing.

    python benchmarks/bench_redaction.py
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dissectors.redaction import redact_bytes  # noqa: E402 - after the sys.path line


def cases() -> dict[str, bytes]:
    rnd = random.Random(1)
    return {
        "NATS lines without quotes": b"".join(
            b"PUB orders.%d 5\r\nhello\r\n" % i for i in range(60000)),
        "JSON lines": b"".join(
            json.dumps({"id": i, "user": f"u{i}", "items": [1, 2, 3], "note": "x" * 20}).encode()
            + b"\r\n" for i in range(12000)),
        "random bytes": rnd.randbytes(1 << 20),
        "CONNECT lines, each with a password": b"".join(
            b'CONNECT {"verbose":false,"user":"u","pass":"pw%d","name":"n"}\r\n' % i
            for i in range(15000)),
    }


def main() -> None:
    print("| text | MB | CPU s | MB/s |\n| --- | ---: | ---: | ---: |")
    for name, data in cases().items():
        t = time.process_time()
        redact_bytes(data)
        dt = max(time.process_time() - t, 1e-6)
        print(f"| {name} | {len(data) / 1e6:.2f} | {dt:.3f} | {len(data) / 1e6 / dt:,.1f} |")


if __name__ == "__main__":
    main()

"""Per-message cost of payload decoding (``dissectors.payload``), by kind of payload.

    python benchmarks/bench_payload.py [--n 20000]

Times ``PayloadDecoding.columns`` (what ``dissect --decode`` adds per message row) with
CPU time of this process, for payloads typical of each decoder, and for binary bytes that
every detector declines (the cost paid by a capture of opaque payloads).  Quoted in
docs/payload-decoding.md; not asserted anywhere.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import cbor2
import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dissectors.payload.schemas import decoding_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    proto = ROOT / "samples" / "payloads" / "shop.proto"
    engine = decoding_for([f"pb.>={proto}#shop.OrderEvent"])
    doc = {"order_id": 1234, "region": "eu", "items": [{"sku": "A-1", "qty": 2}],
           "total": 25.0, "express": True, "note": None}
    order = engine.bindings[0].schema(order_id=7, customer="c-1", status=1,
                                      lines=[{"sku": "B-1", "qty": 1, "price": 2.5}])
    cases = {
        "json (110 B)": (json.dumps(doc).encode(), "orders.eu"),
        "msgpack": (msgpack.packb(doc), "m"),
        "cbor": (cbor2.dumps(doc), "c"),
        "gzip+json": (gzip.compress(json.dumps(doc).encode()), "g"),
        "text": (b"plain 0.0|304qp1u status ok", "t"),
        "protobuf (schema)": (order.SerializeToString(), "pb.x"),
        "binary, declined": (b"\x00" + os.urandom(63), "b"),
    }
    print(f"{'payload':<20} {'us/message':>10}  decoder")
    for name, (data, subject) in cases.items():
        out = engine.columns(data, False, subject)
        t0 = time.process_time()
        for _ in range(args.n):
            engine.columns(data, False, subject)
        us = (time.process_time() - t0) / args.n * 1e6
        print(f"{name:<20} {us:>10.1f}  {out['payload_decoder']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU of the payload dissectors alone: the messages a capture's NATS flows carry,
replayed through the payload dispatch, the decoders and the column accumulator.

    python benchmarks/bench_carried.py /tmp/msgcap-bench/stan-x20mb.pcap
    MSGCAP_PROTO_WALK=0 python benchmarks/bench_carried.py CAPTURE --rounds 5

Why: a whole ``msgcap dissect`` run of a STAN or Liftbridge capture spends most of its
CPU around the payload dissectors (reassembly, the NATS scan, the conveyor, Parquet),
and its CPU seconds move by 10-30 % with the machine's load; the part from the hand-off
of a carried message (``ScopeDispatcher.dispatch``) to its row in the column buffer
(``PayloadRows``, converted to Arrow) is measured here on its own, many times, in one
process.  The messages are recorded once from a real run (every ``CarriedMessage`` the
dispatcher is offered, with its scope), then each round gives them, in order, to fresh
scopes: ``decode`` is the dispatch and decode (thread CPU per message), ``rows`` moving
the ``ColumnBatch`` rows into ``PayloadRows`` and converting them (the conveyor's own
work, ids and envelopes, is not included; dict rows are only counted).  The first round
warms up (imports, schemas) and is not printed; the garbage collector is settled as in a
command-line run (``analyzer.cliutil.settle_gc``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.cliutil import settle_gc  # noqa: E402
from analyzer.pipeline import Options, dissect_capture  # noqa: E402
from dissectors.api import CarriedMessage, ColumnBatch, Record  # noqa: E402
from dissectors.dispatch import ScopeDispatcher  # noqa: E402
from dissectors.schema import arrow_schema  # noqa: E402
from dissectors.tables import TableSpec  # noqa: E402

_FLUSH_ROWS = 16384  # as the conveyor flushes an accumulator (analyzer.pipeline)


def record(capture: Path) -> tuple[list[tuple[int, CarriedMessage]], list[Any]]:
    """(scope index, message) of every offer in a run, and the scopes' dissectors."""
    seen: list[tuple[int, CarriedMessage]] = []
    ids: dict[int, int] = {}
    dissectors: list[Any] = []
    dispatch = ScopeDispatcher.dispatch

    def spy(self: ScopeDispatcher, msg: CarriedMessage) -> list[Record]:
        if not dissectors:
            dissectors.extend(self.by_name.values())
        seen.append((ids.setdefault(id(self), len(ids)), msg))
        return dispatch(self, msg)

    with tempfile.TemporaryDirectory() as out, \
            mock.patch.object(ScopeDispatcher, "dispatch", spy):
        dissect_capture(capture, Path(out), Options(overwrite=True))
    return seen, dissectors


def replay(messages: list[tuple[int, CarriedMessage]], dissectors: list[Any],
           options: dict[str, Any]) -> tuple[float, float, int, int]:
    """(decode CPU s, rows CPU s, rows moved, dict records) of one round."""
    scopes: dict[int, ScopeDispatcher] = {}
    out: list[list[Record]] = []
    clock = time.thread_time
    t0 = clock()
    for index, msg in messages:
        scope = scopes.get(index)
        if scope is None:
            scope = scopes[index] = ScopeDispatcher(dissectors, options, strict=False)
        out.append(scope.dispatch(msg))
    t1 = clock()
    accs: dict[str, Any] = {}
    specs: dict[str, TableSpec] = {d.name: d for dis in dissectors for d in dis.tables}
    moved = records = 0
    for recs in out:
        for rec in recs:
            if type(rec) is not ColumnBatch:
                records += 1
                continue
            acc = accs.get(rec.table)
            if acc is None:
                acc = accs[rec.table] = rec.fmt.accumulator()
            moved += 1
            acc.move(rec.rows, rec.n, 1, moved, int(rec.direction), None, "10.0.0.1", 40000,
                     "10.0.0.2", 4222)
            if len(acc) >= _FLUSH_ROWS:
                acc.to_batch(arrow_schema(specs[rec.table]), "0" * 16)
    for table, acc in accs.items():
        if len(acc):
            acc.to_batch(arrow_schema(specs[table]), "0" * 16)
    return t1 - t0, clock() - t1, moved, records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    args = ap.parse_args(argv)
    messages, dissectors = record(args.capture)
    # the session options of a columnar run (analyzer.pipeline), but the memory budget
    options = {"payload_cap": Options().payload_cap, "keep_secrets": False, "columnar": True}
    if not messages:
        print(f"{args.capture}: no carried message was offered to a payload dissector")
        return 1
    settle_gc()  # as a command-line run does (the recorded messages frozen with the rest)
    replay(messages, dissectors, options)  # warm-up
    decode, rows = [], []
    for _ in range(args.rounds):
        d, r, moved, records = replay(messages, dissectors, options)
        decode.append(d)
        rows.append(r)
    n = len(messages)
    print(f"{args.capture}: {n:,} carried messages, {moved:,} rows to columns, "
          f"{records:,} dict records; {args.rounds} rounds, thread CPU")
    for name, secs in (("decode", decode), ("rows", rows)):
        print(f"  {name:6} median {statistics.median(secs):.3f} s "
              f"({statistics.median(secs) / n * 1e6:.1f} us/msg), "
              f"min {min(secs):.3f} s, runs {', '.join(f'{s:.3f}' for s in secs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `msgcap` command line.

Exit codes (documented in the README): 0 clean, 1 completed with anomalies
(degraded), 2 failed (bad arguments, unreadable input, internal error).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from analyzer.flowsummary import iter_flow_rows
from analyzer.progress import capture_progress
from reassembly.capture import CaptureFormatError, open_capture
from reassembly.engine import Reassembler, capture_damage_events
from reassembly.events import Anomaly, Direction, StreamClose, StreamData, StreamGap

EXIT_CLEAN, EXIT_DEGRADED, EXIT_FAILED = 0, 1, 2


def _ts(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _anomaly_json(a: Anomaly) -> dict:
    return {
        "kind": a.kind,
        "detail": a.detail,
        "frame": a.frame,
        "flow_id": a.flow.flow_id if a.flow else None,
    }


def cmd_flows(args: argparse.Namespace) -> int:
    rows: list[dict] = []
    anomalies: list[Anomaly] = []
    for path in args.captures:
        with open_capture(path) as reader, capture_progress(reader, "flows") as wrap:
            for row in iter_flow_rows(reader, anomalies=anomalies, wrap=wrap):
                if len(args.captures) > 1:
                    row = {"capture": str(path), **row}
                rows.append(row)
    rows.sort(key=lambda r: (r.get("capture", ""), r["flow_id"]))
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_flows(rows)
    if anomalies:
        kinds = Counter(a.kind for a in anomalies)
        summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        Console(stderr=True).print(f"[yellow]anomalies:[/] {summary}")
    return EXIT_DEGRADED if anomalies else EXIT_CLEAN


def _print_flows(rows: list[dict]) -> None:
    table = Table(title=f"{len(rows)} flows", header_style="bold")
    several = bool(rows) and "capture" in rows[0]
    if several:
        table.add_column("capture")
    for col in (
        "id",
        "proto",
        "client",
        "server",
        "first packet (UTC)",
        "secs",
        "pkts c/s",
        "stream bytes c/s",
        "gap bytes c/s",
        "conflicts",
        "roles by",
    ):
        table.add_column(col, justify="left" if col in ("proto", "client", "server") else "right")
    for r in rows:
        table.add_row(
            *([r["capture"]] if several else []),
            str(r["flow_id"]),
            r["transport"],
            f"{r['client_ip']}:{r['client_port']}",
            f"{r['server_ip']}:{r['server_port']}",
            _ts(r["ts_first_ns"]),
            f"{(r['ts_last_ns'] - r['ts_first_ns']) / 1e9:.3f}",
            f"{r['packets_c2s']}/{r['packets_s2c']}",
            f"{r['stream_bytes_c2s']}/{r['stream_bytes_s2c']}",
            f"{r['gap_bytes_c2s']}/{r['gap_bytes_s2c']}",
            str(r["overlap_conflicts_c2s"] + r["overlap_conflicts_s2c"]),
            r["role_source"],
        )
    # a pipe or file gets the whole table rather than one squeezed to 80 columns
    Console(width=None if sys.stdout.isatty() else 220).print(table)


def cmd_follow(args: argparse.Namespace) -> int:
    wanted = {"c2s": {Direction.C2S}, "s2c": {Direction.S2C}, "both": set(Direction)}[
        args.direction
    ]
    out = sys.stdout.buffer
    err = Console(stderr=True)
    found = False
    gaps = 0
    with open_capture(args.capture) as reader, capture_progress(reader, "follow") as wrap:
        for ev in wrap(Reassembler().process(reader)):
            if isinstance(ev, StreamData | StreamGap) and ev.flow.flow_id == args.flow:
                found = True
                if ev.direction not in wanted:
                    continue
                if isinstance(ev, StreamData):
                    out.write(ev.data)
                    continue
                gaps += 1
                if args.raw:
                    err.print(
                        f"gap {ev.direction.short} offset {ev.offset} "
                        f"{ev.nbytes} bytes ({ev.reason})"
                    )
                else:
                    out.write(b"[%d bytes missing]" % ev.nbytes)
            elif isinstance(ev, StreamClose) and ev.flow.flow_id == args.flow:
                found = True
                break
        damage = capture_damage_events(reader)
    out.flush()
    if not found:
        err.print(f"[red]no TCP flow {args.flow} in {args.capture}[/] (see `msgcap flows`)")
        return EXIT_FAILED
    return EXIT_DEGRADED if gaps or damage else EXIT_CLEAN


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msgcap", description="Forensic analyzer for message-broker packet captures."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("flows", help="one row per TCP/UDP flow")
    p.add_argument("captures", nargs="+", metavar="CAPTURE")
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.set_defaults(func=cmd_flows)

    p = sub.add_parser("follow", help="write the reassembled bytes of one TCP flow to stdout")
    p.add_argument("capture", metavar="CAPTURE")
    p.add_argument("--flow", type=int, required=True, metavar="FLOW_ID")
    p.add_argument("--direction", choices=("c2s", "s2c", "both"), default="both")
    p.add_argument(
        "--raw",
        action="store_true",
        help="write only captured bytes; list gaps on stderr instead of inline",
    )
    p.set_defaults(func=cmd_follow)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CaptureFormatError, OSError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

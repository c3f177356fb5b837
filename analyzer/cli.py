"""The `msgcap` command line.

Exit codes (documented in the README): 0 clean, 1 completed with anomalies
(degraded), 2 failed (bad arguments, unreadable input, internal error).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from analyzer.flowsummary import iter_flow_rows
from analyzer.progress import capture_progress
from reassembly.capture import CaptureFormatError, open_capture
from reassembly.engine import Reassembler, capture_damage_events
from reassembly.events import Anomaly, Direction, StreamClose, StreamData, StreamGap

EXIT_CLEAN, EXIT_DEGRADED, EXIT_FAILED = 0, 1, 2


def _wide_console() -> Console:
    """A pipe or file gets whole tables rather than ones squeezed to 80 columns."""
    return Console(width=None if sys.stdout.isatty() else 220)


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
    _wide_console().print(table)


def cmd_follow(args: argparse.Namespace) -> int:
    if args.decoded:
        if args.raw:
            Console(stderr=True).print(
                "[red]error:[/] --raw and --decoded cannot be combined\n"
                "[bold]fix:[/] --raw writes captured bytes, --decoded decoded messages: give one"
            )
            return EXIT_FAILED
        from analyzer.transcript import run_follow_decoded

        return run_follow_decoded(args)
    if Path(args.capture).is_dir():
        Console(stderr=True).print(
            f"[red]error:[/] {args.capture} is a directory; raw bytes come from a capture\n"
            "[bold]fix:[/] give the capture file, or add --decoded to follow a dataset's flow"
        )
        return EXIT_FAILED
    wanted = {"c2s": {Direction.C2S}, "s2c": {Direction.S2C}, "both": set(Direction)}[
        args.direction
    ]
    from dissectors.redaction import GatedWriter

    out = sys.stdout.buffer if args.keep_secrets else GatedWriter(sys.stdout.buffer)
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


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more bytes")
    return value


def _parse_decode_as(items: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in items:
        port, sep, name = item.partition("=")
        if not sep or not port.isdigit() or not name:
            raise argparse.ArgumentTypeError(f"--decode-as wants PORT=NAME, got {item!r}")
        out[int(port)] = name
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of processes")
    return value


def _dissect_one(path: str, out: str, options, show_progress: bool, workers: int = 1):
    from analyzer.parallel import ProgressWrap
    from analyzer.pipeline import dissect_capture

    label = f"dissect {path}" + (f" ({workers} workers)" if workers > 1 else "")
    wrap = ProgressWrap(label) if show_progress else None
    return dissect_capture(path, out, options, wrap=wrap, workers=workers)


def cmd_dissect(args: argparse.Namespace) -> int:
    from analyzer.pipeline import Options
    from dissectors.registry import discover

    registry = discover()
    for origin, why in registry.errors:
        Console(stderr=True).print(f"[yellow]plugin {origin} not loaded:[/] {why}")
    try:
        decode_as = _parse_decode_as(args.decode_as)
        for name in decode_as.values():
            registry.get(name)
    except (argparse.ArgumentTypeError, KeyError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        Console(stderr=True).print(f"[red]error:[/] {message}")
        return EXIT_FAILED
    if args.keylog and not Path(args.keylog).is_file():
        Console(stderr=True).print(
            f"[red]error:[/] key log {args.keylog} not found (give an SSLKEYLOGFILE path)"
        )
        return EXIT_FAILED
    options = Options(
        payload_cap=args.payload_cap,
        decode_as=decode_as,
        overwrite=args.overwrite,
        keep_secrets=args.keep_secrets,
        keylog=args.keylog,
    )
    started = time.perf_counter()
    results = []
    if args.workers > 1 and len(args.captures) == 1:
        # one capture: split by flow across the processes (analyzer.parallel)
        results = [_dissect_one(args.captures[0], args.output, options, True, args.workers)]
    elif args.workers > 1:
        # several captures: as many at once, one process each (each capture whole)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            futures = [
                pool.submit(_dissect_one, p, args.output, options, False) for p in args.captures
            ]
            results = [f.result() for f in futures]
    else:
        results = [_dissect_one(p, args.output, options, True) for p in args.captures]
    elapsed = time.perf_counter() - started
    manifest = results[-1].manifest
    print_run_summary(results, manifest, elapsed)
    return {"clean": EXIT_CLEAN, "degraded": EXIT_DEGRADED}.get(manifest["status"], EXIT_FAILED)


def print_run_summary(results, manifest: dict, elapsed: float) -> None:
    console = Console(stderr=True)
    rows: Counter = Counter()
    anomalies: Counter = Counter()
    protocols: Counter = Counter()
    packets = size = 0
    for r in results:
        rows.update(r.rows)
        anomalies.update(r.anomalies)
        protocols.update(r.flows_by_protocol)
        packets += r.packets
        size += r.bytes
    for title, what, counts in (
        ("rows per table", "table", rows),
        ("flows by protocol", "protocol", protocols),
        ("anomalies by kind", "kind", anomalies),
    ):
        if counts:
            console.print(_count_table(title, what, counts))
    secs = max(elapsed, 1e-9)
    console.print(
        f"{len(results)} capture(s), {packets:,} packets, {size / 1e6:.1f} MB in {elapsed:.2f} s "
        f"({packets / secs:,.0f} packets/s, {size / 1e6 / secs:.1f} MB/s); "
        f"status [bold]{manifest['status']}[/]"
    )


def _count_table(title: str, what: str, counts: Counter) -> Table:
    t = Table(title=title, header_style="bold")
    t.add_column(what)
    t.add_column("count", justify="right")
    for name, n in sorted(counts.items()):
        t.add_row(name, f"{n:,}")
    return t


def cmd_protocols(args: argparse.Namespace) -> int:
    from dissectors.registry import discover

    reg = discover()
    t = Table(title="dissectors", header_style="bold")
    for col in ("name", "transport", "ports", "tables", "from"):
        t.add_column(col)
    every = {**reg.dissectors, **reg.payload}
    for name in sorted(every):
        d = every[name]
        carried = name in reg.payload
        t.add_row(
            name,
            f"in {'/'.join(d.carriers)}" if carried else d.transport.name.lower(),
            ", ".join(str(p) for p in getattr(d, "default_ports", ())) or "-",
            ", ".join(s.name for s in d.tables),
            reg.origins.get(name, ""),
        )
    _wide_console().print(t)
    for origin, why in reg.errors:
        Console(stderr=True).print(f"[yellow]plugin {origin} not loaded:[/] {why}")
    return EXIT_DEGRADED if reg.errors else EXIT_CLEAN


def cmd_schema(args: argparse.Namespace) -> int:
    from analyzer.pipeline import tables_for
    from dissectors.registry import discover

    specs = {s.name: s for s in tables_for(discover())}
    if args.table and args.table not in specs:
        Console(stderr=True).print(
            f"[red]no table {args.table!r}[/] (tables: {', '.join(sorted(specs))})"
        )
        return EXIT_FAILED
    for name in [args.table] if args.table else sorted(specs):
        spec = specs[name]
        t = Table(
            title=f"{spec.name} (v{spec.version}): {spec.description}",
            header_style="bold",
            title_justify="left",
        )
        for col in ("column", "type", "null", "meaning"):
            t.add_column(col)
        for f in spec.columns:
            t.add_row(f.name, str(f.type), "yes" if f.nullable else "no", f.description)
        _wide_console().print(t)
    return EXIT_CLEAN


def cmd_summary(args: argparse.Namespace) -> int:
    from analyzer.summary import run_summary

    return run_summary(args)


def cmd_ladder(args: argparse.Namespace) -> int:
    from analyzer.transcript import run_ladder

    return run_ladder(args)


def cmd_report(args: argparse.Namespace) -> int:
    from analyzer.report import run_report

    return run_report(args)


def _add_view_options(p: argparse.ArgumentParser, decoded: bool = False) -> None:
    """Options shared by summary / follow --decoded / ladder / report."""
    if decoded:
        p.add_argument(
            "--decoded",
            action="store_true",
            help="a transcript of the decoded messages (one line each) instead of bytes; "
            "CAPTURE may then also be a dataset directory",
        )
    p.add_argument(
        "--capture", dest="capture_id", metavar="ID",
        help="capture id (prefix) when a dataset holds several captures",
    )
    p.add_argument("--keylog", metavar="FILE", help="NSS key log for QUIC decryption (captures)")
    p.add_argument("--decode-as", action="append", default=[], metavar="PORT=NAME")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or notes on stderr")


def _add_view_parsers(sub) -> None:
    """``msgcap summary|ladder|report`` (analyzer/summary.py, transcript.py, report/)."""
    src = "a capture (dissected into a temporary dataset first) or a dataset directory"
    p = sub.add_parser("summary", help="overview of a capture or dataset")
    p.add_argument("source", metavar="CAPTURE|DATASET", help=src)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="subjects / topics / streams listed (default 10)")
    _add_view_options(p)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("ladder", help="arrow diagram of a flow or of one message's path")
    p.add_argument("source", metavar="CAPTURE|DATASET", help=src)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--flow", type=_non_negative, metavar="ID", help="client ↔ server")
    which.add_argument("--message", type=_non_negative, metavar="RECORD_ID",
                       help="publisher → server → subscribers (NATS, Pulsar)")
    p.add_argument("--limit", type=int, default=200, metavar="N",
                   help="messages drawn for --flow (0: all; default 200)")
    p.add_argument("--width", type=int, metavar="COLS", help="diagram width (default: terminal)")
    _add_view_options(p)
    p.set_defaults(func=cmd_ladder)

    p = sub.add_parser("report", help="one self-contained HTML report with plots")
    p.add_argument("source", metavar="DATASET", help=src)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="HTML file to write")
    p.add_argument("--flow", type=_non_negative, metavar="ID",
                   help="conversation the sequence diagram opens with")
    p.add_argument("--title", help="page title")
    _add_view_options(p)
    p.set_defaults(func=cmd_report)


def cmd_spark_ingest(args: argparse.Namespace) -> int:
    from analyzer.spark.cli import run_ingest  # pyspark is imported only here

    return run_ingest(args)


def cmd_spark_analyze(args: argparse.Namespace) -> int:
    from analyzer.spark.cli import run_analyze

    return run_analyze(args)


def _add_spark_parser(sub) -> None:
    """``msgcap spark ingest|analyze`` (docs/spark.md)."""
    sp = sub.add_parser("spark", help="ingestion and analyses on Spark (PySpark)")
    ssub = sp.add_subparsers(dest="spark_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    common.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting"
    )
    p = ssub.add_parser(
        "ingest", parents=[common], help="captures -> the dataset `dissect` writes, on Spark"
    )
    p.add_argument("captures", nargs="+", metavar="CAPTURE")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="dataset directory")
    p.add_argument(
        "--split-bytes", type=int, default=128 << 20, metavar="N",
        help="split captures larger than N bytes into ranges of N bytes",
    )
    p.add_argument("--partitions", type=int, metavar="N", help="tasks of the dissection stage")
    p.add_argument(
        "--merge-scopes", action=argparse.BooleanOptionalAction, default=None,
        help="dissect IP pairs that share a server endpoint in one task (default: when "
        "payload dissectors such as STAN are installed; see docs/spark.md)",
    )
    p.add_argument("--decode-as", action="append", default=[], metavar="PORT=NAME")
    p.add_argument("--payload-cap", type=_non_negative, default=4096, metavar="BYTES")
    p.add_argument("--keylog", metavar="FILE", help="NSS key log for QUIC decryption")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_spark_ingest)
    p = ssub.add_parser(
        "analyze", parents=[common], help="cross-flow analyses of a dataset -> Parquet"
    )
    p.add_argument("dataset", metavar="DATASET")
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("--only", action="append", metavar="NAME", help="run only these analyses")
    p.set_defaults(func=cmd_spark_analyze)


def cmd_new_dissector(args: argparse.Namespace) -> int:
    from analyzer.scaffold import ScaffoldError, scaffold

    try:
        root = scaffold(args.name, args.transport, args.output)
    except ScaffoldError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        return EXIT_FAILED
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    console = Console()
    console.print(f"wrote {root}/: {', '.join(files)}")
    console.print(f"next: cd {root} && pip install -e . && pytest && msgcap protocols")
    return EXIT_CLEAN


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
    p.add_argument("--flow", type=_non_negative, required=True, metavar="FLOW_ID")
    p.add_argument("--direction", choices=("c2s", "s2c", "both"), default="both")
    p.add_argument(
        "--raw",
        action="store_true",
        help="write only captured bytes; list gaps on stderr instead of inline",
    )
    p.add_argument("--keep-secrets", action="store_true",
                   help="print credentials in the bytes as they are (default: withheld, "
                   "length and SHA-256 kept; see docs/robustness.md)")
    _add_view_options(p, decoded=True)
    p.set_defaults(func=cmd_follow)

    p = sub.add_parser("dissect", help="decode captures into a Parquet dataset")
    p.add_argument("captures", nargs="+", metavar="CAPTURE")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="dataset directory")
    p.add_argument(
        "--decode-as",
        action="append",
        default=[],
        metavar="PORT=NAME",
        help="force a dissector for a TCP port (repeatable)",
    )
    p.add_argument(
        "--payload-cap",
        type=_non_negative,
        default=4096,
        metavar="BYTES",
        help="payload bytes kept per message (length and SHA-256 always kept)",
    )
    p.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="processes to use (default 1). One CAPTURE: split across N processes by "
        "flow; each reads the whole capture and writes the rows of its share of the "
        "flows to its own part-<k>.parquet (the same rows as one process; compare "
        "sorted by record_id). Several CAPTUREs: N captures at once, one process each",
    )
    p.add_argument(
        "--keylog",
        metavar="FILE",
        help="NSS key log (SSLKEYLOGFILE format) with TLS secrets, for QUIC decryption",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace a capture already present in OUT"
    )
    p.add_argument(
        "--keep-secrets",
        action="store_true",
        help="keep credentials (NATS CONNECT pass, auth_token, jwt, sig, nkey) in the "
        "tables; by default each is replaced by its length and SHA-256",
    )
    p.set_defaults(func=cmd_dissect)

    _add_spark_parser(sub)
    _add_view_parsers(sub)

    p = sub.add_parser("protocols", help="list the dissectors found (built-in and plugins)")
    p.set_defaults(func=cmd_protocols)

    p = sub.add_parser("schema", help="print the declared columns of the output tables")
    p.add_argument("table", nargs="?")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser(
        "new-dissector", help="write an installable plugin package to start a dissector from"
    )
    p.add_argument("name", metavar="NAME", help="protocol name (also its table's name)")
    p.add_argument(
        "--transport",
        choices=("tcp", "udp", "nats-payload"),
        default="tcp",
        help="byte stream, datagrams, or a payload format carried in NATS messages",
    )
    p.add_argument(
        "-o", "--output", default=".", metavar="DIR", help="where msgcap-NAME/ is created"
    )
    p.set_defaults(func=cmd_new_dissector)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CaptureFormatError, OSError, FileExistsError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only light modules at import time: `msgcap --help` must cost little more than the
# interpreter (rich, pyarrow, the reassembly and dissectors are imported by the
# command that needs them; tests/analyzer/test_cli_io.py counts it).
from analyzer.cliutil import (
    CAPTURE_FIX,
    EXIT_CLEAN,
    EXIT_DEGRADED,
    EXIT_FAILED,
    STDIN,
    TIME_FORMATS,
    TIME_HELP,
    UserError,
    check_capture,
    check_keylog,
    check_output_dir,
    defer_gc,
    flow_ids_text,
    format_ts,
    name_stdin_input,
    one_blas_thread,
    out_console,
    parse_decode_as,
    prefer_jemalloc,
    print_error,
    print_table,
    print_user_error,
    settle_gc,
    silence_stdout,
    skip_pandas_probe,
    stdin_spooled,
    time_label,
)
from analyzer.runoptions import add_payload_decoding_args  # light, like cliutil
from dissectors.options import DEFAULT_PAYLOAD_CAP  # no imports of its own

if TYPE_CHECKING:
    from reassembly.events import Anomaly

__all__ = ["EXIT_CLEAN", "EXIT_DEGRADED", "EXIT_FAILED", "build_parser", "main"]


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _anomaly_json(a: Anomaly) -> dict:
    return {
        "kind": a.kind,
        "detail": a.detail,
        "frame": a.frame,
        "flow_id": a.flow.flow_id if a.flow else None,
    }


def _check_captures(paths: list[str]) -> None:
    """Every CAPTURE checked before any work (and before an output directory exists)."""
    if sum(p == STDIN for p in paths) > 1:
        raise UserError("- (standard input) is given more than once",
                        "read standard input once; give the other captures as files")
    for path in paths:
        check_capture(path)


def cmd_flows(args: argparse.Namespace) -> int:
    _check_captures(args.captures)
    decode_as = parse_decode_as(args.decode_as)
    if args.keylog:
        check_keylog(args.keylog)
    from analyzer.flowsummary import iter_decoded_flow_rows, iter_flow_rows
    from analyzer.progress import capture_progress
    from reassembly.capture import open_capture

    if args.transport_only:
        if decode_as or args.keylog:
            raise UserError("--transport-only decodes nothing, so --decode-as and --keylog "
                            "have no effect with it", "drop one or the other")

        def rows_of(reader, anomalies, wrap):
            return iter_flow_rows(reader, anomalies=anomalies, wrap=wrap)
    else:
        skip_pandas_probe()
        from analyzer.runoptions import options_from_args
        from dissectors.registry import discover

        registry = discover()
        options = options_from_args(args, registry)

        def rows_of(reader, anomalies, wrap):
            return iter_decoded_flow_rows(reader, registry, options, anomalies, wrap)

    rows: list[dict] = []
    anomalies: list[Anomaly] = []
    for path in args.captures:
        with open_capture(path) as reader, capture_progress(reader, "flows") as wrap:
            for row in rows_of(reader, anomalies, wrap):
                if len(args.captures) > 1:
                    row = {"capture": str(path), **row}
                rows.append(row)
    rows.sort(key=lambda r: (r.get("capture", ""), r["flow_id"]))
    if args.json:
        from dissectors.redaction import redact_values, write_gated

        write_gated(json.dumps(redact_values(rows), indent=1, default=str) + "\n")
        sys.stdout.flush()
    else:
        _print_flows(rows, args.time)
    if anomalies:
        kinds = Counter(a.kind for a in anomalies)
        summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        _stderr_console().print(f"[yellow]anomalies:[/] {summary}")
    return EXIT_DEGRADED if anomalies else EXIT_CLEAN


def _print_flows(rows: list[dict], time_mode: str = "utc") -> None:
    several = bool(rows) and "capture" in rows[0]
    t0 = min((r["ts_first_ns"] for r in rows), default=None)
    decoded = bool(rows) and "protocol" in rows[0]
    headers = [*(["capture"] if several else []), "id", "transport",
               *(["protocol"] if decoded else []), "client", "server",
               f"first packet ({time_label(time_mode)})", "secs", "pkts c/s",
               "stream bytes c/s", "gap bytes c/s", "conflicts", "roles by"]
    table = []
    for r in rows:
        table.append([
            *([r["capture"]] if several else []),
            str(r["flow_id"]),
            r["transport"],
            *([_protocol_text(r)] if decoded else []),
            f"{r['client_ip']}:{r['client_port']}",
            f"{r['server_ip']}:{r['server_port']}",
            format_ts(r["ts_first_ns"], time_mode, t0),
            f"{(r['ts_last_ns'] - r['ts_first_ns']) / 1e9:.3f}",
            f"{r['packets_c2s']}/{r['packets_s2c']}",
            f"{r['stream_bytes_c2s']}/{r['stream_bytes_s2c']}",
            f"{r['gap_bytes_c2s']}/{r['gap_bytes_s2c']}",
            str(r["overlap_conflicts_c2s"] + r["overlap_conflicts_s2c"]),
            r["role_source"],
        ])
    right = ("id", "secs", "pkts c/s", "stream bytes c/s", "gap bytes c/s", "conflicts")
    print_table(out_console(), f"{len(rows)} flows", headers, table, right=right)


def _protocol_text(row: dict) -> str:
    """``nats``, ``nats over websocket/tls``, ``tls (encrypted)``, ``-`` (unclaimed)."""
    layers = [x for x in row.get("layers") or [] if x != row.get("protocol")]
    name = row.get("protocol") or "-"
    if not layers:
        return name
    under = "/".join(reversed(layers)).replace("tls-encrypted", "tls")
    if name == "tls" and layers == ["tls-encrypted"]:
        return "tls (encrypted)"
    return f"{name} over {under}"


def cmd_follow(args: argparse.Namespace) -> int:
    if args.decoded:
        if args.raw:
            raise UserError(
                "--raw and --decoded cannot be combined",
                "--raw writes captured bytes, --decoded decoded messages: give one",
            )
        skip_pandas_probe()
        from analyzer.transcript import run_follow_decoded

        return run_follow_decoded(args)
    if args.json:
        raise UserError("--json needs --decoded (raw follow writes the flow's bytes)",
                        "add --decoded for one JSON object per message")
    if args.capture != STDIN and Path(args.capture).is_dir():
        raise UserError(
            f"{args.capture} is a directory; raw bytes come from a capture",
            "give the capture file, or add --decoded to follow a dataset's flow",
        )
    check_capture(args.capture)
    if args.keylog:
        if args.transport_only:
            raise UserError("--transport-only writes the TCP bytes as captured, so --keylog "
                            "decrypts nothing there",
                            "drop --transport-only to follow the decrypted bytes")
        check_keylog(args.keylog)
    from analyzer.progress import capture_progress
    from dissectors.redaction import GatedWriter
    from reassembly.capture import open_capture

    out = sys.stdout.buffer if args.keep_secrets else GatedWriter(sys.stdout.buffer)
    follow = _FollowedBytes(args, out, _stderr_console())
    with open_capture(args.capture) as reader, capture_progress(reader, "follow") as wrap:
        follow.run(wrap, reader)
    out.flush()
    if not follow.found and follow.streamless:
        raise UserError(
            f"flow {args.flow} of {args.capture} carries no stream bytes (a UDP flow: only "
            "the streams of a QUIC connection whose secrets are known can be followed)",
            "give --keylog FILE with its secrets, or follow its datagrams' messages with "
            "`msgcap follow --decoded`",
        )
    if not follow.found:
        what = "TCP or QUIC" if follow.quic_seen else "TCP"
        raise UserError(
            f"no {what} flow {args.flow} in {args.capture} ({what} flow ids: "
            f"{flow_ids_text(follow.seen)})",
            f"list the flows with `msgcap flows {args.capture}`",
        )
    return EXIT_DEGRADED if follow.degraded else EXIT_CLEAN


class _FollowedBytes:
    """`msgcap follow` without --decoded: the bytes of one flow as its protocol sees them.

    Why layered: a TLS flow whose secrets are known (``--keylog``, or a pcapng Decryption
    Secrets Block) is followed decrypted and a WebSocket flow as its message payloads
    (unmasked, inflated), the same bytes the dissectors read -- as QUIC streams are.  A
    TLS flow without its secrets is never written as if its records were the protocol:
    the ciphertext becomes ``[N bytes of TLS, c2s, encrypted]`` inline (listed on stderr
    with ``--raw``), and the exit status (1) says the output is incomplete.  ``--transport-only``
    keeps the TCP bytes as captured (what ``tshark -z follow,tcp,raw`` prints).
    """

    def __init__(self, args: argparse.Namespace, out, err) -> None:
        from reassembly.events import Direction

        self.args, self.out, self.err = args, out, err
        self.flow: int = args.flow
        self.raw: bool = args.raw
        self.wanted = {"c2s": {Direction.C2S}, "s2c": {Direction.S2C},
                       "both": set(Direction)}[args.direction]
        self.found = False
        self.degraded = False
        self.seen: set[int] = set()  # TCP/QUIC flow ids met, for the hint
        self.streamless = False  # the flow was met, but not as a byte stream (UDP)
        self.quic_seen = False  # QUIC streams were met (their flow ids are in ``seen``)
        self.encrypted = False  # the TLS layer passes this flow's records undecrypted
        self.pending = [0, 0]  # ciphertext bytes not yet reported, per direction
        self.stream: tuple[int, int] | None = None  # (QUIC stream, direction) last written
        self.roles: _JoinedRoles | None = None  # not with --transport-only

    def run(self, wrap, reader) -> None:
        from reassembly.engine import Reassembler, capture_damage_events, capture_events
        from reassembly.events import StreamClose, StreamData, StreamGap

        if self.args.transport_only:
            events = Reassembler().process(reader)
        else:
            keylog = None
            if self.args.keylog:
                from reassembly.quic.keylog import KeyLog

                keylog = KeyLog.from_file(self.args.keylog)
            from analyzer.serverports import server_ports
            from dissectors.registry import discover

            # who is client decided as `msgcap dissect` decides it (the dissectors' ports,
            # and for a flow joined late the ops it shows: ``_JoinedRoles``)
            registry, decode_as = discover(), parse_decode_as(self.args.decode_as)
            ports = server_ports(registry, decode_as)
            self.roles = _JoinedRoles(registry, decode_as)
            events = capture_events(reader, keylog=keylog, server_ports=ports,
                                    roles=self.roles.swaps)
        for ev in wrap(events):
            t = type(ev)
            flow = getattr(ev, "flow", None)
            if flow is None or flow.flow_id != self.flow:
                if t is StreamClose:
                    self.seen.add(flow.flow_id)
                elif t is StreamData and ev.stream_id is not None:
                    self.seen.add(flow.flow_id)
                    self.quic_seen = True
                continue
            if t is StreamData or t is StreamGap:
                self.found = True
                for out in self.roles.settled(ev) if self.roles is not None else (ev,):
                    if out.direction in self.wanted:
                        self._stream_event(out)
            elif t is StreamClose:
                self.found = True
                break
            else:
                self.streamless = True
                self._layer_event(ev)
        if self.roles is not None:  # the flow ended while detection still held it
            for ev in self.roles.settled(None):
                if ev.direction in self.wanted:
                    self._stream_event(ev)
        self._flush_encrypted()
        self.degraded |= bool(capture_damage_events(reader))

    def _stream_event(self, ev) -> None:
        from reassembly.events import StreamData, gap_wording

        d = ev.direction
        if ev.stream_id is not None and not self.raw and self.stream != (ev.stream_id, d):
            self._flush_encrypted()
            self.out.write(b"[QUIC stream %d %s]" % (ev.stream_id, d.short.encode()))
        self.stream = (ev.stream_id, d) if ev.stream_id is not None else None
        if type(ev) is StreamData:
            if self.encrypted:
                if self.pending[1 - d]:
                    self._flush_encrypted()
                self.pending[d] += len(ev.data)
                return
            self._flush_encrypted()
            self.out.write(ev.data)
            return
        self._flush_encrypted()
        self.degraded = True
        if self.raw:
            self.err.print(f"gap {d.short} offset {ev.offset} {ev.nbytes} bytes ({ev.reason})")
        elif gap_wording(ev.reason).startswith("were not"):
            self.out.write(b"[%d bytes missing]" % ev.nbytes)
        else:
            self.out.write(b"[%d bytes captured but unusable (%s)]"
                           % (ev.nbytes, ev.reason.encode()))

    def _layer_event(self, ev) -> None:
        from reassembly.events import Anomaly, TlsConnection, WebSocketHandshake

        t = type(ev)
        quiet = getattr(self.args, "quiet", False)
        if t is Anomaly and ev.kind == "tls.undecryptable":
            self.encrypted = True
            if not quiet:
                hint = ("" if self.args.keylog else
                        "; give --keylog FILE (the SSLKEYLOGFILE the client wrote)")
                self.err.print(f"flow {self.flow}: {ev.detail}{hint}", markup=False)
        elif t is TlsConnection and ev.decrypted and not quiet:
            self.err.print(f"flow {self.flow}: TLS decrypted; these are the plaintext bytes "
                           "(--transport-only for the TCP bytes as captured)", markup=False)
        elif t is WebSocketHandshake and not self.raw and ev.status == 101:
            self._flush_encrypted()
            deflate = ", permessage-deflate inflated" if ev.deflate else ""
            self.out.write(f"[WebSocket {ev.method} {ev.path} -> 101: message payloads "
                           f"follow, unmasked{deflate}]".encode())

    def _flush_encrypted(self) -> None:
        from reassembly.events import Direction

        for d in Direction:
            n = self.pending[d]
            if not n:
                continue
            self.pending[d] = 0
            self.degraded = True
            if self.raw:
                self.err.print(f"encrypted {d.short} {n} bytes (TLS, not decrypted)",
                               markup=False)
            else:
                self.out.write(b"[%d bytes of TLS, %s, encrypted]" % (n, d.short.encode()))


class _JoinedRoles:
    """Raw follow of a flow whose start was not captured: its roles as `msgcap dissect`
    decides them.  Detection (``analyzer.detect``) may swap them from the ops each side
    shows, after holding the flow's first bytes, so those bytes are held here too until
    detection decides (its own bound), then written in the orientation it settled on
    (``--direction c2s`` is then the client's, as in the flows table)."""

    def __init__(self, registry, decode_as: dict[int, str]) -> None:
        from analyzer.detect import Detector
        from reassembly.flows import RoleSwaps

        self.swaps = RoleSwaps()
        forced = {port: registry.get(name) for port, name in decode_as.items()}
        self.detector = Detector(list(registry.dissectors.values()), forced)
        self.detector.swap_roles = self._swap
        self.fd = None
        self.held: list = []
        self.turned = False

    def _swap(self, info, source, at=None) -> bool:
        self.turned = self.swaps(info, source, at)
        return self.turned

    def settled(self, ev) -> list:
        """The events to write now: ``ev`` (None: the end) and what was held before it,
        once detection decided the flow (or it ended)."""
        from reassembly.events import StreamData
        from reassembly.flows import turned

        fd, det = self.fd, self.detector
        fed = ev is not None and ev.stream_id is None and (fd is None or not fd.decided)
        if fed:
            if fd is None:
                fd = self.fd = det.start(ev.flow)
            try:
                if type(ev) is StreamData:
                    det.data(fd, ev.direction, ev.data, ev)
                else:
                    det.gap(fd, ev.direction, ev.offset, ev.nbytes, ev.ts_ns)
            except Exception:  # noqa: BLE001 - a dissector's bug: the roles stay
                fd.unclaimed = True
            self.held.append(ev)  # it came before the swap its bytes may have caused
            if not fd.decided:
                return []
        elif ev is not None:
            self.held.append(ev)
        out = [turned(e) for e in self.held] if self.turned else self.held
        self.held = []
        self.turned = False
        return out


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more bytes")
    return value


def _memory_size(text: str) -> int:
    from reassembly.limits import parse_memory_size

    try:
        return parse_memory_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of processes")
    return value


def _dissect_one(path: str, out: str, options, registry, show_progress: bool,
                 workers: int = 1):
    from analyzer.pipeline import dissect_capture

    wrap = None
    if show_progress:  # (-q, scripts and benchmarks, need not import it)
        from analyzer.progress import ProgressWrap

        wrap = ProgressWrap(f"dissect {path}" + (f" ({workers} workers)" if workers > 1 else ""))
    return dissect_capture(path, out, options, registry, wrap=wrap, workers=workers)


def cmd_dissect(args: argparse.Namespace) -> int:
    _check_captures(args.captures)
    check_output_dir(args.output)
    from analyzer.digest import prefetch

    if args.workers == 1:
        # the captures' ids are hashed while the rest loads.  Not with workers: a thread
        # running when they start makes ``analyzer.parallel`` spawn them instead of
        # forking (~0.7 s of CPU each), and a pool's forked children hash their own
        prefetch(args.captures)
    parse_decode_as(args.decode_as)  # a malformed PORT=NAME is said before the registry loads
    skip_pandas_probe()
    from analyzer.runoptions import options_from_args
    from dissectors.registry import discover

    registry = discover()
    for origin, why in registry.errors:
        _stderr_console().print(f"[yellow]plugin {origin} not loaded:[/] {why}")
    options = options_from_args(args, registry)
    out = Path(args.output)
    created = not out.exists()
    if _OWN_PROCESS:
        settle_gc()
    try:
        with stdin_spooled(args.captures) as (captures, spooled):
            results, elapsed = _dissect_all(captures, args, options, registry)
            if spooled is not None:
                name_stdin_input(out, spooled)
    except FileExistsError as exc:
        # the sink words it for Python callers ("pass overwrite=True")
        message = str(exc.args[0] if exc.args else exc).partition("; pass overwrite")[0]
        raise UserError(message, "add --overwrite to replace it, or give another -o "
                        "directory") from None
    except BaseException:
        _remove_if_empty(out, created)
        raise
    manifest = results[-1].manifest
    if not args.quiet:
        print_run_summary(results, manifest, elapsed)
    return {"clean": EXIT_CLEAN, "degraded": EXIT_DEGRADED}.get(manifest["status"], EXIT_FAILED)


def _dissect_all(captures: list[str], args: argparse.Namespace, options,
                 registry) -> tuple[list, float]:
    """Every capture dissected with the ``registry`` the command discovered (once per
    run: the entry points are not read again for each capture or worker)."""
    started = time.perf_counter()
    progress = not args.quiet
    if args.workers > 1 and len(captures) == 1:
        # one capture: split by flow across the processes (analyzer.parallel)
        results = [_dissect_one(captures[0], args.output, options, registry, progress,
                                args.workers)]
    elif args.workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        # several captures: as many at once, one process each (each capture whole)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            futures = [
                pool.submit(_dissect_one, p, args.output, options, registry, False)
                for p in captures
            ]
            results = [f.result() for f in futures]
    else:
        results = [_dissect_one(p, args.output, options, registry, progress) for p in captures]
    return results, time.perf_counter() - started


def _remove_if_empty(out: Path, created: bool) -> None:
    """A run that failed leaves no empty dataset directory it created behind."""
    if not created or not out.is_dir():
        return
    leftovers = [p for p in out.iterdir() if p.name != ".manifest.lock"]
    if not leftovers:
        (out / ".manifest.lock").unlink(missing_ok=True)
        out.rmdir()


def print_run_summary(results, manifest: dict, elapsed: float) -> None:
    console = _stderr_console()
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
            print_table(console, title, [what, "count"],
                        [[name, f"{n:,}"] for name, n in sorted(counts.items())],
                        right=("count",))
    secs = max(elapsed, 1e-9)
    # the status first: at 80 columns the line wraps, and "status\nclean" read badly
    console.print(
        f"status [bold]{manifest['status']}[/]: {len(results)} capture(s), {packets:,} "
        f"packets, {size / 1e6:.1f} MB in {elapsed:.2f} s "
        f"({packets / secs:,.0f} packets/s, {size / 1e6 / secs:.1f} MB/s)"
    )
    if anomalies.get("limit.memory"):
        from reassembly.flows import FLOW_BYTES

        limit = manifest.get("options", {}).get("limits", {}).get("memory_limit_bytes", 0)
        console.print(
            f"limit.memory: the run's memory budget ({limit / 2**20:g} MiB) was reached, and "
            "what was given up is in those rows (docs/robustness.md); to hold more, give "
            f"--memory-limit more (an open connection counts {FLOW_BYTES // 1024} KiB)")


def cmd_protocols(args: argparse.Namespace) -> int:
    from dissectors.registry import discover

    reg = discover()
    rows = []
    every = {**reg.dissectors, **reg.payload}
    for name in sorted(every):
        d = every[name]
        carried = name in reg.payload
        rows.append([
            name,
            f"in {'/'.join(d.carriers)}" if carried
            else "/".join(t.name.lower() for t in d.carried_on()),
            ", ".join(str(p) for p in getattr(d, "default_ports", ())) or "-",
            ", ".join(s.name for s in d.tables),
            reg.origins.get(name, ""),
        ])
    print_table(out_console(), "dissectors", ["name", "transport", "ports", "tables", "from"],
                rows)
    for origin, why in reg.errors:
        _stderr_console().print(f"[yellow]plugin {origin} not loaded:[/] {why}")
    return EXIT_DEGRADED if reg.errors else EXIT_CLEAN


def cmd_schema(args: argparse.Namespace) -> int:
    from analyzer.pipeline import tables_for
    from dissectors.registry import discover

    specs = {s.name: s for s in tables_for(discover())}
    if args.table and args.table not in specs:
        raise UserError(f"no table {args.table!r}",
                        f"give one of: {', '.join(sorted(specs))} (or none for all)")
    console = out_console()
    for name in [args.table] if args.table else sorted(specs):
        spec = specs[name]
        print_table(console, f"{spec.name} (v{spec.version}): {spec.description}",
                    ["column", "type", "null", "meaning"],
                    [[f.name, str(f.type), "yes" if f.nullable else "no", f.description]
                     for f in spec.columns])
    return EXIT_CLEAN


def cmd_summary(args: argparse.Namespace) -> int:
    skip_pandas_probe()
    from analyzer.summary import run_summary

    return run_summary(args)


def cmd_ladder(args: argparse.Namespace) -> int:
    skip_pandas_probe()
    from analyzer.transcript import run_ladder

    return run_ladder(args)


def cmd_report(args: argparse.Namespace) -> int:
    skip_pandas_probe()
    from analyzer.report import run_report

    return run_report(args)


CAPTURE_HELP = ("a pcap or pcapng file (gzip/zstd compressed too); - reads one from "
                "standard input (e.g. tcpdump -w - | msgcap ...)")
KEYLOG_HELP = ("NSS key log (the SSLKEYLOGFILE a client wrote) with the TLS secrets to decrypt "
               "TLS over TCP, WebSocket over TLS (wss) and QUIC; a file with no secret line "
               "is refused at once")
DECODE_AS_HELP = ("force dissector NAME on a TCP or UDP port, whichever side uses it, like "
                  "Wireshark's Decode As (repeatable; names and the transports each runs "
                  "on: `msgcap protocols`; on UDP a datagram dissector gets each "
                  "datagram, and a QUIC-stream dissector such as felix the streams of "
                  "QUIC connections)")
FLOW_HELP = "flow id, as listed by `msgcap flows CAPTURE` (the `id` column)"


def _add_time_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time", choices=TIME_FORMATS, default="utc", help=TIME_HELP)


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
    p.add_argument("--keylog", metavar="FILE", help=KEYLOG_HELP + " (captures only)")
    p.add_argument("--decode-as", action="append", default=[], metavar="PORT=NAME",
                   help=DECODE_AS_HELP + " (captures only)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or notes on stderr")


# ``msgcap summary|ladder|report`` (analyzer/summary.py, transcript.py, report/)
_VIEW_SOURCE_HELP = "a capture (dissected into a temporary dataset first) or a dataset directory"


def _add_summary_parser(sub) -> None:
    p = sub.add_parser("summary", help="overview of a capture or dataset")
    p.add_argument("source", metavar="CAPTURE|DATASET", help=_VIEW_SOURCE_HELP)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="subjects / topics / streams listed (default 10)")
    _add_time_option(p)
    _add_view_options(p)
    p.set_defaults(func=cmd_summary)


def _add_ladder_parser(sub) -> None:
    p = sub.add_parser("ladder", help="arrow diagram of a flow or of one message's path")
    p.add_argument("source", metavar="CAPTURE|DATASET", help=_VIEW_SOURCE_HELP)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--flow", type=_non_negative, metavar="ID",
                       help="client ↔ server of this flow (" + FLOW_HELP + ")")
    which.add_argument("--message", type=_non_negative, metavar="RECORD_ID",
                       help="publisher → server → subscribers (NATS, Pulsar)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per arrow (NDJSON) instead of the diagram")
    p.add_argument("--time", choices=TIME_FORMATS, default="relative",
                   help="the --flow diagram's time column: relative (default, seconds into "
                   "the flow), utc, local (time of day) or epoch")
    p.add_argument("--limit", type=int, default=200, metavar="N",
                   help="messages drawn for --flow (0: all; default 200)")
    p.add_argument("--width", type=int, metavar="COLS", help="diagram width (default: terminal)")
    _add_view_options(p)
    p.set_defaults(func=cmd_ladder)


def _add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report with plots")
    p.add_argument("source", metavar="DATASET", help=_VIEW_SOURCE_HELP)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="HTML file to write")
    p.add_argument("--flow", type=_non_negative, metavar="ID",
                   help="conversation the sequence diagram opens with (" + FLOW_HELP + ")")
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
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap or pcapng files")
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
    p.add_argument("--decode-as", action="append", default=[], metavar="PORT=NAME",
                   help=DECODE_AS_HELP)
    p.add_argument("--payload-cap", type=_non_negative, default=DEFAULT_PAYLOAD_CAP,
                   metavar="BYTES",
                   help="payload bytes kept per message (length and SHA-256 always kept)")
    add_payload_decoding_args(p)  # --decode, --schema: as `dissect`
    p.add_argument("--keylog", metavar="FILE", help=KEYLOG_HELP)
    p.add_argument("--overwrite", action="store_true",
                   help="replace a capture already present in OUT")
    p.add_argument("--progress", action="store_true",
                   help="a progress bar of tasks and bytes on stderr even when it is not a "
                   "terminal (default: a bar on a terminal, plain lines otherwise)")
    p.set_defaults(func=cmd_spark_ingest)
    p = ssub.add_parser(
        "analyze", parents=[common], help="cross-flow analyses of a dataset -> Parquet"
    )
    p.add_argument("dataset", metavar="DATASET",
                   help="a dataset directory written by `msgcap dissect` or `spark ingest`")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="directory the analyses' Parquet tables are written to")
    p.add_argument("--only", action="append", metavar="NAME", help="run only these analyses")
    p.set_defaults(func=cmd_spark_analyze)


def cmd_new_dissector(args: argparse.Namespace) -> int:
    from analyzer.scaffold import ScaffoldError, normalize_name, scaffold, taken_names

    check_output_dir(args.output, what="the directory msgcap-NAME/ is created in")
    try:
        norm = normalize_name(args.name)
        if norm in taken_names():
            raise UserError(
                f"{norm!r} is already a dissector or table of this msgcap (`msgcap protocols`, "
                "`msgcap schema`): a plugin of that name would clash with it",
                f"choose another name, e.g. `msgcap new-dissector {norm}_custom`",
            )
        root = scaffold(args.name, args.transport, args.output)
    except ScaffoldError as exc:
        raise UserError(str(exc), "choose another NAME (or -o DIR), or remove what is there"
                        ) from None
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    print(f"wrote {root}/: {', '.join(files)}")
    print(f"next: cd {root} && pip install -e '.[test]' && pytest && msgcap protocols")
    return EXIT_CLEAN


class _Parser(argparse.ArgumentParser):
    """argparse with msgcap's error style: the usage, then ``error:`` and ``fix:``."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        print_error(message, f"see `{self.prog} --help`")
        raise SystemExit(EXIT_FAILED)


def _version() -> str:
    from dissectors.entrypoints import version

    return version("msgcap") or "unknown (not installed)"  # (a source tree)


class _VersionAction(argparse.Action):
    """``--version`` without looking the version up unless asked (it costs an import)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        import platform

        print(f"msgcap {_version()} (Python {platform.python_version()})")
        parser.exit()


def _add_flows_parser(sub) -> None:
    p = sub.add_parser("flows", help="one row per TCP/UDP flow")
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help=CAPTURE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.add_argument("--transport-only", action="store_true",
                   help="skip the application protocol (reassembly only: faster on large "
                   "captures)")
    p.add_argument("--decode-as", action="append", default=[], metavar="PORT=NAME",
                   help=DECODE_AS_HELP)
    p.add_argument("--keylog", metavar="FILE", help=KEYLOG_HELP)
    _add_time_option(p)
    p.set_defaults(func=cmd_flows)


def _add_follow_parser(sub) -> None:
    p = sub.add_parser("follow", help="write the bytes of one TCP flow (TLS decrypted with "
                       "--keylog, WebSocket payloads unmasked) or QUIC connection to stdout")
    p.add_argument("capture", metavar="CAPTURE",
                   help=CAPTURE_HELP + "; with --decoded also a dataset directory")
    p.add_argument("--flow", type=_non_negative, required=True, metavar="FLOW_ID",
                   help=FLOW_HELP)
    p.add_argument("--direction", choices=("c2s", "s2c", "both"), default="both",
                   help="client to server, server to client, or both (default)")
    p.add_argument(
        "--raw",
        action="store_true",
        help="write only stream bytes; list gaps and encrypted bytes on stderr instead of "
        "inline",
    )
    p.add_argument("--json", action="store_true",
                   help="with --decoded: one JSON object per message (NDJSON)")
    p.add_argument("--keep-secrets", action="store_true",
                   help="print credentials in the bytes as they are (default: withheld, "
                   "length and SHA-256 kept; see docs/robustness.md)")
    p.add_argument("--transport-only", action="store_true",
                   help="the TCP bytes as captured: no TLS decryption, no WebSocket unwrapping "
                   "(default: the bytes the protocol sees, TLS decrypted with --keylog, "
                   "encrypted bytes summarised)")
    _add_time_option(p)
    _add_view_options(p, decoded=True)
    p.set_defaults(func=cmd_follow)


def _add_dissect_parser(sub) -> None:
    p = sub.add_parser("dissect", help="decode captures into a Parquet dataset")
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help=CAPTURE_HELP)
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="dataset directory (created when missing)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no run summary on stderr (errors still)")
    p.add_argument(
        "--decode-as",
        action="append",
        default=[],
        metavar="PORT=NAME",
        help=DECODE_AS_HELP,
    )
    p.add_argument(
        "--payload-cap",
        type=_non_negative,
        default=DEFAULT_PAYLOAD_CAP,
        metavar="BYTES",
        help="payload bytes kept per message (length and SHA-256 always kept)",
    )
    add_payload_decoding_args(p)  # --decode, --schema
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
    p.add_argument("--keylog", metavar="FILE", help=KEYLOG_HELP)
    p.add_argument(
        "--overwrite", action="store_true", help="replace a capture already present in OUT"
    )
    p.add_argument(
        "--keep-secrets",
        action="store_true",
        help="keep credentials (NATS CONNECT pass, auth_token, jwt, sig, nkey) in the "
        "tables; by default each is replaced by its length and SHA-256",
    )
    p.add_argument(
        "--memory-limit",
        type=_memory_size,
        default=None,
        metavar="SIZE",
        help="what reassembly may hold at once (reorder buffers, fragments, flows, "
        "decompressors), e.g. 256M or 1G, per process; reached, the oldest holders are "
        "flushed or evicted with a limit.memory anomaly (default 80M: a run peaks "
        "under ~400 MB; an open connection counts 16 KiB, so ~5,000 fit; 0: no budget)",
    )
    p.set_defaults(func=cmd_dissect)


def _add_analyze_parser(sub) -> None:
    from analyzer.analyses.cli import add_analyze_parser

    add_analyze_parser(sub)


def _add_query_parser(sub) -> None:
    from analyzer.analyses.cli import add_query_parser

    add_query_parser(sub)


def _add_protocols_parser(sub) -> None:
    p = sub.add_parser("protocols", help="list the dissectors found (built-in and plugins)")
    p.set_defaults(func=cmd_protocols)


def _add_schema_parser(sub) -> None:
    p = sub.add_parser("schema", help="print the declared columns of the output tables")
    p.add_argument("table", nargs="?", help="one table (default: every table)")
    p.set_defaults(func=cmd_schema)


def _add_new_dissector_parser(sub) -> None:
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


# every subcommand and what adds its parser, in the order `msgcap --help` lists them
_COMMANDS: dict[str, Callable[[Any], None]] = {
    "flows": _add_flows_parser,
    "follow": _add_follow_parser,
    "dissect": _add_dissect_parser,
    "spark": _add_spark_parser,
    "summary": _add_summary_parser,
    "ladder": _add_ladder_parser,
    "report": _add_report_parser,
    "analyze": _add_analyze_parser,
    "query": _add_query_parser,
    "protocols": _add_protocols_parser,
    "schema": _add_schema_parser,
    "new-dissector": _add_new_dissector_parser,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``msgcap`` parser; with ``command`` (a subcommand's name) only that
    subcommand's parser is built under it.  Why: building all twelve costs ~10-20 ms
    (argparse formats and translates every help text as it is added, and ``analyze``
    imports the analyses' list), paid by every run and by every in-process ``main()``
    of the tests; ``main`` knows the command from its first argument.  The messages are
    the same: the usage line still names every subcommand (given as the metavar the full
    parser derives from its choices; tests/analyzer/test_cli_errors.py compares)."""
    parser = _Parser(
        prog="msgcap", description="Forensic analyzer for message-broker packet captures."
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    if command is None:
        sub = parser.add_subparsers(dest="command", required=True)
    else:
        sub = parser.add_subparsers(dest="command", required=True,
                                    metavar="{" + ",".join(_COMMANDS) + "}")
    for name, add in _COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return parser


INT64_MAX = (1 << 63) - 1  # ids are int64 columns in every table


def _check_ids(args: argparse.Namespace) -> None:
    """An id no table can hold is a user error, not a pyarrow overflow deep inside."""
    for name in ("flow", "message"):
        value = getattr(args, name, None)
        if value is not None and value > INT64_MAX:
            raise UserError(f"--{name} {value} is beyond the largest id a dataset holds "
                            f"({INT64_MAX})",
                            "give an id listed by `msgcap flows` (flow ids) or `msgcap follow "
                            "--decoded` (record ids)")


def main(argv: list[str] | None = None) -> int:
    """Run one command; user mistakes become ``error:`` + ``fix:`` and exit 2, and a
    stdout closed by the reader (``| head``) ends the run quietly with exit 0.  Called
    without ``argv`` (the command line: the ``msgcap`` script, ``python -m analyzer.cli``)
    the process usually ends here (``_exit_without_teardown``)."""
    global _OWN_PROCESS
    _OWN_PROCESS = argv is None
    if _OWN_PROCESS:
        prefer_jemalloc()  # (before anything imports pyarrow)
        one_blas_thread()  # (before pyarrow imports numpy)
    code = _main(argv)
    if argv is None:
        _exit_without_teardown(code)
    return code


# whether this run is the process's own command line (``main()`` without ``argv``): only
# then does a command change process-wide settings (``cliutil.settle_gc``)
_OWN_PROCESS = False


def _exit_without_teardown(code: int) -> None:
    """End a command-line run with ``os._exit(code)``, skipping the interpreter's
    teardown when it has nothing left to do.  Why: after the last output the interpreter
    frees every object and module one by one and Arrow's allocator hands its memory back
    piece by piece, ~0.05-0.1 s of CPU (and ~0.2-0.5 s of wall time on a loaded machine)
    that the kernel does at once when the process ends.  What teardown would still do is
    done first: stdout and stderr are flushed and the ``atexit`` callbacks run
    (temporary directories' finalizers, ``logging.shutdown``, multiprocessing's).
    Returns, leaving the usual exit to happen, when another thread is alive (teardown
    would join it), when a profiler, tracer or coverage is on (they write their results at
    exit), when a flush fails (the usual exit reports it), or with
    ``MSGCAP_FAST_EXIT=0``.  Datasets are complete before this point: every writer is
    closed and the manifest renamed into place by the command itself."""
    import os
    import threading

    if (threading.active_count() > 1 or sys.getprofile() is not None
            or sys.gettrace() is not None or os.environ.get("MSGCAP_FAST_EXIT") == "0"):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    import atexit

    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    try:
        given = sys.argv[1:] if argv is None else argv
        command = given[0] if given and given[0] in _COMMANDS else None
        if _OWN_PROCESS and command == "dissect":
            defer_gc()  # until cmd_dissect's settle_gc
        args = build_parser(command).parse_args(argv)  # --help into a closed pipe too
        _check_ids(args)
        from dissectors.redaction import gated_output  # no credential leaves by stdout, stderr

        with gated_output(keep=getattr(args, "keep_secrets", False) is True):
            return args.func(args)
    except UserError as exc:
        return print_user_error(exc)
    except BrokenPipeError:
        silence_stdout()
        return EXIT_CLEAN
    except KeyboardInterrupt:
        print_error("interrupted", "run it again; a dataset being written was not finished")
        return 130
    except OSError as exc:
        if isinstance(getattr(exc, "fix", None), str):  # analyzer.sink.OutputError
            return print_error(exc.message, exc.fix)
        where = f" ({exc.filename})" if exc.filename else ""
        return print_error(f"{exc.strerror or exc}{where}", "check the path and its permissions")
    except Exception as exc:
        from reassembly.capture import CaptureFormatError

        if isinstance(exc, CaptureFormatError):  # "-" read as it came (flows, follow)
            message = str(exc)
            if message.startswith(f"{STDIN}: "):
                message = "standard input: " + message.removeprefix(f"{STDIN}: ")
            return print_error(message, CAPTURE_FIX)
        raise


if __name__ == "__main__":
    sys.exit(main())

"""Throughput of ``msgcap dissect`` on a large Pulsar capture with batching and compression.

    python benchmarks/bench_pulsar.py                       # record (root) or reuse, 3 runs
    python benchmarks/bench_pulsar.py --runs 1 --target-mb 20
    python benchmarks/bench_pulsar.py --capture some-pulsar.pcap

Why a recorder of its own: ``samples/record_pulsar.py`` records a fixed, feature-covering
workload (~100 messages, a few hundred kB) and has no scale option.  This script drives
the same pieces (``samples/pulsar_emulator.py`` as the broker, the official PyPI
``pulsar-client`` as the client, tcpdump on loopback, the recorder helpers of
``samples/record_nats.py`` including its 1500-byte-MTU mode) in a loop until the capture
reaches ``--target-mb`` or ``--max-seconds``: one batching producer per codec (NONE,
LZ4, ZLIB, ZSTD, SNAPPY) and one Exclusive consumer per topic that acknowledges every
message, so the capture holds SEND and MESSAGE frames of compressed batches in both
directions.  Payloads are half random hex, half repeated text, so they compress about
2-3x and the dissector really decompresses.

The capture is cached as DATA/pulsar-batch.pcap with DATA/pulsar-batch.truth.json (what
the client sent and received, per codec) and reused while both exist.  ``--properties``
gives every message two properties and a partition key, as the sample captures' clients
send them (``samples/pulsar-client.pcap``), cached as DATA/pulsar-batch-props.pcap.

Measured (median of ``--runs``, fast path on and off alternated unless ``--fast on|off``,
same process-tree sampler as bench_dissect.py): wall s, CPU s,
packets/s, MB/s, Pulsar messages/s (rows of ``pulsar_messages``: one per message, batch
entries counted one by one, SEND and MESSAGE both), peak RSS of the process tree and of
the largest process, the codecs seen (``pulsar_messages.compression``), and the rows
checked against what the client counted.  ``--threads`` adds one run per mode that
reports each thread's CPU (the main thread's dissection apart from the Parquet writer's).
The struct-walk floor of bench_dissect.py is timed before and after the runs, and the
median's ratio to it printed: this VM's speed drifts, a ratio compares across hours.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_dissect import struct_walk  # noqa: E402  (sibling modules of this script)
from benchlib import (  # noqa: E402
    BASELINE_REV,
    CLK_TCK,
    ROOT,
    TARGET_RATIO,
    Measured,
    baseline_tree,
    count_rows,
    dissect_command,
    environment,
    fmt,
    loadavg,
    median,
    msgcap_command,
    print_table,
    refusal,
    run_measured,
    write_json,
)

SAMPLES = ROOT / "samples"
DEFAULT_DATA = Path("/tmp/msgcap-bench")
NAME = "pulsar-batch"
NS = "persistent://public/default/"
CODECS = ("NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY")
HOST = "127.0.0.1"


# ====================================================================================
# recording
# ====================================================================================


def _payload(rng: random.Random, i: int, size: int) -> bytes:
    """About ``size`` bytes: random hex (incompressible half) + repeated text."""
    head = f'{{"seq":{i},"id":"{rng.randbytes(size // 4).hex()}","body":"'.encode()
    body = (b"lorem ipsum dolor sit amet " * (size // 27 + 1))[: max(size - len(head) - 2, 0)]
    return head + body + b'"}'


def run_workload(url: str, target_bytes: int, pcap: Path, max_seconds: float,
                 payload_size: int, batch: int, properties: bool = False) -> dict[str, Any]:
    """Produce in rounds (every codec, batching on) until the capture is big enough;
    consumers (listeners, acknowledging each message) receive everything."""
    import pulsar

    comp = {"NONE": pulsar.CompressionType.NONE, "LZ4": pulsar.CompressionType.LZ4,
            "ZLib": pulsar.CompressionType.ZLib, "ZSTD": pulsar.CompressionType.ZSTD,
            "SNAPPY": pulsar.CompressionType.SNAPPY}
    import logging

    logger = logging.getLogger("pulsar-client-bench")
    logger.setLevel(logging.ERROR)
    rng = random.Random(6650)
    received = dict.fromkeys(CODECS, 0)
    lock = threading.Lock()
    errors: list[str] = []

    def listener(codec: str):
        def on_message(consumer, msg) -> None:
            with lock:
                received[codec] += 1
            consumer.acknowledge(msg)
        return on_message

    c_client = pulsar.Client(url, logger=logger, operation_timeout_seconds=30)
    p_client = pulsar.Client(url, logger=logger, operation_timeout_seconds=30)
    consumers = [
        c_client.subscribe(NS + f"bench-{c.lower()}", "s-bench", consumer_name=f"c-{c}",
                           message_listener=listener(c),
                           initial_position=pulsar.InitialPosition.Earliest)
        for c in CODECS
    ]
    producers = {
        c: p_client.create_producer(
            NS + f"bench-{c.lower()}", producer_name=f"p-{c}", batching_enabled=True,
            compression_type=comp[c], batching_max_messages=batch,
            batching_max_allowed_size_in_bytes=1 << 20, batching_max_publish_delay_ms=10,
            block_if_queue_full=True, max_pending_messages=4 * batch,
        )
        for c in CODECS
    }
    sent = dict.fromkeys(CODECS, 0)
    failed = [0]

    def done(res, _msg_id) -> None:
        if res != pulsar.Result.Ok:
            failed[0] += 1

    t0 = time.monotonic()
    rounds = 0
    while True:
        for codec, prod in producers.items():
            for _ in range(batch):
                i = sent[codec]
                extra = {"properties": {"seq": str(i), "codec": codec},
                         "partition_key": f"key-{i % 16}"} if properties else {}
                prod.send_async(_payload(rng, i, payload_size), done, **extra)
                sent[codec] += 1
            prod.flush()
        rounds += 1
        size = pcap.stat().st_size if pcap.exists() else 0
        if rounds % 50 == 0:
            print(f"  round {rounds}, {time.monotonic() - t0:.0f}s, capture "
                  f"{size / 1e6:.1f} MB", file=sys.stderr, flush=True)
        if size >= target_bytes or time.monotonic() - t0 > max_seconds:
            break
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if all(received[c] >= sent[c] for c in CODECS):
                break
        time.sleep(0.1)
    time.sleep(0.5)  # grouped ACKs (ackGroupingTimeMs 100)
    for p in producers.values():
        p.close()
    for c in consumers:
        c.close()
    p_client.close()
    c_client.close()
    for c in CODECS:
        if received[c] != sent[c]:
            errors.append(f"{c}: received {received[c]} of {sent[c]}")
    if failed[0]:
        errors.append(f"{failed[0]} sends failed")
    return {"rounds": rounds, "batch": batch, "payload_size": payload_size,
            "sent": sent, "received": received, "seconds": round(time.monotonic() - t0, 1),
            "problems": errors}


def record(pcap: Path, target_mb: float, max_seconds: float, mtu: int | None,
           payload_size: int, batch: int, properties: bool = False) -> dict[str, Any]:
    """Emulator + tcpdump + the workload, as samples/record_pulsar.py does it."""
    if os.geteuid() != 0:
        sys.exit(f"error: {pcap} is missing and recording it needs root (tcpdump).\n"
                 "fix: run as root, or pass --capture FILE")
    try:
        import pulsar  # noqa: F401
    except ImportError:
        sys.exit(f"error: pulsar-client is not importable by {sys.executable}; "
                 "pip install -e '.[test]'")
    sys.path.insert(0, str(SAMPLES))
    from record_nats import (  # the recorders' own helpers
        count_pcap_packets,
        find_tcpdump,
        free_port,
        loopback_mtu,
        stop,
        wait_for_text,
    )

    tcpdump = find_tcpdump()
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-pulsar-bench-"))
    emu = dump = None
    pcap.parent.mkdir(parents=True, exist_ok=True)
    try:
        emu_out = tmp / "emulator.out"
        with open(emu_out, "wb") as f:
            # no --log: the emulator would log every command at INFO
            emu = subprocess.Popen(
                [sys.executable, str(SAMPLES / "pulsar_emulator.py"), "--port", str(port)],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            )
        wait_for_text(emu_out, r"listening on", emu, "pulsar emulator")
        if pcap.exists():
            pcap.unlink()
        dump_err = tmp / "tcpdump.stderr"
        with open(dump_err, "wb") as err_f:
            dump = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "--immediate-mode", "-U",
                 "-Z", "root", "-w", str(pcap), f"tcp port {port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_f,
            )
        wait_for_text(dump_err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        with loopback_mtu(mtu):
            result = run_workload(f"pulsar://{HOST}:{port}", int(target_mb * 1e6), pcap,
                                  max_seconds, payload_size, batch, properties)
        time.sleep(2.0)  # the capture tail (FIN/ACK) before stopping tcpdump
        rc = stop(dump, signal.SIGINT)
        text = dump_err.read_text(errors="replace")
        stats = {k: int(v) for v, k in re.findall(
            r"(\d+) packets? (captured|received by filter|dropped by kernel)", text)}
        if rc not in (0, None) or "captured" not in stats:
            sys.exit(f"error: tcpdump exited with {rc}:\n{text}")
        stop(emu, signal.SIGTERM)
    finally:
        for p, sig in ((dump, signal.SIGINT), (emu, signal.SIGTERM)):
            if p is not None:
                stop(p, sig, timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    packets = count_pcap_packets(pcap)
    if stats.get("dropped by kernel"):
        result["problems"].append(f"tcpdump: {stats['dropped by kernel']} dropped by kernel")
    if packets != stats["captured"]:
        result["problems"].append(f"pcap has {packets} records, tcpdump said {stats['captured']}")
    from importlib.metadata import version

    return {"format": "msgcap-pulsar-bench/1", "capture": pcap.name, "port": port, "mtu": mtu,
            "client": f"pulsar-client {version('pulsar-client')}",
            "server": "samples/pulsar_emulator.py", "topics": {
                c: NS + f"bench-{c.lower()}" for c in CODECS},
            "pcap": {"bytes": pcap.stat().st_size, "packets": packets}, "tcpdump": stats,
            **result}


# ====================================================================================
# benchmark
# ====================================================================================


def _one_run(msgcap: list[str], pcap: Path, data: Path, workers: int,
             tables: dict[str, Any], cwd: Path = ROOT) -> tuple[Measured, str | None]:
    """One measured ``msgcap dissect``; the first run of a mode fills ``tables`` (row
    counts per command, codec and anomaly kind)."""
    out = Path(tempfile.mkdtemp(prefix="out-pulsar-", dir=data))
    try:
        m = run_measured(dissect_command(msgcap, pcap, out, workers if workers != 1 else None),
                         cwd=cwd)
        why = refusal(m)
        if not why and not tables:
            tables.update({
                "pulsar_messages": count_rows(out, "pulsar_messages", "command"),
                "codecs": count_rows(out, "pulsar_messages", "compression"),
                "pulsar_commands": count_rows(out, "pulsar_commands", "command"),
                "anomalies": count_rows(out, "anomalies", "kind"),
            })
        return m, why
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _baseline(rev: str, pcap: Path, data: Path, runs: int) -> dict[str, Any] | None:
    """``runs`` runs of commit ``rev``'s ``msgcap dissect`` on the capture (a checkout
    built in DATA, ``benchlib.baseline_tree``): medians of wall and CPU s, its highest RSS and
    its message rows; None when it cannot be built or run (why printed)."""
    tree = baseline_tree(rev, data)
    if tree is None:
        return None
    measured: list[Measured] = []
    tables: dict[str, Any] = {}
    for i in range(max(runs, 1)):
        m, why = _one_run([sys.executable, "-m", "analyzer.cli"], pcap, data, 1, tables,
                          cwd=tree)
        if why:
            print(f"  baseline {rev}: n/a ({why})")
            return None
        measured.append(m)
        print(f"  baseline {rev} run {i + 1}/{max(runs, 1)}: msgcap dissect {m.wall_s:.2f} s, "
              f"{m.cpu_user_s + m.cpu_sys_s:.2f} CPU s", flush=True)
    return {"rev": rev, "wall_s": median(m.wall_s for m in measured),
            "cpu_s": median(m.cpu_user_s + m.cpu_sys_s for m in measured),
            "rss_mib": max(m.peak_rss_tree_mib for m in measured),
            "rows": (tables.get("pulsar_messages") or {}).get("rows", 0),
            "runs": [m.as_json() for m in measured]}


def _target(base: dict[str, Any], msgs: int, runs: list[Measured]) -> dict[str, Any]:
    """Issue 22's Pulsar line: messages per CPU s >= ``TARGET_RATIO`` x the baseline's
    in this run, peak RSS <= 300 MB (judged per CPU s, as ``bench_replayed`` judges STAN
    and Liftbridge: what the run costs whatever else the machine runs; the ratio of
    messages per wall second, the issue's "messages/s", is printed beside it)."""
    line = (f"Pulsar messages per CPU s >= {TARGET_RATIO:g}x issue 22's ({base['rev']}), "
            "peak RSS <= 300 MB")
    cpu = median(r.cpu_user_s + r.cpu_sys_s for r in runs)
    wall = median(r.wall_s for r in runs)
    rss = max(r.peak_rss_tree_mib for r in runs)
    if not msgs or msgs != base["rows"] or not cpu or not base["cpu_s"]:
        return {"line": line, "mark": "MISSED", "met": False,
                "detail": f"n/a: {msgs:,} message rows here, {base['rows']:,} in the baseline"}
    ratio = (msgs / cpu) / (base["rows"] / base["cpu_s"])
    wall_ratio = base["wall_s"] / wall
    met = ratio >= TARGET_RATIO and rss <= 300
    return {"line": line, "mark": "MET   " if met else "MISSED", "met": met, "ratio": ratio,
            "wall_ratio": wall_ratio, "rss_mib": rss,
            "detail": (f"{msgs / cpu:,.0f} vs {base['rows'] / base['cpu_s']:,.0f} per CPU s = "
                       f"{ratio:.2f}x ({base['rev']} measured in this run); per wall s "
                       f"{wall_ratio:.2f}x ({wall:.2f} vs {base['wall_s']:.2f} s); {rss:,.0f} MB")}


def thread_cpu(msgcap: list[str], pcap: Path, data: Path) -> dict[str, float]:
    """One ``msgcap dissect`` (fast path as the environment says) with each of its
    threads' CPU seconds (user + system) read from ``/proc/<pid>/task/*/stat`` every
    20 ms, the last reading per thread kept: ``main`` is the process's first thread,
    the others by thread id in order of appearance (the Parquet writer is the one busy
    beside it).  Why: the process's CPU lumps the main thread (dissection, conveyor)
    with the sink's writer thread, which a change to either is measured against.  A
    thread that ends between two readings loses its last 20 ms."""
    out = Path(tempfile.mkdtemp(prefix="out-pulsar-threads-", dir=data))
    seen: dict[int, float] = {}
    try:
        proc = subprocess.Popen(dissect_command(msgcap, pcap, out, None), cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            try:
                tids = os.listdir(f"/proc/{proc.pid}/task")
            except OSError:
                break
            for tid in tids:
                try:
                    with open(f"/proc/{proc.pid}/task/{tid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                seen[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
            time.sleep(0.02)
        proc.wait()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    cpu = {"main": seen.pop(proc.pid, 0.0)}
    busy = [tid for tid in sorted(seen) if seen[tid] >= 0.01]  # (idle pool threads left out)
    cpu.update((f"thread {k}", seen[tid]) for k, tid in enumerate(busy, 1))
    return cpu


def _timed_walk(pcap: Path) -> tuple[dict[str, Any], float]:
    """``struct_walk`` of the capture and its wall seconds: a floor measured beside the
    runs, so that runs of different hours (this VM's speed drifts ~15 %) compare by
    their ratio to it rather than by seconds."""
    t0 = time.perf_counter()
    walk = struct_walk(str(pcap))
    return walk, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, metavar="DIR",
                    help=f"capture cache and scratch directory (default {DEFAULT_DATA})")
    ap.add_argument("--capture", type=Path, metavar="PATH",
                    help="benchmark this Pulsar capture instead of recording one")
    ap.add_argument("--runs", type=int, default=3, help="msgcap runs; median (default 3)")
    ap.add_argument("--workers", type=int, default=1, help="msgcap dissect --workers")
    ap.add_argument("--target-mb", type=float, default=150.0,
                    help="record until the capture has this many MB (default 150)")
    ap.add_argument("--max-seconds", type=float, default=170.0,
                    help="stop producing after this long whatever the size (default 170)")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="loopback MTU while recording, offloads off (0: leave lo alone)")
    ap.add_argument("--payload-size", type=int, default=512, help="bytes per message")
    ap.add_argument("--batch", type=int, default=100, help="messages per batch (flush)")
    ap.add_argument("--fast", choices=("both", "on", "off"), default="both",
                    help="the Pulsar columnar fast path (MSGCAP_PULSAR_FAST): both = "
                         "alternate on/off runs and report each (default)")
    ap.add_argument("--properties", action="store_true",
                    help="messages carry properties and a partition key, as the sample "
                         "captures' do (cached as DATA/pulsar-batch-props.pcap)")
    ap.add_argument("--rerecord", action="store_true", help="record even if cached")
    ap.add_argument("--threads", action="store_true",
                    help="one more run per fast-path mode, reporting each thread's CPU s "
                         "(main thread vs the Parquet writer)")
    ap.add_argument("--json", type=Path, metavar="PATH",
                    help="raw measurements (default DATA/pulsar-results.json)")
    ap.add_argument("--baseline", metavar="REV", nargs="?", const=BASELINE_REV,
                    help="also measure commit REV (default: issue 22's, "
                         f"{BASELINE_REV}) on the same capture, --runs times after the "
                         "others, for the 10x line")
    args = ap.parse_args(argv)
    data = args.data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    json_path = args.json or data / "pulsar-results.json"

    truth: dict[str, Any] | None = None
    if args.capture:
        pcap = args.capture.resolve()
    else:
        name = f"{NAME}-props" if args.properties else NAME
        pcap, truth_path = data / f"{name}.pcap", data / f"{name}.truth.json"
        if args.rerecord or not (pcap.is_file() and truth_path.is_file()):
            print(f"recording {pcap} (target {args.target_mb:g} MB, at most "
                  f"{args.max_seconds:g} s of producing)", flush=True)
            t0 = time.monotonic()
            truth = record(pcap, args.target_mb, args.max_seconds, args.mtu or None,
                           args.payload_size, args.batch, args.properties)
            truth["record_seconds"] = round(time.monotonic() - t0, 1)
            truth_path.write_text(json.dumps(truth, indent=1) + "\n")
            print(f"recorded {truth['pcap']['bytes']:,} bytes, {truth['pcap']['packets']:,} "
                  f"packets in {truth['record_seconds']} s; sent {truth['sent']}", flush=True)
        else:
            truth = json.loads(truth_path.read_text())
            print(f"reusing {pcap} (recorded in {truth.get('record_seconds', '?')} s, "
                  f"{truth.get('rounds', '?')} rounds of {truth.get('batch', '?')} messages "
                  f"per codec; --rerecord to record again)")
    size = pcap.stat().st_size
    walk, floor_before = _timed_walk(pcap)
    packets = walk["packets"]
    msgcap = msgcap_command()
    env = environment()
    print(f"\n== {pcap} ({size / 1e6:,.1f} MB, {packets:,} packets) — {args.runs} run(s), "
          f"load {loadavg()}", flush=True)

    modes = ("on", "off") if args.fast == "both" else (args.fast,)
    runs_by: dict[str, list[Measured]] = {m: [] for m in modes}
    tables_by: dict[str, dict[str, Any]] = {m: {} for m in modes}
    na = None
    saved = os.environ.get("MSGCAP_PULSAR_FAST")
    try:
        for i in range(args.runs):
            for mode in modes:  # alternated: a load change hits both alike
                os.environ["MSGCAP_PULSAR_FAST"] = "1" if mode == "on" else "0"
                m, why = _one_run(msgcap, pcap, data, args.workers, tables_by[mode])
                if why:
                    na = why
                    break
                runs_by[mode].append(m)
                print(f"  run {i + 1}/{args.runs} fast path {mode}: msgcap dissect "
                      f"{m.wall_s:.2f} s, peak RSS {m.peak_rss_tree_mib:,.0f} MiB", flush=True)
            if na:
                break
    finally:
        if saved is None:
            os.environ.pop("MSGCAP_PULSAR_FAST", None)
        else:
            os.environ["MSGCAP_PULSAR_FAST"] = saved

    base = _baseline(args.baseline, pcap, data, args.runs) if args.baseline and not na \
        else None
    floor_after = _timed_walk(pcap)[1]
    runs = [r for mode in modes for r in runs_by[mode]]
    tables = tables_by[modes[0]]
    walls = {mode: median(r.wall_s for r in runs_by[mode]) if runs_by[mode] else None
             for mode in modes}
    wall = walls[modes[0]]
    pm = tables.get("pulsar_messages") or {"rows": 0, "by": {}}
    msgs = pm["rows"]
    print()
    rows = []
    for mode in modes:
        w = walls[mode]
        rr = runs_by[mode]
        rows.append([f"msgcap dissect w={args.workers} fast {mode}", fmt(w, ".2f"),
                     fmt(packets / w if w else None, ",.0f"),
                     fmt(size / 1e6 / w if w else None, ",.1f"),
                     fmt(msgs / w if w else None, ",.0f"),
                     fmt(median(r.cpu_user_s + r.cpu_sys_s for r in rr) if rr else None, ".2f"),
                     fmt(max((r.peak_rss_tree_mib for r in rr), default=None), ",.0f"),
                     fmt(max((r.peak_rss_single_mib for r in rr), default=None), ",.0f")])
    if base is not None:
        rows.append([f"issue 22's {base['rev']} (--baseline)", fmt(base["wall_s"], ".2f"),
                     fmt(packets / base["wall_s"], ",.0f"),
                     fmt(size / 1e6 / base["wall_s"], ",.1f"),
                     fmt(base["rows"] / base["wall_s"], ",.0f"), fmt(base["cpu_s"], ".2f"),
                     fmt(base["rss_mib"], ",.0f"), "-"])
    print_table(
        ["row", "wall s", "packets/s", "MB/s", "Pulsar msgs/s", "CPU s", "peak RSS MB (tree)",
         "max proc MB"], rows)
    if len(modes) == 2 and walls["on"] and walls["off"]:
        same = tables_by["on"] == tables_by["off"]
        # CPU too: on a shared machine the wall clock mostly measures the other processes
        cpu = {m: median(r.cpu_user_s + r.cpu_sys_s for r in runs_by[m]) for m in modes}
        print(f"fast path on vs off: {walls['off'] / walls['on']:.2f}x the messages/s "
              f"(median wall), {cpu['off'] / cpu['on']:.2f}x per CPU s ({msgs / cpu['on']:,.0f}"
              f" messages per CPU s on); row counts per command/codec/kind "
              f"{'identical' if same else 'DIFFER'}")
    floor = min(floor_before, floor_after)
    print(f"struct-walk floor (bench_dissect.struct_walk, in this process, wall): "
          f"{floor_before:.2f} s before the runs, {floor_after:.2f} s after"
          + (f"; msgcap fast {modes[0]} median / floor: {wall / floor:.2f}x" if wall else ""))
    if na:
        print(f"n/a: msgcap dissect {na}")
    codecs = (tables.get("codecs") or {}).get("by", {})
    print(f"capture: {size:,} bytes ({size / 1e6:.1f} MB), {packets:,} packets, "
          f"{walk['tcp_payload']:,} TCP payload bytes")
    print(f"pulsar_messages: {msgs:,} rows (by command: {pm['by']}); codecs seen: "
          + ", ".join(f"{k} {v:,}" for k, v in codecs.items()))
    pc = tables.get("pulsar_commands")
    if pc:
        print(f"pulsar_commands: {pc['rows']:,} rows ({pc['by']})")
    an = tables.get("anomalies")
    if an and an["rows"]:
        print(f"anomalies: {an['rows']:,} ({an['by']})")
    check = None
    if truth and runs:
        want_send = sum(truth["sent"].values())
        want_msg = sum(truth["received"].values())
        got_send, got_msg = pm["by"].get("SEND", 0), pm["by"].get("MESSAGE", 0)
        check = {"sent": want_send, "received": want_msg, "rows_send": got_send,
                 "rows_message": got_msg}
        ok = got_send == want_send and got_msg == want_msg
        print(f"vs client truth: sent {want_send:,} / SEND rows {got_send:,}; received "
              f"{want_msg:,} / MESSAGE rows {got_msg:,} -> {'OK' if ok else 'MISMATCH'}")
        if truth.get("problems"):
            print(f"recording problems: {truth['problems']}")
    print("wall s: median process wall time; messages/s = pulsar_messages rows / wall s; "
          "RSS in MiB, tree = sampled sum over the process and its children.")
    target = None
    if base is not None and "on" in modes and runs_by["on"]:
        target = _target(base, msgs, runs_by["on"])
        print(f"\ntargets (issue 22):\n  {target['mark']} {target['line']}: {target['detail']}")
    threads: dict[str, dict[str, float]] = {}
    if args.threads and not na:
        for mode in modes:
            os.environ["MSGCAP_PULSAR_FAST"] = "1" if mode == "on" else "0"
            try:
                threads[mode] = thread_cpu(msgcap, pcap, data)
            finally:
                if saved is None:
                    os.environ.pop("MSGCAP_PULSAR_FAST", None)
                else:
                    os.environ["MSGCAP_PULSAR_FAST"] = saved
            print(f"thread CPU s, fast path {mode} (one more run, load {loadavg()}): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in threads[mode].items()))
    write_json(json_path, {
        "environment": env, "capture": str(pcap), "bytes": size, "walk": walk,
        "truth": truth, "runs": [r.as_json() for r in runs], "median_wall_s": wall,
        "fast_modes": {mode: {"runs": [r.as_json() for r in runs_by[mode]],
                              "median_wall_s": walls[mode], "tables": tables_by[mode]}
                       for mode in modes},
        "tables": tables, "check": check, "na": na, "thread_cpu_s": threads,
        "floor_walk_s": {"before": floor_before, "after": floor_after},
        "baseline": base, "target": target,
    })
    print(f"\nraw measurements: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

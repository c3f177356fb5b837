#!/usr/bin/env python3
"""Record the official Pulsar client against our broker emulator, with client-side truth.

Starts ``samples/pulsar_emulator.py`` on a free 127.0.0.1 port, starts tcpdump on the
loopback interface, runs the workload below with PyPI ``pulsar-client`` (the official
C++-based client), waits for the capture tail, stops tcpdump (SIGINT) and the emulator,
and writes OUT.pcap plus OUT.truth.json.

    /work/venv/bin/python samples/record_pulsar.py --out samples/pulsar-client

The workload: one producer per topic, covering batching on and off and every codec
(NONE, LZ4, ZLIB, ZSTD, SNAPPY), a topic with 3 partitions, a chunked message (the
emulator advertises a 16 KiB max_message_size, so a 40 000-byte message is sent as
chunks); consumers of each subscription type (Exclusive, Shared with two consumers,
Failover, Key_Shared) that receive everything and acknowledge it (individually, and
cumulatively on one subscription).  Ground truth is counted in the client application:
per producer and per topic (partition topics by the partition of the message id the
send returned) what was sent, per consumer and topic what was received, in order.

Needs root (or CAP_NET_RAW) for tcpdump.  Only loopback traffic is generated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from record_nats import (  # noqa: E402  (shared recorder helpers)
    count_pcap_packets,
    find_tcpdump,
    free_port,
    stop,
    wait_for_text,
)

HOST = "127.0.0.1"
NS = "persistent://public/default/"
MAX_MESSAGE_SIZE = 16 * 1024
PAYLOAD_SHA256_SCHEME = (
    "sha256 over, for each message in order: uint64 big-endian len(payload) || payload"
)

# name: (topic, batching, compression, chunking, partitions)
PRODUCERS = {
    "p-plain": ("plain", False, "NONE", False, 0),
    "p-plain-batch": ("plain-batch", True, "NONE", False, 0),
    "p-lz4-batch": ("lz4-batch", True, "LZ4", False, 0),
    "p-zlib": ("zlib", False, "ZLib", False, 0),
    "p-zstd-batch": ("zstd-batch", True, "ZSTD", False, 0),
    "p-snappy": ("snappy", False, "SNAPPY", False, 0),
    "p-snappy-batch": ("snappy-batch", True, "SNAPPY", False, 0),
    "p-parted": ("parted", False, "ZSTD", False, 3),
    "p-chunked": ("chunked", False, "LZ4", True, 0),
}
# name: (topic, subscription, type, ack)
CONSUMERS = {
    "c-plain": ("plain", "s-exclusive", "Exclusive", "individual"),
    "c-plain-batch": ("plain-batch", "s-cumulative", "Exclusive", "cumulative"),
    "c-lz4-a": ("lz4-batch", "s-shared", "Shared", "individual"),
    "c-lz4-b": ("lz4-batch", "s-shared", "Shared", "individual"),
    "c-zlib": ("zlib", "s-failover", "Failover", "individual"),
    "c-zstd": ("zstd-batch", "s-key-shared", "KeyShared", "individual"),
    "c-snappy": ("snappy", "s-shared", "Shared", "individual"),
    "c-snappy-batch": ("snappy-batch", "s-exclusive", "Exclusive", "individual"),
    "c-parted": ("parted", "s-exclusive", "Exclusive", "individual"),
    "c-chunked": ("chunked", "s-exclusive", "Exclusive", "individual"),
}


def die(msg: str) -> None:
    print(f"record_pulsar: error: {msg}", file=sys.stderr)
    sys.exit(2)


class Digest:
    """Count, byte total and framed SHA-256 over payloads in order."""

    def __init__(self) -> None:
        self.messages = 0
        self.payload_bytes = 0
        self._sha = hashlib.sha256()

    def add(self, payload: bytes) -> None:
        self.messages += 1
        self.payload_bytes += len(payload)
        self._sha.update(len(payload).to_bytes(8, "big"))
        self._sha.update(payload)

    def as_json(self) -> dict:
        return {"messages": self.messages, "payload_bytes": self.payload_bytes,
                "payload_sha256": self._sha.hexdigest()}


def payloads(name: str, rng: random.Random) -> list[tuple[bytes, dict]]:
    """(payload, send kwargs) per message of one producer."""
    topic = PRODUCERS[name][0]
    out: list[tuple[bytes, dict]] = []
    if name == "p-plain":
        out.append((b"hello pulsar", {}))
        out.append((b"", {}))  # empty payload
        out.append((bytes(range(256)), {"properties": {"kind": "binary", "n": "256"}}))
        out.append((b"with key", {"partition_key": "key-1", "event_timestamp": 1_700_000_000_000}))
        out.append(("unicode: \u00e9\u4e2d\U0001f600".encode(), {"properties": {"lang": "mixed"}}))
        out.append((b"x" * 3000, {}))
        return out
    if name == "p-chunked":
        out.append((rng.randbytes(40_000), {"properties": {"big": "yes"}}))
        out.append((b"small after the chunked one", {}))
        return out
    count = {"p-parted": 9, "p-zlib": 4, "p-snappy": 3}.get(name, 10)
    for i in range(count):
        text = f"{topic} message {i} " + "lorem ipsum dolor sit amet " * (i % 4)
        kw: dict = {}
        if name == "p-zstd-batch":
            kw["partition_key"] = f"k{i % 3}"
        if i % 3 == 0:
            kw["properties"] = {"i": str(i)}
        out.append((text.encode(), kw))
    return out


def run_workload(url: str, log_path: Path) -> dict:
    import pulsar

    logger = logging.getLogger("pulsar-client")
    logger.setLevel(logging.WARNING)
    handler = logging.FileHandler(log_path)
    logger.addHandler(handler)
    comp = {"NONE": pulsar.CompressionType.NONE, "LZ4": pulsar.CompressionType.LZ4,
            "ZLib": pulsar.CompressionType.ZLib, "ZSTD": pulsar.CompressionType.ZSTD,
            "SNAPPY": pulsar.CompressionType.SNAPPY}
    ctype = {"Exclusive": pulsar.ConsumerType.Exclusive, "Shared": pulsar.ConsumerType.Shared,
             "Failover": pulsar.ConsumerType.Failover,
             "KeyShared": pulsar.ConsumerType.KeyShared}
    rng = random.Random(6650)
    problems: list[str] = []
    # two clients: one for consumers, one for producers (two TCP connections)
    c_client = pulsar.Client(url, logger=logger, operation_timeout_seconds=10)
    p_client = pulsar.Client(url, logger=logger, operation_timeout_seconds=10)
    consumers = {}
    for name, (topic, sub, typ, _) in CONSUMERS.items():
        consumers[name] = c_client.subscribe(
            NS + topic, sub, consumer_type=ctype[typ], consumer_name=name,
            initial_position=pulsar.InitialPosition.Earliest,
        )
    sent: dict[str, dict[str, Digest]] = {}
    expected_by_topic: dict[str, int] = {}
    for name, (topic, batching, codec, chunking, _parts) in PRODUCERS.items():
        prod = p_client.create_producer(
            NS + topic, producer_name=name, batching_enabled=batching,
            compression_type=comp[codec], chunking_enabled=chunking,
            batching_max_publish_delay_ms=50,
        )
        msgs = payloads(name, rng)
        ids: list = [None] * len(msgs)
        if batching:
            def done(i: int, name: str = name, ids: list = ids):
                def cb(res, msg_id) -> None:
                    if res != pulsar.Result.Ok:
                        problems.append(f"{name}: send {i} failed: {res}")
                    ids[i] = msg_id
                return cb
            # two batches (two entries), so that a Shared subscription's two consumers get
            # one each
            half = len(msgs) // 2
            for i, (data, kw) in enumerate(msgs):
                prod.send_async(data, done(i), **kw)
                if i + 1 == half:
                    prod.flush()
            prod.flush()
        else:
            for i, (data, kw) in enumerate(msgs):
                ids[i] = prod.send(data, **kw)
        per_topic: dict[str, Digest] = {}
        for (data, _), mid in zip(msgs, ids, strict=True):
            if mid is None:
                problems.append(f"{name}: a send got no message id")
                continue
            t = NS + topic + (f"-partition-{mid.partition()}" if mid.partition() >= 0 else "")
            per_topic.setdefault(t, Digest()).add(data)
        sent[name] = per_topic
        expected_by_topic[topic] = len(msgs)
        prod.close()
    # receive everything: per subscription the number of messages its topic got
    received: dict[str, dict[str, Digest]] = {n: {} for n in CONSUMERS}
    acks = {n: 0 for n in CONSUMERS}
    subs: dict[tuple[str, str], list[str]] = {}
    for name, (topic, sub, _, _) in CONSUMERS.items():
        subs.setdefault((topic, sub), []).append(name)
    deadline = time.monotonic() + 30
    for (topic, _sub), names in subs.items():
        want = expected_by_topic[topic]
        got = 0
        last = {}
        while got < want and time.monotonic() < deadline:
            progress = False
            for name in names:
                try:
                    msg = consumers[name].receive(200)
                except Exception:  # pulsar.Timeout
                    continue
                progress = True
                got += 1
                received[name].setdefault(msg.topic_name(), Digest()).add(msg.data())
                if CONSUMERS[name][3] == "individual":
                    consumers[name].acknowledge(msg)
                    acks[name] += 1
                else:
                    last[name] = msg
            if not progress:
                continue
        for name, msg in last.items():
            consumers[name].acknowledge_cumulative(msg)
            acks[name] += 1
        if got != want:
            problems.append(f"{topic}: received {got} of {want} messages")
    time.sleep(0.5)  # let the grouped ACKs go out (ackGroupingTimeMs 100)
    for c in consumers.values():
        c.close()
    p_client.close()
    c_client.close()
    handler.close()
    return {
        "producers": {
            n: {"topic": NS + PRODUCERS[n][0], "batching": PRODUCERS[n][1],
                "compression": PRODUCERS[n][2], "chunking": PRODUCERS[n][3],
                "partitions": PRODUCERS[n][4],
                "sent": {t: d.as_json() for t, d in sorted(v.items())}}
            for n, v in sent.items()
        },
        "consumers": {
            n: {"topic": NS + CONSUMERS[n][0], "subscription": CONSUMERS[n][1],
                "type": CONSUMERS[n][2], "ack": CONSUMERS[n][3], "acknowledge_calls": acks[n],
                "received": {t: d.as_json() for t, d in sorted(received[n].items())}}
            for n in CONSUMERS
        },
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True,
                    help="output prefix; writes PREFIX.pcap and PREFIX.truth.json")
    ap.add_argument("--port", type=int, default=0, help="emulator port (default: a free one)")
    ap.add_argument("--tail-wait", type=float, default=2.0,
                    help="seconds between the last client close and stopping tcpdump")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args(argv)
    prefix = args.out[:-5] if args.out.endswith(".pcap") else args.out
    pcap_path, truth_path = Path(prefix + ".pcap"), Path(prefix + ".truth.json")
    pcap_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import pulsar  # noqa: F401
    except ImportError:
        die(f"pulsar-client is not importable by {sys.executable}; pip install -e '.[test]'")
    from importlib.metadata import version as pkg_version

    tcpdump = find_tcpdump()
    tcpdump_version = subprocess.run([tcpdump, "--version"], capture_output=True,
                                     text=True).stdout.splitlines()[0].strip()
    port = args.port or free_port()
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-pulsar-"))
    emu = dump = None
    try:
        emu_out = tmp / "emulator.out"
        with open(emu_out, "wb") as f:
            emu = subprocess.Popen(
                [sys.executable, str(HERE / "pulsar_emulator.py"), "--port", str(port),
                 "--max-message-size", str(MAX_MESSAGE_SIZE), "--log", str(tmp / "emulator.log"),
                 "--partitioned", f"{NS}parted=3"],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            )
        wait_for_text(emu_out, r"listening on", emu, "pulsar emulator")
        if pcap_path.exists():
            pcap_path.unlink()
        dump_err = tmp / "tcpdump.stderr"
        with open(dump_err, "wb") as err_f:
            dump = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "--immediate-mode", "-U",
                 "-Z", "root", "-w", str(pcap_path), f"tcp port {port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_f,
            )
        wait_for_text(dump_err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        started = dt.datetime.now(dt.UTC)
        t0 = time.monotonic()
        result = run_workload(f"pulsar://{HOST}:{port}", tmp / "client.log")
        seconds = time.monotonic() - t0
        time.sleep(args.tail_wait)  # the capture tail (FIN/ACK) before stopping tcpdump
        rc = stop(dump, signal.SIGINT)
        dump_text = dump_err.read_text(errors="replace")
        stats = {k: int(v) for v, k in re.findall(
            r"(\d+) packets? (captured|received by filter|dropped by kernel)", dump_text)}
        if rc not in (0, None) or "captured" not in stats:
            die(f"tcpdump exited with {rc}:\n{dump_text}")
        stop(emu, signal.SIGTERM)
        client_log = (tmp / "client.log").read_text(errors="replace")
        emu_warnings = [ln for ln in (tmp / "emulator.log").read_text().splitlines()
                        if "unhandled" in ln]
    finally:
        for p, sig in ((dump, signal.SIGINT), (emu, signal.SIGTERM)):
            if p is not None:
                stop(p, sig, timeout=10)
        if args.keep_tmp:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    packets = count_pcap_packets(pcap_path)
    problems = list(result.pop("problems"))
    if stats.get("dropped by kernel", 0):
        problems.append(f"tcpdump reports {stats['dropped by kernel']} dropped by kernel")
    if packets != stats["captured"]:
        problems.append(f"pcap has {packets} records but tcpdump reported {stats['captured']}")
    truth = {
        "format": "msgcap-pulsar-truth/1",
        "capture": pcap_path.name,
        "recorded_at": started.isoformat(timespec="seconds"),
        "workload_seconds": round(seconds, 3),
        "command": "python samples/record_pulsar.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "server": {"software": "samples/pulsar_emulator.py", "ip": HOST, "port": port,
                   "max_message_size": MAX_MESSAGE_SIZE,
                   "partitioned": {f"{NS}parted": 3}},
        "client": {"software": "pulsar-client (official, C++ based)",
                   "version": pkg_version("pulsar-client"), "python": sys.version.split()[0]},
        "tcpdump": {"version": tcpdump_version, "filter": f"tcp port {port}", "interface": "lo",
                    **{k.replace(" ", "_"): v for k, v in stats.items()}},
        "pcap": {"bytes": pcap_path.stat().st_size, "packets": packets},
        "payload_sha256_scheme": PAYLOAD_SHA256_SCHEME,
        "counting": {
            "producers.sent": "per producer, per topic (partition topics by the partition of "
            "the message id each send returned), payloads in send-call order",
            "consumers.received": "per consumer, per topic (Message.topic_name()), payloads "
            "in the order receive() returned them",
            "acknowledge_calls": "acknowledge() / acknowledge_cumulative() calls made",
        },
        **result,
        "client_warnings": [ln for ln in client_log.splitlines() if ln.strip()][:50],
        "emulator_unhandled": emu_warnings,
        "problems": problems,
    }
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    print(f"wrote {pcap_path} ({pcap_path.stat().st_size} bytes, {packets} packets) and "
          f"{truth_path}; workload {seconds:.1f}s")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

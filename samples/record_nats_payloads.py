#!/usr/bin/env python3
"""Record nats-py publishing JSON, Protobuf, MessagePack, CBOR and gzip-wrapped payloads
through a real nats-server, with the values the client encoded as ground truth.

    python samples/record_nats_payloads.py --out samples/nats-payloads

Writes OUT.pcap and OUT.truth.json: for every published message, in publish order, its
subject, encoding, the value the client encoded (JSON text of the Python object; for
Protobuf the message's proto3 JSON mapping with proto field names, made by the client from
the object it serialized) and the SHA-256 of the bytes it handed to nats-py.  A subscriber
on ``>`` receives each message back (MSG rows).  The Protobuf schema is
samples/payloads/shop.proto.  Needs root for tcpdump; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gzip
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from record_nats import (  # noqa: E402 - the shared recording helpers
    HOST,
    count_pcap_packets,
    die,
    find_nats_server,
    find_tcpdump,
    free_port,
    stop,
    wait_for_text,
)

PROTO = HERE / "payloads" / "shop.proto"


def _order_class() -> type:
    from google.protobuf import descriptor_pb2

    from dissectors.payload.schemas import protobuf_class
    from dissectors.proto.build import compile_protos

    files = compile_protos(PROTO.parent, (PROTO.name,))
    protos = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in files.values()]
    return protobuf_class(protos, "shop.OrderEvent")[0]


def messages() -> list[dict]:
    """The workload: (subject, encoding, value, bytes), fixed so the truth is exact."""
    import cbor2
    import msgpack
    from google.protobuf import json_format

    order = _order_class()
    out: list[dict] = []

    def add(subject: str, encoding: str, value: object, data: bytes) -> None:
        out.append({"subject": subject, "encoding": encoding, "value": value, "data": data})

    for i in range(5):
        doc = {"order_id": 1000 + i, "region": "eu", "items": [{"sku": f"A-{i}", "qty": i + 1}],
               "total": round(12.5 * (i + 1), 2), "express": i % 2 == 0, "note": None}
        add("orders.eu", "json", doc, json.dumps(doc).encode())
    login = {"user": "alice", "password": "s3cr3t-pw", "attempt": 1}
    add("auth.login", "json", login, json.dumps(login).encode())
    for i in range(5):
        msg = order(order_id=2**40 + i, customer=f"cust-{i}", status=1 + i % 2, gift=i == 3,
                    token=bytes([i, 255 - i]),
                    lines=[{"sku": f"B-{j}", "qty": j + 1, "price": 1.25 * (j + 1)}
                           for j in range(i % 3 + 1)])
        truth = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        add(f"shop.events.{['placed', 'shipped'][i % 2]}", "protobuf", truth,
            msg.SerializeToString())
    for i in range(3):
        m = {"host": f"h{i}", "cpu": [0.5 * i, 1.0], "up": True}
        add("metrics.host", "msgpack", m, msgpack.packb(m))
    for i in range(3):
        m = {"sensor": i, "temp": 20.25 + i, "ok": i != 1}
        add("sensors.cbor", "cbor", m, cbor2.dumps(m))
    for i in range(2):
        m = {"log": f"line {i}", "level": "info"}
        add("logs.gz", "gzip+json", m, gzip.compress(json.dumps(m).encode(), mtime=0))
    return out


async def workload(url: str, msgs: list[dict]) -> int:
    import nats

    nc = await nats.connect(url)
    got: list[bytes] = []
    done = asyncio.Event()

    async def cb(m) -> None:
        got.append(m.data)
        if len(got) == len(msgs):
            done.set()

    await nc.subscribe(">", cb=cb)
    await nc.flush()
    for m in msgs:
        await nc.publish(m["subject"], m["data"])
        await nc.flush()
    await asyncio.wait_for(done.wait(), 10)
    await nc.drain()
    if got != [m["data"] for m in msgs]:
        die("the subscriber did not get back the bytes published")
    return len(got)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output path without extension")
    args = ap.parse_args(argv)
    server_bin, tcpdump = find_nats_server(None), find_tcpdump()
    msgs = messages()
    pcap = Path(args.out + ".pcap")
    port = free_port()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        log = tmp / "server.log"
        with open(log, "wb") as lf:
            server = subprocess.Popen([server_bin, "-a", HOST, "-p", str(port)],
                                      stdout=lf, stderr=subprocess.STDOUT)
        wait_for_text(log, r"Server is ready", server, "nats-server")
        err = tmp / "tcpdump.stderr"
        with open(err, "wb") as ef:
            dump = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "--immediate-mode", "-U", "-Z", "root",
                 "-w", str(pcap), f"tcp port {port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_text(err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        received = asyncio.run(workload(f"nats://{HOST}:{port}", msgs))
        time.sleep(1.0)
        stop(dump, signal.SIGINT)
        stop(server, signal.SIGTERM)
        dump_text = err.read_text(errors="replace")
    truth = {
        "format": "msgcap-payload-truth/1",
        "capture": pcap.name,
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python samples/record_nats_payloads.py --out " + args.out,
        "server_port": port,
        "schema": "samples/payloads/shop.proto#shop.OrderEvent",
        "received_back": received,
        "packets": count_pcap_packets(pcap),
        "tcpdump": dump_text.strip().splitlines()[-3:],
        "messages": [
            {"subject": m["subject"], "encoding": m["encoding"], "value": m["value"],
             "sha256": hashlib.sha256(m["data"]).hexdigest(), "len": len(m["data"])}
            for m in msgs
        ],
    }
    Path(args.out + ".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{pcap}: {truth['packets']} packets, {len(msgs)} messages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

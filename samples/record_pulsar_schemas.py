#!/usr/bin/env python3
"""Record the official Pulsar client producing with schemas (Avro, Protobuf-native, JSON,
String) against our broker emulator, with the values the client sent and received.

    python samples/record_pulsar_schemas.py --out samples/pulsar-schemas

The producers announce their schema in PRODUCER (the emulator keeps a per-topic registry
and answers with a schema_version the client stamps on each message); a consumer with the
same schema subscribes to each topic (its SUBSCRIBE carries the schema too) and receives
everything.  Truth: per topic, in send order, the value the application passed to
``send`` (Avro/JSON records as dicts, Protobuf as its proto3 JSON mapping) and the value
the consumer's ``msg.value()`` gave back.  Needs root for tcpdump; loopback only.
"""

from __future__ import annotations

import argparse
import datetime as dt
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
from record_nats import (  # noqa: E402 - shared recorder helpers
    count_pcap_packets,
    die,
    find_tcpdump,
    free_port,
    stop,
    wait_for_text,
)
from record_nats_payloads import _order_class  # noqa: E402 - the shop.proto message

HOST = "127.0.0.1"
NS = "persistent://public/default/"


def run_workload(url: str) -> dict:
    import pulsar
    from google.protobuf import json_format
    from pulsar.schema import (
        AvroSchema,
        Boolean,
        Double,
        Integer,
        JsonSchema,
        ProtobufNativeSchema,
        Record,
        String,
        StringSchema,
    )

    class Order(Record):
        _avro_namespace = "shop"
        order_id = Integer()
        customer = String()
        total = Double()
        express = Boolean()

    class Reading(Record):
        sensor = String()
        value = Double()

    order_pb = _order_class()
    client = pulsar.Client(url, operation_timeout_seconds=10)
    topics = {
        "avro-orders": AvroSchema(Order),
        "pb-events": ProtobufNativeSchema(order_pb),
        "json-readings": JsonSchema(Reading),
        "strings": StringSchema(),
    }
    consumers = {t: client.subscribe(NS + t, f"sub-{t}", schema=s,
                                     initial_position=pulsar.InitialPosition.Earliest)
                 for t, s in topics.items()}
    sent: dict[str, list] = {t: [] for t in topics}
    for t, schema in topics.items():
        prod = client.create_producer(NS + t, schema=schema, producer_name=f"p-{t}",
                                      batching_enabled=False)
        for i in range(4):
            if t == "avro-orders":
                v = Order(order_id=500 + i, customer=f"c{i}", total=10.5 * (i + 1),
                          express=i % 2 == 1)
                truth = {"order_id": 500 + i, "customer": f"c{i}", "total": 10.5 * (i + 1),
                         "express": i % 2 == 1}
            elif t == "pb-events":
                v = order_pb(order_id=9000 + i, customer=f"pb{i}", status=1 + i % 2,
                             lines=[{"sku": f"S{i}", "qty": i + 1, "price": 0.5 * (i + 1)}])
                truth = json_format.MessageToDict(v, preserving_proto_field_name=True)
            elif t == "json-readings":
                v = Reading(sensor=f"r{i}", value=i + 0.25)
                truth = {"sensor": f"r{i}", "value": i + 0.25}
            else:
                v = truth = f"hello {i} ü"
            prod.send(v)
            sent[t].append(truth)
        prod.close()
    received: dict[str, list] = {}
    for t, c in consumers.items():
        got = []
        for _ in range(4):
            m = c.receive(timeout_millis=10000)
            v = m.value()
            if t == "pb-events":
                v = json_format.MessageToDict(v, preserving_proto_field_name=True)
            elif t in ("avro-orders", "json-readings"):
                v = {k: getattr(v, k) for k in sent[t][0]}
            got.append(v)
            c.acknowledge(m)
        received[t] = got
        c.close()
    client.close()
    problems = [t for t in topics if received[t] != sent[t]]
    return {"sent": sent, "received": received, "problems": problems,
            "schemas": {t: type(s).__name__ for t, s in topics.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.pcap, .truth.json)")
    args = ap.parse_args(argv)
    pcap = Path(args.out + ".pcap")
    tcpdump = find_tcpdump()
    port = free_port()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        emu_out = tmp / "emulator.out"
        with open(emu_out, "wb") as f:
            emu = subprocess.Popen(
                [sys.executable, str(HERE / "pulsar_emulator.py"), "--port", str(port),
                 "--log", str(tmp / "emulator.log")],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        wait_for_text(emu_out, r"listening on", emu, "pulsar emulator")
        err = tmp / "tcpdump.stderr"
        with open(err, "wb") as ef:
            dump = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "--immediate-mode", "-U", "-Z", "root",
                 "-w", str(pcap), f"tcp port {port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_text(err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        try:
            result = run_workload(f"pulsar://{HOST}:{port}")
        finally:
            time.sleep(1.5)
            stop(dump, signal.SIGINT)
            stop(emu, signal.SIGTERM)
    if result["problems"]:
        die(f"the consumers did not get back what was sent on {result['problems']}")
    from importlib.metadata import version

    truth = {
        "format": "msgcap-pulsar-schema-truth/1",
        "capture": pcap.name,
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python samples/record_pulsar_schemas.py --out " + args.out,
        "server": {"software": "samples/pulsar_emulator.py", "port": port},
        "client": {"software": "pulsar-client (official)", "version": version("pulsar-client")},
        "packets": count_pcap_packets(pcap),
        "namespace": NS,
        **result,
    }
    Path(args.out + ".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{pcap}: {truth['packets']} packets", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

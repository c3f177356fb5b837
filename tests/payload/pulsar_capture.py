"""A synthetic Pulsar capture where a schema crosses connections: a producer announces an
Avro schema on one connection (version 5 in PRODUCER_SUCCESS) and sends three messages; a
consumer that announced no schema receives them on another.  One process decodes the
consumer's messages with the producer's schema, so every way of dividing the work by
connection (``--workers``, the Spark split path) must too."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import fastavro

from dissectors.pulsar.pb import message_class
from tests.pulsar.wire import cmd, frame, metadata
from tests.spark.synth import _Conn, _Writer

AVSC = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"},
                                                       {"name": "sku", "type": "string"}]}
TOPIC = "persistent://public/default/orders"
VERSION = (5).to_bytes(8, "big")


def _avro(value: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVSC), value)
    return buf.getvalue()


def write_two_connection_capture(path: Path, n: int = 3) -> list[dict]:
    """Producer (10.0.0.1) announces the schema, gets version 5 and sends ``n`` messages; a
    consumer (10.0.0.2) subscribes without a schema and receives them.  Returns the values."""
    random.seed(24)
    w = _Writer(path)
    avro = message_class("Schema").Type.Value("Avro")
    values = [{"id": i, "sku": f"sku-{i}"} for i in range(n)]
    prod = _Conn(w, bytes([10, 0, 0, 1]), 40000, 6650)
    cons = _Conn(w, bytes([10, 0, 0, 2]), 40001, 6650)
    t = 1_700_000_000_000_000
    for c in (prod, cons):
        c._seg(t, True, 0x02)
        c._seg(t + 10, False, 0x12)
        c._seg(t + 20, True, 0x10)
        c.send(t + 30, True, frame(cmd("CONNECT", client_version="t", protocol_version=15)))
        c.send(t + 40, False, frame(cmd("CONNECTED", server_version="t", protocol_version=15)))
        t += 100
    prod.send(t, True, frame(cmd("PRODUCER", topic=TOPIC, producer_id=1, request_id=1, schema={
        "name": "orders", "type": avro, "schema_data": json.dumps(AVSC).encode()})))
    prod.send(t + 10, False, frame(cmd("PRODUCER_SUCCESS", request_id=1, producer_name="p",
                                       schema_version=VERSION)))
    cons.send(t + 20, True, frame(cmd("SUBSCRIBE", topic=TOPIC, subscription="s",
                                      sub_type=0, consumer_id=1, request_id=2)))
    cons.send(t + 30, False, frame(cmd("SUCCESS", request_id=2)))
    for i, v in enumerate(values):
        t += 100
        md = metadata(producer_name="p", sequence_id=i, publish_time=1, schema_version=VERSION)
        prod.send(t, True, frame(cmd("SEND", producer_id=1, sequence_id=i), md, _avro(v)))
        cons.send(t + 10, False, frame(cmd("MESSAGE", consumer_id=1, message_id={
            "ledger_id": 1, "entry_id": i}), md, _avro(v)))
    for c in (prod, cons):
        t += 100
        c.close(t)
    w.close()
    return values

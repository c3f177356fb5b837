#!/usr/bin/env python3
"""A small Pulsar broker emulator: enough of the binary protocol for the official client.

    python samples/pulsar_emulator.py --port 6650 [--partitioned NAME=N ...]

Speaks (protocol-facts §4): CONNECT/CONNECTED, PARTITIONED_METADATA(_RESPONSE),
LOOKUP(_RESPONSE), PRODUCER/PRODUCER_SUCCESS, SEND/SEND_RECEIPT, SUBSCRIBE/SUCCESS (plus
ACTIVE_CONSUMER_CHANGE for Failover), FLOW, MESSAGE delivery of what was produced, ACK,
CLOSE_PRODUCER/CLOSE_CONSUMER/UNSUBSCRIBE → SUCCESS, PING/PONG (it also pings each client
once).  Messages are kept in memory per topic exactly as the producer framed them
(metadata size + metadata + payload, the part the checksum covers) and delivered
verbatim with a fresh CRC-32C, plus broker entry metadata (0x0e02) when the client
announced support for it.  Subscriptions start at the earliest message; Shared and
Key_Shared subscriptions deal messages round-robin among their consumers, Failover and
Exclusive give them to the first consumer.  Not a broker: no persistence, no
redelivery, no auth, no TLS; loopback only.

Commands are encoded and decoded with protobuf classes built from msgcap's own
``dissectors/pulsar/pulsar.proto`` (so a wrong field number there shows up as a client
that does not work).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dissectors.pulsar.pb import message_class  # noqa: E402

BaseCommand = message_class("BaseCommand")
BrokerEntryMetadata = message_class("BrokerEntryMetadata")
T = BaseCommand.Type
SERVER_VERSION = "msgcap-emulator-1"
PROTOCOL_VERSION = 19
LEDGER = 7
log = logging.getLogger("pulsar-emulator")


def frame(cmd, payload_section: bytes = b"") -> bytes:
    body = cmd.SerializeToString()
    return struct.pack(">II", 4 + len(body) + len(payload_section), len(body)) + body + \
        payload_section


@dataclass
class Entry:
    entry_id: int
    headers_and_payload: bytes  # metadata size + metadata + payload
    num_messages: int


@dataclass
class Subscription:
    topic: str
    name: str
    sub_type: int
    cursor: int = 0
    consumers: list = field(default_factory=list)
    rr: int = 0


@dataclass
class Consumer:
    conn: Connection
    consumer_id: int
    sub: Subscription
    permits: int = 0


class Broker:
    def __init__(self, port: int, partitioned: dict[str, int], max_message_size: int) -> None:
        self.port = port
        self.partitioned = partitioned
        self.max_message_size = max_message_size
        self.topics: dict[str, list[Entry]] = {}
        self.subs: dict[tuple[str, str], Subscription] = {}
        self.producer_names = itertools.count()
        self.entry_ids = itertools.count()
        self.index = 0
        # schema registry: per topic, the schemas producers announced, in order; the
        # version is the index as 8 big-endian bytes (how Pulsar's own versions look)
        self.schemas: dict[str, list[bytes]] = {}

    def schema_version(self, topic: str, schema: bytes) -> bytes:
        known = self.schemas.setdefault(topic, [])
        if schema not in known:
            known.append(schema)
        return struct.pack(">q", known.index(schema))

    def store(self, topic: str, hp: bytes, n: int) -> Entry:
        e = Entry(next(self.entry_ids), hp, n)
        self.topics.setdefault(topic, []).append(e)
        return e

    def dispatch(self, topic: str) -> None:
        entries = self.topics.get(topic, [])
        for (t, _), sub in self.subs.items():
            if t != topic:
                continue
            while sub.cursor < len(entries) and sub.consumers:
                if sub.sub_type in (1, 3):  # Shared, Key_Shared: round-robin with permits
                    ready = [c for c in sub.consumers if c.permits > 0]
                    if not ready:
                        break
                    c = ready[sub.rr % len(ready)]
                    sub.rr += 1
                else:  # Exclusive, Failover: the first (active) consumer
                    c = sub.consumers[0]
                    if c.permits <= 0:
                        break
                e = entries[sub.cursor]
                sub.cursor += 1
                c.permits -= e.num_messages
                c.conn.deliver(c, e)


class Connection:
    def __init__(self, broker: Broker, reader, writer) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.producers: dict[int, str] = {}
        self.consumers: dict[int, Consumer] = {}
        self.bem = False
        self.peer = writer.get_extra_info("peername")

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def cmd(self, type_, **sub) -> bytes:
        c = BaseCommand(type=type_)
        name = BaseCommand.DESCRIPTOR.fields_by_number[type_].name
        getattr(c, name).SetInParent()
        for k, v in sub.items():
            target = getattr(c, name)
            if isinstance(v, dict):
                getattr(target, k).SetInParent()
                for kk, vv in v.items():
                    setattr(getattr(target, k), kk, vv)
            else:
                setattr(target, k, v)
        return frame(c)

    def deliver(self, c: Consumer, e: Entry) -> None:
        cmd = BaseCommand(type=T.MESSAGE)
        cmd.message.consumer_id = c.consumer_id
        cmd.message.message_id.ledger_id = LEDGER
        cmd.message.message_id.entry_id = e.entry_id
        cmd.message.redelivery_count = 0
        section = b""
        if self.bem:
            self.broker.index += e.num_messages
            bem = BrokerEntryMetadata(broker_timestamp=int(time.time() * 1000),
                                      index=self.broker.index - 1).SerializeToString()
            section += struct.pack(">HI", 0x0E02, len(bem)) + bem
        hp = e.headers_and_payload
        section += struct.pack(">HI", 0x0E01, crc32c.crc32c(hp)) + hp
        self.send(frame(cmd, section))

    async def run(self) -> None:
        log.info("connection from %s", self.peer)
        try:
            while True:
                head = await self.reader.readexactly(4)
                (total,) = struct.unpack(">I", head)
                body = await self.reader.readexactly(total)
                self.handle(body)
                await self.writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        finally:
            for c in self.consumers.values():
                if c in c.sub.consumers:
                    c.sub.consumers.remove(c)
            self.writer.close()
            log.info("connection from %s closed", self.peer)

    def handle(self, body: bytes) -> None:
        (csize,) = struct.unpack_from(">I", body, 0)
        cmd = BaseCommand.FromString(body[4 : 4 + csize])
        rest = body[4 + csize :]
        t = cmd.type
        b = self.broker
        log.info("%s <- %s", self.peer, T.Name(t))
        if t == T.CONNECT:
            self.bem = cmd.connect.feature_flags.supports_broker_entry_metadata
            c = BaseCommand(type=T.CONNECTED)
            c.connected.server_version = SERVER_VERSION
            c.connected.protocol_version = min(PROTOCOL_VERSION, cmd.connect.protocol_version)
            c.connected.max_message_size = b.max_message_size
            c.connected.feature_flags.supports_topic_watchers = False
            self.send(frame(c))
            self.send(self.cmd(T.PING))
        elif t == T.PING:
            self.send(self.cmd(T.PONG))
        elif t == T.PONG:
            pass
        elif t == T.PARTITIONED_METADATA:
            p = cmd.partitioned_metadata
            n = b.partitioned.get(p.topic, 0)
            self.send(self.cmd(T.PARTITIONED_METADATA_RESPONSE, partitions=n,
                               request_id=p.request_id, response=0))
        elif t == T.LOOKUP:
            lk = cmd.lookup
            self.send(self.cmd(T.LOOKUP_RESPONSE,
                               broker_service_url=f"pulsar://127.0.0.1:{b.port}",
                               response=1, request_id=lk.request_id, authoritative=True,
                               proxy_through_service_url=False))
        elif t == T.PRODUCER:
            p = cmd.producer
            self.producers[p.producer_id] = p.topic
            name = p.producer_name if p.HasField("producer_name") else \
                f"emulator-{next(b.producer_names)}"
            r = BaseCommand(type=T.PRODUCER_SUCCESS)
            r.producer_success.request_id = p.request_id
            r.producer_success.producer_name = name
            r.producer_success.last_sequence_id = -1
            r.producer_success.producer_ready = True
            if p.HasField("schema"):
                r.producer_success.schema_version = b.schema_version(
                    p.topic, p.schema.SerializeToString())
            self.send(frame(r))
        elif t == T.GET_SCHEMA:
            g = cmd.get_schema
            r = BaseCommand(type=T.GET_SCHEMA_RESPONSE)
            r.get_schema_response.request_id = g.request_id
            known = b.schemas.get(g.topic, [])
            i = struct.unpack(">q", g.schema_version)[0] if g.HasField("schema_version") \
                else len(known) - 1
            if 0 <= i < len(known):
                r.get_schema_response.schema.ParseFromString(known[i])
                r.get_schema_response.schema_version = struct.pack(">q", i)
            else:
                r.get_schema_response.error_code = 11  # TopicNotFound: no such schema
                r.get_schema_response.error_message = "schema not found"
            self.send(frame(r))
        elif t == T.SEND:
            s = cmd.send
            topic = self.producers.get(s.producer_id, "?")
            if rest[:2] == b"\x0e\x01":
                rest = rest[6:]
            e = b.store(topic, rest, s.num_messages if s.HasField("num_messages") else 1)
            r = BaseCommand(type=T.SEND_RECEIPT)
            r.send_receipt.producer_id = s.producer_id
            r.send_receipt.sequence_id = s.sequence_id
            r.send_receipt.message_id.ledger_id = LEDGER
            r.send_receipt.message_id.entry_id = e.entry_id
            if s.HasField("highest_sequence_id"):
                r.send_receipt.highest_sequence_id = s.highest_sequence_id
            self.send(frame(r))
            b.dispatch(topic)
        elif t == T.SUBSCRIBE:
            s = cmd.subscribe
            key = (s.topic, s.subscription)
            sub = b.subs.get(key)
            if sub is None:
                sub = b.subs[key] = Subscription(s.topic, s.subscription, s.sub_type)
            c = Consumer(self, s.consumer_id, sub)
            sub.consumers.append(c)
            self.consumers[s.consumer_id] = c
            self.send(self.cmd(T.SUCCESS, request_id=s.request_id))
            if s.sub_type == 2:  # Failover: tell who is active
                active = sub.consumers[0] is c
                self.send(self.cmd(T.ACTIVE_CONSUMER_CHANGE, consumer_id=s.consumer_id,
                                   is_active=active))
        elif t == T.FLOW:
            f = cmd.flow
            c = self.consumers.get(f.consumer_id)
            if c is not None:
                c.permits += f.message_permits
                b.dispatch(c.sub.topic)
        elif t == T.ACK:
            pass
        elif t in (T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.UNSUBSCRIBE):
            sub_name = BaseCommand.DESCRIPTOR.fields_by_number[t].name
            s = getattr(cmd, sub_name)
            if t != T.CLOSE_PRODUCER:
                c = self.consumers.pop(s.consumer_id, None)
                if c is not None and c in c.sub.consumers:
                    c.sub.consumers.remove(c)
            else:
                self.producers.pop(s.producer_id, None)
            self.send(self.cmd(T.SUCCESS, request_id=s.request_id))
        elif t == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            pass
        else:
            log.warning("%s: unhandled %s", self.peer, T.Name(t))


async def serve(port: int, partitioned: dict[str, int], max_message_size: int) -> None:
    broker = Broker(port, partitioned, max_message_size)

    async def on_client(reader, writer) -> None:
        await Connection(broker, reader, writer).run()

    server = await asyncio.start_server(on_client, "127.0.0.1", port)
    print(f"pulsar emulator listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--partitioned", action="append", default=[],
                    help="TOPIC=N: a partitioned topic (full name) with N partitions")
    ap.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024)
    ap.add_argument("--log", help="log file (default: stderr, warnings only)")
    args = ap.parse_args(argv)
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO,
                            format="%(asctime)s %(message)s")
    else:
        logging.basicConfig(level=logging.WARNING)
    parts = {}
    for p in args.partitioned:
        name, _, n = p.rpartition("=")
        parts[name] = int(n)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, parts, args.max_message_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())

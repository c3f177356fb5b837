#!/usr/bin/env python3
"""Record Liftbridge-over-NATS traffic through a real nats-server, with sender-side truth.

Liftbridge (Go) is not installable here (not on PyPI or in Debian; the PyPI Liftbridge
clients speak the gRPC API on port 9292, not NATS).  So this recorder emulates what
Liftbridge puts on NATS (protocol-facts §3) with nats-py, using
samples/record_stan.py's harness (nats-server + tcpdump, instrumented connections):

* `lb-server-a`: metadata and partition leader of stream `orders` (partitions on
  subjects `orders` and `orders.1`); answers the internal RPCs, stores publishes, sends
  Acks, serves replication with real message sets, publishes a PartitionNotification.
* `lb-server-b`: a follower: RaftJoin, ServerInfo, PropagatedRequest (CreateStream, join
  consumer group, a pause of an unknown stream), PartitionStatus, Replication (data and
  empty fetches), LeaderEpochOffset; publishes an activity-stream event.
* `lb-client`: publishes envelopes (type 0, one with the CRC flag and a correct CRC-32C)
  and plain messages to the stream subjects, a cursor update to `<ns>.cursors`, and
  receives Acks.  One plain message goes out before the stream exists (so no one can know
  it is stream data).

Envelopes are built here from the facts (§3.1, §3.4), protobufs with the official
runtime from our .proto files.  No Go code ever writes the envelope CRC; the one CRC
envelope stands for a client that does.

    python samples/record_liftbridge.py --out samples/liftbridge-basic
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import crc32c  # noqa: E402
import record_stan as rs  # noqa: E402  (also puts the repository on sys.path)

from dissectors.proto import message_class  # noqa: E402

NS = "liftbridge-default"
MAGIC = b"\xb9\x0e\x43\xb4"
TYPES = {
    "Publish": 0, "Ack": 1, "ReplicationRequest": 2, "ReplicationResponse": 3,
    "RaftJoinRequest": 4, "RaftJoinResponse": 5, "LeaderEpochOffsetRequest": 6,
    "LeaderEpochOffsetResponse": 7, "PropagatedRequest": 8, "PropagatedResponse": 9,
    "ServerInfoRequest": 10, "ServerInfoResponse": 11, "PartitionStatusRequest": 12,
    "PartitionStatusResponse": 13, "PartitionNotification": 14,
}
NAMES = {v: k for k, v in TYPES.items()}


def api(name: str):
    return message_class(f"msgcap.liftbridge.api.{name}")


def internal(name: str):
    return message_class(f"msgcap.liftbridge.internal.{name}")


def envelope(kind: str, body: bytes, crc: bool = False) -> bytes:
    """protocol-facts §3.1: magic, version 0, HeaderLen, flags, MsgType[, CRC-32C]."""
    if crc:
        return (MAGIC + bytes([0, 12, 1, TYPES[kind]]) + struct.pack(">I", crc32c.crc32c(body))
                + body)
    return MAGIC + bytes([0, 8, 0, TYPES[kind]]) + body


def kind_of(payload: bytes) -> str:
    return NAMES[payload[7]] if payload[:4] == MAGIC else "plain"


def value_of(kind: str, payload: bytes) -> bytes | None:
    """What the value digests cover: Message.value of a Publish, the whole plain payload."""
    if kind in ("plain", "plain_unlearned"):
        return payload
    if kind == "Publish":
        return api("Message").FromString(payload[payload[5]:]).value
    return None


def commitlog_message(key: bytes | None, value: bytes | None,
                      headers: list[tuple[bytes, bytes]]) -> bytes:
    """§3.4 serialized message: crc, magic 1, attributes 0, key, value, headers."""
    def blob(b: bytes | None, fmt: str) -> bytes:
        return struct.pack(fmt, -1) if b is None else struct.pack(fmt, len(b)) + b

    body = b"\x01\x00" + blob(key, ">i") + blob(value, ">i") + struct.pack(">h", len(headers))
    for k, v in headers:
        body += blob(k, ">h") + blob(v, ">i")
    return struct.pack(">I", crc32c.crc32c(body)) + body


class LBConn(rs.Conn):
    def __init__(self, name: str) -> None:
        super().__init__(name, data_of=value_of)

    async def send_lb(self, subject: str, payload: bytes, reply: str = "") -> None:
        await self.send(subject, kind_of(payload), payload, reply=reply)

    async def request_lb(self, subject: str, payload: bytes) -> bytes:
        msg = await self.ic.request(subject, payload, timeout=5)
        if msg is None:
            raise RuntimeError(f"{self.name}: no responder on {subject}")
        self.count("sent", kind_of(payload), payload, False)
        self.count("received", kind_of(msg.data), msg.data, False)
        return msg.data

    async def listen(self, subject: str, handler=None):
        async def cb(msg):
            self.count("received", kind_of(msg.data), msg.data, False)
            if handler is not None:
                await handler(msg)

        return await self.ic.subscribe(subject, cb=cb)


class Leader:
    """lb-server-a: metadata leader and leader of stream `orders`."""

    def __init__(self, conn: LBConn) -> None:
        self.conn = conn
        self.logs: dict[int, list[tuple[int, int, bytes | None, bytes | None, list]]] = {}
        self.epoch = 1
        self.entries_sent = rs.nw.MessageDigest()
        self.partitions = {"orders": 0, "orders.1": 1}
        self.joined: set[str] = set()

    async def start(self) -> None:
        c = self.conn
        await c.listen(f"{NS}.raft.metadata.join", self.on_join)
        await c.listen(f"{NS}.raft.metadata.info", self.on_info)
        await c.listen(f"{NS}.raft.metadata.propagate", self.on_propagate)
        await c.listen(f"{NS}.raft.metadata.status.a", self.on_status)
        await c.listen(f"{NS}.orders.*.replicate", self.on_replicate)
        await c.listen(f"{NS}.orders.*.offset", self.on_offset)
        await c.listen(f"{NS}.activity")
        await c.listen(f"{NS}.cursors")

    async def serve_stream(self) -> None:
        for subject in self.partitions:
            await self.conn.listen(subject, self.on_message)

    async def on_join(self, msg) -> None:
        req = internal("RaftJoinRequest").FromString(msg.data[8:])
        resp = internal("RaftJoinResponse")()
        if req.node_id in self.joined:
            resp.error = f"node {req.node_id} is already a member"
        self.joined.add(req.node_id)
        await self.conn.send_lb(msg.reply, envelope("RaftJoinResponse", resp.SerializeToString()))

    async def on_info(self, msg) -> None:
        resp = internal("ServerInfoResponse")(id="a", host="127.0.0.1", port=9292)
        await self.conn.send_lb(msg.reply, envelope("ServerInfoResponse",
                                                    resp.SerializeToString()))

    async def on_propagate(self, msg) -> None:
        req = internal("PropagatedRequest").FromString(msg.data[8:])
        resp = internal("PropagatedResponse")(op=req.op)
        if req.op == 6 and req.pause_stream_op.stream != "orders":  # PAUSE_STREAM
            resp.error.code = 1
            resp.error.msg = f"stream {req.pause_stream_op.stream!r} not found"
        elif req.op == 11:  # JOIN_CONSUMER_GROUP
            resp.join_consumer_group_resp.coordinator = "a"
            resp.join_consumer_group_resp.epoch = 1
        await self.conn.send_lb(msg.reply, envelope("PropagatedResponse",
                                                    resp.SerializeToString()))

    async def on_status(self, msg) -> None:
        req = internal("PartitionStatusRequest").FromString(msg.data[8:])
        exists = req.stream == "orders" and req.partition in (0, 1)
        resp = internal("PartitionStatusResponse")(exists=exists, is_leader=exists)
        await self.conn.send_lb(msg.reply, envelope("PartitionStatusResponse",
                                                    resp.SerializeToString()))

    async def on_message(self, msg) -> None:
        """A message on a stream subject: an envelope (Publish) or a plain value."""
        part = self.partitions[msg.subject]
        log = self.logs.setdefault(part, [])
        offset = len(log)
        now = time.time_ns()
        headers = [(b"subject", msg.subject.encode()), (b"reply", (msg.reply or "").encode())]
        if msg.data[:4] == MAGIC:
            m = api("Message").FromString(msg.data[msg.data[5]:])
            user = sorted((k.encode(), v) for k, v in m.headers.items())
            log.append((offset, now, m.key or None, m.value, user + headers))
            if m.ack_inbox:
                ack = api("Ack")(stream="orders", partition_subject=msg.subject,
                                 msg_subject=msg.subject, offset=offset, ack_inbox=m.ack_inbox,
                                 correlation_id=m.correlation_id, ack_policy=m.ack_policy,
                                 reception_timestamp=now, commit_timestamp=time.time_ns())
                await self.conn.send_lb(m.ack_inbox, envelope("Ack", ack.SerializeToString()))
        else:
            log.append((offset, now, None, bytes(msg.data), headers))

    async def on_replicate(self, msg) -> None:
        part = int(msg.subject.split(".")[-2])
        req = internal("ReplicationRequest").FromString(msg.data[8:])
        log = self.logs.get(part, [])
        body = struct.pack(">Qq", self.epoch, len(log) - 1)
        for offset, ts, key, value, headers in log[req.offset:]:
            m = commitlog_message(key, value, headers)
            body += struct.pack(">qqQI", offset, ts, self.epoch, len(m)) + m
            self.entries_sent.add(value or b"")
        await self.conn.send_lb(msg.reply, envelope("ReplicationResponse", body))

    async def on_offset(self, msg) -> None:
        part = int(msg.subject.split(".")[-2])
        resp = internal("LeaderEpochOffsetResponse")(end_offset=len(self.logs.get(part, [])))
        await self.conn.send_lb(msg.reply, envelope("LeaderEpochOffsetResponse",
                                                    resp.SerializeToString()))


async def run(url: str, capture_started) -> dict[str, Any]:
    problems: list[str] = []
    await capture_started()
    conns = {n: LBConn(n) for n in ("lb-server-a", "lb-server-b", "lb-client")}
    for c in conns.values():
        await c.connect(url)
    a, b, client = conns["lb-server-a"], conns["lb-server-b"], conns["lb-client"]
    leader = Leader(a)
    await leader.start()
    notify_inbox = f"{NS}.notify.b"
    await b.listen(notify_inbox)
    ack_inbox = f"{NS}.ack.{rs.nuid()}"
    await client.listen(ack_inbox)
    for c in conns.values():
        await c.ic.flush()

    def req(name: str, **kw) -> bytes:
        return internal(name)(**kw).SerializeToString()

    await b.request_lb(f"{NS}.raft.metadata.join",
                       envelope("RaftJoinRequest", req("RaftJoinRequest", node_id="b",
                                                       node_addr="127.0.0.1:9293")))
    await b.request_lb(f"{NS}.raft.metadata.join",
                       envelope("RaftJoinRequest", req("RaftJoinRequest", node_id="b",
                                                       node_addr="127.0.0.1:9293")))
    await b.request_lb(f"{NS}.raft.metadata.info",
                       envelope("ServerInfoRequest", req("ServerInfoRequest", id="b")))

    # a plain message before anyone could know `orders` is a stream subject
    await client.send("orders", "plain_unlearned", b"plain before the stream existed")
    await client.ic.flush()

    create = internal("PropagatedRequest")(op=0)
    stream = create.create_stream_op.stream
    stream.name, stream.subject, stream.creation_timestamp = "orders", "orders", time.time_ns()
    for subject, pid in (("orders", 0), ("orders.1", 1)):
        p = stream.partitions.add()
        p.subject, p.stream, p.id, p.replication_factor = subject, "orders", pid, 2
        p.replicas.extend(["a", "b"])
        p.leader, p.leader_epoch, p.epoch = "a", 1, 1
        p.isr.extend(["a", "b"])
    await leader.serve_stream()
    await a.ic.flush()
    await b.request_lb(f"{NS}.raft.metadata.propagate",
                       envelope("PropagatedRequest", create.SerializeToString()))
    join = internal("PropagatedRequest")(op=11)
    join.join_consumer_group_op.group_id = "grp"
    join.join_consumer_group_op.consumer_id = "consumer-1"
    join.join_consumer_group_op.streams.append("orders")
    await b.request_lb(f"{NS}.raft.metadata.propagate",
                       envelope("PropagatedRequest", join.SerializeToString()))
    pause = internal("PropagatedRequest")(op=6)
    pause.pause_stream_op.stream = "nosuch"
    pause.pause_stream_op.partitions.extend([0, 1])
    await b.request_lb(f"{NS}.raft.metadata.propagate",
                       envelope("PropagatedRequest", pause.SerializeToString()))
    for part in (0, 1):
        await b.request_lb(f"{NS}.raft.metadata.status.a",
                           envelope("PartitionStatusRequest",
                                    req("PartitionStatusRequest", stream="orders",
                                        partition=part)))
    await a.send_lb(notify_inbox, envelope("PartitionNotification",
                                           req("PartitionNotification", stream="orders",
                                               partition=1)))

    values = [b"order-1", b"", bytes(range(256)), b"x" * 2500, "caf\u00e9".encode()]
    for i, value in enumerate(values):
        m = api("Message")(offset=-1, key=f"k{i}".encode() if i % 2 == 0 else b"", value=value,
                           ack_inbox=ack_inbox, correlation_id=f"corr-{i}",
                           ack_policy=i % 3)
        if i == 2:
            m.headers["trace"] = b"t-1"
            m.headers["bin"] = b"\x00\x01"
        subject = "orders.1" if i == 4 else "orders"
        await client.send_lb(subject, envelope("Publish", m.SerializeToString(), crc=(i == 3)))
    for i in range(3):
        await client.send_lb("orders" if i < 2 else "orders.1", f"plain value {i}".encode())
    cursor = internal("Cursor")(stream="orders", partition=0, cursor_id="grp", offset=4)
    cur = api("Message")(key=b"grp,orders,0", value=cursor.SerializeToString(),
                         stream="__cursors", subject=f"{NS}.cursors")
    await client.send_lb(f"{NS}.cursors", envelope("Publish", cur.SerializeToString()))
    event = api("ActivityStreamEvent")(id=1, op=0)
    event.create_stream_op.SetInParent()
    act = api("Message")(value=event.SerializeToString(), stream="__activity",
                         subject=f"{NS}.activity")
    await b.send_lb(f"{NS}.activity", envelope("Publish", act.SerializeToString()))
    for c in conns.values():
        await c.ic.flush()
    await asyncio.sleep(0.3)

    for part in (0, 1):
        rr = envelope("ReplicationRequest", req("ReplicationRequest", replica_id="b", offset=0,
                                                leader_epoch=1))
        await b.request_lb(f"{NS}.orders.{part}.replicate", rr)
        end = len(leader.logs.get(part, []))
        rr = envelope("ReplicationRequest", req("ReplicationRequest", replica_id="b",
                                                offset=end, leader_epoch=1))
        await b.request_lb(f"{NS}.orders.{part}.replicate", rr)  # nothing new: empty set
        await b.request_lb(f"{NS}.orders.{part}.offset",
                           envelope("LeaderEpochOffsetRequest",
                                    req("LeaderEpochOffsetRequest", leader_epoch=1)))

    for c in conns.values():
        await c.ic.flush()
    await asyncio.sleep(0.5)
    for c in conns.values():
        await c.ic.flush()
        await c.ic.close()
    for c in conns.values():
        problems.extend(f"{c.name}: {p}" for p in c.ic.rec.consistency_problems())
        problems.extend(f"{c.name}: async error {e!r}" for e in c.ic.errors)
    return {
        "namespace": NS,
        "stream": {"name": "orders", "partition_subjects": {"orders": 0, "orders.1": 1}},
        "plain_before_stream_known": 1,
        "connections": {n: c.to_dict() for n, c in conns.items()},
        "replicated_entries": {
            "messages": leader.entries_sent.messages,
            "bytes": leader.entries_sent.payload_bytes,
            "sha256": leader.entries_sent.hexdigest(),
        },
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (writes PREFIX.pcap, "
                    "PREFIX.truth.json)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    return rs.record(args.out, args.server_bin, args.port, args.tail_wait, run,
                     "msgcap-liftbridge-truth/1", argv)


if __name__ == "__main__":
    sys.exit(main())

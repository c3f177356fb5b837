"""Instrumented nats-py workload that records client-side ground truth.

Used by ``samples/record_nats.py``; it can also be imported on its own (``run_workload``).

What is counted, per connection (see samples/README.md for the full statement):

* ``sent``: every byte that nats-py hands to its TCP transport (``write``/``writelines``) goes
  through ``RecordingTcpTransport``, which parses that outgoing byte stream in the client process
  and counts the NATS ops by kind (CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG). This includes the
  ops that nats-py emits by itself (CONNECT, the connect-time PING, flush PINGs, PONG answers to
  server PINGs, the request mux SUB, JetStream API requests and acks). nats-py writes one command
  per buffer; the recorder checks that and reports ``unaligned_write_buffers`` otherwise.
* ``received``: counted from nats-py's own protocol callbacks (``_process_msg`` for MSG/HMSG,
  ``_process_ping``, ``_process_pong``, ``_process_info``, ``_process_err``) plus the two lines that
  nats-py reads with ``readline`` during the connect handshake (the PONG answering the connect
  PING, or a -ERR). The raw received byte stream (``read``/``readline`` results) is hashed too and
  independently parsed as a cross-check.
* ``app``: what the workload code asked the library to do (publish calls, request calls, ...).

Payload digests use a framed scheme so that message boundaries matter: for each message in order,
SHA-256 is fed ``len(payload)`` as an 8-byte big-endian unsigned integer and then the payload
bytes (headers excluded). Stream digests are plain SHA-256 over the bytes in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
from collections import Counter
from typing import Any

import nats
import nats.aio.client as nats_client
from nats.aio.transport import TcpTransport
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

PAYLOAD_SHA256_SCHEME = (
    "sha256 over, for each message in order: uint64 big-endian len(payload) || payload "
    "(payload = bytes after the header block; headers excluded)"
)

C2S_OPS = ("CONNECT", "PUB", "HPUB", "SUB", "UNSUB", "PING", "PONG")
S2C_OPS = ("INFO", "MSG", "HMSG", "PING", "PONG", "+OK", "-ERR")


class MessageDigest:
    """Count, byte totals and framed SHA-256 over a sequence of message payloads."""

    def __init__(self) -> None:
        self.messages = 0
        self.payload_bytes = 0
        self.header_bytes = 0
        self._sha = hashlib.sha256()

    def add(self, payload: bytes, header_len: int = 0) -> None:
        self.messages += 1
        self.payload_bytes += len(payload)
        self.header_bytes += header_len
        self._sha.update(len(payload).to_bytes(8, "big"))
        self._sha.update(payload)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


class OpStreamParser:
    """Incremental parser of one direction of a NATS client connection.

    Counts ops by kind, digests PUB/HPUB/MSG/HMSG payloads in order and the raw stream. It is
    only used on bytes the client itself wrote or read (never on the capture).
    """

    SIZED_1 = {"PUB", "MSG"}
    SIZED_2 = {"HPUB", "HMSG"}

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.msgs = MessageDigest()
        self.stream_bytes = 0
        self._stream_sha = hashlib.sha256()
        self._buf = bytearray()
        self.errors: list[str] = []

    def feed(self, data: bytes) -> int:
        """Feed bytes; returns how many complete ops were parsed from the buffer."""
        self.stream_bytes += len(data)
        self._stream_sha.update(data)
        buf = self._buf
        buf += data
        pos = 0
        parsed = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            parts = line.split()
            if not parts:
                self.errors.append(f"empty control line at stream offset ~{self.stream_bytes}")
                pos = eol + 2
                continue
            op = parts[0].decode("ascii", "replace").upper()
            if op in self.SIZED_1 or op in self.SIZED_2:
                try:
                    total = int(parts[-1])
                    hdr = int(parts[-2]) if op in self.SIZED_2 else 0
                except (ValueError, IndexError):
                    self.errors.append(f"bad size in {line[:80]!r}")
                    pos = eol + 2
                    continue
                end = eol + 2 + total
                if len(buf) < end + 2:
                    break  # wait for the rest of the message
                if buf[end : end + 2] != b"\r\n":
                    self.errors.append(f"payload of {line[:80]!r} not followed by CRLF")
                self.msgs.add(bytes(buf[eol + 2 + hdr : end]), hdr)
                pos = end + 2
            else:
                pos = eol + 2
            self.ops[op] += 1
            parsed += 1
        if pos:
            del buf[:pos]
        return parsed

    @property
    def pending(self) -> int:
        return len(self._buf)

    def stream_hexdigest(self) -> str:
        return self._stream_sha.hexdigest()


class ConnRecorder:
    """Ground truth for one named client connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client_addr: tuple[str, int] | None = None
        self.server_addr: tuple[str, int] | None = None
        # sent: parsed from the exact bytes given to the transport
        self.sent = OpStreamParser()
        self.write_buffers = 0
        self.unaligned_write_buffers = 0
        # received: from nats-py's protocol callbacks
        self.recv_ops: Counter[str] = Counter()
        self.recv_msgs = MessageDigest()
        # received: raw stream cross-check
        self.recv_stream = OpStreamParser()
        # application level
        self.app: Counter[str] = Counter()

    # -- write path -------------------------------------------------------------------------
    def on_write(self, data: bytes) -> None:
        data = bytes(data)
        self.write_buffers += 1
        was_pending = self.sent.pending
        n = self.sent.feed(data)
        if was_pending or n != 1 or self.sent.pending:
            self.unaligned_write_buffers += 1

    # -- read path --------------------------------------------------------------------------
    def on_read(self, data: bytes) -> None:
        self.recv_stream.feed(bytes(data))

    def to_dict(self) -> dict[str, Any]:
        sent_ops = {op: self.sent.ops.get(op, 0) for op in C2S_OPS}
        sent_ops.update({k: v for k, v in self.sent.ops.items() if k not in sent_ops})
        recv_ops = {op: self.recv_ops.get(op, 0) for op in S2C_OPS}
        recv_ops.update({k: v for k, v in self.recv_ops.items() if k not in recv_ops})
        return {
            "name": self.name,
            "client_ip": self.client_addr[0] if self.client_addr else None,
            "client_port": self.client_addr[1] if self.client_addr else None,
            "server_ip": self.server_addr[0] if self.server_addr else None,
            "server_port": self.server_addr[1] if self.server_addr else None,
            "sent": {
                "ops": sent_ops,
                "messages": self.sent.msgs.messages,
                "payload_bytes": self.sent.msgs.payload_bytes,
                "header_bytes": self.sent.msgs.header_bytes,
                "payload_sha256": self.sent.msgs.hexdigest(),
                "stream_bytes": self.sent.stream_bytes,
                "stream_sha256": self.sent.stream_hexdigest(),
                "write_buffers": self.write_buffers,
                "unaligned_write_buffers": self.unaligned_write_buffers,
            },
            "received": {
                "ops": recv_ops,
                "messages": self.recv_msgs.messages,
                "payload_bytes": self.recv_msgs.payload_bytes,
                "header_bytes": self.recv_msgs.header_bytes,
                "payload_sha256": self.recv_msgs.hexdigest(),
                "stream_bytes": self.recv_stream.stream_bytes,
                "stream_sha256": self.recv_stream.stream_hexdigest(),
            },
            "app": dict(sorted(self.app.items())),
        }

    def consistency_problems(self) -> list[str]:
        """Cross-checks between the library callbacks and the raw streams the client saw."""
        p = []
        if self.unaligned_write_buffers:
            p.append(f"{self.unaligned_write_buffers} write buffers were not exactly one op")
        if self.sent.pending:
            p.append(f"{self.sent.pending} trailing sent bytes do not form a complete op")
        if self.sent.errors:
            p.append(f"sent stream parse errors: {self.sent.errors[:3]}")
        rs = self.recv_stream
        if rs.errors:
            p.append(f"received stream parse errors: {rs.errors[:3]}")
        if rs.pending:
            p.append(f"{rs.pending} trailing received bytes do not form a complete op")
        stream_ops = {k: v for k, v in rs.ops.items() if v}
        hook_ops = {k: v for k, v in self.recv_ops.items() if v}
        if stream_ops != hook_ops:
            p.append(f"received ops: library callbacks {hook_ops} != raw stream {stream_ops}")
        if (rs.msgs.messages, rs.msgs.payload_bytes, rs.msgs.hexdigest()) != (
            self.recv_msgs.messages,
            self.recv_msgs.payload_bytes,
            self.recv_msgs.hexdigest(),
        ):
            p.append("received payload digest: library callbacks != raw stream")
        return [f"{self.name}: {x}" for x in p]


_current_recorder: contextvars.ContextVar[ConnRecorder | None] = contextvars.ContextVar(
    "msgcap_nats_recorder", default=None
)


class RecordingTcpTransport(TcpTransport):
    """nats-py TcpTransport that reports every byte written and read to a ConnRecorder."""

    def __init__(self) -> None:
        super().__init__()
        rec = _current_recorder.get()
        if rec is None:
            raise RuntimeError("RecordingTcpTransport created outside InstrumentedClient.connect")
        self.recorder: ConnRecorder = rec

    async def connect(self, uri, buffer_size, connect_timeout):  # type: ignore[override]
        await super().connect(uri, buffer_size, connect_timeout)
        w = self._bare_io_writer
        self.recorder.client_addr = tuple(w.get_extra_info("sockname")[:2])
        self.recorder.server_addr = tuple(w.get_extra_info("peername")[:2])

    async def connect_tls(self, *a, **kw):  # type: ignore[override]
        raise RuntimeError("TLS is not used by the msgcap sample workload")

    def write(self, payload):
        self.recorder.on_write(payload)
        return super().write(payload)

    def writelines(self, payload):
        for buf in payload:
            self.recorder.on_write(buf)
        return super().writelines(payload)

    async def read(self, buffer_size: int):
        data = await super().read(buffer_size)
        self.recorder.on_read(data)
        return data

    async def readline(self):
        # Only used by nats-py during the connect handshake (INFO line, then the PONG/-ERR that
        # answers the connect PING). INFO is counted by the _process_info callback instead.
        line = await super().readline()
        self.recorder.on_read(line)
        head = line.split(b" ", 1)[0].strip().upper()
        if head in (b"PONG", b"-ERR", b"+OK"):
            self.recorder.recv_ops[head.decode()] += 1
        return line


# nats-py builds its transport as nats.aio.client.TcpTransport(); point that name at ours.
nats_client.TcpTransport = RecordingTcpTransport


class InstrumentedClient:
    """A real nats-py client whose traffic is counted by a ConnRecorder."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rec = ConnRecorder(name)
        self.nc = nats.NATS()
        self.errors: list[BaseException] = []
        self._hook()

    def _hook(self) -> None:
        nc, rec = self.nc, self.rec
        orig_msg, orig_ping = nc._process_msg, nc._process_ping
        orig_pong, orig_info, orig_err = nc._process_pong, nc._process_info, nc._process_err

        async def process_msg(sid, subject, reply, data, headers):
            hdr_len = len(headers) if headers else 0
            rec.recv_ops["HMSG" if headers else "MSG"] += 1
            rec.recv_msgs.add(bytes(data), hdr_len)
            return await orig_msg(sid, subject, reply, data, headers)

        async def process_ping():
            rec.recv_ops["PING"] += 1
            return await orig_ping()

        async def process_pong():
            rec.recv_ops["PONG"] += 1
            return await orig_pong()

        async def process_info(*a, **kw):
            rec.recv_ops["INFO"] += 1
            return await orig_info(*a, **kw)

        async def process_err(*a, **kw):
            rec.recv_ops["-ERR"] += 1
            return await orig_err(*a, **kw)

        # The protocol parser calls these through the client instance (self.nc._process_msg).
        nc._process_msg = process_msg
        nc._process_ping = process_ping
        nc._process_pong = process_pong
        nc._process_info = process_info
        nc._process_err = process_err

    async def connect(self, url: str) -> None:
        async def error_cb(e: BaseException) -> None:
            self.errors.append(e)

        token = _current_recorder.set(self.rec)
        try:
            await self.nc.connect(
                servers=[url],
                name=self.name,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=5,
                error_cb=error_cb,
            )
        finally:
            _current_recorder.reset(token)
        if not isinstance(self.nc._transport, RecordingTcpTransport):
            raise RuntimeError("nats-py did not use the recording transport; internals changed?")
        self.rec.app["connect"] += 1

    # -- application-level wrappers (counted in rec.app) ------------------------------------
    async def publish(self, subject: str, payload: bytes = b"", headers=None, reply: str = ""):
        self.rec.app["publish_with_headers" if headers else "publish"] += 1
        await self.nc.publish(subject, payload, reply=reply, headers=headers)

    async def publish_raw_hpub(
        self, subject: str, header_lines: list[tuple[str, str]], payload: bytes
    ) -> None:
        """HPUB with repeated header names; nats-py's dict-based API cannot express that, so the
        command is built here and queued through nats-py's own command path."""
        hdr = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in header_lines)
        hdr += b"\r\n"
        cmd = (
            f"HPUB {subject} {len(hdr)} {len(hdr) + len(payload)}\r\n".encode()
            + hdr
            + payload
            + b"\r\n"
        )
        self.rec.app["publish_raw_hpub"] += 1
        await self.nc._send_command(cmd)
        await self.nc._flush_pending()

    async def subscribe(self, subject: str, queue: str = "", cb=None):
        self.rec.app["subscribe"] += 1

        async def counting_cb(msg):
            self.rec.app["callback_msgs"] += 1
            if cb is not None:
                await cb(msg)

        return await self.nc.subscribe(subject, queue=queue, cb=counting_cb)

    async def unsubscribe(self, sub, limit: int = 0) -> None:
        self.rec.app["unsubscribe_with_limit" if limit else "unsubscribe"] += 1
        await sub.unsubscribe(limit=limit)

    async def request(self, subject: str, payload: bytes, headers=None, timeout: float = 2.0):
        self.rec.app["request"] += 1
        try:
            resp = await self.nc.request(subject, payload, timeout=timeout, headers=headers)
        except NoRespondersError:
            self.rec.app["request_no_responders"] += 1
            return None
        self.rec.app["request_replied"] += 1
        return resp

    async def flush(self) -> None:
        self.rec.app["flush"] += 1
        await self.nc.flush(timeout=10)

    async def close(self) -> None:
        self.rec.app["close"] += 1
        await self.nc.close()


# ------------------------------------------------------------------------------------------
# Workloads
# ------------------------------------------------------------------------------------------

CRLF_PAYLOAD = b"line one\r\nline two\r\n\r\nMSG fake.subject 1 5\r\nhello\r\nPING\r\n"
BINARY_PAYLOAD = bytes(range(256)) + b"\x00\r\n\x00" + bytes(range(255, -1, -1))


BULK_PUBLISHERS = 4
BULK_MSGS_PER_ROUND = 50
# 11 connections, as in the capture issue 8 was measured on
BULK_CLIENTS = [*(f"pub-{p}" for p in range(BULK_PUBLISHERS)), "fan-all", "fan-a", "fan-b",
                "queue-1", "queue-2", "requester", "responder"]


# the ``mixed`` workload: what a capture on a sending host looks like when the payloads
# are large (segmentation offload leaves segments of tens of kB)
MIXED_CLIENTS = ["publisher", "fan-all", "fan-big", "queue-1", "queue-2", "requester",
                 "responder", "jetstream"]
MAX_PAYLOAD = 1 << 20  # nats-server's default max_payload: the largest PUB it accepts
MIXED_SYNC_EVERY = 4  # rounds between PING/PONG syncs: a few MB in flight at most

WORKLOADS = ("basic", "full", "bulk", "mixed")


class Workload:
    def __init__(self, url: str, kind: str, scale: int, idle_seconds: float, progress=None) -> None:
        if kind not in WORKLOADS:
            raise ValueError(f"unknown workload {kind!r}")
        self.url = url
        self.kind = kind
        self._js_backlog = 0  # JetStream messages published and not yet fetched
        self.scale = scale
        self.idle_seconds = idle_seconds
        self.rng = random.Random(20240601)
        self.progress = progress
        names = (BULK_CLIENTS if kind == "bulk" else MIXED_CLIENTS if kind == "mixed" else
                 ["publisher", "subscriber", "queue-a", "queue-b", "responder", "jetstream"])
        self.clients = {n: InstrumentedClient(n) for n in names}

    def c(self, name: str) -> InstrumentedClient:
        return self.clients[name]

    def text_payload(self, tag: str, max_len: int) -> bytes:
        n = self.rng.randint(0, max_len)
        base = f"{tag}|".encode()
        filler = bytes(self.rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))
        return base + filler

    async def sync_all(self) -> None:
        """PING/PONG the publisher(s) first, then every other connection, so that every message
        the server routed so far has been read by its receiver."""
        first = [n for n in self.clients if n.startswith("pub")]
        for name in first:
            await self.c(name).flush()
        for name, cl in self.clients.items():
            if name not in first:
                await cl.flush()

    async def setup(self) -> None:
        for cl in self.clients.values():
            await cl.connect(self.url)
        sub, qa, qb, resp = (
            self.c("subscriber"),
            self.c("queue-a"),
            self.c("queue-b"),
            self.c("responder"),
        )
        await sub.subscribe("demo.plain")
        await sub.subscribe("demo.hdr")
        await sub.subscribe("wc.*")
        await sub.subscribe("wc.>")
        await qa.subscribe("work.jobs", queue="workers")
        await qb.subscribe("work.jobs", queue="workers")

        async def echo(msg):
            resp.rec.app["responded"] += 1
            await msg.respond(b"echo:" + msg.data)

        await resp.subscribe("svc.echo", cb=echo)
        js = self.c("jetstream")
        self.js = js.nc.jetstream()
        await self.js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=100_000)
        js.rec.app["js_add_stream"] += 1
        self.psub = await self.js.pull_subscribe("orders.>", durable="proc")
        js.rec.app["js_pull_subscribe"] += 1
        await self.sync_all()

    async def js_round(self, n_pub: int, fetch: bool, r: int) -> None:
        js = self.c("jetstream")
        for i in range(n_pub):
            headers = {"Nats-Msg-Id": f"ord-{r}-{i}"} if i == 0 else None
            await self.js.publish(
                "orders.new", f'{{"order":{r},"line":{i}}}'.encode(), headers=headers
            )
            js.rec.app["js_publish"] += 1
        self._js_backlog += n_pub
        if fetch:
            await self.fetch_backlog(timeout=5)

    async def fetch_backlog(self, timeout: float) -> None:
        """Fetch (batches of at most 50) and ack every JetStream message published
        since the last fetch."""
        js = self.c("jetstream")
        remaining = self._js_backlog
        while remaining > 0:
            msgs = await self.psub.fetch(min(remaining, 50), timeout=timeout)
            js.rec.app["js_fetch"] += 1
            for m in msgs:
                await m.ack()
                js.rec.app["js_ack"] += 1
            remaining -= len(msgs)
        self._js_backlog = 0

    async def auto_unsub_case(self, r: int, limit: int, sent: int) -> None:
        pub, sub = self.c("publisher"), self.c("subscriber")
        s = await sub.subscribe(f"demo.limited.{r}")
        await sub.unsubscribe(s, limit=limit)  # UNSUB <sid> <limit>
        await sub.flush()
        for i in range(sent):
            await pub.publish(f"demo.limited.{r}", f"limited {i}".encode())
        # explicit unsubscribe case: receive one, UNSUB, then publish into the void
        t = await sub.subscribe(f"demo.temp.{r}")
        await sub.flush()
        await pub.publish(f"demo.temp.{r}", b"before unsub")
        await pub.flush()
        await sub.flush()
        await sub.unsubscribe(t)  # UNSUB <sid>
        await sub.flush()
        await pub.publish(f"demo.temp.{r}", b"after unsub (no interest)")

    async def basic_round(self, r: int) -> None:
        pub = self.c("publisher")
        for i in range(5):
            await pub.publish("demo.plain", self.text_payload(f"plain {r}.{i}", 40))
        await pub.publish("demo.plain", b"")
        await pub.publish("demo.plain", CRLF_PAYLOAD)
        await pub.publish("demo.plain", BINARY_PAYLOAD)
        await pub.publish(
            "demo.hdr", b"with headers", headers={"X-Trace": f"t-{r}", "Content-Type": "text/plain"}
        )
        await pub.publish("demo.hdr", b"", headers={"X-Empty-Payload": "yes"})
        await pub.publish_raw_hpub(
            "demo.hdr",
            [("X-Multi", "first"), ("X-Multi", "second"), ("X-Single", "one")],
            b"multi-valued header",
        )
        await pub.publish("wc.a", b"matches wc.* and wc.>")
        await pub.publish("wc.a.b", b"matches wc.> only")
        for i in range(6):
            await pub.publish("work.jobs", f"job {r}.{i}".encode())
        await self.auto_unsub_case(r, limit=3, sent=5)
        for i in range(3):
            await pub.request("svc.echo", f"request {r}.{i}".encode())
        await pub.request("svc.echo", b"request with headers", headers={"X-Req": "1"})
        await pub.request("svc.nobody", b"nobody listens")  # 503 no responders
        await pub.flush()
        await self.js_round(3, fetch=True, r=r)

    async def full_round(self, r: int) -> None:
        pub = self.c("publisher")
        rng = self.rng
        for i in range(12):
            await pub.publish("demo.plain", self.text_payload(f"p{r}.{i}", 120))
        if r % 4 == 0:
            await pub.publish("demo.plain", b"")
            await pub.publish("demo.plain", CRLF_PAYLOAD)
            await pub.publish("demo.plain", rng.randbytes(rng.randint(1, 300)))
        for i in range(2):
            await pub.publish(
                "demo.hdr",
                self.text_payload(f"h{r}.{i}", 60),
                headers={"X-Trace": f"t-{r}-{i}", "X-Round": str(r)},
            )
        if r % 10 == 0:
            await pub.publish_raw_hpub(
                "demo.hdr", [("X-Multi", "a"), ("X-Multi", f"b{r}")], b"multi"
            )
        await pub.publish("wc.a", self.text_payload(f"w{r}", 30))
        await pub.publish(f"wc.a.{r % 7}", self.text_payload(f"w{r}", 30))
        for i in range(4):
            await pub.publish("work.jobs", f"job {r}.{i}".encode())
        if r % 50 == 0:
            await self.auto_unsub_case(r, limit=2, sent=4)
        await pub.request("svc.echo", f"request {r}".encode())
        if r % 5 == 0:
            await pub.request("svc.echo", b"hdr request", headers={"X-Req": str(r)})
        if r % 20 == 0:
            await pub.request("svc.nobody", b"nobody")
        await self.js_round(1, fetch=(r % 10 == 9), r=r)
        if r % 25 == 24:
            await self.sync_all()

    async def connect_fan_out(self, prefix: str, wildcards: dict[str, str]) -> None:
        """Every client connected; ``fan-all`` on ``PREFIX.>``, each of ``wildcards``
        (client -> subject) on its subject, ``queue-1``/``queue-2`` a queue group on
        ``PREFIX.q`` (the subscribers the bulk and mixed workloads share)."""
        for cl in self.clients.values():
            await cl.connect(self.url)
        await self.c("fan-all").subscribe(f"{prefix}.>")
        for client, subject in wildcards.items():
            await self.c(client).subscribe(subject)
        await self.c("queue-1").subscribe(f"{prefix}.q", queue="grp")
        await self.c("queue-2").subscribe(f"{prefix}.q", queue="grp")

    async def bulk_setup(self) -> None:
        await self.connect_fan_out("bulk", {"fan-a": "bulk.a.*", "fan-b": "bulk.b.*"})
        resp = self.c("responder")

        async def echo(msg):
            resp.rec.app["responded"] += 1
            await msg.respond(b"ack:" + msg.data[:16])

        await resp.subscribe("svc.bulk", cb=echo)
        await self.sync_all()

    async def bulk_round(self, r: int) -> None:
        """Throughput traffic: four publishers pipelining ~200-byte messages (nats-py
        coalesces them, so segments are full), each delivered to two subscribers; one
        request/reply per round.  Synced every 20 rounds so no subscriber becomes a
        slow consumer (the server would drop its messages)."""
        rng = self.rng
        for p in range(BULK_PUBLISHERS):
            pub = self.c(f"pub-{p}")
            for i in range(BULK_MSGS_PER_ROUND):
                kind = i % 3
                subject = ("bulk.q" if kind == 2 else
                           f"bulk.{'ab'[kind]}.{(r + i) % 8}")
                body = rng.randbytes(rng.randint(16, 400))
                if i % 20 == 7:
                    await pub.publish(subject, body, headers={"X-Seq": f"{r}.{p}.{i}"})
                else:
                    await pub.publish(subject, body)
        await self.c("requester").request("svc.bulk", f"req {r}".encode())
        if r % 20 == 19:
            await self.sync_all()

    def sized(self, low: int, high: int) -> int:
        """A size between ``low`` and ``high``, log-uniform: many small, a few near
        ``high`` (message sizes of real traffic spread over orders of magnitude)."""
        return min(high, int(low * (high / low) ** self.rng.random()))

    async def mixed_setup(self) -> None:
        await self.connect_fan_out("mix", {"fan-big": "mix.big.*"})
        resp = self.c("responder")

        async def answer(msg):
            # the request says how big its reply is: "size=N|..."
            resp.rec.app["responded"] += 1
            size = int(msg.data.split(b"|", 1)[0].removeprefix(b"size="))
            await msg.respond(random.Random(size).randbytes(size))

        await resp.subscribe("svc.mixed", cb=answer)
        js = self.c("jetstream")
        self.js = js.nc.jetstream()
        await self.js.add_stream(name="MIXED", subjects=["jsmix.>"], max_msgs=100_000,
                                 max_bytes=256 << 20)
        js.rec.app["js_add_stream"] += 1
        self.psub = await self.js.pull_subscribe("jsmix.>", durable="mixed")
        js.rec.app["js_pull_subscribe"] += 1
        await self.sync_all()

    async def mixed_round(self, r: int) -> None:
        """Per round (~1.5 MB on the wire): 20 small messages (every 5th with headers),
        4 of 1-64 KiB, one of 64 KiB-1 MiB delivered twice (wildcards ``mix.>`` and
        ``mix.big.*``; every 10th round exactly ``MAX_PAYLOAD``, the largest PUB the
        server takes), 3 to a queue group, four requests (replies of 16 B-256 KiB, then
        three of 16 B-1 KiB), two JetStream publishes of 200 B-128 KiB fetched and acked
        every 5 rounds, and a request nobody answers (503 status) every 50."""
        pub, rng = self.c("publisher"), self.rng
        for i in range(20):
            body = rng.randbytes(rng.randint(16, 400))
            if i % 5 == 0:
                await pub.publish(f"mix.s.{r % 8}", body, headers={"X-Seq": f"{r}.{i}"})
            else:
                await pub.publish(f"mix.s.{r % 8}", body)
        for i in range(4):
            body = rng.randbytes(self.sized(1 << 10, 64 << 10))
            headers = {"Content-Type": "application/octet-stream", "X-Part": str(i)}
            await pub.publish(f"mix.m.{i}", body, headers=headers if i == 0 else None)
        if r % 10 == 0:  # no headers: the whole of max_payload is payload
            await pub.publish(f"mix.big.{r % 4}", rng.randbytes(MAX_PAYLOAD))
        else:
            big = rng.randbytes(self.sized(64 << 10, MAX_PAYLOAD - 1024))
            await pub.publish(f"mix.big.{r % 4}", big,
                              headers={"X-Round": str(r)} if r % 3 == 0 else None)
        for _ in range(3):
            await pub.publish("mix.q", rng.randbytes(self.sized(100, 8 << 10)))
        req = self.c("requester")
        for i in range(4):  # request/reply round trips: small packets between the big ones
            size = self.sized(16, 256 << 10 if i == 0 else 1 << 10)
            await req.request("svc.mixed", f"size={size}|round {r}.{i}".encode(),
                              headers={"X-Req": f"{r}.{i}"} if (r + i) % 2 else None,
                              timeout=10)
        if r % 50 == 0:
            await req.request("svc.nobody", b"nobody listens")  # 503 no responders
        await self.js_mixed_round(r)
        if r % MIXED_SYNC_EVERY == MIXED_SYNC_EVERY - 1:
            await self.sync_all()

    async def js_mixed_round(self, r: int) -> None:
        js = self.c("jetstream")
        for i in range(2):
            headers = {"Nats-Msg-Id": f"mix-{r}-{i}"} if i == 0 else None
            await self.js.publish(f"jsmix.{r % 3}", self.rng.randbytes(self.sized(200, 128 << 10)),
                                  headers=headers)
            js.rec.app["js_publish"] += 1
        self._js_backlog += 2
        if r % 5 == 4:
            await self.fetch_backlog(timeout=10)

    async def run(self) -> None:
        if self.kind in ("bulk", "mixed"):
            await (self.bulk_setup() if self.kind == "bulk" else self.mixed_setup())
            round_fn = self.bulk_round if self.kind == "bulk" else self.mixed_round
            for r in range(self.scale):
                await round_fn(r)
                if self.progress and r and r % 1000 == 0:
                    self.progress(r, self.scale)
            if self._js_backlog:
                await self.fetch_backlog(timeout=10)
            await self._finish()
            return
        await self.setup()
        round_fn = self.basic_round if self.kind == "basic" else self.full_round
        for r in range(self.scale):
            await round_fn(r)
            if self.progress and r and r % 1000 == 0:
                self.progress(r, self.scale)
        if self._js_backlog:
            await self.fetch_backlog(timeout=5)
        await self._finish()

    async def _finish(self) -> None:
        await self.sync_all()
        if self.idle_seconds > 0:
            # Stay idle so that the server sends its keep-alive PINGs (ping_interval is set low
            # by record_nats.py) and nats-py answers them with PONG by itself.
            await asyncio.sleep(self.idle_seconds)
            await self.sync_all()
        # give subscription callback tasks a chance to drain before closing
        for _ in range(50):
            busy = any(
                s._pending_queue.qsize()
                for cl in self.clients.values()
                for s in cl.nc._subs.values()
            )
            if not busy:
                break
            await asyncio.sleep(0.02)
        for cl in self.clients.values():
            await cl.close()


async def run_workload(
    url: str, kind: str = "basic", scale: int = 1, idle_seconds: float = 0.0, progress=None
) -> dict[str, Any]:
    """Run the workload against ``url``; return per-connection truth and consistency problems."""
    wl = Workload(url, kind, scale, idle_seconds, progress)
    await wl.run()
    problems: list[str] = []
    for cl in wl.clients.values():
        problems += cl.rec.consistency_problems()
        problems += [f"{cl.name}: async error {e!r}" for e in cl.errors]
    return {
        "connections": {name: cl.rec.to_dict() for name, cl in wl.clients.items()},
        "problems": problems,
    }


__all__ = [
    "run_workload",
    "WORKLOADS",
    "PAYLOAD_SHA256_SCHEME",
    "C2S_OPS",
    "S2C_OPS",
    "NoRespondersError",
    "NatsTimeoutError",
]

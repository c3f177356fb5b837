#!/usr/bin/env python3
"""Record Felix frames over a real QUIC stack (aioquic), with the client's TLS key log and
ground truth counted by each sending side.

No Felix broker runs here (it is a Rust program we do not build); both ends are ours,
written from protocol-facts §5: a small broker emulator (aioquic server) that answers the
requests the way the snapshot broker does, and a client workload (aioquic client) that
sends every kind of frame.  Each side records every frame it writes -- header fields,
kind, JSON type, the columns it expects msgcap to fill, each message's length and
SHA-256 -- *before* handing the bytes to QUIC.  tcpdump records the UDP datagrams on the
loopback interface; the client writes its secrets log (aioquic ``secrets_log_file``,
the NSS key log format Wireshark reads).

Two connections:

* ``decrypted`` -- logged to the key log.  Streams: the client's control stream
  (auth, subscribe, cache put/get/delete, an unknown JSON type and a frame with an
  unknown flag bit, answered with errors), a publish stream (JSON publish and
  publish_batch with acks, a publish_error, binary publish batches: plain, acked, keyed,
  idempotent, an acked one bigger than many packets, a failed one answered with a coded
  binary ack), a client uni publish-only stream, and the broker's uni event stream for
  the subscription (event_stream_hello, binary per-subscriber and shared event batches
  with offsets / skipped / publisher, JSON event and event_batch, subscription_lagged);
* ``no-secrets`` -- a second client without a key log: auth and a publish, which a
  reader must report as undecryptable.

    /work/venv/bin/python samples/record_felix.py --out samples/felix-quic

writes OUT.pcap, OUT.keys (the key log) and OUT.truth.json.  Needs root (or CAP_NET_RAW)
for tcpdump.  Only loopback traffic is generated.

The frame builders below are the *sending side's* encoder (tests import them to build
frames by hand); they are independent of msgcap's decoder and are checked against the
upstream conformance vectors by tests/felix.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import hashlib
import json
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from record_nats import (  # noqa: E402  (shared recorder helpers)
    count_pcap_packets,
    die,
    find_tcpdump,
    stop,
    wait_for_text,
)

HOST = "127.0.0.1"
TENANT, NS = "t1", "default"
TRUTH_FORMAT = "msgcap-felix-truth/1"

# ============================================================ frames (the sending side)

HEADER = struct.Struct(">4sHHI")
MAGIC = b"FLX1"

# flag bits (protocol-facts §5.4)
BINARY_PUBLISH_BATCH = 0x0001
BINARY_EVENT_BATCH = 0x0002
BINARY_EVENT_BATCH_SHARED = 0x0004
BINARY_PUBLISH_ACKED = 0x0008
BINARY_PUBLISH_ACK = 0x0010
EVENT_BATCH_OFFSETS = 0x0020
BINARY_PUBLISH_KEYED = 0x0040
BINARY_PUBLISH_ACK_OWNER = 0x0080
BINARY_PUBLISH_IDEMPOTENT = 0x0100
BINARY_PUBLISH_ACK_CODE = 0x0200
BINARY_PUBLISH_ACK_DETAIL = 0x0400
EVENT_BATCH_SKIPPED = 0x0800
BINARY_PUBLISH_ACK_OFFSET = 0x1000
EVENT_BATCH_PUBLISHER = 0x2000
EVENT_BATCH_TIMESTAMPS = 0x4000

ACK_MODE_BYTE = {"per_message": 1, "per_batch": 2}
ERROR_CODE_NUMBER = {"unauthenticated": 1, "forbidden": 2, "not_found": 3,
                     "invalid_request": 4, "shard_unavailable": 5, "not_leader": 6,
                     "overloaded": 10, "internal": 13}
RETRY_NUMBER = {"retry": 1, "retry_after": 2, "redirect": 3, "outcome_unknown": 4, "fatal": 5}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


@dataclass
class Frame:
    """One frame's bytes and what its sender expects a reader to see in it."""

    data: bytes
    truth: dict[str, Any]


def header(flags: int, length: int, version: int = 1) -> bytes:
    return HEADER.pack(MAGIC, version, flags, length)


def _msg(payload: bytes, index: int, size: int, offset: int | None = None,
         **common: Any) -> dict[str, Any]:
    return {"index": index, "batch_size": size, "payload_len": len(payload),
            "payload_sha256": sha(payload), "offset": offset, **common}


def _frame(flags: int, payload: bytes, kind: str, typ: str | None, fields: dict[str, Any],
           messages: list[dict[str, Any]] = (), anomalies: list[str] = ()) -> Frame:
    truth = {"flags": flags, "length": len(payload), "kind": kind, "type": typ,
             "body_sha256": sha(payload), "fields": fields, "messages": list(messages),
             "anomalies": list(anomalies)}
    return Frame(header(flags, len(payload)) + payload, truth)


def json_frame(obj: dict[str, Any], fields: dict[str, Any] | None = None,
               messages: list[dict[str, Any]] = ()) -> Frame:
    """A flags-0 frame: compact JSON, "type" first, fields in declaration order (serde)."""
    payload = json.dumps(obj, separators=(",", ":")).encode()
    return _frame(0, payload, "json", obj["type"], fields or {}, messages)


def _opt(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    obj.update({k: v for k, v in kw.items() if v is not None})
    return obj


# ---- JSON messages (protocol-facts §5.6) ------------------------------------------


def auth(tenant: str, token: str, client_flags: int | None = None) -> Frame:
    obj = _opt({"type": "auth", "tenant_id": tenant, "token": token}, client_flags=client_flags)
    return json_frame(obj, {"tenant_id": tenant, "advertised_flags": client_flags})


def auth_ok(server_flags: int) -> Frame:
    return json_frame({"type": "auth_ok", "server_flags": server_flags},
                      {"advertised_flags": server_flags})


def ok() -> Frame:
    return json_frame({"type": "ok"})


def error(message: str, code: str | None = None, retry: str | None = None) -> Frame:
    obj = _opt({"type": "error", "message": message}, code=code, retry=retry)
    return json_frame(obj, {"error_message": message, "error_code": code, "retry": retry})


def publish(stream: str, payload: bytes, *, key: bytes | None = None,
            request_id: int | None = None, ack: str | None = None) -> Frame:
    obj = _opt({"type": "publish", "tenant_id": TENANT, "namespace": NS, "stream": stream,
                "payload": b64(payload)}, key=None if key is None else b64(key),
               request_id=request_id, ack=ack)
    common = {"tenant_id": TENANT, "namespace": NS, "stream": stream,
              "key": None if key is None else key.decode(), "request_id": request_id,
              "ack_mode": ack}
    return json_frame(obj, {**common, "payload_count": 1, "payload_len": len(payload),
                            "payload_sha256": sha(payload)},
                      [_msg(payload, 0, 1, **common)])


def publish_batch(stream: str, payloads: list[bytes], *, key: bytes | None = None,
                  request_id: int | None = None, ack: str | None = None) -> Frame:
    obj = _opt({"type": "publish_batch", "tenant_id": TENANT, "namespace": NS,
                "stream": stream, "payloads": [b64(p) for p in payloads]},
               key=None if key is None else b64(key), request_id=request_id, ack=ack)
    common = {"tenant_id": TENANT, "namespace": NS, "stream": stream,
              "key": None if key is None else key.decode(), "request_id": request_id,
              "ack_mode": ack}
    n = len(payloads)
    return json_frame(obj, {**common, "payload_count": n, "payload_len": None},
                      [_msg(p, i, n, **common) for i, p in enumerate(payloads)])


def publish_ok(request_id: int, offset: int | None = None) -> Frame:
    obj = _opt({"type": "publish_ok", "request_id": request_id}, offset=offset)
    return json_frame(obj, {"request_id": request_id, "offset": offset, "ack_status": "ok"})


def publish_error(request_id: int, message: str, code: str | None = None,
                  retry: str | None = None) -> Frame:
    obj = _opt({"type": "publish_error", "request_id": request_id, "message": message},
               code=code, retry=retry)
    return json_frame(obj, {"request_id": request_id, "error_message": message,
                            "error_code": code, "retry": retry, "ack_status": "error"})


def subscribe(stream: str, start: Any = None, subscription_id: int | None = None) -> Frame:
    obj = _opt({"type": "subscribe", "tenant_id": TENANT, "namespace": NS, "stream": stream},
               subscription_id=subscription_id, start=start)
    shown = None if start is None else start if isinstance(start, str) else json.dumps(
        start, separators=(",", ":"))
    return json_frame(obj, {"tenant_id": TENANT, "namespace": NS, "stream": stream,
                            "subscription_id": subscription_id, "start": shown})


def subscribed(subscription_id: int) -> Frame:
    return json_frame({"type": "subscribed", "subscription_id": subscription_id},
                      {"subscription_id": subscription_id})


def event_stream_hello(subscription_id: int) -> Frame:
    return json_frame({"type": "event_stream_hello", "subscription_id": subscription_id},
                      {"subscription_id": subscription_id})


def event(stream: str, payload: bytes, offset: int | None = None) -> Frame:
    obj = _opt({"type": "event", "tenant_id": TENANT, "namespace": NS, "stream": stream,
                "payload": b64(payload)}, offset=offset)
    common = {"tenant_id": TENANT, "namespace": NS, "stream": stream}
    return json_frame(obj, {**common, "offset": offset, "payload_count": 1,
                            "payload_len": len(payload), "payload_sha256": sha(payload)},
                      [_msg(payload, 0, 1, offset, **common)])


def event_batch(stream: str, payloads: list[bytes], base_offset: int | None = None) -> Frame:
    obj = _opt({"type": "event_batch", "tenant_id": TENANT, "namespace": NS, "stream": stream,
                "payloads": [b64(p) for p in payloads]}, base_offset=base_offset)
    common = {"tenant_id": TENANT, "namespace": NS, "stream": stream}
    n = len(payloads)
    return json_frame(obj, {**common, "offset": base_offset, "payload_count": n},
                      [_msg(p, i, n, None if base_offset is None else base_offset + i,
                            **common) for i, p in enumerate(payloads)])


def subscription_lagged(subscription_id: int, resume_from: int) -> Frame:
    return json_frame({"type": "subscription_lagged", "subscription_id": subscription_id,
                       "resume_from": resume_from},
                      {"subscription_id": subscription_id, "offset": resume_from})


def cache_put(cache: str, key: str, value: bytes, *, request_id: int | None = None,
              ttl_ms: int | None = None) -> Frame:
    obj = _opt({"type": "cache_put", "tenant_id": TENANT, "namespace": NS, "cache": cache,
                "key": key, "value": b64(value)}, request_id=request_id)
    obj["ttl_ms"] = ttl_ms  # always written, null when unset (§5.6)
    return json_frame(obj, {"tenant_id": TENANT, "namespace": NS, "cache": cache, "key": key,
                            "request_id": request_id, "ttl_ms": ttl_ms,
                            "payload_len": len(value), "payload_sha256": sha(value),
                            "payload_count": None})


def cache_get(cache: str, key: str, request_id: int | None = None,
              typ: str = "cache_get") -> Frame:
    obj = _opt({"type": typ, "tenant_id": TENANT, "namespace": NS, "cache": cache, "key": key},
               request_id=request_id)
    return json_frame(obj, {"tenant_id": TENANT, "namespace": NS, "cache": cache, "key": key,
                            "request_id": request_id})


def cache_value(cache: str, key: str, value: bytes | None,
                request_id: int | None = None) -> Frame:
    obj = _opt({"type": "cache_value", "tenant_id": TENANT, "namespace": NS, "cache": cache,
                "key": key, "value": None if value is None else b64(value)},
               request_id=request_id)
    obj["value"] = None if value is None else b64(value)
    return json_frame(obj, {"cache": cache, "key": key, "request_id": request_id,
                            "payload_len": None if value is None else len(value),
                            "payload_sha256": None if value is None else sha(value)})


def cache_ok(request_id: int) -> Frame:
    return json_frame({"type": "cache_ok", "request_id": request_id},
                      {"request_id": request_id})


# ---- binary layouts (protocol-facts §5.5) ----------------------------------------


def _s16(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def _entries(payloads: list[bytes], times_us: list[int] | None = None) -> bytes:
    out = struct.pack(">I", len(payloads))
    for i, p in enumerate(payloads):
        if times_us is not None:
            out += struct.pack(">Q", times_us[i])
        out += struct.pack(">I", len(p)) + p
    return out


def binary_publish(stream: str, payloads: list[bytes], *, key: bytes | None = None,
                   request_id: int | None = None, ack_mode: str | None = None,
                   producer: tuple[int, int] | None = None, tenant: str = TENANT) -> Frame:
    """Publish batch (0x0001), acked (0x0008), keyed (0x0040), idempotent (0x0100)."""
    flags = BINARY_PUBLISH_BATCH
    body = b""
    if request_id is not None:
        flags |= BINARY_PUBLISH_ACKED
        body += struct.pack(">QB", request_id, ACK_MODE_BYTE[ack_mode or "per_batch"])
        if producer is not None:
            flags |= BINARY_PUBLISH_IDEMPOTENT
            body += struct.pack(">QQ", *producer)
    if key is not None:
        flags |= BINARY_PUBLISH_KEYED
        body += _s16(key)
    body += _s16(tenant) + _s16(NS) + _s16(stream) + _entries(payloads)
    kind = "binary_acked_publish_batch" if request_id is not None else "binary_publish_batch"
    common = {"tenant_id": tenant, "namespace": NS, "stream": stream,
              "key": None if key is None else key.decode(), "request_id": request_id,
              "ack_mode": None if request_id is None else (ack_mode or "per_batch"),
              "producer_id": None if producer is None or request_id is None else producer[0],
              "sequence": None if producer is None or request_id is None else producer[1]}
    n = len(payloads)
    return _frame(flags, body, kind, None, {**common, "payload_count": n},
                  [_msg(p, i, n, **common) for i, p in enumerate(payloads)])


def binary_ack(request_id: int, error_message: str | None = None, *,
               code: str | None = None, retry: str | None = None,
               reason: str | None = None, retry_after_ms: int | None = None,
               owner: tuple[str, str | None, int] | None = None,
               offset: int | None = None) -> Frame:
    """Publish ack (0x0010) with code (0x0200), detail (0x0400), owner (0x0080), offset
    (0x1000)."""
    flags = BINARY_PUBLISH_ACK
    msg = (error_message or "").encode()
    body = struct.pack(">BQ", 0 if error_message is None else 1, request_id) + _s16(msg)
    fields: dict[str, Any] = {"ack_status": "ok" if error_message is None else "error",
                              "request_id": request_id, "error_message": error_message}
    if code is not None:
        flags |= BINARY_PUBLISH_ACK_CODE
        body += struct.pack(">HB", ERROR_CODE_NUMBER[code], RETRY_NUMBER[retry or "fatal"])
        fields.update(error_code=code, retry=retry or "fatal")
        if reason is not None or retry_after_ms is not None:
            flags |= BINARY_PUBLISH_ACK_DETAIL
            body += _s16(reason or "") + struct.pack(">Q", retry_after_ms or 0)
            fields.update(reason=reason, retry_after_ms=retry_after_ms)
    if owner is not None:
        flags |= BINARY_PUBLISH_ACK_OWNER
        body += _s16(owner[0]) + _s16(owner[1] or "") + struct.pack(">Q", owner[2])
        fields.update(node_id=owner[0], addr=owner[1], generation=owner[2])
    if offset is not None:
        flags |= BINARY_PUBLISH_ACK_OFFSET
        body += struct.pack(">Q", offset)
        fields["offset"] = offset
    return _frame(flags, body, "binary_publish_ack", None, fields)


def binary_events(payloads: list[bytes], *, subscription_id: int | None = None,
                  base_offset: int | None = None, skipped_before: int | None = None,
                  publisher: str | None = None, times_us: list[int] | None = None) -> Frame:
    """Event batch: per subscriber (0x0002, with ``subscription_id``) or shared (0x0004),
    with offsets (0x0020), skipped (0x0800), publisher (0x2000), timestamps (0x4000)."""
    shared = subscription_id is None
    flags = BINARY_EVENT_BATCH_SHARED if shared else BINARY_EVENT_BATCH
    body = b"" if shared else struct.pack(">Q", subscription_id)
    if base_offset is not None:
        flags |= EVENT_BATCH_OFFSETS
        body += struct.pack(">Q", base_offset)
    if skipped_before is not None:
        flags |= EVENT_BATCH_SKIPPED
        body += struct.pack(">Q", skipped_before)
    if publisher is not None:
        flags |= EVENT_BATCH_PUBLISHER
        p = publisher.encode()
        body += bytes([len(p)]) + p
    if times_us is not None:
        flags |= EVENT_BATCH_TIMESTAMPS
    body += _entries(payloads, times_us)
    kind = "binary_shared_event_batch" if shared else "binary_event_batch"
    common = {"subscription_id": subscription_id, "publisher": publisher}
    n = len(payloads)
    return _frame(flags, body, kind, None,
                  {**common, "offset": base_offset, "skipped_before": skipped_before,
                   "payload_count": n},
                  [_msg(p, i, n, None if base_offset is None else base_offset + i, **common)
                   for i, p in enumerate(payloads)])


def raw_frame(flags: int, payload: bytes, anomalies: list[str], kind: str = "unknown",
              version: int = 1) -> Frame:
    """A frame a reader cannot decode (unknown flag bits, a bad combination, ...)."""
    f = _frame(flags, payload, kind, None, {}, [], anomalies)
    if version != 1:
        f.data = header(flags, len(payload), version) + payload
    return f


# ============================================================ reading frames (both ends)


class FrameReader:
    """Splits one stream direction into (flags, payload) frames (both ends use it to read
    what the other sent; msgcap's decoder is not involved)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buf += data
        out = []
        while len(self.buf) >= 12:
            magic, _version, flags, length = HEADER.unpack_from(self.buf)
            if magic != MAGIC:
                raise ValueError(f"peer sent no FLX1 header: {bytes(self.buf[:12]).hex()}")
            if len(self.buf) < 12 + length:
                break
            out.append((flags, bytes(self.buf[12 : 12 + length])))
            del self.buf[: 12 + length]
        return out


# ============================================================ the QUIC ends


@dataclass
class Log:
    """Frames each side sent, per stream, in order (the ground truth)."""

    streams: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, side: str, sid: int, frame: Frame) -> None:
        self.streams.setdefault((side, sid), []).append(frame.truth)

    def as_json(self) -> list[dict[str, Any]]:
        return [{"stream_id": sid, "side": side, "frames": frames}
                for (side, sid), frames in sorted(self.streams.items(),
                                                  key=lambda kv: (kv[0][1], kv[0][0]))]


def _quic_classes():
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.quic.events import StreamDataReceived

    class Peer(QuicConnectionProtocol):
        """Both ends: send frames (logged first), collect the frames received per stream."""

        side = "?"
        log: Log

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.readers: dict[int, FrameReader] = {}
            self.inbox: dict[int, asyncio.Queue] = {}
            self.ended: set[int] = set()

        def queue(self, sid: int) -> asyncio.Queue:
            return self.inbox.setdefault(sid, asyncio.Queue())

        def send(self, sid: int, frame: Frame, end: bool = False) -> None:
            self.log.add(self.side, sid, frame)
            self._quic.send_stream_data(sid, frame.data, end_stream=end)
            self.transmit()

        def end(self, sid: int) -> None:
            self._quic.send_stream_data(sid, b"", end_stream=True)
            self.transmit()

        def quic_event_received(self, event) -> None:
            if isinstance(event, StreamDataReceived):
                reader = self.readers.setdefault(event.stream_id, FrameReader())
                for fr in reader.feed(event.data):
                    self.on_frame(event.stream_id, *fr)
                if event.end_stream:
                    self.on_end(event.stream_id)

        def on_frame(self, sid: int, flags: int, payload: bytes) -> None:
            self.queue(sid).put_nowait((flags, payload))

        def on_end(self, sid: int) -> None:
            self.ended.add(sid)
            self.queue(sid).put_nowait(None)

    class Broker(Peer):
        """A broker emulator answering like the snapshot broker (protocol-facts §5.2/§5.6)."""

        side = "server"
        state: dict[str, Any]

        def send(self, sid: int, frame: Frame, end: bool = False) -> None:
            if sid & 0x03 == 0x02:  # the client's publish-only uni stream: no replies
                return
            super().send(sid, frame, end)

        def on_frame(self, sid: int, flags: int, payload: bytes) -> None:
            if flags == 0:
                self._json(sid, json.loads(payload))
            elif flags & ~0x7FFF:
                self.send(sid, error("unsupported frame flags"))
            elif flags & BINARY_PUBLISH_BATCH:
                self._binary_publish(sid, flags, payload)
            else:
                self.send(sid, error("unexpected frame"))

        def on_end(self, sid: int) -> None:
            if not sid & 0x02:  # a bidi stream the client finished: finish ours too
                self.end(sid)

        def _append(self, stream: str, payloads: list[bytes]) -> int | None:
            log = self.state["streams"].get(stream)
            if log is None:
                return None
            first = len(log)
            log.extend(payloads)
            return first

        def _json(self, sid: int, m: dict[str, Any]) -> None:
            t = m["type"]
            st = self.state
            if t == "auth":
                self.send(sid, auth_ok(0x3FFF))
            elif t in ("publish", "publish_batch"):
                payloads = ([base64.b64decode(m["payload"])] if t == "publish"
                            else [base64.b64decode(p) for p in m["payloads"]])
                first = self._append(m["stream"], payloads)
                if m.get("ack") in ("per_message", "per_batch") and "request_id" in m:
                    if first is None:
                        self.send(sid, publish_error(m["request_id"], "stream not found",
                                                     "not_found", "fatal"))
                    else:
                        self.send(sid, publish_ok(m["request_id"], first))
            elif t == "subscribe":
                self._subscribe(sid, m)
            elif t == "cache_put":
                st["cache"][(m["cache"], m["key"])] = base64.b64decode(m["value"])
                self.send(sid, cache_ok(m["request_id"]) if "request_id" in m else ok())
            elif t == "cache_delete":
                st["cache"].pop((m["cache"], m["key"]), None)
                self.send(sid, cache_ok(m["request_id"]) if "request_id" in m else ok())
            elif t == "cache_get":
                self.send(sid, cache_value(m["cache"], m["key"],
                                           st["cache"].get((m["cache"], m["key"])),
                                           m.get("request_id")))
            else:
                self.send(sid, error(f"unknown message type {t}", "invalid_request", "fatal"))

        def _binary_publish(self, sid: int, flags: int, payload: bytes) -> None:
            pos = 0
            rid = None
            if flags & BINARY_PUBLISH_ACKED:
                rid = struct.unpack_from(">Q", payload, 0)[0]
                pos = 9 + (16 if flags & BINARY_PUBLISH_IDEMPOTENT else 0)
            if flags & BINARY_PUBLISH_KEYED:
                pos += 2 + struct.unpack_from(">H", payload, pos)[0]
            names = []
            for _ in range(3):
                n = struct.unpack_from(">H", payload, pos)[0]
                names.append(payload[pos + 2 : pos + 2 + n].decode())
                pos += 2 + n
            (count,) = struct.unpack_from(">I", payload, pos)
            pos += 4
            items = []
            for _ in range(count):
                (n,) = struct.unpack_from(">I", payload, pos)
                items.append(payload[pos + 4 : pos + 4 + n])
                pos += 4 + n
            first = self._append(names[2], items)
            if rid is None:
                return
            if first is None:
                self.send(sid, binary_ack(rid, "stream not found", code="not_found",
                                          retry="fatal", reason="no such stream",
                                          retry_after_ms=250))
            elif flags & BINARY_PUBLISH_IDEMPOTENT:
                self.send(sid, binary_ack(rid, offset=first,
                                          owner=("broker-2", "127.0.0.1:5002", 7)))
            else:
                self.send(sid, binary_ack(rid))

        def _subscribe(self, sid: int, m: dict[str, Any]) -> None:
            """The hello on a new uni stream first, then `subscribed`, then replay (§5.2)."""
            st = self.state
            sub = st["next_subscription"]
            st["next_subscription"] += 1
            events = self._quic.get_next_available_stream_id(is_unidirectional=True)
            self.send(events, event_stream_hello(sub))
            self.send(sid, subscribed(sub))
            log = st["streams"][m["stream"]]
            stream = m["stream"]
            self.send(events, binary_events(log[:3], subscription_id=sub))
            self.send(events, binary_events(log[3:6], subscription_id=sub, base_offset=3))
            self.send(events, binary_events(log[6:8], base_offset=6, publisher="svc-orders"))
            self.send(events, binary_events(log[8:9], subscription_id=sub, base_offset=8,
                                            skipped_before=2))
            self.send(events, event(stream, log[9], offset=9))
            self.send(events, event_batch(stream, log[10:12], base_offset=10))
            self.send(events, subscription_lagged(sub, 12), end=True)

    class Client(Peer):
        side = "client"

        async def reply(self, sid: int, timeout: float = 10.0) -> tuple[int, bytes] | None:
            return await asyncio.wait_for(self.queue(sid).get(), timeout)

        async def ask(self, sid: int, frame: Frame) -> tuple[int, bytes]:
            self.send(sid, frame)
            got = await self.reply(sid)
            if got is None:
                raise RuntimeError(f"stream {sid} ended before a reply")
            return got

    return Broker, Client


def _certificate():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def payloads_for_replay(rng: random.Random) -> list[bytes]:
    return [f"order-{i}:".encode() + rng.randbytes(rng.randint(0, 40)) for i in range(12)]


async def run_workload(port: int, keylog: Path, big_bytes: int, seed: int) -> dict[str, Any]:
    """Serve the broker emulator on ``port``, run both client connections, return the
    truth (what each side sent, per connection and stream)."""
    from aioquic.asyncio import connect, serve
    from aioquic.quic.configuration import QuicConfiguration

    rng = random.Random(seed)
    Broker, Client = _quic_classes()
    state = {"streams": {"orders": [], "audit": []}, "cache": {}, "next_subscription": 1}

    def make_broker(*args, **kwargs):
        proto = Broker(*args, **kwargs)
        proto.state = state
        proto.log = Log()
        brokers.append(proto)
        return proto

    server_conf = QuicConfiguration(is_client=False, max_datagram_frame_size=None)
    server_conf.certificate, server_conf.private_key = _certificate()
    brokers: list[Any] = []  # one broker protocol per connection, in order
    server = await serve(HOST, port, configuration=server_conf, create_protocol=make_broker)

    def client_conf(secrets: Any) -> QuicConfiguration:
        return QuicConfiguration(is_client=True, server_name="localhost",
                                 verify_mode=ssl.CERT_NONE, secrets_log_file=secrets)

    connections: dict[str, dict[str, Any]] = {}
    try:
        with open(keylog, "w") as secrets:
            async with connect(HOST, port, configuration=client_conf(secrets),
                               create_protocol=Client) as c:
                c.log = Log()
                local = c._transport.get_extra_info("sockname")
                await _decrypted_workload(c, rng, big_bytes)
                c.close(reason_phrase="done")
                await c.wait_closed()
            connections["decrypted"] = {"client_port": local[1], "keylogged": True, "log": c.log}
        async with connect(HOST, port, configuration=client_conf(None),
                           create_protocol=Client) as c2:
            c2.log = Log()
            local2 = c2._transport.get_extra_info("sockname")
            sid = c2._quic.get_next_available_stream_id()
            await c2.ask(sid, auth(TENANT, "hidden-token", 0x19))
            c2.send(sid, publish("audit", b"never seen in the clear"), end=True)
            await asyncio.sleep(0.2)
            c2.close(reason_phrase="done")
            await c2.wait_closed()
        connections["no-secrets"] = {"client_port": local2[1], "keylogged": False, "log": c2.log}
        await asyncio.sleep(0.3)  # let the server flush its last packets
    finally:
        server.close()
    # the broker protocols' logs, matched to their connection by the client port
    for proto in brokers:
        paths = proto._quic._network_paths
        for conn in connections.values():
            if paths and paths[0].addr[1] == conn["client_port"]:
                conn.setdefault("server_logs", []).append(proto.log)
    out = {}
    for name, conn in connections.items():
        merged = Log()
        merged.streams.update(conn["log"].streams)
        for slog in conn.get("server_logs", []):
            merged.streams.update(slog.streams)
        out[name] = {"client_port": conn["client_port"], "keylogged": conn["keylogged"],
                     "streams": merged.as_json()}
    return out


async def _decrypted_workload(c: Any, rng: random.Random, big_bytes: int) -> None:
    """Every frame kind of the decrypted connection, in a fixed order."""
    replay = payloads_for_replay(rng)
    # publish stream: JSON and binary publishes with their acks
    pub = c._quic.get_next_available_stream_id()
    await c.ask(pub, auth(TENANT, "demo-token", 0x3FFF))
    await c.ask(pub, publish("orders", replay[0], request_id=1, ack="per_message"))
    await c.ask(pub, publish_batch("orders", replay[1:3], key=b"k-batch", request_id=2,
                                   ack="per_batch"))
    await c.ask(pub, publish("missing", b"to nowhere", request_id=3, ack="per_message"))
    c.send(pub, publish("orders", replay[3]))  # unacked: no reply
    c.send(pub, binary_publish("orders", replay[4:6]))  # unacked binary batch
    await c.ask(pub, binary_publish("orders", replay[6:8], request_id=4,
                                    ack_mode="per_message"))
    await c.ask(pub, binary_publish("orders", replay[8:10], key=b"k7", request_id=5))
    await c.ask(pub, binary_publish("orders", replay[10:12], request_id=6,
                                    producer=(77, 1000)))
    await c.ask(pub, binary_publish("missing", [b"x" * 10], request_id=7))
    big = [rng.randbytes(big_bytes), rng.randbytes(big_bytes // 3)]
    await c.ask(pub, binary_publish("audit", big, key=b"big", request_id=8))
    c.end(pub)
    # control stream: subscribe, cache, errors
    ctl = c._quic.get_next_available_stream_id()
    await c.ask(ctl, auth(TENANT, "demo-token", 0x19))
    await c.ask(ctl, subscribe("orders", start="earliest"))
    await c.ask(ctl, cache_put("primary", "demo-key", b"cached", request_id=10, ttl_ms=1000))
    await c.ask(ctl, cache_put("primary", "other", rng.randbytes(300)))
    await c.ask(ctl, cache_get("primary", "demo-key", request_id=11))
    await c.ask(ctl, cache_get("primary", "nope"))
    await c.ask(ctl, cache_get("primary", "other", request_id=12, typ="cache_delete"))
    await c.ask(ctl, json_frame({"type": "frobnicate", "request_id": 13}, {"request_id": 13}))
    await c.ask(ctl, raw_frame(0x8001, b"\x00\x01future", ["felix.unknown_flags"]))
    c.end(ctl)
    # client uni publish-only stream: no replies
    uni = c._quic.get_next_available_stream_id(is_unidirectional=True)
    c.send(uni, auth(TENANT, "demo-token"))
    c.send(uni, publish("audit", b"one-way"))
    c.send(uni, binary_publish("audit", [b"a", b"", b"c"], key=b""), end=True)
    # the event stream: wait until the broker finished it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(sid & 0x03 == 0x03 for sid in c.ended):
            break
        await asyncio.sleep(0.05)
    for sid in (pub, ctl):
        while (await c.reply(sid)) is not None:
            pass
    await asyncio.sleep(0.2)


def _udp_port(first: int = 5000, tries: int = 100) -> int:
    """Felix's default port (UDP 5000), else the next free one above it.  A low port also
    keeps the capture readable by port heuristics: the QUIC server is the lower port."""
    for port in range(first, first + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    die(f"no free UDP port in {first}..{first + tries - 1}")
    raise AssertionError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True,
                    help="output prefix: writes PREFIX.pcap, PREFIX.keys, PREFIX.truth.json")
    ap.add_argument("--port", type=int, default=0,
                    help="UDP port of the broker emulator (default: 5000, Felix's own, or the "
                    "next free one)")
    ap.add_argument("--big", type=int, default=48_000,
                    help="size of the big payload (default 48000: ~40 QUIC packets)")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--tail-wait", type=float, default=2.0,
                    help="seconds between the last packet and stopping tcpdump (default 2)")
    args = ap.parse_args(argv)
    prefix = args.out[:-5] if args.out.endswith(".pcap") else args.out
    pcap_path = Path(prefix + ".pcap")
    keys_path = Path(prefix + ".keys")
    truth_path = Path(prefix + ".truth.json")
    pcap_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import aioquic  # noqa: F401
    except ImportError:
        die(f"aioquic is not importable by {sys.executable}; pip install -e '.[test]'")
    from importlib.metadata import version as pkg_version

    tcpdump = find_tcpdump()
    tcpdump_version = subprocess.run([tcpdump, "--version"], capture_output=True,
                                     text=True).stdout.splitlines()[0].strip()
    port = args.port or _udp_port()
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-felix-"))
    dump = None
    bpf = f"udp port {port}"
    try:
        if pcap_path.exists():
            pcap_path.unlink()
        dump_err = tmp / "tcpdump.stderr"
        with open(dump_err, "wb") as err_f:
            dump = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "--immediate-mode", "-U",
                 "-Z", "root", "-w", str(pcap_path), bpf],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_f,
            )
        wait_for_text(dump_err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        started = dt.datetime.now(dt.UTC)
        t0 = time.monotonic()
        conns = asyncio.run(run_workload(port, keys_path, args.big, args.seed))
        seconds = time.monotonic() - t0
        time.sleep(args.tail_wait)
        rc = stop(dump, signal.SIGINT)
        dump_text = dump_err.read_text(errors="replace")
        stats = {k: int(v) for v, k in re.findall(
            r"(\d+) packets? (captured|received by filter|dropped by kernel)", dump_text)}
        if rc not in (0, None) or "captured" not in stats:
            die(f"tcpdump exited with {rc}:\n{dump_text}")
    finally:
        if dump is not None:
            stop(dump, signal.SIGINT, timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)

    packets = count_pcap_packets(pcap_path)
    problems = []
    if stats.get("dropped by kernel", 0):
        problems.append(f"tcpdump reports {stats['dropped by kernel']} packets dropped by kernel")
    if packets != stats["captured"]:
        problems.append(f"pcap has {packets} records but tcpdump reported {stats['captured']}")
    for name, conn in conns.items():
        sides = {s["side"] for s in conn["streams"]}
        if sides != {"client", "server"}:
            problems.append(f"{name}: frames logged by {sorted(sides)} only")
    frames = {name: sum(len(s["frames"]) for s in c["streams"]) for name, c in conns.items()}
    truth = {
        "format": TRUTH_FORMAT,
        "capture": pcap_path.name,
        "keylog": keys_path.name,
        "recorded_at": started.isoformat(timespec="seconds"),
        "workload_seconds": round(seconds, 3),
        "command": "python samples/record_felix.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "server": {"software": "samples/record_felix.py broker emulator (aioquic server)",
                   "ip": HOST, "port": port},
        "client": {"software": "samples/record_felix.py workload (aioquic client)",
                   "aioquic": pkg_version("aioquic"), "python": sys.version.split()[0]},
        "tcpdump": {"version": tcpdump_version, "filter": bpf, "interface": "lo",
                    **{k.replace(" ", "_"): v for k, v in stats.items()}},
        "pcap": {"bytes": pcap_path.stat().st_size, "packets": packets},
        "counting": "each side appends a frame's truth when it hands the frame to QUIC "
                    "(send_stream_data); `fields` are the felix columns the sender expects, "
                    "`messages` the felix_messages rows (index order), `anomalies` the "
                    "felix anomaly kinds the frame should raise",
        "frames": frames,
        "connections": conns,
        "problems": problems,
    }
    truth_path.write_text(json.dumps(truth, indent=1) + "\n")
    print(f"wrote {pcap_path} ({pcap_path.stat().st_size} bytes, {packets} packets), "
          f"{keys_path} and {truth_path}; frames {frames}; {seconds:.1f}s")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic multi-host NATS captures for the Spark tests and ``benchmarks/bench_spark.py``.

Written straight with ``struct`` (scapy is far too slow for a gigabyte).  One NATS server
(10.1.0.1:4222) and ``clients`` clients on their own hosts (10.0.x.y); each client
connects (SYN / SYN-ACK / ACK, INFO, CONNECT + PING, PONG), subscribes to one of three
subjects and then, round after round, publishes to another; the server delivers every
message to the subscribers of its subject (MSG on their connections).  Client 0 also
answers ``svc.echo`` requests that the others send now and then.  Options add what the
split path must reproduce exactly:

* ``idle_gap_s``: half of the clients fall silent for that long in the middle (with a
  small ``tcp_idle_timeout`` their flows are closed by the idle sweep and a new flow
  starts when they speak again, mid-stream);
* ``snap_every``: every n-th data frame is cut by the "snaplen" (caplen 60 < wire
  length): ``ip.truncated`` rows and one summary row;
* ``frag_every``: every n-th round each client also sends a 2000-byte UDP datagram in
  two IPv4 fragments; one in ten loses its second fragment (``ip.frag_incomplete``).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_ETH_IP = struct.Struct("!6s6sHBBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
_UDP = struct.Struct("!HHHH")
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
SERVER = bytes([10, 1, 0, 1])
T0_US = 1_700_000_000_000_000


class _Writer:
    def __init__(self, path: Path) -> None:
        self.f = open(path, "wb", buffering=1 << 22)  # noqa: SIM115 - closed in close()
        self.f.write(_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.frames = 0
        self.snap_every = 0
        self._data_frames = 0

    def frame(self, ts_us: int, frame: bytes, data: bool = False) -> None:
        caplen = len(frame)
        if data and self.snap_every:
            self._data_frames += 1
            if self._data_frames % self.snap_every == 0 and caplen > 60:
                caplen = 60
        self.f.write(_RECORD.pack(ts_us // 1_000_000, ts_us % 1_000_000, caplen, len(frame)))
        self.f.write(frame[:caplen])
        self.frames += 1

    def close(self) -> None:
        self.f.close()


def _ip(src: bytes, dst: bytes, proto: int, payload: bytes, ident: int = 1, frag: int = 0,
        total: int | None = None) -> bytes:
    total = 20 + len(payload) if total is None else total
    return _ETH_IP.pack(b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, total, ident, frag, 64,
                        proto, 0, src, dst) + payload


class _Conn:
    def __init__(self, w: _Writer, client: bytes, cport: int, sport: int = 4222) -> None:
        self.w = w
        self.client = client
        self.cport = cport
        self.sport = sport
        self.cseq = random.getrandbits(32)
        self.sseq = random.getrandbits(32)

    def _seg(self, ts: int, c2s: bool, flags: int, data: bytes = b"") -> None:
        if c2s:
            src, dst, sp, dp = self.client, SERVER, self.cport, self.sport
            seq, ack = self.cseq, self.sseq
        else:
            src, dst, sp, dp = SERVER, self.client, self.sport, self.cport
            seq, ack = self.sseq, self.cseq
        tcp = _TCP.pack(sp, dp, seq % (1 << 32), ack % (1 << 32), 5 << 4, flags, 65535, 0, 0)
        self.w.frame(ts, _ip(src, dst, 6, tcp + data), data=bool(data))
        adv = len(data) + (1 if flags & (SYN | FIN) else 0)
        if c2s:
            self.cseq += adv
        else:
            self.sseq += adv

    def open(self, ts: int, name: str) -> int:
        self._seg(ts, True, SYN)
        self._seg(ts + 20, False, SYN | ACK)
        self._seg(ts + 40, True, ACK)
        self.send(ts + 60, False, b'INFO {"server_id":"S","version":"2.10.0","max_payload":1048576'
                  b',"headers":true,"proto":1}\r\n')
        self.send(ts + 90, True, b'CONNECT {"verbose":false,"pedantic":false,"name":"'
                  + name.encode() + b'","lang":"python","version":"2.0","protocol":1,'
                  b'"headers":true,"no_responders":true}\r\nPING\r\n')
        self.send(ts + 120, False, b"PONG\r\n")
        return ts + 150

    def send(self, ts: int, c2s: bool, data: bytes) -> None:
        self._seg(ts, c2s, PSH | ACK, data)
        self._seg(ts + 5, not c2s, ACK)

    def close(self, ts: int) -> None:
        self._seg(ts, True, FIN | ACK)
        self._seg(ts + 10, False, FIN | ACK)
        self._seg(ts + 20, True, ACK)


def write_nats_capture(
    path: str | Path,
    *,
    clients: int = 8,
    rounds: int = 40,
    payload: int = 64,
    idle_gap_s: float = 0.0,
    snap_every: int = 0,
    frag_every: int = 0,
    seed: int = 7,
    step_us: int = 2_000,
) -> int:
    """Write the capture; returns the number of frames."""
    random.seed(seed)
    w = _Writer(Path(path))
    w.snap_every = snap_every
    conns = []
    ts = T0_US
    for i in range(clients):
        host = bytes([10, 0, (i >> 8) & 0xFF, (i & 0xFF) + 1])
        c = _Conn(w, host, 40000 + i)
        ts = c.open(ts, f"client-{i}")
        c.send(ts, True, f"SUB subj.{i % 3} 1\r\n".encode())
        if i == 0:
            c.send(ts + 10, True, b"SUB svc.echo 2\r\n")
        ts += 100
        conns.append(c)
    body = bytes(random.getrandbits(8) for _ in range(max(payload, 1)))
    silent: set[int] = set()
    for r in range(rounds):
        if idle_gap_s and r == rounds // 2:
            silent = set(range(0, clients, 2))
        if idle_gap_s and r == rounds // 2 + 2:
            silent = set()
        for i, c in enumerate(conns):
            if i in silent:
                continue
            subj = (i + 1) % 3
            data = body[: (r * 7 + i) % len(body) + 1]
            c.send(ts, True, b"PUB subj.%d %d\r\n%s\r\n" % (subj, len(data), data))
            for j, d in enumerate(conns):
                if j % 3 == subj and j not in silent:
                    d.send(ts + 30, False, b"MSG subj.%d 1 %d\r\n%s\r\n" % (subj, len(data), data))
            if i and (r + i) % 5 == 0 and 0 not in silent:
                inbox = b"_INBOX.c%d.%d" % (i, r)
                req = b"ping %d" % r
                c.send(ts + 50, True, b"PUB svc.echo %s %d\r\n%s\r\n" % (inbox, len(req), req))
                conns[0].send(ts + 60, False, b"MSG svc.echo 2 %s %d\r\n%s\r\n" % (inbox, len(req),
                                                                                 req))
                conns[0].send(ts + 70, True, b"PUB %s %d\r\n%s\r\n" % (inbox, len(req), req))
                c.send(ts + 80, False, b"MSG %s 1 %d\r\n%s\r\n" % (inbox, len(req), req))
            if frag_every and r % frag_every == 0:
                udp_payload = bytes(2000)
                udp = _UDP.pack(50000 + i, 9999, 8 + len(udp_payload), 0) + udp_payload
                ident = (r * clients + i) & 0xFFFF
                first, second = udp[:1480], udp[1480:]
                w.frame(ts + 90, _ip(c.client, SERVER, 17, first, ident, 0x2000))
                if (r // frag_every + i) % 10:
                    w.frame(ts + 95, _ip(c.client, SERVER, 17, second, ident, 1480 // 8))
            ts += step_us // max(clients, 1) + 97
        ts += step_us
        if idle_gap_s and r == rounds // 2:
            ts += int(idle_gap_s * 1_000_000)
    for c in conns:
        c.close(ts)
        ts += 100
    w.close()
    return w.frames

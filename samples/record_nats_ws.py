#!/usr/bin/env python3
"""Record NATS over WebSocket: a real nats-server ``websocket`` listener and WebSocket
clients (PyPI ``websockets``) speaking the NATS client protocol, with client-side truth.

Two nats-server processes on 127.0.0.1: ``ws`` (``websocket { no_tls: true, compression:
true }``) and ``wss`` (the same listener with TLS; certificates made as in
samples/record_nats_tls.py).  Clients:

* ``ws-plain``   – ws://, no compression; one PUB sent as a fragmented WebSocket message
* ``ws-deflate`` – ws://, permessage-deflate (context takeover); a large compressible PUB
* ``wss-deflate`` – wss:// with a TLS key log, permessage-deflate

Each client sends CONNECT/PING, subscribes, publishes, pings at the WebSocket level and
closes with a close frame.  Ground truth: the NATS bytes each client put into WebSocket
messages and the payload bytes of the messages it received, parsed by the
``OpStreamParser`` of samples/nats_workload.py (ops, payload digests, stream bytes).

    /work/venv/bin/python samples/record_nats_ws.py --out samples/nats-ws

Writes OUT.pcap, OUT.keys (TLS key log of the wss client) and OUT.truth.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nats_workload import OpStreamParser  # noqa: E402
from record_nats import (  # noqa: E402
    HOST,
    count_pcap_packets,
    find_nats_server,
    find_tcpdump,
    free_port,
    stop,
    wait_for_text,
)
from record_nats_tls import make_certs  # noqa: E402

CLIENTS = {  # name -> (server, compression, tls)
    "ws-plain": ("ws", False, False),
    "ws-deflate": ("ws", True, False),
    "wss-deflate": ("wss", True, True),
}


async def run_client(name: str, url: str, deflate: bool, ctx: ssl.SSLContext | None) -> dict:
    import websockets

    sent, received = OpStreamParser(), OpStreamParser()
    kwargs = {"compression": "deflate" if deflate else None, "max_size": None}
    if ctx is not None:
        kwargs["ssl"] = ctx
    async with websockets.connect(url, **kwargs) as ws:
        local = ws.transport.get_extra_info("sockname")

        async def send(data: bytes | list[bytes]) -> None:
            if isinstance(data, list):
                for part in data:
                    sent.feed(part)
                await ws.send(data)  # an iterable goes out as a fragmented message
            else:
                sent.feed(data)
                await ws.send(data)

        async def recv_until(marker: bytes) -> None:
            buf = b""
            while marker not in buf:
                msg = await asyncio.wait_for(ws.recv(), 5)
                data = msg.encode() if isinstance(msg, str) else msg
                received.feed(data)
                buf += data

        await recv_until(b"\r\n")  # INFO
        await send(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,'
                   b'"no_responders":true,"name":"' + name.encode() + b'","lang":"ws"}\r\n')
        await send(b"PING\r\n")
        await recv_until(b"PONG\r\n")
        await send(b"SUB ws.> 1\r\n")
        for i in range(5):
            body = f"hello over websocket {i}".encode()
            await send(b"PUB ws.msg.%d %d\r\n%s\r\n" % (i, len(body), body))
        big = b"compressible " * 2000
        await send([b"PUB ws.big %d\r\n" % len(big), big[:10000], big[10000:] + b"\r\n"])
        hdr = b"NATS/1.0\r\nX-Via: websocket\r\n\r\n"
        await send(b"HPUB ws.hdr %d %d\r\n%s%s\r\n" % (len(hdr), len(hdr) + 4, hdr, b"body"))
        pong = await ws.ping(b"are you there")
        await asyncio.wait_for(pong, 5)
        await send(b"PING\r\n")
        await recv_until(b"PONG\r\n")
        # the last PONG follows the 7 messages: keep reading until all of them arrived
        while received.ops.get("MSG", 0) + received.ops.get("HMSG", 0) < 7:
            await recv_until(b"\r\n")
    return {
        "name": name,
        "client_ip": local[0],
        "client_port": local[1],
        "compression": deflate,
        "tls": ctx is not None,
        "sent": {"ops": dict(sent.ops), "messages": sent.msgs.messages,
                 "payload_sha256": sent.msgs.hexdigest(), "stream_bytes": sent.stream_bytes,
                 "stream_sha256": sent.stream_hexdigest()},
        "received": {"ops": dict(received.ops), "messages": received.msgs.messages,
                     "payload_sha256": received.msgs.hexdigest(),
                     "stream_bytes": received.stream_bytes,
                     "stream_sha256": received.stream_hexdigest()},
        "problems": [f"{name}: {e}" for e in sent.errors + received.errors]
        + ([f"{name}: {received.pending} unparsed received bytes"] if received.pending else []),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="prefix: PREFIX.pcap, .keys, .truth.json")
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    prefix = args.out[:-5] if args.out.endswith(".pcap") else args.out
    pcap, keys = Path(prefix + ".pcap"), Path(prefix + ".keys")
    truth_path = Path(prefix + ".truth.json")
    for p in (pcap, keys):
        if p.exists():
            p.unlink()
    server_bin = find_nats_server(args.server_bin)
    tcpdump = find_tcpdump()
    ports: dict[str, int] = {}
    for k in ("ws", "wss", "ws_client", "wss_client"):
        while (p := free_port()) in ports.values():
            pass
        ports[k] = p
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-ws-"))
    ca, cert, key = make_certs(tmp)
    procs: list[subprocess.Popen] = []
    dump = None
    try:
        err = tmp / "tcpdump.stderr"
        flt = f"tcp port {ports['ws']} or tcp port {ports['wss']}"
        with open(err, "wb") as ef:
            dump = subprocess.Popen([tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536",
                                     "--immediate-mode", "-U", "-Z", "root", "-w", str(pcap),
                                     flt], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_text(err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        for name, tls in (("ws", "no_tls: true"),
                          ("wss", f'tls {{\n cert_file: "{cert}"\n key_file: "{key}"\n }}')):
            conf = tmp / f"{name}.conf"
            conf.write_text(f'listen: "{HOST}:{ports[name + "_client"]}"\n'
                            f'websocket {{\n listen: "{HOST}:{ports[name]}"\n {tls}\n'
                            " compression: true\n}\n")
            log = tmp / f"{name}.log"
            proc = subprocess.Popen([server_bin, "-c", str(conf), "-l", str(log)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
            procs.append(proc)
            wait_for_text(log, r"Server is ready", proc, f"nats-server {name}")

        async def all_clients() -> dict:
            out = {}
            for name, (server, deflate, tls) in CLIENTS.items():
                ctx = None
                if tls:
                    ctx = ssl.create_default_context(cafile=str(ca))
                    ctx.keylog_filename = str(keys)
                scheme = "wss" if tls else "ws"
                out[name] = await run_client(name, f"{scheme}://{HOST}:{ports[server]}",
                                             deflate, ctx)
            return out

        conns = asyncio.run(all_clients())
        time.sleep(args.tail_wait)
        stop(dump, signal.SIGINT)
        dump_text = err.read_text(errors="replace")
        for p in procs:
            stop(p, signal.SIGTERM)
        version = subprocess.run([server_bin, "--version"], capture_output=True,
                                 text=True).stdout.strip()
        import websockets

        ws_version = websockets.__version__
    finally:
        if dump is not None:
            stop(dump, signal.SIGINT, timeout=10)
        for p in procs:
            stop(p, signal.SIGTERM, timeout=10)
    problems = [p for c in conns.values() for p in c.pop("problems")]
    if "0 packets dropped by kernel" not in dump_text:
        problems.append(f"tcpdump: {dump_text.strip()[-200:]}")
    truth = {
        "format": "msgcap-nats-ws-truth/1",
        "capture": pcap.name,
        "keylog": keys.name,
        "server": version,
        "client": f"websockets {ws_version}",
        "ports": ports,
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        "counting": "sent = NATS bytes the client put into WebSocket messages; received = "
                    "payloads of the WebSocket messages it got; both parsed by "
                    "nats_workload.OpStreamParser",
        "connections": conns,
        "problems": problems,
    }
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    print(f"wrote {pcap}, {keys} and {truth_path}")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

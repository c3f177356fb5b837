#!/usr/bin/env python3
"""Record real nats-server <-> nats-py traffic over TLS, with the clients' TLS key log and
client-side ground truth.

A throw-away CA and server certificate are made with ``cryptography``.  Two nats-server
processes listen on 127.0.0.1: ``starttls`` (``tls {}``: the server sends its INFO in
clear, then the TLS handshake runs on the same connection) and ``tlsfirst`` (``tls {
handshake_first: true }``: TLS from the first byte).  nats-py clients, whose
``ssl.SSLContext.keylog_filename`` writes an NSS key log, connect with:

* ``pub13``  – starttls server, TLS 1.3
* ``sub12``  – starttls server, TLS 1.2 (``maximum_version``), AES-GCM
* ``chacha12`` – starttls server, TLS 1.2 with ECDHE-ECDSA-CHACHA20-POLY1305 only
* ``first13`` – tlsfirst server, TLS 1.3 (nats-py ``tls_handshake_first``)

Ground truth is counted on the client side exactly as samples/record_nats.py does (the
``ConnRecorder`` of samples/nats_workload.py sees the plaintext each client wrote and
read); the negotiated TLS version and cipher come from the client's ``ssl`` object.

    /work/venv/bin/python samples/record_nats_tls.py --out samples/nats-tls

Writes OUT.pcap, OUT.keys (the key log) and OUT.truth.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nats_workload as nw  # noqa: E402
from nats.aio.transport import TcpTransport  # noqa: E402
from record_nats import (  # noqa: E402
    HOST,
    count_pcap_packets,
    find_nats_server,
    find_tcpdump,
    free_port,
    stop,
    wait_for_text,
)


class RecordingTlsTransport(nw.RecordingTcpTransport):
    """The sample workload's recording transport, allowed to upgrade to TLS: the bytes it
    records are still the plaintext nats-py writes and reads."""

    async def connect_tls(self, uri, ssl_context, buffer_size, connect_timeout):  # type: ignore[override]
        await TcpTransport.connect_tls(self, uri, ssl_context, buffer_size, connect_timeout)


nw.nats_client.TcpTransport = RecordingTlsTransport


class TlsClient(nw.InstrumentedClient):
    async def connect_tls(self, url: str, ctx: ssl.SSLContext, first: bool) -> None:
        token = nw._current_recorder.set(self.rec)
        try:
            await self.nc.connect(servers=[url], name=self.name, tls=ctx,
                                  tls_handshake_first=first, allow_reconnect=False,
                                  max_reconnect_attempts=0, connect_timeout=5)
        finally:
            nw._current_recorder.reset(token)
        self.rec.app["connect"] += 1

    def tls_facts(self) -> dict:
        obj = self.nc._transport._io_writer.get_extra_info("ssl_object")
        name, version, bits = obj.cipher()
        return {"version": obj.version(), "cipher": name, "bits": bits}


def make_certs(tmp: Path) -> tuple[Path, Path, Path]:
    """CA, server certificate (127.0.0.1 / localhost) and key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "msgcap test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1))
          .not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = tmp / "ca.pem", tmp / "server.pem", tmp / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def client_context(ca: Path, keylog: Path, tls12: bool, ciphers: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.keylog_filename = str(keylog)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


CLIENTS = {  # name -> (server, TLS 1.2 only, TLS 1.2 cipher list, handshake first)
    "pub13": ("starttls", False, None, False),
    "sub12": ("starttls", True, "ECDHE-ECDSA-AES128-GCM-SHA256", False),
    "chacha12": ("starttls", True, "ECDHE-ECDSA-CHACHA20-POLY1305", False),
    "first13": ("tlsfirst", False, None, True),
}


async def workload(ports: dict[str, int], ca: Path, keylog: Path) -> dict:
    clients = {n: TlsClient(n) for n in CLIENTS}
    for name, (server, tls12, ciphers, first) in CLIENTS.items():
        ctx = client_context(ca, keylog, tls12, ciphers)
        await clients[name].connect_tls(f"tls://{HOST}:{ports[server]}", ctx, first)
    pub, sub, cha, first = (clients[n] for n in ("pub13", "sub12", "chacha12", "first13"))

    async def echo(msg):
        await msg.respond(b"echo:" + msg.data)

    await sub.subscribe("secure.>")
    await cha.subscribe("secure.hdr")
    await sub.subscribe("svc.echo", cb=echo)
    await first.subscribe("first.>")
    for c in clients.values():
        await c.flush()
    for i in range(8):
        await pub.publish(f"secure.msg.{i}", f"secret payload {i} ".encode() * (i + 1))
    await pub.publish("secure.bin", nw.BINARY_PAYLOAD)
    await pub.publish("secure.crlf", nw.CRLF_PAYLOAD)
    await pub.publish("secure.big", bytes(range(256)) * 160)  # > one TLS record
    await pub.publish("secure.hdr", b"with headers", headers={"X-Trace": "tls-1"})
    for i in range(3):
        await pub.request("svc.echo", f"request {i}".encode(), timeout=5)
    await cha.publish("secure.chacha", b"from chacha")
    for i in range(4):
        await first.publish(f"first.{i}", f"tls-first {i}".encode())
    await first.request("nobody.here", b"no responders")
    for c in clients.values():
        await c.flush()
    await asyncio.sleep(0.5)
    for c in clients.values():
        await c.flush()
    facts = {n: c.tls_facts() for n, c in clients.items()}
    for c in clients.values():
        await c.close()
    problems = []
    for c in clients.values():
        problems += c.rec.consistency_problems()
        problems += [f"{c.name}: async error {e!r}" for e in c.errors]
    conns = {}
    for n, c in clients.items():
        conns[n] = {**c.rec.to_dict(), "tls": facts[n], "server": CLIENTS[n][0],
                    "handshake_first": CLIENTS[n][3]}
    return {"connections": conns, "problems": problems}


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
    ports = {"starttls": free_port()}
    while (p := free_port()) == ports["starttls"]:
        pass
    ports["tlsfirst"] = p
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-tls-"))
    ca, cert, key = make_certs(tmp)
    procs: list[subprocess.Popen] = []
    dump = None
    try:
        err = tmp / "tcpdump.stderr"
        flt = f"tcp port {ports['starttls']} or tcp port {ports['tlsfirst']}"
        with open(err, "wb") as ef:
            dump = subprocess.Popen([tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536",
                                     "--immediate-mode", "-U", "-Z", "root", "-w", str(pcap),
                                     flt], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_text(err, r"listening on", dump, "tcpdump")
        time.sleep(0.2)
        for name, extra in (("starttls", ""), ("tlsfirst", "handshake_first: true")):
            conf = tmp / f"{name}.conf"
            conf.write_text(f'listen: "{HOST}:{ports[name]}"\n'
                            f'tls {{\n cert_file: "{cert}"\n key_file: "{key}"\n {extra}\n}}\n')
            log = tmp / f"{name}.log"
            proc = subprocess.Popen([server_bin, "-c", str(conf), "-l", str(log)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
            procs.append(proc)
            wait_for_text(log, r"Server is ready", proc, f"nats-server {name}")
        result = asyncio.run(workload(ports, ca, keys))
        time.sleep(args.tail_wait)
        stop(dump, signal.SIGINT)
        dump_text = err.read_text(errors="replace")
        for p in procs:
            stop(p, signal.SIGTERM)
        version = subprocess.run([server_bin, "--version"], capture_output=True,
                                 text=True).stdout.strip()
    finally:
        if dump is not None:
            stop(dump, signal.SIGINT, timeout=10)
        for p in procs:
            stop(p, signal.SIGTERM, timeout=10)
    problems = list(result["problems"])
    if "0 packets dropped by kernel" not in dump_text:
        problems.append(f"tcpdump: {dump_text.strip()[-200:]}")
    truth = {
        "format": "msgcap-nats-tls-truth/1",
        "capture": pcap.name,
        "keylog": keys.name,
        "server": version,
        "ports": ports,
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        "payload_sha256_scheme": nw.PAYLOAD_SHA256_SCHEME,
        "counting": "as samples/record_nats.py: sent = bytes nats-py wrote, received = bytes "
                    "it read (plaintext: INFO before TLS, then what TLS decrypted)",
        **result,
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

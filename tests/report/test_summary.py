"""`msgcap summary --json` over the sample captures, checked against their ground truth
(counted on the client side when they were recorded, never by msgcap)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from analyzer.cli import main
from tests.report.conftest import SAMPLES, truth


def summary_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["summary", *argv, "--json", "--quiet"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture(scope="module")
def nats_summary(tmp_path_factory) -> dict:
    """The summary of nats-basic.pcap given as a capture (dissected to a temp dir)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["summary", str(SAMPLES / "nats-basic.pcap"), "--json", "--quiet"])
    assert code == 0
    return json.loads(buf.getvalue())


def test_capture_facts(nats_summary, nats_truth):
    s = nats_summary
    assert s["source"]["kind"] == "capture"
    assert s["status"] == "clean"
    (cap,) = s["captures"]
    assert cap["packets"] == nats_truth["pcap"]["packets"] == 244
    assert cap["size"] == nats_truth["pcap"]["bytes"]
    assert cap["format"] == "pcap"
    assert [lt["name"] for lt in cap["link_types"]] == ["EN10MB"]  # tcpdump on Linux lo
    assert len(cap["sha256"]) == 64 and cap["capture_id"] == cap["sha256"][:16]
    # first SYN to last FIN: the client-side workload time (idle phase included) give or
    # take the connection setup the workload clock also counts
    assert abs(cap["duration_s"] - nats_truth["workload_seconds"]) < 1
    assert s["totals"]["packets"] == 244 and s["totals"]["captures"] == 1


def test_flows_by_protocol(nats_summary, nats_truth):
    assert nats_summary["flows"]["by_protocol"] == {"nats": len(nats_truth["connections"])}
    assert nats_summary["undecoded"]["unclaimed_flows"] == 0
    assert nats_summary["undecoded"]["gap_bytes"] == 0
    assert nats_summary["undecoded"]["undecoded_bytes"] == 0


def test_nats_ops_match_truth(nats_summary, nats_truth):
    sent: Counter = Counter()
    received: Counter = Counter()
    for conn in nats_truth["connections"].values():
        sent.update(conn["sent"]["ops"])
        received.update(conn["received"]["ops"])
    want_c2s = {k: v for k, v in sent.items() if v}
    want_s2c = {k: v for k, v in received.items() if v}
    ops = nats_summary["protocols"]["nats"]["ops"]
    assert ops["c2s"] == want_c2s
    assert ops["s2c"] == want_s2c


def test_nats_messages_and_bytes_match_truth(nats_summary, nats_truth):
    conns = nats_truth["connections"].values()
    n = nats_summary["protocols"]["nats"]
    assert n["published"] == sum(c["sent"]["messages"] for c in conns) == 46
    assert n["published_payload_bytes"] == sum(c["sent"]["payload_bytes"] for c in conns)
    assert n["delivered"] == sum(c["received"]["messages"] for c in conns) == 43
    assert n["delivered_payload_bytes"] == sum(c["received"]["payload_bytes"] for c in conns)
    # per-subject rows add up to the totals
    subjects = n["subjects"]
    assert subjects["distinct"] >= len(subjects["by_messages"])


def _expected_requests(t: dict) -> dict[str, int]:
    """Requests and their outcome from the truth.

    * ``publisher``: ``app.request`` wire requests (PUB/HPUB with a reply subject), of
      which ``request_replied`` got a reply and ``request_no_responders`` the server's
      503.  The publisher subscribes only to its request inbox (``sent.ops.SUB`` = 1,
      the mux), so each message it received is a reply or the 503.
    * ``jetstream``: every JetStream API call, ``js.publish`` and fetch is a request;
      the only publishes that are not are the ``msg.ack()`` acks (``app.js_ack``), so
      requests = sent messages - js_ack.  Every call returned (no problems recorded),
      so all were answered, and every message it received (API replies, PubAcks, the
      fetched messages) is a reply.
    * ``responder``: ``msg.respond`` publishes carry no reply subject: no requests.
    """
    pub, js = t["connections"]["publisher"], t["connections"]["jetstream"]
    js_requests = js["sent"]["messages"] - js["app"]["js_ack"]
    nr = pub["app"]["request_no_responders"]
    return {
        "requests": pub["app"]["request"] + js_requests,
        "answered": pub["app"]["request_replied"] + js_requests,
        "no_responders": nr,
        "unanswered": 0,
        "replies": (pub["received"]["messages"] - nr) + js["received"]["messages"],
    }


def test_request_reply_matches_truth(nats_summary, nats_truth):
    want = _expected_requests(nats_truth)
    assert want == {"requests": 13, "answered": 12, "no_responders": 1, "unanswered": 0,
                    "replies": 14}
    rr = nats_summary["request_reply"]["nats"]
    assert {k: rr[k] for k in want} == want
    assert rr["latency"]["count"] == want["answered"]
    assert 0 < rr["latency"]["min_ms"] <= rr["latency"]["p50_ms"] <= rr["latency"]["max_ms"]
    assert rr["unanswered_examples"] == []


def test_jetstream_ack_health_matches_truth(nats_summary, nats_truth):
    app = nats_truth["connections"]["jetstream"]["app"]
    js = nats_summary["acks"]["jetstream"]
    # every js.publish got a PubAck; every fetched message was acked by msg.ack()
    assert js["publishes"] == {"published": app["js_publish"], "acked": app["js_publish"],
                               "errors": 0, "unacked": 0}
    assert js["deliveries"] == {"delivered": app["js_ack"], "acked": app["js_ack"],
                                "unacked": 0}


def test_no_anomalies(nats_summary):
    assert nats_summary["anomalies"] == {"total": 0, "by_kind": []}


def test_dataset_gives_the_same_numbers(capsys, nats_dataset, nats_summary):
    code, s = summary_json(capsys, str(nats_dataset))
    assert code == 0
    assert s["source"]["kind"] == "dataset"
    for key in ("status", "totals", "flows", "protocols", "request_reply", "acks", "anomalies",
                "undecoded"):
        assert s[key] == nats_summary[key], key


def test_pulsar_topics_and_acks_match_truth(capsys):
    t = truth("pulsar-client")
    code, s = summary_json(capsys, str(SAMPLES / "pulsar-client.pcap"))
    assert code == 0
    sent: Counter = Counter()
    sent_bytes: Counter = Counter()
    for p in t["producers"].values():
        for topic, v in p["sent"].items():
            sent[topic] += v["messages"]
            sent_bytes[topic] += v["payload_bytes"]
    got: Counter = Counter()
    received: Counter = Counter()
    for c in t["consumers"].values():
        for topic, v in c["received"].items():
            received[topic] += v["messages"]
    p = s["protocols"]["pulsar"]
    assert p["messages_sent"] == sum(sent.values())
    assert p["messages_delivered"] == sum(received.values())
    rows = {r["name"]: r for r in p["topics"]["by_messages"]}
    assert p["topics"]["distinct"] == len(sent)
    for r in p["topics"]["by_messages"]:
        got[r["name"]] = r["published"]
        assert r["published_bytes"] == sent_bytes[r["name"]]
        assert r["delivered"] == received[r["name"]]
    assert all(got[k] == sent[k] for k in rows)
    # every send got a receipt, every delivered entry was acked (truth: acknowledge
    # calls for every consumer, no client warnings)
    assert not t["client_warnings"]
    acks = s["acks"]["pulsar"]
    assert acks["sends"]["errors"] == 0 and acks["sends"]["unacked"] == 0
    assert acks["deliveries"]["unacked"] == 0
    assert s["flows"]["by_protocol"] == {"pulsar": 2}


def test_stan_publish_acks_match_truth(capsys):
    t = truth("stan-basic")
    code, s = summary_json(capsys, str(SAMPLES / "stan-basic.pcap"))
    assert code == 0
    conns = t["connections"].values()
    pubs = sum(c["sent"].get("PubMsg", 0) for c in conns)
    puback = sum(c["received"].get("PubAck", 0) for c in conns)
    stan = s["acks"]["stan"]["publishes"]
    assert stan["published"] == pubs
    assert stan["acked"] + stan["errors"] == puback
    assert stan["unacked"] == 0


def test_multi_capture_dataset_adds_up(capsys, report_dataset, nats_summary):
    code, s = summary_json(capsys, str(report_dataset))
    assert code == 1  # the damaged capture's anomalies: degraded
    assert s["status"] == "degraded"
    assert s["totals"]["captures"] == 3
    assert s["totals"]["packets"] == sum(c["packets"] for c in s["captures"])
    kinds = {a["kind"]: a for a in s["anomalies"]["by_kind"]}
    assert kinds["nats.unknown_op"]["count"] == 3  # the three garbled control lines
    assert "unknown operation 'PUX'" in kinds["nats.unknown_op"]["example"]["detail"]
    assert s["undecoded"]["gap_bytes"] > 0  # the dropped segment


def test_text_summary(capsys):
    code = main(["summary", str(SAMPLES / "nats-basic.pcap")])
    out = capsys.readouterr().out
    assert code == 0
    assert "13 requests" in out and "12 answered" in out and "1 no responders" in out
    assert "no anomalies" in out


def test_felix_acks_and_undecryptable_quic_match_truth(capsys):
    """With the key log: the Felix frames of the keylogged connection, its publish acks
    as the truth's sender-side frames say, and the other connection reported as QUIC
    that stayed encrypted (no secrets for it in the key log)."""
    t = truth("felix-quic")
    code, s = summary_json(capsys, str(SAMPLES / "felix-quic.pcap"), "--keylog",
                           str(SAMPLES / t["keylog"]))
    asked, status = set(), {}
    for conn in t["connections"].values():
        for stream in conn.get("streams", []):
            for f in stream["frames"]:
                rid, fields = f["fields"].get("request_id"), f["fields"]
                if stream["side"] == "client" and fields.get("ack_mode"):
                    asked.add(rid)
                elif stream["side"] == "server" and fields.get("ack_status"):
                    status[rid] = fields["ack_status"]
    ok = sum(1 for r in asked if status.get(r) == "ok")
    err = sum(1 for r in asked if status.get(r) == "error")
    assert s["acks"]["felix"]["publishes"] == {
        "published": len(asked), "acked": ok, "errors": err, "unacked": len(asked) - ok - err}
    assert s["protocols"]["felix"]["rows"] == t["frames"]["decrypted"]
    quic = s["undecoded"]["quic"]
    keylogged = [c for c in t["connections"].values() if not c["keylogged"]]
    assert quic["connections"] == len(t["connections"])
    assert quic["connections_with_undecrypted_packets"] == len(keylogged)
    assert set(quic["undecrypted_by_reason"]) == {"no-keys"}
    kinds = {a["kind"] for a in s["anomalies"]["by_kind"]}
    assert "quic.undecryptable" in kinds
    assert code == 1

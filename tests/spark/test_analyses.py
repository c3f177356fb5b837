"""The analyses on the real nats-py + nats-server capture against its client-side truth
(samples/nats-basic.truth.json; per-subscription numbers come from the workload code,
samples/nats_workload.py ``basic_round``), as ``msgcap spark analyze`` writes them.

The rows are nats-basic's in the session's one ``msgcap spark analyze`` of every sample
(``spark_analyzed``, tests/analyses/datasets.py): every analysis keys its matches on
capture_id, so a capture's rows do not depend on the other captures of the dataset, and
a Spark run of the analyses costs seconds per analysis whatever the rows.  The dataset is
``msgcap dissect``'s, which ``spark ingest`` writes too (tests/spark/test_ingest.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dissectors.tables import PARTITION_KEY
from tests.analyses.datasets import SparkResults, capture_id_of, rows_of

pytestmark = pytest.mark.spark

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TRUTH = json.loads((SAMPLES / "nats-basic.truth.json").read_text())
CONNS = TRUTH["connections"]


class Analyzed:
    """nats-basic's rows in ``spark_analyzed`` (the analyses) and ``all_samples`` (its
    ``nats`` table)."""

    def __init__(self, dataset: Path, analyzed: Path) -> None:
        self.dataset, self.analyzed = dataset, analyzed
        self.capture_id = capture_id_of(dataset, "nats-basic")

    def rows(self, name: str) -> list[dict]:
        """What ``spark analyze`` wrote of analysis ``name`` about nats-basic."""
        rows = pq.read_table(self.analyzed / name).to_pylist()
        return [r for r in rows if r["capture_id"] == self.capture_id]

    def nats(self):
        """nats-basic's ``nats`` table (its partition of the dataset)."""
        return pq.read_table(self.dataset / "nats" / f"{PARTITION_KEY}={self.capture_id}")


@pytest.fixture(scope="module")
def dataset(all_samples: Path, spark_analyzed: Path) -> Analyzed:
    return Analyzed(all_samples, spark_analyzed)


def _by_name(rows, key="client_name"):
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def test_request_reply_matches_truth(dataset: Analyzed) -> None:
    rr = _by_name(dataset.rows("nats_request_reply"))
    pub = rr["publisher"]
    app = CONNS["publisher"]["app"]
    assert len(pub) == app["request"] == 5
    assert sum(r["answered"] for r in pub) == app["request_replied"] == 4
    assert sum(r["no_responders"] for r in pub) == app["request_no_responders"] == 1
    assert sum(r["replies"] for r in pub) == CONNS["responder"]["app"]["responded"] == 4
    assert sum(r["responder_pubs"] for r in pub) == CONNS["responder"]["app"]["responded"]
    # every message the publisher received is a reply or the no-responders status
    received = CONNS["publisher"]["received"]["messages"]
    assert sum(r["replies"] + r["no_responders"] for r in pub) == received
    assert {r["request_subject"] for r in pub if r["no_responders"]} == {"svc.nobody"}
    assert all(r["responder_flow_id"] is not None for r in pub if r["answered"])
    # latency = first reply's last byte - request's first byte, from the nats rows
    nats = dataset.nats()
    rid = nats.column("record_id").to_pylist()
    last = dict(zip(rid, nats.column("ts_last_ns").to_pylist(), strict=True))
    first = dict(zip(rid, nats.column("ts_first_ns").to_pylist(), strict=True))
    answered = [r for rows in rr.values() for r in rows if r["answered"]]
    assert len(answered) == 12  # + 8 JetStream API/publish/fetch requests, all answered
    for r in answered:
        assert r["latency_ns"] >= 0
        assert r["latency_ns"] == last[r["first_reply_record_id"]] - first[r["request_record_id"]]
        assert r["request_ts_ns"] == first[r["request_record_id"]]
    # the JetStream pull request is answered by the 3 fetched messages (by subscription)
    fetch = [r for r in rr["jetstream"] if "MSG.NEXT" in r["request_subject"]]
    assert [r["replies"] for r in fetch] == [CONNS["jetstream"]["app"]["js_ack"]]


def test_delivery_fanout_matches_truth(dataset: Analyzed) -> None:
    fan = dataset.rows("delivery_fanout")
    by = _by_name(fan)
    for name, conn in CONNS.items():
        assert len(by.get(name, [])) == conn["sent"]["messages"], name
    # what `spark analyze` wrote of the analyses delivery_fanout reads
    matches = [r for r in dataset.rows("deliveries")
               if r["protocol"] == "nats" and r["pub_record_id"] is not None]
    names = {r["flow_id"]: r["client_name"] for r in dataset.rows("nats_clients")}
    per_conn = Counter(names[r["delivery_flow_id"]] for r in matches)
    # every delivery to the subscribers is a message published in the capture
    for name in ("subscriber", "queue-a", "queue-b", "responder"):
        assert per_conn[name] == CONNS[name]["app"]["callback_msgs"], name
    assert per_conn["queue-a"] + per_conn["queue-b"] == 6  # work.jobs, one each
    assert per_conn["publisher"] == CONNS["publisher"]["app"]["request_replied"]
    assert per_conn["jetstream"] == CONNS["jetstream"]["app"]["js_ack"]  # fetched messages
    assert sum(r["deliveries"] for r in fan) == len(matches)
    # per subscription of the subscriber (workload: basic_round)
    nats = dataset.nats().to_pylist()
    sub_flow = next(f for f, n in names.items() if n == "subscriber")
    subject_of = {r["sid"]: r["subject"] for r in nats
                  if r["flow_id"] == sub_flow and r["op"] == "SUB"}
    per_sub = Counter(subject_of[r["sid"]] for r in matches
                      if r["delivery_flow_id"] == sub_flow)
    assert per_sub == {"demo.plain": 8, "demo.hdr": 3, "wc.*": 1, "wc.>": 2,
                       "demo.limited.0": 3, "demo.temp.0": 1}
    assert sum(per_sub.values()) == CONNS["subscriber"]["app"]["callback_msgs"]
    # published but never delivered: 2 beyond the auto-unsubscribe limit, 1 after UNSUB
    lost = Counter(r["subject"] for r in by["publisher"]
                   if not r["delivered"] and not r["subject"].startswith("svc."))
    assert lost == {"demo.limited.0": 2, "demo.temp.0": 1}
    lat = [r["first_latency_ns"] for r in fan if r["delivered"]]
    assert lat and all(x >= 0 for x in lat)
    assert all(r["last_latency_ns"] >= r["first_latency_ns"] for r in fan if r["delivered"])
    assert all(r["subscriptions"] >= r["connections"] >= 1 for r in fan if r["delivered"])
    wc = [r for r in fan if r["subject"] == "wc.a"]
    assert [(r["subscriptions"], r["connections"]) for r in wc] == [(2, 1)]


def test_jetstream_acks_and_sequences(dataset: Analyzed) -> None:
    js = CONNS["jetstream"]["app"]
    acks = [r for r in dataset.rows("publish_ack_latency") if r["protocol"] == "jetstream"]
    assert len(acks) == js["js_publish"] == 3
    assert all(r["acked"] and r["stream"] == "ORDERS" for r in acks)
    assert sorted(r["sequence"] for r in acks) == [1, 2, 3]
    assert all(r["latency_ns"] >= 0 for r in acks)
    seq = [r for r in dataset.rows("sequence_gaps") if r["protocol"] == "jetstream"]
    assert len(seq) == 1
    s = seq[0]
    assert (s["stream"], s["consumer"]) == ("ORDERS", "proc")
    assert s["messages"] == js["js_ack"] and (s["first_seq"], s["last_seq"]) == (1, 3)
    assert s["gaps"] == s["missing"] == s["redeliveries"] == 0


def test_rates_talkers_errors(dataset: Analyzed) -> None:
    rates = dataset.rows("rates")
    assert sum(r["published"] for r in rates) == sum(c["sent"]["messages"]
                                                     for c in CONNS.values())
    assert sum(r["delivered"] for r in rates) == sum(c["received"]["messages"]
                                                     for c in CONNS.values())
    assert all(r["window_end_ns"] - r["window_start_ns"] == 1_000_000_000 for r in rates)
    talkers = _by_name(dataset.rows("top_talkers"))
    for name, conn in CONNS.items():
        (row,) = talkers[name]
        assert row["published"] == conn["sent"]["messages"]
        assert row["delivered"] == conn["received"]["messages"]
        assert row["stream_bytes_c2s"] == conn["sent"]["stream_bytes"]
    errors = {(r["source"], r["kind"]): r["count"] for r in dataset.rows("error_counts")}
    assert errors[("nats status", "503")] == 1
    assert errors[("flow close", "closed")] == len(CONNS)
    assert not [k for k in errors if k[0] in ("anomaly", "nats -ERR")]


def test_stan_liftbridge_pulsar_acks_and_sequences(spark_results: SparkResults,
                                                   all_samples: Path) -> None:
    """The tables other dissectors write, against their samples' sender-side truth (their
    rows in the session's Spark run of the analyses)."""
    ids = {capture_id_of(all_samples, n) for n in ("stan-basic", "liftbridge-basic",
                                                   "pulsar-client")}
    acks = _by_name(rows_of(spark_results, "publish_ack_latency", ids), "protocol")
    stan = json.loads((SAMPLES / "stan-basic.truth.json").read_text())
    published = sum(c["data"].get("sent.PubMsg", {}).get("messages", 0)
                    for c in stan["connections"].values())
    assert len(acks["stan"]) == published
    assert all(r["ack_record_id"] is not None for r in acks["stan"])
    assert acks["pulsar"] and all(r["acked"] for r in acks["pulsar"])
    assert sum(r["acked"] for r in acks["liftbridge"]) > 0
    for rows in acks.values():
        assert all(r["latency_ns"] >= 0 for r in rows if r["ack_record_id"] is not None)
    seq = rows_of(spark_results, "sequence_gaps", ids)
    per_sub = sorted(r["messages"] for r in seq if r["protocol"] == "stan")
    assert per_sub == sorted(stan["deliveries"].values())
    assert any(r["protocol"] == "pulsar" for r in seq)

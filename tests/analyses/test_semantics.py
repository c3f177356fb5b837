"""What the sequence analysis reports (issue 20, part 2), on DuckDB; test_engines.py shows
Spark gives the same rows."""

from __future__ import annotations

from pathlib import Path

import dpkt

from analyzer.analyses import duck
from tests.analyses.datasets import SAMPLES, dissect_into


def _seq(ds: Path, protocol: str) -> list[dict]:
    rows = duck.run(ds, ["sequence_gaps"])["sequence_gaps"].to_pylist()
    return sorted((r for r in rows if r["protocol"] == protocol), key=lambda r: r["stream"])


def test_pulsar_client_sample_has_no_gap(tmp_path) -> None:
    """The emulator behind the sample reuses ledger 7 for every topic: entry ids of one
    topic partition jump over the other topics' entries, which is not loss."""
    seqs = _seq(dissect_into(tmp_path / "ds", ["pulsar-client"]), "pulsar")
    assert len(seqs) == 11
    assert [(r["gaps"], r["missing"], r["redeliveries"]) for r in seqs] == [(0, 0, 0)] * 11
    parted = [r for r in seqs if "parted-partition" in r["stream"]]
    assert [(r["first_seq"], r["last_seq"], r["messages"]) for r in parted] == [
        (22, 28, 3), (23, 29, 3), (21, 27, 3)]
    # Shared / Key_Shared: judged per subscription (the consumers together), no flow
    shared = {r["stream"].split("/")[-1]: r for r in seqs if r["flow_id"] is None}
    assert {k: (v["consumer"], v["messages"]) for k, v in shared.items()} == {
        "lz4-batch ledger 7": ("s-shared", 2),
        "snappy ledger 7": ("s-shared", 3),
        "zstd-batch ledger 7": ("s-key-shared", 2),
    }


def test_pulsar_capture_with_a_lost_message_reports_the_gap(tmp_path) -> None:
    """Crafted from the sample: the one packet carrying entry 17 of topic `snappy`
    (subscription s-shared) removed.  The broker's SEND_RECEIPT still names entry 17 on
    that topic, so the hole is not excused: one gap, one missing entry."""
    ds = dissect_into(tmp_path / "ds", ["pulsar-client"])
    con = duck.connect(ds)
    ((frame, first, last),) = con.sql(
        "SELECT frame_first, frame_first = frame_last, (SELECT count(*) FROM pulsar_commands o "
        "WHERE o.frame_first <= m.frame_first AND o.frame_last >= m.frame_first) "
        "FROM pulsar_commands m WHERE command = 'MESSAGE' AND entry_id = 17").fetchall()
    assert first and last == 1  # the packet carries that message and nothing else
    crafted = tmp_path / "pulsar-lost-entry.pcap"
    with open(SAMPLES / "pulsar-client.pcap", "rb") as f, open(crafted, "wb") as g:
        r = dpkt.pcap.Reader(f)
        w = dpkt.pcap.Writer(g, linktype=r.datalink())
        for i, (ts, buf) in enumerate(r, start=1):
            if i != frame:
                w.writepkt(buf, ts)
    from analyzer.pipeline import Options, dissect_capture

    dissect_capture(crafted, tmp_path / "crafted", Options())
    seqs = _seq(tmp_path / "crafted", "pulsar")
    bad = [r for r in seqs if r["gaps"]]
    assert [(r["stream"].split("/")[-1], r["consumer"], r["first_seq"], r["last_seq"],
             r["messages"], r["gaps"], r["missing"]) for r in bad] == [
        ("snappy ledger 7", "s-shared", 16, 18, 2, 1, 1)]
    assert sum(r["gaps"] for r in seqs) == 1


def test_stan_and_liftbridge_sequences(tmp_path) -> None:
    ds = dissect_into(tmp_path / "ds", ["stan-basic", "liftbridge-basic"])
    stan = _seq(ds, "stan")
    # per subscription: the redelivered message counted once as a redelivery
    assert sorted((r["stream"], r["messages"], r["distinct_seqs"], r["redeliveries"])
                  for r in stan) == [("events", 2, 2, 0), ("events", 2, 2, 0),
                                     ("orders", 7, 7, 0), ("orders", 8, 7, 1)]
    lb = _seq(ds, "liftbridge")
    assert [(r["stream"], r["first_seq"], r["last_seq"], r["messages"], r["gaps"])
            for r in lb] == [("orders partition 0", 0, 5, 6, 0), ("orders partition 1", 0, 1, 2, 0)]


def test_cluster_trace_nats_cluster_sample(tmp_path) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-cluster"])
    rows = duck.run(ds, ["cluster_trace"])["cluster_trace"].to_pylist()
    by_pub: dict[int, list[dict]] = {}
    for r in rows:
        by_pub.setdefault(r["pub_record_id"], []).append(r)
    assert len(by_pub) == 10 and len(rows) == 36
    for hops in by_pub.values():
        hops.sort(key=lambda r: r["hop_index"])
        assert [h["hop_index"] for h in hops] == list(range(1, len(hops) + 1))
        assert [h["hop_ns"] for h in hops] == sorted(h["hop_ns"] for h in hops)
        kinds = [h["hop"] for h in hops]
        assert kinds[0] != "client delivery" and "client delivery" in kinds
        assert all(h["hop_ns"] >= 0 for h in hops)


def test_slow_consumers_and_lag(tmp_path) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic", "stan-basic", "pulsar-client"])
    res = duck.run(ds, ["consumer_lag", "slow_consumers"])
    lag = res["consumer_lag"].to_pylist()
    assert sorted((r["stream_seq"], r["consumer_seq"], r["pending"]) for r in lag
                  if r["protocol"] == "jetstream") == [(1, 1, 2), (2, 2, 1), (3, 3, 0)]
    # STAN, per subscription in capture order: (sequence, pending, delivered count).  The
    # subscriber replaying `orders` from the start lags the live one by 5..0 messages; its
    # redelivered sequence 2 comes when the channel is at 7.
    stan: dict[tuple, list] = {}
    for r in sorted((r for r in lag if r["protocol"] == "stan"),
                    key=lambda r: (r["ts_ns"], r["delivery_record_id"])):
        stan.setdefault((r["stream"], r["consumer"]), []).append(
            (r["stream_seq"], r["pending"], r["delivered_count"]))
    assert sorted(stan.values()) == [
        [(1, 0, 1), (2, 0, 1), (3, 0, 1), (4, 0, 1), (5, 0, 1), (6, 0, 1), (7, 0, 1)],
        [(1, 5, 1), (2, 4, 1), (3, 3, 1), (4, 2, 1), (5, 1, 1), (6, 0, 1), (7, 0, 1),
         (2, 5, 2)],
        [(2, 3, 1), (3, 2, 1)],
        [(4, 0, 1), (5, 0, 1)],
    ]
    # Pulsar: the emulator delivers each entry right after its receipt, so no backlog
    pulsar = [r for r in lag if r["protocol"] == "pulsar"]
    assert len(pulsar) == 34
    assert {(r["pending"], r["delivered_count"]) for r in pulsar} == {(0, 1)}
    slow = {(r["protocol"], r["client_name"], r["consumer"]):
            (r["delivered"], r["acked"], r["unacked"], r["max_unacked"])
            for r in res["slow_consumers"].to_pylist() if r["protocol"] != "pulsar"}
    assert slow == {
        ("jetstream", "jetstream", "ORDERS/proc"): (3, 3, 0, 3),
        ("stan", "client-1", "orders"): (8, 8, 0, 6),
        ("stan", "client-1", "events"): (2, 2, 0, 1),
        ("stan", "client-2", "events"): (2, 2, 0, 2),
        ("stan", "client-3", "orders"): (7, 7, 0, 1),
    }
    # Pulsar: every entry acked (truth: acknowledge for every message), the cumulative
    # ack of entry 7 covering entry 6 too; individual acks batched, so several wait
    pul = {r["consumer"].removeprefix("persistent://public/default/"):
           (r["delivered"], r["acked"], r["max_unacked"])
           for r in res["slow_consumers"].to_pylist() if r["protocol"] == "pulsar"}
    assert pul == {
        "chunked s-exclusive": (4, 4, 4), "lz4-batch s-shared": (2, 2, 2),
        "parted-partition-0 s-exclusive": (3, 3, 3),
        "parted-partition-1 s-exclusive": (3, 3, 3),
        "parted-partition-2 s-exclusive": (3, 3, 3), "plain s-exclusive": (6, 6, 6),
        "plain-batch s-cumulative": (2, 2, 2), "snappy s-shared": (3, 3, 3),
        "snappy-batch s-exclusive": (2, 2, 2), "zlib s-failover": (4, 4, 4),
        "zstd-batch s-key-shared": (2, 2, 2),
    }

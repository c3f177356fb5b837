"""`summary`'s ack health is the analyses' rows counted, not a third implementation
(issue 20): it used to pair acks itself and disagreed (STAN deliveries 11 where the
subscriptions received 19: copies of one sequence to different subscribers were counted
once; Liftbridge publishes counted by correlation id only).  On DuckDB; test_engines.py
shows Spark gives the same rows."""

from __future__ import annotations

import json
from collections import defaultdict

from analyzer.analyses import duck
from analyzer.cli import main


def _from_rows(pubs: list[dict], slow: list[dict]) -> dict[str, dict]:
    """The counts, taken straight from the two analyses' rows."""
    out: dict[str, dict] = defaultdict(dict)
    for proto in {r["protocol"] for r in pubs}:
        rows = [r for r in pubs if r["protocol"] == proto]
        acked = sum(r["acked"] for r in rows)
        errors = sum(not r["acked"] and r["ack_record_id"] is not None for r in rows)
        if proto == "pulsar":
            out[proto]["sends"] = {"sent": len(rows), "receipts": acked, "errors": errors,
                                   "unacked": len(rows) - acked - errors}
        else:
            out[proto]["publishes"] = {"published": len(rows), "acked": acked,
                                       "errors": errors, "unacked": len(rows) - acked - errors}
    for proto in {r["protocol"] for r in slow}:
        rows = [r for r in slow if r["protocol"] == proto]
        d, a = sum(r["delivered"] for r in rows), sum(r["acked"] for r in rows)
        out[proto]["deliveries"] = {"delivered": d, "acked": a, "unacked": d - a}
    return dict(out)


def test_summary_ack_health_is_the_analyses(capsys, five_samples) -> None:
    assert main(["summary", str(five_samples), "--json"]) == 0
    acks = json.loads(capsys.readouterr().out)["acks"]
    res = duck.run(five_samples, ["publish_ack_latency", "slow_consumers"])
    want = _from_rows(res["publish_ack_latency"].to_pylist(),
                      res["slow_consumers"].to_pylist())
    for v in acks.values():
        v.get("sends", {}).pop("latency", None)
    assert acks == want
    assert list(acks) == ["jetstream", "pulsar", "stan", "liftbridge"]
    assert want == {
        "jetstream": {"publishes": {"published": 3, "acked": 3, "errors": 0, "unacked": 0},
                      "deliveries": {"delivered": 3, "acked": 3, "unacked": 0}},
        # one SEND per chunk: 34 SEND commands, each with its receipt
        "pulsar": {"sends": {"sent": 34, "receipts": 34, "errors": 0, "unacked": 0},
                   "deliveries": {"delivered": 34, "acked": 34, "unacked": 0}},
        "stan": {"publishes": {"published": 16, "acked": 15, "errors": 1, "unacked": 0},
                 "deliveries": {"delivered": 19, "acked": 19, "unacked": 0}},
        "liftbridge": {"publishes": {"published": 5, "acked": 5, "errors": 0,
                                     "unacked": 0}},
    }

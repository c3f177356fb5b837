"""`summary`, `report`, DuckDB and Spark give the same numbers for the same question
(issue 20: 206 vs 198 delivered, request→reply p50 0.338 vs 0.323 ms).

Spark's rows are those of the captures in question from the session's one Spark run over
all the samples (``spark_results``; its capture ids are the same, as a capture's id is
its content's): a capture's rows do not depend on the other captures of a dataset."""

from __future__ import annotations

import json

import pytest

from analyzer.analyses import duck
from analyzer.cli import main
from tests.analyses.datasets import capture_ids, dissect_into, rows_of

pytestmark = pytest.mark.spark


def _summary(capsys, ds) -> dict:
    assert main(["summary", str(ds), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_five_samples_deliveries_agree(spark_results, capsys, five_samples) -> None:
    s = _summary(capsys, five_samples)
    d = duck.run(five_samples, ["deliveries", "delivery_fanout"])
    ids = capture_ids(five_samples)
    assert len(ids) == 5
    fan_duck = sum(d["delivery_fanout"].column("deliveries").to_pylist())
    fan_spark = sum(r["deliveries"] for r in rows_of(spark_results, "delivery_fanout", ids))
    f = s["fanout"]["nats"]
    # 206 MSG/HMSG delivered on the wire, 198 of them matched to a publish in the captures
    assert s["protocols"]["nats"]["delivered"] == f["deliveries"] == 206
    assert f["matched_to_publish"] == fan_duck == fan_spark == 198
    nats_dl = [r for r in d["deliveries"].to_pylist() if r["protocol"] == "nats"]
    assert len(nats_dl) == 206
    assert sum(r["pub_record_id"] is None for r in nats_dl) == 206 - 198
    assert f["never_delivered"] == sum(
        not r["delivered"] for r in d["delivery_fanout"].to_pylist()) == 13


def test_request_reply_p50_same_in_summary_report_and_engines(spark_results, capsys,
                                                             tmp_path) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    s = _summary(capsys, ds)
    lat = s["request_reply"]["nats"]["latency"]

    def pick(rows):
        (row,) = [r for r in rows if r["kind"] == "request_reply" and r["per"] == "all"]
        return row

    dp = pick(duck.run(ds, ["latency_percentiles"])["latency_percentiles"].to_pylist())
    sp = pick(rows_of(spark_results, "latency_percentiles", capture_ids(ds)))
    assert dp == sp
    assert (dp["count"], dp["p50_ns"], dp["p90_ns"], dp["max_ns"]) == (12, 323000, 1256000,
                                                                         2229000)
    assert (lat["count"], lat["p50_ms"], lat["p90_ms"], lat["max_ms"]) == (12, 0.323, 1.256,
                                                                           2.229)
    out = tmp_path / "r.html"
    assert main(["report", str(ds), "-o", str(out), "-q"]) == 0
    html = out.read_text("utf-8")
    assert "0.323 ms</div>" in html  # the overview card
    # the latency chart's legend line (plotly JSON escapes the arrow)
    assert "request \\u2192 reply: n=12, p50 0.323 ms, p90 1.256 ms, max 2.229 ms" in html

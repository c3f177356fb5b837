"""`msgcap analyze` and `msgcap query` (DuckDB): outputs, formats, user mistakes, and no
JVM needed."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from analyzer.analyses import ANALYSES
from analyzer.cli import main
from tests.analyses.datasets import dissect_into

REPO = Path(__file__).resolve().parents[2]


def test_analyze_writes_every_analysis(tmp_path, capsys) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    assert main(["analyze", str(ds), "-o", str(tmp_path / "an")]) == 0
    out = capsys.readouterr().out
    for name in ANALYSES:
        assert f"{name}: " in out
        assert (tmp_path / "an" / name / "part-0.parquet").is_file()
    rr = pq.read_table(tmp_path / "an" / "nats_request_reply").to_pylist()
    assert len(rr) == 13 and sum(r["answered"] for r in rr) == 12  # 5 publisher + 8 JetStream
    fan = pq.read_table(tmp_path / "an" / "delivery_fanout").to_pylist()
    assert sum(r["deliveries"] for r in fan) == 35


def test_analyze_delivery_window_is_the_parameter(tmp_path, capsys) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    # 0.0001 s = 100 µs: only the deliveries that came within 100 µs of their publish
    assert main(["analyze", str(ds), "-o", str(tmp_path / "an"), "--only", "deliveries",
                 "--delivery-window", "0.0001"]) == 0
    dl = [r for r in pq.read_table(tmp_path / "an" / "deliveries").to_pylist()
          if r["pub_record_id"] is not None]
    assert dl and all(r["delivery_ts_ns"] - r["pub_ts_ns"] <= 100_000 for r in dl)
    assert len(dl) < 35


def test_query_formats(tmp_path, capsys) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    sql = "SELECT op, count(*) AS n FROM nats WHERE direction = 'c2s' GROUP BY op ORDER BY op"
    assert main(["query", str(ds), sql, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["op"]: r["n"] for r in rows} == {"CONNECT": 6, "HPUB": 6, "PING": 30, "PONG": 12,
                                               "PUB": 40, "SUB": 12, "UNSUB": 2}
    assert main(["query", str(ds), sql, "--csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == ["op", "n"] and ["PUB", "40"] in table
    assert main(["query", str(ds), "--with-analyses", "--json",
                 "SELECT count(*) AS n FROM unanswered_requests WHERE no_responders"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 1}


def test_query_mistakes_exit_2(tmp_path, capsys) -> None:
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    assert main(["query", str(ds), "SELECT nope FROM nats"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the query failed") and "\nfix: " in err
    assert main(["analyze", str(tmp_path / "missing"), "-o", str(tmp_path / "o")]) == 2
    assert "error: " in capsys.readouterr().err


def test_analyze_runs_without_java(tmp_path) -> None:
    """No java on PATH, no JAVA_HOME, and pyspark never imported."""
    ds = dissect_into(tmp_path / "ds", ["nats-basic"])
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = str(Path(sys.executable).parent) + ":/usr/bin/false-dir-without-java"
    code = ("import sys; from analyzer.cli import main; rc = main(['analyze', sys.argv[1], "
            "'-o', sys.argv[2]]); assert 'pyspark' not in sys.modules; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, str(ds), str(tmp_path / "an")], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "sequence_gaps: 1 rows" in p.stdout

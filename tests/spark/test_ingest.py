"""``spark ingest`` writes the dataset ``msgcap dissect`` writes: same tables, rows, ids,
values and manifest, for many captures at once (one task per file) and for one capture
split into byte ranges (flows spanning the cuts, fragments, idle expiry, snaplen cuts)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.cli import main
from analyzer.pipeline import Options, dissect_capture
from analyzer.spark.ingest import ingest
from reassembly.limits import SECOND_NS, Limits
from tests.spark.helpers import assert_same_dataset, read_tables
from tests.spark.synth import write_nats_capture

pytestmark = pytest.mark.spark

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHARED_CAPTURES = [
    "arkime/socks5-http-302-frag.pcap",  # TCP carried in IPv4 fragments
    "arkime/tcpseq_synthetic.pcap",  # 6 flows, garbage frames, out-of-order, wraps
    "spicy-nats/nats-storage.pcap",  # NATS over IPv6 and IPv4: two address pairs
    "ntop-nDPI/dns_fragmented.pcap",  # 21 UDP flows, fragmented datagrams
    "ntop-nDPI/badpackets.pcap",  # broken fragments: only anomaly rows
    "zeek/pcapng-multi-interface.pcapng",
]


def _opts(**kw) -> Options:
    return Options(strict=True, validate=True, **kw)


def _local(paths, out: Path, options: Options) -> Path:
    for p in paths:
        dissect_capture(p, out, options)
    return out


def _captures(shared: Path) -> list[Path]:
    paths = [shared / "captures" / c for c in SHARED_CAPTURES]
    assert all(p.exists() for p in paths), paths
    return [SAMPLES / "nats-basic.pcap", *paths]


def test_many_files_one_task_each(spark, shared: Path, tmp_path: Path) -> None:
    paths = _captures(shared)
    expected = _local(paths, tmp_path / "local", _opts())
    report = ingest(spark, paths, tmp_path / "spark", options=_opts(), split_bytes=1 << 30)
    assert set(report.how.values()) == {"file"}
    assert len(report.results) == len(paths)
    rows = assert_same_dataset(expected, tmp_path / "spark")
    assert rows["nats"] > 200 and rows["flows"] > 30


def _spanning_flows(out: Path, plans_frames: list[int]) -> int:
    """Flows whose first and last frames fall in different ranges."""
    bounds = []
    total = 0
    for n in plans_frames:
        total += n
        bounds.append(total)

    def rng(frame: int) -> int:
        return next(i for i, b in enumerate(bounds) if frame <= b)

    flows = read_tables(out)["flows"].to_pylist()
    return sum(1 for f in flows if rng(f["frame_first"]) != rng(f["frame_last"]))


def _range_frames(path: Path, split: int) -> list[int]:
    from analyzer.spark.split import plan_ranges, probe_layout, scan_range, verify_chain

    layout = probe_layout(str(path), path.stat().st_size)
    scans = [scan_range(layout, i, a, b) for i, (a, b) in enumerate(plan_ranges(layout, split))]
    plans, why = verify_chain(layout, scans, lambda i, a, b, f: scan_range(layout, i, a, b, f))
    assert why is None
    return [p.frames for p in plans]


def test_split_capture_equals_local(spark, shared: Path, tmp_path: Path) -> None:
    """Each capture cut into at least 4 ranges.  (nats-basic, cut the same way, is one of
    test_every_sample_equals_local_split_and_unsplit's samples, where its flows spanning
    a cut are counted: not a second identical job here.)"""
    for i, path in enumerate(_captures(shared)[1:]):  # [0]: nats-basic
        split = max(path.stat().st_size // 5, 64)
        local = _local([path], tmp_path / f"l{i}", _opts())
        report = ingest(spark, [path], tmp_path / f"s{i}", options=_opts(), split_bytes=split)
        how = report.how[str(path)]
        assert how.startswith("split:") and int(how.split(":")[1]) >= 4, (path, how)
        assert_same_dataset(local, tmp_path / f"s{i}")


def test_bytes_after_both_fins_split_as_local(spark, tmp_path: Path) -> None:
    """A flow whose decoding ended at its clean close (``StreamDone``), then bytes the
    client sent after both FINs: a split task ends it there as ``msgcap dissect`` does,
    so the bytes are counted undecoded and reported the same way."""
    from tests.reassembly.test_stream_done import write_bytes_after_both_fins

    path = tmp_path / "after.pcap"
    write_bytes_after_both_fins(path)
    local = _local([path], tmp_path / "local", _opts())
    report = ingest(spark, [path], tmp_path / "spark", options=_opts(),
                    split_bytes=max(path.stat().st_size // 3, 64))
    assert report.how[str(path)].startswith("split:"), report.how
    assert_same_dataset(local, tmp_path / "spark")
    kinds = read_tables(local)["anomalies"].column("kind").to_pylist()
    assert kinds.count("pipeline.data_after_close") == 1, kinds


def test_split_synthetic_multi_host(spark, tmp_path: Path) -> None:
    """Many hosts (many keys, several dissection tasks), idle expiry driven by the
    global sweep clock, snaplen cuts (one summary row), lost fragments, and the merging
    of IP pairs that share a server endpoint."""
    path = tmp_path / "synth.pcap"
    write_nats_capture(path, clients=9, rounds=60, idle_gap_s=12, snap_every=53, frag_every=7)
    # idle TCP flows sleep, then close after tcp_sleep_max_ns: both on the global clock
    limits = Limits(tcp_idle_timeout_ns=5 * SECOND_NS, tcp_sleep_max_ns=8 * SECOND_NS,
                    fragment_timeout_ns=3 * SECOND_NS)
    local = _local([path], tmp_path / "local", _opts(limits=limits))
    split = path.stat().st_size // 6
    for merge in (None, True):
        out = tmp_path / f"spark-{merge}"
        report = ingest(spark, [path], out, options=_opts(limits=limits), split_bytes=split,
                        partitions=3, merge_scopes=merge)
        assert report.how[str(path)] == "split:6"
        rows = assert_same_dataset(local, out)
        # one server, nine clients: by connection the flows spread over the tasks (each
        # writes its own part file); merged by server endpoint they all land in one
        (nats_dir,) = (out / "nats").iterdir()
        parts = sorted(p.name for p in nats_dir.glob("part-*.parquet")
                       if pq.read_metadata(p).num_rows)
        assert (len(parts) >= 2) if merge is None else (len(parts) == 1), (merge, parts)
    tables = read_tables(local)
    kinds = tables["anomalies"].column("kind").to_pylist()
    assert "ip.frag_incomplete" in kinds and kinds.count("ip.truncated") == 2
    reasons = set(tables["flows"].column("close_reason").to_pylist())
    # the silent clients' flows fall asleep in the idle sweep and wake when their
    # sequence numbers continue (issue 18 bug 3) instead of being split; whether any flow
    # is still asleep ("idle-timeout") at the end depends on the synthetic's tail
    assert {"end-of-capture", "closed"} <= reasons
    assert rows["flows"] > 20
    assert _spanning_flows(local, _range_frames(path, split)) >= 9


def test_cli_split_and_overwrite(spark, tmp_path: Path) -> None:
    path = SAMPLES / "nats-basic.pcap"
    out = tmp_path / "out"
    argv = ["spark", "ingest", str(path), "-o", str(out), "--split-bytes", "8000"]
    assert main(argv) == 0  # clean
    assert main(argv) == 2  # the capture is already there
    with pytest.raises(FileExistsError):
        ingest(spark, [path], out, options=_opts(), split_bytes=8000)
    ingest(spark, [path], out, options=_opts(overwrite=True), split_bytes=8000)
    assert not [p for p in out.iterdir() if p.name.startswith(".msgcap-spark")]
    local = _local([path], tmp_path / "local", _opts())
    assert_same_dataset(local, out)


SAMPLE_CAPTURES = sorted(p.name for p in SAMPLES.glob("*.pcap"))


def _sample_options(name: str) -> Options:
    keys = (SAMPLES / name).with_suffix(".keys")
    return _opts(keylog=str(keys)) if keys.exists() else _opts()


def test_every_sample_equals_local_split_and_unsplit(spark, tmp_path: Path) -> None:
    """Every capture in samples/ (with its key log): all in one job, one task per file; and
    each split into five ranges dissected by connection.  felix-quic's roles come from the
    QUIC Initial in the split run too (the task's QUIC layer swaps roles like the local
    engine's)."""
    assert len(SAMPLE_CAPTURES) >= 8, SAMPLE_CAPTURES
    for name in SAMPLE_CAPTURES:
        _local([SAMPLES / name], tmp_path / "local" / name, _sample_options(name))
    # unsplit, one job for all of them (a key log applies to the captures that need it)
    whole, every = tmp_path / "whole", [SAMPLES / n for n in SAMPLE_CAPTURES]
    one_keylog = _opts(keylog=str(SAMPLES / "felix-quic.keys"))
    report = ingest(spark, every, whole, options=one_keylog, split_bytes=1 << 30)
    assert set(report.how.values()) == {"file"}
    assert_same_dataset(_local(every, tmp_path / "local-all", one_keylog), whole)
    for name in SAMPLE_CAPTURES:
        path = SAMPLES / name
        out = tmp_path / "split" / name
        split = path.stat().st_size // 5
        report = ingest(spark, [path], out, options=_sample_options(name), split_bytes=split)
        how = report.how[str(path)]  # 4 or 5 ranges: a range may hold no record start
        assert how.startswith(("split:4", "split:5")), (name, how)
        assert_same_dataset(tmp_path / "local" / name, out)
        if name == "nats-basic.pcap":  # not vacuous: flows span the cuts
            assert _spanning_flows(tmp_path / "local" / name, _range_frames(path, split)) == 6
        if name == "felix-quic.pcap":
            flows = read_tables(out)["flows"]
            assert set(flows.column("role_source").to_pylist()) == {"quic-initial"}
    _assert_plain_spark_reads_every_table(spark, whole)


def _assert_plain_spark_reads_every_table(spark, out: Path) -> None:
    """``spark.read.parquet(OUT + "/<table>")`` with no schema and no setting: every table
    of the dataset, timestamps as ``TimestampType`` agreeing with the exact ``_ns`` longs.

    One aggregation per table counts its rows and the rows breaking each check (a job per
    count and per check was ~90 jobs of a fraction of a second each)."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows = json.loads((out / "manifest.json").read_text())["rows"]
    assert sum(1 for n in rows.values() if n) >= 12, rows  # tables with rows: most
    for table, count in rows.items():
        df = spark.read.parquet(str(out) + "/" + table)
        ts = [f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)]
        assert {"ts_first", "ts_last"} <= set(ts) or table == "anomalies", (table, ts)
        checks = [F.count(F.lit(1)).alias("rows")]
        for c in ts:
            assert isinstance(df.schema[f"{c}_ns"].dataType, T.LongType), (table, c)
            # integer division (a double would round 19-digit nanoseconds); times > 0
            checks.append(F.count_if(F.unix_micros(F.col(c)) != F.expr(f"`{c}_ns` div 1000"))
                          .alias(f"unequal {c}"))
            checks.append(F.count_if(F.col(c).isNull() != F.col(f"{c}_ns").isNull())
                          .alias(f"null once {c}"))
        got = df.agg(*checks).first().asDict()
        assert got.pop("rows") == count, table
        assert got == dict.fromkeys(got, 0), (table, got)


def test_cross_flow_state_found_late_is_dissected_again(spark, tmp_path: Path) -> None:
    """Without the first-pass hints (``merge_scopes=False``) STAN's connections are spread
    over tasks; the tasks report that STAN bindings were used, so the driver dissects
    again with that server's connections together: still the local rows."""
    path = SAMPLES / "stan-basic.pcap"
    local = _local([path], tmp_path / "local", _opts())
    out = tmp_path / "spark"
    report = ingest(spark, [path], out, options=_opts(), split_bytes=path.stat().st_size // 5,
                    partitions=4, merge_scopes=False)
    assert "dissected again with 1 endpoint(s) merged" in report.how[str(path)]
    assert_same_dataset(local, out)

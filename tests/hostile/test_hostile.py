"""The hostile-capture suite (issue 9 §2-3): every case runs through the real pipeline
(``dissect_capture``) in a child process that measures its own peak RSS, and asserts the
specific anomaly rows, a memory bound (peak above a trivial run's), byte accounting in
``flows`` and, where the input can be scaled, that time grows about linearly.

The captures come from ``samples/hostile/generate.py`` and are written to a temporary
directory.  Memory bounds are over ``baseline_mb``, the peak of a child that dissects a
3-packet capture (imports, Arrow and Parquet: ≈140 MB here).  What dominates a hostile
case's own cost is documented in docs/robustness.md: the sink's row batches
(``rows_per_batch`` = 65,536 rows per table), the reorder buffer (4 MiB per direction) and
the decompression cap (64 MiB).

The full-size SYN flood (1 M half-open flows through the pipeline, ~6 min here) is opt-in:
``MSGCAP_HOSTILE_FULL=1``; the default run uses 50,000 flows and a proportionally smaller
flow cap, and tests/reassembly/test_bounded_memory.py keeps the 1 M flows at the
reassembly level.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from samples.hostile import generate as g
from tests.hostile.conftest import dissect_counted, dissect_in_child, dissect_one

MSGCAP = Path(sys.executable).with_name("msgcap")


def _clean_accounting(r: dict) -> None:
    """The run completed (hostile input is never a failed run) and, per flow direction,
    decoded + undecoded + gap bytes = the stream length (DESIGN §7)."""
    assert r["status"] in ("clean", "degraded"), r["status"]
    assert r["accounting_errors"] == [], r["accounting_errors"]


def _flow(r: dict, client_port: int) -> dict:
    (f,) = [f for f in r["flows"] if f["client_port"] == client_port]
    return f


def _rows(r: dict, kind: str) -> list[dict]:
    return r["anomaly_rows"].get(kind, [])


def _pattern(r: dict, kind: str, needle: str) -> int:
    return sum(n for p, n in r["anomaly_patterns"].items()
               if p.startswith(kind + ":") and needle in p)


def _scaled(large: Path, small: Path, tmp: Path, factor: float) -> tuple[dict, dict]:
    """Dissect ``small`` and ``large`` (``factor`` times ``small``) and check that the work
    grows about linearly: the function calls each dissection made (``dissect_counted``)
    may grow by at most ``1.25 * factor``, where a quadratic Python step would reach
    ``factor``².  Calls, not CPU time: a loaded machine can flip a CPU-time ratio, not a
    count.  (A quadratic byte scan inside one C call would not show in the count; the
    framer's resumed LF search has its own test in tests/dissectors/test_framing.py.)
    Returns the large and small reports."""
    s, r = dissect_counted([(small, tmp / "small", {}), (large, tmp / "big", {})])
    assert r["calls"] < 1.25 * factor * s["calls"], (s["calls"], r["calls"])
    return r, s


# --------------------------------------------------------------------------------- TCP


def test_half_open_flows_stay_under_the_flow_cap(tmp_path, baseline_mb):
    full = os.environ.get("MSGCAP_HOSTILE_FULL") == "1"
    flows, cap = (1_000_000, 10_000) if full else (50_000, 500)
    path = tmp_path / "half_open.pcap"
    g.write_half_open_flows(path, flows)
    r = dissect_one(path, tmp_path, limits={"max_flows": cap}, max_flow_rows=10)
    assert r["anomalies"] == {"limit.flow_table": flows - cap}
    assert r["flow_count"] == flows  # every flow reported, none lost
    assert r["rows"]["flows"] == flows
    assert r["status"] == "degraded"
    _clean_accounting(r)
    # bounded by the flow cap and the sink's row batches, not by the number of flows
    assert r["peak_mb"] - baseline_mb < 250, (r["peak_mb"], baseline_mb)


def test_endless_out_of_order_segments(tmp_path, baseline_mb):
    path = tmp_path / "ooo.pcap"
    facts = g.write_endless_out_of_order(path, blocks=2000)
    small_path = tmp_path / "ooo_small.pcap"
    g.write_endless_out_of_order(small_path, blocks=500)
    r, small = _scaled(path, small_path, tmp_path, 4)
    f = _flow(r, 40000)
    assert f["gap_bytes_c2s"] == facts["lost_bytes"]
    assert f["stream_bytes_c2s"] == facts["stream_bytes"] - facts["lost_bytes"]
    assert f["decoded_bytes_c2s"] == f["stream_bytes_c2s"]  # every delivered op decodes
    assert r["rows"]["nats"] == facts["delivered_ops"] + 1  # + the server's INFO
    # one tcp.gap per hole; the reorder limit declared most of them, the end the rest
    seg = facts["segment_bytes"]
    assert r["anomalies"]["tcp.gap"] == facts["holes"]
    limit = r["anomalies"]["limit.reorder_buffer"]
    assert _pattern(r, "tcp.gap", "(reorder-limit)") == limit
    # the rest at the end: the last hole when the server's FIN acknowledges past it
    assert _pattern(r, "tcp.gap", "(acked-unseen)") == 1
    assert _pattern(r, "tcp.gap", "(end-of-stream)") == facts["holes"] - limit - 1
    assert 0 < limit < facts["holes"]
    assert all(a["nbytes"] == seg for a in _rows(r, "tcp.gap") + _rows(r, "limit.reorder_buffer"))
    assert set(r["anomalies"]) == {"tcp.gap", "limit.reorder_buffer"}
    _clean_accounting(r)
    _clean_accounting(small)
    assert r["peak_mb"] - baseline_mb < 150, (r["peak_mb"], baseline_mb)


def test_two_gigabyte_sequence_jump(tmp_path, baseline_mb):
    path = tmp_path / "jump.pcap"
    facts = g.write_sequence_jump_case(path, segments_after=20_000)
    r = dissect_one(path, tmp_path)
    jump = facts["jump"]
    (lim,) = _rows(r, "limit.reorder_buffer")
    assert lim["nbytes"] == jump and lim["offset"] == 1400
    (gap,) = _rows(r, "tcp.gap")
    assert (gap["offset"], gap["nbytes"]) == (1400, jump) and "reorder-limit" in gap["detail"]
    f = _flow(r, 40000)
    assert f["gap_bytes_c2s"] == jump
    assert f["stream_bytes_c2s"] == 1400 + facts["after_bytes"]
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb < 60, (r["peak_mb"], baseline_mb)


@pytest.fixture(scope="module")
def overlap_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlaps")
    path = d / "overlaps.pcap"
    facts = g.write_overlaps(path)
    cols = {"nats": ["flow_id", "op", "payload", "payload_len", "payload_truncated"]}
    first, last = dissect_in_child([
        (path, d / "first", {"read": ["nats"], "columns": cols}),
        (path, d / "last", {"read": ["nats"], "columns": cols,
                            "limits": {"overlap_policy": "last"}}),
    ])
    return facts, {"first": first, "last": last}


@pytest.mark.parametrize("policy", ["first", "last"])
def test_overlapping_segments_with_different_bytes(overlap_runs, policy, baseline_mb):
    facts, runs = overlap_runs
    r = runs[policy]
    by_flow = {f["flow_id"]: f for f in r["flows"]}
    conflicts: dict[int, list] = {}
    for a in _rows(r, "tcp.overlap_conflict"):
        port = by_flow[a["flow_id"]]["client_port"]
        conflicts.setdefault(port, []).append((a["offset"], a["nbytes"]))
        assert f"({policy} copy kept)" in a["detail"]
    payloads = {by_flow[row["flow_id"]]["client_port"]: row for row in r["tables"]["nats"]
                if row["op"] == "PUB"}
    for flow in facts["flows"]:
        port, name = flow["port"], flow["pattern"]
        assert sorted(conflicts.get(port, [])) == sorted(map(tuple, flow["conflicts"])), name
        assert by_flow_port(r, port)["overlap_conflicts_c2s"] == len(flow["conflicts"]), name
        row = payloads[port]
        assert row["payload_len"] == g.OVERLAP_BODY and not row["payload_truncated"], name
        assert bytes.fromhex(row["payload"]["hex"]) == flow[policy], (name, policy)
    assert r["anomalies"] == {"tcp.overlap_conflict": sum(len(f["conflicts"])
                                                         for f in facts["flows"])}
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb < 40


def by_flow_port(r: dict, port: int) -> dict:
    return _flow(r, port)


def test_first_and_last_policies_really_differ(overlap_runs):
    facts, _ = overlap_runs
    differ = [f["pattern"] for f in facts["flows"] if f["first"] != f["last"]]
    # every buffered-overlap pattern with other bytes; never the delivered ones
    assert "equal" in differ and "covering" in differ
    assert "retransmit_delivered" not in differ and "identical_bytes" not in differ


# -------------------------------------------------------------------------------- NATS


def test_nats_control_line_of_100_mb_without_newline(tmp_path, baseline_mb):
    path = tmp_path / "long.pcap"
    facts = g.write_nats_long_line(path, megabytes=100)
    small_path = tmp_path / "long_small.pcap"
    g.write_nats_long_line(small_path, megabytes=25)
    r, small = _scaled(path, small_path, tmp_path, 4)
    (a,) = _rows(r, "nats.line_too_long")
    assert a["nbytes"] == facts["line_bytes"] and a["offset"] == 0
    assert f"at least {facts['line_bytes']} bytes exceeds the limit of 4096" in a["detail"]
    assert "cut by the end of the stream" in a["detail"]
    assert r["anomalies"] == {"nats.line_too_long": 1}
    f = _flow(r, 40000)
    assert f["protocol"] == "nats"
    assert f["undecoded_bytes_c2s"] == facts["line_bytes"] and f["decoded_bytes_c2s"] == 0
    assert r["rows"]["nats"] == 1  # the server's INFO
    _clean_accounting(r)
    # the line streams past: a 100 MB line must not cost 100 MB
    assert r["peak_mb"] - baseline_mb < 40, (r["peak_mb"], baseline_mb)


def test_pub_declaring_4_gb(tmp_path, baseline_mb):
    path = tmp_path / "pub4g.pcap"
    facts = g.write_nats_huge_declared(path, follow_mb=20)
    r = dissect_one(path, tmp_path, read=["nats"],
                    columns={"nats": ["flow_id", "op", "subject", "payload_len", "incomplete",
                                      "payload", "max_payload_exceeded"]})
    assert r["anomalies"] == {"nats.bad_size": 2, "nats.resync": 2,
                              "nats.max_payload_exceeded": 1, "nats.eof_in_payload": 1}
    details = sorted(a["detail"] for a in _rows(r, "nats.bad_size"))
    assert details[0].startswith("HPUB header size 4294967295 is not 1-9 decimal digits")
    assert details[1].startswith("PUB size 4294967296 is not 1-9 decimal digits")
    assert all(a["nbytes"] == (1 << 20) + 2 for a in _rows(r, "nats.resync"))
    port = {f["flow_id"]: f["client_port"] for f in r["flows"]}
    ops = Counter((port[row["flow_id"]], row["op"]) for row in r["tables"]["nats"])
    # after the rejected line and the junk, parsing resumes: the PING is decoded
    assert ops[(40001, "PING")] == 1 and ops[(40002, "PING")] == 1
    (big,) = [row for row in r["tables"]["nats"] if row["op"] == "PUB"]
    assert (big["payload_len"], big["incomplete"], big["payload"]) == (999_999_999, True, None)
    assert big["max_payload_exceeded"] is True
    (eof,) = _rows(r, "nats.eof_in_payload")
    assert f"({facts['follow_bytes']} of 999999999 bytes received" in eof["detail"]
    assert _flow(r, 40003)["undecoded_bytes_c2s"] == facts["follow_bytes"]
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb < 40, (r["peak_mb"], baseline_mb)


# ------------------------------------------------------------------------------ Pulsar


def test_pulsar_frame_declaring_4_gb(tmp_path, baseline_mb):
    path = tmp_path / "pulsar4g.pcap"
    facts = g.write_pulsar_huge_frame(path, follow_mb=20)
    r = dissect_one(path, tmp_path)
    (a,) = _rows(r, "pulsar.eof_in_frame")
    assert f"oversize frame of {facts['declared'] + 4} bytes" in a["detail"]
    assert r["anomalies"] == {"pulsar.eof_in_frame": 1}
    assert r["rows"]["pulsar_commands"] == 2  # CONNECT, CONNECTED
    f = _flow(r, 40000)
    assert f["protocol"] == "pulsar" and f["undecoded_bytes_c2s"] == a["nbytes"]
    assert a["nbytes"] >= facts["follow_bytes"]
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb < 40, (r["peak_mb"], baseline_mb)


def test_compression_bombs_in_a_pulsar_batch(tmp_path, baseline_mb):
    path = tmp_path / "bombs.pcap"
    facts = g.write_pulsar_bombs(path, zlib_mb=128)
    r = dissect_one(path, tmp_path, read=["pulsar_messages"],
                    columns={"pulsar_messages": ["compression", "incomplete", "payload",
                                                 "wire_payload_len", "num_messages_in_batch"]})
    want = Counter(kind for _, kind, _ in facts["bombs"])
    assert r["anomalies"] == dict(want)
    assert _pattern(r, "pulsar.decompression_bomb", "ZSTD payload expands to more than") == 1
    assert _pattern(r, "pulsar.decompression_bomb", "ZLIB payload expands to more than") == 1
    assert _pattern(r, "pulsar.decompression_bomb", "payload declares") == 3
    msgs = r["tables"]["pulsar_messages"]
    assert len(msgs) == len(facts["bombs"])  # one incomplete row per batch, not 1000 each
    for row, (_, _, wire_len) in zip(msgs, facts["bombs"], strict=True):
        assert row["incomplete"] and row["payload"] is None
        assert row["wire_payload_len"] == wire_len and row["num_messages_in_batch"] == 1000
    _clean_accounting(r)
    # at most the 64 MiB decompression cap is ever materialised (tiny in, 4 GiB out)
    assert r["peak_mb"] - baseline_mb < 2 * 64 + 40, (r["peak_mb"], baseline_mb)


# ---------------------------------------------------------------------------- protobuf


def test_protobuf_deep_nesting_and_huge_length_prefixes(tmp_path, baseline_mb):
    path = tmp_path / "proto.pcap"
    facts = g.write_protobuf_bombs(path, depth=100_000)
    shallow = tmp_path / "proto-shallow.pcap"
    g.write_protobuf_bombs(shallow, depth=3_200)
    s, r = dissect_counted([(shallow, tmp_path / "shallow", {}), (path, tmp_path / "deep", {})])
    assert r["anomalies"] == {
        "pulsar.bad_command": 3, "pulsar.missing_subcommand": 1,
        "stan.bad_protobuf": 1, "stan.truncated_protobuf": 1,
        "liftbridge.bad_protobuf": 2, "liftbridge.truncated_protobuf": 1,
    }
    for kind in ("pulsar.bad_command", "stan.bad_protobuf", "liftbridge.bad_protobuf"):
        assert _pattern(r, kind, "groups nested deeper than N") == 1, kind
    huge = "length 18446744073709551615 runs past the end"
    assert sum(huge in a["detail"] for a in _rows(r, "pulsar.bad_command")) == 2
    assert huge in _rows(r, "stan.truncated_protobuf")[0]["detail"]
    assert huge in _rows(r, "liftbridge.truncated_protobuf")[0]["detail"]
    assert r["rows"]["pulsar_commands"] == facts["pulsar_frames"]
    assert r["rows"]["stan"] == facts["stan_msgs"]
    assert r["rows"]["liftbridge"] == facts["liftbridge_msgs"]
    _clean_accounting(r)
    # 100,000 levels cost no more than 3,200 beyond carrying the longer capture's extra
    # packets: only the first 32 levels are followed (a walk of every level would add
    # ≥ 96,800 calls to each of the three group bombs; carrying a packet costs ~60 here)
    extra_packets = r["packets"] - s["packets"]
    assert r["calls"] - s["calls"] < 120 * extra_packets, (s["calls"], r["calls"], extra_packets)
    assert r["peak_mb"] - baseline_mb < 40, (r["peak_mb"], baseline_mb)


# -------------------------------------------------------------------------------- QUIC


def test_quic_with_garbage_after_valid_headers(tmp_path, baseline_mb):
    path = tmp_path / "quic.pcap"
    facts = g.write_quic_garbage(path)
    r = dissect_one(path, tmp_path, read=["quic_packets"],
                    columns={"quic_packets": ["src_port", "packet_type", "decrypted",
                                              "undecrypted_reason", "sni", "datagram_offset",
                                              "length"]})
    assert r["anomalies"] == {"quic.bad_packet": 1, "quic.no_initial_keys": 1,
                              "quic.undecryptable": 1}
    (bad,) = _rows(r, "quic.bad_packet")
    # the junk after the real Initial is reported as junk, not as an encrypted packet
    assert (bad["offset"], bad["nbytes"]) == (facts["initial_bytes"], 600)
    assert "DCID differs from the first packet's" in bad["detail"]
    pkts = sorted((p["src_port"], p["packet_type"], p["decrypted"], p["undecrypted_reason"],
                   p["sni"]) for p in r["tables"]["quic_packets"])
    assert pkts == [
        (50000, "1rtt", False, "no-keys", None),  # the short-header datagram: no keys
        (50000, "initial", True, None, "www.google.com"),
        (50001, "initial", False, "no-initial-dcid", None),  # valid header, garbage payload
    ]
    # a Length past the datagram / a ragged Version Negotiation are not QUIC: plain UDP
    # flows whose bytes stay undecoded (and accounted)
    for port in (50002, 50003):
        f = _flow(r, port)
        assert f["protocol"] is None
        assert f["undecoded_bytes_c2s"] + f["undecoded_bytes_s2c"] > 0
    _clean_accounting(r)
    assert r["peak_mb"] - baseline_mb < 40


# ------------------------------------------------------------------------ pcap / pcapng


@pytest.fixture(scope="module")
def file_format_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    cases = [("pcap", c) for c in g.pcap_caplen_cases()]
    cases += [("pcapng", c) for c in g.pcapng_bad_length_cases()]
    jobs = []
    for fmt, c in cases:
        p = d / f"{c.name}.{fmt}"
        p.write_bytes(c.data)
        jobs.append((p, d / f"out-{c.name}", {}))
    return {c.name: (c, r) for (_, c), r in zip(cases, dissect_in_child(jobs), strict=True)}


CASE_NAMES = [c.name for c in g.pcap_caplen_cases()] + [c.name for c in
                                                        g.pcapng_bad_length_cases()]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_record_and_block_lengths(file_format_runs, name, baseline_mb):
    case, r = file_format_runs[name]
    assert r["packets"] == case.packets
    if case.damage is None:
        assert r["damage"] == [] and "capture.damaged" not in r["anomalies"]
    else:
        (d,) = r["damage"]
        assert case.damage in d["reason"], d
        (a,) = _rows(r, "capture.damaged")
        assert case.damage in a["detail"]
        assert a["frame"] == (case.at_frame or case.packets or None)
        assert r["status"] == "degraded"
    _clean_accounting(r)
    # nothing is allocated for a claimed length (4 GiB caplen, 2 GiB block)
    assert r["peak_mb"] - baseline_mb < 30, (r["peak_mb"], baseline_mb)


# --------------------------------------------------------------------------------- CLI


def test_exit_code_and_summary_report_anomalies_and_limits(tmp_path):
    path = tmp_path / "ooo.pcap"
    g.write_endless_out_of_order(path, blocks=700)
    out = tmp_path / "out"
    r = subprocess.run([str(MSGCAP), "dissect", str(path), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stderr  # degraded
    for needle in ("limit.reorder_buffer", "tcp.gap", "anomalies by kind", "status degraded"):
        assert needle in r.stderr, (needle, r.stderr)
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture")
    r = subprocess.run([str(MSGCAP), "dissect", str(junk), "-o", str(tmp_path / "o2")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not a pcap/pcapng capture" in r.stderr

"""Felix through the real pipeline (``dissect_capture`` -> Parquet -> read back).

* ``samples/felix-quic.pcap``: a real QUIC stack (aioquic client and server) carrying Felix
  frames, recorded with tcpdump, with the client's secrets log; every frame of every QUIC
  stream must match what its sender recorded (``felix-quic.truth.json``), and the second
  connection, whose secrets were never logged, must be reported undecryptable;
* Felix over TCP: the same session on a hand-built TCP capture;
* the recorder itself, run live when tcpdump and root are available.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analyzer.pipeline import Options, dissect_capture
from analyzer.testing import dissect_with_cli
from dissectors.api import Transport
from dissectors.felix import FelixDissector
from dissectors.registry import Registry, discover
from dissectors.sdk.testing import PcapFlow, write_pcap
from tests.felix.helpers import SAMPLES, C, S, assert_frame, rf, sender

pytest.importorskip("aioquic")

PCAP = SAMPLES / "felix-quic.pcap"
KEYS = SAMPLES / "felix-quic.keys"
TRUTH = json.loads((SAMPLES / "felix-quic.truth.json").read_text())
TABLES = ("felix", "felix_messages", "anomalies", "flows", "quic_packets")


def _read(out: Path) -> dict[str, list[dict]]:
    res = {}
    for name in TABLES:
        p = out / name
        res[name] = (ds.dataset(p, format="parquet", partitioning="hive").to_table().to_pylist()
                     if p.exists() else [])
    return res


def _dissect(pcap: Path, out: Path, registry: Registry | None = None, **kw) -> dict:
    dissect_capture(pcap, out, Options(strict=True, validate=True, **kw), registry=registry)
    return _read(out)


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, list[dict]]:
    return _dissect(PCAP, tmp_path_factory.mktemp("felix") / "out", keylog=str(KEYS))


def _flow_of(tables: dict, client_port: int) -> dict:
    (flow,) = [f for f in tables["flows"] if f["client_port"] == client_port]
    return flow


def _check_truth(tables: dict, conn: dict, *, stream_ids: bool = True) -> int:
    """Every frame the truth lists for ``conn`` is a felix row of its stream and
    direction, in order, with its messages; nothing else.  Returns the frames checked."""
    flow = _flow_of(tables, conn["client_port"])
    rows = defaultdict(list)
    for r in tables["felix"]:
        if r["flow_id"] == flow["flow_id"]:
            rows[(r["stream_id"], r["direction"])].append(r)
    kids = defaultdict(list)
    for m in tables["felix_messages"]:
        kids[m["parent_record_id"]].append(m)
    checked = 0
    for s in conn["streams"]:
        key = (s["stream_id"] if stream_ids else None,
               "c2s" if s["side"] == "client" else "s2c")
        got = sorted(rows.pop(key, []), key=lambda r: r["offset_start"])
        assert len(got) == len(s["frames"]), (key, [g["type"] or g["kind"] for g in got])
        for i, (row, truth) in enumerate(zip(got, s["frames"], strict=True)):
            assert_frame(row, kids[row["record_id"]], truth, f"stream {key} frame {i}")
            checked += 1
    assert not rows, f"felix rows on streams the truth does not list: {sorted(rows)}"
    return checked


# ------------------------------------------------------------------ the aioquic capture


def test_truth_file_is_consistent():
    assert TRUTH["format"] == "msgcap-felix-truth/1" and TRUTH["problems"] == []
    assert TRUTH["pcap"]["packets"] == TRUTH["tcpdump"]["captured"]
    assert TRUTH["tcpdump"].get("dropped_by_kernel", 0) == 0
    conn = TRUTH["connections"]["decrypted"]
    kinds = {f["type"] or f["kind"] for s in conn["streams"] for f in s["frames"]}
    for k in ("auth", "auth_ok", "publish", "publish_batch", "publish_ok", "publish_error",
              "subscribe", "subscribed", "event_stream_hello", "event", "event_batch",
              "cache_put", "cache_get", "cache_value", "cache_ok", "error",
              "binary_publish_batch", "binary_acked_publish_batch", "binary_publish_ack",
              "binary_event_batch", "binary_shared_event_batch", "unknown"):
        assert k in kinds, k
    big = max(f["length"] for s in conn["streams"] for f in s["frames"])
    assert big > 40 * 1200  # a frame bigger than many QUIC packets


def test_every_frame_matches_its_sender(tables):
    conn = TRUTH["connections"]["decrypted"]
    assert _check_truth(tables, conn) == TRUTH["frames"]["decrypted"]
    assert len(tables["felix"]) == TRUTH["frames"]["decrypted"]
    n_msgs = sum(len(f["messages"]) for s in conn["streams"] for f in s["frames"])
    assert len(tables["felix_messages"]) == n_msgs


def test_only_the_anomalies_the_sender_caused(tables):
    conn = TRUTH["connections"]["decrypted"]
    expected = sorted(a for s in conn["streams"] for f in s["frames"] for a in f["anomalies"])
    got = sorted(a["kind"] for a in tables["anomalies"] if a["kind"].startswith("felix."))
    assert got == expected == ["felix.unknown_flags"]
    assert all(a["source"] == "dissector:felix" for a in tables["anomalies"]
               if a["kind"].startswith("felix."))


def test_second_connection_is_undecryptable(tables):
    conn = TRUTH["connections"]["no-secrets"]
    flow = _flow_of(tables, conn["client_port"])
    und = [a for a in tables["anomalies"] if a["kind"] == "quic.undecryptable"]
    assert [a["flow_id"] for a in und] == [flow["flow_id"]]
    assert not [r for r in tables["felix"] if r["flow_id"] == flow["flow_id"]]
    assert flow["protocol"] == "quic"
    pkts = [p for p in tables["quic_packets"] if p["flow_id"] == flow["flow_id"]]
    assert pkts and not all(p["decrypted"] for p in pkts)
    decrypted = _flow_of(tables, TRUTH["connections"]["decrypted"]["client_port"])
    assert decrypted["protocol"] == "felix"
    # all stream bytes of the decrypted connection were frames
    sizes = defaultdict(int)
    for s in TRUTH["connections"]["decrypted"]["streams"]:
        sizes[s["side"]] += sum(12 + f["length"] for f in s["frames"])
    assert (decrypted["decoded_bytes_c2s"], decrypted["decoded_bytes_s2c"]) == (
        sizes["client"], sizes["server"])
    assert (decrypted["undecoded_bytes_c2s"], decrypted["undecoded_bytes_s2c"]) == (0, 0)


def test_without_the_key_log_nothing_decrypts(tmp_path):
    t = _dissect(PCAP, tmp_path / "out")
    assert t["felix"] == []
    und = {a["flow_id"] for a in t["anomalies"] if a["kind"] == "quic.undecryptable"}
    assert und == {f["flow_id"] for f in t["flows"]} and len(und) == 2


def test_the_cli_reads_the_key_log(tmp_path):
    run = dissect_with_cli(PCAP, tmp_path / "out", "--keylog", str(KEYS))
    assert run.returncode in (0, 1), run.stderr
    assert len(run.tables["felix"]) == TRUTH["frames"]["decrypted"]
    assert {r["type"] for r in run.tables["felix_messages"]} >= {
        "publish", "binary_event_batch", "event_batch"}


def test_stream_kind_matches_the_stream_id(tables):
    kinds = {0: "bidi-client", 1: "bidi-server", 2: "uni-client", 3: "uni-server"}
    for table in ("felix", "felix_messages"):
        for r in tables[table]:
            assert r["stream_kind"] == kinds[r["stream_id"] & 3]


# ------------------------------------------------------------------ Felix over TCP


def tcp_conversation() -> list[tuple]:
    big = bytes(range(256)) * 40  # 10 KiB: several TCP segments
    return [
        (C, rf.auth("t1", "tok", 0x19)),
        (S, rf.auth_ok(0x19)),
        (C, rf.publish("orders", b"hello", request_id=1, ack="per_message")),
        (S, rf.publish_ok(1, 0)),
        (C, rf.binary_publish("orders", [b"a", big], key=b"k", request_id=2)),
        (S, rf.binary_ack(2, offset=1)),
        (C, rf.subscribe("orders")),
        (S, rf.subscribed(4)),
        (S, rf.binary_events([b"a", big], subscription_id=4, base_offset=1)),
        (C, rf.cache_get("primary", "nope")),
        (S, rf.cache_value("primary", "nope", None)),
    ]


def _tcp_truth(conv, client_port: int) -> dict:
    streams = defaultdict(list)
    for d, f in conv:
        assert sender(f) == d
        streams["client" if d == C else "server"].append(f.truth)
    return {"client_port": client_port,
            "streams": [{"stream_id": None, "side": side, "frames": frames}
                        for side, frames in streams.items()]}


class FelixOverTcp(FelixDissector):
    """The Felix dissector offered TCP flows (what a detector reading `transports` does)."""

    transport = Transport.TCP


def test_felix_over_tcp(tmp_path):
    conv = tcp_conversation()
    pcap = write_pcap(tmp_path / "felix-tcp.pcap",
                      [PcapFlow([(d, f.data) for d, f in conv], 5000, client_port=40001)])
    reg = Registry()
    reg.add(FelixOverTcp)
    t = _dissect(pcap, tmp_path / "out", registry=reg)
    assert _check_truth(t, _tcp_truth(conv, 40001), stream_ids=False) == len(conv)
    assert [a["kind"] for a in t["anomalies"]] == []
    (flow,) = t["flows"]
    assert (flow["transport"], flow["protocol"]) == ("tcp", "felix")
    assert {r["stream_kind"] for r in t["felix"]} == {None}


def test_felix_over_tcp_with_gaps(tmp_path):
    """Lost TCP segments: the cut frame is an anomaly; the next frame decodes."""
    conv = tcp_conversation()
    script = []
    for d, f in conv:
        if f.truth["kind"] == "binary_acked_publish_batch":
            script += [(d, f.data[:100]), (d, len(f.data) - 100)]  # the rest never captured
        else:
            script.append((d, f.data))
    pcap = write_pcap(tmp_path / "gaps.pcap", [PcapFlow(script, 5000, client_port=40002)])
    reg = Registry()
    reg.add(FelixOverTcp)
    t = _dissect(pcap, tmp_path / "out", registry=reg)
    assert [a["kind"] for a in t["anomalies"] if a["kind"].startswith("felix.")] == [
        "felix.gap_in_frame"]
    assert len(t["felix"]) == len(conv) - 1


def test_felix_over_tcp_is_detected_by_default(tmp_path):
    conv = tcp_conversation()
    pcap = write_pcap(tmp_path / "felix-tcp.pcap",
                      [PcapFlow([(d, f.data) for d, f in conv], 5000, client_port=40001)])
    t = _dissect(pcap, tmp_path / "out", registry=discover())
    assert _check_truth(t, _tcp_truth(conv, 40001), stream_ids=False) == len(conv)


# ------------------------------------------------------------------ the recorder, live


def _can_record() -> bool:
    return (hasattr(os, "geteuid") and os.geteuid() == 0
            and (shutil.which("tcpdump") or os.path.exists("/usr/sbin/tcpdump")) is not None)


@pytest.mark.skipif(not _can_record(), reason="needs root and tcpdump")
def test_recorder_live(tmp_path):
    """A fresh recording (other ports, keys, random payloads) matches its own truth."""
    prefix = tmp_path / "live"
    assert rf.main(["--out", str(prefix), "--big", "30000", "--seed", "7",
                    "--tail-wait", "1"]) == 0
    truth = json.loads(prefix.with_suffix(".truth.json").read_text())
    t = _dissect(prefix.with_suffix(".pcap"), tmp_path / "out",
                 keylog=str(prefix.with_suffix(".keys")))
    assert _check_truth(t, truth["connections"]["decrypted"]) == truth["frames"]["decrypted"]
    und = [a["flow_id"] for a in t["anomalies"] if a["kind"] == "quic.undecryptable"]
    assert und == [_flow_of(t, truth["connections"]["no-secrets"]["client_port"])["flow_id"]]


def test_big_frame_spans_many_packets(tables):
    big = max(tables["felix"], key=lambda r: r["length"])
    assert big["frame_last"] - big["frame_first"] >= 20
    assert big["kind"] == "binary_acked_publish_batch"


# ------------------------------------------------------------------ QUIC roles


@pytest.mark.parametrize("client_port", [50123, 1024])
def test_quic_client_is_who_sent_the_initial(tmp_path, client_port):
    from tests.quic.stack import Conversation

    conv = Conversation(client_port=client_port)
    conv.open_stream(rf.auth("t1", "tok").data + rf.publish("s", b"p").data)
    ex = conv.finish()  # (the test server echoes the bytes reversed: not Felix)
    ex.write_pcap(tmp_path / "c.pcap")
    (tmp_path / "keys").write_text(ex.secrets)
    t = _dissect(tmp_path / "c.pcap", tmp_path / "out", keylog=str(tmp_path / "keys"))
    assert [(r["type"], r["direction"]) for r in t["felix"]] == [("auth", "c2s"),
                                                                ("publish", "c2s")]

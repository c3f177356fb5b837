"""The three recorders, live: record fresh captures from real nats-server processes and
check them like the committed ones (skipped without root and tcpdump)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.tls.helpers import Dissected, assert_accounting

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _can_record() -> bool:
    return (hasattr(os, "geteuid") and os.geteuid() == 0
            and (shutil.which("tcpdump") or os.path.exists("/usr/sbin/tcpdump")) is not None)


pytestmark = pytest.mark.skipif(not _can_record(), reason="needs root and tcpdump")


def _recorder(name: str):
    sys.path.insert(0, str(SAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(SAMPLES))


def _check_nats(d: Dissected, conns: dict) -> None:
    nats = d.rows("nats")
    for name, conn in conns.items():
        (f,) = [f for f in d.rows("flows") if f["client_port"] == conn["client_port"]]
        for x, side in (("c2s", "sent"), ("s2c", "received")):
            rows = [r for r in nats if r["flow_id"] == f["flow_id"] and r["direction"] == x]
            want = Counter({k: v for k, v in conn[side]["ops"].items() if v})
            assert Counter(r["op"] for r in rows) == want, (name, x)
            sha = hashlib.sha256()
            for r in rows:
                if r["op"] in ("PUB", "HPUB", "MSG", "HMSG"):
                    sha.update(len(r["payload"]).to_bytes(8, "big") + r["payload"])
            assert sha.hexdigest() == conn[side]["payload_sha256"], (name, x)
            assert f[f"stream_bytes_{x}"] == conn[side]["stream_bytes"], (name, x)
    assert_accounting(d)


def test_record_nats_tls_live(tmp_path):
    rec = _recorder("record_nats_tls")
    assert rec.main(["--out", str(tmp_path / "t"), "--tail-wait", "1"]) == 0
    truth = json.loads((tmp_path / "t.truth.json").read_text())
    d = Dissected(tmp_path / "t.pcap", tmp_path / "out", tmp_path / "t.keys", payload_cap=None)
    assert d.rows("anomalies") == []
    _check_nats(d, truth["connections"])
    assert {t["version"] for t in d.rows("tls")} == {"TLS 1.2", "TLS 1.3"}


def test_record_nats_ws_live(tmp_path):
    rec = _recorder("record_nats_ws")
    assert rec.main(["--out", str(tmp_path / "w"), "--tail-wait", "1"]) == 0
    truth = json.loads((tmp_path / "w.truth.json").read_text())
    d = Dissected(tmp_path / "w.pcap", tmp_path / "out", tmp_path / "w.keys", payload_cap=None)
    assert d.rows("anomalies") == []
    _check_nats(d, truth["connections"])


@pytest.mark.skipif(
    not os.environ.get("MSGCAP_LIVE_CLUSTER"),
    reason="opt-in (MSGCAP_LIVE_CLUSTER=1): three servers forming a cluster under heavy "
    "CPU load can outlast the clients' connect timeout; the committed cluster capture is "
    "checked by tests/cluster on every run",
)
def test_record_nats_cluster_live(tmp_path):
    rec = _recorder("record_nats_cluster")
    assert rec.main(["--out", str(tmp_path / "c"), "--tail-wait", "1"]) == 0
    truth = json.loads((tmp_path / "c.truth.json").read_text())
    d = Dissected(tmp_path / "c.pcap", tmp_path / "out")
    assert d.rows("anomalies") == []
    hops = d.rows("nats_cluster")
    for msg in truth["published"]:
        ops = sorted((r["op"], r["link"]) for r in hops if r["payload_sha256"] == msg["sha256"])
        assert len(ops) == 2 and {link for _, link in ops} == {"route", "leaf"}

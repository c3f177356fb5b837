"""Acceptance on real captures: nats-server + nats-py over TLS 1.2 and 1.3 (STARTTLS-style
and TLS-first) against client-side truth; the same capture without its key log; a real
Chrome TLS 1.3 connection whose secrets are in a pcapng Decryption Secrets Block; an IRC
STARTTLS; Pulsar on 6651 inside TLS dissected like plain Pulsar."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from dissectors.sdk.testing import PcapFlow, write_pcap
from reassembly.engine import read_events
from reassembly.events import StreamData
from tests.conftest import SHARED
from tests.tls.helpers import C, Dissected, S, assert_accounting
from tests.tls.synth import Tls13Conn

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PCAP = SAMPLES / "nats-tls.pcap"
KEYS = SAMPLES / "nats-tls.keys"
TRUTH = json.loads((SAMPLES / "nats-tls.truth.json").read_text())
CONNS = TRUTH["connections"]


@pytest.fixture(scope="module")
def with_keys(tmp_path_factory) -> Dissected:
    return Dissected(PCAP, tmp_path_factory.mktemp("tls") / "out", KEYS, payload_cap=None)


@pytest.fixture(scope="module")
def without_keys(tmp_path_factory) -> Dissected:
    return Dissected(PCAP, tmp_path_factory.mktemp("tls") / "out")


def _flow(d: Dissected, conn: dict) -> dict:
    (f,) = [f for f in d.rows("flows") if f["client_port"] == conn["client_port"]]
    return f


def _framed_digest(rows: list[dict]) -> str:
    sha = hashlib.sha256()
    for r in rows:
        if r["op"] in ("PUB", "HPUB", "MSG", "HMSG"):
            sha.update(len(r["payload"]).to_bytes(8, "big"))
            sha.update(r["payload"])
    return sha.hexdigest()


def test_truth_is_clean_and_covers_both_versions_and_modes():
    assert TRUTH["problems"] == []
    versions = {c["tls"]["version"] for c in CONNS.values()}
    assert versions == {"TLSv1.2", "TLSv1.3"}
    assert any(c["handshake_first"] for c in CONNS.values())
    assert any("CHACHA20" in c["tls"]["cipher"] for c in CONNS.values())


@pytest.mark.parametrize("name", sorted(CONNS))
def test_nats_rows_equal_client_truth(with_keys: Dissected, name: str):
    conn = CONNS[name]
    f = _flow(with_keys, conn)
    assert f["protocol"] == "nats" and f["layers"] == ["tls"]
    nats = with_keys.rows("nats")
    for d, side in (("c2s", "sent"), ("s2c", "received")):
        rows = [r for r in nats if r["flow_id"] == f["flow_id"] and r["direction"] == d]
        ops = Counter(r["op"] for r in rows)
        assert ops == Counter({k: v for k, v in conn[side]["ops"].items() if v}), (name, d)
        assert _framed_digest(rows) == conn[side]["payload_sha256"], (name, d)
        assert f[f"stream_bytes_{d}"] == conn[side]["stream_bytes"], (name, d)
        assert f[f"decoded_bytes_{d}"] == conn[side]["stream_bytes"]
        assert f[f"gap_bytes_{d}"] == 0
        # rows tile the plaintext stream (INFO in clear, then decrypted bytes)
        assert rows[0]["offset_start"] == 0 and rows[-1]["offset_end"] == f[f"stream_bytes_{d}"]
        assert all(a["offset_end"] == b["offset_start"] for a, b in zip(rows, rows[1:],
                                                                         strict=False))


def test_tls_rows_match_the_negotiated_parameters(with_keys: Dissected):
    assert with_keys.rows("anomalies") == []
    tls = {r["flow_id"]: r for r in with_keys.rows("tls")}
    assert len(tls) == len(CONNS)
    for name, conn in CONNS.items():
        t = tls[_flow(with_keys, conn)["flow_id"]]
        want = {"TLSv1.2": "TLS 1.2", "TLSv1.3": "TLS 1.3"}[conn["tls"]["version"]]
        assert t["version"] == want, name
        assert t["decrypted"] and t["undecrypted_reason"] is None
        assert t["starttls"] == (not conn["handshake_first"])
        if conn["tls"]["version"] == "TLSv1.2":  # OpenSSL names vs IANA names
            assert t["cipher_suite"].endswith(
                "CHACHA20_POLY1305_SHA256" if "CHACHA" in conn["tls"]["cipher"]
                else "AES_128_GCM_SHA256"), name
        else:
            assert t["cipher_suite"] == conn["tls"]["cipher"]
        assert t["app_bytes_c2s"] == conn["sent"]["stream_bytes"]
        assert "c2s warning close_notify" in t["alerts"] or t["version"] == "TLS 1.3"
    assert_accounting(with_keys)


def test_without_the_key_log_every_flow_is_reported_undecryptable(without_keys: Dissected):
    anomalies = [a for a in without_keys.rows("anomalies") if a["kind"] == "tls.undecryptable"]
    assert len(anomalies) == len(CONNS)
    tls = without_keys.rows("tls")
    assert {(t["decrypted"], t["undecrypted_reason"]) for t in tls} == {(False, "no-keys")}
    randoms = {t["client_random"] for t in tls}
    assert all(any(r in a["detail"] for r in randoms) for a in anomalies)
    # keys-file lines name exactly these client randoms
    logged = {line.split()[1] for line in KEYS.read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert randoms == logged
    for f in without_keys.rows("flows"):
        assert f["layers"] == ["tls-encrypted"]
    # the STARTTLS flows still show their plaintext INFO as a nats row
    infos = [r for r in without_keys.rows("nats") if r["op"] == "INFO"]
    assert len(infos) == sum(not c["handshake_first"] for c in CONNS.values())
    assert_accounting(without_keys)


def test_chrome_tls13_with_secrets_in_a_pcapng_dsb(tmp_path):
    d = Dissected(SHARED / "captures/ja4/chrome-cloudflare-quic-with-secrets.pcapng",
                  tmp_path / "out")
    (t,) = d.rows("tls")
    assert t["decrypted"] and t["version"] == "TLS 1.3" and t["sni"] == "cloudflare-quic.com"
    assert t["alpn_offered"] == ["h2", "http/1.1"] and t["alpn"] == "h2"
    events = list(read_events(SHARED / "captures/ja4/chrome-cloudflare-quic-with-secrets.pcapng"))
    c2s = b"".join(e.data for e in events if isinstance(e, StreamData) and e.stream_id is None
                   and e.direction == C)
    assert c2s.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    (f,) = [f for f in d.rows("flows") if f["transport"] == "tcp"]
    assert f["layers"] == ["tls"] and f["protocol"] == "tls" and f["tls_alpn_selected"] == "h2"


def test_irc_starttls_is_found_after_the_plaintext(tmp_path):
    d = Dissected(SHARED / "captures/zeek/tls/irc-starttls.pcap", tmp_path / "out")
    (t,) = d.rows("tls")
    assert t["starttls"] and t["tls_start_c2s"] == len(b"STARTTLS\r\n")
    assert t["version"] == "TLS 1.2" and t["undecrypted_reason"] == "no-keys"
    assert d.kinds().count("tls.undecryptable") == 1


def test_pulsar_on_6651_inside_tls_is_dissected_like_plain_pulsar(tmp_path):
    plain = SAMPLES / "pulsar-client.pcap"
    streams: dict[int, list] = {}
    for e in read_events(plain):
        if isinstance(e, StreamData):
            streams.setdefault(e.flow.flow_id, []).append((e.direction, e.data))
    flows, log = [], ""
    for i, chunks in enumerate(streams.values()):
        conn = Tls13Conn(seed=100 + i, alpn=(), sni="pulsar.example")
        script = [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish())]
        script += [(d, conn.app("c" if d == C else "s", data)) for d, data in chunks]
        flows.append(PcapFlow(script, 6651))
        log += conn.keylog()
    pcap = write_pcap(tmp_path / "pulsar-tls.pcap", flows)
    keys = tmp_path / "keys"
    keys.write_text(log)
    a = Dissected(plain, tmp_path / "plain")
    b = Dissected(pcap, tmp_path / "tls", keys)
    strip = ("capture", "capture_id", "flow_id", "record_id", "parent_record_id", "src_ip",
             "src_port", "dst_ip", "dst_port", "ts_first", "ts_last", "ts_first_ns", "ts_last_ns",
                 "frame_first", "frame_last")
    for table in ("pulsar_commands", "pulsar_messages"):
        ra = [{k: v for k, v in r.items() if k not in strip} for r in a.rows(table)]
        rb = [{k: v for k, v in r.items() if k not in strip} for r in b.rows(table)]
        assert ra and sorted(map(repr, ra)) == sorted(map(repr, rb)), table
    assert {f["protocol"] for f in b.rows("flows")} == {"pulsar"}
    assert {f["server_port"] for f in b.rows("flows")} == {6651}

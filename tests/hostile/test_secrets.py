"""No leaked secrets by default (issue 9 §4): credentials never reach the dataset unless
``--keep-secrets``; redacted values keep their length and SHA-256; output directories are
never silently overwritten.

The check is done on what is on disk: every file of the dataset is searched as raw bytes
(Parquet footers, statistics and key-value metadata are stored uncompressed; the manifest
is JSON) *and* every value of every column of every table is decoded and searched, since
Parquet pages are zstd-compressed and a raw grep alone could miss a secret.  Each secret
is looked for as UTF-8, as lower-case hex and as base64.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options, dissect_capture
from dissectors.redaction import marker
from samples.hostile.generate import Conversation
from tests.conftest import SHARED
from tests.pulsar import wire
from tests.reassembly.synth import PcapWriter

MSGCAP = Path(sys.executable).with_name("msgcap")
CAPTURES = SHARED / "captures"

NATS_SECRETS = {
    "pass": "PW-s3cr3t-0001",
    "auth_token": "TOK-abc-0002",
    "jwt": "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.JWT-body-0003",
    "sig": "SIG-xyz-0004",
    "nkey": "UNKEY0005ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMN",
}
UPPER_PASS, ESCAPED_PASS, MIXED_TOKEN = "PW-upper-0006", "PW-escaped-0007", "TOK-mixed-0008"
BROKEN_PASS, LONG_JWT, NESTED_PASS = "PW-broken-0009", "JWT-long-0010", "PW-nested-0011"
PULSAR_SECRETS = [b"PULSAR-TOKEN-0012", b"PULSAR-RESP-0013", "PULSAR-ORIG-0014"]
KEYLOG_BAD_SECRET = "ab" * 31 + "0015"  # a secret on a malformed key-log line


def _connect(obj_text: str) -> bytes:
    return b"CONNECT " + obj_text.encode() + b"\r\n"


def write_secret_capture(path: Path) -> None:
    """NATS CONNECTs carrying every credential kind in every spelling nats-server
    accepts, a malformed one, an oversize one; a Pulsar CONNECT / AUTH_RESPONSE."""
    w = PcapWriter(path)
    info = b'INFO {"server_id":"x","auth_required":true,"nonce":"n0nce"}\r\n'
    connects = [
        json.dumps({"verbose": False, "user": "alice", **NATS_SECRETS}),
        f'{{"PASS":"{UPPER_PASS}","p\\u0061ss":"{ESCAPED_PASS}","Auth_Token":"{MIXED_TOKEN}"}}',
        f'{{"user":"bob","pass":"{BROKEN_PASS}",',  # does not parse: nats.bad_json
        f'{{"jwt":"{LONG_JWT}{"x" * 5000}"}}',  # longer than max_control_line
        f'{{"pass":{{"v":"{NESTED_PASS}"}}}}',
    ]
    for i, text in enumerate(connects):
        conv = Conversation(w, 42000 + i, 4222).handshake()
        conv.send(1, info)
        conv.send(0, _connect(text) + b"PING\r\n")
        conv.send(1, b"PONG\r\n")
        conv.fin()
    conv = Conversation(w, 43000, 6650).handshake()
    conv.send(0, wire.frame(wire.cmd(
        "CONNECT", client_version="x", protocol_version=19, auth_method_name="token",
        auth_data=PULSAR_SECRETS[0], original_auth_data=PULSAR_SECRETS[2])))
    conv.send(1, wire.frame(wire.cmd(
        "AUTH_CHALLENGE", protocol_version=19,
        challenge={"auth_method_name": "token", "auth_data": b"challenge"})))
    conv.send(0, wire.frame(wire.cmd(
        "AUTH_RESPONSE", protocol_version=19,
        response={"auth_method_name": "token", "auth_data": PULSAR_SECRETS[1]})))
    conv.fin()
    w.close()


def _forms(secret: str | bytes) -> list[bytes]:
    raw = secret.encode() if isinstance(secret, str) else secret
    return [raw, raw.hex().encode(), base64.b64encode(raw), base64.b64encode(raw).rstrip(b"=")]


def dataset_blobs(out: Path) -> list[tuple[str, bytes]]:
    """Every file's raw bytes plus every decoded value of every Parquet column."""
    blobs = []
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        blobs.append((str(f.relative_to(out)), f.read_bytes()))
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            for name in t.column_names:
                values = t.column(name).to_pylist()
                text = json.dumps(values, default=lambda v: v.hex() if isinstance(v, bytes)
                                  else str(v), ensure_ascii=False)
                raw = b"".join(v for v in _walk(values) if isinstance(v, bytes))
                blobs.append((f"{f.relative_to(out)}:{name}", text.encode() + b"\0" + raw))
    return blobs


def _walk(v):
    if isinstance(v, list | tuple):
        for x in v:
            yield from _walk(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _walk(x)
    else:
        yield v


def leaks(out: Path, secrets) -> list[tuple[str, str]]:
    found = []
    blobs = dataset_blobs(out)
    for s in secrets:
        for form in _forms(s):
            for where, blob in blobs:
                if form in blob:
                    found.append((str(s), where))
    return found


ALL_NATS = [*NATS_SECRETS.values(), UPPER_PASS, ESCAPED_PASS, MIXED_TOKEN, BROKEN_PASS,
            LONG_JWT, NESTED_PASS]


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "secrets.pcap"
    write_secret_capture(path)
    return path


def _nats_rows(out: Path) -> list[dict]:
    return pq.read_table(next((out / "nats").rglob("*.parquet"))).to_pylist()


def test_credentials_never_reach_the_dataset_by_default(capture, tmp_path):
    out = tmp_path / "out"
    result = dissect_capture(capture, out, Options(validate=True))
    assert result.rows["nats"] >= 8 and result.rows["pulsar_commands"] == 3
    assert leaks(out, ALL_NATS + PULSAR_SECRETS) == []
    connects = [r for r in _nats_rows(out) if r["op"] == "CONNECT"]
    # every credential column value is a marker with the value's length and SHA-256
    first = json.loads(connects[0]["json_raw"])
    for key, secret in NATS_SECRETS.items():
        assert first[key] == marker(secret.encode()), key
    assert first["user"] == "alice" and connects[0]["client_user"] == "alice"
    assert connects[0]["auth_fields"] == ["user", "pass", "auth_token", "jwt", "nkey", "sig"]
    second = connects[1]["json_raw"]
    for secret in (UPPER_PASS, ESCAPED_PASS, MIXED_TOKEN):
        assert marker(secret.encode()) in second
    nested = json.loads(connects[-1]["json_raw"])
    assert nested["pass"] == marker(json.dumps({"v": NESTED_PASS}).replace(" ", "").encode())


def test_keep_secrets_keeps_them_and_proves_the_search_works(capture, tmp_path):
    out = tmp_path / "out"
    dissect_capture(capture, out, Options(keep_secrets=True))
    found = {s for s, _ in leaks(out, ALL_NATS)}
    assert found == set(ALL_NATS)  # json_raw, bad_json / line_too_long details
    # Pulsar auth data is always length + hash, with or without the flag
    assert leaks(out, PULSAR_SECRETS) == []
    cmds = pq.read_table(next((out / "pulsar_commands").rglob("*.parquet"))).to_pylist()
    auth = {r["command"]: (r["auth_data_len"], r["auth_data_sha256"]) for r in cmds}
    for command, secret in (("CONNECT", PULSAR_SECRETS[0]), ("AUTH_RESPONSE", PULSAR_SECRETS[1])):
        assert auth[command] == (len(secret), marker(secret).split("sha256=")[1][:-1])


def test_malformed_key_log_lines_do_not_leak_tls_secrets(tmp_path):
    """QUIC/TLS key material: the secrets of a key log (good lines and malformed ones, which
    are quoted in a ``quic.keylog`` anomaly) and of pcapng Decryption Secrets Blocks."""
    src = CAPTURES / "illustrated-quic"
    good = (src / "keylog.txt").read_text()
    secrets = [line.split()[2] for line in good.splitlines() if line.strip()]
    rnd = good.split()[1]
    keylog = tmp_path / "keys.txt"
    keylog.write_text(good + f"CLIENT_TRAFFIC_SECRET_0 {rnd} {KEYLOG_BAD_SECRET} extra\n"
                      f"{KEYLOG_BAD_SECRET}\n")
    out = tmp_path / "out"
    result = dissect_capture(src / "capture.pcap", out, Options(keylog=str(keylog)))
    assert result.anomalies["quic.keylog"] == 1  # the malformed lines are reported...
    assert result.rows["quic_packets"] == 12  # 8 frames, decrypted with the good lines
    assert leaks(out, [*secrets, KEYLOG_BAD_SECRET]) == []  # ...without their secrets
    detail = next(r["detail"] for r in pq.read_table(
        next((out / "anomalies").rglob("*.parquet"))).to_pylist() if r["kind"] == "quic.keylog")
    assert rnd in detail and marker(KEYLOG_BAD_SECRET.encode()) in detail


def test_pcapng_decryption_secrets_blocks_do_not_leak(tmp_path):
    src = CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.pcapng"
    keys = (CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.keylog.txt").read_text()
    secrets = [line.split()[2] for line in keys.splitlines() if len(line.split()) == 3]
    assert len(secrets) == 10
    out = tmp_path / "out"
    result = dissect_capture(src, out, Options())
    assert result.rows["quic_packets"] == 35  # 34 frames, decrypted with the DSB secrets...
    assert leaks(out, secrets) == []  # ...which are not in the output


def test_nats_anomaly_details_quoting_a_connect_are_redacted(capture, tmp_path):
    out = tmp_path / "out"
    dissect_capture(capture, out, Options())
    rows = pq.read_table(next((out / "anomalies").rglob("*.parquet"))).to_pylist()
    kinds = {r["kind"] for r in rows}
    assert {"nats.bad_json", "nats.line_too_long"} <= kinds
    for r in rows:
        if r["kind"] in ("nats.bad_json", "nats.line_too_long"):
            assert "<redacted len=" in r["detail"], r


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MSGCAP), *args], capture_output=True, text=True)


def test_cli_keep_secrets_flag_and_no_silent_overwrite(capture, tmp_path):
    out = tmp_path / "out"
    first = _cli("dissect", str(capture), "-o", str(out))
    assert first.returncode == 1, first.stderr  # degraded: the malformed CONNECTs
    assert leaks(out, ALL_NATS) == []
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # the same capture again into the same directory: refused, nothing touched
    again = _cli("dissect", str(capture), "-o", str(out), "--keep-secrets")
    assert again.returncode == 2
    assert "already in" in again.stderr and "overwrite" in again.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # with --overwrite it is replaced (and --keep-secrets took effect)
    forced = _cli("dissect", str(capture), "-o", str(out), "--keep-secrets", "--overwrite")
    assert forced.returncode == 1, forced.stderr
    assert {s for s, _ in leaks(out, ALL_NATS)} == set(ALL_NATS)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["options"]["keep_secrets"] is True
    assert len(list((out / "nats").rglob("*.parquet"))) == 1  # replaced, not added


def test_output_path_that_is_a_file_is_refused(capture, tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("precious")
    r = _cli("dissect", str(capture), "-o", str(target))
    assert r.returncode == 2
    assert target.read_text() == "precious"


def test_nothing_from_the_input_is_evaluated_or_unpickled():
    """Static check backing docs/robustness.md: no eval/exec/pickle/marshal/yaml on any
    path that reads captures, key logs or datasets (pickle appears only in the Spark
    driver, for results its own tasks produced)."""
    root = Path(__file__).resolve().parents[2]
    bad = re.compile(r"\b(eval|exec)\(|\bpickle\.loads?\(|\bmarshal\.loads?\(|"
                     r"\byaml\.(unsafe_)?load\(|\bshelve\.|allow_pickle\s*=\s*True")
    hits = []
    for pkg in ("reassembly", "dissectors", "analyzer"):
        for f in (root / pkg).rglob("*.py"):
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if bad.search(line) and not line.lstrip().startswith("#"):
                    hits.append(f"{f.relative_to(root)}:{n}")
    assert all(h.startswith("analyzer/spark/ingest.py:") for h in hits), hits


ROUTE_PASS = "ROUTE-PW-0016"


def test_route_connect_credentials_are_redacted(tmp_path):
    """A cluster route authenticates with CONNECT user/pass too (nats_cluster table)."""
    path = tmp_path / "route.pcap"
    w = PcapWriter(path)
    conv = Conversation(w, 42100, 6222).handshake()
    # what nats-server 2.10 sends on a route: INFO with route_pool_size, CONNECT with lnoc
    conv.send(1, b'INFO {"server_id":"B","cluster":"c1","route_pool_size":3,"lnoc":true,'
                 b'"ip":"nats-route://b:6222/"}\r\n')
    conv.send(0, _connect(json.dumps({
        "echo": False, "verbose": False, "pedantic": False, "user": "ruser",
        "pass": ROUTE_PASS, "tls_required": False, "headers": True, "name": "A",
        "cluster": "c1", "dynamic": True, "lnoc": True, "lnocu": True})) + b"PING\r\n")
    conv.fin()
    w.close()
    out = tmp_path / "out"
    dissect_capture(path, out, Options())
    assert leaks(out, [ROUTE_PASS]) == []
    # whichever dissector took the link (nats, or nats_cluster for server links), its
    # CONNECT row is there with the password's marker
    connects = [r for table in ("nats", "nats_cluster") if (out / table).is_dir()
                for f in (out / table).rglob("*.parquet") for r in pq.read_table(f).to_pylist()
                if r.get("op") == "CONNECT"]
    assert len(connects) == 1 and marker(ROUTE_PASS.encode()) in connects[0]["json_raw"]

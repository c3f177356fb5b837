"""`msgcap follow` shows what was decrypted (issue 23 part 4): with --keylog the bytes of a
TLS flow (NATS STARTTLS, samples/nats-tls.pcap) and of a WebSocket-over-TLS flow
(samples/nats-ws.pcap) are the plaintext the client wrote and read -- checked against the
client-side stream digests of the truth files -- raw and --decoded, as for QUIC; without
the secrets the output says the bytes are encrypted instead of printing ciphertext as if
it were the protocol."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from analyzer.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TLS, TLS_KEYS = SAMPLES / "nats-tls.pcap", SAMPLES / "nats-tls.keys"
WS, WS_KEYS = SAMPLES / "nats-ws.pcap", SAMPLES / "nats-ws.keys"
QUIC, QUIC_KEYS = SAMPLES / "felix-quic.pcap", SAMPLES / "felix-quic.keys"
ENCRYPTED = re.compile(rb"\[(\d+) bytes of TLS, (c2s|s2c), encrypted\]")


def _truth(pcap: Path) -> dict:
    return json.loads(pcap.with_suffix(".truth.json").read_text())


def _follow(capfdbinary, *args: str) -> tuple[int, bytes, str]:
    # --keep-secrets: the bytes as they are (the redaction gate would touch CONNECT)
    code = main(["follow", *args, "--keep-secrets"])
    got = capfdbinary.readouterr()
    return code, got.out, got.err.decode()


def _flow_of(pcap: Path, client_port: int, capfdbinary) -> int:
    main(["flows", str(pcap), "--json"])  # exit 1: TLS without secrets is an anomaly
    flows = json.loads(capfdbinary.readouterr().out)
    return next(f["flow_id"] for f in flows if f["client_port"] == client_port)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name", ["pub13", "sub12", "chacha12", "first13"])
def test_tls_follow_with_keylog_is_exactly_what_the_client_wrote_and_read(name, capfdbinary):
    conn = _truth(TLS)["connections"][name]
    fid = _flow_of(TLS, conn["client_port"], capfdbinary)
    for direction, side in (("c2s", "sent"), ("s2c", "received")):
        for mode in ([], ["--raw"]):
            code, out, err = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--direction",
                                     direction, "--keylog", str(TLS_KEYS), *mode)
            assert code == 0, err
            assert (len(out), _sha(out)) == (conn[side]["stream_bytes"],
                                             conn[side]["stream_sha256"]), (name, direction)
            assert "TLS decrypted" in err


def test_tls_follow_shows_the_published_lines(capfdbinary):
    conn = _truth(TLS)["connections"]["pub13"]
    fid = _flow_of(TLS, conn["client_port"], capfdbinary)
    _, out, _ = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--direction", "c2s",
                        "--keylog", str(TLS_KEYS))
    assert b"PUB secure.msg.0  17\r\nsecret payload 0 \r\n" in out
    assert b"PUB secure.msg.7  136\r\n" + b"secret payload 7 " * 8 + b"\r\n" in out


def test_tls_follow_without_keylog_says_encrypted_never_prints_ciphertext(capfdbinary):
    conn = _truth(TLS)["connections"]["pub13"]
    fid = _flow_of(TLS, conn["client_port"], capfdbinary)
    code, out, err = _follow(capfdbinary, str(TLS), "--flow", str(fid))
    assert code == 1  # incomplete: part of the flow is only known as ciphertext
    info, sep, rest = out.partition(b"\r\n")
    assert info.startswith(b"INFO {") and b'"tls_required":true' in info and sep
    # after the plaintext INFO: only markers, whose sizes are the TLS bytes of the flow
    assert ENCRYPTED.sub(b"", rest) == b""
    sizes = {"c2s": 0, "s2c": 0}
    for n, d in ENCRYPTED.findall(rest):
        sizes[d.decode()] += int(n)
    main(["flows", str(TLS), "--json"])
    flows = json.loads(capfdbinary.readouterr().out)
    (f,) = [f for f in flows if f["flow_id"] == fid]
    assert sizes == {"c2s": f["stream_bytes_c2s"],
                     "s2c": f["stream_bytes_s2c"] - len(info) - len(sep)}
    assert "stays encrypted" in err and "--keylog" in err
    # --raw: the INFO alone on stdout; what was left out is listed on stderr
    code, out, err = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--raw")
    assert code == 1 and out == info + sep
    listed = {"c2s": 0, "s2c": 0}
    for d, n in re.findall(r"encrypted (c2s|s2c) (\d+) bytes \(TLS, not decrypted\)", err):
        listed[d] += int(n)
    assert listed == sizes


def test_transport_only_is_the_tcp_bytes_as_captured(capfdbinary):
    conn = _truth(TLS)["connections"]["pub13"]
    fid = _flow_of(TLS, conn["client_port"], capfdbinary)
    code, out, _ = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--direction", "c2s",
                           "--transport-only")
    assert code == 0
    assert out[:3] == b"\x16\x03\x01" and out[5] == 1  # a TLS record with a ClientHello
    assert b"PUB secure" not in out
    code, _, err = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--transport-only",
                           "--keylog", str(TLS_KEYS))
    assert code == 2 and err.startswith("error: ") and "\nfix: " in err


@pytest.mark.parametrize("name", ["ws-plain", "ws-deflate", "wss-deflate"])
def test_websocket_follow_is_the_nats_bytes_inside_the_messages(name, capfdbinary):
    truth = _truth(WS)
    conn = truth["connections"][name]
    fid = _flow_of(WS, conn["client_port"], capfdbinary)
    for direction, side in (("c2s", "sent"), ("s2c", "received")):
        code, out, err = _follow(capfdbinary, str(WS), "--flow", str(fid), "--direction",
                                 direction, "--keylog", str(WS_KEYS), "--raw")
        assert code == 0, err
        assert (len(out), _sha(out)) == (conn[side]["stream_bytes"],
                                         conn[side]["stream_sha256"]), (name, direction)
    code, out, _ = _follow(capfdbinary, str(WS), "--flow", str(fid), "--direction", "c2s",
                           "--keylog", str(WS_KEYS))
    marker = (b"[WebSocket GET / -> 101: message payloads follow, unmasked"
              + (b", permessage-deflate inflated]" if conn["compression"] else b"]"))
    assert code == 0 and out.startswith(marker + b"CONNECT {")
    assert b"PUB ws.msg.0 22\r\nhello over websocket 0\r\n" in out


def test_wss_without_keylog_says_encrypted(capfdbinary):
    conn = _truth(WS)["connections"]["wss-deflate"]
    assert conn["tls"] is True
    fid = _flow_of(WS, conn["client_port"], capfdbinary)
    code, out, err = _follow(capfdbinary, str(WS), "--flow", str(fid), "--direction", "c2s")
    assert code == 1
    assert ENCRYPTED.fullmatch(out) and b"GET " not in out
    assert "stays encrypted" in err


def test_decoded_follow_with_and_without_keylog(capfdbinary):
    conn = _truth(TLS)["connections"]["pub13"]
    fid = _flow_of(TLS, conn["client_port"], capfdbinary)
    code, out, _ = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--decoded", "-q",
                           "--keylog", str(TLS_KEYS))
    assert code == 0
    lines = out.decode().splitlines()
    assert sum(" C→S PUB " in line for line in lines) == conn["sent"]["ops"]["PUB"]
    assert any(re.search(r'C→S PUB +subject=secure\.msg\.0 len=17  "secret payload 0 "$',
                         line) for line in lines)
    code, out, _ = _follow(capfdbinary, str(TLS), "--flow", str(fid), "--decoded", "-q")
    text = out.decode()
    assert " PUB " not in text and "tls.undecryptable" in text and "stays encrypted" in text
    ws = _truth(WS)["connections"]["wss-deflate"]
    wfid = _flow_of(WS, ws["client_port"], capfdbinary)
    code, out, _ = _follow(capfdbinary, str(WS), "--flow", str(wfid), "--decoded", "-q",
                           "--keylog", str(WS_KEYS))
    lines = out.decode().splitlines()
    assert code == 0
    assert any(re.search(r'C→S PUB +subject=ws\.msg\.0 len=22  "hello over websocket 0"$',
                         line) for line in lines)


def test_quic_follow_needs_its_secrets(capfdbinary):
    code, out, _ = _follow(capfdbinary, str(QUIC), "--flow", "0", "--keylog", str(QUIC_KEYS))
    assert code == 0 and out.startswith(b"[QUIC stream 0 c2s]FLX1")
    assert b'{"type":"auth_ok","server_flags":16383}' in out
    code, out, err = _follow(capfdbinary, str(QUIC), "--flow", "0")
    assert code == 2 and out == b""
    assert "carries no stream bytes" in err and "--keylog" in err

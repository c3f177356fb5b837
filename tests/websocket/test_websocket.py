"""The WebSocket layer: upgrade detection, masking, fragments, permessage-deflate (with and
without context takeover, with the inflate cap), control frames, gaps; and NATS over a
real nats-server websocket listener (plain, compressed, wss) against client truth."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture
from dissectors.sdk.testing import Data, Gap
from reassembly.engine import read_events
from reassembly.events import (
    Anomaly,
    StreamData,
    StreamGap,
    WebSocketControl,
    WebSocketHandshake,
)
from reassembly.limits import Limits
from reassembly.websocket import accept_key, parse_extensions
from tests.tls.helpers import C, Dissected, S, assert_accounting, flow_pcap

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def request(path: str = "/", ext: str | None = None) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: nats.example", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {KEY}", "Sec-WebSocket-Version: 13",
             "Origin: https://app.example"]
    if ext:
        lines.append(f"Sec-WebSocket-Extensions: {ext}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def response(ext: str | None = None, status: int = 101) -> bytes:
    lines = [f"HTTP/1.1 {status} Switching Protocols", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Accept: {accept_key(KEY)}"]
    if ext:
        lines.append(f"Sec-WebSocket-Extensions: {ext}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def frame(payload: bytes, opcode: int = 2, fin: bool = True, mask: bool = False,
          rsv1: bool = False) -> bytes:
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        head = bytes([b0, (0x80 if mask else 0) | n])
    elif n < 65536:
        head = bytes([b0, (0x80 if mask else 0) | 126]) + struct.pack("!H", n)
    else:
        head = bytes([b0, (0x80 if mask else 0) | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def cframe(payload: bytes, **kw) -> bytes:
    return frame(payload, mask=True, **kw)


def deflate_messages(msgs: list[bytes], takeover: bool = True) -> list[bytes]:
    comp = zlib.compressobj(wbits=-15)
    out = []
    for m in msgs:
        if not takeover:
            comp = zlib.compressobj(wbits=-15)
        data = comp.compress(m) + comp.flush(zlib.Z_SYNC_FLUSH)
        assert data.endswith(b"\x00\x00\xff\xff")
        out.append(data[:-4])
    return out


def _stream(evs, direction) -> bytes:
    out = b""
    for e in evs:
        if isinstance(e, StreamData) and e.direction == direction:
            assert e.offset == len(out)
            out += e.data
        elif isinstance(e, StreamGap) and e.direction == direction:
            out += b"?" * e.nbytes
    return out


def test_accept_key_rfc6455_example_and_extension_parsing():
    assert accept_key(KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert parse_extensions("permessage-deflate; client_max_window_bits=10; "
                            "server_no_context_takeover, x-other") == {
        "permessage-deflate": {"client_max_window_bits": "10",
                               "server_no_context_takeover": ""}, "x-other": {}}


def test_upgrade_unmask_fragments_and_control_frames(tmp_path):
    script = [
        (C, request("/nats")), (S, response()),
        (S, frame(b'INFO {"server_id":"x"}\r\n', opcode=1)),
        (C, cframe(b"CONNECT {}\r\nPUB a 5", opcode=1, fin=False)),
        (C, cframe(b"ping-1", opcode=9)),  # a control frame between the fragments
        (C, cframe(b"\r\nhello\r\n", opcode=0, fin=True)),
        (S, frame(b"ping-1", opcode=10)),
        (C, cframe(b"\x03\xe8bye", opcode=8)), (S, frame(b"\x03\xe8", opcode=8)),
    ]
    evs = list(read_events(flow_pcap(tmp_path, script, port=8080)))
    assert _stream(evs, C) == b"CONNECT {}\r\nPUB a 5\r\nhello\r\n"
    assert _stream(evs, S) == b'INFO {"server_id":"x"}\r\n'
    (hs,) = [e for e in evs if isinstance(e, WebSocketHandshake)]
    assert (hs.path, hs.status, hs.accept_ok, hs.deflate) == ("/nats", 101, True, False)
    assert hs.origin == "https://app.example" and hs.host == "nats.example"
    ctl = [(e.direction, e.opcode, e.payload, e.close_code, e.close_reason)
           for e in evs if isinstance(e, WebSocketControl)]
    assert ctl == [(C, 9, b"ping-1", None, None), (S, 10, b"ping-1", None, None),
                   (C, 8, b"\x03\xe8bye", 1000, "bye"), (S, 8, b"\x03\xe8", 1000, "")]
    assert not [e for e in evs if isinstance(e, Anomaly)]


@pytest.mark.parametrize("takeover", [True, False])
def test_permessage_deflate_with_and_without_context_takeover(tmp_path, takeover):
    ext = "permessage-deflate" + ("" if takeover else
                                  "; client_no_context_takeover; server_no_context_takeover")
    msgs = [b"PUB a 11\r\nhello hello\r\n", b"PUB a 11\r\nhello hello\r\n" * 3, b"PING\r\n"]
    comp = deflate_messages(msgs, takeover)
    script = [(C, request(ext=ext)), (S, response(ext))]
    script += [(C, cframe(c, opcode=1, rsv1=True)) for c in comp[:2]]
    # the third message: compressed and fragmented
    c3 = comp[2]
    script += [(C, cframe(c3[:2], opcode=1, rsv1=True, fin=False)),
               (C, cframe(c3[2:], opcode=0))]
    srv = deflate_messages([b"MSG a 1 5\r\nhello\r\n"] * 3, takeover)
    script += [(S, frame(c, rsv1=True)) for c in srv]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    assert _stream(evs, C) == b"".join(msgs)
    assert _stream(evs, S) == b"MSG a 1 5\r\nhello\r\n" * 3
    (hs,) = [e for e in evs if isinstance(e, WebSocketHandshake)]
    assert hs.deflate


def test_inflate_cap_cuts_a_decompression_bomb(tmp_path):
    bomb = deflate_messages([b"\x00" * 2_000_000], takeover=False)[0]
    ext = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"
    script = [(C, request(ext=ext)), (S, response(ext)), (C, cframe(bomb, rsv1=True)),
              (C, cframe(deflate_messages([b"PING\r\n"])[0], rsv1=True))]
    pcap = flow_pcap(tmp_path, script)
    from reassembly.capture import open_capture
    from reassembly.engine import Reassembler
    from reassembly.websocket import WebSocketLayer

    limits = replace(Limits(), ws_max_inflated_bytes=100_000)
    with open_capture(pcap) as reader:
        evs = list(WebSocketLayer(limits).process(Reassembler(limits).process(reader)))
    data = _stream(evs, C)
    assert data.startswith(b"\x00" * 100_000) and data.endswith(b"PING\r\n")
    assert len(data) == 100_000 + 6
    assert [e.kind for e in evs if isinstance(e, Anomaly)] == ["limit.websocket_inflate"]


def test_gap_inside_a_payload_is_a_gap_of_the_same_size(tmp_path):
    f1 = cframe(b"PUB a 10\r\n0123456789\r\n")
    script = [Data(C, request()), Data(S, response()), Data(C, f1[:10]), Gap(C, 6),
              Data(C, f1[16:]), Data(C, cframe(b"PING\r\n"))]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    assert _stream(evs, C) == b"PUB ??????0123456789\r\nPING\r\n"


def test_gap_across_frames_loses_the_direction_once(tmp_path):
    f1, f2 = cframe(b"PUB a 1\r\nx\r\n"), cframe(b"PUB a 1\r\ny\r\n")
    script = [Data(C, request()), Data(S, response()), Data(C, f1[:5]),
              Gap(C, len(f1) - 5 + 3), Data(C, f2[3:]), Data(C, cframe(b"PING\r\n"))]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    kinds = [e.kind for e in evs if isinstance(e, Anomaly)]
    assert kinds == ["websocket.lost_sync"]
    assert all(isinstance(e, StreamGap) for e in evs
               if isinstance(e, StreamData | StreamGap) and e.direction == C
               and e.offset > 0)


def test_refused_upgrade_and_plain_http_pass_through(tmp_path):
    script = [(C, request()), (S, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")]
    evs = list(read_events(flow_pcap(tmp_path, script, port=80)))
    (hs,) = [e for e in evs if isinstance(e, WebSocketHandshake)]
    assert hs.status == 403
    assert [e.kind for e in evs if isinstance(e, Anomaly)] == ["websocket.refused"]
    assert _stream(evs, C) == request()
    plain = [(C, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), (S, b"HTTP/1.1 200 OK\r\n\r\nhi")]
    evs = list(read_events(flow_pcap(tmp_path, plain, port=80, name="h.pcap")))
    assert _stream(evs, S) == b"HTTP/1.1 200 OK\r\n\r\nhi"
    assert not [e for e in evs if isinstance(e, WebSocketHandshake)]


def test_unmasked_client_frames_are_read_and_reported(tmp_path):
    script = [(C, request()), (S, response()), (C, frame(b"PING\r\n")),
              (C, frame(b"PING\r\n"))]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    assert _stream(evs, C) == b"PING\r\nPING\r\n"
    assert [e.kind for e in evs if isinstance(e, Anomaly)] == ["websocket.masking"]


# -- the real capture ------------------------------------------------------------------

TRUTH = json.loads((SAMPLES / "nats-ws.truth.json").read_text())


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Dissected:
    return Dissected(SAMPLES / "nats-ws.pcap", tmp_path_factory.mktemp("ws") / "out",
                     SAMPLES / "nats-ws.keys", payload_cap=None)


@pytest.mark.parametrize("name", sorted(TRUTH["connections"]))
def test_nats_over_websocket_equals_client_truth(ws: Dissected, name: str):
    conn = TRUTH["connections"][name]
    (f,) = [f for f in ws.rows("flows") if f["client_port"] == conn["client_port"]]
    assert f["protocol"] == "nats"
    assert f["layers"] == (["tls", "websocket"] if conn["tls"] else ["websocket"])
    nats = [r for r in ws.rows("nats") if r["flow_id"] == f["flow_id"]]
    for d, side in (("c2s", "sent"), ("s2c", "received")):
        rows = [r for r in nats if r["direction"] == d]
        assert Counter(r["op"] for r in rows) == Counter(conn[side]["ops"]), (name, d)
        sha = hashlib.sha256()
        for r in rows:
            if r["payload"] is not None:
                sha.update(len(r["payload"]).to_bytes(8, "big") + r["payload"])
        assert sha.hexdigest() == conn[side]["payload_sha256"], (name, d)
        assert f[f"stream_bytes_{d}"] == conn[side]["stream_bytes"], (name, d)
        assert f[f"decoded_bytes_{d}"] == conn[side]["stream_bytes"]
    hs = [r for r in ws.rows("websocket") if r["flow_id"] == f["flow_id"]]
    kinds = Counter(r["kind"] for r in hs)
    assert kinds == Counter({"handshake": 1, "ping": 1, "pong": 1, "close": 2})
    (h,) = [r for r in hs if r["kind"] == "handshake"]
    assert h["status"] == 101 and h["accept_ok"] and h["deflate"] == conn["compression"]
    assert {r["close_code"] for r in hs if r["kind"] == "close"} == {1000}


def test_websocket_capture_is_clean(ws: Dissected):
    assert ws.rows("anomalies") == []
    assert_accounting(ws)


def test_wss_without_keys_is_undecryptable_not_websocket(tmp_path):
    d = Dissected(SAMPLES / "nats-ws.pcap", tmp_path / "out")
    assert d.kinds() == ["tls.undecryptable"]
    layers = sorted(tuple(f["layers"]) for f in d.rows("flows"))
    assert layers == [("tls-encrypted",), ("websocket",), ("websocket",)]


def test_dissect_capture_api_with_options_only(tmp_path):
    r = dissect_capture(SAMPLES / "nats-ws.pcap", tmp_path / "o",
                        Options(keylog=str(SAMPLES / "nats-ws.keys")))
    assert r.rows["websocket"] == 15 and r.flows_by_protocol == Counter({"nats": 3})


def test_control_frame_cut_across_packets_names_its_first_and_last_packet(tmp_path):
    """The frame bytes wait in the side's provenance buffer: a control frame whose header
    is cut by a packet boundary is stamped with the packet of its first byte and the one
    of its last, and a data frame cut the same way reads as if whole."""
    ping = cframe(b"ping-1", opcode=9)
    data = cframe(b"PUB a 2\r\nhi\r\n", opcode=1)
    script = [(C, request("/nats")), (S, response()),
              (C, ping[:1]), (C, ping[1:8]), (C, ping[8:] + data[:3]), (C, data[3:])]
    evs = list(read_events(flow_pcap(tmp_path, script, port=8080)))
    assert _stream(evs, C) == b"PUB a 2\r\nhi\r\n"
    (ctl,) = [e for e in evs if isinstance(e, WebSocketControl)]
    assert (ctl.opcode, ctl.payload, ctl.nbytes) == (9, b"ping-1", len(ping))
    assert ctl.frame_last - ctl.frame_first == 2  # three consecutive client packets
    assert ctl.ts_last_ns > ctl.ts_first_ns
    assert not [e for e in evs if isinstance(e, Anomaly)]

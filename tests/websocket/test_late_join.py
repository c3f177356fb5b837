"""Joining late (issue 23 part 5): WebSocket connections captured after their upgrade,
recognised from their frames.  Real: ``nats-ws.pcap`` with a connection's upgrade and
first messages cut away (its TCP handshake kept, so roles are known; or nothing of its
start kept, roles then from the ports); the NATS rows after the cut must be those of
the uncut capture.  Crafted: a compressed direction whose window began before the
capture, and plain NATS joined mid-stream, which is never taken for WebSocket."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from reassembly.engine import read_events
from reassembly.events import Anomaly, StreamData, StreamGap
from reassembly.websocket import WebSocketJoin

# Data and Gap through the TLS helpers: wherever the test helpers live, they import them
from tests.tls.helpers import C, Data, Dissected, Gap, S, assert_accounting, flow_pcap
from tests.websocket import capcut
from tests.websocket.test_websocket import frame

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PCAP = SAMPLES / "nats-ws.pcap"
KEYS = SAMPLES / "nats-ws.keys"
# client ports of the two clear-text connections (samples/nats-ws.truth.json)
PLAIN, DEFLATE = 43800, 43802


def _content(rows: list[dict]) -> list[tuple]:
    return [(r["direction"], r["op"], r["subject"], r["sid"], r["reply_to"], r["payload"])
            for r in rows]


def _flow(d: Dissected, port: int) -> dict:
    (f,) = [f for f in d.rows("flows") if port in (f["client_port"], f["server_port"])]
    return f


def _nats(d: Dissected, flow_id: int) -> list[dict]:
    return [r for r in d.rows("nats") if r["flow_id"] == flow_id]


@pytest.fixture(scope="module")
def uncut(tmp_path_factory) -> Dissected:
    return Dissected(PCAP, tmp_path_factory.mktemp("uncut") / "out", KEYS, payload_cap=None)


def _run(tmp_path: Path, keep: Callable[[capcut.Packet], bool]) -> Dissected:
    pcap = capcut.cut(PCAP, tmp_path / "cut.pcap", keep)
    return Dissected(pcap, tmp_path / "out", KEYS, payload_cap=None)


def _first_data(port: int, nth: int) -> int:
    """Packet number of the ``nth`` (0-based) packet with payload of that connection."""
    _, packets = capcut.read(PCAP)
    return [p.number for p in packets if port in p.ports and p.payload][nth]


# (connection, data packets cut): ws-plain from its fragmented PUB's second frame (the
# client direction joins inside a 26,000-byte message), ws-deflate after its first PUBs
@pytest.mark.parametrize(("port", "skip"), [(PLAIN, 16), (DEFLATE, 9)])
def test_joined_after_the_upgrade_decodes_what_follows(tmp_path, uncut, port, skip):
    cut_at = _first_data(port, skip)
    d = _run(tmp_path, lambda p: port not in p.ports or not p.payload or p.number >= cut_at)
    f = _flow(d, port)
    assert (f["client_port"], f["protocol"], f["layers"]) == (port, "nats", ["websocket"])
    (join,) = [r for r in d.rows("websocket") if r["flow_id"] == f["flow_id"]
               and r["kind"] != "close" and r["kind"] != "ping" and r["kind"] != "pong"]
    assert join["kind"] == "joined" and join["client_direction"] == "c2s"
    assert join["deflate"] == (port == DEFLATE)
    # the lost upgrade and frames are gaps; every byte after them is accounted for
    assert f["gap_bytes_c2s"] > 0 and f["gap_bytes_s2c"] > 0
    assert_accounting(d)
    # exactly the uncut capture's rows that began after the cut
    old = _flow(uncut, port)
    after = [r for r in _nats(uncut, old["flow_id"]) if r["frame_first"] >= cut_at]
    got = _nats(d, f["flow_id"])
    for x in ("c2s", "s2c"):
        assert _content([r for r in got if r["direction"] == x]) == _content(
            [r for r in after if r["direction"] == x]), x
    assert {a["kind"] for a in d.rows("anomalies") if a["flow_id"] == f["flow_id"]} <= {
        "tcp.gap", "nats.resync"}


@pytest.mark.parametrize("native", ["1", "0"])
def test_joined_with_nothing_of_its_start_takes_the_masked_side_for_the_client(
        tmp_path, uncut, monkeypatch, native):
    """No SYN either: the port hint takes the recorder's server (on the higher port) for
    the client; the masking says otherwise and the flow's roles are swapped (flows
    table, directions of every row), so its NATS rows are the uncut run's after the
    cut, with their directions.  With the native engine and without it."""
    monkeypatch.setenv("MSGCAP_NATIVE_ENGINE", native)
    cut_at = _first_data(PLAIN, 16)
    d = _run(tmp_path, lambda p: PLAIN not in p.ports or p.number >= cut_at)
    f = _flow(d, PLAIN)
    assert (f["client_port"], f["role_source"], f["protocol"]) == (
        PLAIN, "websocket-mask", "nats")
    assert f["mid_stream_c2s"] and f["mid_stream_s2c"] and f["layers"] == ["websocket"]
    (join,) = [r for r in d.rows("websocket")
               if r["flow_id"] == f["flow_id"] and r["kind"] == "joined"]
    assert join["client_direction"] == "c2s" and join["first_frame_c2s"] == 0
    kinds = [a["kind"] for a in d.rows("anomalies") if a["flow_id"] == f["flow_id"]]
    assert "websocket.roles" not in kinds and kinds.count("flow.roles_swapped") == 1
    assert_accounting(d)
    old = _flow(uncut, PLAIN)
    after = [r for r in _nats(uncut, old["flow_id"]) if r["frame_first"] >= cut_at]
    got = _nats(d, f["flow_id"])
    assert {r["direction"] for r in after} == {"c2s", "s2c"}
    for x in ("c2s", "s2c"):
        assert _content([r for r in got if r["direction"] == x]) == _content(
            [r for r in after if r["direction"] == x]), x


def test_compressed_direction_whose_window_began_before_the_capture(tmp_path):
    """Context takeover: a message that refers to bytes sent before the capture cannot
    be inflated; said once, the rest of the direction is an unreadable gap."""
    z = zlib.compressobj(wbits=-15)
    msgs = []
    for text in (b"PUB orders.new 5\r\nhello\r\n", b"PUB orders.new 5\r\nhello\r\n"):
        body = z.compress(text) + z.flush(zlib.Z_SYNC_FLUSH)
        assert body.endswith(b"\x00\x00\xff\xff")
        msgs.append(frame(body[:-4], mask=True, rsv1=True))
    server = [frame(b"MSG a 1 2\r\nhi\r\n") for _ in range(3)]
    # the capture joins after the first message: the second one copies from it
    ping = frame(b"PING\r\n", mask=True)
    script = [Gap(C, 700), Gap(S, 900), Data(C, msgs[1]), *(Data(S, x) for x in server),
              Data(C, ping)]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    (join,) = [e for e in evs if isinstance(e, WebSocketJoin)]
    assert join.client == C and join.deflate
    (lost,) = [e for e in evs if isinstance(e, Anomaly) and e.kind == "websocket.lost_sync"]
    assert "began before the capture" in lost.detail
    s2c = b"".join(e.data for e in evs if isinstance(e, StreamData) and e.direction == S)
    assert s2c == b"MSG a 1 2\r\nhi\r\n" * 3
    c2s_gaps = sum(e.nbytes for e in evs if isinstance(e, StreamGap) and e.direction == C)
    # the lost start, the compressed payload (after its 6-byte header), the whole PING
    assert c2s_gaps == 700 + len(msgs[1]) - 6 + len(ping)
    assert not [e for e in evs if isinstance(e, StreamData) and e.direction == C]


def test_plain_nats_joined_mid_stream_is_not_websocket(tmp_path):
    script = [Gap(C, 100), Gap(S, 100), Data(S, b"1 3\r\nabc\r\nMSG a 1 3\r\nabc\r\n"),
              Data(C, b"\r\nPUB a 3\r\nabc\r\n")]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    assert not [e for e in evs if isinstance(e, (WebSocketJoin, Anomaly))
                and not (isinstance(e, Anomaly) and e.kind == "tcp.gap")]


def test_looking_is_bounded_on_a_flow_of_tiny_binary_segments(tmp_path, monkeypatch):
    """2,000 one-byte segments of binary junk, joined mid-stream: the search for a first
    frame runs every LATE_SEARCH_STEP bytes, not per segment, and ends at
    LATE_LOOK_BYTES; nothing is lost or claimed."""
    import reassembly.websocket as ws

    calls = 0
    chain = ws._chain

    def counting(buf: bytes, k: int):
        nonlocal calls
        calls += 1
        return chain(buf, k)

    monkeypatch.setattr(ws, "_chain", counting)
    junk = bytes((i * 7 + 3) % 256 | 0x30 for i in range(2000))  # no frame run in it
    script = [Gap(C, 10), *(Data(C, junk[i : i + 1]) for i in range(len(junk)))]
    evs = list(read_events(flow_pcap(tmp_path, script)))
    assert not [e for e in evs if isinstance(e, WebSocketJoin)]
    got = b"".join(e.data for e in evs if isinstance(e, StreamData))
    assert got == junk
    assert calls < 2000 * len(junk) // ws.LATE_SEARCH_STEP + 4 * len(junk)


def test_the_memory_budget_decides_a_flow_still_looked_at():
    """Held events are charged; past the budget the flow is decided on what was seen:
    here one unmasked and one masked frame (the start of a large one), enough."""
    from reassembly.events import Endpoint, FlowInfo, RoleSource, Transport
    from reassembly.limits import Limits
    from reassembly.websocket import WebSocketLayer

    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 80),
                    RoleSource.PORT, 0, 0, 1, 1)
    flow.mid_stream[C] = flow.mid_stream[S] = True
    pong, big = frame(b"PONG\r\n"), frame(b"y" * 60_000, mask=True)[:2000]

    def data(d, offset: int, b: bytes) -> StreamData:
        flow.stream_bytes[d] += len(b)
        return StreamData(flow, d, offset, b, 1, 1, 1, 1)

    limits = Limits(memory_limit_bytes=1000).with_budget()
    layer = WebSocketLayer(limits)
    assert list(layer.process([data(S, 0, pong)])) == []  # held: too little to tell
    evs = list(layer.process([data(C, 0, big)]))
    (join,) = [e for e in evs if isinstance(e, WebSocketJoin)]
    assert join.client == C and join.first_frame == (0, 0)
    assert [e.data for e in evs if isinstance(e, StreamData)] == [b"PONG\r\n", b"y" * 1992]
    assert limits.budget.used == 0

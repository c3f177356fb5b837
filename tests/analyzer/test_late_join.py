"""Joining late (issue 23 part 5): a NATS connection whose start was not captured is
claimed when a direction resynchronises on an op that checks out, not only when one
direction opens with an op.  Real: ``nats-basic.pcap`` cut so that its JetStream
client's connection begins mid-stream, both directions inside an operation; the rows
after the cut must be those of the uncut capture, the partial first bytes undecoded.
(WebSocket joined late: ``tests/websocket/test_late_join.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.detect import Detector
from dissectors.api import Direction, Span, Verdict
from dissectors.nats import NatsDissector
from tests.tls.helpers import Dissected, assert_accounting
from tests.websocket import capcut

PCAP = Path(__file__).resolve().parents[2] / "samples" / "nats-basic.pcap"
PORT = 51780  # the JetStream client (samples/nats-basic.truth.json)
C, S = Direction.C2S, Direction.S2C


def _content(rows: list[dict]) -> list[tuple]:
    return [(r["direction"], r["op"], r["subject"], r["sid"], r["reply_to"],
             r["payload_sha256"]) for r in rows]


def _flow(d: Dissected) -> dict:
    (f,) = [f for f in d.rows("flows") if f["client_port"] == PORT]
    return f


@pytest.fixture(scope="module")
def uncut(tmp_path_factory) -> Dissected:
    return Dissected(PCAP, tmp_path_factory.mktemp("uncut") / "out")


def _data_packets() -> list[capcut.Packet]:
    _, packets = capcut.read(PCAP)
    return [p for p in packets if PORT in p.ports and p.payload]


def test_both_directions_joined_inside_an_op(tmp_path, uncut):
    """The capture starts at a server MSG 50 bytes into its control line; the client's
    next PUB, 20 bytes in, follows (the server's ACK shows those 20 were sent: a gap)."""
    packets = _data_packets()
    # the first MSG from the server after the SUBs, and the PUB that follows it
    first = next(i for i, p in enumerate(packets) if p.payload.startswith(b"MSG "))
    msg, pub = packets[first], packets[first + 1]
    assert pub.payload.startswith(b"PUB ") and pub.ports[0] == PORT
    pcap = capcut.cut(PCAP, tmp_path / "cut.pcap",
                      lambda p: PORT not in p.ports or p.number >= msg.number,
                      trim={msg.number: 50, pub.number: 20})
    d = Dissected(pcap, tmp_path / "out")
    f = _flow(d)
    assert f["protocol"] == "nats" and f["layers"] == []
    assert f["mid_stream_c2s"] and f["mid_stream_s2c"]
    # what is left of the two cut ops is read by nobody, but counted
    assert f["undecoded_bytes_s2c"] == len(msg.payload) - 50
    assert f["undecoded_bytes_c2s"] == len(pub.payload) - 20
    assert f["gap_bytes_c2s"] == 20
    assert_accounting(d)
    old = _flow(uncut)
    after = [r for r in uncut.rows("nats")
             if r["flow_id"] == old["flow_id"] and r["frame_first"] > pub.number]
    got = [r for r in d.rows("nats") if r["flow_id"] == f["flow_id"]]
    for x in ("c2s", "s2c"):
        assert _content([r for r in got if r["direction"] == x]) == _content(
            [r for r in after if r["direction"] == x]), x
    # each joined direction starts looking for an op: one resync saying why, no
    # unknown_op for its partial first line
    mine = [a for a in d.rows("anomalies") if a["flow_id"] == f["flow_id"]]
    assert sorted(set(a["kind"] for a in mine)) == ["nats.resync", "tcp.gap"]
    resyncs = [a for a in mine if a["kind"] == "nats.resync"]
    assert sorted(a["direction"] for a in resyncs) == ["c2s", "s2c"]
    assert all("start of this direction was not captured" in a["detail"] for a in resyncs)


def test_probe_joined_needs_a_whole_op():
    """A PUB line inside somebody's payload is not enough: its payload must end in CRLF
    where it says; junk before the op is passed over; the wrong direction's ops are no."""
    probe = NatsDissector.probe_joined
    assert probe(S, b"ad tail\r\nMSG a 1 3\r\nabc\r\n") is Verdict.YES
    assert probe(C, b"x\r\nPING\r\nPUB a 3\r\nabc\r\n") is Verdict.YES
    # no CRLF where the payload ends: not this op (a later one may still check out)
    assert probe(S, b"ad tail\r\nMSG a 1 3\r\nabcdef") is Verdict.NEED_MORE
    assert probe(S, b"ad tail\r\nPUB a 3\r\nabcdef") is Verdict.NEED_MORE
    # a payload that ends past the prefix cannot be checked: the line decides
    assert probe(S, b"ad tail\r\nMSG a 1 3\r\nab") is Verdict.YES
    assert probe(C, b"ad tail\r\nMSG a 1 3\r\nabc\r\n") is Verdict.NEED_MORE
    assert probe(S, b"\x17\x03\x03" + bytes(9000)) is Verdict.NO


def test_detector_claims_a_flow_begun_by_gaps_on_a_later_op():
    """Detection: a direction begun by a gap is asked ``probe_joined``; while the other
    direction has not spoken, a full prefix of payload tail does not end the wait."""
    from reassembly.events import Endpoint, FlowInfo, RoleSource, Transport

    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 4222),
                    RoleSource.SYN, 0, 0, 1, 1)
    det = Detector([NatsDissector])
    fd = det.start(flow)
    span = Span(100, 0, 0, 1, 1)
    det.gap(fd, C, 0, 100, 0)
    det.data(fd, C, b"z" * 9000, span)
    assert not fd.decided
    det.gap(fd, S, 0, 100, 0)
    records = det.data(fd, S, b"tail\r\nMSG a 1 3\r\nabc\r\n", span)
    assert fd.dissector is NatsDissector
    assert [r.values["op"] for r in records if r.table == "nats"] == ["MSG"]


JS = Path(__file__).resolve().parents[2] / "samples" / "nats-js.pcap"
JS_CLIENT, JS_SERVER = 37220, 47569  # samples/nats-js.truth.json: the server's port is higher


def _js_cut(tmp_path: Path) -> tuple[Path, int]:
    """nats-js.pcap from 20% of its data packets on: nothing of the start kept."""
    _, packets = capcut.read(JS)
    data = [p for p in packets if JS_CLIENT in p.ports and p.payload]
    cut_at = data[len(data) // 5].number
    return capcut.cut(JS, tmp_path / "cut.pcap",
                      lambda p: JS_CLIENT not in p.ports or p.number >= cut_at), cut_at


@pytest.mark.parametrize("native", ["1", "0"])
def test_roles_from_ops_when_nothing_of_the_start_was_captured(tmp_path, monkeypatch, native):
    """nats-js.pcap cut at 20% of its data packets, handshake and all: the port hint
    takes the server (on the higher port) for the client; the ops each direction shows
    (MSG from one, PUB from the other) swap the roles, so the flows table, every row's
    direction and the rows themselves are the uncut run's after the cut."""
    monkeypatch.setenv("MSGCAP_NATIVE_ENGINE", native)
    pcap, cut_at = _js_cut(tmp_path)
    d = Dissected(pcap, tmp_path / "out")
    (f,) = d.rows("flows")
    assert (f["client_port"], f["server_port"], f["role_source"], f["protocol"]) == (
        JS_CLIENT, JS_SERVER, "ops", "nats")
    assert f["mid_stream_c2s"] and f["mid_stream_s2c"]
    assert_accounting(d)
    uncut = Dissected(JS, tmp_path / "uncut")
    (old,) = uncut.rows("flows")
    assert (old["client_port"], old["role_source"]) == (JS_CLIENT, "syn")
    after = [r for r in uncut.rows("nats") if r["frame_first"] >= cut_at]
    got = d.rows("nats")
    assert {r["direction"] for r in after} == {"c2s", "s2c"}
    for x in ("c2s", "s2c"):
        assert _content([r for r in got if r["direction"] == x]) == _content(
            [r for r in after if r["direction"] == x]), x
    kinds = [a["kind"] for a in d.rows("anomalies")]
    assert kinds.count("flow.roles_swapped") == 1 and "nats.wrong_direction" not in kinds


def test_follow_a_flow_joined_late(tmp_path, capfdbinary):
    """`msgcap follow` of the cut JetStream flow: raw, each direction is the tail of the
    uncut flow's (the roles as dissect decides them, from the ops); decoded, its NATS
    messages (before the roles were decided from ops it printed none: unclaimed)."""
    from analyzer.cli import main

    pcap, _ = _js_cut(tmp_path)

    def follow(capture: Path, *args: str) -> bytes:
        main(["follow", str(capture), "--flow", "0", *args])
        return capfdbinary.readouterr().out

    for x in ("c2s", "s2c"):
        got, whole = follow(pcap, "--direction", x), follow(JS, "--direction", x)
        assert len(got) > 1000 and whole.endswith(got), x
    assert follow(JS, "--direction", "c2s").startswith(b"CONNECT ")
    decoded = follow(pcap, "--decoded").decode()
    assert "[nats]" in decoded and f"127.0.0.1:{JS_CLIENT} \u21c4" in decoded
    assert "C\u2192S PUB" in decoded and "S\u2192C MSG" in decoded


def test_flow_table_swaps_a_tcp_flow_in_place():
    """``FlowTable.swap_roles`` on a TCP flow joined mid-stream: client/server and the
    per-direction counters swap, one ``flow.roles_swapped`` anomaly marks the point in
    the event order, later segments (and a hole filled after the swap) come out in the
    new orientation, and the flow closes once."""
    from reassembly.events import Anomaly, Endpoint, RoleSource, StreamClose, StreamData
    from reassembly.flows import ROLES_SWAPPED, FlowTable
    from reassembly.limits import Limits
    from tests.reassembly.test_tcp import ACK, seg

    hi, lo = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    events: list = []
    ft = FlowTable(Limits(), events.append)
    # the real server on 47569 speaks first; the port hint takes the lower port (37220)
    ft.tcp(hi, lo, seg(47569, 37220, 1000, 500, ACK, b"MSG a 1 2\r\nhi\r\n"), 1, 1)
    ft.tcp(lo, hi, seg(37220, 47569, 500, 1015, ACK, b"PUB a 2\r\n"), 2, 2)
    # past a hole: held by the client's half while it is still the port hint's s2c
    ft.tcp(lo, hi, seg(37220, 47569, 513, 1015, ACK, b"\r\n"), 3, 3)
    info = events[0].flow
    assert info.client == Endpoint("10.0.0.1", 47569) and info.role_source is RoleSource.PORT
    assert ft.swap_roles(info, RoleSource.OPS)
    assert (info.client, info.server, info.role_source) == (
        Endpoint("10.0.0.2", 37220), Endpoint("10.0.0.1", 47569), RoleSource.OPS)
    assert info.stream_bytes == [9, 15] and info.packets == [2, 1]
    (mark,) = [e for e in events if isinstance(e, Anomaly)]
    assert mark.kind == ROLES_SWAPPED and mark.flow is info
    n = len(events)
    # the hole filled after the swap: the client's bytes, now c2s
    ft.tcp(lo, hi, seg(37220, 47569, 509, 1015, ACK, b"hi\r\n"), 4, 4)
    ft.tcp(hi, lo, seg(47569, 37220, 1015, 515, ACK, b"+OK\r\n"), 5, 5)
    ft.close_all()
    later = [(e.direction.short, e.data) for e in events[n:] if isinstance(e, StreamData)]
    assert later == [("c2s", b"hi\r\n"), ("c2s", b"\r\n"), ("s2c", b"+OK\r\n")]
    assert info.stream_bytes == [15, 20] and info.packets == [3, 2]
    assert len([e for e in events if isinstance(e, StreamClose)]) == 1
    assert not ft.swap_roles(info, RoleSource.OPS)  # closed: nothing to swap

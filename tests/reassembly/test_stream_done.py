"""``StreamDone``: a TCP flow both of whose sides closed with every byte delivered, and
what the conveyor does with it (ends the flow's session then, not one linger later).

Both engines (the native one and ``MSGCAP_NATIVE_ENGINE=0``'s reference) must emit it
at the same place; the conveyor's rows must be those it made when sessions ended at the
``StreamClose`` (the tables compared whole), but for bytes sent after both FINs, which
are counted undecoded now, and said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.testing import dissect_with_cli
from reassembly.capture import open_capture
from reassembly.engine import capture_events
from reassembly.events import StreamClose, StreamData, StreamDone
from samples.hostile.generate import Conversation
from tests.reassembly.synth import PcapWriter

INFO = b'INFO {"server_id":"x"}\r\n'
PUB = b"PUB s 3\r\nabc\r\n"


def _conversation(path: Path, build) -> None:
    w = PcapWriter(path)
    build(Conversation(w, 40000, 4222).handshake().send(1, INFO).send(0, PUB))
    w.close()


def write_bytes_after_both_fins(path: Path) -> None:
    """INFO, a PUB, FINs both ways, then two more PUBs from the client (after its FIN's
    sequence number)."""

    def build(c: Conversation) -> None:
        end = c.off[0] + 1  # (the FIN took a sequence number: the bytes after it)
        c.fin()
        c.send_at(0, end, PUB).send_at(0, end + len(PUB), PUB)

    _conversation(path, build)


def _events(path: Path, **kw) -> list:
    with open_capture(path) as reader:
        return list(capture_events(reader, **kw))


@pytest.fixture(params=["native", "reference"])
def engine(request, monkeypatch):
    monkeypatch.setenv("MSGCAP_NATIVE_ENGINE", "1" if request.param == "native" else "0")
    return request.param


def test_a_clean_close_is_done_after_its_last_byte_and_before_its_close(tmp_path, engine):
    path = tmp_path / "clean.pcap"
    _conversation(path, lambda c: c.fin())
    events = _events(path, stream_done=True)
    kinds = [type(ev) for ev in events]
    assert kinds.count(StreamDone) == 1
    at = kinds.index(StreamDone)
    last_data = max(i for i, k in enumerate(kinds) if k is StreamData)
    assert last_data < at < kinds.index(StreamClose)
    done = events[at]
    # the second FIN's time (the conversation's last packet: no ACK after it)
    assert done.ts_ns == events[kinds.index(StreamClose)].flow.ts_last_ns
    assert b"".join(ev.data for ev in events if type(ev) is StreamData) == INFO + PUB
    # only for a consumer that asks for it: every other one gets the events as before
    assert [type(ev) for ev in _events(path)] == [k for k in kinds if k is not StreamDone]


def test_a_reset_or_a_missing_byte_is_never_done(tmp_path, engine):
    """After a RST, bytes sent before it may still come in late; a FIN whose stream has
    a hole (its segment was never captured) ends with a gap at the close."""
    reset = tmp_path / "reset.pcap"
    _conversation(reset, lambda c: c.reset(0))
    hole = tmp_path / "hole.pcap"
    # the client's FIN says its stream ended 14 bytes later than what was captured
    _conversation(hole, lambda c: c.fin(length=(c.off[0] + len(PUB), c.off[1])))
    for path in (reset, hole):
        events = _events(path, stream_done=True)
        assert not [ev for ev in events if type(ev) is StreamDone], path.name
        # closed (a RST, or FINs both ways), not merely open at the end of the capture
        assert [ev.reason for ev in events if type(ev) is StreamClose] == ["closed"], path.name


def test_the_conveyor_ends_the_session_at_done_with_the_same_rows(tmp_path):
    """A NATS connection closed cleanly: its rows and flow row as before (decoded bytes
    all of the stream, no anomaly); the decoding ended at the second FIN."""
    path = tmp_path / "clean.pcap"
    _conversation(path, lambda c: c.fin())
    run = dissect_with_cli(path, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert [r["op"] for r in run.tables["nats"]] == ["INFO", "PUB"]
    (flow,) = run.tables["flows"]
    assert (flow["decoded_bytes_c2s"], flow["decoded_bytes_s2c"]) == (len(PUB), len(INFO))
    assert (flow["undecoded_bytes_c2s"], flow["undecoded_bytes_s2c"]) == (0, 0)
    assert flow["close_reason"] == "closed"
    assert "anomalies" not in run.tables or not run.tables["anomalies"]


def test_bytes_sent_after_both_fins_are_counted_undecoded_and_said_so(tmp_path):
    """Two PUBs the client sends after both sides closed: the reassembly flags each
    (``tcp.data_after_fin``); the session ended at the close, so the conveyor counts
    them undecoded and says so once (``pipeline.data_after_close``).  Every byte is
    accounted for: the flow's decoded and undecoded bytes add up to its stream."""
    path = tmp_path / "after.pcap"
    write_bytes_after_both_fins(path)
    run = dissect_with_cli(path, tmp_path / "out")
    assert run.returncode == 1, run.stderr  # (anomalies)
    assert [r["op"] for r in run.tables["nats"]] == ["INFO", "PUB"]
    (flow,) = run.tables["flows"]
    assert flow["stream_bytes_c2s"] == 3 * len(PUB)
    assert (flow["decoded_bytes_c2s"], flow["undecoded_bytes_c2s"]) == (len(PUB), 2 * len(PUB))
    kinds = sorted(a["kind"] for a in run.tables["anomalies"])
    assert kinds == ["pipeline.data_after_close", "tcp.data_after_fin", "tcp.data_after_fin"]
    (after,) = [a for a in run.tables["anomalies"] if a["kind"] == "pipeline.data_after_close"]
    assert (after["direction"], after["offset"], after["nbytes"], after["source"]) == (
        "c2s", len(PUB), len(PUB), "pipeline")
    assert "counted undecoded" in after["detail"]


def test_connections_in_their_linger_hold_no_session(tmp_path):
    """50 NATS connections closed one a millisecond: at the end of the capture all are
    in their 10 s linger.  Their sessions ended at their second FIN, so none is alive
    when the end of the capture closes the flows (the first ``StreamClose``); before
    ``StreamDone`` all 50 were."""
    import gc
    import weakref

    from analyzer.flowsummary import _FlowRowSink
    from analyzer.pipeline import CaptureDissection, Options
    from dissectors.registry import discover
    from samples.hostile.generate import write_nats_connections

    path = tmp_path / "closed.pcap"
    write_nats_connections(path, 50, close=True)
    job = CaptureDissection("0" * 16, _FlowRowSink(), discover(), Options(strict=True))
    sessions: weakref.WeakSet = weakref.WeakSet()
    made = job.detector.on_session

    def on_session(fd) -> None:
        sessions.add(fd.session)
        made(fd)

    job.detector.on_session = on_session
    with open_capture(path) as reader:
        for ev in capture_events(reader, job.limits, server_ports=job.server_ports,
                                 roles=job.roles, chunks=True, stream_done=True):
            if type(ev) is StreamClose:
                break
            job.handle(ev)
    gc.collect()
    assert len(sessions) == 0 and len(job._flows) == 50

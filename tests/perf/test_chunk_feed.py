"""Bytes of several packets fed at once with one provenance record per packet
(``ProvenanceBuffer.feed(..., chunks)``, ``FramedSession.feed_chunks``: how the conveyor
takes the native engine's ``CoalescedData``) give what one feed per packet gives:
the same extents, the same records in the same order, the same byte counts."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dissectors.api import Direction, Record, Span
from dissectors.framing import Line, LineFramer
from dissectors.nats.session import NatsSession
from dissectors.sessions import FEED_CHUNKS, FramedSession
from reassembly.events import Endpoint, FlowInfo, RoleSource, Transport
from reassembly.provenance import SEGMENT, Chunk, CoalescedData, ProvenanceBuffer

C2S, S2C = Direction.C2S, Direction.S2C


def _cuts(rng: random.Random, n: int, most: int) -> list[int]:
    """End offsets of random packets over ``n`` bytes (1..``most`` bytes each)."""
    ends, at = [], 0
    while at < n:
        at = min(n, at + rng.randint(1, most))
        ends.append(at)
    return ends


def _records(ends: list[int], base: int) -> list[Chunk]:
    """One chunk record per packet: packet k has time 1000 + k and frame 10 + k."""
    return [(base + e, 1000 + k, 1000 + k, 10 + k, 10 + k) for k, e in enumerate(ends)]


def _groups(rng: random.Random, n: int, most: int) -> list[tuple[int, int]]:
    """Random runs of consecutive packets: ``(first, past_last)`` index pairs."""
    out, i = [], 0
    while i < n:
        j = min(n, i + rng.randint(1, most))
        out.append((i, j))
        i = j
    return out


@pytest.mark.parametrize("seed", range(20))
def test_buffer_fed_runs_resolves_as_fed_packets(seed: int) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randint(1, 5000))
    base = rng.randint(0, 1 << 40)
    ends = _cuts(rng, len(data), 300)
    recs = _records(ends, base)
    one, many = ProvenanceBuffer(base), ProvenanceBuffer(base)
    starts = [0, *ends]
    for k, end in enumerate(ends):
        r = recs[k]
        one.feed(data[starts[k]:end], Span(base + starts[k], r[1], r[2], r[3], r[4]))
    for i, j in _groups(rng, len(ends), 90):
        a, b = starts[i], ends[j - 1]
        many.feed(data[a:b], Span(base + a, recs[i][1], recs[j - 1][2], recs[i][3],
                                  recs[j - 1][4]), recs[i:j])
    while one.held:
        n = rng.randint(0, 400)
        assert one.take(n) == many.take(n)
    assert many.held == 0 and one.last == many.last


def test_buffer_refuses_records_that_do_not_end_with_the_bytes() -> None:
    buf = ProvenanceBuffer(0)
    with pytest.raises(ValueError):
        buf.feed(b"abcd", Span(0, 1, 2, 3, 4), [(2, 1, 1, 3, 3), (3, 2, 2, 4, 4)])
    assert buf.held == 0


def test_coalesced_data_gives_records_split_and_span() -> None:
    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2),
                    RoleSource.PORT, 0, 0, 0, 0)
    segs = b"".join(SEGMENT.pack(e, t, f) for e, t, f in ((103, 7, 1), (105, 8, 2), (109, 9, 4)))
    ev = CoalescedData(flow, C2S, 100, b"abcdefghi", segs)
    assert ev.chunks() == [(103, 7, 7, 1, 1), (105, 8, 8, 2, 2), (109, 9, 9, 4, 4)]
    assert ev.span() == Span(100, 7, 9, 1, 4)
    parts = ev.split()
    assert [(p.offset, p.data, p.ts_first_ns, p.frame_last) for p in parts] == [
        (100, b"abc", 7, 1), (103, b"de", 8, 2), (105, b"fghi", 9, 4)]


# -- FramedSession.feed_chunks -----------------------------------------------------------


def _nats_stream(rng: random.Random, server: bool) -> bytes:
    out = bytearray(b'INFO {"server_id":"x","max_payload":1048576}\r\n' if server
                    else b'CONNECT {"verbose":false}\r\n')
    for _ in range(rng.randint(5, 60)):
        payload = rng.randbytes(rng.choice((0, 3, 200, 2000, 9000)))
        r = rng.random()
        if server:
            out += b"MSG a.b 1 %d\r\n%s\r\n" % (len(payload), payload)
        elif r < 0.1:
            out += b"PING\r\n"
        elif r < 0.15:
            out += b"BOGUS line\r\n"  # an anomaly and a resync
        else:
            out += b"PUB a.b %d\r\n%s\r\n" % (len(payload), payload)
    return bytes(out)


def _plain(records: list[Record]) -> list[Any]:
    return [(r.table, r.direction, r.offset_start, r.offset_end, r.ts_first_ns, r.ts_last_ns,
             r.frame_first, r.frame_last, r.values, _plain(r.children)) for r in records]


def _run(session: FramedSession, streams: dict[Direction, bytes], cuts, groups,
         whole: bool) -> list[Any]:
    """Both directions fed in turns, one group of packets at a time."""
    out: list[Record] = []
    turns = [(d, g[k]) for k in range(max(map(len, groups.values())))
             for d, g in groups.items() if k < len(g)]
    recs_of = {d: _records(ends, 0) for d, ends in cuts.items()}
    starts_of = {d: [0, *ends] for d, ends in cuts.items()}
    for d, (i, j) in turns:
        ends, recs, starts, data = cuts[d], recs_of[d], starts_of[d], streams[d]
        if whole:
            a, b = starts[i], ends[j - 1]
            span = Span(a, recs[i][1], recs[j - 1][2], recs[i][3], recs[j - 1][4])
            out += session.feed_chunks(d, data[a:b], span, recs[i:j])
        else:
            for k in range(i, j):
                r = recs[k]
                out += session.feed(d, data[starts[k]:ends[k]],
                                    Span(starts[k], r[1], r[2], r[3], r[4]))
    out += session.close(99)
    return [_plain(out), list(session.decoded_bytes), list(session.undecoded_bytes)]


@pytest.mark.parametrize("seed", range(12))
def test_nats_session_fed_runs_gives_the_records_of_fed_packets(seed: int) -> None:
    """Runs shorter and longer than ``FEED_CHUNKS`` packets, ops straddling packets."""
    rng = random.Random(seed)
    streams = {C2S: _nats_stream(rng, False), S2C: _nats_stream(rng, True)}
    cuts = {d: _cuts(rng, len(s), rng.choice((40, 700, 1448))) for d, s in streams.items()}
    groups = {d: _groups(rng, len(c), rng.choice((3, FEED_CHUNKS + 9, 3 * FEED_CHUNKS)))
              for d, c in cuts.items()}
    want = _run(NatsSession({}), streams, cuts, groups, whole=False)
    assert _run(NatsSession({}), streams, cuts, groups, whole=True) == want
    assert _run(NatsSession({"keep_secrets": True}), streams, cuts, groups, whole=True) == \
        _run(NatsSession({"keep_secrets": True}), streams, cuts, groups, whole=False)


class _Lines(FramedSession):
    """A session of lines that counts its feeds (a subclass with a ``feed`` of its own)."""

    def __init__(self) -> None:
        super().__init__(LineFramer(max_line_bytes=100), LineFramer(max_line_bytes=100))
        self.feeds = 0

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        self.feeds += 1
        return super().feed(direction, data, span)

    def on_event(self, direction: Direction, event: Any, out: list[Record]) -> None:
        if type(event) is Line:
            out.append(Record("lines", direction, event.start, event.end, event.ts_first_ns,
                              event.ts_last_ns, event.frame_first, event.frame_last,
                              {"line": bytes(event.data)}))


def test_a_subclass_with_its_own_feed_gets_one_feed_per_packet() -> None:
    data = b"one\r\ntwo\r\nthree\r\n"
    recs = _records([3, 8, 12, len(data)], 0)
    s = _Lines()
    rows = s.feed_chunks(C2S, data, Span(0, 1000, 1003, 10, 13), recs)
    assert s.feeds == 4
    assert [(r.values["line"], r.frame_first, r.frame_last) for r in rows] == [
        (b"one", 10, 11), (b"two", 11, 12), (b"three", 12, 13)]


# -- the conveyor's split of a run --------------------------------------------------------


def test_a_run_the_conveyor_splits_is_turned_once(tmp_path) -> None:
    """A run of a flow whose roles were swapped reaches the conveyor already turned
    (``RoleSwaps.events``); when the conveyor splits it (here: a memory budget with no
    room for it), its parts are not turned a second time: the PUB is the client's."""
    from analyzer.pipeline import CaptureDissection, Options
    from analyzer.sinkapi import RowSink
    from dissectors.registry import discover
    from reassembly.events import StreamData
    from reassembly.limits import Limits

    class Rows(RowSink):
        def __init__(self) -> None:
            self.rows: list[tuple[str, dict]] = []

        def write_rows(self, spec: Any, rows: list[dict]) -> None:
            self.rows += [(spec.name, r) for r in rows]

    sink = Rows()
    job = CaptureDissection("c", sink, discover(),
                            Options(strict=True, limits=Limits(memory_limit_bytes=10)))
    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 4222),
                    RoleSource.PORT, 0, 0, 0, 0)
    info = b'INFO {"server_id":"x"}\r\n'
    job.handle(StreamData(flow, S2C, 0, info, 1, 1, 1, 1))
    job.roles._turning.begin(flow)  # swapped: events still on their way get turned
    pub = b"PUB a.b 2\r\nhi\r\n"
    segs = SEGMENT.pack(6, 2, 2) + SEGMENT.pack(len(pub), 3, 3)
    job.handle(CoalescedData(flow, C2S, 0, pub, segs))
    nats = [r for t, r in sink.rows if t == "nats"]
    assert [(r["op"], r["direction"], r["frame_first"], r["frame_last"]) for r in nats] == [
        ("INFO", "s2c", 1, 1), ("PUB", "c2s", 2, 3)]
    assert not [r for t, r in sink.rows if t == "anomalies"]

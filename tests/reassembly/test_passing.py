"""``reassembly.passing``: runs every member layer passes go past the layers, and the
consumer sees exactly what the whole stack of layers gives (the same events, the same
order), whatever the layers decide and when.

Two toy layers over random event streams (the real layers are checked on every
capture of the corpus in ``tests/perf/test_engine_native.py``): one *takes* a flow's
runs (changes them) from the moment a ``Take`` event says so, the other holds a flow's
runs back until that flow's ``Close``; a veto the consumer sets while it reads keeps a
flow's runs in the layers, where the second layer marks them.  A third toy layer
watches the first byte of each segment below an offset (as the TLS layer watches a
client's first 64 KiB for a handshake record): it takes a flow at such a segment, and
passes the rest with a watch (``Passing.passes(..., watch=...)``)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from reassembly.events import (
    Direction,
    Endpoint,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.limits import Limits
from reassembly.passing import Passing
from reassembly.provenance import SEGMENT, CoalescedData
from reassembly.tls.layer import STARTTLS_WINDOW_BYTES, TlsLayer


@dataclass(frozen=True)
class Take:
    flow_id: int


@dataclass(frozen=True)
class Close:
    flow_id: int


class Taker:
    """Takes (tags) the runs of flows a ``Take`` named; passes every other one on, and
    says so to ``passing`` (as the TLS layer does until it takes a flow)."""

    def __init__(self, passing: Passing | None) -> None:
        self.passing = passing
        self.member = passing.join() if passing else -1
        self.taken: set[int] = set()

    def process(self, events: Iterable[object]) -> Iterator[object]:
        for ev in events:
            if type(ev) is Take:
                self.taken.add(ev.flow_id)
                if self.passing:
                    self.passing.holds(self.member, ev.flow_id)
            elif type(ev) is CoalescedData:
                fid = ev.flow.flow_id
                if fid in self.taken:
                    yield ("taken", fid, ev.direction, ev.data)
                    continue
                if self.passing:
                    self.passing.passes(self.member, fid, ev.direction)
            elif type(ev) is Close:
                self.taken.discard(ev.flow_id)
                if self.passing:
                    self.passing.holds(self.member, ev.flow_id)
            yield ev


class Holder:
    """Holds back the runs of even flows until their ``Close`` (as the WebSocket layer
    holds a request until the response), passes odd flows' on; runs of a flow the
    consumer vetoes are marked."""

    def __init__(self, passing: Passing | None, vetoed: set[int]) -> None:
        self.passing = passing
        self.member = passing.join() if passing else -1
        self.vetoed = vetoed
        if passing:
            passing.veto(lambda flow: flow.flow_id in vetoed)
        self.held: dict[int, list[object]] = {}

    def process(self, events: Iterable[object]) -> Iterator[object]:
        for ev in events:
            if type(ev) is CoalescedData:
                fid = ev.flow.flow_id
                if fid in self.vetoed:
                    yield ("vetoed", ev)
                    continue
                if fid % 2 == 0:
                    self.held.setdefault(fid, []).append(ev)
                    continue
                if self.passing:
                    self.passing.passes(self.member, fid, ev.direction)
            elif type(ev) is Close:
                yield from self.held.pop(ev.flow_id, [])
                if self.passing:
                    self.passing.holds(self.member, ev.flow_id)
            yield ev


def _events(seed: int) -> list[object]:
    rnd = random.Random(seed)
    flows = {fid: SimpleNamespace(flow_id=fid) for fid in range(1, 7)}
    out: list[object] = []
    for i in range(400):
        fid = rnd.randrange(1, 7)
        r = rnd.random()
        if r < 0.02:
            out.append(Take(fid))
        elif r < 0.05:
            out.append(Close(fid))
        else:
            out.append(CoalescedData(flows[fid], rnd.randrange(2), i, b"x%d" % i,  # type: ignore[arg-type]
                                     b""))
    return out


def _consume(events: Iterable[object], vetoed: set[int], seed: int) -> list[object]:
    """What a consumer reads; it vetoes and frees flows as it goes (as a ``RoleSwaps``
    starts and ends turning a flow's events)."""
    rnd = random.Random(seed)
    got = []
    for ev in events:
        got.append(ev)
        if rnd.random() < 0.01:
            vetoed.symmetric_difference_update({rnd.randrange(1, 7)})
    return got


@pytest.mark.parametrize("seed", range(8))
def test_runs_past_the_layers_change_nothing(seed: int) -> None:
    source = _events(seed)
    vetoed: set[int] = set()
    full = _consume(Holder(None, vetoed).process(Taker(None).process(iter(source))),
                    vetoed, seed)
    passing = Passing()
    vetoed = set()
    taker, holder = Taker(passing), Holder(passing, vetoed)
    got = _consume(passing.around(source, lambda evs: holder.process(taker.process(evs))),
                   vetoed, seed)
    assert got == full
    assert passing.skipped > 20  # the mechanism was used, not only the stack


WINDOW = 60  # the sniffer looks at segments that begin below this stream offset
MARK = ord("!")


class Sniffer:
    """Takes (tags) a flow from a segment that begins with ``!`` below ``WINDOW``; passes
    every other run on, with a watch while the direction may still see one."""

    def __init__(self, passing: Passing | None) -> None:
        self.passing = passing
        self.member = passing.join() if passing else -1
        self.taken: set[int] = set()

    def process(self, events: Iterable[object]) -> Iterator[object]:
        for ev in events:
            if type(ev) is CoalescedData or type(ev) is StreamData:
                fid = ev.flow.flow_id
                if fid not in self.taken and any(
                        start < WINDOW and data[:1] == b"!" for start, data in _segments(ev)):
                    self.taken.add(fid)
                    if self.passing:
                        self.passing.holds(self.member, fid)
                if fid in self.taken:
                    yield ("sniffed", fid, ev.direction, ev.data)
                    continue
                if self.passing:
                    self.passing.passes(self.member, fid, ev.direction, (WINDOW, MARK))
            elif type(ev) is Close:
                self.taken.discard(ev.flow_id)
                if self.passing:
                    self.passing.holds(self.member, ev.flow_id)
            yield ev


def _segments(ev: CoalescedData | StreamData) -> list[tuple[int, bytes]]:
    if type(ev) is StreamData:
        return [(ev.offset, ev.data)]
    out, start = [], ev.offset
    for end, _ts, _frame in SEGMENT.iter_unpack(ev.segments):  # type: ignore[union-attr]
        out.append((start, ev.data[start - ev.offset:end - ev.offset]))
        start = end
    return out


def _segmented_events(seed: int) -> list[object]:
    """Runs of 1-3 segments (and single-segment ``StreamData``) at growing offsets per
    flow direction, a few segments beginning with ``!``, closes that start flows over."""
    rnd = random.Random(seed)
    flows = {fid: SimpleNamespace(flow_id=fid) for fid in range(1, 7)}
    ends: dict[tuple[int, int], int] = {}
    out: list[object] = []
    for i in range(400):
        fid = rnd.randrange(1, 7)
        if rnd.random() < 0.03:
            out.append(Close(fid))
            ends = {k: v for k, v in ends.items() if k[0] != fid}
            continue
        d = rnd.randrange(2)
        start = offset = ends.get((fid, d), 0)
        parts, segs = [], b""
        for _ in range(rnd.randrange(1, 4)):
            part = (b"!" if rnd.random() < 0.04 else b"a") + bytes(
                rnd.choice(b"ab!") for _ in range(rnd.randrange(0, 12)))
            parts.append(part)
            offset += len(part)
            segs += SEGMENT.pack(offset, i, i)
        ends[(fid, d)] = offset
        if len(parts) == 1 and rnd.random() < 0.5:
            out.append(StreamData(flows[fid], Direction(d), start, parts[0], i, i, i, i))  # type: ignore[arg-type]
        else:
            out.append(CoalescedData(flows[fid], Direction(d), start, b"".join(parts), segs))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_watched_runs_stop_where_the_watching_layer_looks(seed: int) -> None:
    source = _segmented_events(seed)
    vetoed: set[int] = set()
    full = _consume(Holder(None, vetoed).process(Sniffer(None).process(
        Taker(None).process(iter(source)))), vetoed, seed)
    passing = Passing()
    vetoed = set()
    taker, sniffer, holder = Taker(passing), Sniffer(passing), Holder(passing, vetoed)
    got = _consume(passing.around(source, lambda evs: holder.process(sniffer.process(
        taker.process(evs)))), vetoed, seed)
    assert got == full
    assert passing.skipped > 20  # the mechanism was used, not only the stack
    assert any(type(ev) is tuple and ev[0] == "sniffed" for ev in full)  # (it took some)


def _tls_flow() -> FlowInfo:
    return FlowInfo(7, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 4222),
                    RoleSource.SYN, 0, 0, 0, 0)


@pytest.mark.parametrize("gap", [0, 1, 3000])
@pytest.mark.parametrize("shift", [-1, 0, 1])
def test_the_tls_watch_stops_a_handshake_byte_where_the_layer_looks(gap: int, shift: int) -> None:
    """A plain client direction passes the TLS layer with a watch: a segment that begins
    with a handshake byte while fewer than ``STARTTLS_WINDOW_BYTES`` were looked at (a gap
    counts none) goes through it and starts TLS (a one-byte one: too short to tell, so the
    layer holds it), one at the window's end or past it skips the layer; either way the
    events are those of the layer alone."""
    flow = _tls_flow()
    c2s, s2c = Direction.C2S, Direction.S2C
    events: list[object] = [StreamData(flow, s2c, 0, b"INFO {}\r\n", 1, 1, 1, 1)]
    offset = seen = 0
    frame = 2
    while seen < STARTTLS_WINDOW_BYTES + shift - 1000:  # plain client segments
        if seen >= 20_000 and gap and offset == seen:  # one gap, early on
            events.append(StreamGap(flow, c2s, offset, gap, frame, frame, "acked-unseen"))
            offset += gap
        events.append(StreamData(flow, c2s, offset, b"a" * 1000, frame, frame, frame, frame))
        offset += 1000
        seen += 1000
        frame += 1
    rest = STARTTLS_WINDOW_BYTES + shift - seen
    events.append(StreamData(flow, c2s, offset, b"b" * rest, frame, frame, frame, frame))
    offset += rest
    events.append(StreamData(flow, c2s, offset, b"\x16", frame + 1, frame + 1, frame + 1,
                             frame + 1))
    events.append(StreamData(flow, c2s, offset + 1, b"PING\r\n", frame + 2, frame + 2,
                             frame + 2, frame + 2))
    events.append(StreamClose(flow, frame + 3, "fin"))
    alone = list(TlsLayer(Limits()).process(iter(events)))
    passing = Passing()
    layer = TlsLayer(Limits(), passing=passing)
    got = list(passing.around(events, layer.process))
    assert got == alone
    assert passing.skipped > 50
    # the layer took the flow exactly when the byte came within the window
    assert (layer.counters["connections"] == 1) is (shift < 0)

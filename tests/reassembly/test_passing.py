"""``reassembly.passing``: runs every member layer passes go past the layers, and the
consumer sees exactly what the whole stack of layers gives (the same events, the same
order), whatever the layers decide and when.

Two toy layers over random event streams (the real layers are checked on every
capture of the corpus in ``tests/perf/test_engine_native.py``): one *takes* a flow's
runs (changes them) from the moment a ``Take`` event says so, the other holds a flow's
runs back until that flow's ``Close``; a veto the consumer sets while it reads keeps a
flow's runs in the layers, where the second layer marks them."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from reassembly.passing import Passing
from reassembly.provenance import CoalescedData


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

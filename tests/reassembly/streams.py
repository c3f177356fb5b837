"""Helpers for tests that check reassembled streams of real captures."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from reassembly.engine import read_events
from reassembly.events import Anomaly, FlowEnd, FlowInfo, StreamClose, StreamData, StreamGap


@dataclass
class Reassembled:
    flows: list[FlowInfo] = field(default_factory=list)
    tcp_flows: int = 0
    udp_flows: int = 0
    # (flow_id, direction) -> stream rendered with "[N bytes missing]" for gaps
    streams: dict = field(default_factory=lambda: defaultdict(bytearray))
    # (flow_id, direction) -> next expected offset; checks contiguity as we go
    ends: dict = field(default_factory=lambda: defaultdict(int))
    anomalies: list[Anomaly] = field(default_factory=list)

    def stream(self, client: str, server: str, direction: str = "c2s") -> bytes:
        for f in self.flows:
            if str(f.client) == client and str(f.server) == server:
                return bytes(self.streams[(f.flow_id, 0 if direction == "c2s" else 1)])
        raise KeyError(f"no flow {client} -> {server}")


def reassemble(path: Path) -> Reassembled:
    r = Reassembled()
    for ev in read_events(path):
        if isinstance(ev, StreamData | StreamGap):
            if ev.stream_id is not None:  # a QUIC stream: its own offsets
                key = (ev.flow.flow_id, int(ev.direction), ev.stream_id)
            else:
                key = (ev.flow.flow_id, int(ev.direction))
            assert ev.offset == r.ends[key], f"{path}: stream offsets not contiguous at {key}"
            if isinstance(ev, StreamData):
                r.streams[key] += ev.data
                r.ends[key] += len(ev.data)
            else:
                r.streams[key] += b"[%d bytes missing]" % ev.nbytes
                r.ends[key] += ev.nbytes
        elif isinstance(ev, StreamClose):
            r.flows.append(ev.flow)
            r.tcp_flows += 1
        elif isinstance(ev, FlowEnd):
            r.flows.append(ev.flow)
            r.udp_flows += 1
        elif isinstance(ev, Anomaly):
            r.anomalies.append(ev)
    return r

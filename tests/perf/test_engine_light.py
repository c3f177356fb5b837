"""The native engine in a share of a capture split by flow (``--workers N``): the flows
the share does not own are *light* (``FlowTable(owns=...)`` keeps only trackers for
them) and the C core takes their ACK packets as the flow table's bookkeeping
(``_engine.Engine.register_light``), so a worker does no Python work per packet of
another worker's flows.  The events and every flow's state must stay the reference's
(``assert_engine_equal`` compares both), including when a light flow ends without an
event while registered: evicted by a full table, replaced by port reuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reassembly import native
from reassembly.limits import SECOND_NS, Limits
from tests.perf.test_engine_native import _frames, assert_engine_equal
from tests.reassembly.synth import ACK, PSH, SYN, PcapWriter, tcp_frame

FIN = 0x01
T0 = 1_700_000_000_000_000  # microseconds
SERVER = bytes([10, 0, 0, 2])


class _Conn:
    """One client connection to SERVER:4222, written to ``w`` packet by packet."""

    def __init__(self, w: PcapWriter, i: int, port: int | None = None) -> None:
        self.w, self.c = w, bytes([10, 0, 1, 1 + i])
        self.port = port if port is not None else 40000 + i
        self.cs, self.ss = 1000 + 7919 * i, 500_000 + 104_729 * i

    def handshake(self, t: int) -> None:
        c, s, p = self.c, SERVER, self.port
        self.w.write(t, tcp_frame(c, s, p, 4222, self.cs - 1, 0, SYN))
        self.w.write(t + 1, tcp_frame(s, c, 4222, p, self.ss - 1, self.cs, SYN | ACK))
        self.w.write(t + 2, tcp_frame(c, s, p, 4222, self.cs, self.ss, ACK))

    def send(self, t: int, data: bytes) -> None:
        self.w.write(t, tcp_frame(self.c, SERVER, self.port, 4222, self.cs, self.ss,
                                  ACK | PSH, data))
        self.cs += len(data)

    def reply(self, t: int, data: bytes = b"") -> None:
        self.w.write(t, tcp_frame(SERVER, self.c, 4222, self.port, self.ss, self.cs,
                                  ACK | (PSH if data else 0), data))
        self.ss += len(data)


def _bulk(path: Path, conns: int = 3, segments: int = 600) -> None:
    """Handshaken connections sending in turn, the server ACKing every second segment
    and answering now and then, FINs at the end."""
    w = PcapWriter(path)
    cs = [_Conn(w, i) for i in range(conns)]
    t = T0
    for c in cs:
        c.handshake(t)
        t += 3
    for n in range(segments):
        c = cs[n % conns]
        t += 2
        c.send(t, b"PUB a.b %d\r\n" % n + b"x" * (100 + n % 300) + b"\r\n")
        if n % 2:
            c.reply(t + 1, b"+OK\r\n" if n % 7 == 0 else b"")
    for c in cs:
        t += 3
        w.write(t, tcp_frame(c.c, SERVER, c.port, 4222, c.cs, c.ss, ACK | FIN))
        w.write(t + 1, tcp_frame(SERVER, c.c, 4222, c.port, c.ss, c.cs + 1, ACK | FIN))
    w.close()


@pytest.mark.parametrize("share", [0, 1])
def test_light_flows_are_taken_in_c_with_the_reference_state(tmp_path, share: int) -> None:
    path = tmp_path / "bulk.pcap"
    _bulk(path)
    nat = assert_engine_equal(lambda: native.pcap_batches(path, max_records=97),
                              _frames(path), owns=lambda fid: fid % 2 == share)
    # handshakes, FINs and the first data of each direction go to the reference; the
    # bulk of every flow, owned or not, is taken
    assert nat.counters["taken"] > 20 * nat.counters["reference"]


def test_a_registered_light_flow_ended_without_an_event(tmp_path) -> None:
    """Light flows that the reference ends while the C core holds them (no event tells):
    one evicted by the table cap, one replaced by a new connection on its 4-tuple (port
    reuse, a SYN with another ISN); their 4-tuples carry packets afterwards."""
    path = tmp_path / "ended.pcap"
    w = PcapWriter(path)
    limits = Limits(max_flows=3, tcp_idle_timeout_ns=60 * SECOND_NS)
    a, b = _Conn(w, 0), _Conn(w, 1)
    t = T0
    for c in (a, b):
        c.handshake(t)
        t += 3
        for _ in range(4):
            c.send(t, b"x" * 50)
            c.reply(t + 1)
            t += 2
    # port reuse on a's 4-tuple: a new ISN
    reuse = _Conn(w, 0)
    reuse.cs += 77_777
    reuse.handshake(t)
    t += 3
    for _ in range(3):
        reuse.send(t, b"y" * 40)
        reuse.reply(t + 1)
        t += 2
    # more flows than the table holds: b (least recent) is evicted
    for i in range(2, 5):
        c = _Conn(w, i)
        c.handshake(t)
        c.send(t + 3, b"z" * 10)
        t += 5
    for _ in range(3):  # b's 4-tuple again: a flow picked up mid-stream
        b.send(t, b"w" * 30)
        b.reply(t + 1)
        t += 2
    w.close()
    frames = _frames(path)
    for share in (0, 1):
        for batch in (1, 7, 1000):
            assert_engine_equal(lambda batch=batch: native.pcap_batches(path, max_records=batch),
                                frames, limits, owns=lambda fid, k=share: fid % 2 == k)

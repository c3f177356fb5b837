"""The public hooks of a reassembler that sees only part of a capture (a Spark task):
``FirstReports`` (which once-per-capture anomalies are made) and ``Clock`` (when idle
flows and fragments expire)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reassembly.capture import Frame
from reassembly.engine import CaptureClock, Reassembler
from reassembly.events import Anomaly, Datagram, FlowEnd
from reassembly.limits import SECOND_NS, Limits
from reassembly.network import FirstReports, NetworkDecoder
from tests.reassembly.test_link_ip import eth, frame, ipv4, tcp_hdr, udp_hdr

T0 = 1_700_000_000 * SECOND_NS


class _AtFrame(FirstReports):
    """Report at the frames a whole-capture pass found; the driver sums the rest."""

    summary = False

    def __init__(self, snaplen_at: int, unknown_at: int) -> None:
        super().__init__()
        self.snaplen_at, self.unknown_at = snaplen_at, unknown_at

    def snaplen_cut(self, frame: Any) -> bool:
        return bool(frame.number == self.snaplen_at)

    def unknown_linktype(self, frame: Any) -> bool:
        return bool(frame.number == self.unknown_at)


def test_first_reports_default_and_given() -> None:
    full = eth(ipv4(tcp_hdr(data=b"A" * 500)))
    cut = [frame(full[:96], number=n, orig_len=len(full)) for n in (1, 2, 3)]
    odd = [frame(b"xx", linktype=147, number=n) for n in (4, 5)]
    for firsts, snap_at, odd_at, summary in ((None, 1, 4, 1), (_AtFrame(3, 5), 3, 5, 0)):
        out: list[Anomaly] = []
        dec = NetworkDecoder(Limits(), out.append, firsts)
        for fr in cut + odd:
            dec.decode(fr)
        dec.flush(None)
        kinds = [(a.kind, a.frame) for a in out]
        assert kinds[:2] == [("ip.truncated", snap_at), ("link.unknown_type", odd_at)]
        assert len(kinds) == 2 + summary  # the default sums the two other cuts at the end
        assert dec.counters["truncated"] == 3


def _udp(number: int, ts_ns: int, sport: int) -> Frame:
    data = eth(ipv4(udp_hdr(sport=sport, data=b"ping"), 17))
    return Frame(number, ts_ns, 1, data, len(data), 0)


class _Recording(CaptureClock):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def tick(self, reassembler: Reassembler, ts_ns: int) -> None:
        self.seen.append(ts_ns)
        super().tick(reassembler, ts_ns)


class _Never:
    def tick(self, reassembler: Reassembler, ts_ns: int) -> None:
        return None


def _kinds(events: Any) -> list[tuple[str, int]]:
    return [(type(e).__name__, e.flow.client.port) for e in events
            if isinstance(e, Datagram | FlowEnd)]


def test_the_clock_decides_expiry() -> None:
    """Flow A (port 1000) once, flow B (port 2000) 200 s and 202 s later (UDP idle
    timeout: 120 s).  The capture's own clock sweeps A out between B's datagrams; a
    clock that never sweeps leaves A to the end of the capture, unless the driver calls
    ``sweep`` itself (a Spark task replaying the capture's global clock)."""
    frames = [_udp(1, T0, 1000), _udp(2, T0 + 200 * SECOND_NS, 2000),
              _udp(3, T0 + 202 * SECOND_NS, 2000)]
    swept = [("Datagram", 1000), ("Datagram", 2000), ("FlowEnd", 1000), ("Datagram", 2000),
             ("FlowEnd", 2000)]
    own = _Recording()
    assert _kinds(Reassembler(clock=own).process(frames)) == swept
    assert own.seen == [f.ts_ns for f in frames]
    at_end = _kinds(Reassembler(clock=_Never()).process(frames))
    assert at_end[:3] == [("Datagram", 1000), ("Datagram", 2000), ("Datagram", 2000)]
    r = Reassembler(clock=_Never())

    def driven() -> Iterator[Frame]:
        yield from frames[:2]
        r.sweep(T0 + 201 * SECOND_NS)  # before the third frame, as the schedule says
        yield frames[2]

    assert _kinds(r.process(driven())) == swept

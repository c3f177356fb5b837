"""Detection: a NATS connection captured mid-stream is still claimed by its clean side."""

from __future__ import annotations

import pyarrow.dataset as ds

from analyzer.pipeline import Options, dissect_capture
from tests.reassembly.synth import ACK, PSH, PcapWriter, tcp_frame

C, S = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def _write(path, c2s: bytes, s2c: bytes, sport: int = 4222) -> None:
    w = PcapWriter(path)
    w.write(1_000_000, tcp_frame(C, S, 50000, sport, 7000, 9000, ACK | PSH, c2s))
    w.write(1_000_100, tcp_frame(S, C, sport, 50000, 9000, 7000 + len(c2s), ACK | PSH, s2c))
    w.close()


def _protocols(tmp_path, c2s: bytes, s2c: bytes) -> list:
    pcap = tmp_path / "mid.pcap"
    _write(pcap, c2s, s2c)
    dissect_capture(pcap, tmp_path / "out", Options(strict=True, validate=True))
    flows = ds.dataset(tmp_path / "out/flows", partitioning="hive").to_table()
    return flows["protocol"].to_pylist()


def test_mid_stream_side_does_not_veto_the_clean_side(tmp_path):
    # the client side starts inside a payload ("orld\r\n"), the server side at an op
    c2s = b"orld\r\nPUB a.b 5\r\nhello\r\n"
    s2c = b"MSG a.b 1 5\r\nhello\r\n"
    assert _protocols(tmp_path, c2s, s2c) == ["nats"]


def test_both_sides_unrecognisable_stay_unclaimed(tmp_path):
    assert _protocols(tmp_path, b"\x00\x01binary junk", b"\xff\xfe more junk") == [None]


def test_candidate_ranking_follows_what_it_depends_on():
    """``Detector._ranked`` keeps its answers by transport, server port and the
    dissectors' ``carried_on()``/``default_ports``/``name``: a change of any is seen."""
    from analyzer.detect import Detector
    from dissectors.api import Dissector, Verdict
    from reassembly.events import Endpoint, FlowInfo, RoleSource, Transport

    class Aaa(Dissector):
        name = "aaa"
        default_ports = (1111,)

        @classmethod
        def probe(cls, direction, prefix):
            return Verdict.NO

        @classmethod
        def session(cls, options):
            raise NotImplementedError

    class Zzz(Aaa):
        name = "zzz"
        default_ports = (2222,)

    def ranked(port, transport=Transport.TCP):
        flow = FlowInfo(1, transport, Endpoint("10.0.0.1", 5), Endpoint("10.0.0.2", port),
                        RoleSource.SYN, 0, 0, 1, 1)
        return [d.name for d in det.start(flow).candidates]

    det = Detector([Zzz, Aaa])
    assert ranked(2222) == ["zzz", "aaa"] and ranked(1111) == ["aaa", "zzz"]
    assert ranked(2222) == ["zzz", "aaa"]  # (kept)
    Zzz.default_ports = (1111,)
    assert ranked(2222) == ["aaa", "zzz"]
    Zzz.default_ports = [3333]  # (no dict key: ranked every time)
    assert ranked(3333) == ["zzz", "aaa"] and ranked(1111) == ["aaa", "zzz"]
    Zzz.transports = (Transport.UDP,)
    assert ranked(3333) == ["aaa"] and ranked(3333, Transport.UDP) == ["zzz"]
    det.start(FlowInfo(2, Transport.TCP, Endpoint("a", 1), Endpoint("b", 1111),
                       RoleSource.SYN, 0, 0, 1, 1)).candidates.clear()
    assert ranked(1111) == ["aaa"]  # (a flow's list is its own)

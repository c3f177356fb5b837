"""IPv4 / IPv6 fragment reassembly (reassembly.defrag through reassembly.network).

Hand-built fragments in every order (hypothesis: random fragmentation, permutation,
identical duplicates and overlaps), conflicting overlaps under both policies, every
limit, truncated fragments, and the facts expected.json lists for the fragmented
captures in tests/data/captures.
"""

from __future__ import annotations

import itertools
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reassembly.capture import Frame, open_capture
from reassembly.defrag import _add_range, _clip_ranges
from reassembly.events import Anomaly
from reassembly.limits import SECOND_NS, Limits, OverlapPolicy
from reassembly.network import L4Packet, NetworkDecoder
from tests.conftest import SHARED

CAPTURES = SHARED / "captures"

SRC4 = bytes([192, 0, 2, 1])
DST4 = bytes([198, 51, 100, 2])
SRC6 = bytes.fromhex("20010db8000000000000000000000001")
DST6 = bytes.fromhex("20010db8000000000000000000000002")
T0 = 1_700_000_000 * SECOND_NS


# ---------------------------------------------------------------------- builders
def v4frag(
    data: bytes,
    offset: int,
    more: bool,
    *,
    ident: int = 0x1234,
    proto: int = 17,
    src: bytes = SRC4,
    dst: bytes = DST4,
    options: bytes = b"",
    declared: int | None = None,
) -> bytes:
    hl = 20 + len(options)
    tot = hl + (len(data) if declared is None else declared)
    flags = (0x2000 if more else 0) | (offset >> 3)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | hl // 4, 0, tot, ident, flags, 64, proto, 0, src, dst)
    return hdr + options + data


def v6frag(
    data: bytes,
    offset: int,
    more: bool,
    *,
    ident: int = 0xA1BC6572,
    nh: int = 17,
    before: bytes = b"",
    first_nh: int | None = None,
    declared: int | None = None,
) -> bytes:
    """IPv6 header [+ unfragmentable headers ``before``] + fragment header + data."""
    fh = struct.pack("!BBHI", nh, 0, offset | int(more), ident)
    body = before + fh + data
    plen = len(before) + 8 + (len(data) if declared is None else declared)
    top_nh = 44 if not before else (first_nh if first_nh is not None else 0)
    return struct.pack("!IHBB16s16s", 6 << 28, plen, top_nh, 64, SRC6, DST6) + body


def eth(ip: bytes, tags: tuple[int, ...] = ()) -> bytes:
    out = b"\x02" * 6 + b"\x04" * 6
    for vid in tags:
        out += struct.pack("!HH", 0x8100, vid)
    return out + (b"\x08\x00" if ip[0] >> 4 == 4 else b"\x86\xdd") + ip


class Run:
    """A decoder fed frame by frame, with its anomalies and results."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.anomalies: list[Anomaly] = []
        self.dec = NetworkDecoder(limits or Limits(), self.anomalies.append)
        self.n = 0
        self.packets: list[L4Packet] = []

    def feed(
        self,
        ip: bytes,
        *,
        ts_ns: int | None = None,
        linktype: int = 101,
        orig_len: int | None = None,
        interface: int = 0,
        tags: tuple[int, ...] = (),
    ) -> L4Packet | None:
        self.n += 1
        data = eth(ip, tags) if tags else ip
        lt = 1 if tags else linktype
        f = Frame(self.n, T0 + self.n if ts_ns is None else ts_ns, lt, data,
                  len(data) if orig_len is None else orig_len, interface)  # fmt: skip
        pkt = self.dec.decode(f)
        if pkt is not None:
            self.packets.append(pkt)
        return pkt

    def kinds(self) -> list[str]:
        return [a.kind for a in self.anomalies]

    @property
    def c(self) -> dict[str, int]:
        return self.dec.counters


PAYLOAD = bytes(range(256)) * 2  # 512 bytes


def split(payload: bytes, size: int) -> list[tuple[int, bytes, bool]]:
    out = []
    for off in range(0, len(payload), size):
        chunk = payload[off : off + size]
        out.append((off, chunk, off + size < len(payload)))
    return out


# ---------------------------------------------------------------------- in every order
@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_ipv4_all_orders(order):
    frags = split(PAYLOAD, 128)
    r = Run()
    results = [r.feed(v4frag(frags[i][1], frags[i][0], frags[i][2])) for i in order]
    assert results[:3] == [None, None, None]
    pkt = results[3]
    assert pkt is not None
    assert (pkt.frame, pkt.ip_version, pkt.src, pkt.dst, pkt.proto) == (4, 4, SRC4, DST4, 17)
    assert pkt.payload == PAYLOAD and pkt.l4_len == 512 and not pkt.truncated
    assert r.anomalies == []
    assert r.c["fragments"] == 4 and r.c["reassembled"] == 1 and r.dec.fragments_pending == 0


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_ipv6_all_orders(order):
    frags = split(PAYLOAD, 176)
    r = Run()
    for i in order:
        r.feed(v6frag(frags[i][1], frags[i][0], frags[i][2]))
    (pkt,) = r.packets
    assert (pkt.frame, pkt.ip_version, pkt.src, pkt.dst, pkt.proto) == (3, 6, SRC6, DST6, 17)
    assert pkt.payload == PAYLOAD and pkt.l4_len == 512
    assert r.anomalies == []


def _model(frags: list[tuple[int, int]], order: list[int], total: int):
    """Expected (completing positions, duplicate positions, incomplete at end)."""
    done, dups = [], []
    mask = bytearray(total)
    started = False
    for pos, i in enumerate(order):
        s, e = frags[i]
        started = True
        if any(mask[s:e]):
            dups.append(pos)
        mask[s:e] = b"\x01" * (e - s)
        if all(mask):
            done.append(pos)
            mask = bytearray(total)
            started = False
    return done, dups, started


@st.composite
def fragmentations(draw):
    payload = draw(st.binary(min_size=9, max_size=2500))
    size = len(payload)
    blocks = (size - 1) // 8  # fragment boundaries on the 8-byte grid, < size
    cuts = draw(st.sets(st.integers(1, blocks), min_size=1, max_size=25))
    bounds = [0, *sorted(c * 8 for c in cuts), size]
    frags = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    # extra fragments overlapping the others with the same bytes
    extra = draw(st.lists(st.tuples(st.integers(0, blocks), st.integers(1, 40)), max_size=4))
    for a, n in extra:
        s = a * 8
        e = min(s + n * 8, size)
        if s < e and (s, e) != (0, size):  # offset 0 without MF is no fragment at all
            frags.append((s, e))
    dup = draw(st.lists(st.integers(0, len(frags) - 1), max_size=4))
    order = draw(st.permutations(list(range(len(frags))) + dup))
    return payload, frags, order


def _check_random(version: int, payload: bytes, frags, order) -> None:
    r = Run()
    size = len(payload)
    results = []
    for i in order:
        s, e = frags[i]
        more = e < size
        if version == 4:
            results.append(r.feed(v4frag(payload[s:e], s, more)))
        else:
            results.append(r.feed(v6frag(payload[s:e], s, more)))
    r.dec.flush(None)
    done, dups, left = _model(frags, order, size)
    assert [i for i, p in enumerate(results) if p is not None] == done
    for pos in done:
        p = results[pos]
        assert p.payload == payload and not p.truncated and p.l4_len == size
        assert p.frame == pos + 1 and p.proto == 17
    assert r.kinds() == ["ip.frag_duplicate"] * len(dups) + ["ip.frag_incomplete"] * left
    assert [a.frame for a in r.anomalies[: len(dups)]] == [pos + 1 for pos in dups]
    assert r.c["frag_duplicates"] == len(dups) and r.c["frag_overlaps"] == 0
    assert r.c["reassembled"] == len(done) and r.c["fragments"] == len(order)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmentations())
def test_random_fragmentation_ipv4(case):
    _check_random(4, *case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmentations())
def test_random_fragmentation_ipv6(case):
    _check_random(6, *case)


# ---------------------------------------------------------------------- overlaps
def test_conflicting_overlap_first_wins():
    r = Run()
    r.feed(v4frag(b"a" * 16, 0, True))
    pkt = r.feed(v4frag(b"b" * 16, 8, False))
    assert pkt is not None and pkt.payload == b"a" * 16 + b"b" * 8
    (a,) = r.anomalies
    assert a.kind == "ip.frag_overlap" and a.frame == 2 and a.nbytes == 8
    assert "192.0.2.1 -> 198.51.100.2 id 0x1234" in a.detail
    assert "8-16" in a.detail and "first copy kept" in a.detail
    assert r.c["frag_overlaps"] == 1


def test_conflicting_overlap_last_wins():
    r = Run(Limits(overlap_policy=OverlapPolicy.LAST))
    r.feed(v4frag(b"a" * 16, 0, True))
    pkt = r.feed(v4frag(b"b" * 16, 8, False))
    assert pkt is not None and pkt.payload == b"a" * 8 + b"b" * 16
    assert r.kinds() == ["ip.frag_overlap"] and "last copy kept" in r.anomalies[0].detail


def test_overlap_only_differing_bytes_counted():
    r = Run()
    r.feed(v4frag(b"abcdefgh" * 2, 0, True))
    r.feed(v4frag(b"abcdXfgh" + b"tail", 8, False))
    (a,) = r.anomalies
    assert a.kind == "ip.frag_overlap" and a.nbytes == 1
    assert r.packets[0].payload == b"abcdefgh" * 2 + b"tail"


def test_partial_identical_overlap_is_duplicate():
    r = Run()
    r.feed(v6frag(PAYLOAD[:64], 0, True))
    r.feed(v6frag(PAYLOAD[32:96], 32, True))
    pkt = r.feed(v6frag(PAYLOAD[96:128], 96, False))
    assert pkt is not None and pkt.payload == PAYLOAD[:128]
    (a,) = r.anomalies
    assert a.kind == "ip.frag_duplicate" and a.nbytes == 32 and "overlapping 32 bytes" in a.detail
    assert "id 0xa1bc6572" in a.detail


def test_overlap_spanning_several_held_ranges():
    r = Run()
    r.feed(v4frag(b"A" * 8, 0, True))
    r.feed(v4frag(b"C" * 8, 16, True))
    r.feed(v4frag(b"E" * 8, 32, False))
    pkt = r.feed(v4frag(b"xBBBBBBBBCCCCCCCCDDDDDDDDE"[1:] + b"E" * 7, 8, True))
    assert pkt is not None
    assert pkt.payload == b"A" * 8 + b"B" * 8 + b"C" * 8 + b"D" * 8 + b"E" * 8
    assert r.kinds() == ["ip.frag_duplicate"]  # the C and E bytes matched


# ---------------------------------------------------------------------- bad fragments
def test_zero_length_and_odd_length_fragments():
    r = Run()
    assert r.feed(v4frag(b"", 8, True)) is None
    assert r.kinds() == ["ip.frag_bad"] and "zero-length" in r.anomalies[0].detail
    r.feed(v4frag(b"x" * 10, 0, True))  # non-final, not a multiple of 8: kept
    assert r.kinds()[-1] == "ip.frag_bad" and "not a multiple of 8" in r.anomalies[-1].detail
    pkt = r.feed(v4frag(b"xx" + b"y" * 6, 8, False))
    assert pkt is not None and pkt.payload == b"x" * 10 + b"y" * 6
    assert r.kinds() == ["ip.frag_bad", "ip.frag_bad", "ip.frag_duplicate"]
    assert r.c["frag_bad"] == 2


def test_fragment_past_end_and_conflicting_last():
    r = Run()
    r.feed(v4frag(b"z" * 8, 16, False))  # the datagram is 24 bytes
    r.feed(v4frag(b"q" * 8, 32, True))  # wholly past the end: ignored
    r.feed(v4frag(b"w" * 8, 24, False))  # a second, different end
    pkt = r.feed(v4frag(b"a" * 32, 0, True))  # tail past the end: cut
    assert pkt is not None and pkt.payload == b"a" * 16 + b"z" * 8
    assert r.kinds() == ["ip.frag_bad"] * 4 + ["ip.frag_overlap"]
    details = [a.detail for a in r.anomalies]
    assert "fragment at offset 32 lies past the datagram end 24; ignored" in details[0]
    assert "second last fragment ends at 32, frame 1 already ended" in details[1]
    assert "fragment at offset 24 lies past the datagram end 24; ignored" in details[2]
    assert "fragment 0-32 runs past the datagram end 24; tail ignored" in details[3]
    assert [a.frame for a in r.anomalies] == [2, 3, 3, 4, 4]


def test_last_fragment_shorter_than_earlier_data():
    r = Run()
    r.feed(v4frag(b"a" * 32, 0, True))
    pkt = r.feed(v4frag(b"b" * 8, 8, False))  # says the datagram ends at 16
    assert pkt is not None and pkt.payload == b"a" * 16
    assert r.kinds() == ["ip.frag_bad", "ip.frag_overlap"]
    assert "bytes past 16 discarded" in r.anomalies[0].detail


def test_nested_ipv6_fragment_header():
    inner = struct.pack("!BBHI", 17, 0, 1, 99) + b"u" * 8  # a fragment header inside
    r = Run()
    r.feed(v6frag(inner[:8], 0, True, nh=44))
    assert r.feed(v6frag(inner[8:], 8, False, nh=44)) is None
    assert r.kinds() == ["ip.frag_bad"] and "another fragment header" in r.anomalies[0].detail


def test_ipv6_headers_after_fragment_header_are_walked():
    dest_opts = bytes([6, 0]) + bytes(6)
    tcp = struct.pack("!HHIIBBHHH", 1, 2, 3, 4, 0x50, 0x10, 100, 0, 0) + b"d" * 20
    body = dest_opts + tcp
    r = Run()
    r.feed(v6frag(body[:24], 0, True, nh=60))
    pkt = r.feed(v6frag(body[24:], 24, False, nh=60))
    assert pkt is not None and pkt.proto == 6 and pkt.payload == tcp
    assert pkt.l4_len == len(tcp)


def test_ipv6_first_fragment_next_header_wins():
    r = Run()
    r.feed(v6frag(b"k" * 16, 16, False, nh=6))
    pkt = r.feed(v6frag(b"j" * 16, 0, True, nh=17))
    assert pkt is not None and pkt.proto == 17


def test_ipv6_unfragmentable_headers_before_fragment_header():
    hbh = bytes([44, 0]) + bytes(6)
    r = Run()
    r.feed(v6frag(PAYLOAD[:256], 0, True, before=hbh, first_nh=0))
    pkt = r.feed(v6frag(PAYLOAD[256:], 256, False, before=hbh, first_nh=0))
    assert pkt is not None and pkt.payload == PAYLOAD and r.anomalies == []


def test_ipv4_options_in_fragments():
    opts = b"\x01\x01\x01\x00"
    r = Run()
    r.feed(v4frag(PAYLOAD[:256], 0, True, options=opts))
    pkt = r.feed(v4frag(PAYLOAD[256:], 256, False))
    assert pkt is not None and pkt.payload == PAYLOAD


# ---------------------------------------------------------------------- keys
def test_vlans_and_interfaces_keep_datagrams_apart():
    r = Run()
    r.feed(v4frag(b"1" * 8, 0, True), tags=(10,))
    r.feed(v4frag(b"2" * 8, 0, True), tags=(20,))
    r.feed(v4frag(b"3" * 8, 0, True), interface=1)
    p20 = r.feed(v4frag(b"B" * 8, 8, False), tags=(20,))
    p10 = r.feed(v4frag(b"A" * 8, 8, False), tags=(10,))
    assert p20.payload == b"2" * 8 + b"B" * 8 and p20.vlans == (20,)
    assert p10.payload == b"1" * 8 + b"A" * 8 and p10.vlans == (10,)
    assert r.anomalies == [] and r.dec.fragments_pending == 1
    r.dec.flush(None)
    assert r.kinds() == ["ip.frag_incomplete"]


def test_ipv4_protocol_and_ident_are_part_of_the_key():
    r = Run()
    r.feed(v4frag(b"a" * 8, 0, True, proto=6))
    r.feed(v4frag(b"b" * 8, 0, True, proto=17))
    r.feed(v4frag(b"c" * 8, 0, True, ident=7))
    assert r.dec.fragments_pending == 3 and r.anomalies == []


# ---------------------------------------------------------------------- limits
def test_table_full_evicts_oldest():
    r = Run(Limits(max_fragment_datagrams=2))
    r.feed(v4frag(b"a" * 8, 0, True, ident=1))
    r.feed(v4frag(b"b" * 8, 0, True, ident=2))
    r.feed(v4frag(b"c" * 8, 0, True, ident=3))
    assert r.kinds() == ["limit.fragment_table"]
    a = r.anomalies[0]
    assert a.frame == 3 and "id 0x0001" in a.detail and "frames 1" in a.detail
    assert r.c["frag_evicted"] == 1 and r.dec.fragments_pending == 2
    pkt = r.feed(v4frag(b"B" * 8, 8, False, ident=2))
    assert pkt is not None and pkt.payload == b"b" * 8 + b"B" * 8


def test_table_size_zero_drops_every_fragment():
    r = Run(Limits(max_fragment_datagrams=0))
    assert r.feed(v4frag(b"a" * 8, 0, True)) is None
    assert r.kinds() == ["limit.fragment_table"] and r.dec.fragments_pending == 0


def test_timeout_expires_on_later_fragments_and_flush():
    r = Run(Limits(fragment_timeout_ns=SECOND_NS))
    r.feed(v4frag(b"a" * 8, 0, True, ident=1), ts_ns=T0)
    r.feed(v4frag(b"x" * 8, 0, True, ident=2), ts_ns=T0 + SECOND_NS // 2)
    # 2 s later another datagram's fragment arrives: ident 1 is stale
    r.feed(v4frag(b"b" * 8, 0, True, ident=3), ts_ns=T0 + 2 * SECOND_NS)
    assert r.kinds() == ["ip.frag_incomplete", "ip.frag_incomplete"]
    assert "timed out" in r.anomalies[0].detail and "id 0x0001" in r.anomalies[0].detail
    assert r.anomalies[0].frame == 1 and r.anomalies[0].ts_ns == T0
    # the late second half of ident 1 starts a new set, which never completes
    assert r.feed(v4frag(b"A" * 8, 8, False, ident=1), ts_ns=T0 + 2 * SECOND_NS) is None
    r.dec.flush(T0 + 2 * SECOND_NS + SECOND_NS // 2)
    assert len(r.anomalies) == 2
    r.dec.flush(T0 + 4 * SECOND_NS)
    assert r.kinds() == ["ip.frag_incomplete"] * 4
    assert r.c["frag_incomplete"] == 4 and r.dec.fragments_pending == 0


def test_timeout_on_same_key():
    r = Run(Limits(fragment_timeout_ns=SECOND_NS))
    r.feed(v4frag(b"a" * 8, 0, True), ts_ns=T0)
    assert r.feed(v4frag(b"A" * 8, 8, False), ts_ns=T0 + 5 * SECOND_NS) is None
    assert r.kinds() == ["ip.frag_incomplete"]


def test_flush_at_end_reports_every_incomplete_datagram():
    r = Run()
    for ident in range(5):
        r.feed(v4frag(b"a" * 8, 8, True, ident=ident))
    r.dec.flush(None)
    assert r.kinds() == ["ip.frag_incomplete"] * 5
    assert "capture ended" in r.anomalies[0].detail
    assert "1 fragment, 8 bytes of unknown (last fragment missing)" in r.anomalies[0].detail


def test_too_big_ipv4_protocol_maximum():
    r = Run()
    r.feed(v4frag(b"a" * 8, 0, True))
    assert r.feed(v4frag(b"b" * 16, 65528, False)) is None  # 20 + 65544 > 65535
    assert r.kinds() == ["ip.frag_too_big"] and r.c["frag_too_big"] == 1
    assert r.dec.fragments_pending == 0  # the datagram was dropped


def test_too_big_limit():
    r = Run(Limits(max_fragment_bytes=1000))
    r.feed(v6frag(b"a" * 992, 0, True))
    assert r.feed(v6frag(b"b" * 16, 992, False)) is None
    assert r.kinds() == ["ip.frag_too_big"] and "limit 1000" in r.anomalies[0].detail


def test_duplicate_after_completion_starts_a_new_datagram():
    r = Run()
    r.feed(v4frag(b"a" * 8, 0, True))
    assert r.feed(v4frag(b"b" * 8, 8, False)) is not None
    assert r.feed(v4frag(b"b" * 8, 8, False)) is None
    r.dec.flush(None)
    assert r.kinds() == ["ip.frag_incomplete"]


# ---------------------------------------------------------------------- truncated fragments
def test_snaplen_cut_last_fragment_gives_truncated_datagram():
    r = Run()
    r.feed(v4frag(PAYLOAD[:256], 0, True))
    full = v4frag(PAYLOAD[256:], 256, False)
    pkt = r.feed(full[:100], orig_len=len(full))
    assert pkt is not None and pkt.truncated
    assert pkt.payload == PAYLOAD[:336] and pkt.l4_len == 512
    assert r.kinds() == ["ip.truncated"]


def test_hole_from_cut_fragment_is_filled_by_a_retransmission():
    middle = v4frag(PAYLOAD[128:256], 128, True)
    r = Run()
    r.feed(v4frag(PAYLOAD[:128], 0, True))
    r.feed(middle[:60], orig_len=len(middle))
    r.feed(middle)
    pkt = r.feed(v4frag(PAYLOAD[256:], 256, False))
    assert pkt is not None and not pkt.truncated and pkt.payload == PAYLOAD
    assert r.kinds() == ["ip.truncated", "ip.frag_duplicate"]

    r = Run()
    r.feed(v4frag(PAYLOAD[:128], 0, True))
    r.feed(middle[:60], orig_len=len(middle))
    pkt = r.feed(v4frag(PAYLOAD[256:], 256, False))
    assert pkt is not None and pkt.truncated
    assert pkt.payload == PAYLOAD[:168] and pkt.l4_len == 512


def test_ranges_helpers():
    s: list[int] = []
    e: list[int] = []
    for a, b in [(10, 20), (30, 40), (0, 5), (20, 30), (50, 60), (5, 10)]:
        _add_range(s, e, a, b)
    assert list(zip(s, e, strict=True)) == [(0, 40), (50, 60)]
    _add_range(s, e, 45, 55)
    assert list(zip(s, e, strict=True)) == [(0, 40), (45, 60)]
    _clip_ranges(s, e, 50)
    assert list(zip(s, e, strict=True)) == [(0, 40), (45, 50)]
    _clip_ranges(s, e, 45)
    assert list(zip(s, e, strict=True)) == [(0, 40)]


# ---------------------------------------------------------------------- real captures
def run_capture(rel: str, limits: Limits | None = None):
    out: list[Anomaly] = []
    d = NetworkDecoder(limits or Limits(), out.append)
    pkts: list[L4Packet] = []
    with open_capture(CAPTURES / rel) as reader:
        for fr in reader:
            pkt = d.decode(fr)
            if pkt is not None:
                pkts.append(pkt)
    d.flush(None)
    return pkts, out, d


def kinds(out: list[Anomaly]) -> list[tuple[str, int | None]]:
    return [(a.kind, a.frame) for a in out]


def tcp_data(p: L4Packet) -> bytes:
    return p.payload[(p.payload[12] >> 4) * 4 :]


def ports(p: L4Packet) -> tuple[int, int]:
    return struct.unpack_from("!HH", p.payload)


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((CAPTURES / "expected.json").read_text())


def test_fragmented_1_overlap_conflict():
    pkts, out, d = run_capture("zeek/ipv4/fragmented-1.pcap")
    (p,) = pkts
    assert p.frame == 3 and p.proto == 17 and ports(p) == (123, 137)
    assert (p.src, p.dst) == (bytes([164, 1, 123, 163]), bytes([164, 1, 123, 61]))
    assert len(p.payload) == p.l4_len == 164
    assert ("ip.frag_overlap", 3) in kinds(out)
    assert kinds(out) == [("ip.frag_bad", 1), ("ip.frag_bad", 3), ("ip.frag_overlap", 3)]
    assert "id 0x00f2" in out[2].detail
    assert d.counters["fragments"] == 3 and d.counters["reassembled"] == 1


def test_fragmented_2_never_completes():
    pkts, out, _ = run_capture("zeek/ipv4/fragmented-2.pcap")
    assert pkts == []
    assert ("ip.frag_duplicate", 3) in kinds(out)
    assert kinds(out)[-1] == ("ip.frag_incomplete", 1)
    assert "134 bytes of 164" in out[-1].detail


def test_fragmented_3_incomplete_at_flush():
    pkts, out, d = run_capture("zeek/ipv4/fragmented-3.pcap")
    assert pkts == []
    assert kinds(out) == [("ip.frag_incomplete", 1)]
    assert "id 0x4bc5" in out[0].detail and "frames 1,2,3,4,5" in out[0].detail
    assert "5 fragments, 7400 bytes of unknown" in out[0].detail
    assert d.counters["fragments"] == 5 and d.counters["reassembled"] == 0


@pytest.mark.parametrize("policy", [OverlapPolicy.FIRST, OverlapPolicy.LAST])
def test_fragmented_4_http_request(policy):
    pkts, out, _ = run_capture("zeek/ipv4/fragmented-4.pcap", Limits(overlap_policy=policy))
    assert [p.frame for p in pkts] == [1, 5, 6]
    p = pkts[1]
    assert (p.src, p.dst) == (bytes([128, 32, 46, 142]), bytes([10, 0, 0, 1]))
    assert ports(p) == (7790, 80)
    data = tcp_data(p)
    assert len(data) == 69
    assert data.startswith(b"GET /msadc/..%2f../..%2f../")
    assert kinds(out) == [("ip.frag_overlap", 5)]
    if policy is OverlapPolicy.LAST:
        assert data[51] == 0  # what tshark shows: the later copy of bytes 48-72
    else:
        assert b"\x00" not in data  # the first copy: ".../winnt/system32/cmd.exe?..."
        assert data.endswith(b"cmd.exe?/c+dir+c:\\\n")


def test_fragmented_syn_options():
    pkts, out, _ = run_capture("zeek/ipv4/fragmented-syn.pcap")
    (p,) = pkts
    assert p.frame == 2 and p.payload[13] == 0x02 and out == []
    opts = p.payload[20 : (p.payload[12] >> 4) * 4]
    assert opts[:4] == b"\x02\x04\x05\xb4"  # MSS 1460
    assert b"\x04\x02" in opts and b"\x08\x0a" in opts  # SACK permitted, timestamps
    assert opts[-3:] == b"\x03\x03\x07"  # window scale 7


def test_ipv6_fragmented_dns():
    pkts, out, _ = run_capture("zeek/ipv6-fragmented-dns.pcap")
    assert [p.frame for p in pkts] == [1, 2, 3, 5, 8]
    big = pkts[-1]
    assert big.proto == 17 and ports(big)[0] == 53 and len(big.payload) == 3238
    assert struct.unpack_from("!H", big.payload, 4)[0] == 3238  # UDP length agrees
    assert kinds(out) == [("ip.frag_incomplete", 4)]
    assert "id 0x00000001" in out[0].detail


def test_dns_fragmented_v4_and_v6(expected):
    rel = "ntop-nDPI/dns_fragmented.pcap"
    pkts, out, d = run_capture(rel)
    assert out == []
    assert d.counters["fragments"] == 14 and d.counters["reassembled"] == 7
    flows = {
        (p.proto, frozenset({(p.src, ports(p)[0]), (p.dst, ports(p)[1])}))
        for p in pkts
        if p.proto in (6, 17)
    }
    assert sum(1 for f in flows if f[0] == 17) == expected[rel]["udp_flows"] == 19
    assert sum(1 for f in flows if f[0] == 6) == expected[rel]["tcp_streams"] == 2
    # every reassembled DNS answer is as long as its UDP header says
    for p in pkts:
        if p.proto == 17:
            assert struct.unpack_from("!H", p.payload, 4)[0] == len(p.payload)


def test_badpackets_never_reassemble():
    pkts, out, d = run_capture("ntop-nDPI/badpackets.pcap")
    assert pkts == []
    assert d.counters["fragments"] == 93 and d.counters["truncated"] == 93
    assert d.counters["frag_incomplete"] == 93 and d.counters["reassembled"] == 0
    k = [a.kind for a in out]
    assert k.count("ip.frag_incomplete") == 93
    # 86 frames are whole but their IP length lies (each reported); 7 were cut by the
    # snaplen: the first is reported, the rest summarised at the end
    lies = [a for a in out if a.kind == "ip.truncated" and "lies" in a.detail]
    snap = [a for a in out if a.kind == "ip.truncated" and "lies" not in a.detail]
    assert len(lies) == 86 and len(snap) == 2 and snap[-1].nbytes == 6


def test_defrag_eth_vlan_ipv4_tcp_syn():
    rel = "suricata-verify/defrag/bug-6887-defrag-eth-vlan-ipv4-tcp-syn/"
    rel += "frag-eth-vlan-ip-tcp-syn.pcap"
    pkts, out, _ = run_capture(rel)
    (p,) = pkts
    assert p.frame == 3 and p.vlans == (6,) and p.proto == 6
    assert p.payload[13] == 0x02 and len(p.payload) == 24 and out == []


def test_defrag_ipv6_tcp():
    pkts, out, d = run_capture("suricata-verify/defrag/bug-6887-defrag-ipv6-tcp/frag-ip-tcp.pcap")
    (p,) = pkts
    assert p.frame == 3 and p.ip_version == 6 and p.proto == 6
    assert p.payload[13] == 0x10  # ACK
    assert len(tcp_data(p)) == 1000
    assert out == [] and d.link_types_seen == {229: 3}


def test_exception_policy_defrag_icmp():
    pkts, out, _ = run_capture("suricata-verify/exception-policy-defrag-01/ipv4frags.pcap")
    assert [(p.frame, p.proto, p.payload[0]) for p in pkts] == [(2, 1, 8), (3, 1, 0)]
    assert len(pkts[0].payload) == len(pkts[1].payload) == 1408
    assert pkts[0].payload[8:] == pkts[1].payload[8:]  # the echo reply repeats the data
    assert out == []


def test_ipv6_malformed_fragments():
    pkts, out, d = run_capture(
        "suricata-verify/ipv6-evasion/ipv6-malformed-fragments-1/frag-1.pcap"
    )
    assert kinds(out) == [("ip.frag_overlap", 8)]
    assert "id 0x00000001" in out[0].detail
    done = [p for p in pkts if p.frame == 9]
    assert len(done) == 1 and done[0].proto == 58 and done[0].payload[0] == 128
    assert len(done[0].payload) == 1208
    assert d.counters["fragments"] == 4 and len(pkts) == 10


def test_socks5_http_over_fragments(expected):
    rel = "arkime/socks5-http-302-frag.pcap"
    pkts, out, d = run_capture(rel)
    assert out == []
    assert d.counters["fragments"] == 62 and d.counters["reassembled"] == 4
    assert len(pkts) == expected[rel]["packets"] - 62 + 4
    assert {p.proto for p in pkts} == {6}
    assert any(tcp_data(p).startswith(b"HTTP/1.1 302") for p in pkts)


def test_fuzzed_raw_ipv4_fragment():
    pkts, out, _ = run_capture("ntop-nDPI/quic-fuzz-overflow.pcapng")
    assert pkts == [] and [a.kind for a in out] == ["ip.frag_bad", "ip.frag_incomplete"]

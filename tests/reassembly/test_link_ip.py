"""Link-layer and IPv4/IPv6 decoding (reassembly.link, reassembly.ip, reassembly.network).

Hand-built frames (struct, a few scapy ones) for every link type and header variant,
truncation at every cut length, random bytes, and the facts expected.json lists for
the real captures in tests/data/captures.
"""

from __future__ import annotations

import json
import struct
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reassembly.capture import Frame, open_capture
from reassembly.events import Anomaly
from reassembly.limits import Limits
from reassembly.link import (
    L3_IP,
    L3_IPV4,
    L3_IPV6,
    LINK_DECODERS,
    NON_IP,
    SHORT,
    UNKNOWN,
    decode_link,
)
from reassembly.network import L4Packet, NetworkDecoder
from tests.conftest import SHARED

CAPTURES = SHARED / "captures"

SRC4 = bytes([10, 0, 0, 1])
DST4 = bytes([10, 0, 0, 2])
SRC6 = bytes.fromhex("20010db8000000000000000000000001")
DST6 = bytes.fromhex("20010db8000000000000000000000002")


# ---------------------------------------------------------------------- builders
def tcp_hdr(sport: int = 1234, dport: int = 4222, data: bytes = b"") -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 65535, 0, 0) + data


def udp_hdr(sport: int = 5353, dport: int = 53, data: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def ipv4(
    payload: bytes,
    proto: int = 6,
    *,
    src: bytes = SRC4,
    dst: bytes = DST4,
    ident: int = 1,
    offset: int = 0,
    mf: bool = False,
    options: bytes = b"",
    tot: int | None = None,
    version: int = 4,
    ihl: int | None = None,
) -> bytes:
    hl = 20 + len(options)
    if ihl is None:
        ihl = hl // 4
    if tot is None:
        tot = hl + len(payload)
    flags = (0x2000 if mf else 0) | (offset >> 3)
    hdr = struct.pack(
        "!BBHHHBBH4s4s", (version << 4) | ihl, 0, tot, ident, flags, 64, proto, 0, src, dst
    )
    return hdr + options + payload


def ipv6(
    payload: bytes,
    nh: int = 6,
    *,
    src: bytes = SRC6,
    dst: bytes = DST6,
    plen: int | None = None,
    version: int = 6,
) -> bytes:
    if plen is None:
        plen = len(payload)
    return struct.pack("!IHBB16s16s", version << 28, plen, nh, 64, src, dst) + payload


def ext(nh: int, body: bytes = b"") -> bytes:
    """Generic IPv6 extension header ((len+1)*8 bytes), body padded with zeros."""
    total = 2 + len(body)
    total += -total % 8
    body = body + bytes(total - 2 - len(body))
    return bytes([nh, total // 8 - 1]) + body


def ah(nh: int, icv: bytes = b"\x00" * 12) -> bytes:
    total = 12 + len(icv)
    return bytes([nh, total // 4 - 2]) + b"\x00\x00" + struct.pack("!II", 0x100, 1) + icv


def frag6(nh: int, offset: int, more: bool, ident: int) -> bytes:
    return struct.pack("!BBHI", nh, 0, offset | int(more), ident)


def eth(payload: bytes, etype: int = 0x0800, tags: tuple[tuple[int, int], ...] = ()) -> bytes:
    out = b"\x00\x11\x22\x33\x44\x55" + b"\x66\x77\x88\x99\xaa\xbb"
    for tpid, tci in tags:
        out += struct.pack("!H", tpid) + struct.pack("!H", tci)
    return out + struct.pack("!H", etype) + payload


def frame(data: bytes, linktype: int = 1, number: int = 1, orig_len: int | None = None) -> Frame:
    return Frame(number, 1_700_000_000_000_000_000 + number, linktype, data,
                 len(data) if orig_len is None else orig_len, 0)  # fmt: skip


def decoder(limits: Limits | None = None) -> tuple[NetworkDecoder, list[Anomaly]]:
    out: list[Anomaly] = []
    return NetworkDecoder(limits or Limits(), out.append), out


def decode1(data: bytes, linktype: int = 1, orig_len: int | None = None):
    d, out = decoder()
    pkt = d.decode(frame(data, linktype, orig_len=orig_len))
    return pkt, out, d


TCP_SEG = tcp_hdr(data=b"hello world")
IP4_TCP = ipv4(TCP_SEG)
IP6_TCP = ipv6(TCP_SEG)


def check_v4_tcp(pkt: L4Packet | None, vlans: tuple[int, ...] = ()) -> None:
    assert pkt is not None
    assert pkt.ip_version == 4
    assert (pkt.src, pkt.dst, pkt.proto) == (SRC4, DST4, 6)
    assert pkt.payload == TCP_SEG
    assert pkt.truncated is False
    assert pkt.vlans == vlans
    assert pkt.l4_len == len(TCP_SEG)


def check_v6_tcp(pkt: L4Packet | None, vlans: tuple[int, ...] = ()) -> None:
    assert pkt is not None
    assert pkt.ip_version == 6
    assert (pkt.src, pkt.dst, pkt.proto) == (SRC6, DST6, 6)
    assert pkt.payload == TCP_SEG
    assert pkt.truncated is False
    assert pkt.vlans == vlans
    assert pkt.l4_len == len(TCP_SEG)


# ---------------------------------------------------------------------- Ethernet
def test_ethernet_ipv4_fields_and_padding_removed():
    data = eth(IP4_TCP) + b"\x00" * 20  # trailing Ethernet padding / FCS
    pkt, out, d = decode1(data)
    check_v4_tcp(pkt)
    assert pkt.frame == 1 and pkt.ts_ns == 1_700_000_000_000_000_001
    assert out == []
    assert d.counters["ipv4"] == 1 and d.counters["l4_packets"] == 1


def test_ethernet_ipv6():
    pkt, out, _ = decode1(eth(IP6_TCP, 0x86DD) + b"\xee" * 7)
    check_v6_tcp(pkt)
    assert out == []


def test_fast_path_and_general_path_agree():
    # Ethernet frames take the fast path; the same packets over RAW take the general one.
    for ip in (IP4_TCP, ipv4(udp_hdr(data=b"x" * 33), 17), IP6_TCP, ipv6(udp_hdr(), 17)):
        etype = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
        a, _, _ = decode1(eth(ip, etype) + b"\x00" * 6)
        b, _, _ = decode1(ip, 101)
        assert a == b


@pytest.mark.parametrize(
    ("tags", "vlans"),
    [
        (((0x8100, 6),), (6,)),
        (((0x8100, 0xB000),), (0,)),  # priority tag: PCP 5, VLAN 0
        (((0x8100, 0xE00A),), (10,)),  # PCP and DEI bits masked off
        (((0x88A8, 1525), (0x8100, 30)), (1525, 30)),
        (((0x9100, 100), (0x8100, 200)), (100, 200)),
        (((0x8100, 200), (0x8100, 300), (0x8100, 400)), (200, 300, 400)),
        (tuple((0x8100, v) for v in range(1, 9)), tuple(range(1, 9))),
    ],
)
def test_vlan_stacks(tags, vlans):
    pkt, out, _ = decode1(eth(IP4_TCP, 0x0800, tags))
    check_v4_tcp(pkt, vlans)
    pkt6, _, _ = decode1(eth(IP6_TCP, 0x86DD, tags))
    check_v6_tcp(pkt6, vlans)
    assert out == []


def test_non_ip_ethertypes_are_counted():
    d, out = decoder()
    arp = eth(bytes(28), 0x0806)
    llc = eth(b"\xaa\xaa\x03" + bytes(40), 43)  # 802.3: the type field is a length
    lldp = eth(bytes(30), 0x88CC, ((0x8100, 5),))
    for i, f in enumerate((arp, llc, lldp, arp), 1):
        assert d.decode(frame(f, number=i)) is None
    assert out == []
    assert d.counters["non_ip"] == 4
    assert d.non_ip_types == {(1, 0x0806): 2, (1, 43): 1, (1, 0x88CC): 1}


def test_pppoe_session():
    def pppoe(proto: int, payload: bytes) -> bytes:
        return struct.pack("!BBHHH", 0x11, 0, 0x1234, len(payload) + 2, proto) + payload

    check_v4_tcp(decode1(eth(pppoe(0x0021, IP4_TCP), 0x8864))[0])
    check_v6_tcp(decode1(eth(pppoe(0x0057, IP6_TCP), 0x8864, ((0x8100, 7),)))[0], (7,))
    pkt, out, d = decode1(eth(pppoe(0xC021, bytes(10)), 0x8864))  # LCP
    assert pkt is None and out == [] and d.non_ip_types == {(1, 0xC021): 1}


def test_mpls_label_stack():
    labels = struct.pack("!I", (100 << 12) | 64) + struct.pack("!I", (200 << 12) | 0x100 | 64)
    check_v4_tcp(decode1(eth(labels + IP4_TCP, 0x8847))[0])
    check_v6_tcp(decode1(eth(labels + IP6_TCP, 0x8847))[0])


# ---------------------------------------------------------------------- other link types
@pytest.mark.parametrize("order", ["<I", ">I"])
@pytest.mark.parametrize(("af", "ip"), [(2, IP4_TCP), (24, IP6_TCP), (28, IP6_TCP), (30, IP6_TCP)])
def test_null_both_byte_orders(order, af, ip):
    pkt, out, _ = decode1(struct.pack(order, af) + ip, 0)
    (check_v4_tcp if af == 2 else check_v6_tcp)(pkt)
    assert out == []


@pytest.mark.parametrize(("af", "ip"), [(2, IP4_TCP), (24, IP6_TCP), (30, IP6_TCP)])
def test_loop_network_order(af, ip):
    pkt, _, _ = decode1(struct.pack(">I", af) + ip, 108)
    (check_v4_tcp if af == 2 else check_v6_tcp)(pkt)


def test_null_unknown_family_is_non_ip():
    pkt, out, d = decode1(struct.pack("<I", 7) + bytes(30), 0)
    assert pkt is None and out == [] and d.non_ip_types == {(0, 7): 1}


@pytest.mark.parametrize("lt", [101, 12, 14])
def test_raw_version_nibble_decides(lt):
    check_v4_tcp(decode1(IP4_TCP, lt)[0])
    check_v6_tcp(decode1(IP6_TCP, lt)[0])
    pkt, out, d = decode1(b"\x55" + IP4_TCP[1:], lt)
    assert pkt is None
    assert [a.kind for a in out] == ["ip.bad_header"]
    assert "IP version 5" in out[0].detail
    assert d.counters["bad_header"] == 1


def test_linktype_ipv4_ipv6():
    check_v4_tcp(decode1(IP4_TCP, 228)[0])
    check_v6_tcp(decode1(IP6_TCP, 229)[0])
    # the link type says IPv4: an IPv6 packet there is a bad header
    pkt, out, _ = decode1(IP6_TCP, 228)
    assert pkt is None and [a.kind for a in out] == ["ip.bad_header"]


def test_linux_sll():
    hdr = struct.pack("!HHH8sH", 0, 1, 6, b"\x00\x11\x22\x33\x44\x55\x00\x00", 0x0800)
    check_v4_tcp(decode1(hdr + IP4_TCP, 113)[0])
    hdr6 = hdr[:14] + b"\x86\xdd"
    check_v6_tcp(decode1(hdr6 + IP6_TCP, 113)[0])
    # a VLAN tag left in place by the capturing kernel
    hdrv = hdr[:14] + b"\x81\x00" + struct.pack("!HH", 42, 0x0800)
    check_v4_tcp(decode1(hdrv + IP4_TCP, 113)[0], (42,))
    pkt, _, d = decode1(hdr[:14] + b"\x08\x06" + bytes(28), 113)
    assert pkt is None and d.non_ip_types == {(113, 0x0806): 1}


def test_linux_sll2():
    def sll2(proto: int) -> bytes:
        return struct.pack("!HHIHBB8s", proto, 0, 3, 1, 0, 6, bytes(8))

    check_v4_tcp(decode1(sll2(0x0800) + IP4_TCP, 276)[0])
    check_v6_tcp(decode1(sll2(0x86DD) + IP6_TCP, 276)[0])
    assert decode1(sll2(0x0806) + bytes(28), 276)[0] is None


@pytest.mark.parametrize("lt", [9, 50])
def test_ppp_variants(lt):
    check_v4_tcp(decode1(b"\x00\x21" + IP4_TCP, lt)[0])
    check_v6_tcp(decode1(b"\x00\x57" + IP6_TCP, lt)[0])
    check_v4_tcp(decode1(b"\xff\x03\x00\x21" + IP4_TCP, lt)[0])
    check_v6_tcp(decode1(b"\xff\x03\x00\x57" + IP6_TCP, lt)[0])
    check_v4_tcp(decode1(b"\x21" + IP4_TCP, lt)[0])  # protocol-field compression
    check_v6_tcp(decode1(b"\xff\x03\x57" + IP6_TCP, lt)[0])
    pkt, out, d = decode1(b"\xc0\x21" + bytes(10), lt)  # LCP
    assert pkt is None and out == [] and d.non_ip_types == {(lt, 0xC021): 1}


def test_cisco_hdlc():
    check_v4_tcp(decode1(b"\x0f\x00\x08\x00" + IP4_TCP, 104)[0])
    check_v6_tcp(decode1(b"\x8f\x00\x86\xdd" + IP6_TCP, 104)[0])


@pytest.mark.parametrize("order", ["<", ">"])
def test_nflog(order):
    def tlv(t: int, value: bytes) -> bytes:
        raw = struct.pack(order + "HH", 4 + len(value), t) + value
        return raw + bytes(-len(raw) % 4)

    def nflog(family: int, ip: bytes) -> bytes:
        return (
            bytes([family, 0, 0, 0]) + tlv(1, b"\x08\x00\x01\x00") + tlv(10, b"pfx\0") + tlv(9, ip)
        )

    check_v4_tcp(decode1(nflog(2, IP4_TCP), 239)[0])
    check_v6_tcp(decode1(nflog(10, IP6_TCP), 239)[0])
    pkt, _, d = decode1(bytes([2, 0, 0, 0]) + tlv(1, b"\x08\x00\x01\x00"), 239)
    assert pkt is None and d.counters["non_ip"] == 1


def test_unknown_linktype_reported_once_per_value():
    d, out = decoder()
    for i in range(5):
        assert d.decode(frame(IP4_TCP, 147, number=i + 1)) is None
    assert d.decode(frame(IP4_TCP, 148, number=6)) is None
    assert [(a.kind, a.frame) for a in out] == [
        ("link.unknown_type", 1),
        ("link.unknown_type", 6),
    ]
    assert "147" in out[0].detail
    assert d.counters["unknown_linktype"] == 6
    assert d.link_types_seen == {147: 5, 148: 1}


def test_link_types_seen_counts_every_frame():
    d, _ = decoder()
    seq = [1, 1, 101, 1, 228, 228, 101, 1]
    for i, lt in enumerate(seq, 1):
        d.decode(frame(eth(IP4_TCP) if lt == 1 else IP4_TCP, lt, number=i))
    assert d.link_types_seen == dict(Counter(seq))
    assert list(d.link_types_seen) == [1, 101, 228]
    assert d.counters["frames"] == len(seq) == d.counters["l4_packets"]


@pytest.mark.parametrize(
    ("lt", "data", "expected"),
    [
        (1, eth(b"", 0x0800), (L3_IPV4, 14, ())),
        (1, eth(b"", 0x86DD, ((0x88A8, 1), (0x8100, 2))), (L3_IPV6, 22, (1, 2))),
        (1, b"\x00" * 13, (SHORT, 0, ())),
        (1, eth(b"", 0x8100)[:-2] + b"\x81\x00\x00", (SHORT, 0, ())),
        (0, b"\x02\x00", (SHORT, 0, ())),
        (101, b"", (L3_IP, 0, ())),
        (9, b"\xff\x03", (SHORT, 0, ())),
        (113, bytes(15), (SHORT, 0, ())),
        (276, bytes(19), (SHORT, 0, ())),
        (1, eth(b"", 0x0806), (NON_IP, 0x0806, ())),
        (999, b"", (UNKNOWN, 999, ())),
    ],
)
def test_decode_link_results(lt, data, expected):
    assert decode_link(lt, data) == expected


def test_link_truncated_reported():
    pkt, out, d = decode1(eth(IP4_TCP)[:8], orig_len=78)
    assert pkt is None
    assert [a.kind for a in out] == ["link.truncated"]
    assert d.counters["link_truncated"] == 1


# ---------------------------------------------------------------------- IPv4 header
def test_ipv4_options_skipped():
    opts = b"\x07\x07\x04" + bytes(4) + b"\x01"  # record route (7 bytes) + NOP
    pkt, out, _ = decode1(eth(ipv4(TCP_SEG, options=opts)))
    check_v4_tcp(pkt)
    assert out == []
    opts40 = b"\x01" * 40  # IHL 15, the maximum
    check_v4_tcp(decode1(eth(ipv4(TCP_SEG, options=opts40)))[0])


def test_ipv4_options_with_scapy():
    from scapy.layers.inet import IP, TCP, IPOption_RR
    from scapy.packet import Raw

    raw = bytes(
        IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_RR(routers=["1.2.3.4"])])
        / TCP(sport=1, dport=2)
        / Raw(b"abc")
    )
    assert raw[0] & 0x0F > 5
    pkt = decode1(raw, 228)[0]
    assert pkt is not None and pkt.payload[:4] == b"\x00\x01\x00\x02"
    assert pkt.payload[20:] == b"abc"


@pytest.mark.parametrize(
    ("ip", "needle"),
    [
        (ipv4(TCP_SEG, version=5), "version 5"),
        (ipv4(TCP_SEG, ihl=4), "header length 16"),
        (ipv4(TCP_SEG, tot=19), "total length 19"),
        (ipv4(TCP_SEG, options=b"\x01" * 4, tot=22), "total length 22"),
    ],
)
def test_ipv4_bad_headers(ip, needle):
    pkt, out, d = decode1(eth(ip))
    assert pkt is None
    assert [a.kind for a in out] == ["ip.bad_header"]
    assert needle in out[0].detail
    assert out[0].frame == 1
    assert d.counters["bad_header"] == 1


def test_ipv4_total_length_zero_is_offload():
    pkt, out, d = decode1(eth(ipv4(TCP_SEG, tot=0)))
    check_v4_tcp(pkt)
    assert out == [] and d.counters["ip_zero_length"] == 1


def test_ipv4_header_cut_by_frame_end():
    # options declared but the frame (complete on the wire) ends before them
    ip = ipv4(b"", options=b"\x01" * 8)[:24]
    pkt, out, _ = decode1(eth(ip))
    assert pkt is None and [a.kind for a in out] == ["ip.bad_header"]
    pkt, out, _ = decode1(eth(ip), orig_len=200)
    assert pkt is None and [a.kind for a in out] == ["ip.truncated"]


# ---------------------------------------------------------------------- IPv6 header
def test_ipv6_extension_chain():
    chain = (
        ext(43, b"\x00\x00" + bytes(4))  # hop-by-hop -> routing
        + ext(60, bytes([0, 0]) + bytes(20))  # routing -> destination options
        + ext(51, b"\x01\x04\x00\x00\x00\x00")  # dest opts -> AH
        + ah(135)  # AH -> mobility
        + ext(6, bytes(6))  # mobility -> TCP
    )
    pkt, out, d = decode1(eth(ipv6(chain + TCP_SEG, 0), 0x86DD))
    check_v6_tcp(pkt)
    assert out == [] and d.counters["ipv6_ext_headers"] == 1


def test_ipv6_ext_chain_with_scapy():
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting
    from scapy.packet import Raw

    raw = bytes(
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(addresses=["2001:db8::99"])
        / IPv6ExtHdrDestOpt()
        / UDP(sport=53, dport=5353)
        / Raw(b"dns!")
    )
    pkt = decode1(raw, 229)[0]
    assert pkt is not None and pkt.proto == 17
    assert pkt.payload[:4] == b"\x00\x35\x14\xe9" and pkt.payload[8:] == b"dns!"


@pytest.mark.parametrize("stop", [50, 59, 58, 132])
def test_ipv6_walk_stops_at_esp_none_and_upper_layers(stop):
    body = b"\xde\xad\xbe\xef" * 4
    pkt, out, _ = decode1(ipv6(ext(stop) + body, 0), 229)
    assert pkt is not None and out == []
    assert pkt.proto == stop and pkt.payload == body


def test_ipv6_atomic_fragment_is_not_reassembled():
    pkt, out, d = decode1(ipv6(frag6(6, 0, False, 77) + TCP_SEG, 44), 229)
    check_v6_tcp(pkt)
    assert out == [] and d.counters["fragments"] == 0


def test_ipv6_bad_headers():
    pkt, out, _ = decode1(ipv6(TCP_SEG, version=4), 229)
    assert pkt is None and [a.kind for a in out] == ["ip.bad_header"]
    # an extension header longer than the declared payload
    pkt, out, _ = decode1(ipv6(bytes([6, 3]) + bytes(6), 0) + bytes(40), 229)
    assert pkt is None and [a.kind for a in out] == ["ip.bad_header"]


def test_ipv6_payload_length_zero_uses_capture():
    pkt, out, d = decode1(ipv6(TCP_SEG, plen=0), 229)
    check_v6_tcp(pkt)
    assert out == [] and d.counters["ip_zero_length"] == 1


# ---------------------------------------------------------------------- truncation
def test_snaplen_truncation_reported_once_then_summarised():
    seg = tcp_hdr(data=b"A" * 500)
    full = eth(ipv4(seg))
    d, out = decoder()
    for i in range(1, 5):
        pkt = d.decode(frame(full[:96], number=i, orig_len=len(full)))
        assert pkt is not None and pkt.truncated is True
        assert pkt.payload == seg[: 96 - 34] and pkt.l4_len == len(seg)
    assert [(a.kind, a.frame) for a in out] == [("ip.truncated", 1)]
    assert "snaplen" in out[0].detail
    d.flush(None)
    assert [a.kind for a in out] == ["ip.truncated", "ip.truncated"]
    assert out[1].nbytes == 3 and "3 more packets" in out[1].detail
    assert d.counters["truncated"] == 4


def test_lying_total_length_reported_every_time():
    full = eth(ipv4(TCP_SEG, tot=1000))
    d, out = decoder()
    for i in (1, 2):
        pkt = d.decode(frame(full, number=i))
        assert pkt is not None and pkt.truncated and pkt.payload == TCP_SEG
        assert pkt.l4_len == 980
    assert [(a.kind, a.frame) for a in out] == [("ip.truncated", 1), ("ip.truncated", 2)]
    assert "lies" in out[0].detail


def test_ipv6_truncated_payload_and_cut_extension():
    pkt, out, _ = decode1(ipv6(TCP_SEG, plen=100), 229)
    assert pkt is not None and pkt.truncated and pkt.payload == TCP_SEG and pkt.l4_len == 100
    assert [a.kind for a in out] == ["ip.truncated"]
    # the capture ends inside an extension header: nothing left to decode
    data = ipv6(ext(6, bytes(14)) + TCP_SEG, 0)[:44]
    pkt, out, d = decode1(data, 229, orig_len=200)
    assert pkt is None and [a.kind for a in out] == ["ip.truncated"]
    assert d.counters["truncated"] == 1


def _samples() -> list[tuple[int, bytes]]:
    chain6 = ipv6(ext(43, bytes(6)) + ah(60) + ext(6, bytes(6)) + TCP_SEG, 0)
    return [
        (1, eth(ipv4(TCP_SEG, options=b"\x01" * 12) + b"\x00" * 4)),
        (1, eth(chain6, 0x86DD, ((0x88A8, 3), (0x8100, 4)))),
        (1, eth(ipv4(TCP_SEG, mf=True, ident=9))),
        (1, eth(ipv6(frag6(6, 8, False, 5) + TCP_SEG, 44), 0x86DD)),
        (1, eth(struct.pack("!BBHHH", 0x11, 0, 1, 0, 0x57) + IP6_TCP, 0x8864)),
        (0, b"\x02\x00\x00\x00" + IP4_TCP),
        (108, b"\x00\x00\x00\x1e" + IP6_TCP),
        (101, IP6_TCP),
        (113, bytes(14) + b"\x08\x00" + IP4_TCP),
        (276, b"\x86\xdd" + bytes(18) + IP6_TCP),
        (9, b"\xff\x03\x00\x21" + IP4_TCP),
        (239, bytes([2, 0, 0, 0]) + struct.pack("<HH", 4 + len(IP4_TCP), 9) + IP4_TCP),
    ]


@pytest.mark.parametrize(("lt", "data"), _samples())
def test_every_cut_length_never_raises(lt, data):
    d, out = decoder()
    for cut in range(len(data) + 1):
        for orig in (cut, len(data)):  # a lying header, or a snaplen cut
            pkt = d.decode(frame(data[:cut], lt, number=cut + 1, orig_len=orig))
            if pkt is not None:
                assert len(pkt.payload) <= pkt.l4_len
                assert pkt.truncated == (len(pkt.payload) < pkt.l4_len)
    d.flush(None)
    assert all(isinstance(a, Anomaly) for a in out)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(lt=st.sampled_from(sorted(LINK_DECODERS) + [147]), data=st.binary(max_size=200))
def test_random_bytes_never_raise(lt, data):
    d, _ = decoder()
    d.decode(frame(data, lt))
    d.decode(frame(data, lt, number=2, orig_len=len(data) + 100))
    d.flush(None)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    sample=st.sampled_from(_samples()),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
)
def test_mutated_frames_never_raise(sample, flips):
    lt, data = sample
    buf = bytearray(data)
    for pos, val in flips:
        buf[pos % len(buf)] = val
    d, _ = decoder()
    pkt = d.decode(frame(bytes(buf), lt))
    if pkt is not None:
        assert len(pkt.payload) <= pkt.l4_len
    d.flush(None)


def test_memoryview_frame_data_accepted():
    pkt, _, _ = decode1(memoryview(eth(IP4_TCP)))  # type: ignore[arg-type]
    check_v4_tcp(pkt)
    assert type(pkt.payload) is bytes


# ---------------------------------------------------------------------- real captures
def run_capture(rel: str, limits: Limits | None = None):
    d, out = decoder(limits)
    pkts: list[L4Packet] = []
    with open_capture(CAPTURES / rel) as reader:
        for fr in reader:
            pkt = d.decode(fr)
            if pkt is not None:
                pkts.append(pkt)
    d.flush(None)
    return pkts, out, d


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((CAPTURES / "expected.json").read_text())


def test_dot1ad(expected):
    pkts, out, _ = run_capture("arkime/dot1ad.pcap")
    assert expected["arkime/dot1ad.pcap"]["packets"] == 2
    assert [p.vlans for p in pkts] == [(1525, 30), (1535, 40)]
    assert [(p.proto, p.payload[0]) for p in pkts] == [(1, 8), (1, 0)]  # echo request, reply
    assert out == []


def test_three_stacked_vlans():
    pkts, out, _ = run_capture("suricata-verify/detect-vlan-id/input.pcap")
    assert [p.vlans for p in pkts] == [(200, 300, 400), ()]
    assert [p.proto for p in pkts] == [1, 1] and out == []


@pytest.mark.parametrize(
    ("rel", "vlans"), [("zeek/http-vlan-0.pcap", (0,)), ("zeek/http-qinq-0.pcap", (0, 0))]
)
def test_vlan_zero(rel, vlans, expected):
    pkts, out, _ = run_capture(rel)
    assert len(pkts) == expected[rel]["packets"] == 14
    assert {p.vlans for p in pkts} == {vlans}
    assert {p.proto for p in pkts} == {6} and out == []


def test_vlan_6_tcp_overlap_capture():
    pkts, _, _ = run_capture("suricata-verify/eve-overlap-payload-01/tcp-overlap.pcap")
    assert len(pkts) == 7 and {p.vlans for p in pkts} == {(6,)}


@pytest.mark.parametrize(
    ("rel", "linktype"),
    [
        ("suricata-verify/decode-sll2-01/input.pcap", 276),
        ("zeek/tls/irc-starttls.pcap", 113),
        ("zeek/redis/pubsub.pcap", 0),
        ("zeek/tcp/payload-syn.pcap", 101),
        ("zeek/tcp-syslog.pcap", 228),
        ("suricata-verify/linktype-228/flow-test-01.pcap", 228),
        ("zeek/nflog-http.pcap", 239),
    ],
)
def test_tcp_captures_all_frames_decode(rel, linktype, expected):
    pkts, out, d = run_capture(rel)
    n = expected[rel]["packets"]
    assert len(pkts) == n
    assert d.link_types_seen == {linktype: n}
    assert {p.proto for p in pkts} == {6}
    assert {p.ip_version for p in pkts} == {4}
    assert not any(p.truncated for p in pkts) and out == []


def test_sll2_http_request():
    pkts, _, _ = run_capture("suricata-verify/decode-sll2-01/input.pcap")
    tcp_payloads = [p.payload[(p.payload[12] >> 4) * 4 :] for p in pkts]
    assert [len(x) for x in tcp_payloads] == [0, 0, 0, 82, 0]
    assert tcp_payloads[3].startswith(b"GET /")


def test_payload_syn_raw():
    pkts, _, _ = run_capture("zeek/tcp/payload-syn.pcap")
    syn = pkts[0]
    assert (syn.src, syn.dst) == (bytes([192, 168, 0, 1]), bytes([192, 168, 0, 2]))
    assert syn.payload[13] & 0x02  # SYN flag
    assert len(syn.payload) - (syn.payload[12] >> 4) * 4 == 100


def test_linux_sll2_arp_icmp():
    pkts, out, d = run_capture("zeek/linux_dlt_sll2.pcap")
    assert [(p.ip_version, p.proto) for p in pkts] == [(4, 1), (4, 1), (6, 58), (6, 58)]
    assert d.counters["non_ip"] == 2 and d.non_ip_types[(276, 0x0806)] == 1
    assert out == []


def test_ipv6_linktype_mldv2():
    pkts, out, _ = run_capture("zeek/icmp/icmp6-mldv2.pcap")
    # hop-by-hop (router alert) then ICMPv6 type 143
    assert len(pkts) == 5 and {(p.proto, p.payload[0]) for p in pkts} == {(58, 143)}
    assert out == []


@pytest.mark.parametrize(
    "rel",
    [
        "zeek/quic/interop/quic-go_quic-go/handshake.pcap",
        "zeek/quic/interop/quic-go_quic-go/retry.pcap",
        "zeek/quic/interop/quic-go_quic-go/zerortt.pcap",
    ],
)
def test_ppp_quic_interop(rel, expected):
    pkts, out, d = run_capture(rel)
    facts = expected[rel]
    assert len(pkts) == facts["packets"]
    assert d.link_types_seen == {9: facts["packets"]}
    udp = [p for p in pkts if p.proto == 17]
    icmp6 = [p for p in pkts if p.proto == 58]
    assert len(udp) == facts["quic"]["frames"]
    assert {p.ip_version for p in udp} == {4}
    assert 443 in {int.from_bytes(p.payload[2:4], "big") for p in udp}
    assert len(icmp6) == 4 and {p.payload[0] for p in icmp6} == {135}
    assert out == []


def test_ipv4_truncated_capture():
    pkts, out, d = run_capture("suricata-verify/ipv4-truncated/truncated.pcap")
    (p,) = pkts
    assert p.truncated and p.proto == 17
    assert len(p.payload) == 1530 - 14 - 20 and p.l4_len == 65028 - 20
    assert p.payload[:6] == struct.pack("!HHH", 2539, 5333, 65008)
    assert [a.kind for a in out] == ["ip.truncated"] and "65028" in out[0].detail
    assert d.counters["truncated"] == 1


def test_truncated_captures():
    pkts, out, _ = run_capture("zeek/trunc/trunc-hdr.pcap")
    assert pkts == [] and [a.kind for a in out] == ["link.truncated"]
    pkts, out, _ = run_capture("zeek/trunc/ip4-trunc.pcap")
    assert pkts == [] and [a.kind for a in out] == ["ip.truncated"]
    pkts, out, _ = run_capture("zeek/trunc/ip6-trunc.pcap")
    assert pkts == [] and [a.kind for a in out] == ["ip.truncated"]
    pkts, out, _ = run_capture("zeek/trunc/ip-discarder-truncated-tcp-oob.pcapng")
    assert [(p.proto, p.payload, p.l4_len, p.truncated) for p in pkts] == [(6, b"", 20, True)]
    pkts, out, _ = run_capture("zeek/udp-contents-truncated-oob.pcap")
    (p,) = pkts
    assert p.payload == struct.pack("!HH", 40000, 55555) + b"\xff\xeb\x00\x00"
    assert p.l4_len == 65515 and p.truncated


def test_snaplen_capture_truncation_summary():
    pkts, out, d = run_capture("zeek/tcp/truncated-header.pcap")
    # the SYN (options cut) and the 11 data segments lack bytes; the pure ACK/FIN
    # segments end with their TCP header and are complete
    assert len(pkts) == 24 and d.counters["truncated"] == 12
    cut = [p for p in pkts if p.truncated]
    assert len(cut) == 12 and cut[0].frame == 1 and cut[0].l4_len - len(cut[0].payload) == 6
    assert sum(p.l4_len - len(p.payload) for p in cut[1:]) == 605
    assert [a.kind for a in out] == ["ip.truncated", "ip.truncated"]
    assert out[0].frame == 1 and out[1].nbytes == 11


def test_every_capture_decodes_without_raising(expected):
    for rel, facts in expected.items():
        if facts.get("file_format", {}).get("type") not in ("pcap", "pcapng"):
            continue
        pkts, out, d = run_capture(rel)
        assert d.counters["unknown_linktype"] == 0, rel
        assert len(pkts) <= d.counters["frames"]
        assert all(isinstance(a, Anomaly) for a in out)

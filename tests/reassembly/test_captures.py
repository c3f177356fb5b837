"""Reassembly of the shared real-world captures against their verified facts."""

from __future__ import annotations

import json

import pytest

from reassembly.events import RoleSource
from tests.conftest import SHARED
from tests.reassembly.streams import reassemble

CAPTURES = SHARED / "captures"
EXPECTED = json.loads((CAPTURES / "expected.json").read_text())

# Where our flow count differs from tshark's on purpose, and why.
FLOW_COUNT_DEVIATIONS = {
    # 93 first fragments whose datagrams never complete: tshark counts a UDP "flow" from
    # the UDP header inside each unreassembled first fragment; we deliver no datagram
    # and report each one as ip.frag_incomplete instead.
    "ntop-nDPI/badpackets.pcap": (0, 0),
}

WITH_COUNTS = sorted(k for k, v in EXPECTED.items() if "tcp_streams" in v)


@pytest.mark.parametrize("name", WITH_COUNTS)
def test_flow_counts_and_byte_accounting(name):
    r = reassemble(CAPTURES / name)
    facts = EXPECTED[name]
    want = FLOW_COUNT_DEVIATIONS.get(name, (facts["tcp_streams"], facts["udp_flows"]))
    assert (r.tcp_flows, r.udp_flows) == want
    for f in r.flows:  # delivered + gap bytes = stream length, per TCP direction
        for d in (0, 1) if f.transport.name == "TCP" else ():
            assert f.stream_bytes[d] + f.gap_bytes[d] == r.ends[(f.flow_id, d)]


def test_badpackets_incomplete_fragments_are_reported():
    r = reassemble(CAPTURES / "ntop-nDPI/badpackets.pcap")
    assert sum(a.kind == "ip.frag_incomplete" for a in r.anomalies) == 93


# (QUIC payloads need decryption: they are checked with the QUIC layer, not here)
PAYLOADS = [
    (name, p)
    for name, facts in sorted(EXPECTED.items())
    if "quic" not in facts
    for p in facts.get("expected_payloads", [])
]


@pytest.mark.parametrize(
    ("name", "payload"), PAYLOADS, ids=[f"{n}:{p['client']}" for n, p in PAYLOADS]
)
def test_expected_reassembled_payloads(name, payload):
    r = reassemble(CAPTURES / name)
    got = r.stream(payload["client"], payload["server"], payload["direction"])
    assert got == payload["data"].encode()


def test_suricata_overlap_and_gap_cases():
    cases = {
        "eve-overlap-payload-01/tcp-overlap.pcap": (b"GOOD", 1),
        "eve-payload-04-partial-overlap/tcp-overlap2.pcap": (b"GOOD", 1),
        "eve-payload-05-tcp-data-gap/tcp-simple-gap2.pcap": (b"VERY[4 bytes missing]DATA", 0),
        "eve-payload-06-tcp-data-leading-gap/tcp-leading-gap.pcap": (
            b"[4 bytes missing]GOODDATA",
            0,
        ),
    }
    for path, (stream, conflicts) in cases.items():
        r = reassemble(CAPTURES / "suricata-verify" / path)
        assert r.stream("1.1.1.1:12345", "2.2.2.2:8080") == stream
        assert sum(a.kind == "tcp.overlap_conflict" for a in r.anomalies) == conflicts
        assert r.flows[0].vlan == (6,)


def test_http_seq_issue_gives_785_bytes_without_duplication():
    r = reassemble(CAPTURES / "arkime/http-tcp-seq-issue.pcap")
    req = r.stream("10.11.12.13:54162", "13.12.11.10:80")
    assert len(req) == 785 and req.startswith(b"POST ")
    assert r.flows[0].gap_bytes == [0, 0]
    assert len(r.stream("10.11.12.13:54162", "13.12.11.10:80", "s2c")) == 1444


def test_handshake_reorder_and_missing_syn_get_the_client_right():
    r = reassemble(CAPTURES / "zeek/tcp/handshake-reorder.pcap")
    (f,) = r.flows
    assert str(f.client) == "141.142.228.5:59856" and str(f.server) == "192.150.187.43:80"
    assert r.stream(str(f.client), str(f.server)).startswith(b"GET /download/CHANGES.bro-aux.txt")
    r = reassemble(CAPTURES / "zeek/tcp/missing-syn.pcap")
    (f,) = r.flows
    assert str(f.client) == "141.42.64.125:56730" and f.role_source is RoleSource.SYN_ACK
    assert r.stream(str(f.client), str(f.server)).startswith(b"GET / ")


def test_rst_with_unacked_data_and_gap():
    r = reassemble(CAPTURES / "suricata-verify/tcp-rst-unacked-stream-03-gap/input.pcap")
    assert r.stream("1.1.1.1:12345", "2.2.2.2:8080", "s2c") == b"Please [4 bytes missing]Me In!"
    assert r.stream("1.1.1.1:12345", "2.2.2.2:8080", "c2s") == b"Access Denied"


def test_windows_evasion_keeps_one_session():
    r = reassemble(
        CAPTURES / "suricata-verify/bug-3286-03-windows-evasion/with_evasion_windows.pcap"
    )
    (f,) = r.flows
    assert len(r.stream(str(f.client), str(f.server))) == 343
    assert r.stream(str(f.client), str(f.server), "s2c").endswith(b"\r\n\r\nTHIS_IS_A_TEST")


def test_snaplen_truncated_segments_are_gaps_not_data():
    r = reassemble(CAPTURES / "zeek/tcp/truncated-header.pcap")
    (f,) = r.flows
    assert f.stream_bytes == [0, 0]
    assert f.gap_bytes[0] + f.gap_bytes[1] == 605


def test_wrapping_ftp_transfer_with_huge_gaps():
    r = reassemble(CAPTURES / "zeek/ftp/bigtransfer.pcap")
    data = [f for f in r.flows if f.stream_bytes[1] == 23822]
    assert len(data) == 1 and data[0].gap_bytes[1] > 5_000_000_000  # a 5.4 GB file, cut down


def test_out_of_window_segment_is_set_aside_not_placed():
    # issue 18 bug 4: 100,000 bytes past a 256-byte window, never acknowledged
    r = reassemble(
        CAPTURES / "suricata-verify/firewall/tcp-session-stream-out-of-window/input.pcap"
    )
    assert r.stream("192.0.2.10:43210", "198.51.100.5:80") == b""
    (oow,) = [a for a in r.anomalies if a.kind == "tcp.out_of_window"]
    assert (oow.offset, oow.nbytes) == (100_000, 11) and oow.detail.endswith(b"OOW_PAYLOAD".hex())


def test_ip_fragments_feed_tcp():
    r = reassemble(CAPTURES / "arkime/socks5-http-302-frag.pcap")
    (f,) = r.flows
    assert b"302" in r.stream(str(f.client), str(f.server), "s2c")
    r = reassemble(CAPTURES / "zeek/ipv4/fragmented-4.pcap")
    streams = b"".join(bytes(s) for s in r.streams.values())
    assert b"GET /msadc/..%2f../..%2f../" in streams

"""The QUIC layer on the shared real captures, against expected.json and their READMEs."""

from __future__ import annotations

import pytest

from reassembly.events import QuicStreamEnd
from reassembly.quic.keylog import KeyLog
from tests.quic.helpers import CAPTURES, EXPECTED, run_capture, stream_bytes

ILLUSTRATED = "illustrated-quic/capture.pcap"
JA4_DSB = "ja4/chrome-cloudflare-quic-with-secrets.pcapng"
JA4_NO_DSB = "ja4/chrome-cloudflare-quic-without-secrets.pcapng"
JA4_KEYLOG = CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.keylog.txt"
JA4_QUIC_RANDOM = "48a7bc208b4c86b5cdfa3603fed142fa289feff252cd47c5275d5fa994fc52a2"

QUIC_CAPTURES = sorted(k for k, v in EXPECTED.items() if "quic" in v)

# Where we see more than tshark 4.0.17 did, and why (expected.json records tshark).
EXTRA_FACTS = {
    # tshark fails to decrypt these client Initials ("checktag error"); they do
    # authenticate with the keys from the DCID of the client's v1 Initial (and from the
    # Retry's SCID after the Retry), so the ClientHello is read: no SNI extension, and
    # this ALPN list.
    "ntop-nDPI/quic-forcing-vn-with-data.pcapng": {
        "sni": [],
        "alpn": ["h3", "h3-29", "h3-28", "h3-27", "hq-interop", "hq-29", "hq-28", "hq-27",
                 "http/0.9"],
    },
}


def _ordered_unique(items):
    return list(dict.fromkeys(items))


@pytest.mark.parametrize("name", QUIC_CAPTURES)
def test_initial_facts_match_expected_json(name):
    """Without any key: QUIC frames, versions, SNI and ALPN as expected.json lists them."""
    facts = dict(EXPECTED[name]["quic"])
    facts.update(EXTRA_FACTS.get(name, {}))
    r = run_capture(name)
    assert len(r.frames) == facts["frames"]
    assert not r.datagrams  # every UDP datagram of these captures is QUIC
    assert sorted({f"0x{p.version:08x}" for p in r.packets}) == facts["versions"]
    hs = sorted(r.handshakes.values(), key=lambda h: h.flow.flow_id)
    assert sorted(_ordered_unique(h.sni for h in hs if h.sni)) == sorted(facts.get("sni", []))
    alpn = _ordered_unique(a for h in hs for a in h.alpn)
    assert alpn == facts.get("alpn", [])
    # Initial packets always decrypt; nothing else can without keys (never auth failures)
    for p in r.packets:
        if p.packet_type == "initial":
            assert p.decrypted, (p.frame, p.undecrypted_reason)
        assert p.undecrypted_reason != "auth-failed", p.frame
    assert not [a for a in r.anomalies if a.kind in ("quic.bad_packet", "quic.frame_error")]


def test_illustrated_quic_with_keylog():
    r = run_capture(ILLUSTRATED, KeyLog.from_file(CAPTURES / "illustrated-quic/keylog.txt"))
    assert all(p.decrypted for p in r.packets)
    assert len(r.packets) == 12 and len(r.frames) == 8
    streams = stream_bytes(r.events)
    assert streams == {(0, 0, 0): b"ping", (0, 1, 0): b"pong"}
    assert [p.frame for p in r.packets if "STREAM" in p.frame_types] == [5, 6]
    assert r.stream_packets() == EXPECTED[ILLUSTRATED]["quic"]["stream_packets_with_keys"]
    hs = r.handshakes[0]
    assert (hs.sni, hs.alpn, hs.alpn_selected, hs.cipher_suite, hs.tls_version) == (
        "example.ulfheim.net", ("ping/1.0",), "ping/1.0", 0x1301, 0x0304
    )
    last = r.packets[-1]
    assert last.frame == 8 and last.frame_types == ("CONNECTION_CLOSE",)
    assert last.close_reason == "graceful shutdown"
    assert [(e.stream_id, e.reason, e.final_size) for e in r.stream_ends] == [
        (0, "fin", 4), (0, "fin", 4)
    ]
    assert r.anomalies == []


def test_illustrated_quic_without_keylog():
    r = run_capture(ILLUSTRATED)
    assert r.stream_packets() == 0
    assert [p.frame for p in r.packets if p.decrypted] == [1, 2, 4]  # the Initials
    (a,) = r.anomalies
    assert a.kind == "quic.undecryptable"
    assert "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" in a.detail


@pytest.mark.parametrize("how", ["dsb", "keylog-file"])
def test_ja4_chrome_17_stream_packets(how):
    if how == "dsb":
        r = run_capture(JA4_DSB)
    else:
        r = run_capture(JA4_NO_DSB, KeyLog.from_file(JA4_KEYLOG))
    assert r.stream_packets() == 17
    assert all(p.decrypted for p in r.packets) and len(r.frames) == 34
    assert r.handshakes[1].client_random == JA4_QUIC_RANDOM
    assert r.handshakes[1].alpn_selected == "h3"
    assert not [a for a in r.anomalies if a.kind.startswith("quic.")]
    # the HTTP/3 response on stream 0 ends with its FIN; control streams stay open
    fins = {(e.stream_id, e.direction.short) for e in r.stream_ends if e.reason == "fin"}
    assert (0, "c2s") in fins and (0, "s2c") in fins
    streams = stream_bytes(r.events)
    assert len(streams[(1, 1, 0)]) == 10288


def test_ja4_chrome_without_any_secrets():
    r = run_capture(JA4_NO_DSB)
    assert r.stream_packets() == 0
    undecryptable = [a for a in r.anomalies if a.kind == "quic.undecryptable"]
    assert len(undecryptable) == 1
    assert JA4_QUIC_RANDOM in undecryptable[0].detail
    assert undecryptable[0].flow.flow_id == 1
    assert {p.undecrypted_reason for p in r.packets if not p.decrypted} == {"no-keys"}


def test_retries_verified():
    r = run_capture("suricata-verify/quic-retry/input.pcap")
    assert [(p.frame, p.retry_integrity) for p in r.packets if p.packet_type == "retry"] == [
        (3, "ok"), (4, "ok")
    ]
    r = run_capture("ntop-nDPI/quic-forcing-vn-with-data.pcapng")
    vn = [p for p in r.packets if p.packet_type == "vn"]
    assert [(p.frame, p.supported_versions) for p in vn] == [
        (2, (0x00000001, 0xFF00001D, 0xFF00001C, 0xFF00001B))
    ]
    assert [(p.frame, p.retry_integrity) for p in r.packets if p.packet_type == "retry"] == [
        (4, "ok")
    ]


def test_zerortt_packets_counted():
    r = run_capture("zeek/quic/interop/quic-go_quic-go/zerortt.pcap")
    assert sum(p.packet_type == "0rtt" for p in r.packets) == 28
    assert len(r.handshakes) == 2


def test_not_quic_datagram_is_left_alone():
    r = run_capture("zeek/quic/vector-max-size-crash.pcap")
    assert r.packets == [] and len(r.datagrams) == 1


def test_stream_ends_only_once_per_stream_direction():
    r = run_capture(JA4_DSB)
    keys = [(e.flow.flow_id, e.direction, e.stream_id) for e in r.events
            if isinstance(e, QuicStreamEnd)]
    assert len(keys) == len(set(keys))

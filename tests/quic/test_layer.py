"""The QUIC layer on synthetic connections built from the RFC 9001 Appendix A packets.

The client Initial (A.2) and server Initial (A.3) give a connection whose ClientHello
random is known; Handshake and 1-RTT packets are then sealed here with secrets put in
a key log, so every path of the layer can be checked with exact expectations.
"""

from __future__ import annotations

from reassembly.events import (
    Anomaly,
    Direction,
    QuicHandshake,
    QuicStreamEnd,
    StreamGap,
)
from reassembly.limits import Limits
from reassembly.quic.crypto import (
    VERSION_1,
    CipherSuite,
    PacketProtection,
    initial_protections,
    version_params,
)
from reassembly.quic.keylog import KeyLog
from tests.quic import vectors as v
from tests.quic.helpers import (
    Run,
    close_frame,
    crypto_frame,
    make_flow,
    new_cid_frame,
    reset_frame,
    seal_long,
    seal_short,
    stream_frame,
)

C2S, S2C = Direction.C2S, Direction.S2C
P1 = version_params(VERSION_1)
SUITE = CipherSuite.AES_128_GCM_SHA256
SECRETS = {
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET": bytes([0xA1]) * 32,
    "SERVER_HANDSHAKE_TRAFFIC_SECRET": bytes([0xB1]) * 32,
    "CLIENT_TRAFFIC_SECRET_0": bytes([0xA2]) * 32,
    "SERVER_TRAFFIC_SECRET_0": bytes([0xB2]) * 32,
}
C_HS = PacketProtection(SUITE, SECRETS["CLIENT_HANDSHAKE_TRAFFIC_SECRET"], P1)
S_HS = PacketProtection(SUITE, SECRETS["SERVER_HANDSHAKE_TRAFFIC_SECRET"], P1)
C_APP = PacketProtection(SUITE, SECRETS["CLIENT_TRAFFIC_SECRET_0"], P1)
S_APP = PacketProtection(SUITE, SECRETS["SERVER_TRAFFIC_SECRET_0"], P1)
SCID = v.SERVER_SCID  # the server's connection id (A.3); the client's is empty

# EncryptedExtensions selecting ALPN "felix"
_EE_BODY = bytes.fromhex("000c" "0010" "0008" "0006" "05") + b"felix"
EE = b"\x08" + len(_EE_BODY).to_bytes(3, "big") + _EE_BODY


def keylog(secrets=SECRETS, random=v.CLIENT_RANDOM) -> KeyLog:
    log = KeyLog()
    log.add("".join(f"{k} {random.hex()} {s.hex()}\n" for k, s in secrets.items()))
    return log


def handshake(run: Run, flow=None):
    """A.2 + A.3 Initials, then the server's Handshake packet with EncryptedExtensions."""
    flow = flow or make_flow()
    assert run.send(flow, C2S, v.V1_CLIENT_PACKET)
    assert run.send(flow, S2C, v.V1_SERVER_PACKET)
    assert run.send(flow, S2C, seal_long(S_HS, 2, b"", SCID, 0, crypto_frame(0, EE)))
    return flow


def client(pn, payload, prot=C_APP, phase=0, dcid=SCID):
    return seal_short(prot, dcid, pn, payload, key_phase=phase)


def test_rfc_initials_through_the_layer():
    run = Run()
    flow = make_flow()
    assert run.send(flow, C2S, v.V1_CLIENT_PACKET)
    assert run.send(flow, S2C, v.V1_SERVER_PACKET)
    a, b = run.packets
    assert (a.packet_type, a.packet_number, a.decrypted, a.dcid, a.scid) == (
        "initial", 2, True, v.DCID.hex(), ""
    )
    assert a.frame_types == ("CRYPTO", "PADDING") and a.token_length == 0 and a.length == 1200
    assert a.sni == "example.com" and a.alpn == ("alpn",)
    assert (b.packet_number, b.frame_types, b.scid, b.sni) == (1, ("ACK", "CRYPTO"),
                                                               SCID.hex(), None)
    ch, sh = run.of(QuicHandshake)
    assert (ch.stage, ch.client_random, ch.sni, ch.alpn) == (
        "client_hello", v.CLIENT_RANDOM.hex(), "example.com", ("alpn",)
    )
    assert (sh.stage, sh.cipher_suite, sh.tls_version, sh.initial_dcid) == (
        "server_hello", 0x1301, 0x0304, v.DCID.hex()
    )
    assert sh.direction is S2C
    assert run.kinds() == {}


def test_handshake_and_streams_with_keys():
    run = Run(keylog=keylog())
    flow = handshake(run)
    hs = run.of(QuicHandshake)[-1]
    assert (hs.stage, hs.alpn_selected) == ("encrypted_extensions", "felix")
    # stream 0: the tail (with FIN) first, then the head, then a duplicate
    run.send(flow, C2S, client(0, stream_frame(0, 5, b"world", fin=True)))
    run.send(flow, C2S, client(1, stream_frame(0, 0, b"hello")))
    run.send(flow, C2S, client(2, stream_frame(0, 0, b"hello")))
    run.send(flow, S2C, seal_short(S_APP, b"", 0, stream_frame(0, 0, b"pong", fin=True)))
    assert run.streams() == {(0, 0, 0): b"helloworld", (0, 1, 0): b"pong"}
    ends = run.of(QuicStreamEnd)
    assert [(e.stream_id, e.direction, e.reason, e.final_size) for e in ends] == [
        (0, C2S, "fin", 10), (0, S2C, "fin", 4)
    ]
    pk = run.packets[-4:]
    assert [p.packet_number for p in pk] == [0, 1, 2, 0]
    assert all(p.decrypted and p.stream_ids == (0,) and p.packet_type == "1rtt" for p in pk)
    assert pk[0].dcid == SCID.hex() and pk[-1].dcid == ""
    assert run.kinds() == {}
    # byte accounting: stream bytes are QUIC stream bytes, not datagram bytes
    assert flow.stream_bytes == [10, 4] and flow.gap_bytes == [0, 0]


def test_key_updates_followed_both_ways():
    run = Run(keylog=keylog())
    flow = handshake(run)
    g1 = C_APP.next_generation()
    g2 = g1.next_generation()
    run.send(flow, C2S, client(0, b"\x01"))
    run.send(flow, C2S, client(2, b"\x01", prot=g1, phase=1))  # key update
    run.send(flow, C2S, client(1, b"\x01", prot=C_APP, phase=0))  # reordered, old keys
    run.send(flow, C2S, client(3, b"\x01", prot=g1, phase=1))
    run.send(flow, C2S, client(4, b"\x01", prot=g2, phase=0))  # second update
    pk = run.packets[-5:]
    assert [(p.decrypted, p.packet_number, p.key_phase) for p in pk] == [
        (True, 0, 0), (True, 2, 1), (True, 1, 0), (True, 3, 1), (True, 4, 0)
    ]
    # a packet under wrong keys fails authentication and is said so
    run.send(flow, C2S, client(5, b"\x01", prot=S_APP, phase=0))
    assert (run.packets[-1].decrypted, run.packets[-1].undecrypted_reason) == (
        False, "auth-failed"
    )
    assert run.kinds() == {"quic.auth_failed": 1}


def test_gaps_resets_and_connection_end():
    run = Run(keylog=keylog())
    flow = handshake(run)
    run.send(flow, C2S, client(0, stream_frame(4, 0, b"abc") + stream_frame(4, 10, b"xyz")))
    run.send(flow, C2S, client(1, stream_frame(8, 0, b"0123")))
    run.send(flow, C2S, client(2, reset_frame(8, 0x10C, 20)))
    run.send(flow, S2C, seal_short(S_APP, b"", 0, close_frame(0, b"done")))
    assert run.packets[-1].close_error_code == 0 and run.packets[-1].close_reason == "done"
    run.layer.close_flow(flow, flow.ts_last_ns)
    gaps = [(g.stream_id, g.offset, g.nbytes, g.reason) for g in run.of(StreamGap)]
    assert gaps == [(8, 4, 16, "missing-tail"), (4, 3, 7, "end-of-stream")]
    assert run.streams()[(0, 0, 4)] == b"abc[7 missing]xyz"
    ends = [(e.stream_id, e.reason, e.final_size, e.error_code) for e in run.of(QuicStreamEnd)]
    assert ends == [(8, "reset", 20, 0x10C), (4, "connection-close", None, None)]
    assert flow.stream_bytes[0] == 10 and flow.gap_bytes[0] == 23


def test_new_connection_id_and_migration_to_another_flow():
    run = Run(keylog=keylog())
    flow = handshake(run)
    new_cid = bytes.fromhex("c1d2c3d4c5d6")
    run.send(flow, S2C, seal_short(S_APP, b"", 0, new_cid_frame(1, new_cid)))
    other = make_flow(7, client=("10.9.9.9", 40000))
    assert run.send(other, C2S, client(0, stream_frame(0, 0, b"moved", fin=True), dcid=new_cid))
    pkt = run.packets[-1]
    assert (pkt.flow.flow_id, pkt.conn_flow_id, pkt.decrypted, pkt.dcid) == (
        7, 0, True, new_cid.hex()
    )
    assert run.streams() == {(0, 0, 0): b"moved"}  # on the connection's flow
    assert run.kinds() == {"quic.migration": 1}
    # the migrated path ends; the connection goes on
    run.layer.close_flow(other, other.ts_last_ns)
    assert run.send(flow, C2S, client(1, b"\x01"))
    # short headers with unknown DCIDs on unknown flows are not QUIC
    stranger = make_flow(8, client=("10.8.8.8", 40001))
    assert not run.send(stranger, C2S, client(0, b"\x01", dcid=b"\xee" * 8))


def test_missing_secrets_reported_once_with_client_random():
    run = Run()
    flow = handshake(run)
    for pn in range(3):
        run.send(flow, C2S, client(pn, b"\x01"))
    assert {p.undecrypted_reason for p in run.packets[2:]} == {"no-keys"}
    assert run.kinds() == {}  # reported when the connection ends, with what it knows
    run.layer.close_flow(flow, flow.ts_last_ns)
    (a,) = [e for e in run.of(Anomaly) if e.kind == "quic.undecryptable"]
    assert v.CLIENT_RANDOM.hex() in a.detail and "1 handshake, 3 1rtt" in a.detail
    assert a.frame == 3  # the first packet that stayed encrypted


def test_secrets_added_mid_capture_are_used_from_then_on():
    run = Run()
    flow = handshake(run)
    run.send(flow, C2S, client(0, b"\x01"))
    run.layer.add_secrets("".join(
        f"{k} {v.CLIENT_RANDOM.hex()} {s.hex()}\n" for k, s in SECRETS.items()
    ) + "not a key log line\n")
    run.send(flow, C2S, client(1, b"\x01"))
    assert [p.decrypted for p in run.packets[-2:]] == [False, True]
    assert run.kinds()["quic.keylog"] == 1


def test_coalesced_packets_and_zero_padding():
    run = Run(keylog=keylog())
    flow = make_flow()
    run.send(flow, C2S, v.V1_CLIENT_PACKET)
    hs = seal_long(S_HS, 2, b"", SCID, 0, crypto_frame(0, EE))
    app = seal_short(S_APP, b"", 0, stream_frame(1, 0, b"x"))
    run.send(flow, S2C, v.V1_SERVER_PACKET + hs + app)
    pk = run.packets[1:]
    assert [(p.packet_type, p.coalesced_index, p.datagram_offset) for p in pk] == [
        ("initial", 0, 0), ("handshake", 1, len(v.V1_SERVER_PACKET)),
        ("1rtt", 2, len(v.V1_SERVER_PACKET) + len(hs)),
    ]
    assert all(p.decrypted for p in pk)
    run.send(flow, S2C, hs + bytes(40))  # zeros after the last packet: padding
    assert len(run.packets) == 5 and run.kinds() == {}
    run.send(flow, S2C, hs[:-5])  # Length runs past the datagram
    assert run.kinds() == {"quic.bad_packet": 1} and len(run.packets) == 5


def test_retry_then_initial_with_new_dcid_and_token():
    run = Run()
    flow = make_flow()
    run.send(flow, C2S, v.V1_CLIENT_PACKET)
    run.send(flow, S2C, v.V1_RETRY)
    retry = run.packets[-1]
    assert (retry.packet_type, retry.retry_integrity, retry.token_length, retry.decrypted) == (
        "retry", "ok", 5, None
    )
    c2, s2 = initial_protections(VERSION_1, SCID)
    again = seal_long(c2, 0, SCID, b"", 3, v.CLIENT_CRYPTO_FRAME + bytes(900), token=b"token")
    run.send(flow, C2S, again)
    sh = v.SERVER_PAYLOAD
    run.send(flow, S2C, seal_long(s2, 0, b"", bytes(8), 0, sh, token=b""))
    p1, p2 = run.packets[-2:]
    assert (p1.decrypted, p1.token_length, p1.packet_number) == (True, 5, 3)
    assert p2.decrypted and p2.frame_types == ("ACK", "CRYPTO")
    assert run.of(QuicHandshake)[-1].initial_dcid == SCID.hex()
    # a Retry whose tag does not match the client's DCID
    bad = bytearray(v.V1_RETRY)
    bad[-1] ^= 1
    run.send(flow, S2C, bytes(bad))
    assert run.packets[-1].retry_integrity == "mismatch"
    assert run.kinds() == {"quic.retry_integrity": 1}


def test_version_negotiation_then_v1():
    run = Run()
    flow = make_flow()
    greased = b"\xc0\x1a\x2a\x3a\x4a\x08" + v.DCID + b"\x00" + bytes(1200)
    assert run.send(flow, C2S, greased)
    vn = b"\x80\x00\x00\x00\x00\x00\x08" + v.DCID + b"\x00\x00\x00\x01\x6b\x33\x43\xcf"
    assert run.send(flow, S2C, vn)
    assert run.send(flow, C2S, v.V1_CLIENT_PACKET)
    a, b, c = run.packets
    assert (a.packet_type, a.version, a.decrypted, a.undecrypted_reason) == (
        "unknown", 0x1A2A3A4A, False, "unsupported-version"
    )
    assert (b.packet_type, b.supported_versions, b.decrypted) == ("vn", (1, 0x6B3343CF), None)
    assert c.decrypted and c.sni == "example.com"
    assert run.kinds() == {"quic.unsupported_version": 1}


def test_new_client_hello_on_same_flow_starts_a_new_connection():
    run = Run()
    flow = make_flow()
    run.send(flow, C2S, v.V1_CLIENT_PACKET)
    run.send(flow, S2C, v.V1_SERVER_PACKET)
    dcid2 = bytes.fromhex("0102030405060708")
    other_random = bytes(range(32))
    frame = v.CLIENT_CRYPTO_FRAME.replace(v.CLIENT_RANDOM, other_random)
    c2, _ = initial_protections(VERSION_1, dcid2)
    run.send(flow, C2S, seal_long(c2, 0, dcid2, b"", 0, frame + bytes(900), token=b""))
    randoms = [h.client_random for h in run.of(QuicHandshake) if h.stage == "client_hello"]
    assert randoms == [v.CLIENT_RANDOM.hex(), other_random.hex()]
    assert run.packets[-1].decrypted and run.packets[-1].packet_number == 0


def test_limits_are_enforced_and_reported():
    lim = Limits(quic_max_streams=1, quic_max_cids=2, quic_max_connections=1)
    run = Run(limits=lim, keylog=keylog())
    flow = handshake(run)
    run.send(flow, C2S, client(0, stream_frame(0, 0, b"a") + stream_frame(4, 0, b"b")))
    run.send(flow, S2C, seal_short(S_APP, b"", 0, new_cid_frame(1, b"\x05" * 4)
                                   + new_cid_frame(2, b"\x06" * 4)))
    assert run.streams() == {(0, 0, 0): b"a"}
    kinds = run.kinds()
    assert kinds["limit.quic_streams"] == 1 and kinds["limit.quic_cids"] == 1
    second = make_flow(3, client=("10.0.0.3", 50001))
    run.send(second, C2S, v.V1_CLIENT_PACKET)
    assert run.kinds()["limit.quic_connections"] == 1
    assert [e.reason for e in run.of(QuicStreamEnd)] == ["evicted"]
    assert not run.send(flow, C2S, client(1, b"\x01"))  # the evicted flow is no longer QUIC

    small = Run(limits=Limits(quic_max_crypto_bytes=100))
    small.send(make_flow(), C2S, v.V1_CLIENT_PACKET)
    assert small.kinds() == {"limit.quic_crypto": 1}
    assert small.packets[0].sni is None

"""Ground truth from a real QUIC stack: aioquic client and server, their datagrams as a
pcap, the client's secrets log.  What each side sent per stream must come out of the
QUIC layer exactly, whatever the cipher suite, version, key updates or migration."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("aioquic")

from aioquic.quic.packet import QuicProtocolVersion  # noqa: E402
from aioquic.tls import CipherSuite  # noqa: E402

from reassembly.events import QuicHandshake, QuicPacket, StreamGap  # noqa: E402
from reassembly.quic.keylog import KeyLog  # noqa: E402
from reassembly.quic.layer import read_quic_events  # noqa: E402
from tests.quic.helpers import stream_bytes  # noqa: E402
from tests.quic.stack import Conversation  # noqa: E402

BIG = os.urandom(300_000)  # a stream much bigger than many packets


def _keylog(ex) -> KeyLog:
    log = KeyLog()
    log.add(ex.secrets, complete=True)
    return log


def _check_truth(events, ex, flow_id=0):
    streams = stream_bytes(events)
    for (side, sid), data in ex.sent.items():
        direction = 0 if side == "client" else 1
        assert streams.get((flow_id, direction, sid)) == bytes(data), (side, sid)
    assert len(streams) == len(ex.sent)


def _conversation(**kw) -> Conversation:
    conv = Conversation(**kw)
    conv.open_stream(b"hello felix")
    conv.open_stream(BIG)
    conv.open_stream(b"one way", uni=True)
    return conv


@pytest.mark.parametrize(
    "suite",
    [CipherSuite.AES_128_GCM_SHA256, CipherSuite.AES_256_GCM_SHA384,
     CipherSuite.CHACHA20_POLY1305_SHA256],
)
def test_every_cipher_suite(tmp_path, suite):
    ex = _conversation(cipher_suites=[suite]).finish()
    pcap = tmp_path / "c.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    assert packets and all(p.decrypted for p in packets)
    _check_truth(events, ex)
    hs = [e for e in events if isinstance(e, QuicHandshake)][-1]
    assert (hs.sni, hs.alpn, hs.alpn_selected, hs.cipher_suite) == (
        "felix.example", ("felix",), "felix", int(suite)
    )
    assert hs.client_random == ex.client_random
    assert packets[-1].close_reason == "bye"


def test_quic_v2(tmp_path):
    ex = _conversation(versions=[QuicProtocolVersion.VERSION_2]).finish()
    pcap = tmp_path / "v2.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    assert {p.version for p in packets} == {0x6B3343CF}
    assert all(p.decrypted for p in packets)
    _check_truth(events, ex)


def test_key_updates(tmp_path):
    conv = _conversation()
    conv.client.request_key_update()
    conv.open_stream(b"after the first update" * 100)
    conv.client.request_key_update()
    conv.open_stream(b"after the second update" * 100)
    ex = conv.finish()
    pcap = tmp_path / "ku.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    assert all(p.decrypted for p in packets)
    phases = [p.key_phase for p in packets if p.packet_type == "1rtt" and p.direction == 0]
    assert 0 in phases and 1 in phases
    assert phases.index(1) < len(phases) - 1 - phases[::-1].index(0)  # 0 → 1 → 0
    _check_truth(events, ex)


def test_migration_to_a_new_port(tmp_path):
    conv = _conversation()
    conv.migrate(50999)
    conv.open_stream(b"from the new port" * 50)
    ex = conv.finish()
    pcap = tmp_path / "mig.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    assert all(p.decrypted for p in packets)
    assert {p.flow.flow_id for p in packets} == {0, 1}
    assert {p.conn_flow_id for p in packets} == {0}
    assert [e.kind for e in events if getattr(e, "kind", "").startswith("quic.")] == [
        "quic.migration"
    ]
    _check_truth(events, ex)


def test_capture_loss_and_reordering(tmp_path):
    ex = _conversation().finish()
    # find a client datagram in the middle of the big stream, and a neighbour pair
    big = [i for i, r in enumerate(ex.records) if r[1][0] == "10.1.0.1" and len(r[3]) > 1000]
    lost = big[len(big) // 2]
    pcap = tmp_path / "loss.pcap"
    ex.write_pcap(pcap, drop={lost}, swap=(big[3], big[4]))
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    streams = stream_bytes(events)
    gaps = [e for e in events if isinstance(e, StreamGap)]
    assert len(gaps) == 1 and gaps[0].stream_id == 4 and gaps[0].direction == 0
    got = streams[(0, 0, 4)]
    marker = b"[%d missing]" % gaps[0].nbytes
    head, tail = got.split(marker)
    assert len(head) + gaps[0].nbytes + len(tail) == len(BIG)
    assert BIG.startswith(head) and BIG.endswith(tail)
    # every other stream is intact
    for (side, sid), data in ex.sent.items():
        if (side, sid) != ("client", 4):
            assert streams[(0, 0 if side == "client" else 1, sid)] == bytes(data)


def test_no_secrets_reported_once(tmp_path):
    ex = _conversation().finish()
    pcap = tmp_path / "nokeys.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap))
    undecryptable = [e for e in events if getattr(e, "kind", "") == "quic.undecryptable"]
    assert len(undecryptable) == 1 and ex.client_random in undecryptable[0].detail
    assert stream_bytes(events) == {}


def test_retry_with_a_real_stack(tmp_path):
    conv = Conversation(retry=True)
    conv.open_stream(b"after a retry")
    ex = conv.finish()
    pcap = tmp_path / "retry.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    retry = [p for p in packets if p.packet_type == "retry"]
    assert [(p.retry_integrity, p.token_length) for p in retry] == [("ok", 11)]
    assert all(p.decrypted for p in packets if p.packet_type != "retry")
    tokens = [p.token_length for p in packets if p.packet_type == "initial" and p.direction == 0]
    assert tokens[0] == 0 and set(tokens[1:]) == {11}
    _check_truth(events, ex)


def test_resumption_with_0rtt(tmp_path):
    tickets: dict = {}
    first = Conversation(tickets=tickets)
    first.open_stream(b"first connection")
    first.finish()
    assert "client" in tickets
    conv = Conversation(tickets=tickets, early_data=b"sent as 0-RTT" * 20, client_port=50200,
                        start=first.now + 1)
    conv.open_stream(b"after the handshake")
    ex = conv.finish()
    assert "CLIENT_EARLY_TRAFFIC_SECRET" in ex.secrets
    pcap = tmp_path / "zerortt.pcap"
    ex.write_pcap(pcap)
    events = list(read_quic_events(pcap, keylog=_keylog(ex)))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    early = [p for p in packets if p.packet_type == "0rtt"]
    assert early and all(p.decrypted for p in early)
    assert any(0 in p.stream_ids for p in early)
    assert all(p.decrypted for p in packets)
    hs = [e for e in events if isinstance(e, QuicHandshake)][-1]
    assert hs.early_data
    _check_truth(events, ex)

"""Random and mutated input never raises (and keeps the layer's invariants)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reassembly.events import Datagram, Direction, QuicPacket
from reassembly.limits import Limits
from reassembly.quic.frames import parse_frames
from reassembly.quic.packet import is_plausible_first_packet
from reassembly.quic.tls import (
    HandshakeReader,
    parse_client_hello,
    parse_encrypted_extensions,
    parse_server_hello,
    safe_parse,
)
from tests.quic import vectors as v
from tests.quic.helpers import CAPTURES, Run, make_flow, seal_short
from tests.quic.test_layer import C_APP, S_APP, SCID, handshake, keylog

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _real_datagrams(name: str) -> list[tuple[int, bytes]]:
    from reassembly.engine import read_events

    return [(int(e.direction), e.data) for e in read_events(CAPTURES / name)
            if isinstance(e, Datagram)]


SEEDS = (
    _real_datagrams("illustrated-quic/capture.pcap")
    + _real_datagrams("ntop-nDPI/quic-forcing-vn-with-data.pcapng")[:6]
    + [(0, v.V1_CLIENT_PACKET), (1, v.V1_SERVER_PACKET), (1, v.V1_RETRY),
       (0, v.V2_CLIENT_PACKET)]
)


def _feed(run: Run, items) -> None:
    flow = make_flow()
    for d, data in items:
        run.send(flow, Direction(d), data)
    run.layer.close_flow(flow, flow.ts_last_ns)
    run.layer.flush()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1), st.binary(max_size=1500)), max_size=8))
def test_random_datagrams_never_raise(items):
    run = Run(limits=Limits(quic_max_streams=4, quic_max_crypto_bytes=4096))
    _feed(run, items)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(range(len(SEEDS))),
                          st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 255)),
                                   max_size=6),
                          st.integers(0, 1500)), min_size=1, max_size=10))
def test_mutated_real_datagrams_never_raise(picks):
    items = []
    for idx, flips, cut in picks:
        d, data = SEEDS[idx]
        buf = bytearray(data)
        for pos, val in flips:
            if pos < len(buf):
                buf[pos] = val
        items.append((d, bytes(buf[: max(cut, 1)]) if cut < len(buf) else bytes(buf)))
    run = Run()
    _feed(run, items)
    for p in run.packets:
        assert isinstance(p, QuicPacket) and p.length >= 0


@FUZZ
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_random_frames_inside_decrypted_packets(payloads):
    """Random plaintext sealed with the connection's keys: the frame and stream
    handling sees arbitrary frames."""
    run = Run(keylog=keylog(), limits=Limits(quic_max_streams=8, max_buffered_bytes=2048))
    flow = handshake(run)
    for pn, payload in enumerate(payloads):
        run.send(flow, Direction.C2S, seal_short(C_APP, SCID, pn, payload))
        run.send(flow, Direction.S2C, seal_short(S_APP, b"", pn, payload[::-1]))
    run.layer.close_flow(flow, flow.ts_last_ns)
    assert all(p.decrypted for p in run.packets)


@FUZZ
@given(st.binary(max_size=600))
def test_parsers_never_raise(data):
    parse_frames(data)
    is_plausible_first_packet(data)
    for parse in (parse_client_hello, parse_server_hello, parse_encrypted_extensions):
        safe_parse(parse, data)
    r = HandshakeReader(1024)
    for i in range(0, len(data), 7):
        r.feed(data[i : i + 7])


@FUZZ
@given(st.integers(0, 235), st.integers(0, 255))
def test_mutated_client_hello_never_raises(pos, val):
    body = bytearray(v.CLIENT_CRYPTO_FRAME[8:])
    body[pos] = val
    safe_parse(parse_client_hello, bytes(body))
    safe_parse(parse_client_hello, bytes(body[:pos]))

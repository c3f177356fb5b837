"""The TLS layer's provenance (``reassembly.provenance.ProvenanceBuffer`` under it): however
TCP cut a connection into chunks, each decrypted chunk carries the time and frame of the
chunk that held its record's first byte and of the one that held its last byte, as a slow
per-byte reference computes them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reassembly.events import (
    Direction,
    Endpoint,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    Transport,
)
from reassembly.limits import Limits
from reassembly.quic.keylog import KeyLog
from reassembly.tls.layer import TlsLayer
from tests.tls.synth import Tls13Conn

C, S = Direction.C2S, Direction.S2C


def _connection() -> tuple[Tls13Conn, list[tuple[Direction, bytes, bytes]]]:
    """(the connection, [(direction, wire bytes, plaintext they carry)])."""
    conn = Tls13Conn()
    script = [(C, conn.c_hello(), b""), (S, conn.s_flight(), b""), (C, conn.c_finish(), b"")]
    for i in range(6):
        for d, side in ((C, "c"), (S, "s")):
            text = b"PUB a.b %d\r\n" % i + bytes(range(i * 40 % 256)) + b"\r\n"
            script.append((d, conn.app(side, text), text))
    return conn, script


CONN, SCRIPT = _connection()
WIRE = {d: b"".join(w for dd, w, _ in SCRIPT if dd == d) for d in (C, S)}


def _record_bounds(wire: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(wire):
        end = pos + 5 + int.from_bytes(wire[pos + 3 : pos + 5], "big")
        out.append((pos, end))
        pos = end
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_decrypted_chunks_carry_their_records_first_and_last_packet(data) -> None:
    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 4222),
                    RoleSource.SYN, 0, 0, 0, 0)
    events: list = []
    owner: dict[Direction, list[int]] = {}  # per direction: wire byte -> frame number
    frame = 0
    for d in (C, S):
        wire = WIRE[d]
        # (from byte 16 on: a ServerHello is looked for within the chunk it starts in)
        cuts = sorted(set(data.draw(st.lists(st.integers(16, len(wire) - 1), max_size=25))))
        bounds = [0, *cuts, len(wire)]
        owner[d] = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            frame += 1
            # the pipeline may merge packets into a chunk: first/last differ
            events.append(StreamData(flow, d, a, wire[a:b], 1000 * frame, 1000 * frame + 500,
                                     frame, frame + 1000))
            owner[d] += [frame] * (b - a)
    # (all client bytes first, then the server's: the layer holds until the ServerHello)
    events.append(StreamClose(flow, 10**9, "fin"))
    log = KeyLog()
    log.add(CONN.keylog(), complete=True)
    out = list(TlsLayer(Limits(), log).process(events))
    for d in (C, S):
        app = [e for e in out if type(e) is StreamData and e.direction == d]
        texts = [p for dd, _, p in SCRIPT if dd == d and p]
        records = _record_bounds(WIRE[d])[-len(texts):]  # the application data records
        assert [e.data for e in app] == texts
        for ev, (start, end) in zip(app, records, strict=True):
            first, last = owner[d][start], owner[d][end - 1]
            assert (ev.ts_first_ns, ev.frame_first) == (1000 * first, first)
            assert (ev.ts_last_ns, ev.frame_last) == (1000 * last + 500, last + 1000)

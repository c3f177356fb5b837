"""Random and mutated TLS records and WebSocket frames never raise, and what comes out
stays consistent: per direction the emitted offsets are contiguous and
``FlowInfo.stream_bytes``/``gap_bytes`` equal the bytes and gaps emitted."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reassembly.engine import stream_layers
from reassembly.events import (
    Endpoint,
    FlowInfo,
    RoleSource,
    StreamClose,
    StreamData,
    StreamGap,
    Transport,
)
from reassembly.limits import Limits
from reassembly.quic.keylog import KeyLog
from tests.tls.helpers import C, S
from tests.tls.synth import Tls12Conn, Tls13Conn
from tests.websocket.test_websocket import cframe, deflate_messages, frame, request, response


def run(script: list, keylog: str = "") -> None:
    flow = FlowInfo(1, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 4222),
                    RoleSource.SYN, 0, 0, 1, 1)
    offs = [0, 0]
    evs = []
    for i, (d, item) in enumerate(script):
        if isinstance(item, int):
            evs.append(StreamGap(flow, d, offs[d], item, i, i, "test"))
            flow.gap_bytes[d] += item
            offs[d] += item
        elif item:
            evs.append(StreamData(flow, d, offs[d], item, i, i, i, i))
            flow.stream_bytes[d] += len(item)
            offs[d] += len(item)
    evs.append(StreamClose(flow, len(script), "closed"))
    log = KeyLog()
    log.add(keylog, complete=True)
    out = list(stream_layers(evs, Limits(), log))
    nxt, data, gaps = [None, None], [0, 0], [0, 0]
    for e in out:
        if isinstance(e, StreamData | StreamGap):
            d = e.direction
            if nxt[d] is not None:
                assert e.offset == nxt[d], e
            n = len(e.data) if isinstance(e, StreamData) else e.nbytes
            nxt[d] = e.offset + n
            if isinstance(e, StreamData):
                data[d] += n
            else:
                gaps[d] += n
    assert data == flow.stream_bytes and gaps == flow.gap_bytes
    assert isinstance(out[-1], StreamClose)


def _tls13() -> tuple[list, str]:
    conn = Tls13Conn(seed=random.randrange(1000))
    s = [(S, b"INFO {}\r\n"), (C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish())]
    for i in range(4):
        s.append((C, conn.app("c", b"PUB a 1\r\n%d\r\n" % i)))
        s.append((S, conn.app("s", b"MSG a 1 1\r\n%d\r\n" % i)))
    s.append((C, conn.key_update("c")))
    s.append((C, conn.app("c", b"PING\r\n")))
    return s, conn.keylog()


def _tls12() -> tuple[list, str]:
    conn = Tls12Conn(suite=random.choice([0xC02F, 0xC030, 0xCCA8]))
    s = [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish()), (S, conn.s_finish())]
    s += [(C, conn.app("c", b"PING\r\n")), (S, conn.app("s", b"PONG\r\n"))]
    return s, conn.keylog()


def _ws() -> tuple[list, str]:
    ext = random.choice([None, "permessage-deflate"])
    s = [(C, request(ext=ext)), (S, response(ext))]
    msgs = [b"PUB a 1\r\nx\r\n", b"PING\r\n"]
    if ext:
        s += [(C, cframe(c, rsv1=True)) for c in deflate_messages(msgs)]
        s += [(S, frame(c, rsv1=True)) for c in deflate_messages([b"PONG\r\n"])]
    else:
        s += [(C, cframe(m, fin=False, opcode=1)) for m in msgs[:1]]
        s += [(C, cframe(b"p", opcode=9)), (C, cframe(msgs[1], opcode=0))]
        s += [(S, frame(b"PONG\r\n")), (S, frame(b"\x03\xe8", opcode=8))]
    return s, ""


def _mutate(rng: random.Random, script: list) -> list:
    script = list(script)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(script))
        d, data = script[i]
        if isinstance(data, int) or not data:
            continue
        data = bytearray(data)
        op = rng.randrange(6)
        if op == 0:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == 1:
            del data[rng.randrange(len(data)):]
        elif op == 2:
            p = rng.randrange(len(data) + 1)
            data[p:p] = rng.randbytes(rng.randint(1, 20))
        elif op == 3:
            script[i] = (d, rng.randint(1, 40))  # a capture gap
            continue
        elif op == 4:
            p = rng.randrange(len(data))
            script.insert(i + 1, (d, bytes(data[p:])))
            del data[p:]
        else:
            data[:] = rng.randbytes(len(data))
        script[i] = (d, bytes(data))
    return script


@pytest.mark.parametrize("make", [_tls13, _tls12, _ws])
def test_mutations_never_raise(make):
    rng = random.Random(7)
    random.seed(7)
    for _ in range(150):
        script, log = make()
        run(_mutate(rng, script), log if rng.random() < 0.8 else "")


@pytest.mark.parametrize("make", [_tls13, _tls12, _ws])
def test_valid_scripts_cut_at_random_points(make):
    rng = random.Random(3)
    random.seed(3)
    for _ in range(30):
        script, log = make()
        cut = []
        for d, data in script:
            while data:
                n = rng.randint(1, 50)
                cut.append((d, data[:n]))
                data = data[n:]
        run(cut, log)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([C, S]), st.binary(min_size=1, max_size=64)),
                max_size=12),
       st.sampled_from([b"\x16\x03\x01", b"GET ", b"\x17\x03\x03", b""]))
def test_random_bytes_never_raise(chunks, prefix):
    if chunks:
        chunks[0] = (C, prefix + chunks[0][1])
    run(chunks)

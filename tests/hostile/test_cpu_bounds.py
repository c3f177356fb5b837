"""Small inputs that used to cost minutes (issue 17 part 3): resynchronisation on junk and
decompression bombs.

Before the fix NATS resync ran at ~0.5 MB/s on a flood of line ends (a Python step per
line) and Pulsar resync at ~1 MB/s on any junk (a Python step per byte); behind
WebSocket permessage-deflate 1 KB of input inflates to ~1 MiB of ``\\r\\n``, so a 17 KB
capture took 25 s of CPU.  What is bounded is the work, counted as function calls
(cProfile), not CPU time, which a loaded machine moves: the bounds sit far below what
the old code's steps per line or per byte would count.
"""

from __future__ import annotations

import cProfile
import random
import zlib
from pathlib import Path

import pytest

from dissectors.api import Span
from dissectors.framing import line_op_resync
from dissectors.nats import parser as nats_parser
from dissectors.nats.session import NatsSession
from dissectors.pulsar.frame import (
    COMMAND_NAMES,
    DEFAULT_MAX_FRAME_BYTES,
    HEADER_BYTES,
    _header_ok,
    make_resync,
    peek_type,
)
from dissectors.pulsar.session import PulsarSession
from reassembly.events import Direction
from tests.hostile.conftest import dissect_counted, dissect_one
from tests.tls.helpers import C, S, flow_pcap
from tests.websocket.test_websocket import cframe, frame, request, response

# ------------------------------------------------------------- the rules stay exact


def _nats_reference(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """The resync rule as it was written before (a Python step per line): the fast one
    must give the same answer on every input."""
    p: int | None = 0
    if prev_byte is not None and prev_byte != 0x0A:
        lf = buf.find(b"\n")
        p = lf + 1 if lf >= 0 else None
    while p is not None and p < len(buf):
        verb, decided = nats_parser._verb_at(buf, p, nats_parser._ALL_OPS)
        if verb is not None:
            return p, True
        if not decided:
            return p, False
        lf = buf.find(b"\n", p)
        p = lf + 1 if lf >= 0 else None
    return len(buf), False


def _pulsar_reference(max_frame_bytes: int):
    def resync(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
        n, i = len(buf), 0
        while i < n:
            if n - i < HEADER_BYTES + 2:
                return i, False
            total, cmd = int.from_bytes(buf[i : i + 4], "big"), int.from_bytes(
                buf[i + 4 : i + 8], "big")
            if _header_ok(total, cmd) and total + 4 <= max_frame_bytes:
                t, need_more = peek_type(buf, i + HEADER_BYTES)
                if need_more:
                    return i, False
                if t in COMMAND_NAMES:
                    return i, True
            i += 1
        return n, False

    return resync


def test_nats_resync_gives_the_same_answers_as_the_line_by_line_rule():
    rnd = random.Random(17)
    pieces = [b"\n", b"\r", b" ", b"\t", b"P", b"U", b"B", b"I", b"N", b"G", b"p", b"ub",
              b"+OK", b"-ERR", b"x", b"MSG", b"H", b"CONNECT", b"S", b"O", b"conn", b"ect"]
    for _ in range(30_000):
        buf = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 12)))
        for prev in (None, 0x0A, 0x41):
            assert nats_parser.resync(buf, prev) == _nats_reference(buf, prev), (buf, prev)
    assert nats_parser.resync(b"\r\n" * 10 + b"PIN", None) == (20, False)  # may become PING
    assert nats_parser.resync(b"\r\n" * 10 + b"PING\r\n", None) == (20, True)
    assert nats_parser.resync(b"xPUB a 1\r\n", 0x41) == (10, False)


@pytest.mark.parametrize("max_frame", [DEFAULT_MAX_FRAME_BYTES, 100, 2**32, 3])
def test_pulsar_resync_gives_the_same_answers_as_the_byte_by_byte_rule(max_frame):
    rnd = random.Random(max_frame)
    pieces = [b"\x00", b"\x08", b"\x06", b"\x10", b"\x00\x00\x00\x10", b"\x00\x00\x00\x02",
              b"\x80", b"\xff", b"\x01", b"\x00\x00\x00\x0a\x00\x00\x00\x03\x08"]
    fast, ref = make_resync(max_frame), _pulsar_reference(max_frame)
    for _ in range(10_000):
        buf = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 30)))
        assert fast(buf, None) == ref(buf, None), buf


def test_line_op_resync_with_any_separator():
    rule = line_op_resync({b"RS+": bytes(range(256))})
    assert rule(b"junk\nrs+x", None) == (5, True)
    assert rule(b"junk\nRS+", None) == (5, False)  # one more byte decides
    assert rule(b"RS", None) == (0, False)
    assert rule(b"junk\nRT", None) == (7, False)


# ------------------------------------------------------------- work, counted

_JUNK = {
    "crlf": lambda n: b"\r\n" * (n // 2),
    "lf": lambda n: b"\n" * n,
    "P-lines": lambda n: b"P\n" * (n // 2),
    "x-lines": lambda n: b"xx\r\n" * (n // 4),
    "random": lambda n: random.Random(1).randbytes(n),
    "zeros": bytes,
    "type-tags": lambda n: b"\x08" * n,
}
_SESSIONS = {"nats": (NatsSession, b"CONNECT {}\r\nPING\r\n"), "pulsar": (PulsarSession, b"")}
_CHUNK = 1460


def _feed_counted(proto: str, data: bytes) -> tuple[int, int]:
    """``data`` through a fresh session in 1460-byte chunks after the protocol's opening:
    (rows, function calls made by the feeding, counted by cProfile)."""
    make, pre = _SESSIONS[proto]
    session = make()
    rows = len(session.feed(Direction.C2S, pre, Span(0, 0, 0, 0, 0)))
    off = len(pre)
    profile = cProfile.Profile(builtins=True)
    profile.enable()
    for i in range(0, len(data), _CHUNK):
        chunk = data[i : i + _CHUNK]
        rows += len(session.feed(Direction.C2S, chunk, Span(off, 0, 0, 0, 0)))
        off += len(chunk)
    rows += len(session.close(0))
    profile.disable()
    return rows, sum(e.callcount for e in profile.getstats())


@pytest.mark.parametrize("proto", sorted(_SESSIONS))
@pytest.mark.parametrize("junk", sorted(_JUNK))
def test_resync_on_junk_makes_a_few_calls_per_chunk(proto, junk):
    """1 and 2 MB of each junk through the NATS and Pulsar sessions.  The old resync made a
    Python step per line (NATS: 730 per chunk of CRLF) or per byte (Pulsar: 1,460 per
    chunk, each with two ``int.from_bytes``); now a chunk costs 25 to 225 calls, and twice
    the junk costs twice the calls (a rescan of what is buffered would grow faster).
    Calls, not CPU time: a loaded machine cannot move a count (a 2 s CPU bound on 8 MB
    failed in CI at 2.2 s)."""
    make = _JUNK[junk]
    rows_1, calls_1 = _feed_counted(proto, make(1_000_000))
    rows_2, calls_2 = _feed_counted(proto, make(2_000_000))
    chunks = -(-2_000_000 // _CHUNK)
    assert calls_2 < 400 * chunks, (calls_2, chunks)
    assert calls_2 < 2.2 * calls_1, (calls_1, calls_2)
    assert rows_1 <= 8 and rows_2 <= 8, (rows_1, rows_2)  # one resync episode, not a row per line


# ------------------------------------------------------------- the WebSocket bomb


def write_ws_crlf_bomb(path: Path, messages: int = 16) -> dict:
    """NATS over WebSocket with permessage-deflate (context takeover): after CONNECT, the
    client sends ``messages`` messages of 1 MiB of ``\\r\\n``, each ~1 KB compressed."""
    ext = "permessage-deflate"
    comp = zlib.compressobj(wbits=-15)
    bombs = []
    for _ in range(messages):
        data = comp.compress(b"\r\n" * (512 * 1024)) + comp.flush(zlib.Z_SYNC_FLUSH)
        bombs.append(data[:-4])
    script = [(C, request(ext=ext)), (S, response(ext)),
              (S, frame(b'INFO {"server_id":"x","max_payload":1048576}\r\n')),
              (C, cframe(b"CONNECT {}\r\nPING\r\n"))]
    script += [(C, cframe(b, rsv1=True)) for b in bombs]
    pcap = flow_pcap(path.parent, script, port=8080, name=path.name)
    return {"compressed": sum(map(len, bombs)), "inflated": messages * 1024 * 1024,
            "size": pcap.stat().st_size}


def test_websocket_deflate_crlf_bomb_of_17_kb_is_cut_by_the_ratio(tmp_path):
    facts = write_ws_crlf_bomb(tmp_path / "ws-bomb.pcap")
    assert 15_000 < facts["size"] < 20_000  # the 17 KB case of the issue
    (r,) = dissect_counted([(tmp_path / "ws-bomb.pcap", tmp_path / "out", {"rows_per_kind": 5})])
    assert r["calls"] < 150_000, r["calls"]  # 43,000 here; a step per line: 524,288 more
    assert r["anomalies"]["limit.websocket_inflate"] == 1
    (row,) = r["anomaly_rows"]["limit.websocket_inflate"]
    assert "limit ws_max_inflate_ratio" in row["detail"], row
    assert row["direction"] == "c2s"
    assert not r["accounting_errors"], r["accounting_errors"]
    # the first message (1 MiB, exactly the ratio floor) was read and resynchronised over
    flow = next(f for f in r["flows"] if f["server_port"] == 8080)
    assert flow["protocol"] == "nats"
    assert flow["stream_bytes_c2s"] == len(b"CONNECT {}\r\nPING\r\n") + 1024 * 1024


def test_websocket_deflate_crlf_bomb_without_the_ratio_is_still_fast(tmp_path):
    """All 16 MiB inflated (ratio bound lifted): resync alone keeps the work small."""
    write_ws_crlf_bomb(tmp_path / "ws-bomb.pcap")
    (r,) = dissect_counted([(tmp_path / "ws-bomb.pcap", tmp_path / "out",
                             {"limits": {"ws_max_inflate_ratio": 10**9}})])
    assert r["calls"] < 150_000, r["calls"]  # 45,000 here; a step per line: 8,388,608 more
    assert "limit.websocket_inflate" not in r["anomalies"]
    flow = next(f for f in r["flows"] if f["server_port"] == 8080)
    assert flow["stream_bytes_c2s"] == len(b"CONNECT {}\r\nPING\r\n") + 16 * 1024 * 1024
    assert not r["accounting_errors"], r["accounting_errors"]


def test_run_budget_for_inflated_bytes_cuts_across_flows(tmp_path):
    write_ws_crlf_bomb(tmp_path / "ws-bomb.pcap")
    r = dissect_one(tmp_path / "ws-bomb.pcap", tmp_path, rows_per_kind=5,
                    limits={"ws_max_inflate_ratio": 10**9,
                            "ws_max_inflated_total_bytes": 3 * 1024 * 1024})
    (row,) = r["anomaly_rows"]["limit.websocket_inflate"]
    assert "limit ws_max_inflated_total_bytes" in row["detail"], row
    flow = next(f for f in r["flows"] if f["server_port"] == 8080)
    # the server's INFO was not compressed: only the client's messages count
    assert flow["stream_bytes_c2s"] == len(b"CONNECT {}\r\nPING\r\n") + 3 * 1024 * 1024

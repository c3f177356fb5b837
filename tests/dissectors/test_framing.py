"""Framers: every input whole, byte by byte, under arbitrary splits, with gaps and junk.

Two toy protocols drive them:

* lines: ``B <n>`` announces an ``n``-byte block followed by CRLF; any other line is a
  plain line.  Resync: the default rule (after the next LF).
* length-prefixed: ``AB <u16 body length> body`` (magic byte, resync on the next 0xAB),
  and a Pulsar-like ``<u32 size> <size bytes>`` without any resync rule.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.api import Span
from dissectors.framing import (
    NEED_MORE,
    Block,
    Dropped,
    Invalid,
    LengthPrefixedFramer,
    Line,
    LineFramer,
    Oversize,
    Pdu,
    Resynced,
    TrailerStatus,
    resync_after_lf,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------ drivers


def drive_lines(framer: LineFramer, keep: int | None = None) -> list:
    """Drain a LineFramer with the toy line protocol; return the events."""
    out = []
    while True:
        ev = framer.next_event()
        if ev is NEED_MORE:
            return out
        out.append(ev)
        if type(ev) is Line and ev.data.startswith(b"B "):
            try:
                n = int(ev.data[2:])
            except ValueError:
                continue
            if n >= 0:
                framer.read_exact(n, keep_bytes=keep, sha256=True, trailer=b"\r\n",
                                  lenient_trailers=(b"\n",))
        elif type(ev) is Block and ev.trailer is TrailerStatus.BAD:
            framer.start_resync()


def drain(framer) -> list:
    out = []
    while (ev := framer.next_event()) is not NEED_MORE:
        out.append(ev)
    return out


def span(offset: int, i: int) -> Span:
    """Chunk number ``i`` gets timestamp 1000*(i+1) and frame i+1."""
    return Span(offset, 1000 * (i + 1), 1000 * (i + 1), i + 1, i + 1)


def run(framer, data: bytes, cuts: list[int], driver, *, gaps: tuple = (), close: bool = True):
    """Feed ``data`` cut at ``cuts``; ``gaps`` are (start, end) ranges never fed.

    Returns (events, chunk_of_offset) where chunk_of_offset maps each fed offset to the
    index of the chunk that carried it (for provenance checks)."""
    bounds = sorted({0, len(data), *[c for c in cuts if 0 < c < len(data)],
                     *[g for gap in gaps for g in gap]})
    events = []
    owner = {}
    chunk = 0
    for a, b in zip(bounds, bounds[1:], strict=False):
        if any(g0 <= a and b <= g1 for g0, g1 in gaps):
            events += framer.gap(a, b - a)
            events += driver(framer)
            continue
        framer.feed(data[a:b], span(a, chunk))
        for o in range(a, b):
            owner[o] = chunk
        chunk += 1
        events += driver(framer)
        assert framer.decoded_bytes + framer.undecoded_bytes + framer.pending_bytes == (
            framer.fed_bytes
        )
    if close:
        events += framer.close()
        assert framer.pending_bytes == 0
    return events, owner


def shape(events) -> list[tuple]:
    """Events without provenance (which legitimately depends on the split)."""
    out = []
    for ev in events:
        t = type(ev)
        if t is Line:
            out.append(("line", ev.data, ev.bare_lf, ev.start, ev.end))
        elif t is Block:
            out.append(("block", ev.data, ev.nbytes, ev.sha256, ev.trailer, ev.trailer_found,
                        ev.start, ev.end))
        elif t is Pdu:
            out.append(("pdu", ev.data, ev.start, ev.end))
        elif t is Oversize:
            out.append(("oversize", ev.nbytes, ev.head, ev.start, ev.end))
        elif t is Invalid:
            out.append(("invalid", ev.head[:1], ev.start, ev.end))
        elif t is Resynced:
            out.append(("resynced", ev.found, ev.start, ev.end))
        elif t is Dropped:
            out.append(("dropped", ev.kind, ev.declared_end, ev.resume_at, ev.start, ev.end))
        else:  # pragma: no cover
            raise AssertionError(ev)
    return out


def check_provenance(events, owner: dict[int, int]) -> None:
    """ts/frame of the first byte's chunk and of the last byte's chunk."""
    for ev in events:
        if ev.end <= ev.start or type(ev) is Invalid:
            continue
        first = owner[ev.start]
        last = owner[ev.end - 1]
        assert (ev.ts_first_ns, ev.frame_first) == (1000 * (first + 1), first + 1), ev
        assert (ev.ts_last_ns, ev.frame_last) == (1000 * (last + 1), last + 1), ev


def cuts_strategy(n: int):
    return st.lists(st.integers(1, max(1, n - 1)), max_size=12)


# --------------------------------------------------------------------------- lines

LINES = (
    b"HELLO world\r\n"
    b"B 5\r\nab\r\nc\r\n"  # the block holds CRLF: the byte count decides
    b"bare lf line\n"
    b"B 0\r\n\r\n"
    b"\r\n"  # empty line
    b"B 3\r\nxyz\n"  # bare LF trailer: LENIENT
    b"last\r\n"
)


def lines_whole(data: bytes = LINES, **kw):
    return run(LineFramer(**kw), data, [], drive_lines)


def test_lines_whole_exact_events():
    events, owner = lines_whole()
    assert shape(events) == [
        ("line", b"HELLO world", False, 0, 13),
        ("line", b"B 5", False, 13, 18),
        ("block", b"ab\r\nc", 5, hashlib.sha256(b"ab\r\nc").hexdigest(), TrailerStatus.OK,
         b"\r\n", 18, 25),
        ("line", b"bare lf line", True, 25, 38),
        ("line", b"B 0", False, 38, 43),
        ("block", b"", 0, hashlib.sha256(b"").hexdigest(), TrailerStatus.OK, b"\r\n", 43, 45),
        ("line", b"", False, 45, 47),
        ("line", b"B 3", False, 47, 52),
        ("block", b"xyz", 3, hashlib.sha256(b"xyz").hexdigest(), TrailerStatus.LENIENT, b"\n",
         52, 56),
        ("line", b"last", False, 56, 62),
    ]
    check_provenance(events, owner)


def test_lines_byte_by_byte_same_events_and_provenance():
    whole, _ = lines_whole()
    framer = LineFramer()
    events, owner = run(framer, LINES, list(range(1, len(LINES))), drive_lines)
    assert shape(events) == shape(whole)
    check_provenance(events, owner)
    assert framer.decoded_bytes == len(LINES) and framer.undecoded_bytes == 0


@SETTINGS
@given(cuts=cuts_strategy(len(LINES)))
def test_lines_arbitrary_splits(cuts):
    whole, _ = lines_whole()
    events, owner = run(LineFramer(), LINES, cuts, drive_lines)
    assert shape(events) == shape(whole)
    check_provenance(events, owner)


def test_pdu_spanning_three_chunks_takes_first_and_last_chunk_times():
    framer = LineFramer()
    framer.feed(b"B 6\r\nab", Span(0, 10, 11, 1, 2))
    assert drive_lines(framer)[0].data == b"B 6"
    framer.feed(b"cd", Span(7, 20, 21, 3, 3))
    assert drive_lines(framer) == []
    framer.feed(b"ef\r\nX", Span(9, 30, 31, 4, 5))
    (blk,) = drive_lines(framer)
    assert (blk.data, blk.start, blk.end) == (b"abcdef", 5, 13)
    assert (blk.ts_first_ns, blk.frame_first, blk.ts_last_ns, blk.frame_last) == (10, 1, 31, 5)


def test_trailing_partial_line_is_dropped_at_close_and_counted():
    framer = LineFramer()
    events, _ = run(framer, b"one\r\ntwo-without-end", [], drive_lines)
    assert shape(events) == [
        ("line", b"one", False, 0, 5),
        ("dropped", "line", None, None, 5, 20),
    ]
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (5, 15)


def test_block_cut_by_close_and_missing_trailer():
    framer = LineFramer()
    events, _ = run(framer, b"B 4\r\nab", [], drive_lines)
    assert shape(events)[-1] == ("dropped", "block", 11, None, 5, 7)
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (5, 2)
    framer = LineFramer()
    events, _ = run(framer, b"B 2\r\nab\r", [], drive_lines)
    assert shape(events)[-1] == ("block", b"ab", 2, hashlib.sha256(b"ab").hexdigest(),
                                 TrailerStatus.MISSING, b"\r", 5, 7)
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (7, 1)


def test_bad_trailer_reported_then_resync():
    data = b"B 2\r\nabc\r\nnext\r\n"
    events, _ = lines_whole(data)
    assert shape(events) == [
        ("line", b"B 2", False, 0, 5),
        ("block", b"ab", 2, hashlib.sha256(b"ab").hexdigest(), TrailerStatus.BAD, b"c\r", 5, 7),
        ("resynced", True, 7, 10),
        ("line", b"next", False, 10, 16),
    ]


def test_oversize_line_is_skipped_without_buffering():
    long_line = b"x" * 5000 + b"\r\n"
    data = b"ok\r\n" + long_line + b"after\r\n"
    framer = LineFramer(max_line_bytes=100)
    peak = 0
    events = []
    for i in range(len(data)):
        framer.feed(data[i : i + 1], span(i, i))
        events += drive_lines(framer)
        peak = max(peak, framer.buffered_bytes)
    events += framer.close()
    assert peak <= 102
    assert shape(events) == [
        ("line", b"ok", False, 0, 4),
        ("oversize", 5002, b"x" * 64, 4, 5006),
        ("line", b"after", False, 5006, 5013),
    ]
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (11, 5002)


def test_line_at_exact_limit_is_accepted():
    framer = LineFramer(max_line_bytes=4)
    events, _ = run(framer, b"abcd\r\nabcde\r\nabcd\n", list(range(1, 19)), drive_lines)
    assert [e[0] for e in shape(events)] == ["line", "oversize", "line"]


def test_oversize_line_cut_by_close():
    framer = LineFramer(max_line_bytes=8)
    events, _ = run(framer, b"a" * 50, [10, 20], drive_lines)
    assert shape(events) == [("dropped", "long_line", None, None, 0, 50)]
    assert framer.undecoded_bytes == 50


def test_large_block_streams_with_cap_and_full_hash():
    payload = bytes(range(256)) * 4096  # 1 MiB
    data = b"B %d\r\n" % len(payload) + payload + b"\r\nend\r\n"
    framer = LineFramer()
    events = []
    peak = 0
    for i in range(0, len(data), 1000):
        framer.feed(data[i : i + 1000], span(i, i))
        events += drive_lines(framer, keep=16)
        peak = max(peak, framer.buffered_bytes)
    events += framer.close()
    blk = events[1]
    assert blk.data == payload[:16] and blk.nbytes == len(payload)
    assert blk.sha256 == hashlib.sha256(payload).hexdigest()
    assert peak <= 1000
    assert events[2].data == b"end"
    assert framer.decoded_bytes == len(data)


def test_gap_inside_block_resumes_at_known_end():
    data = b"B 10\r\n0123456789\r\nnext\r\n"
    framer = LineFramer()
    # bytes 9..12 ("3456") never captured
    events, _ = run(framer, data, [], drive_lines, gaps=((9, 13),))
    assert shape(events) == [
        ("line", b"B 10", False, 0, 6),
        ("dropped", "block", 18, 18, 6, 9),
        ("line", b"next", False, 18, 24),
    ]
    assert framer.decoded_bytes + framer.undecoded_bytes == len(data) - 4
    assert framer.undecoded_bytes == 3 + 5  # "012" before, "789\r\n" skipped after


def test_gap_past_block_end_resyncs():
    data = b"B 4\r\nabcd\r\nxx yy\r\nnext\r\n"
    framer = LineFramer()
    events, _ = run(framer, data, [], drive_lines, gaps=((7, 13),))
    assert shape(events) == [
        ("line", b"B 4", False, 0, 5),
        ("dropped", "block", 11, None, 5, 7),
        ("resynced", True, 13, 18),
        ("line", b"next", False, 18, 24),
    ]


def test_gap_inside_line_then_default_resync():
    data = b"first\r\nsecond\r\nthird\r\n"
    framer = LineFramer()
    events, _ = run(framer, data, [], drive_lines, gaps=((9, 11),))
    assert shape(events) == [
        ("line", b"first", False, 0, 7),
        ("dropped", "line", None, None, 7, 9),
        ("resynced", True, 11, 15),
        ("line", b"third", False, 15, 22),
    ]


def test_gap_before_any_data():
    framer = LineFramer()
    assert framer.gap(0, 5) == []
    framer.feed(b"tail\r\nnext\r\n", span(5, 0))
    assert shape(drive_lines(framer)) == [
        ("resynced", True, 5, 11),
        ("line", b"next", False, 11, 17),
    ]


def test_resync_callback_gets_previous_byte():
    seen = []

    def rule(buf, prev):
        seen.append((bytes(buf), prev))
        return resync_after_lf(buf, prev)

    framer = LineFramer(resync=rule)
    framer.feed(b"junk\r\n", span(0, 0))
    assert drive_lines(framer)[0].data == b"junk"
    framer.start_resync()
    framer.feed(b"good\r\n", span(6, 1))
    assert shape(drive_lines(framer)) == [("line", b"good", False, 6, 12)]
    assert seen == [(b"good\r\n", 0x0A)]


def test_abandon_counts_everything_undecoded():
    framer = LineFramer()
    framer.feed(b"a\r\npartial", span(0, 0))
    drive_lines(framer)
    framer.abandon()
    framer.feed(b"more bytes", span(10, 1))
    assert drive_lines(framer) == []
    assert framer.close() == []
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (3, 17)


def test_contract_violations_raise():
    framer = LineFramer()
    framer.feed(b"abc", span(0, 0))
    with pytest.raises(ValueError):
        framer.feed(b"x", span(5, 1))
    with pytest.raises(ValueError):
        framer.gap(7, 1)
    with pytest.raises(ValueError):
        framer.read_exact(-1)


junk = st.binary(max_size=300)
line_units = st.one_of(
    st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"") + b"\r\n"),
    st.binary(max_size=30).map(lambda b: b"B %d\r\n" % len(b) + b + b"\r\n"),
    st.binary(max_size=10),
    st.just(b"B 999999\r\n"),
)


@SETTINGS
@given(units=st.lists(line_units, max_size=15), data=st.data())
def test_lines_accounting_under_random_splits_and_gaps(units, data):
    stream = b"".join(units)
    cuts = data.draw(cuts_strategy(len(stream)))
    gaps = []
    if len(stream) > 2:
        for _ in range(data.draw(st.integers(0, 3))):
            a = data.draw(st.integers(0, len(stream) - 1))
            b = data.draw(st.integers(a + 1, len(stream)))
            if all(b <= g0 or a >= g1 for g0, g1 in gaps):
                gaps.append((a, b))
    framer = LineFramer(max_line_bytes=data.draw(st.integers(1, 40)))
    events, owner = run(framer, stream, cuts, drive_lines, gaps=tuple(sorted(gaps)))
    gap_bytes = sum(b - a for a, b in gaps)
    assert framer.decoded_bytes + framer.undecoded_bytes == len(stream) - gap_bytes
    check_provenance(events, owner)


@SETTINGS
@given(stream=junk, cuts=cuts_strategy(300))
def test_lines_same_events_whole_and_split_for_any_bytes(stream, cuts):
    whole, _ = run(LineFramer(max_line_bytes=16), stream, [], drive_lines)
    split, _ = run(LineFramer(max_line_bytes=16), stream, cuts, drive_lines)
    assert shape(split) == shape(whole)


# ----------------------------------------------------------------- length prefixed

MAGIC = 0xAB


def magic_length(view: memoryview) -> int | None:
    if view[0] != MAGIC:
        return -1
    if len(view) < 3:
        return None
    return 3 + struct.unpack_from(">H", view, 1)[0]


def magic_resync(buf: bytes, prev: int | None) -> tuple[int, bool]:
    i = buf.find(bytes([MAGIC]))
    return (len(buf), False) if i < 0 else (i, True)


def magic(body: bytes) -> bytes:
    return bytes([MAGIC]) + struct.pack(">H", len(body)) + body


def pulsar_length(view: memoryview) -> int | None:
    if len(view) < 4:
        return None
    return 4 + struct.unpack_from(">I", view, 0)[0]


def pulsar(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def magic_framer(max_pdu: int = 64) -> LengthPrefixedFramer:
    return LengthPrefixedFramer(magic_length, max_pdu_bytes=max_pdu, resync=magic_resync)


MAGIC_STREAM = magic(b"one") + magic(b"") + magic(b"x" * 61) + magic(b"y" * 200) + magic(b"end")


def test_length_prefixed_whole_exact_events():
    framer = magic_framer()
    events, owner = run(framer, MAGIC_STREAM, [], drain)
    assert shape(events) == [
        ("pdu", magic(b"one"), 0, 6),
        ("pdu", magic(b""), 6, 9),
        ("pdu", magic(b"x" * 61), 9, 73),
        ("oversize", 203, magic(b"y" * 200)[:64], 73, 276),
        ("pdu", magic(b"end"), 276, 282),
    ]
    check_provenance(events, owner)
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (282 - 203, 203)


def test_length_prefixed_byte_by_byte_never_buffers_oversize():
    framer = magic_framer()
    events = []
    peak = 0
    for i in range(len(MAGIC_STREAM)):
        framer.feed(MAGIC_STREAM[i : i + 1], span(i, i))
        events += drain(framer)
        peak = max(peak, framer.buffered_bytes)
    events += framer.close()
    whole, _ = run(magic_framer(), MAGIC_STREAM, [], drain)
    assert shape(events) == shape(whole)
    assert peak <= 64


@SETTINGS
@given(cuts=cuts_strategy(len(MAGIC_STREAM)))
def test_length_prefixed_arbitrary_splits(cuts):
    whole, _ = run(magic_framer(), MAGIC_STREAM, [], drain)
    events, owner = run(magic_framer(), MAGIC_STREAM, cuts, drain)
    assert shape(events) == shape(whole)
    check_provenance(events, owner)


def test_length_prefixed_invalid_then_resync_once():
    data = magic(b"a") + b"\x00\x01\x02\x03" + magic(b"b") + b"zz"
    framer = magic_framer()
    events, _ = run(framer, data, [], drain)
    assert shape(events) == [
        ("pdu", magic(b"a"), 0, 4),
        ("invalid", b"\x00", 4, 5),
        ("resynced", True, 5, 8),
        ("pdu", magic(b"b"), 8, 12),
        ("invalid", b"z", 12, 13),
        ("resynced", False, 13, 14),
    ]
    assert (framer.decoded_bytes, framer.undecoded_bytes) == (8, 6)


def test_length_prefixed_failed_candidate_stays_in_the_episode():
    # 0xAB inside junk looks like a start but its length runs into more junk: still one
    # Invalid and one Resynced, never an event per byte
    data = b"\x00" + b"\xab\x00" + b"\x01" * 5 + magic(b"ok")
    framer = LengthPrefixedFramer(
        lambda v: -1 if v[0] != MAGIC else (None if len(v) < 3 else
                                          (3 + v[2] if v[1] == 0 and v[2] == 2 else -1)),
        max_pdu_bytes=64, resync=magic_resync,
    )
    events, _ = run(framer, data, list(range(1, len(data))), drain)
    kinds = [e[0] for e in shape(events)]
    assert kinds == ["invalid", "resynced", "pdu"]


def test_length_prefixed_without_resync_rule_gives_up_until_gap():
    data = pulsar(b"abc") + b"\xff\xff\xff\xff" + pulsar(b"d")
    framer = LengthPrefixedFramer(pulsar_length, max_pdu_bytes=16)
    events, _ = run(framer, data, [], drain)
    # the huge declared size is an oversize unit: skipped to the end of the stream
    assert [e[0] for e in shape(events)] == ["pdu", "dropped"]
    assert shape(events)[1][1] == "oversize"
    assert framer.decoded_bytes + framer.undecoded_bytes == len(data)


def test_length_prefixed_gap_inside_pdu_resumes_at_its_end():
    data = pulsar(b"0123456789") + pulsar(b"next")
    framer = LengthPrefixedFramer(pulsar_length, max_pdu_bytes=64)
    events, _ = run(framer, data, [], drain, gaps=((6, 9),))
    assert shape(events) == [
        ("dropped", "pdu", 14, 14, 0, 6),
        ("pdu", pulsar(b"next"), 14, 22),
    ]
    assert framer.undecoded_bytes == 6 + 5


def test_length_prefixed_gap_inside_oversize_keeps_skipping():
    data = pulsar(b"z" * 100) + pulsar(b"ok")
    framer = LengthPrefixedFramer(pulsar_length, max_pdu_bytes=32)
    events, _ = run(framer, data, [10, 50], drain, gaps=((20, 30),))
    assert shape(events) == [
        ("dropped", "oversize", 104, 104, 0, 20),
        ("pdu", pulsar(b"ok"), 104, 110),
    ]


pdu_units = st.one_of(
    st.binary(max_size=40).map(magic),
    st.binary(max_size=8),
    st.binary(min_size=70, max_size=120).map(magic),
)


@SETTINGS
@given(units=st.lists(pdu_units, max_size=12), data=st.data())
def test_length_prefixed_accounting_under_random_splits_and_gaps(units, data):
    stream = b"".join(units)
    cuts = data.draw(cuts_strategy(len(stream)))
    gaps = []
    if len(stream) > 2:
        for _ in range(data.draw(st.integers(0, 3))):
            a = data.draw(st.integers(0, len(stream) - 1))
            b = data.draw(st.integers(a + 1, len(stream)))
            if all(b <= g0 or a >= g1 for g0, g1 in gaps):
                gaps.append((a, b))
    framer = magic_framer()
    events, owner = run(framer, stream, cuts, drain, gaps=tuple(sorted(gaps)))
    assert framer.decoded_bytes + framer.undecoded_bytes == len(stream) - sum(
        b - a for a, b in gaps
    )
    check_provenance(events, owner)
    if not gaps:
        whole, _ = run(magic_framer(), stream, [], drain)
        assert shape(events) == shape(whole)


@SETTINGS
@given(stream=st.binary(max_size=400), cuts=cuts_strategy(400))
def test_length_prefixed_any_bytes_never_raise(stream, cuts):
    for framer in (magic_framer(), LengthPrefixedFramer(pulsar_length, max_pdu_bytes=32)):
        run(framer, stream, cuts, drain)
        assert framer.decoded_bytes + framer.undecoded_bytes == len(stream)


def test_a_partial_line_is_searched_for_its_lf_once():
    """Byte by byte, a line whose LF has not come: after each feed the next LF search is
    set to start past every byte already searched (``_scan``), so a 4,000-byte line costs
    one pass, not 4,000 rescans of its head.  The work counts of tests/hostile cannot see
    a rescan, which is one ``bytearray.find`` call each time."""
    framer = LineFramer(max_line_bytes=4096)
    line = b"PUB " + b"x" * 3_996
    for i in range(len(line)):
        framer.feed(line[i : i + 1], span(i, i))
        assert drain(framer) == []
        assert framer._scan == len(framer._b.data) == framer._b.pos + i + 1, i
    framer.feed(b"\r\n", span(len(line), len(line)))
    (ev,) = drain(framer)
    assert type(ev) is Line and ev.data == line and (ev.start, ev.end) == (0, len(line) + 2)

"""``reassembly.provenance.ProvenanceBuffer`` against a slow reference that remembers, for
every stream byte, the chunk that carried it: whatever the cuts and the mix of take /
skip / discard / reset, each unit's bytes and provenance are the reference's."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reassembly.provenance import Extent, ProvenanceBuffer, Span


class Reference:
    """Per-byte bookkeeping: offset -> (byte, ts_first, ts_last, frame_first, frame_last)."""

    def __init__(self) -> None:
        self.bytes: dict[int, tuple[int, int, int, int, int]] = {}
        self.read = 0  # stream offset of the read position
        self.end = 0

    def feed(self, data: bytes, span: Span) -> None:
        for i, b in enumerate(data):
            self.bytes[span.offset + i] = (b, span.ts_first_ns, span.ts_last_ns,
                                           span.frame_first, span.frame_last)
        self.end = span.offset + len(data)

    def extent(self, start: int, end: int) -> Extent:
        first = self.bytes[start]
        last = self.bytes[end - 1] if end > start else first
        return Extent(start, end, first[1], last[2], first[3], last[4])

    def take(self, n: int) -> tuple[bytes, Extent]:
        n = min(n, self.end - self.read)
        start = self.read
        self.read += n
        return bytes(self.bytes[o][0] for o in range(start, start + n)), self.extent(
            start, start + n)


# an operation: ("feed", size) / ("feed_many", size: up to three packets at once, one
# chunk record each) / ("take", n) / ("skip", n) / ("discard", k) / ("reset", gap) /
# ("look", 0: the chunk of the read position, as ``chunk_at`` and a compiled scanner
# reading ``chunks or (last,)`` find it) / ("compact", 0)
_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["feed", "feed_many"]), st.integers(1, 40)),
        st.tuples(st.sampled_from(["take", "skip", "discard"]), st.integers(0, 60)),
        st.tuples(st.just("reset"), st.integers(0, 10)),
        st.tuples(st.sampled_from(["look", "compact"]), st.just(0)),
    ),
    max_size=60,
)


def _scanner_chunk(records: object, offset: int) -> tuple[int, int, int, int, int]:
    """What ``dissectors/nats/_speedups.c`` picks: the first record ending after
    ``offset``, else the last."""
    recs = list(records)  # type: ignore[call-overload]
    for rec in recs[:-1]:
        if rec[0] > offset:
            return rec  # type: ignore[no-any-return]
    return recs[-1]  # type: ignore[no-any-return]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 1000), _ops)
# (a lookup that left one record, [last], then a feed after every byte was resolved: the
# new chunk must still be recorded behind it)
@example(0, [("feed", 5), ("feed", 5), ("take", 60), ("feed", 5), ("look", 0)])
def test_every_unit_has_the_reference_provenance(start: int, ops) -> None:
    buf = ProvenanceBuffer()
    ref = Reference()
    ref.read = ref.end = start
    offset = start
    nfeed = 0
    fed = False
    for op, n in ops:
        if op == "feed":
            nfeed += 1
            data = bytes((offset + i) % 251 for i in range(n))
            # times and frames distinct per chunk, so a wrong chunk shows
            span = Span(offset, 1000 * nfeed, 1000 * nfeed + 7, 2 * nfeed, 2 * nfeed + 1)
            buf.feed(data, span)
            ref.feed(data, span)
            offset += n
            fed = True
        elif op == "feed_many":
            data = bytes((offset + i) % 251 for i in range(n))
            cuts = sorted({0, n, n // 3, (2 * n) // 3})
            records, spans = [], []
            for a, b in zip(cuts, cuts[1:]):  # noqa: B905
                nfeed += 1
                spans.append(Span(offset + a, 1000 * nfeed, 1000 * nfeed, 2 * nfeed, 2 * nfeed))
                records.append((offset + b, 1000 * nfeed, 1000 * nfeed, 2 * nfeed, 2 * nfeed))
                ref.feed(data[a:b], spans[-1])
            buf.feed(data, Span(offset, spans[0][1], spans[-1][2], spans[0][3], spans[-1][4]),
                     records)
            offset += n
            fed = True
        elif op == "compact":
            if not fed:
                continue  # (as the reads below: nothing is asked before the first feed)
            buf.compact()
        elif op == "reset":
            offset += n
            buf.reset(offset)
            ref.read = ref.end = offset
        elif not fed or ref.read == ref.end:
            continue  # provenance of bytes never fed is not asked for
        elif op == "look":
            want_c = ref.bytes[ref.read][1:]
            assert buf.chunk_at(ref.read)[1:] == want_c
            assert _scanner_chunk(buf.chunks or (buf.last,), ref.read)[1:] == want_c
        elif op == "take":
            got = buf.take(n)
            want = ref.take(n)
            if want[1].end > want[1].start:
                assert got == want
            else:  # nothing taken: the position did not move
                assert got[0] == b"" and got[1].start == want[1].start
        elif op == "skip":
            want = ref.take(n)[1]
            got = buf.skip(n)
            if want.end > want.start:
                assert got == want
        else:  # discard up to an offset, then look at what is next
            target = ref.read + n
            moved = buf.discard_to(target)
            assert moved == min(n, ref.end - ref.read)
            ref.read += moved
        assert buf.offset == ref.read
        assert buf.held == ref.end - ref.read
        assert buf.end == (ref.end if fed or buf.base is not None else None)


def test_feed_must_be_contiguous() -> None:
    buf = ProvenanceBuffer()
    buf.feed(b"abc", Span(10, 1, 2, 3, 4))
    with pytest.raises(ValueError):
        buf.feed(b"d", Span(14, 1, 2, 3, 4))
    buf.reset(14)
    buf.feed(b"d", Span(14, 5, 6, 7, 8))
    assert buf.take(5) == (b"d", Extent(14, 15, 5, 6, 7, 8))


def test_past_everything_held_is_the_latest_chunk() -> None:
    """An offset past the bytes held (a gap right after them) gets the latest chunk's
    provenance, even once the buffer was cleared."""
    buf = ProvenanceBuffer(0)
    buf.feed(b"ab", Span(0, 1, 2, 1, 1))
    buf.feed(b"cd", Span(2, 3, 4, 2, 2))
    assert buf.extent(9, 10) == Extent(9, 10, 3, 4, 2, 2)
    buf.clear()
    assert buf.end == 4 and buf.held == 0
    assert buf.extent(4, 5) == Extent(4, 5, 3, 4, 2, 2)


def test_feed_drops_the_resolved_prefix() -> None:
    """Memory: what was taken is not kept past the next feed (``feed`` says how much)."""
    buf = ProvenanceBuffer(0)
    buf.feed(b"x" * 100, Span(0, 0, 0, 0, 0))
    buf.take(90)
    assert buf.feed(b"y", Span(100, 0, 0, 1, 1)) == 90
    assert len(buf.data) == 11 and buf.base == 90 and buf.held == 11


def test_extent_through_joins_first_and_last() -> None:
    a = Extent(5, 9, 100, 110, 1, 2)
    b = Extent(20, 30, 300, 310, 7, 8)
    assert a.through(b) == Extent(5, 30, 100, 310, 1, 8)
    assert type(a.through(b)) is Extent

"""S2 stream decoder (dissectors/nats/s2.py): blocks from byte literals with exact
outputs, every element form, framing, CRC as data, corrupted chunks and gaps with
resynchronisation on the next chunk, the memory budget, and a hypothesis round trip
through the test encoder (tests/nats_s2/s2_encoder.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors.api import Span
from dissectors.nats import s2
from dissectors.nats.s2 import (
    STREAM_IDENTIFIER,
    ChunkType,
    Corrupt,
    CrcStatus,
    Data,
    S2Error,
    S2Stream,
    decode_block,
    masked_crc32c,
)
from reassembly.limits import MemoryBudget
from tests.nats_s2.s2_encoder import (
    chunk,
    data_chunk,
    encode_block,
    expand,
    stream,
)


def run(wire: bytes, cuts: list[int] | None = None, **kw) -> tuple[list, S2Stream]:
    """Feed ``wire`` (cut at ``cuts``) and close; every piece is its own frame."""
    st_ = S2Stream(start_offset=0, **kw)
    out: list = []
    bounds = [0, *(cuts or []), len(wire)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        out += st_.feed(wire[a:b], Span(a, 1000 + i, 1000 + i, i + 1, i + 1))
    out += st_.close()
    assert st_.decoded_bytes + st_.undecoded_bytes == len(wire)
    return out, st_


def plain(events: list) -> bytes:
    return b"".join(e.data for e in events if type(e) is Data)


# -- blocks -----------------------------------------------------------------------------


def test_masked_crc_of_nothing_is_the_mask_delta():
    assert masked_crc32c(b"") == 0xA282EAD8
    # crc32c("123456789") = 0xe3069283 (the check value of CRC-32C)
    c = 0xE3069283
    rotated = ((c >> 15) | (c << 17)) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == 0xC78AB0E5  # pinned; the real captures verify the formula


def test_literal_and_overlapping_copy():
    # length 10; literal "abcd"; copy1 offset 4 length 6 (overlaps itself)
    assert decode_block(b"\x0a\x0cabcd\x09\x04") == b"abcdabcdab"


def test_repeat_offset_reuses_the_last_copy_offset():
    # "abcd", copy1 offset 4 length 4, repeat length 4, repeat length 8+3 (1 extra byte)
    assert decode_block(b"\x17\x0cabcd\x01\x04\x01\x00\x15\x00\x03") == b"abcd" * 5 + b"abc"


def test_copy2_and_copy4_and_long_literal():
    lit = bytes(range(70))  # 61 bytes or more: the 1-extra-byte literal length
    # 79 bytes: literal of 70, copy2 offset 70 length 5, copy4 offset 2 length 4
    block = b"\x4f" + b"\xf0\x45" + lit + b"\x12\x46\x00" + b"\x0f\x02\x00\x00\x00"
    assert decode_block(block) == lit + lit[:5] + lit[3:5] * 2


def test_repeat_length_forms_exact():
    base = [("lit", b"xyz"), ("copy", 3, 4)]
    for n in (4, 8, 9, 263, 264, 65539, 65540, 70000):
        ops = [*base, ("rep", n)]
        want = expand(ops)
        assert len(want) == 7 + n
        assert decode_block(encode_block(ops)) == want == (b"xyz" * (n // 3 + 4))[: 7 + n]


@pytest.mark.parametrize("block, why", [
    (b"\x05\x01\x00\x00", "offset"),  # repeat before any copy: offset 0
    (b"\x08\x0cabcd\x09\x05", "offset"),  # offset 5 > 4 decoded bytes
    (b"\x09\x0cabcd", "declared"),  # 4 bytes, 9 declared
    (b"\x03\x0cabcd", "declared length"),  # literal longer than declared
    (b"\x04\x0cab", "past the block"),
    (b"\x80\x80\x80\x80\x80", "varint"),
    (b"\x0a\x0cabcd\x09", "cut short"),
])
def test_bad_blocks_raise_s2error_naming_the_problem(block, why):
    with pytest.raises(S2Error, match=why):
        decode_block(block)


def test_a_block_cannot_declare_more_than_the_limit():
    with pytest.raises(S2Error, match="more than the limit"):
        decode_block(b"\x80\x80\x80\x04\x00", max_len=1 << 20)  # declares 8 MiB


# -- streams ----------------------------------------------------------------------------

MSG1 = b"RMSG $G demo.x 10\r\n0123456789\r\n"
MSG2 = b"PING\r\n"
OPS1 = [("lit", b"RMSG $G demo.x 10\r\n0123456789\r\n")]
OPS3 = [("lit", b"abcdefgh"), ("copy", 8, 8), ("rep", 16), ("copy4", 3, 5)]


def test_stream_whole_and_byte_by_byte_exact_events():
    wire = stream(data_chunk(MSG1, OPS1), data_chunk(MSG2), data_chunk(expand(OPS3), OPS3))
    whole, dec = run(wire)
    c1 = 10 + 4 + 4 + len(encode_block(OPS1))
    c2 = 4 + 4 + len(MSG2)
    assert [(type(e), e.kind, e.crc, e.start, e.end, e.data) for e in whole] == [
        (Data, ChunkType.COMPRESSED, CrcStatus.OK, 10, c1, MSG1),
        (Data, ChunkType.UNCOMPRESSED, CrcStatus.OK, c1, c1 + c2, MSG2),
        (Data, ChunkType.COMPRESSED, CrcStatus.OK, c1 + c2, len(wire),
         b"abcdefgh" * 4 + b"fghfg"),
    ]
    assert (dec.decoded_bytes, dec.undecoded_bytes, dec.chunks_ok) == (len(wire), 0, 3)
    bytewise, _ = run(wire, list(range(1, len(wire))))
    assert [(e.start, e.end, e.data) for e in bytewise] == [
        (e.start, e.end, e.data) for e in whole]
    # provenance: the first chunk's bytes came in frames 11 .. c1 (one byte a frame)
    assert (bytewise[0].frame_first, bytewise[0].frame_last) == (11, c1)


def test_skippable_chunks_are_read_and_unskippable_ones_resync():
    wire = stream(chunk(0xFE, b"\x00" * 5), chunk(0x99, b"idx"), data_chunk(MSG2),
                  chunk(0x05, b"zzz"), data_chunk(MSG1, OPS1))
    events, dec = run(wire)
    bad_at = 10 + 9 + 7 + 4 + 4 + len(MSG2)
    assert [type(e) for e in events] == [Data, Corrupt, Data]
    assert plain(events) == MSG2 + MSG1
    c = events[1]
    assert (c.start, c.end) == (bad_at, bad_at + 7)
    assert c.reason == "reserved unskippable chunk type 0x05; skipped 7 bytes to the next chunk"
    assert dec.undecoded_bytes == 7


def test_a_corrupted_compressed_chunk_is_reported_and_the_next_chunk_decoded():
    good = data_chunk(expand(OPS3), OPS3)
    # the CRC of MSG1 over a block that decodes to other bytes
    bad = chunk(0x00, masked_crc32c(MSG1).to_bytes(4, "little") + encode_block(
        [("lit", b"RMSG $G demo.x 10\r\n"), ("lit", b"0123"), ("copy", 4, 6),
         ("lit", b"\r\n")]))
    assert decode_block(bytes(bad[8:])) == b"RMSG $G demo.x 10\r\n0123012301\r\n"  # CRC says no
    wire = stream(bad, good)
    events, dec = run(wire)
    assert [(type(e), getattr(e, "crc", None)) for e in events] == [
        (Data, CrcStatus.MISMATCH), (Data, CrcStatus.OK)]
    assert dec.chunks_bad_crc == 1 and events[1].data == expand(OPS3)
    # a body that does not decode at all: skipped by its length
    broken = bytearray(data_chunk(MSG1, OPS1))
    broken[8] = 0x7F  # declared length 127: the block decodes to fewer bytes
    events, dec = run(stream(bytes(broken), good))
    assert [type(e) for e in events] == [Corrupt, Data]
    assert events[0].reason == "compressed chunk: block decodes to 31 bytes, declared 127"
    assert (events[0].start, events[0].end) == (10, 10 + len(broken))
    assert events[1].data == expand(OPS3)
    assert dec.undecoded_bytes == len(broken)


def test_gap_inside_a_chunk_skips_to_its_end():
    c1, c2 = data_chunk(MSG1, OPS1), data_chunk(MSG2)
    wire = stream(c1, c2)
    st_ = S2Stream(start_offset=0)
    cut = 10 + 12
    out = st_.feed(wire[:cut], Span(0, 1, 1, 1, 1))
    out += st_.gap(cut, 5, 2)
    out += st_.feed(wire[cut + 5 :], Span(cut + 5, 3, 3, 3, 3))
    out += st_.close()
    assert [type(e) for e in out] == [Corrupt, Data]
    assert out[0].reason == "chunk cut by a gap (bytes never captured)"
    assert (out[0].start, out[0].end) == (10, cut)
    assert out[1].data == MSG2
    assert st_.decoded_bytes + st_.undecoded_bytes + 5 == len(wire)


def test_gap_inside_a_header_resyncs_on_a_chunk_whose_crc_matches():
    c1, c2, c3 = data_chunk(MSG1, OPS1), data_chunk(MSG2), data_chunk(MSG1)
    wire = stream(c1, c2, c3)
    st_ = S2Stream(start_offset=0)
    out = st_.feed(wire[:12], Span(0, 1, 1, 1, 1))
    out += st_.gap(12, 2, 2)  # the chunk length was cut: where it ends is unknown
    out += st_.feed(wire[14:], Span(14, 3, 3, 3, 3))
    out += st_.close()
    assert [type(e) for e in out] == [Corrupt, Corrupt, Data, Data]
    assert out[0].reason == "chunk cut by a gap (bytes never captured)"
    assert out[1].reason.startswith("bytes after a gap are not a chunk; skipped ")
    assert (out[1].start, out[1].end) == (14, 10 + len(c1))
    assert plain(out) == MSG2 + MSG1
    assert st_.decoded_bytes + st_.undecoded_bytes + 2 == len(wire)


def test_stream_ending_inside_a_chunk():
    wire = stream(data_chunk(MSG2), data_chunk(MSG1, OPS1))
    events, _ = run(wire[:-3])
    assert [type(e) for e in events] == [Data, Corrupt]
    assert events[1].reason == "stream ended inside a chunk"


def test_memory_budget_drops_the_partial_chunk_and_goes_on():
    budget = MemoryBudget(64)
    big = bytes(random.Random(1).randrange(256) for _ in range(200))
    wire = stream(data_chunk(big), data_chunk(MSG2))
    st_ = S2Stream(start_offset=0, budget=budget)
    out = st_.feed(wire[:100], Span(0, 1, 1, 1, 1))
    out += st_.take_events()
    assert [type(e) for e in out] == [Corrupt]
    assert out[0].reason.startswith("limit.memory: memory budget of 64 bytes reached")
    assert budget.used == 0
    out = st_.feed(wire[100:], Span(100, 2, 2, 2, 2)) + st_.close()
    assert plain(out) == MSG2
    assert budget.peak <= 100


def test_without_a_budget_a_chunk_is_bounded_by_the_block_limit():
    big = b"x" * 5000
    events, _ = run(stream(data_chunk(big), data_chunk(MSG2)), max_block_bytes=1024)
    assert [type(e) for e in events] == [Corrupt, Data]
    assert "over the limit" in events[0].reason
    assert events[1].data == MSG2


def test_random_junk_never_raises_and_is_all_accounted():
    rng = random.Random(23)
    good = stream(data_chunk(MSG1, OPS1), data_chunk(expand(OPS3), OPS3))
    for _ in range(300):
        wire = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            wire[rng.randrange(len(wire))] = rng.randrange(256)
        cuts = sorted(rng.sample(range(1, len(wire)), 3))
        events, _ = run(bytes(wire), cuts)
        for e in events:
            if type(e) is Data and e.crc is CrcStatus.OK:
                assert e.data in (MSG1, expand(OPS3))


# -- round trip through the test encoder ------------------------------------------------


@st.composite
def element_lists(draw) -> list:
    ops: list = [("lit", draw(st.binary(min_size=1, max_size=80)))]
    n = len(ops[0][1])
    have_offset = False
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["lit", "copy", "copy4", "rep"] if have_offset
                                    else ["lit", "copy", "copy4"]))
        if kind == "lit":
            size = draw(st.sampled_from([1, 59, 60, 61, 255, 256, 257, 300]))
            data = draw(st.binary(min_size=size, max_size=size))
            ops.append(("lit", data))
            n += size
        elif kind in ("copy", "copy4"):
            off = draw(st.integers(1, n))
            length = draw(st.integers(4, 11) if kind == "copy" and off < 2048
                          else st.integers(1, 64))
            ops.append((kind, off, length))
            have_offset = True
            n += length
        else:
            length = draw(st.sampled_from([4, 5, 8, 9, 100, 263, 264, 300, 65539, 65541]))
            ops.append(("rep", length))
            n += length
    return ops


@settings(max_examples=150, deadline=None)
@given(blocks=st.lists(element_lists(), min_size=1, max_size=4), seed=st.integers(0, 2**32))
def test_encoded_random_elements_decode_to_what_they_mean(blocks, seed):
    chunks = [data_chunk(expand(ops), ops) for ops in blocks]
    wire = stream(*chunks)
    rng = random.Random(seed)
    cuts = sorted(set(rng.sample(range(1, len(wire)), min(len(wire) - 1, 5))))
    events, dec = run(wire, cuts)
    assert [(type(e), getattr(e, "crc", None)) for e in events] == [(Data, CrcStatus.OK)] * len(
        blocks)
    assert [e.data for e in events] == [expand(ops) for ops in blocks]
    assert dec.undecoded_bytes == 0


def test_snappy_identifier_is_accepted():
    wire = b"\xff\x06\x00\x00sNaPpY" + data_chunk(MSG2)
    events, _ = run(wire)
    assert plain(events) == MSG2
    assert wire[:10] != STREAM_IDENTIFIER and s2.MAX_BLOCK_BYTES == 4 << 20

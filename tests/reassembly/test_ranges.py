"""The seekable range reader (``reassembly.ranges``) is the whole-file reader: a file read
as a chain of ranges, each started where the previous stopped with the state it
reached, gives the whole-file reader's frames and damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from reassembly.capture import open_capture
from reassembly.ranges import Window, find_boundary, open_range, probe_format, walk_range
from tests.reassembly.test_readers import CAPTURE_FILES, CAPTURES, epb, idb, shb, spb, write

_PLAIN = [rel for rel in CAPTURE_FILES
          if probe_format((CAPTURES / rel).read_bytes()[:64]) is not None]


def read_in_ranges(path: Path, step: int) -> tuple[list, list, int]:
    """Frames and damage of ``path`` read as ranges of ``step`` bytes, chained."""
    size = path.stat().st_size
    fmt = probe_format(path.read_bytes()[:64])
    assert fmt is not None
    frames: list = []
    damage: list = []
    start, number, state = 0, 0, None
    with path.open("rb") as f:
        while start < size:
            stop = start + step
            reader = open_range(f, fmt, start, stop, number=number, state=state)
            got = list(reader)
            frames += got
            damage += reader.info.damage
            if got:
                number = got[-1].number
            state = getattr(reader, "state", None)
            if reader.offset < stop:  # the end of the file, or damage stopped it
                break
            start = reader.offset
    return frames, damage, start


@pytest.mark.parametrize("rel", _PLAIN)
def test_chained_ranges_read_what_the_whole_file_reader_reads(rel: str) -> None:
    path = CAPTURES / rel
    with open_capture(path) as r:
        expected = list(r)
        expected_damage = r.info.damage
    size = path.stat().st_size
    for step in (size // 3 + 1, 997):
        frames, damage, _end = read_in_ranges(path, step)
        assert frames == expected, (rel, step)
        assert damage == expected_damage, (rel, step)


def test_range_state_carries_sections_interfaces_and_spb_time(tmp_path: Path) -> None:
    """Two sections of both byte orders, an SPB after a range cut: the second range
    starts in the state the first one reached (interfaces, byte order, last time)."""
    first = shb("<") + idb("<", 1, opts=b"") + epb("<", 0, 5_000_000, b"a" * 60)
    second = shb(">") + idb(">", 101) + idb(">", 1) + epb(">", 1, 7_000_000, b"b" * 40)
    tail = spb(">", b"c" * 30) + epb(">", 0, 8_000_000, b"d" * 20)
    path = write(tmp_path, "two.pcapng", first + second + tail)
    cut = len(first + second)
    with open_capture(path) as r:
        expected = list(r)
    fmt = probe_format(path.read_bytes()[:64])
    with path.open("rb") as f:
        one = open_range(f, fmt, 0, cut)
        head = list(one)
        assert one.offset == cut and one.state.in_section and not one.state.little_endian
        assert [i[4] for i in one.state.interfaces] == [1, 2]  # global interface indexes
        two = open_range(f, fmt, cut, None, number=head[-1].number, state=one.state)
        rest = list(two)
    assert head + rest == expected
    assert rest[0].ts_ns == head[-1].ts_ns  # the SPB takes the previous frame's time
    assert two.offset == path.stat().st_size and not two.info.damage


def test_walk_from_a_found_boundary_counts_the_records(tmp_path: Path) -> None:
    data = Path(CAPTURES / "arkime" / "tcpseq_synthetic.pcap")
    assert data.exists(), f"{data} is committed (tests/data/captures/README.md)"
    size = data.stat().st_size
    fmt = probe_format(data.read_bytes()[:64])
    with data.open("rb") as f:
        win = Window(f, size)
        first = find_boundary(win, fmt, size // 2, size)
        assert first is not None
        walk = walk_range(win, fmt, first, size)
        tail = list(open_range(f, fmt, first, None))
    assert walk.stop == size and walk.damage is None and walk.frames == len(tail)
    with open_capture(data) as r:
        assert [fr.data for fr in list(r)[-len(tail):]] == [fr.data for fr in tail]

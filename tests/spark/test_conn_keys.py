"""Spark's split passes on the native engine against their Python definitions.

``native.walk_range`` must give ``ranges.walk_range``'s walk (pass 1),
``range_stats_batches`` ``range_stats``' result, and ``keyed_batches_native``
``keyed_batches``' rows, for every range of every capture of the corpus (and for ranges
whose end the walk cannot reach): the C code (``reassembly/_conn_keys.c``,
``native.range_batches``) makes the keys and facts of the records it decodes as fast,
and the Python code stays the definition of every other record."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.spark.split import (
    iter_range_frames,
    plan_ranges,
    probe_layout,
    range_batches,
    scan_range,
    verify_chain,
)
from analyzer.spark.task import (
    PACKET_SCHEMA,
    PAYLOAD_HINTS,
    conn_key,
    keyed_batches,
    keyed_batches_native,
    range_stats,
    range_stats_batches,
)
from reassembly import native
from reassembly.limits import Limits
from reassembly.ranges import Window, find_boundary, walk_range

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the engine is not built")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _corpus(shared: Path) -> list[Path]:
    found = [p for p in sorted(SAMPLES.glob("*.pcap*")) if not p.name.endswith((".gz", ".zst"))]
    found += sorted(p for p in (shared / "captures").rglob("*")
                    if p.suffix in (".pcap", ".pcapng") and p.stat().st_size < (8 << 20))
    return found


def _plans(path: Path, split: int):
    layout = probe_layout(str(path), path.stat().st_size)
    if layout is None:
        return None, []
    ranges = plan_ranges(layout, split)
    scans = [scan_range(layout, i, a, b) for i, (a, b) in enumerate(ranges)]
    plans, why = verify_chain(layout, scans, lambda i, a, b, f: scan_range(layout, i, a, b, f))
    return (None, []) if why else (layout, plans)


def _same_stats(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if k in ("rec_frames", "rec_ts"):
            assert a[k].dtype == b[k].dtype and a[k].tolist() == b[k].tolist(), k
        else:
            assert a[k] == b[k], k


def test_split_passes_are_their_definitions(shared: Path) -> None:
    """Every capture of the corpus, cut in 3 ranges and whole: pass 2's facts and pass
    3's keyed rows, with a representative key and the fragment keys of pass 2."""
    limits = Limits()
    checked = 0
    for path in _corpus(shared):
        size = path.stat().st_size
        for split in (max(size // 3, 64), size + 1):
            layout, plans = _plans(path, split)
            if layout is None:
                continue
            for plan in plans:
                problems_a: list[str] = []
                problems_b: list[str] = []
                want = range_stats(iter_range_frames(layout, plan, problems_a), limits, True)
                got = range_stats_batches(range_batches(layout, plan, problems_b), limits,
                                          True)
                assert problems_a == problems_b, path
                _same_stats(want, got)
                rep = {k: b"rep" + k for _, k in want["pairs"][::2]}
                frag_keys = want["frag_keys"]
                for by_pair in (False, True):
                    rows_a = pa.Table.from_batches(
                        list(keyed_batches(iter_range_frames(layout, plan), frag_keys, rep,
                                           by_pair)), schema=PACKET_SCHEMA)
                    rows_b = pa.Table.from_batches(
                        list(keyed_batches_native(range_batches(layout, plan), frag_keys, rep,
                                                  by_pair)), schema=PACKET_SCHEMA)
                    assert rows_a.equals(rows_b), (path, split, plan.index, by_pair)
                checked += 1
    assert checked > 100  # the corpus was found


def test_pass_1_walk_is_its_definition(shared: Path) -> None:
    """``native.walk_range`` (the C walk, then ``ranges.walk_range`` from where it
    stops) against ``ranges.walk_range`` on every range of every capture of the corpus,
    damaged ones included, at range starts found by re-synchronising."""
    checked = 0
    for path in _corpus(shared):
        layout = probe_layout(str(path), path.stat().st_size)
        if layout is None:
            continue
        size = path.stat().st_size
        for split in (97, max(size // 3, 64), size + 1):
            with path.open("rb") as f:
                win = Window(f, size)
                for start, end in plan_ranges(layout, split):
                    first = find_boundary(win, layout.file, start, end)
                    if first is None:
                        continue
                    want = walk_range(win, layout.file, first, end)
                    assert native.walk_range(win, layout.file, first, end) == want, (
                        path, split, start)
                    checked += 1
    assert checked > 1000


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_captures_split_as_their_definitions(tmp_path: Path, data) -> None:
    """A sample (pcap, or pcapng) with random bytes changed (caplens, headers, payloads)
    and cut short, at a random range size: pass 1's walk, and where the chain verifies,
    passes 2 and 3a and their problems, the same on the engine as in Python."""
    raw = bytearray(data.draw(st.sampled_from(_DAMAGE_SOURCES)).read_bytes())
    for _ in range(data.draw(st.integers(0, 6))):
        at = data.draw(st.integers(24, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(len(raw) // 2, len(raw)))]
    path = tmp_path / "damaged.cap"  # (pcap or pcapng, as the source)
    path.write_bytes(bytes(raw))
    split = data.draw(st.integers(64, len(raw) + 1))
    layout = probe_layout(str(path), len(raw))
    assert layout is not None
    with path.open("rb") as f:
        win = Window(f, len(raw))
        for start, end in plan_ranges(layout, split):
            first = find_boundary(win, layout.file, start, end)
            if first is not None:
                assert native.walk_range(win, layout.file, first, end) == walk_range(
                    win, layout.file, first, end)
    layout, plans = _plans(path, split)
    for plan in plans if layout is not None else ():
        problems_a: list[str] = []
        problems_b: list[str] = []
        want = range_stats(iter_range_frames(layout, plan, problems_a), Limits(), True)
        _same_stats(want, range_stats_batches(range_batches(layout, plan, problems_b),
                                              Limits(), True))
        assert problems_a == problems_b
        rows_a = list(keyed_batches(iter_range_frames(layout, plan), want["frag_keys"], {},
                                    False))
        rows_b = list(keyed_batches_native(range_batches(layout, plan), want["frag_keys"], {},
                                           False))
        assert pa.Table.from_batches(rows_a, schema=PACKET_SCHEMA).equals(
            pa.Table.from_batches(rows_b, schema=PACKET_SCHEMA))


_DAMAGE_SOURCES = [SAMPLES / n for n in ("nats-basic.pcap", "stan-basic.pcap",
                                         "pulsar-client.pcap")] + [
    Path(__file__).resolve().parents[1] / "data" / "captures" / "ja4" /
    "chrome-cloudflare-quic-without-secrets.pcapng"]


def test_hints_and_pairs_of_fast_records(tmp_path: Path) -> None:
    """Exact facts of a crafted capture: the C path's pairs and hints (a STAN subject in a
    TCP payload, a QUIC long header in a UDP one) are conn_key's."""
    frames = [
        _eth_ipv4_tcp(b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 40000, 4222,
                      b"PUB _STAN.pub.x 2\r\nhi\r\n"),
        _eth_ipv4_tcp(b"\x0a\x00\x00\x02", b"\x0a\x00\x00\x01", 4222, 40000, b"+OK\r\n"),
        _eth_ipv4_udp(b"\x0a\x00\x00\x03", b"\x0a\x00\x00\x04", 5000, 443,
                      b"\xc3" + b"\x00" * 20),  # (a QUIC long header's first byte)
    ]
    path = tmp_path / "hints.pcap"
    _write_pcap(path, frames)
    layout, plans = _plans(path, path.stat().st_size + 1)
    assert layout is not None
    batches = list(range_batches(layout, plans[0]))
    assert [b.kinds() for b in batches] == [bytes([6, 6, 17])]  # all fast: the C path
    got = range_stats_batches(batches, Limits(), True)
    _same_stats(range_stats(iter_range_frames(layout, plans[0]), Limits(), True), got)
    tcp = conn_key(1, frames[0]).key
    assert tcp == b"\x06" + b"\x0a\x00\x00\x01\x9c\x40" + b"\x0a\x00\x00\x02\x10\x7e"
    assert got["hints"] == sorted([b"\x0a\x00\x00\x01\x9c\x40", b"\x0a\x00\x00\x02\x10\x7e",
                                   b"\x0a\x00\x00\x03\x13\x88", b"\x0a\x00\x00\x04\x01\xbb"])
    assert (b"\x0a\x00\x00\x01\x9c\x40", tcp) in got["pairs"]
    assert len(got["pairs"]) == 4
    assert PAYLOAD_HINTS[0] == b"_STAN."
    rows = pa.Table.from_batches(list(keyed_batches_native(batches, {}, {}, False)))
    assert rows.column("key").to_pylist() == [tcp, tcp, conn_key(1, frames[2]).key]
    assert rows.column("frame").to_pylist() == [1, 2, 3]


def test_a_range_cut_short_is_read_by_the_reader(tmp_path: Path) -> None:
    """A range whose last record the file no longer holds: the walk stops, the range
    reader reads on from there and its problem is the one ``iter_range_frames`` says."""
    frames = [_eth_ipv4_tcp(b"\x01\x01\x01\x01", b"\x02\x02\x02\x02", 1, 2, b"x" * n)
              for n in (10, 20, 30)]
    path = tmp_path / "cut.pcap"
    _write_pcap(path, frames)
    layout, plans = _plans(path, path.stat().st_size + 1)
    assert layout is not None
    path.write_bytes(path.read_bytes()[:-5])  # the file changed since pass 1
    problems_a: list[str] = []
    problems_b: list[str] = []
    want = [tuple(f) for f in iter_range_frames(layout, plans[0], problems_a)]
    got = [b.frame(i) for b in range_batches(layout, plans[0], problems_b)
           for i in range(len(b))]
    assert got == want and len(got) == 2
    assert problems_b == problems_a and problems_a


# ---------------------------------------------------------------------------- helpers


def _ipv4(src: bytes, dst: bytes, proto: int, body: bytes) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 1, 0, 64, proto, 0, src,
                       dst) + body


def _eth_ipv4_tcp(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, 0x18, 65535, 0, 0) + data
    return b"\x00" * 12 + b"\x08\x00" + _ipv4(src, dst, 6, tcp)


def _eth_ipv4_udp(src: bytes, dst: bytes, sport: int, dport: int, data: bytes) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    return b"\x00" * 12 + b"\x08\x00" + _ipv4(src, dst, 17, udp)


def _write_pcap(path: Path, frames: list[bytes]) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, frame in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))

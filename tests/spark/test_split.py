"""Byte-range splitting without Spark: the frames of the ranges are the reader's frames."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from analyzer.spark.split import (
    iter_range_frames,
    link_types,
    plan_ranges,
    probe_layout,
    scan_range,
    verify_chain,
)
from reassembly.capture import open_capture

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

CAPTURES = [
    "arkime/socks5-http-302-frag.pcap",
    "arkime/tcpseq_synthetic.pcap",
    "spicy-nats/nats-storage.pcap",
    "ntop-nDPI/nfsv3.pcap",  # big-endian
    "deepflow/nats/nats-nrpc1.pcap",  # modified (Kuznetzov) records
    "zeek/http/get-to-ssh-server.pcap",  # nanosecond pcap
    "ntop-nDPI/fuzz-2021-10-13.pcap",  # version 2.0 (swapped caplen/len), damaged
    "zeek/pcapng-multi-interface.pcapng",
    "zeek/ldap/gap-data-missing.pcapng",  # 126 interfaces
    "pcapng-test-generator/output_be/basic/test006.pcapng",
    "pcapng-test-generator/output_le/advanced/test102.pcapng",  # SPBs: read whole
    "suricata-verify/bug-6875-01/fuzz.pcap",  # absurd caplen: damage
]


def split_frames(path: Path, split: int):
    layout = probe_layout(str(path), path.stat().st_size)
    assert layout is not None
    ranges = plan_ranges(layout, split)
    scans = [scan_range(layout, i, a, b) for i, (a, b) in enumerate(ranges)]
    plans, why = verify_chain(layout, scans, lambda i, a, b, f: scan_range(layout, i, a, b, f))
    if why:
        return None, why, layout, scans
    problems: list[str] = []
    frames = [f for p in plans for f in iter_range_frames(layout, p, problems)]
    assert not problems
    return frames, len(plans), layout, scans


def _captures(shared: Path):
    return [SAMPLES / "nats-basic.pcap", *(shared / "captures" / c for c in CAPTURES)]


@pytest.mark.parametrize("split", [97, 600, 5000])
def test_ranges_yield_the_readers_frames(shared: Path, split: int) -> None:
    for path in _captures(shared):
        if not path.exists():
            pytest.skip(f"{path} missing")
        with open_capture(path) as reader:
            expected = list(reader)
            damage = reader.info.damage
            lts = reader.info.link_types
        got, how, layout, scans = split_frames(path, split)
        if got is None:  # the split path refuses: only for damage or SPBs across ranges
            assert damage or "simple packet" in how, (path, how)
            continue
        assert not damage, path
        assert got == expected, (path, split)
        assert link_types(layout, scans) == lts


def test_false_boundaries_are_repaired(tmp_path: Path) -> None:
    """Packet bytes that look exactly like a chain of record headers fool the
    re-synchronisation; the chain check re-scans from the true boundary."""
    hdr = struct.Struct("<IIII")
    ts = 1_700_000_000
    fake = b"".join(hdr.pack(ts, 0, 8, 8) + b"\x00" * 8 for _ in range(12))
    path = tmp_path / "tricky.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for i in range(30):
            body = (b"\x11" * 13 + fake) if i % 3 == 0 else b"\x22" * (40 + i)
            f.write(hdr.pack(ts, i, len(body), len(body)) + body)
    with open_capture(path) as reader:
        expected = list(reader)
    for split in (50, 123, 333, 1000):
        got, _n, _l, _s = split_frames(path, split)
        assert got == expected, split


def test_compressed_and_foreign_files_are_not_split(tmp_path: Path) -> None:
    src = SAMPLES / "nats-basic.pcap"
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert probe_layout(str(gz), gz.stat().st_size) is None
    other = tmp_path / "x.bin"
    other.write_bytes(b"hello world, not a capture" * 10)
    assert probe_layout(str(other), other.stat().st_size) is None

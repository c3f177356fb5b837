"""Acceptance tests for the capture-file readers (reassembly.capture / pcap / pcapng).

Real files come from the shared capture collection and are checked against
expected.json; hand-built files (struct-packed in the tests) pin exact timestamps,
interfaces, options and the damage behaviour at every truncation point.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import struct
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reassembly.capture as capture_mod
from reassembly.capture import CaptureFormatError, Frame, open_capture
from tests.conftest import SHARED

CAPTURES = SHARED / "captures"
EXPECTED_PATH = CAPTURES / "expected.json"
EXPECTED: dict = json.loads(EXPECTED_PATH.read_text()) if EXPECTED_PATH.is_file() else {}

LINKTYPE_BY_NAME = {
    "NULL": 0,
    "ETHERNET": 1,
    "EN10MB": 1,
    "PPP": 9,
    "RAW": 101,
    "LOOP": 108,
    "LINUX_SLL": 113,
    "IPV4": 228,
    "IPV6": 229,
    "NFLOG": 239,
    "ETHERNET_MPACKET": 274,
    "LINUX_SLL2": 276,
}

_CAPTURE_MAGICS = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x34\xcd\xb2\xa1",
    b"\xa1\xb2\xcd\x34",
    b"\x0a\x0d\x0d\x0a",
    b"\x28\xb5\x2f\xfd",
)


def _is_capture(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(4)
    return head in _CAPTURE_MAGICS or head[:2] == b"\x1f\x8b"


def _capture_files() -> list[str]:
    if not CAPTURES.is_dir():
        return []
    found = []
    for root, _dirs, files in os.walk(CAPTURES):
        for name in files:
            p = Path(root) / name
            if _is_capture(p):
                found.append(p.relative_to(CAPTURES).as_posix())
    return sorted(found)


CAPTURE_FILES = _capture_files()


def read_all(path) -> tuple[list[Frame], capture_mod.CaptureInfo, int]:
    with open_capture(path) as r:
        frames = list(r)
        return frames, r.info, r.bytes_read


def _unique(seq):
    out = []
    for x in seq:
        if x not in out:
            out.append(x)
    return out


def _file_format(info) -> dict:
    """Our info expressed the way expected.json writes ``file_format``."""
    orders = set(info.section_byte_orders)
    ff = {
        "type": "modified-pcap" if info.variant == "modified" else info.format,
        "byte_order": orders.pop() if len(orders) == 1 else "mixed",
    }
    res = set(info.interface_ts_resolutions)
    if res:
        ff["ts_resolution"] = res.pop() if len(res) == 1 else "mixed"
    return ff


# --------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------


def pcap_file(
    records,
    *,
    e="<",
    magic=0xA1B2C3D4,
    version=(2, 4),
    snaplen=65535,
    network=1,
    modified=False,
) -> bytes:
    out = [struct.pack(e + "IHHiIII", magic, version[0], version[1], 0, 0, snaplen, network)]
    for sec, frac, data, orig in records:
        out.append(struct.pack(e + "IIII", sec, frac, len(data), orig))
        if modified:
            out.append(struct.pack(e + "IHBB", 3, 0x0800, 0, 0))
        out.append(data)
    return b"".join(out)


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def block(e: str, btype: int, body: bytes) -> bytes:
    body = _pad(body)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def shb(e: str) -> bytes:
    return block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def opt(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + _pad(value)


def idb(e: str, linktype: int, snaplen: int = 0, opts: bytes = b"") -> bytes:
    if opts:
        opts += struct.pack(e + "HH", 0, 0)
    return block(e, 1, struct.pack(e + "HHI", linktype, 0, snaplen) + opts)


def epb(e: str, iface: int, units: int, data: bytes, orig: int | None = None) -> bytes:
    hdr = struct.pack(
        e + "IIIII",
        iface,
        units >> 32,
        units & 0xFFFFFFFF,
        len(data),
        len(data) if orig is None else orig,
    )
    return block(e, 6, hdr + data)


def spb(e: str, data: bytes, orig: int | None = None) -> bytes:
    return block(e, 3, struct.pack(e + "I", len(data) if orig is None else orig) + data)


def dsb(e: str, stype: int, data: bytes) -> bytes:
    return block(e, 0x0A, struct.pack(e + "II", stype, len(data)) + data)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# --------------------------------------------------------------------------------------
# the shared capture collection vs expected.json
# --------------------------------------------------------------------------------------


def test_every_capture_file_has_an_expectation():
    assert len(CAPTURE_FILES) == 140
    assert set(CAPTURE_FILES) == set(EXPECTED)


@pytest.mark.parametrize("rel", CAPTURE_FILES)
def test_capture_matches_expected(rel):
    exp = EXPECTED[rel]
    path = CAPTURES / rel
    frames, info, bytes_read = read_all(path)

    assert len(frames) == exp["packets"] == info.packets
    assert [f.number for f in frames] == list(range(1, len(frames) + 1))
    assert _unique(info.link_types) == [LINKTYPE_BY_NAME[n] for n in exp["link_types"]]
    assert _file_format(info) == exp["file_format"]
    if exp.get("damaged"):
        assert info.damage, "damaged file must report damage"
        assert info.damage[-1].frame == exp["packets"]
    else:
        assert info.damage == []
    raw = path.read_bytes()
    assert info.sha256 == hashlib.sha256(raw).hexdigest()
    assert info.file_size == len(raw) == bytes_read
    assert info.compression == "none"
    for f in frames:
        assert f.linktype == info.link_types[f.interface]
        assert isinstance(f.data, bytes)


@pytest.mark.parametrize(
    "rel",
    sorted(r for r in CAPTURE_FILES if r.startswith("pcapng-test-generator/output_le/")),
)
def test_pcapng_generator_le_and_be_agree(rel):
    le_frames, le_info, _ = read_all(CAPTURES / rel)
    be_rel = rel.replace("/output_le/", "/output_be/")
    be_frames, be_info, _ = read_all(CAPTURES / be_rel)
    assert len(le_frames) == EXPECTED[rel]["packets"] == EXPECTED[be_rel]["packets"]
    assert le_frames == be_frames
    assert le_info.link_types == be_info.link_types
    assert le_info.unknown_blocks == be_info.unknown_blocks == 0


def test_pcapng_generator_details():
    base = CAPTURES / "pcapng-test-generator/output_le"
    # test202: three sections (LE, BE, LE), five interfaces numbered globally
    frames, info, _ = read_all(base / "difficult/test202.pcapng")
    assert info.section_byte_orders == ["little-endian", "big-endian", "little-endian"]
    assert info.byte_order == "little-endian"
    assert info.link_types == [1, 0, 1, 1, 0]
    assert [f.interface for f in frames] == [0, 0, 1, 2, 2, 2, 2, 4]
    # test012: SPB snaplen truncation (IDB snaplen 315)
    frames, info, _ = read_all(base / "basic/test012.pcapng")
    assert [(len(f.data), f.orig_len) for f in frames] == [
        (314, 314),
        (315, 342),
        (314, 314),
        (315, 342),
    ]
    # number of IDBs as listed in the README
    for rel, n_idb in [
        ("advanced/test100.pcapng", 3),
        ("difficult/test201.pcapng", 5),
        ("basic/test014.pcapng", 3),
        ("basic/test002.pcapng", 0),
        ("basic/test017.pcapng", 0),
    ]:
        assert len(read_all(base / rel)[1].link_types) == n_idb, rel


def test_damaged_pcap_oversized_caplen():
    frames, info, _ = read_all(CAPTURES / "suricata-verify/bug-6875-01/fuzz.pcap")
    assert len(frames) == 1 and len(frames[0].data) == 188
    assert len(info.damage) == 1
    d = info.damage[0]
    assert d.offset == 228 and d.frame == 1
    assert "1409179648" in d.reason


def test_damaged_pcap_old_version_swapped_lengths():
    frames, info, _ = read_all(CAPTURES / "ntop-nDPI/fuzz-2021-10-13.pcap")
    assert len(frames) == 1
    f = frames[0]
    assert (len(f.data), f.orig_len, f.linktype) == (197, 524501, 0)
    assert info.ts_resolution == "ns"
    assert len(info.damage) == 1
    assert info.damage[0].frame == 1
    assert info.damage[0].offset == 239 - 2
    assert "truncated" in info.damage[0].reason


@pytest.mark.parametrize(
    "rel,caplen,orig",
    [
        ("zeek/trunc/trunc-hdr.pcap", 8, 78),
        ("zeek/udp-contents-truncated-oob.pcap", 42, 65549),
        ("zeek/trunc/ip4-trunc.pcap", 20, 46),
        ("zeek/trunc/ip6-trunc.pcap", 48, 74),
    ],
)
def test_snaplen_truncated_frames(rel, caplen, orig):
    frames, info, _ = read_all(CAPTURES / rel)
    assert len(frames) == 1 and info.damage == []
    assert len(frames[0].data) == caplen
    if orig is not None:
        assert frames[0].orig_len == orig


def test_modified_pcap_variant():
    frames, info, _ = read_all(CAPTURES / "deepflow/nats/nats-nrpc1.pcap")
    assert (info.format, info.variant, info.ts_resolution) == ("pcap", "modified", "us")
    assert len(frames) == 22
    # every frame is an Ethernet/IPv4 frame: the 8 extra header bytes were skipped
    assert all(f.data[12:14] == b"\x08\x00" for f in frames)


def test_pcapng_with_pcap_extension_detected_by_magic():
    frames, info, _ = read_all(CAPTURES / "ntop-nDPI/quic_0RTT.pcap")
    assert info.format == "pcapng" and len(frames) == 17


def test_multi_interface_pcapng():
    frames, info, _ = read_all(CAPTURES / "zeek/pcapng-multi-interface.pcapng")
    assert [f.interface for f in frames] == [0, 0, 1, 1, 1, 1]
    assert info.link_types == [1, 1]
    frames, info, _ = read_all(CAPTURES / "zeek/ldap/gap-data-missing.pcapng")
    assert len(info.link_types) == 126
    assert {f.interface for f in frames} == {48}


def test_decryption_secrets_block():
    frames, info, _ = read_all(CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.pcapng")
    keylog = (CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.keylog.txt").read_bytes()
    assert info.secrets == [(0x544C534B, keylog)]
    frames2, info2, _ = read_all(CAPTURES / "ja4/chrome-cloudflare-quic-without-secrets.pcapng")
    assert info2.secrets == []
    assert frames2 == frames


def test_decryption_secrets_are_released_once_the_quic_layer_has_them():
    from reassembly.engine import capture_events

    path = CAPTURES / "ja4/chrome-cloudflare-quic-with-secrets.pcapng"
    with open_capture(path) as reader:
        kinds = [type(e).__name__ for e in capture_events(reader)]
        assert reader.info.secrets == [(0x544C534B, b"")]
    # the keys were used: 1-RTT streams decrypted (23 StreamData and 2 anomalies without)
    assert (kinds.count("StreamData"), kinds.count("Anomaly")) == (32, 0)


@pytest.mark.parametrize(
    "rel",
    [
        "ja4/chrome-cloudflare-quic-with-secrets.pcapng",
        "ntop-nDPI/nfsv3.pcap",
        "deepflow/nats/nats-nrpc2.pcap",
        "pcapng-test-generator/output_be/difficult/test202.pcapng",
    ],
)
def test_compressed_copies_yield_identical_frames(tmp_path, rel):
    raw = (CAPTURES / rel).read_bytes()
    frames, info, _ = read_all(CAPTURES / rel)
    for kind, data in [
        ("gzip", gzip.compress(raw)),
        ("zstd", zstandard.ZstdCompressor(level=3).compress(raw)),
    ]:
        p = write(tmp_path, f"copy.{kind}.bin", data)
        cframes, cinfo, cread = read_all(p)
        assert cframes == frames
        assert cinfo.compression == kind
        assert cinfo.secrets == info.secrets
        assert cinfo.link_types == info.link_types
        assert cinfo.damage == []
        assert cinfo.sha256 == hashlib.sha256(data).hexdigest()
        assert cinfo.file_size == cread == len(data)


@pytest.mark.parametrize("rel", CAPTURE_FILES[::7])
def test_tiny_read_chunks_give_same_frames(monkeypatch, rel):
    frames, info, _ = read_all(CAPTURES / rel)
    monkeypatch.setattr(capture_mod, "CHUNK", 7)
    small, sinfo, _ = read_all(CAPTURES / rel)
    assert small == frames
    assert sinfo.damage == info.damage
    assert sinfo.secrets == info.secrets


# --------------------------------------------------------------------------------------
# hand-built pcap
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("e", ["<", ">"])
@pytest.mark.parametrize("magic,mult,res", [(0xA1B2C3D4, 1000, "us"), (0xA1B23C4D, 1, "ns")])
def test_pcap_timestamps_both_orders(tmp_path, e, magic, mult, res):
    recs = [
        (1_700_000_000, 123_456, b"\x01" * 60, 60),
        (1_700_000_001, 999_999, b"\x02" * 14, 1514),
        (0, 0, b"", 0),
        (4_294_967_295, 7, b"\x03" * 3, 3),
    ]
    p = write(tmp_path, "t.pcap", pcap_file(recs, e=e, magic=magic, network=0x1C000071))
    frames, info, _ = read_all(p)
    assert info.format == "pcap" and info.variant == "standard"
    assert info.byte_order == ("little-endian" if e == "<" else "big-endian")
    assert info.ts_resolution == res
    assert info.link_types == [113]  # upper (FCS) bits of the link-type field dropped
    assert frames == [
        Frame(1, 1_700_000_000 * 10**9 + 123_456 * mult, 113, b"\x01" * 60, 60, 0),
        Frame(2, 1_700_000_001 * 10**9 + 999_999 * mult, 113, b"\x02" * 14, 1514, 0),
        Frame(3, 0, 113, b"", 0, 0),
        Frame(4, 4_294_967_295 * 10**9 + 7 * mult, 113, b"\x03" * 3, 3, 0),
    ]
    assert info.damage == []


@pytest.mark.parametrize("e", ["<", ">"])
def test_pcap_modified_variant_handbuilt(tmp_path, e):
    recs = [(10, 20, b"abcdef", 6), (11, 0, b"xyz", 100)]
    p = write(tmp_path, "m.pcap", pcap_file(recs, e=e, magic=0xA1B2CD34, modified=True))
    frames, info, _ = read_all(p)
    assert info.variant == "modified" and info.ts_resolution == "us"
    assert frames == [
        Frame(1, 10 * 10**9 + 20_000, 1, b"abcdef", 6, 0),
        Frame(2, 11 * 10**9, 1, b"xyz", 100, 0),
    ]


def test_pcap_old_version_swaps_caplen_and_len(tmp_path):
    # version 2.2: the header stores (len, caplen); write it that way
    hdr = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 2, 0, 0, 65535, 1)
    rec = struct.pack("<IIII", 5, 6, 1000, 4) + b"wxyz"
    frames, info, _ = read_all(write(tmp_path, "old.pcap", hdr + rec))
    assert frames == [Frame(1, 5_000_006_000, 1, b"wxyz", 1000, 0)]
    assert info.damage == []


def test_pcap_bad_fraction_does_not_crash(tmp_path):
    recs = [(1, 0xFFFFFFFF, b"a", 1)]
    frames, info, _ = read_all(write(tmp_path, "b.pcap", pcap_file(recs)))
    assert frames[0].ts_ns == 10**9 + 0xFFFFFFFF * 1000
    assert info.damage == []


def test_pcap_caplen_limit(tmp_path):
    good = (1, 0, b"g" * 10, 10)
    data = pcap_file([good], snaplen=0)
    data += struct.pack("<IIII", 2, 0, 262145, 262145) + b"\0" * 262145
    frames, info, _ = read_all(write(tmp_path, "big.pcap", data))
    assert len(frames) == 1
    assert len(info.damage) == 1
    assert info.damage[0].offset == 24 + 16 + 10
    assert info.damage[0].frame == 1
    assert "262145" in info.damage[0].reason
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    # a snaplen above 262144 raises the limit accordingly
    data2 = pcap_file([good, (2, 0, b"h" * 300000, 300000)], snaplen=300000)
    frames2, info2, _ = read_all(write(tmp_path, "big2.pcap", data2))
    assert len(frames2) == 2 and info2.damage == []


def test_large_pcap_across_many_buffers(tmp_path):
    recs = [(i, i % 1_000_000, bytes([i % 251]) * (1 + (i * 37) % 1500), 1600) for i in range(3000)]
    data = pcap_file(recs)
    assert len(data) > 2 * capture_mod.CHUNK
    frames, info, _ = read_all(write(tmp_path, "large.pcap", data))
    assert len(frames) == 3000
    for f, (sec, usec, payload, orig) in zip(frames, recs, strict=True):
        assert (f.ts_ns, f.data, f.orig_len) == (sec * 10**9 + usec * 1000, payload, orig)


# --------------------------------------------------------------------------------------
# hand-built pcapng
# --------------------------------------------------------------------------------------

TLSK = 0x544C534B
KEYLOG = b"CLIENT_RANDOM 00112233 44556677\n"


def _two_section_pcapng() -> tuple[list[bytes], list[Frame]]:
    """Blocks of a two-section file (LE then BE) and the frames it must yield."""
    le, be = "<", ">"
    units_ns = 1_700_000_000_123_456_789
    units_b20 = (5 << 20) + (1 << 19)  # 5.5 s in 2^-20 units
    blocks = [
        shb(le),
        idb(le, 1, 0, opt(le, 9, bytes([9])) + opt(le, 14, struct.pack("<q", 100))),
        idb(le, 0, 0, opt(le, 9, bytes([0x80 | 20])) + opt(le, 2, b"lo0")),
        block(le, 4, b"\x00" * 8),  # NRB (skipped)
        epb(le, 0, units_ns, b"\xaa" * 5, 60),
        dsb(le, TLSK, KEYLOG),
        block(le, 0x80000001, b"local use"),  # unknown type: skipped and counted
        epb(le, 1, units_b20, b"\xbb" * 8),
        block(le, 5, struct.pack("<III", 1, 0, 0)),  # ISB (skipped)
        shb(be),
        idb(be, 101, 4),  # default resolution 10^-6, snaplen 4
        spb(be, b"0123456789"),  # 10 bytes on the wire, captured 4 (snaplen)
        epb(be, 0, 123, b"\xcc" * 3),
        idb(be, 228, 0, opt(be, 9, bytes([3])) + opt(be, 14, struct.pack(">q", -2))),
        epb(be, 1, 2500, b"\xdd"),
    ]
    ts0 = units_ns + 100 * 10**9
    frames = [
        Frame(1, ts0, 1, b"\xaa" * 5, 60, 0),
        Frame(2, 5_500_000_000, 0, b"\xbb" * 8, 8, 1),
        Frame(3, 5_500_000_000, 101, b"0123", 10, 2),  # SPB: previous frame's ts
        Frame(4, 123_000, 101, b"\xcc" * 3, 3, 2),
        Frame(5, 2_500_000_000 - 2 * 10**9, 228, b"\xdd", 1, 3),
    ]
    return blocks, frames


def test_pcapng_two_sections_options_and_blocks(tmp_path):
    blocks, expected = _two_section_pcapng()
    data = b"".join(blocks)
    frames, info, read = read_all(write(tmp_path, "two.pcapng", data))
    assert frames == expected
    assert info.format == "pcapng" and info.variant == ""
    assert info.byte_order == "little-endian"
    assert info.ts_resolution == "per-interface"
    assert info.section_byte_orders == ["little-endian", "big-endian"]
    assert info.link_types == [1, 0, 101, 228]
    assert info.interface_ts_resolutions == ["ns", "2^-20", "us", "ms"]
    assert info.secrets == [(TLSK, KEYLOG)]
    assert info.unknown_blocks == 1
    assert info.damage == []
    assert info.packets == 5
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert read == len(data) == info.file_size


def test_pcapng_obsolete_packet_block(tmp_path):
    e = "<"
    pb = block(e, 2, struct.pack(e + "HHIIII", 0, 0, 0, 7, 2, 9) + b"hi")
    data = shb(e) + idb(e, 1) + pb
    frames, info, _ = read_all(write(tmp_path, "pb.pcapng", data))
    assert frames == [Frame(1, 7000, 1, b"hi", 9, 0)]


def test_pcapng_undefined_interface_is_skipped_not_fatal(tmp_path):
    e = "<"
    data = shb(e) + idb(e, 1) + epb(e, 3, 1, b"x") + epb(e, 0, 2, b"y")
    frames, info, _ = read_all(write(tmp_path, "undef.pcapng", data))
    assert frames == [Frame(1, 2000, 1, b"y", 1, 0)]
    assert len(info.damage) == 1 and "interface 3" in info.damage[0].reason


def test_pcapng_time_outside_int64_nanoseconds_takes_the_previous_frames(tmp_path):
    e = "<"
    seconds = opt(e, 9, b"\x00")  # if_tsresol 10^0: a u64 of seconds
    data = (shb(e) + idb(e, 1, 0, seconds + opt(e, 14, struct.pack("<q", -5)))
            + epb(e, 0, 7, b"a") + epb(e, 0, 10**12, b"b") + epb(e, 0, 9, b"c"))
    frames, info, _ = read_all(write(tmp_path, "late.pcapng", data))
    assert [(f.number, f.ts_ns, f.data) for f in frames] == [
        (1, 2_000_000_000, b"a"), (2, 2_000_000_000, b"b"), (3, 4_000_000_000, b"c")]
    (d,) = info.damage
    assert d.frame == 1 and "timestamp 1000000000000" in d.reason and "frame 2" in d.reason


def test_pcapng_non_fatal_damage_entries_are_bounded(tmp_path):
    e = "<"
    many = capture_mod.MAX_NOTED_DAMAGE + 7
    data = shb(e) + idb(e, 1) + epb(e, 3, 1, b"x") * many + epb(e, 0, 2, b"y")
    frames, info, _ = read_all(write(tmp_path, "undef.pcapng", data))
    assert frames == [Frame(1, 2000, 1, b"y", 1, 0)]
    assert len(info.damage) == capture_mod.MAX_NOTED_DAMAGE + 1
    assert all("interface 3" in d.reason for d in info.damage[:-1])
    assert info.damage[-1].reason.startswith("7 more non-fatal problems")


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda b: b[:4] + struct.pack("<I", 30) + b[8:], "invalid total length"),
        (lambda b: b[:-4] + struct.pack("<I", 999), "trailing copy"),
        (lambda b: b[:4] + struct.pack("<I", 8) + b[8:], "invalid total length"),
        (lambda b: b[:20] + struct.pack("<I", 10_000) + b[24:], "exceeds block length"),
    ],
)
def test_pcapng_corrupt_block_is_damage(tmp_path, mutate, reason):
    e = "<"
    head = shb(e) + idb(e, 1) + epb(e, 0, 1, b"ok")
    bad = mutate(epb(e, 0, 2, b"bad!"))
    data = head + bad + epb(e, 0, 3, b"never")
    frames, info, _ = read_all(write(tmp_path, "corrupt.pcapng", data))
    assert frames == [Frame(1, 1000, 1, b"ok", 2, 0)]
    assert len(info.damage) == 1
    assert info.damage[0].offset == len(head)
    assert info.damage[0].frame == 1
    assert reason in info.damage[0].reason
    assert info.sha256 == hashlib.sha256(data).hexdigest()


def test_pcapng_bad_byte_order_magic(tmp_path):
    data = shb("<")
    data = data[:8] + b"\x01\x02\x03\x04" + data[12:]
    frames, info, _ = read_all(write(tmp_path, "bom.pcapng", data))
    assert frames == [] and info.byte_order == "unknown"
    assert info.damage[0].offset == 0 and "byte-order" in info.damage[0].reason


# --------------------------------------------------------------------------------------
# truncation, fuzzing, errors, compression corner cases
# --------------------------------------------------------------------------------------


def _boundaries(pieces: list[bytes]) -> list[int]:
    ends, total = [], 0
    for p in pieces:
        total += len(p)
        ends.append(total)
    return ends


def _check_every_cut(tmp_path, data: bytes, frame_ends: list[int], boundaries: set[int]):
    full, _, _ = read_all(write(tmp_path, "full.bin", data))
    assert len(full) == len(frame_ends)
    p = tmp_path / "cut.bin"
    for cut in range(len(data) + 1):
        p.write_bytes(data[:cut])
        if cut < 4:
            with pytest.raises(CaptureFormatError):
                open_capture(p)
            continue
        frames, info, _ = read_all(p)
        n_expected = sum(1 for end in frame_ends if end <= cut)
        assert frames == full[:n_expected], cut
        assert info.packets == n_expected
        if cut in boundaries:
            assert info.damage == [], cut
        else:
            assert len(info.damage) == 1, cut
            assert info.damage[0].frame == (n_expected or None)
        assert info.sha256 == hashlib.sha256(data[:cut]).hexdigest()


@pytest.mark.parametrize("modified", [False, True])
def test_pcap_truncation_at_every_byte(tmp_path, modified):
    recs = [(1, 2, b"A" * 9, 9), (3, 4, b"", 5), (5, 6, b"B" * 17, 40)]
    magic = 0xA1B2CD34 if modified else 0xA1B2C3D4
    data = pcap_file(recs, magic=magic, modified=modified)
    hlen = 24 if modified else 16
    ends, total = [], 24
    for r in recs:
        total += hlen + len(r[2])
        ends.append(total)
    _check_every_cut(tmp_path, data, ends, {24, *ends})


def test_pcapng_truncation_at_every_byte(tmp_path):
    blocks, expected = _two_section_pcapng()
    ends = _boundaries(blocks)
    packet_ends = [
        end
        for b, end in zip(blocks, ends, strict=True)
        if b[:4] in (b"\x06\x00\x00\x00", b"\x00\x00\x00\x06", b"\x00\x00\x00\x03")
    ]
    assert len(packet_ends) == len(expected)
    _check_every_cut(tmp_path, b"".join(blocks), packet_ends, set(ends))


def test_truncated_gzip_yields_prefix(tmp_path):
    recs = [(i, 0, bytes([i]) * 200, 200) for i in range(200)]
    raw = pcap_file(recs)
    comp = gzip.compress(raw)
    full, _, _ = read_all(write(tmp_path, "f.gz", comp))
    assert len(full) == 200
    for cut in (len(comp) // 3, len(comp) // 2, len(comp) - 9, len(comp) - 1):
        frames, info, _ = read_all(write(tmp_path, "t.gz", comp[:cut]))
        assert frames == full[: len(frames)]
        assert info.damage, cut
        assert info.sha256 == hashlib.sha256(comp[:cut]).hexdigest()
    # zstd cut short: 1000 records (> 128 KiB, several zstd blocks), cut in the middle
    rnd = random.Random(1)
    recs = [(i, 0, rnd.randbytes(200), 200) for i in range(1000)]
    raw = pcap_file(recs)
    full, _, _ = read_all(write(tmp_path, "f.pcap", raw))
    zcomp = zstandard.ZstdCompressor().compress(raw)
    frames, info, _ = read_all(write(tmp_path, "t.zst", zcomp[:-1000]))  # in block 2
    assert 0 < len(frames) < 1000
    assert frames == full[: len(frames)]
    assert len(info.damage) == 1 and "inside a frame" in info.damage[0].reason
    # cut inside the first block: nothing decodable, so it cannot be recognised at all
    with pytest.raises(CaptureFormatError, match="inside a frame"):
        open_capture(write(tmp_path, "t2.zst", zcomp[:100]))


def test_corrupt_gzip_body_is_damage_not_exception(tmp_path):
    raw = pcap_file([(i, 0, b"x" * 100, 100) for i in range(50)])
    comp = bytearray(gzip.compress(raw))
    comp[len(comp) // 2] ^= 0xFF
    frames, info, _ = read_all(write(tmp_path, "c.gz", bytes(comp)))
    assert info.damage
    assert frames == read_all(write(tmp_path, "ok.pcap", raw))[0][: len(frames)]


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty"),
        (b"\xd4\xc3", "2 byte"),
        (b"Description: not a capture\n", "unknown magic"),
        (gzip.compress(b""), "empty gzip"),
        (gzip.compress(b"hello world"), "inside gzip"),
    ],
)
def test_not_a_capture(tmp_path, content, needle):
    p = write(tmp_path, "x.pcap", content)
    with pytest.raises(CaptureFormatError, match=needle):
        open_capture(p)


def test_reader_protocol(tmp_path):
    data = pcap_file([(1, 0, b"a", 1), (2, 0, b"b", 1)])
    p = write(tmp_path, "r.pcap", data)
    r = open_capture(os.fspath(p))
    assert r.info.packets == 0 and r.info.sha256 == "" and r.info.link_types == [1]
    it = iter(r)
    first = next(it)
    assert first.number == 1 and r.info.packets == 1
    assert r.bytes_read == len(data)
    assert list(r) == [Frame(2, 2 * 10**9, 1, b"b", 1, 0)]  # same iterator continues
    assert r.info.sha256 == hashlib.sha256(data).hexdigest()
    r.close()
    r.close()  # idempotent


_SEED_PCAP = pcap_file([(1, 2, b"A" * 9, 9), (3, 4, b"B" * 20, 20)])
_SEED_PCAPNG = b"".join(_two_section_pcapng()[0])


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.sampled_from([_SEED_PCAP, _SEED_PCAPNG]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
    tail=st.binary(max_size=64),
)
def test_mutated_files_never_raise(tmp_path, seed, edits, tail):
    data = bytearray(seed)
    for where, value in edits:
        data[4 + where % (len(data) - 4)] = value  # keep the magic so it opens
    data += tail
    p = tmp_path / "fuzz.bin"
    p.write_bytes(bytes(data))
    frames, info, _ = read_all(p)
    assert info.packets == len(frames)
    assert [f.number for f in frames] == list(range(1, len(frames) + 1))
    assert info.sha256 == hashlib.sha256(bytes(data)).hexdigest()

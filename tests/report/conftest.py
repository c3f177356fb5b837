"""Fixtures for the summary / transcript / ladder / report tests: sample captures, their
ground truth, a damaged copy of nats-basic (one data packet removed, so the dataset
has real anomalies to show) and datasets dissected from them once per session."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def truth(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.truth.json").read_text())


def drop_packet(src: Path, dst: Path, needle: bytes) -> int:
    """Copy a classic little-endian pcap of Ethernet/IPv4/TCP frames without the first
    frame whose TCP payload contains ``needle``; returns the 1-based frame dropped."""
    data = src.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1", "expects a little-endian classic pcap"
    out = bytearray(data[:24])
    pos, frame, dropped = 24, 0, 0
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        rec = data[pos : pos + 16 + incl]
        frame += 1
        pkt = rec[16:]
        ihl = (pkt[14] & 0x0F) * 4
        tcp = 14 + ihl
        payload = pkt[tcp + (pkt[tcp + 12] >> 4) * 4 :]
        if not dropped and needle in payload:
            dropped = frame
        else:
            out += rec
        pos += 16 + incl
    assert dropped, f"no frame carries {needle!r}"
    dst.write_bytes(bytes(out))
    return dropped


@pytest.fixture(scope="session")
def nats_truth() -> dict:
    return truth("nats-basic")


def corrupt(data: bytes, needle: bytes, replacement: bytes, last: bool = False) -> bytes:
    """Overwrite one occurrence of ``needle`` (same length: TCP sequence numbers stay
    right; msgcap does not verify checksums), as a bit flip on the wire would."""
    assert len(needle) == len(replacement)
    i = data.rindex(needle) if last else data.index(needle)
    return data[:i] + replacement + data[i + len(needle) :]


@pytest.fixture(scope="session")
def damaged_capture(tmp_path_factory) -> Path:
    """nats-basic.pcap with three NATS control lines garbled (early, early, late: the
    anomalies plot gets more than one bin) and the segment carrying ``PUB demo.temp.0``
    removed (gap bytes in the flows table)."""
    tmp = tmp_path_factory.mktemp("damaged")
    data = (SAMPLES / "nats-basic.pcap").read_bytes()
    data = corrupt(data, b"PUB work.jobs", b"PUX work.jobs")
    data = corrupt(data, b"MSG svc.echo", b"MSX svc.echo")
    data = corrupt(data, b"PING\r\n", b"PINX\r\n", last=True)
    garbled = tmp / "garbled.pcap"
    garbled.write_bytes(data)
    path = tmp / "nats-damaged.pcap"
    drop_packet(garbled, path, b"PUB demo.temp.0")
    return path


@pytest.fixture(scope="session")
def nats_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nats-ds")
    dissect_capture(SAMPLES / "nats-basic.pcap", out, Options(strict=True))
    return out


@pytest.fixture(scope="session")
def report_dataset(tmp_path_factory, damaged_capture) -> Path:
    """nats-basic + its damaged copy + pulsar-client: request/reply, fan-out, Pulsar
    batches and acks, and gaps (anomalies) in one dataset of three captures."""
    out = tmp_path_factory.mktemp("report-ds")
    for path in (SAMPLES / "nats-basic.pcap", damaged_capture, SAMPLES / "pulsar-client.pcap"):
        dissect_capture(path, out, Options())
    return out

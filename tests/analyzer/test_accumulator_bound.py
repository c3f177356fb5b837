"""What a compiled fast path's accumulator holds before its rows become an Arrow batch is
bounded by bytes as the writer's batches are (``analyzer.sink.BATCH_BYTES``), not only
by rows: with rows of large payloads (a ``payload_cap`` above the default) it held up to
256 MiB, outside the memory budget, before the rows were handed on."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import analyzer.pipeline as pipeline
from analyzer.pipeline import Options, dissect_capture
from analyzer.sink import BATCH_BYTES, DatasetWriter
from samples.hostile.generate import Conversation
from tests.reassembly.synth import PcapWriter

PAYLOAD = 256 * 1024
MESSAGES = 160  # 40 MiB of payloads: past two BATCH_BYTES
BIG = 2 * 1024 * 1024  # over the compiled scan's 1 MiB: the reference's dict rows
BIG_MESSAGES = 24  # 48 MiB of payloads in dict rows


def _publisher(path: Path, pubs: list[bytes]) -> Path:
    """One NATS client connection (handshake, INFO, CONNECT) sending ``pubs``, whole
    operations cut into 16,000-byte segments."""
    w = PcapWriter(path)
    conv = Conversation(w, 41000, 4222, seg=16000).handshake()
    conv.send(1, b'INFO {"server_id":"x","max_payload":67108864}\r\n')
    conv.send(0, b"CONNECT {}\r\n")
    for op in pubs:
        conv.send(0, op)
    conv.fin()
    w.close()
    return path


def _pub(subject: str, payload: bytes) -> bytes:
    return b"PUB %s %d\r\n" % (subject.encode(), len(payload)) + payload + b"\r\n"


@pytest.fixture(scope="module")
def big_payloads(tmp_path_factory) -> Path:
    """``MESSAGES`` PUBs of 256 KiB (distinct bytes each), all taken by the scan."""
    return _publisher(tmp_path_factory.mktemp("bound") / "big-payloads.pcap",
                      [_pub(f"big.{i}", i.to_bytes(4, "big") * (PAYLOAD // 4))
                       for i in range(MESSAGES)])


@pytest.fixture(scope="module")
def over_the_scan(tmp_path_factory) -> Path:
    """PUBs of 2 MiB, which the compiled scan leaves to the reference (dict rows), each
    after a small PUB the scan takes (so the dict rows wait beside the accumulator's)."""
    pubs = []
    for i in range(BIG_MESSAGES):
        pubs += [_pub(f"small.{i}", b"hello"), _pub(f"big.{i}", i.to_bytes(4, "big") * (BIG // 4))]
    return _publisher(tmp_path_factory.mktemp("bound") / "over-the-scan.pcap", pubs)


def test_accumulated_rows_are_handed_on_by_bytes(big_payloads: Path, tmp_path: Path,
                                                 monkeypatch) -> None:
    held: list[int] = []
    flush = pipeline.CaptureDissection._flush_columns

    def watched(self, table: str) -> None:
        acc = self._accs.get(table)
        if acc is not None and len(acc):
            held.append(acc.nbytes)
        flush(self, table)

    monkeypatch.setattr(pipeline.CaptureDissection, "_flush_columns", watched)
    result = dissect_capture(big_payloads, tmp_path / "out",
                             Options(payload_cap=None, validate=True, strict=True))
    assert result.rows["nats"] == MESSAGES + 2  # the PUBs, INFO and CONNECT
    # handed on as the rows reached the bound (past it by what one feed brought at
    # most), not once at the end with every payload (40 MiB here)
    assert len(held) >= MESSAGES * PAYLOAD // BATCH_BYTES
    assert max(held) < 2 * BATCH_BYTES
    # and every payload kept whole, in order
    table = pq.read_table(next((tmp_path / "out" / "nats").rglob("*.parquet")),
                          columns=["op", "payload", "payload_len"])
    pubs = [r for r in table.to_pylist() if r["op"] == "PUB"]
    assert [r["payload"][:4] for r in pubs] == [i.to_bytes(4, "big") for i in range(MESSAGES)]
    assert {r["payload_len"] for r in pubs} == {PAYLOAD}



def test_dict_rows_are_converted_by_bytes(over_the_scan: Path, tmp_path: Path,
                                          monkeypatch) -> None:
    """Rows the reference made hold their payloads as ``bytes`` until they become Arrow:
    they are converted (by the writer) or merged into the accumulator's batch (by the
    conveyor) once they hold ``BATCH_BYTES``, not after 4,096 or 16,384 rows."""
    held: list[int] = []
    to_batch = DatasetWriter._rows_batch
    flush = pipeline.CaptureDissection._flush_columns

    def converted(self, t, rows):
        held.append(sum(len(r.get("payload") or b"") for r in rows))
        return to_batch(self, t, rows)

    def flushed(self, table: str) -> None:
        waiting = self._between.get(table, [])
        held.append(sum(len(r.get("payload") or b"") for _, r in waiting))
        flush(self, table)

    monkeypatch.setattr(DatasetWriter, "_rows_batch", converted)
    monkeypatch.setattr(pipeline.CaptureDissection, "_flush_columns", flushed)
    result = dissect_capture(over_the_scan, tmp_path / "out",
                             Options(payload_cap=None, validate=True, strict=True))
    assert result.rows["nats"] == 2 * BIG_MESSAGES + 2
    assert max(held) >= BIG  # the big rows did come as dict rows
    assert max(held) < BATCH_BYTES + 2 * BIG
    table = pq.read_table(next((tmp_path / "out" / "nats").rglob("*.parquet")),
                          columns=["subject", "payload_len"])
    rows = [r for r in table.to_pylist() if r["subject"]]
    assert [r["subject"] for r in rows] == [f"{kind}.{i}" for i in range(BIG_MESSAGES)
                                            for kind in ("small", "big")]
    assert [r["payload_len"] for r in rows] == [5, BIG] * BIG_MESSAGES

"""Run captures through the pipeline and read the tables back (TLS / WebSocket / cluster tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow.dataset as ds

from analyzer.pipeline import CaptureResult, Options, dissect_capture
from dissectors.sdk.testing import Data, Gap, PcapFlow, write_pcap
from reassembly.engine import read_events
from reassembly.events import Direction, Event
from reassembly.quic.keylog import KeyLog

C, S = Direction.C2S, Direction.S2C


class Dissected:
    def __init__(self, pcap: Path, out: Path, keylog: str | Path | None = None,
                 **options) -> None:
        self.out = out
        self.result: CaptureResult = dissect_capture(
            pcap, out, Options(strict=True, validate=True,
                               keylog=str(keylog) if keylog else None, **options))

    def rows(self, table: str) -> list[dict]:
        path = self.out / table
        if not path.exists():
            return []
        return ds.dataset(path, partitioning="hive").to_table().to_pylist()

    def kinds(self) -> list[str]:
        return [a["kind"] for a in self.rows("anomalies")]


def flow_pcap(tmp_path: Path, script: Sequence[Data | Gap], port: int = 4222,
              name: str = "t.pcap") -> Path:
    return write_pcap(tmp_path / name, [PcapFlow(list(script), port)])


def events(pcap: Path, keylog_text: str | None = None) -> list[Event]:
    log = None
    if keylog_text is not None:
        log = KeyLog()
        log.add(keylog_text, complete=True)
    return list(read_events(pcap, keylog=log))


def assert_accounting(d: Dissected) -> None:
    """DESIGN §7 on every flow row: decoded + undecoded + gap = stream length."""
    for f in d.rows("flows"):
        for x in ("c2s", "s2c"):
            total = f[f"stream_bytes_{x}"] + f[f"gap_bytes_{x}"]
            got = f[f"decoded_bytes_{x}"] + f[f"undecoded_bytes_{x}"] + f[f"gap_bytes_{x}"]
            assert got == total, (f["flow_id"], x, f)

"""Shared helpers of the hostile-capture suite: run ``dissect_capture`` in a child
process (``tests/hostile/child.py``) and measure it; the baseline peak of a trivial run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from samples.hostile.generate import Conversation
from tests.reassembly.synth import PcapWriter

REPO = Path(__file__).resolve().parents[2]


def dissect_in_child(jobs: list[tuple[Path, Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``[(capture, out_dir, spec)]`` -> one report per job (see child.py)."""
    arg = json.dumps([{"path": str(p), "out": str(o), "spec": s} for p, o, s in jobs])
    proc = subprocess.run([sys.executable, "-m", "tests.hostile.child", arg], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def dissect_one(path: Path, tmp: Path, **spec: Any) -> dict[str, Any]:
    return dissect_in_child([(path, tmp / f"out-{path.stem}", spec)])[0]


@pytest.fixture(scope="session")
def baseline_mb(tmp_path_factory) -> float:
    """Peak RSS of a child that dissects one tiny NATS flow: imports, Arrow, Parquet."""
    d = tmp_path_factory.mktemp("baseline")
    path = d / "tiny.pcap"
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 4222).handshake()
    conv.send(1, b'INFO {"server_id":"x"}\r\n').send(0, b"CONNECT {}\r\nPING\r\n")
    conv.send(1, b"PONG\r\n").fin()
    w.close()
    return dissect_one(path, d)["peak_mb"]

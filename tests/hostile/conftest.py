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


def dissect_counted(jobs: list[tuple[Path, Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Like ``dissect_in_child``, each report with ``calls``: the function calls its
    dissection made (child.py).  That count, not CPU time, is what tests bound: it does not
    move with the machine's load (two runs of one job differ by < 0.1 %), and the slow
    paths these tests guard against (a Python step per line, per byte or per nesting level)
    show up in it.  A warm-up run of the first job comes first so that no count includes
    the imports a first dissection triggers."""
    path, out, spec = jobs[0]
    warm = (path, out.with_name(out.name + "-warm-up"), spec)
    reports = dissect_in_child([warm, *((p, o, {**s, "count_calls": True}) for p, o, s in jobs)])
    return reports[1:]


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

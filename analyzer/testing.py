"""Test helper that runs msgcap itself: ``dissect_with_cli``.

Why here and not in ``dissectors.sdk.testing``: it runs ``python -m analyzer.cli``, and
the product's lower floors (``dissectors``, ``reassembly``) never call its top.  Plugin
tests use it with ``dissectors.sdk.testing.write_pcap``: write a tiny capture, dissect
it as a user would (installed entry points read afresh), look at the rows.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CliRun", "dissect_with_cli"]


@dataclass
class CliRun:
    """Result of ``dissect_with_cli``: exit code, output, and the rows of every table
    written (``{table: [row dict, ...]}``, in file order)."""

    returncode: int
    stdout: str
    stderr: str
    tables: dict[str, list[dict[str, Any]]]


def dissect_with_cli(
    captures: str | Path | Sequence[str | Path], out_dir: str | Path, *args: str
) -> CliRun:
    """Run ``msgcap dissect CAPTURES -o OUT_DIR ARGS...`` with this Python in a
    subprocess (entry points are read afresh, as in real use) and read back the dataset.
    A non-zero exit code is returned, not raised (1 means "completed with anomalies")."""
    import pyarrow.parquet as pq

    if isinstance(captures, str | Path):
        captures = [captures]
    out = Path(out_dir)
    cmd = [sys.executable, "-m", "analyzer.cli", "dissect", *map(str, captures), "-o", str(out),
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    tables: dict[str, list[dict[str, Any]]] = {}
    if out.is_dir():
        for d in sorted(p for p in out.iterdir() if p.is_dir()):
            if any(d.rglob("*.parquet")):
                tables[d.name] = pq.read_table(d).to_pylist()
    return CliRun(proc.returncode, proc.stdout, proc.stderr, tables)

"""Issue 22's line as ``benchmarks/bench_replayed.py`` judges it (the STAN, Liftbridge and
replayed Pulsar benchmarks): messages per CPU s against 10x the baseline measured in the
same run when there is one, else the figure recorded at that capture size.  No timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_replayed as B  # noqa: E402  (a script's module, not a package)


def test_against_the_recorded_figure_at_its_size() -> None:
    got = B._target(B.STAN, 150.0, 47_510.0, None)
    assert got["met"] is True and got["ratio"] == pytest.approx(10.0)
    assert "4,751 (recorded 2026-11-26 at this size)" in got["detail"]
    got = B._target(B.LIFTBRIDGE, 20.0, 31_909.0, None)
    assert got["met"] is False and got["mark"] == "MISSED"
    assert got["ratio"] == pytest.approx(31_909 / 3_191)


def test_a_baseline_measured_in_the_run_comes_first() -> None:
    base = {"rev": "cfccea9", "msgs_per_cpu_s": 10_569.0}
    got = B._target(B.STAN, 150.0, 38_741.0, base)
    assert got["met"] is False and got["ratio"] == pytest.approx(38_741 / 10_569)
    assert "cfccea9 measured in this run" in got["detail"]
    assert B._target(B.PULSAR, 150.0, 47_900.0, {**base, "msgs_per_cpu_s": 4_790.0})["met"]


@pytest.mark.parametrize(("proto", "mb", "per_cpu"), [
    (B.PULSAR, 150.0, 1e9),  # nothing recorded for Pulsar
    (B.STAN, 50.0, 1e9),  # nor at 50 MB
    (B.STAN, 150.0, None),  # the rows did not check out
])
def test_no_verdict_without_a_baseline_or_checked_rows(proto, mb, per_cpu) -> None:
    got = B._target(proto, mb, per_cpu, None)
    assert got["met"] is False and got["detail"].startswith("n/a")

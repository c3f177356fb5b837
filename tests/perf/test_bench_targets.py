"""Issue 22's lines as ``benchmarks/bench_replayed.py`` judges them (the STAN, Liftbridge
and replayed Pulsar benchmarks): messages per CPU s against 10x the baseline measured in
the same run when there is one, else the figure recorded at that capture size; and
``benchmarks/bench_pulsar.py``'s codec-mix line.  No timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_pulsar as P  # noqa: E402  (scripts' modules, not a package)
import bench_replayed as B  # noqa: E402
from benchlib import Measured  # noqa: E402


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


# ``benchmarks/bench_pulsar.py --baseline``: the codec-mix capture's line, judged per CPU s
# (as above), its wall-clock ratio and peak RSS beside it


def _runs(*figures: tuple[float, float, float]) -> list[Measured]:
    """Runs of (wall s, CPU s, peak RSS MiB)."""
    return [Measured([], wall, 0, rss, rss, 1, 0, 1, rss, cpu, 0.0) for wall, cpu, rss in figures]


def test_pulsar_against_its_baseline_per_cpu_second() -> None:
    base = {"rev": "cfccea9", "wall_s": 11.78, "cpu_s": 12.76, "rows": 512_000}
    got = P._target(base, 512_000, _runs((1.21, 1.90, 164), (1.13, 1.85, 160), (1.24, 1.97, 167)))
    assert got["met"] is False and got["ratio"] == pytest.approx(12.76 / 1.90)
    assert got["wall_ratio"] == pytest.approx(11.78 / 1.21) and got["rss_mib"] == 167
    assert "per wall s 9.74x" in got["detail"]
    assert P._target(base, 512_000, _runs((0.9, 1.2, 200)))["met"] is True
    assert P._target(base, 512_000, _runs((0.9, 1.2, 301)))["met"] is False  # RSS over 300 MB


def test_pulsar_no_verdict_when_the_rows_differ() -> None:
    base = {"rev": "cfccea9", "wall_s": 11.78, "cpu_s": 12.76, "rows": 512_000}
    got = P._target(base, 511_999, _runs((1.0, 1.0, 100)))
    assert got["met"] is False and got["detail"].startswith("n/a")

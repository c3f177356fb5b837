"""The ``spark ingest`` progress line (no Spark: a stand-in status tracker)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from analyzer.spark.progress import Progress, Tasks, active_tasks, render


class _Tracker:
    """PySpark's ``StatusTracker`` surface: two active stages, one gone meanwhile."""

    def getActiveStageIds(self) -> list[int]:  # noqa: N802 - PySpark's name
        return [3, 4, 5]

    def getStageInfo(self, sid: int):  # noqa: N802
        if sid == 5:
            return None
        return SimpleNamespace(numTasks=4, numCompletedTasks=sid - 2, numActiveTasks=1,
                               numFailedTasks=1 if sid == 4 else 0)


def test_tasks_are_summed_over_active_stages() -> None:
    assert active_tasks(_Tracker()) == Tasks(done=3, total=8, running=2, failed=1)


def test_render_bar_and_plain() -> None:
    t = Tasks(done=3, total=8, running=2, failed=1)
    plain = render("big.pcap: dissecting by connection", t, 0, 150_000_000, bar=False)
    assert plain == ("big.pcap: dissecting by connection · tasks 3/8 (2 running), 1 failed "
                     "(retried) · 0.0 MB of 150.0 MB")
    # no capture finished yet: the bar follows the tasks (3/8 of 24 = 9)
    assert render("x", t, 0, 100, bar=True).startswith("[" + "#" * 9 + "." * 15 + "] x · ")
    # then the bytes of finished captures
    assert render("x", Tasks(), 50, 100, bar=True) == "[" + "#" * 12 + "." * 12 + \
        "] x · 0.0 MB of 0.0 MB"


def test_plain_lines_when_not_a_terminal_bar_redrawn_in_place_otherwise() -> None:
    out = io.StringIO()
    p = Progress(None, 2_000_000, out, bar=False)
    p.phase("a.pcap: scanning ranges")
    p.add_bytes(2_000_000)
    p.stop()
    assert out.getvalue().splitlines() == [
        "a.pcap: scanning ranges · 0.0 MB of 2.0 MB",
        "a.pcap: scanning ranges · 2.0 MB of 2.0 MB",
    ]
    out = io.StringIO()
    p = Progress(_Tracker(), 2_000_000, out, bar=True)
    p.phase("files")
    p.add_bytes(1_000_000)
    p.stop()
    text = out.getvalue()
    assert "\n" not in text.rstrip("\n") and text.endswith("\n")  # one line, redrawn
    assert text.count("\r") == 2
    assert text.rstrip().endswith("files · tasks 3/8 (2 running), 1 failed (retried) · "
                                  "1.0 MB of 2.0 MB")

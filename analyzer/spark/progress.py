"""Progress of ``msgcap spark ingest`` on stderr: tasks from Spark's status tracker, bytes
from the captures finished so far.

Why our own and not Spark's console bar: Spark's counts stages, not captures, and it
interleaves with the log; msgcap turns it off (``spark.ui.showConsoleProgress=false``).
A thread polls ``SparkContext.statusTracker()`` (driver-side metadata, no job of its
own) twice a second.  On a terminal (or with ``--progress``) one line is redrawn in
place; otherwise plain lines, one when the phase changes and at most one every
``PLAIN_EVERY_S`` seconds, so a log file stays readable.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

POLL_S = 0.5
PLAIN_EVERY_S = 10.0
BAR_WIDTH = 24


@dataclass(frozen=True)
class Tasks:
    """Tasks of the stages running now (all of them summed)."""

    done: int = 0
    total: int = 0
    running: int = 0
    failed: int = 0


def active_tasks(tracker: Any) -> Tasks:
    """Sum over ``tracker.getActiveStageIds()`` of each stage's task counts (PySpark's
    ``StatusTracker``; a stage that finished meanwhile has no info and is skipped)."""
    done = total = running = failed = 0
    for sid in tracker.getActiveStageIds():
        info = tracker.getStageInfo(sid)
        if info is None:
            continue
        done += info.numCompletedTasks
        total += info.numTasks
        running += info.numActiveTasks
        failed += info.numFailedTasks
    return Tasks(done, total, running, failed)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(phase: str, tasks: Tasks, done_bytes: int, total_bytes: int, bar: bool) -> str:
    """One progress line: the bar (when ``bar``) fills with the bytes of finished
    captures, or with the running stage's tasks while no capture has finished."""
    parts = [phase]
    if tasks.total:
        t = f"tasks {tasks.done}/{tasks.total}"
        if tasks.running:
            t += f" ({tasks.running} running)"
        if tasks.failed:
            t += f", {tasks.failed} failed (retried)"
        parts.append(t)
    parts.append(f"{_mb(done_bytes)} of {_mb(total_bytes)}")
    line = " · ".join(parts)
    if not bar:
        return line
    frac = done_bytes / total_bytes if total_bytes else 0.0
    if not done_bytes and tasks.total:
        frac = tasks.done / tasks.total
    filled = min(BAR_WIDTH, int(frac * BAR_WIDTH))
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {line}"


class Progress:
    """``phase(name)`` and ``add_bytes(n)`` are called by ``ingest``; ``start`` /
    ``stop`` run the polling thread.  Without a Spark context (``tracker`` None) only the
    phases and bytes are shown."""

    def __init__(self, tracker: Any, total_bytes: int, stream: TextIO, *, bar: bool) -> None:
        self.tracker = tracker
        self.total_bytes = total_bytes
        self.stream = stream
        self.bar = bar
        self.phase_name = "starting"
        self.done_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_plain = 0.0
        self._last_line = ""
        self._width = 0

    def phase(self, name: str) -> None:
        with self._lock:
            self.phase_name = name
        self._show(force=True)

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.done_bytes += n
        self._show(force=True)

    def start(self) -> Progress:
        self._thread = threading.Thread(target=self._run, name="msgcap-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._show(force=True)
        if self.bar and self._width:
            self.stream.write("\n")
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self._show(force=False)

    def _tasks(self) -> Tasks:
        if self.tracker is None:
            return Tasks()
        try:
            return active_tasks(self.tracker)
        except Exception:  # the context is stopping: nothing to show
            return Tasks()

    def _show(self, force: bool) -> None:
        with self._lock:
            line = render(self.phase_name, self._tasks(), self.done_bytes, self.total_bytes,
                          self.bar)
            if line == self._last_line:
                return
            now = time.monotonic()
            if self.bar:
                pad = " " * max(0, self._width - len(line))
                self.stream.write(f"\r{line}{pad}")
                self._width = len(line)
            elif force or now - self._last_plain >= PLAIN_EVERY_S:
                self.stream.write(line + "\n")
                self._last_plain = now
            else:
                return
            self._last_line = line
            self.stream.flush()

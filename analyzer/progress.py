"""A rich progress bar over the bytes of a capture file, shown only when it helps.

rich is imported only when a bar is shown (a terminal, a capture of 4 MiB or more):
most runs (tests, pipes, small captures) never draw one, and rich's import is ~0.1 s
of every ``msgcap dissect`` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from reassembly.capture import CaptureReader

T = TypeVar("T")

# Below this a pass takes well under a second: a bar would only flicker.
PROGRESS_MIN_BYTES = 4 * 1024 * 1024
_UPDATE_EVERY = 4096  # items between bar refreshes; rich itself throttles drawing


@contextlib.contextmanager
def capture_progress(
    reader: CaptureReader, label: str
) -> Iterator[Callable[[Iterable[T]], Iterable[T]]]:
    """Yields ``wrap(iterable)`` which advances a bar on stderr as the reader moves."""
    size = reader.info.file_size
    show = size >= PROGRESS_MIN_BYTES and sys.stderr.isatty() and not os.environ.get("CI")
    if not show:
        yield lambda it: it
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task(label, total=size)

    def wrap(items: Iterable[T]) -> Iterator[T]:
        for n, item in enumerate(items):
            if n % _UPDATE_EVERY == 0:
                progress.update(task, completed=reader.bytes_read)
            yield item
        progress.update(task, completed=size)

    with progress:
        yield wrap


@dataclass(frozen=True)
class ProgressWrap:
    """``wrap`` for ``dissect_capture``: a progress bar on stderr over the capture's
    bytes.  A class of an importable module, so it pickles into worker 0 of ``--workers
    N`` (``analyzer.parallel``), which shows it, even when the command line runs as
    ``__main__``.  Here rather than in ``analyzer.parallel`` so that a one-process run
    does not import the worker machinery (multiprocessing, pyarrow.compute) for it."""

    label: str

    def __call__(self, reader: CaptureReader, events: Iterable[T]) -> Iterator[T]:
        with capture_progress(reader, self.label) as bar:
            yield from bar(events)

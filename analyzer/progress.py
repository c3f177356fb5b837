"""A rich progress bar over the bytes of a capture file, shown only when it helps."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from reassembly.capture import CaptureReader

T = TypeVar("T")

# Below this a pass takes well under a second: a bar would only flicker.
PROGRESS_MIN_BYTES = 4 * 1024 * 1024
_UPDATE_EVERY = 4096  # items between bar refreshes; rich itself throttles drawing


@contextlib.contextmanager
def capture_progress(reader: CaptureReader, label: str) -> Iterator[callable]:
    """Yields ``wrap(iterable)`` which advances a bar on stderr as the reader moves."""
    size = reader.info.file_size
    show = size >= PROGRESS_MIN_BYTES and sys.stderr.isatty() and not os.environ.get("CI")
    if not show:
        yield lambda it: it
        return
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

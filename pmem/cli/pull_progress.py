"""Draws `provision.pull()`'s progress on stderr: rich bars in a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import Any

from . import output as out


class PullBars:
    """A `provision.PullProgress` callback: one transient bar per file, messages as notes.

    Use as a context manager so the bars stop however the pull ends."""

    def __init__(self) -> None:
        self._bars: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> "PullBars":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def __call__(self, step: Any) -> None:
        if step.done is None:
            out.note(step.message)
            return
        if not sys.stderr.isatty():
            return
        if self._bars is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._bars = Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
                                  TransferSpeedColumn(), console=out.err_console(), transient=True)
            self._bars.start()
        task = self._tasks.get(step.message)
        if task is None:
            task = self._tasks[step.message] = self._bars.add_task(step.message, total=step.total)
        self._bars.update(task, completed=step.done, total=step.total)

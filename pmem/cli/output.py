"""Rendering for the CLI: rich in a terminal, plain text in a pipe, JSON on request.

Memory text is data (see pmem.display). In a terminal everything written here goes through
`visible()` (controls and invisible characters shown as escapes) and rich `Text` (never parsed as
markup); in a pipe it is written as stored; JSON escapes what a terminal would act on.
Library notices (pmem.notices) are shown here too, one `pmem: ...` line on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

from .. import notices, timeutil
from ..display import json_dumps, visible
from ..records import Hit, Memory


def _library_notice(message: str) -> None:
    """The library prints nothing (pmem.notices); the CLI shows its notices on stderr."""
    note("pmem: " + message)


notices.listen(_library_notice)


def is_tty() -> bool:
    return sys.stdout.isatty()


_console = None
_err_console = None


def console():
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(highlight=False, markup=False, emoji=False,
                           no_color=bool(os.environ.get("NO_COLOR")) or None)
    return _console


def err_console():
    global _err_console
    if _err_console is None:
        from rich.console import Console

        _err_console = Console(stderr=True, highlight=False, markup=False, emoji=False,
                               no_color=bool(os.environ.get("NO_COLOR")) or None)
    return _err_console


def echo(text: str = "") -> None:
    """One line of output: shown with `visible()` on a terminal, written as it is to a pipe."""
    write(text + "\n")


def write(text: str) -> None:
    sys.stdout.write(visible(text) if is_tty() else text)


def write_lines(lines: Iterable[str]) -> None:
    """Lines that end in newlines (an export): as stored to a pipe or file, `visible()` on a tty."""
    if is_tty():
        sys.stdout.writelines(visible(line) for line in lines)
    else:
        sys.stdout.writelines(lines)


def note(text: str) -> None:
    """A message for the person, on stderr so pipes stay clean."""
    sys.stderr.write(visible(text) + "\n")


def error(text: str) -> None:
    sys.stderr.write("pmem: error: " + visible(text) + "\n")


def print_json(data: Any) -> None:
    sys.stdout.write(json_dumps(data, indent=2) + "\n")


def one_line(text: str) -> str:
    return " ".join(text.split())


def _flags(m: Memory, now: str) -> str:
    status = m.status(now)
    flags = []
    if m.pinned:
        flags.append("pinned")
    if status != "active":
        flags.append(status)
    elif m.expires_at:
        flags.append("expires " + timeutil.humanize_age(m.expires_at))
    return ",".join(flags)


def memory_table(memories: Iterable[Memory], hits: list[Hit] | None = None, title: str | None = None) -> None:
    """A table of memories; `hits` adds the score column for search results."""
    now = timeutil.now_iso()
    rows = [h.memory for h in hits] if hits is not None else list(memories)
    scores = [h.score for h in hits] if hits is not None else None
    if not is_tty():
        for i, m in enumerate(rows):
            cols = [m.id, m.created_at[:10], m.tier]
            if scores is not None:
                cols.append(f"{scores[i]:.4f}")
            cols.append(",".join(m.tags))
            cols.append(one_line(m.text))
            echo("\t".join(cols))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False, expand=True, pad_edge=False)
    table.add_column("id", style="cyan", no_wrap=True)
    table.add_column("date", no_wrap=True)
    table.add_column("tier", no_wrap=True)
    if scores is not None:
        table.add_column("score", justify="right", no_wrap=True)
    table.add_column("text", ratio=1)
    table.add_column("tags", style="magenta")
    table.add_column("", style="yellow", no_wrap=True)
    for i, m in enumerate(rows):
        cells = [Text(m.id), Text(m.created_at[:10]), Text(m.tier)]
        if scores is not None:
            cells.append(Text(f"{scores[i]:.3f}"))
        cells += [Text(visible(m.text)), Text(visible(" ".join(m.tags))), Text(_flags(m, now))]
        table.add_row(*cells)
    console().print(table)


def memory_detail(m: Memory) -> None:
    now = timeutil.now_iso()
    fields = [("id", m.id), ("tier", m.tier), ("status", m.status(now)), ("pinned", "yes" if m.pinned else "no"),
              ("tags", ", ".join(m.tags)), ("source", m.source or ""), ("scope", m.scope or "global"),
              ("created", m.created_at),
              ("updated", m.updated_at), ("expires", m.expires_at or ""), ("valid from", m.valid_from or ""),
              ("valid to", m.valid_to or ""), ("superseded by", m.superseded_by or ""),
              ("derived from", ", ".join(m.derived_from)), ("merged into", m.merged_into or ""),
              ("thread", f"{m.thread} (position {m.thread_pos})" if m.thread is not None else ""),
              ("forgotten", m.forgotten_at or ""),
              ("accessed", f"{m.access_count} times, last {m.last_accessed_at or 'never'}"),
              ("meta", json_dumps(m.meta) if m.meta else "")]
    if not is_tty():
        echo(m.text)
        echo()
        for k, v in fields:
            if v:
                echo(f"{k}: {v}")
        return
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in fields:
        if v:
            grid.add_row(Text(k), Text(visible(v)))
    console().print(Panel(Text(visible(m.text)), title=Text(m.id), expand=False))
    console().print(grid)


def key_values(items: Iterable[tuple[str, Any]]) -> None:
    items = list(items)
    width = max((len(k) for k, _ in items), default=0)
    for k, v in items:
        echo(f"{k.ljust(width)}  {v}")


class Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, label: str, enabled: bool | None = None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None  # a rich Progress once started (rich is imported only then)
        self._task: Any = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._progress = RichProgress(TextColumn("{task.description}", markup=False), BarColumn(),
                                          MofNCompleteColumn(), TimeRemainingColumn(),
                                          console=err_console(), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(visible(self.label), total=None)
        return self

    def __call__(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

"""Memories as rich renderables for the TUI. Memory text is data: always a `Text`, never markup.

Nothing here imports textual, so the rendering can be tested (and reused) on its own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Iterable

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from .. import timeutil
from ..display import visible
from ..records import Event, Memory, Operation

TIER_SHORT = {"core": "core", "archival": "arch", "episodic": "epis"}


def one_line(text: str, limit: int | None = None) -> str:
    line = " ".join(visible(text).split())
    if limit is not None and len(line) > limit:
        line = line[: max(limit - 1, 0)] + "…"
    return line


def literal(text: str, style: str = "") -> Text:
    """User or model text, shown exactly (never parsed as markup)."""
    return Text(visible(text), style=style, no_wrap=False)


def iso_of(dt: datetime) -> str:
    return timeutil.iso(dt)


def status_word(m: Memory, now_iso: str) -> str:
    return m.status(now_iso)


def expiry_cell(m: Memory, now_iso: str, ref: datetime) -> Text:
    status = m.status(now_iso)
    if status == "forgotten":
        return Text("forgot", style="red")
    if status == "merged":
        return Text("merged", style="magenta")
    if status == "superseded":
        return Text("supersd", style="magenta")
    if status == "expired":
        return Text("expired", style="red")
    if m.expires_at:
        return Text(timeutil.humanize_age(m.expires_at, ref), style="yellow")
    return Text("")


def row_cells(m: Memory, now_iso: str, ref: datetime, text_width: int, tags_width: int = 12) -> list[Text]:
    """Cells for the memory list: pin, tier, age, expiry, tags, text (one line, literal)."""
    tags = ",".join(m.tags)
    return [
        Text("●" if m.pinned else " ", style="bold yellow"),
        Text(TIER_SHORT.get(m.tier, m.tier[:4]), style="bold" if m.tier == "core" else ""),
        Text(timeutil.humanize_age(m.created_at, ref), style="dim"),
        expiry_cell(m, now_iso, ref),
        Text(one_line(tags, tags_width), style="cyan"),
        Text(one_line(m.text, text_width), style="strike dim" if m.forgotten else ""),
    ]


class Grid:
    """Rows of cells in columns one space apart, as rich's `Table.grid(padding=(0, 1))` drew them
    here: each column but the last as wide as its widest cell and never wrapped, the last wrapped
    in what is left of the width. A table measures every cell twice; the detail pane is drawn for
    every cursor move and for the first frame, and this draws its grids in a tenth of the time."""

    def __init__(self, *styles: str) -> None:
        self.styles = styles  # one per column
        self.rows: list[tuple[Text, ...]] = []

    def add_row(self, *cells: Text) -> None:
        assert len(cells) == len(self.styles)
        self.rows.append(cells)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.rows:
            return
        *fixed_styles, last_style = self.styles
        widths = [max(cell_len(row[i].plain) for row in self.rows) for i in range(len(fixed_styles))]
        rest = options.max_width - sum(widths) - len(widths)
        if rest < 1:  # the fixed columns fill the width: rich's table shares it out among them
            yield self._table()
            return
        for row in self.rows:
            head = Text()
            for cell, width, style in zip(row, widths, fixed_styles):
                cell = cell.copy()
                cell.truncate(width, pad=True)  # the cells hold no newlines; none is wider
                cell.stylize_before(style)
                head.append_text(cell)
                head.append(" ")
            indent = " " * cell_len(head.plain)
            value = row[-1].copy()
            value.stylize_before(last_style)
            # as a table column: words wrap, a longer word is cut with an ellipsis unless the
            # cell folds (the scope, a path)
            lines = value.wrap(console, rest, overflow=value.overflow or "ellipsis")
            for i, line in enumerate(lines):
                out = head if i == 0 else Text(indent)
                out.append_text(line)
                out.end = "\n"
                out.no_wrap = True
                yield out

    def _table(self) -> RenderableType:
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        for style in self.styles[:-1]:
            table.add_column(style=style, no_wrap=True)
        table.add_column(style=self.styles[-1])
        for row in self.rows:
            table.add_row(*row)
        return table


def _grid() -> Grid:
    return Grid("bold", "")


def _heading(title: str) -> Text:
    return Text(title, style="bold underline")


def _short(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def describe_event(event: Event) -> str:
    changes = {k: v for k, v in event.changes().items() if k not in ("updated_at", "last_accessed_at",
                                                                       "access_count")}
    if event.before is None:
        return "created"
    if event.after is None:
        return "removed"
    parts = []
    for key, (old, new) in changes.items():
        if key == "text":
            parts.append("text changed")
        elif key == "tags":
            added = [t for t in (new or []) if t not in (old or [])]
            removed = [t for t in (old or []) if t not in (new or [])]
            bits = [f"+{t}" for t in added] + [f"-{t}" for t in removed]
            parts.append("tags " + " ".join(bits))
        else:
            parts.append(f"{key} {_short(old)} → {_short(new)}")
    return "; ".join(parts) or "no visible change"


def scope_label(scope: str | None) -> str:
    return "global" if scope is None else scope


def thread_place(m: Memory) -> str:
    """`name · #pos` (1-based, as people count turns) for a threaded memory."""
    if m.thread is None:
        return "—"
    return m.thread if m.thread_pos is None else f"{m.thread} · #{m.thread_pos + 1}"


def thread_rows(m: Memory, before: Iterable[Memory], after: Iterable[Memory], text_width: int = 60,
                wrap: bool = False) -> RenderableType:
    """`m` among its thread neighbours, in thread order, `m` marked: one literal line each (or
    wrapped, with `wrap`). Plain `Text` lines, not a table: the pane renders them in well under a
    millisecond."""
    members = [*before, m, *after]
    places = ["" if x.thread_pos is None else f"#{x.thread_pos + 1}" for x in members]
    ids = [visible(x.id) for x in members]
    place_width = max(map(len, places))
    id_width = max(map(len, ids))
    lines = []
    for member, place, mid in zip(members, places, ids):
        me = member.id == m.id
        style = "bold" if me else ""
        line = Text.assemble(("▸ " if me else "  ", "bold"), (place.rjust(place_width), "dim"), " ",
                             (mid.ljust(id_width), style), " ", (one_line(member.text, text_width), style),
                             no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
        lines.append(line)
    return Group(*lines)


def thread_listing(m: Memory, before: Iterable[Memory], after: Iterable[Memory]) -> RenderableType:
    """The whole thread of `m` (the `T` screen)."""
    before, after = list(before), list(after)
    title = Text.assemble(("Thread ", "bold underline"), (visible(m.thread or ""), "bold"),
                          (f"  {len(before) + len(after) + 1} shown", "dim"))
    return Group(title, Text(""), thread_rows(m, before, after, text_width=500, wrap=True))


def detail(m: Memory, now_iso: str, ref: datetime, history: Iterable[tuple[Event, Operation]] = (),
           derived: Iterable[Memory] = (),
           thread: tuple[Iterable[Memory], Iterable[Memory]] | None = None) -> RenderableType:
    """The detail pane: full text, metadata, thread neighbours, provenance, history. `thread` is
    (before, after): the neighbours of a threaded memory, each in thread order."""
    parts: list[RenderableType] = []
    title = Text.assemble((m.id, "bold"), "  ", (m.status(now_iso), "italic"))
    if m.pinned:
        title.append("  ● pinned", style="yellow")
    parts.append(title)
    parts.append(literal(m.text))
    parts.append(Text(""))

    grid = _grid()
    age = timeutil.humanize_age(m.created_at, ref)
    rows = [
        ("tier", m.tier),
        ("tags", ", ".join(m.tags) or "—"),
        ("scope", scope_label(m.scope)),
    ]
    if m.thread is not None:
        rows.append(("thread", thread_place(m)))
    rows += [
        ("created", f"{m.created_at} ({age})" if m.created_at else "—"),
        ("updated", m.updated_at or "—"),
        ("expires", f"{m.expires_at} ({timeutil.humanize_age(m.expires_at, ref)})" if m.expires_at else "never"),
    ]
    if m.valid_from or m.valid_to:
        rows.append(("valid", f"{m.valid_from or '…'} → {m.valid_to or '…'}"))
    if m.superseded_by:
        rows.append(("superseded by", m.superseded_by))
    if m.merged_into:
        rows.append(("merged into", m.merged_into))
    if m.forgotten_at:
        rows.append(("forgotten", m.forgotten_at))
    rows.append(("accessed", f"{m.access_count}×, last {m.last_accessed_at or 'never'}"))
    for key, value in rows:
        cell = literal(value)
        if key == "scope":
            cell.overflow = "fold"  # a project path is one long word: show all of it
        grid.add_row(Text(key), cell)
    parts.append(grid)

    if m.thread is not None and thread is not None:
        parts.append(Text(""))
        parts.append(_heading("Thread"))
        parts.append(thread_rows(m, *thread))

    parts.append(Text(""))
    parts.append(_heading("Provenance"))
    prov = _grid()
    prov.add_row(Text("source"), literal(m.source or "—"))
    derived = list(derived)
    if m.derived_from:
        known = {d.id: d for d in derived}
        for i, mid in enumerate(m.derived_from):
            d = known.get(mid)
            label = Text.assemble((mid, "bold"), " ", one_line(d.text, 60) if d else "(not stored)")
            prov.add_row(Text("derived from" if i == 0 else ""), label)
    if m.meta:
        for key in sorted(m.meta):
            prov.add_row(literal(f"meta.{key}"), literal(_short(m.meta[key])))
    parts.append(prov)

    history = list(history)
    if history:
        parts.append(Text(""))
        parts.append(_heading("History"))
        hist = Grid("dim", "bold", "")
        for event, op in history:
            what = literal(describe_event(event))
            if op.undone_at:
                what.append(" (undone)", style="italic dim")
            hist.add_row(Text(event.at.replace("T", " ").rstrip("Z")[:16]), Text(event.action), what)
        parts.append(hist)
    return Group(*parts)

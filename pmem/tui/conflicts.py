"""The sync conflicts view (`C`): what two devices changed at once, and which value lost.

Each row is one field of one memory that two devices set concurrently: the later change won
everywhere (pmem/store/replication.py), the other is kept here. Both values are shown literally;
`b` takes the losing one back as a new edit (one undoable operation, sent by the next `pmem sync`
like any edit).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Static

from ..errors import PmemError
from .render import literal, one_line

HIDDEN = ("updated_at",)  # every concurrent edit also races on its time stamp: bookkeeping, not content


def shown_value(field: str, value: Any) -> str:
    """A field's value as text: strings as they are, the rest as JSON (never as markup)."""
    if field == "_exists":
        return "the memory exists" if value else "the memory is gone (an undone create, or deleted)"
    if isinstance(value, str):
        return value
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False)


class ConflictsScreen(Screen[bool]):
    """Dismisses with True when a losing value was taken back (the list should reload)."""

    BINDINGS = [
        Binding("b", "take_back", "Take back the losing value"),
        Binding("ctrl+r", "reload", "Reload", show=False),
        Binding("escape,q", "close", "Close"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict[str, Any]] = []
        self.hidden = 0
        self.changed = False

    def compose(self) -> ComposeResult:
        with Vertical(id="conflicts"):
            yield Label("Sync conflicts", id="conflicts-status")
            yield DataTable(id="conflict-list", cursor_type="row")
            with VerticalScroll(id="conflict-detail"):
                yield Static(Text(""), id="conflict-body", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#conflict-list", DataTable)
        for key, label, width in (("memory", "memory", 30), ("field", "field", 10), ("lost", "losing value", 24),
                                  ("when", "when", 20)):
            table.add_column(Text(label), key=key, width=width)
        self.load()

    def _journal(self) -> Any:
        from ..store.replication import SyncLog

        j = SyncLog(self.app.store)  # type: ignore[attr-defined]
        return j if j.exists() else None

    def load(self, keep: int | None = None) -> None:
        table = self.query_one("#conflict-list", DataTable)
        table.clear()
        j = self._journal()
        if j is None:
            self.entries = []
            self._status("This database does not sync (pmem sync init or join): no conflicts.")
            self._show(None)
            return
        every = j.conflict_entries()
        self.entries = [e for e in every if e["field"] not in HIDDEN]
        self.hidden = len(every) - len(self.entries)
        for e in self.entries:
            m = e["memory"]
            label = Text.assemble((e["memory_id"], "bold"), " ", one_line(m.text, 60) if m else "(not held here)")
            lost = Text(one_line(shown_value(e["field"], e["lost_value"]), 60),
                        style="dim" if e["taken_back"] else "")
            table.add_row(label, Text(e["field"]), lost, Text(e["lost_at"]), key=str(e["id"]))
        n = len(self.entries)
        hidden = f" ({self.hidden} about updated_at times not listed)" if self.hidden else ""
        self._status((f"{n} sync conflict{'s' if n != 1 else ''} (the later change won). b takes the losing "
                      "value back as a new edit." if n else "No sync conflicts.") + hidden)
        if n:
            row = next((i for i, e in enumerate(self.entries) if e["id"] == keep), 0)
            table.move_cursor(row=row)
            table.focus()
            self._show(self.entries[row])
        else:
            self._show(None)

    def _status(self, message: str) -> None:
        self.query_one("#conflicts-status", Label).update(literal(message))

    def _entry(self, key: str | None) -> dict[str, Any] | None:
        return next((e for e in self.entries if str(e["id"]) == key), None)

    def current(self) -> dict[str, Any] | None:
        table = self.query_one("#conflict-list", DataTable)
        if not table.row_count:
            return None
        return self._entry(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        e = self._entry(event.row_key.value if event.row_key else None)
        if e is not None:
            self._show(e)

    def _show(self, e: dict[str, Any] | None) -> None:
        body = self.query_one("#conflict-body", Static)
        if e is None:
            body.update(Text(""))
            return
        field = e["field"]
        m = e["memory"]
        what = "the same id, made on two devices: the losing memory's text" if field == "id" else field
        parts: list[Any] = [
            Text.assemble(("memory ", "dim"), (e["memory_id"], "bold"), ("  field ", "dim"), (what, "bold")),
            Text.assemble(("won: ", "bold green"), f"device {e['kept_device'] or '?'} at {e['kept_at'] or '?'}"),
            literal(shown_value("text" if field == "id" else field, e["kept_value"])),
            Text.assemble(("lost: ", "bold red"), f"device {e['lost_device'] or '?'} at {e['lost_at'] or '?'}"),
            literal(shown_value(field, e["lost_value"])),
        ]
        if e["taken_back"]:
            parts.append(Text("The losing value is the memory's value now (taken back).", style="dim"))
        elif not e["can_take_back"]:
            parts.append(Text("This one cannot be taken back here"
                              + (" (the memory is not held on this device)." if m is None else
                                 ": `pmem restore` or `pmem undo` bring a memory back."), style="dim"))
        body.update(Group(*parts))

    def action_take_back(self) -> None:
        e = self.current()
        if e is None:
            return
        if e["taken_back"]:
            self.app.notify("That losing value is already the memory's value.", severity="warning")
            return
        j = self._journal()
        try:
            mid = j.take_back(e["id"])
        except PmemError as exc:
            self.app.notify(str(exc), severity="error", markup=False)
            return
        self.changed = True
        self.app.notify(f"took back the losing {e['field']} of {e['memory_id']}"
                        + (f" as memory {mid}" if mid != e["memory_id"] else "")
                        + "; u on the list or `pmem undo` reverts it, `pmem sync` sends it.", markup=False, timeout=4)
        self.load(keep=e["id"])

    def action_reload(self) -> None:
        self.load()

    def action_close(self) -> None:
        self.dismiss(self.changed)

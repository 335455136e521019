"""The memory list (a DataTable filled page by page) and the detail pane."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from ..models import Memory

# (key, label, width); the text column takes what is left.
COLUMNS = (("pin", " ", 1), ("tier", "tier", 4), ("age", "age", 4), ("expiry", "expiry", 7),
           ("tags", "tags", 12), ("text", "text", 20))
_FIXED = sum(w for key, _, w in COLUMNS if key != "text")


class MemoryTable(DataTable):
    """Rows keyed by memory id. Asks for the next page (`on_need_more`) as the cursor or the
    scroll position nears the end of what is loaded, so a large store is never read whole."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g", "scroll_top", "Top", show=False),
        Binding("G", "scroll_bottom", "Bottom", show=False),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.on_need_more: Callable[[], None] | None = None
        self.exhausted = True
        self._asking = False

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(Text(label), key=key, width=width)

    @property
    def text_width(self) -> int:
        width = self.size.width or (self.app.size.width if self.app else 80)
        padding = 2 * self.cell_padding * len(COLUMNS)
        return max(10, width - _FIXED - padding - 1)

    def fit_text_column(self) -> None:
        column = self.columns.get("text")  # type: ignore[call-overload]
        if column is None:
            return
        width = self.text_width
        if column.width != width:
            column.width = width
            self._require_update_dimensions = True
            self.refresh()

    def on_resize(self) -> None:
        self.fit_text_column()

    def _ask_for_more(self) -> None:
        if self.exhausted or self._asking or self.on_need_more is None:
            return
        self._asking = True
        try:
            self.on_need_more()
        finally:
            self._asking = False

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if not self.exhausted and new > old and new + 2 * self.size.height >= self.max_scroll_y:
            self.call_later(self._ask_for_more)

    def watch_cursor_coordinate(self, old, new) -> None:
        super().watch_cursor_coordinate(old, new)
        if not self.exhausted and new.row > old.row and self.row_count - new.row <= max(self.size.height, 20):
            self.call_later(self._ask_for_more)

    def action_scroll_bottom(self) -> None:
        # Jumping to the end of a paged list loads pages until it is reached, one screen at a time.
        super().action_scroll_bottom()
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def current_id(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value


class DetailPane(VerticalScroll):
    """Full text, metadata, provenance and history of the highlighted memory."""

    def compose(self):
        yield Static(Text("No memory selected."), id="detail-body", markup=False)

    def show(self, renderable) -> None:
        self.query_one("#detail-body", Static).update(renderable)
        self.scroll_home(animate=False)


def memory_row_key(m: Memory) -> str:
    return m.id

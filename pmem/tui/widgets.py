"""The memory list (a Line-API view over pages read on demand) and the detail pane.

`MemoryList` is a `ScrollView` whose virtual height is the number of rows (plus the header): it
never holds the whole store. Rows are read a page at a time through `fetch(offset, limit)` only
when a visible row or the cursor needs them, kept in a small LRU of pages, and rendered once per
page into `Strip`s; a repaint then only crops cached strips, so scrolling costs the same on 100 or
100,000 memories.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from typing import Callable, Iterator

from rich.cells import cell_len
from rich.console import RenderableType
from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input

from ..display import restore_hidden, visible
from ..records import Memory

# (key, label, width); the text column takes what is left. Each cell has one space either side.
COLUMNS = (("pin", " ", 1), ("tier", "tier", 4), ("age", "age", 4), ("expiry", "expiry", 7),
           ("tags", "tags", 12), ("text", "text", 20))
_FIXED = sum(w for key, _, w in COLUMNS if key != "text")
CELL_PADDING = 1

Fetch = Callable[[int, int], "list[Memory]"]
CellsFor = Callable[[Memory, int], "list[Text]"]


class MemoryList(ScrollView, can_focus=True):
    """A virtual list of memories: row i is read from `fetch(offset, limit)` when it is needed.

    Rows the app keeps on screen after they stopped matching the filter (a forgotten row stays,
    struck through, until the next reload) are "kept" rows: they are not in the database's list any
    more, so the offsets of the rows after them shift by one (see `_db_offset`).
    """

    COMPONENT_CLASSES = {"memory-list--header", "memory-list--cursor"}

    DEFAULT_CSS = """
    MemoryList {
        background: $surface;
        color: $foreground;
        overflow-x: hidden;
        overflow-y: scroll;
        &:focus {
            background-tint: $foreground 5%;
            & > .memory-list--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .memory-list--header {
                background-tint: $foreground 5%;
            }
        }
        & > .memory-list--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .memory-list--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .memory-list--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    BINDINGS = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,g,ctrl+home", "scroll_top", "Top", show=False),
        Binding("end,G,ctrl+end", "scroll_bottom", "Bottom", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, always_update=False, init=False)

    class _RowMessage(Message):

        def __init__(self, memory_list: "MemoryList", index: int, memory_id: str | None) -> None:
            super().__init__()
            self.memory_list = memory_list
            self.index = index
            self.memory_id = memory_id

        @property
        def control(self) -> "MemoryList":
            return self.memory_list

    class Highlighted(_RowMessage):
        """The cursor moved to another row (or the memory under it changed)."""

    class Selected(_RowMessage):
        """Enter (or a click on the highlighted row)."""

    def __init__(self, *, page_size: int = 100, max_pages: int = 8, **kw) -> None:
        super().__init__(**kw)
        self.page_size = page_size
        self.max_pages = max(2, max_pages)
        self.cells_for: CellsFor | None = None
        self.on_highlight: Callable[["MemoryList.Highlighted"], None] | None = None
        self._fetch: Fetch | None = None
        self._db_total = 0
        self._kept: dict[int, Memory] = {}  # virtual index -> memory shown but no longer listed
        self._kept_sorted: list[int] = []
        self._pages: OrderedDict[int, list[Memory]] = OrderedDict()
        self._strips: dict[int, dict[int, Strip]] = {}  # page -> row -> strip (no cursor, full width)
        self._strip_key: tuple = ()
        self._header: Strip | None = None
        self._styles: tuple | None = None
        self._style_cache: dict = {}
        self._prefetch_pending = False
        self._last_highlight: tuple[int, str | None] | None = None
        # For tests and the benchmark: how often and how much the list read.
        self.fetch_calls = 0
        self.rows_fetched = 0

    # -- data -----------------------------------------------------------------------------

    def set_source(self, total: int, fetch: Fetch, *, keep_id: str | None = None,
                   keep_index: int | None = None) -> None:
        """Show `total` rows read through `fetch(offset, limit)`. The cursor stays on `keep_id`
        if it is still near `keep_index` (or anywhere in the page read for it), else on that index."""
        self._fetch = fetch
        self._db_total = max(0, total)
        self._kept.clear()
        self._kept_sorted.clear()
        self._pages.clear()
        self._strips.clear()
        self._last_highlight = None
        self._update_virtual_size()
        index = min(keep_index or 0, max(self.row_count - 1, 0))
        if keep_id is not None and self.row_count:
            found = self._find_near(keep_id, index)
            if found is not None:
                index = found
        self._set_cursor(index, force=True)
        self.refresh()

    def set_memories(self, memories: list[Memory], *, keep_id: str | None = None) -> None:
        """Show a fixed list (search results)."""
        rows = list(memories)
        self.set_source(len(rows), lambda offset, limit: rows[offset:offset + limit], keep_id=keep_id)

    def clear(self) -> None:
        self.set_source(0, lambda offset, limit: [])

    @property
    def row_count(self) -> int:
        return self._db_total + len(self._kept)

    def _db_offset(self, index: int) -> int:
        return index - bisect_left(self._kept_sorted, index)

    def _load_page(self, page: int) -> list[Memory]:
        rows = self._pages.get(page)
        if rows is not None:
            self._pages.move_to_end(page)
            return rows
        start = page * self.page_size
        end = min(start + self.page_size, self.row_count)
        kept_here = [i for i in self._kept_sorted if start <= i < end]
        want = (end - start) - len(kept_here)
        fetched: list[Memory] = []
        if want > 0 and self._fetch is not None:
            self.fetch_calls += 1
            fetched = list(self._fetch(self._db_offset(start), want))
            self.rows_fetched += len(fetched)
        rows, it = [], iter(fetched)
        for i in range(start, end):
            m = self._kept.get(i) if i in self._kept else next(it, None)
            if m is None:
                break  # the database has fewer rows than counted (changed underneath): stop short
            rows.append(m)
        self._pages[page] = rows
        while len(self._pages) > self.max_pages:
            old, _ = self._pages.popitem(last=False)
            self._strips.pop(old, None)
        return rows

    def memory_at(self, index: int) -> Memory | None:
        if not 0 <= index < self.row_count:
            return None
        page, row = divmod(index, self.page_size)
        rows = self._load_page(page)
        return rows[row] if row < len(rows) else None

    def current(self) -> Memory | None:
        return self.memory_at(self.cursor_row)

    def current_id(self) -> str | None:
        m = self.current()
        return m.id if m is not None else None

    def loaded(self) -> Iterator[tuple[int, Memory]]:
        """(index, memory) for the rows read so far, in order."""
        for page in sorted(self._pages):
            for row, m in enumerate(self._pages[page]):
                yield page * self.page_size + row, m

    def ids(self) -> list[str]:
        return [m.id for _, m in self.loaded()]

    def index_of(self, memory_id: str) -> int | None:
        for index, m in self.loaded():
            if m.id == memory_id:
                return index
        return None

    def _find_near(self, memory_id: str, index: int) -> int | None:
        for i in (index, index - 1, index + 1):
            m = self.memory_at(i)
            if m is not None and m.id == memory_id:
                return i
        return self.index_of(memory_id)

    def replace_memory(self, m: Memory, *, listed: bool | None = None) -> bool:
        """Redraw a changed memory in place. `listed` says whether it is still in the database's
        list (False: it stays shown but the rows after it read one offset earlier)."""
        index = self.index_of(m.id)
        if index is None:
            return False
        page, row = divmod(index, self.page_size)
        self._pages[page][row] = m
        if listed is False and index not in self._kept:
            self._kept[index] = m
            self._kept_sorted = sorted(self._kept)
            self._db_total -= 1
        elif listed is True and index in self._kept:
            del self._kept[index]
            self._kept_sorted = sorted(self._kept)
            self._db_total += 1
        elif index in self._kept:
            self._kept[index] = m
        self._strips.get(page, {}).pop(row, None)
        self.refresh()
        return True

    # -- cursor and scrolling ---------------------------------------------------------------

    @property
    def rows_visible(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _update_virtual_size(self) -> None:
        self.virtual_size = Size(0, self.row_count + 1 if self.row_count else 0)

    def _set_cursor(self, index: int, *, force: bool = False) -> None:
        index = max(0, min(index, self.row_count - 1)) if self.row_count else 0
        old = self.cursor_row
        self.set_reactive(MemoryList.cursor_row, index)
        self._scroll_cursor_into_view()
        if old != index:
            self._refresh_row(old)
            self._refresh_row(index)
        self._post_highlight(force=force)

    def move_cursor(self, *, row: int | None = None, **_ignored) -> None:
        if row is not None:
            self._set_cursor(row)

    def _scroll_cursor_into_view(self) -> None:
        if not self.size.height:
            return
        y, top, height = self.cursor_row, round(self.scroll_y), self.rows_visible
        if y < top:
            self.scroll_to(y=y, animate=False, immediate=True)
        elif y >= top + height:
            self.scroll_to(y=y - height + 1, animate=False, immediate=True)

    def _refresh_row(self, index: int) -> None:
        y = index - round(self.scroll_y) + 1
        if 1 <= y < self.size.height:
            self.refresh_line(index + 1)  # a virtual line: the header is line 0

    def _post_highlight(self, force: bool = False) -> None:
        key = (self.cursor_row, self.current_id() if self.row_count else None)
        if force or key != self._last_highlight:
            self._last_highlight = key
            message = self.Highlighted(self, key[0], key[1])
            if self.on_highlight is not None:
                # Called at once, not posted: the detail pane then changes in the same frame as
                # the list, instead of a message hop (and a second frame) later.
                self.on_highlight(message)
            else:
                self.post_message(message)

    def on_resize(self) -> None:
        self._scroll_cursor_into_view()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if not self._prefetch_pending and self.is_mounted:
            self._prefetch_pending = True
            self.call_after_refresh(self._prefetch)

    def _prefetch(self) -> None:
        """After a frame is drawn, read the page the next screen or two will need (above or
        below), so a key that crosses a page boundary does not wait for the database."""
        self._prefetch_pending = False
        top = round(self.scroll_y)
        ahead = 2 * self.rows_visible
        for index in (top + self.rows_visible + ahead, top - ahead):
            if 0 <= index < self.row_count and index // self.page_size not in self._pages:
                self._load_page(index // self.page_size)

    def on_focus(self) -> None:
        self._refresh_row(self.cursor_row)

    def on_blur(self) -> None:
        self._refresh_row(self.cursor_row)

    def action_cursor_up(self) -> None:
        self._set_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self._set_cursor(self.cursor_row + 1)

    def action_page_down(self) -> None:
        step = self.rows_visible
        self.scroll_to(y=min(self.scroll_y + step, self.max_scroll_y), animate=False, immediate=True)
        self._set_cursor(self.cursor_row + step)

    def action_page_up(self) -> None:
        step = self.rows_visible
        self.scroll_to(y=max(self.scroll_y - step, 0), animate=False, immediate=True)
        self._set_cursor(self.cursor_row - step)

    def action_scroll_top(self) -> None:
        self._set_cursor(0)

    def action_scroll_bottom(self) -> None:
        self._set_cursor(self.row_count - 1)

    def action_select_cursor(self) -> None:
        if self.row_count:
            self.post_message(self.Selected(self, self.cursor_row, self.current_id()))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        index = round(self.scroll_y) + offset.y - 1
        if 0 <= index < self.row_count:
            event.stop()
            if index == self.cursor_row:
                self.action_select_cursor()
            else:
                self._set_cursor(index)

    # -- rendering ----------------------------------------------------------------------------

    @property
    def text_width(self) -> int:
        width = self.size.width or (self.app.size.width if self.app else 80)
        padding = 2 * CELL_PADDING * len(COLUMNS)
        return max(10, width - _FIXED - padding - 1)

    def _widths(self) -> list[int]:
        return [w if key != "text" else self.text_width for key, _, w in COLUMNS]

    def _line(self, cells: list[Text], widths: list[int]) -> list[Segment]:
        pad = Segment(" " * CELL_PADDING)
        console = self.app.console
        segments: list[Segment] = []
        for cell, width in zip(cells, widths):
            segments.append(pad)
            plain = cell.plain
            size = cell_len(plain)
            if not cell.spans and size <= width and "\n" not in plain:
                # The usual cell: one style, fits. Skip rich's copy/truncate/render.
                style = self._style_cache.get(cell.style)
                if style is None:
                    style = self._style_cache[cell.style] = console.get_style(cell.style)
                segments.append(Segment(plain + " " * (width - size), style or None))
            else:
                cell = cell.copy()
                cell.truncate(width, overflow="ellipsis", pad=True)
                segments.extend(cell.render(console, end=""))
            segments.append(pad)
        return segments

    def _row_strip(self, index: int, width: int) -> Strip | None:
        page, row = divmod(index, self.page_size)
        key = (width, self.text_width)
        if key != self._strip_key:
            self._strip_key = key
            self._strips.clear()
            self._header = None
        strips = self._strips.setdefault(page, {})
        strip = strips.get(row)
        if strip is None:
            m = self.memory_at(index)
            if m is None or self.cells_for is None:
                return None
            segments = self._line(self.cells_for(m, self.text_width), self._widths())
            strip = Strip(segments).crop_extend(0, width, None)
            strips = self._strips.setdefault(page, {})  # memory_at may have evicted pages
            strips[row] = strip
        return strip

    def render_lines(self, crop):
        # One style lookup per repaint, not per line.
        self._styles = (self.rich_style, self.get_component_rich_style("memory-list--header"),
                        self.get_component_rich_style("memory-list--cursor"))
        try:
            return super().render_lines(crop)
        finally:
            self._styles = None

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        styles = self._styles or (self.rich_style, self.get_component_rich_style("memory-list--header"),
                                  self.get_component_rich_style("memory-list--cursor"))
        base, header_style, cursor_style = styles
        if y == 0:
            if self._header is None or self._strip_key != (width, self.text_width):
                self._strip_key = (width, self.text_width)
                self._strips.clear()
                labels = [Text(label) for _, label, _ in COLUMNS]
                self._header = Strip(self._line(labels, self._widths())).crop_extend(0, width, None)
            return self._header.apply_style(base + header_style)
        index = round(self.scroll_y) + y - 1
        strip = self._row_strip(index, width) if index < self.row_count else None
        if strip is None:
            return Strip.blank(width, base)
        if index == self.cursor_row:
            return strip.apply_style(base + cursor_style)
        return strip.apply_style(base)

    def cells(self, memory_id: str) -> list[Text] | None:
        """The rendered cells of a loaded row (for tests)."""
        index = self.index_of(memory_id)
        if index is None or self.cells_for is None:
            return None
        return self.cells_for(self.memory_at(index), self.text_width)


class DetailPane(ScrollView, can_focus=True):
    """Full text, metadata, provenance and history of the highlighted memory.

    A Line-API view too: the renderable is rendered once into lines at the pane's width, so a new
    memory costs one rich render, not a layout of the whole screen."""

    DEFAULT_CSS = """
    DetailPane {
        overflow-x: hidden;
        overflow-y: scroll;
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._renderable: RenderableType = Text("")
        self._lines: list[Strip] = []
        self._rendered_width = -1

    def show(self, renderable: RenderableType) -> None:
        self._renderable = renderable
        self._rendered_width = -1
        self._render_lines()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def _render_lines(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._rendered_width:
            return
        console = self.app.console
        lines = console.render_lines(self._renderable, console.options.update(width=width, height=None),
                                     pad=False)
        self._lines = [Strip(line) for line in lines]
        self._rendered_width = width
        size = Size(width, len(self._lines))
        if size == self.virtual_size:
            return
        if self.size.height and self.show_vertical_scrollbar and hasattr(self, "_scroll_update"):
            # The vertical scrollbar is always shown (overflow-y: scroll) and the width is fixed, so
            # a new height changes no layout: update the scrollbar, not the whole screen.
            self.set_reactive(DetailPane.virtual_size, size)
            self._scroll_update(size)
        else:
            self.virtual_size = size

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # Textual calls this in the layout, before the frame is drawn (on_resize comes a frame
        # later): the first frame then already has the scrollbar's thumb for the lines.
        changed = super()._size_updated(size, virtual_size, container_size, layout)
        self._render_lines()
        return changed

    def on_resize(self) -> None:
        self._render_lines()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if width != self._rendered_width:
            self._render_lines()
        index = round(self.scroll_y) + y
        base = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        strip = self._lines[index].crop_extend(0, width, None)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(index)) is not None:
            start, end = span
            end = strip.cell_length if end == -1 else min(end, strip.cell_length)
            if start < end:
                chosen = self.screen.get_component_rich_style("screen--selection")
                strip = Strip.join([strip.crop(0, start), strip.crop(start, end).apply_style(chosen),
                                    strip.crop(end)])
        return strip.apply_style(base).apply_offsets(0, index)

    def text(self) -> str:
        """The pane's text (what a mouse selection copies from)."""
        return "\n".join(strip.text.rstrip() for strip in self._lines)

    def get_selection(self, selection):
        return selection.extract(self.text()), "\n"

    def selection_updated(self, selection) -> None:
        self.refresh()


class LiteralInput(Input):
    """An Input that shows what it holds literally. A search given with `pmem tui --search` or
    pasted may hold terminal escapes (OSC 0 sets the window title); Input would write them to
    the terminal raw. They are shown as escapes (`\\x1b]0;`), as everywhere else, and `raw`
    gives the text with the characters that were really given."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._given = ""  # every raw text that came in: the characters `raw` may turn back

    def show(self, text: str) -> None:
        """Set the value to `text`, shown literally."""
        self._given = text
        self.value = visible(text)

    def replace(self, text: str, start: int, end: int) -> None:
        self._given += text
        super().replace(visible(text), start, end)

    @property
    def raw(self) -> str:
        return restore_hidden(self.value, self._given)

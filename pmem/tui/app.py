"""The pmem TUI: a memory list beside a detail pane, search as you type, and every fix a key away.

One factory, `make_app`, builds the app for `pmem tui`, the tests and the benchmark.

Threads and SQLite: the main store (`app.store`) is used only on the UI thread, for quick reads and
writes. Anything slow — search (it may load the embedding model), text edits (they re-embed), undo,
dream — runs in a thread worker on a second connection (`app.background()`), one worker at a time
behind a lock. SQLite's WAL lets the two connections read while the other writes.
"""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static
from textual.worker import get_current_worker

from .. import notices, timeutil
from ..display import visible
from ..errors import NotFound, PmemError
from ..records import Memory
from ..scope import auto_scope, read_filter
from ..search import MODES
from ..search import search as library_search
from ..service import MemoryStore
from ..store import Filter
from . import render
from .paging import StorePager
from .widgets import DetailPane, LiteralInput, MemoryList


def screens():
    """Dialogs load on first use: they are not needed for the first paint."""
    from . import screens as module

    return module


_AUTO = object()  # `project` not given: the project of the working directory

# Neighbours the detail pane shows on each side of a threaded memory, and the most `T` lists.
THREAD_CONTEXT = 2
THREAD_LISTING = 500


class MainScreen(Screen[None]):
    AUTO_FOCUS = "#list"  # focused as it mounts (not the search box first, then the list); dialogs keep "*"


class PmemApp(App[None]):
    CSS_PATH = "pmem.tcss"
    TITLE = "pmem"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("slash", "search", "Search"),
        Binding("question_mark", "help", "Help"),
        Binding("p", "pin", "Pin"),
        Binding("x", "expire", "Expire"),
        Binding("e", "edit", "Edit"),
        Binding("E", "external_edit", "$EDITOR", show=False),
        Binding("t", "tags", "Tags"),
        Binding("d", "forget", "Forget"),
        Binding("P", "purge", "Purge", show=False),
        Binding("r", "restore", "Restore"),
        Binding("u", "undo", "Undo"),
        Binding("f", "filters", "Filter"),
        Binding("D", "dream", "Dream", show=False),
        Binding("C", "conflicts", "Sync conflicts", show=False),
        Binding("M", "cycle_mode", "Search mode", show=False),
        Binding("T", "thread", "Thread", show=False),
        Binding("S", "toggle_scope", "Scope", show=False),
        Binding("ctrl+r", "reload", "Reload", show=False),
        Binding("escape", "clear_search", "Clear search", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, store: MemoryStore, *, owns_store: bool = False, now: str | None = None,
                 search_debounce: float = 0.25, search_mode: str = "hybrid", page_size: int = 100,
                 search_limit: int = 50, dream: Any = None,
                 search_fn: Callable[..., list] | None = None,
                 on_ready: Callable[["PmemApp"], None] | None = None,
                 initial_query: str | None = None, detail_throttle: float = 0.08,
                 project: str | None | object = _AUTO, project_only: bool = False) -> None:
        super().__init__()
        self.store = store
        self.owns_store = owns_store
        self.fixed_now = now
        self.search_debounce = search_debounce
        self.search_mode = search_mode if search_mode in MODES else "hybrid"
        self.page_size = page_size
        self.search_limit = search_limit
        self.search_fn = search_fn or library_search
        # The project `S` narrows to (global memories plus its own); None outside any project.
        self.project: str | None = auto_scope() if project is _AUTO else project  # type: ignore[assignment]
        self.flt = read_filter(self.project) if project_only else Filter()
        self.query_text = ""
        self.search_gen = 0
        self.shown_gen = 0
        self.shown_query: str | None = None  # the query whose results the list shows
        self._keep_after_search: str | None = None
        self.total = 0
        self.hits_shown: int | None = None
        self.model_state = "unloaded"  # unloaded, loading, ready, failed
        self._dream = dream
        self._on_ready = on_ready
        self._initial_query = initial_query
        self._ready_fired = False
        self._debounce: Timer | None = None
        self._detail_timer: Timer | None = None
        self._detail_pending = False
        self.detail_throttle = detail_throttle
        self._status_text = ""
        self._bg_lock = threading.Lock()
        self._bg_store: MemoryStore | None = None
        self._pager: StorePager | None = None
        self._stop_notices: Callable[[], None] | None = None

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self._breakpoint_classes()
        with Vertical(id="main"):
            yield LiteralInput(placeholder="search: type to narrow, enter to browse, esc to clear", id="search")
            with Container(id="body"):
                yield MemoryList(id="list", page_size=self.page_size)
                yield DetailPane(id="detail")
            yield Static(Text(""), id="status", markup=False)
        # The footer's row, held until the first paint: Textual's Footer is a widget per key,
        # and styling them was ~40 ms of the 0.3 s first paint (docs/decisions/0026-scale-sixth-round.md).
        yield Static(Text(""), id="keys-slot", markup=False)

    def get_default_screen(self) -> Screen[None]:
        return MainScreen(id="_default")

    def on_mount(self) -> None:
        # The library's notices (a server that stopped answering...) become notifications: on
        # stderr Textual would only capture them, unseen. notify() is thread-safe.
        self._stop_notices = notices.listen(
            lambda message: self.notify(message, severity="warning", markup=False, timeout=6))
        self.title = visible(f"pmem — {self.store.path}")
        search = self.query_one("#search", LiteralInput)
        search.display = False
        table = self.table
        table.cells_for = self._cells
        table.on_highlight = self._highlighted
        self.reload()
        if self._initial_query:
            self.action_search()
            search.show(self._initial_query)  # shown literally: a given query may hold escapes

    def _breakpoint_classes(self) -> None:
        """The screen's width class before its widgets are first styled. Textual sets it on the
        first resize, after the first layout: the whole screen was styled and laid out again, and
        the first frame had the other layout (docs/decisions/0007-tui-first-paint.md)."""
        width = self.size.width
        chosen = max((b for b in self.HORIZONTAL_BREAKPOINTS if width >= b[0]), default=None)
        for _, name in self.HORIZONTAL_BREAKPOINTS:
            self.screen.set_class(chosen is not None and name == chosen[1], name)

    def on_unmount(self) -> None:
        if self._stop_notices is not None:
            self._stop_notices()
        if self._bg_lock.acquire(timeout=2):
            try:
                if self._bg_store is not None:
                    self._bg_store.close()
                    self._bg_store = None
            finally:
                self._bg_lock.release()
        if self.owns_store:
            self.store.close()

    @property
    def table(self) -> MemoryList:
        return self.query_one("#list", MemoryList)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The list's keys act on the main screen only, never under a dialog or the dream screen.
        if action in self._MAIN_ACTIONS and len(self.screen_stack) > 1:
            return False
        return True

    _MAIN_ACTIONS = frozenset({"search", "help", "pin", "expire", "edit", "external_edit", "tags", "forget",
                               "purge", "restore", "undo", "filters", "dream", "conflicts", "cycle_mode", "reload",
                               "clear_search", "thread", "toggle_scope"})

    # -- time -----------------------------------------------------------------------------

    def now_iso(self) -> str:
        return self.fixed_now or self.store.clock()

    def now_dt(self) -> datetime:
        return datetime.fromisoformat(self.now_iso().replace("Z", "+00:00"))

    # -- background connection ------------------------------------------------------------

    @contextmanager
    def background(self) -> Iterator[MemoryStore]:
        """The worker-side store: a second connection, one worker at a time."""
        with self._bg_lock:
            if self._bg_store is None:
                if str(self.store.path) == ":memory:":
                    self._bg_store = self.store  # nothing to share a file with; the lock still serialises
                else:
                    self._bg_store = MemoryStore(self.store.path, config=self.store.config,
                                                 clock=self.store.clock)
            yield self._bg_store

    def dream_module(self) -> Any:
        return self._dream if self._dream is not None else importlib.import_module("pmem.dream")

    # -- filling the list -----------------------------------------------------------------

    def _cells(self, m: Memory, text_width: int) -> list[Text]:
        return render.row_cells(m, self.now_iso(), self.now_dt(), text_width)

    def _fetch_page(self, offset: int, limit: int) -> list[Memory]:
        """One page of the list, read when the view first needs one of its rows."""
        if self._pager is None:
            return []
        try:
            return self._pager(offset, limit)
        except PmemError as exc:
            self.error(str(exc))
            return []

    def reload(self, keep: str | None = None) -> None:
        """Read the list again from the database (or run the search again). The cursor stays on
        the same memory if it is still near the same place, else at the same position."""
        table = self.table
        keep = keep or table.current_id()
        keep_index = table.cursor_row
        if self.query_text.strip():
            self._keep_after_search = keep  # the same query again: stay on the same memory
            table.clear()
            self.start_search()
            return
        self.hits_shown = None
        self.shown_query = None
        try:
            self.total = self.store.count(self.flt)
        except PmemError as exc:
            self.error(str(exc))
            self.total = 0
        self._pager = StorePager(self.store, self.flt, self.total)
        table.set_source(self.total, self._fetch_page, keep_id=keep, keep_index=keep_index)
        self.update_status()
        self._fire_ready()

    def _fire_ready(self) -> None:
        if not self._ready_fired:
            self._ready_fired = True
            if self._on_ready is not None:
                self.call_after_refresh(self._on_ready, self)
            self.call_after_refresh(self._show_keys)

    def _show_keys(self) -> None:
        """The footer, in place of its row, once the list has been painted."""
        if not self.screen_stack or not self.screen_stack[0].is_attached:
            return  # the app is closing (quit before the first frame)
        main = self.screen_stack[0]  # a dialog may already be open over it
        for slot in main.query("#keys-slot"):
            slot.remove()
        footer = Footer()
        main.mount(footer)
        self.call_after_refresh(footer.refresh_bindings)  # the footer lists keys when told they changed

    def update_status(self) -> None:
        parts: list[str] = []
        if self.hits_shown is not None:
            plural = "s" if self.hits_shown != 1 else ""
            parts.append(f"{self.hits_shown} result{plural} for “{render.one_line(self.query_text, 30)}”")
            mode = self.search_mode if self.model_state == "ready" or self.search_mode == "keyword" else "keyword"
            if self.search_mode != "keyword" and self.model_state == "loading":
                mode += ", loading model…"
            elif self.search_mode != "keyword" and self.model_state == "failed":
                mode += " only"
            parts.append(mode)
        elif self.query_text.strip():
            parts.append("searching…")
        else:
            table = self.table
            rows = table.row_count
            parts.append(f"{table.cursor_row + 1 if rows else 0:,} of {rows:,} memories")
        parts.append(self.describe_scope())
        parts.append(self.describe_filter())
        text = " · ".join(p for p in parts if p)
        if text != self._status_text:
            self._status_text = text
            self.query_one("#status", Static).update(Text(text), layout=False)  # one line, fixed size

    def describe_scope(self) -> str:
        """Empty when every scope is shown (the default), else what `S` narrowed the list to."""
        scope = self.flt.scope
        if scope is None:
            return ""
        if self.project is None or scope == "global":
            return "scope: global only"
        return "scope: global + " + render.one_line(Path(scope).name or scope, 30)

    def describe_filter(self) -> str:
        f = self.flt
        bits = []
        if set(f.tiers) != {"core", "archival"}:
            bits.append("tier " + "+".join(f.tiers))
        if f.tags:
            bits.append("tags " + visible(" ".join(f.tags)))
        if f.include_expired:
            bits.append("+expired")
        if f.include_forgotten:
            bits.append("+forgotten")
        return ("filter: " + ", ".join(bits)) if bits else ""

    # -- detail pane ----------------------------------------------------------------------

    def current(self) -> Memory | None:
        mid = self.table.current_id()
        if mid is None:
            return None
        try:
            return self.store.get(mid)
        except PmemError:
            return None

    def detail_renderable(self, m: Memory):
        try:
            history = self.store.history(m.id)[-50:]
        except NotFound:
            history = []
        derived = self.store.get_many(m.derived_from) if m.derived_from else []
        thread = None
        if m.thread is not None:  # one indexed read each side, only for a threaded memory
            thread = self.store.thread_neighbours(m, THREAD_CONTEXT, THREAD_CONTEXT)
        return render.detail(m, self.now_iso(), self.now_dt(), history, derived, thread)

    def show_detail(self) -> None:
        pane = self.query_one("#detail", DetailPane)
        m = self.current()
        if m is None:
            pane.show(Text("No memories here. Press / to search, f for filters, ? for help."))
            return
        pane.show(self.detail_renderable(m))

    def _highlighted(self, event: MemoryList.Highlighted) -> None:
        # Throttled: the first move shows at once; while the cursor keeps moving (a held key),
        # the pane follows at most every `detail_throttle` seconds, so scrolling stays smooth.
        if self.detail_throttle <= 0:
            self.show_detail()
        elif self._detail_timer is None:
            self.show_detail()
            self._detail_pending = False
            self._detail_timer = self.set_timer(self.detail_throttle, self._detail_tick)
        else:
            self._detail_pending = True
        self.update_status()

    def _detail_tick(self) -> None:
        self._detail_timer = None
        if self._detail_pending:
            self._detail_pending = False
            self.show_detail()

    @on(MemoryList.Selected, "#list")
    def _selected(self, event: MemoryList.Selected) -> None:
        self.action_details()

    def action_details(self) -> None:
        m = self.current()
        if m is not None:
            self.push_screen(screens().DetailScreen(self.detail_renderable(m)))

    def action_thread(self) -> None:
        """The whole thread of the highlighted memory, in thread order, full screen."""
        m = self.current()
        if m is None:
            return
        if m.thread is None:
            self.notify(f"{m.id} is not in a thread", timeout=3)
            return
        before, after = self.store.thread_neighbours(m, THREAD_LISTING, THREAD_LISTING)
        self.push_screen(screens().DetailScreen(render.thread_listing(m, before, after)))

    def action_toggle_scope(self) -> None:
        """All memories, or the global ones plus this project's (what search inside it sees)."""
        if self.flt.scope is None:
            self.flt = read_filter(self.project, base=self.flt)
        else:
            self.flt = replace(self.flt, scope=None)
        self.notify(self.describe_scope() or "scope: all", timeout=2)
        self.reload()

    # -- refreshing after a change --------------------------------------------------------

    def _matches(self, mid: str) -> bool:
        return self.store.count(replace(self.flt, ids=(mid,))) == 1

    def refresh_memory(self, mid: str, matched_before: bool | None = None) -> None:
        """Redraw one row (it stays in place even if it no longer matches the filter, so the
        change can be seen and undone) and keep the paging offset true."""
        table = self.table
        try:
            m = self.store.get(mid)
        except PmemError:
            self.reload()
            return
        listed = None
        if matched_before is not None and self.hits_shown is None:
            matches = self._matches(mid)
            if matches != matched_before:
                self.total += int(matches) - int(matched_before)
                listed = matches
                if self._pager is not None:  # the store's list shifted by one from here on
                    self._pager.total = self.total
                    self._pager.forget_anchors()
        table.replace_memory(m, listed=listed)
        self.show_detail()
        self.update_status()

    def notify(self, message: str, *, title: str = "", **options: Any) -> None:
        """Every notification shows its text literally: messages carry ids, tags and errors that
        quote what a person typed, so controls and invisible characters are shown as escapes."""
        super().notify(visible(message), title=visible(title), **options)

    def error(self, message: str) -> None:
        self.notify(message, severity="error", markup=False, timeout=6)

    def _write(self, fn: Callable[[str], Any], message: Callable[[Memory], str] | None = None) -> None:
        """Run one library call on the highlighted memory, then redraw it."""
        m = self.current()
        if m is None:
            self.notify("No memory selected.", severity="warning")
            return
        try:
            before = self._matches(m.id)
            fn(m.id)
        except PmemError as exc:
            self.error(str(exc))
            return
        self.refresh_memory(m.id, before)
        if message:
            self.notify(message(m), markup=False, timeout=3)

    # -- actions --------------------------------------------------------------------------

    def action_pin(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")
        if m.pinned:
            self._write(self.store.unpin, lambda m: f"unpinned {m.id}")
        else:
            self._write(self.store.pin, lambda m: f"pinned {m.id}")

    def action_expire(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")

        def chosen(value: str | None) -> None:
            if not value:
                return
            try:
                at = None if value == "now" else timeutil.parse_when(value, direction=1, base=self.now_dt())
            except PmemError as exc:
                self.error(str(exc))
                return
            self._write(lambda mid: self.store.expire(mid, at=at),
                        lambda m: f"{m.id} expires {'now' if at is None else at}")

        self.push_screen(screens().ExpireScreen(), chosen)

    def action_forget(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")
        question = Text.assemble("Forget ", (m.id, "bold"), "?\n", render.one_line(m.text, 200),
                                 ("\n\n`r` restores it, `u` undoes.", "dim"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._write(self.store.forget, lambda m: f"forgot {m.id}")

        self.push_screen(screens().ConfirmScreen(question), answered)

    def action_purge(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")
        question = Text.assemble("Erase ", (m.id, "bold"), " for good?\n", render.one_line(m.text, 200),
                                 ("\n\nIts text and vector leave the database, its history and the "
                                  "backups. This cannot be undone.", "bold"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._write(self._purge, lambda m: f"purged {m.id}")

        self.push_screen(screens().ConfirmScreen(question), answered)

    def _purge(self, mid: str) -> None:
        from ..backup import purge_backups

        purge_backups(self.store.purge([mid])["purged"], config=self.store.config)

    def action_restore(self) -> None:
        self._write(self.store.restore, lambda m: f"restored {m.id}")

    def action_tags(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")

        def chosen(tags: list[str] | None) -> None:
            if tags is None:
                return
            add = [t for t in tags if t not in m.tags]
            remove = [t for t in m.tags if t not in tags]
            if add or remove:
                self._write(lambda mid: self.store.edit(mid, add_tags=add, remove_tags=remove),
                            lambda m: f"tags of {m.id}: {' '.join(tags) or 'none'}")

        self.push_screen(screens().TagsScreen(m.tags), chosen)

    def action_edit(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")

        def saved(text: str | None) -> None:
            if text is not None and text.strip() and text.strip() != m.text:
                self.edit_text(m.id, text)

        self.push_screen(screens().EditScreen(m.text), saved)

    def action_external_edit(self) -> None:
        m = self.current()
        if m is None:
            return self.notify("No memory selected.", severity="warning")
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        fd, name = tempfile.mkstemp(suffix=".md", text=True)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(m.text)
            try:
                with self.suspend():
                    rc = subprocess.call([*shlex.split(editor), name])
            except SuspendNotSupported:
                self.error("This terminal cannot hand over to an editor; use e to edit here.")
                return
            except OSError as exc:
                self.error(f"cannot run editor {editor!r}: {exc}")
                return
            if rc != 0:
                self.error(f"editor {editor!r} exited with {rc}; nothing changed")
                return
            text = Path(name).read_text(encoding="utf-8").strip()
        finally:
            try:
                os.unlink(name)
            except OSError:
                pass
        if not text:
            self.error("empty text; nothing changed (d forgets a memory)")
        elif text != m.text.strip():
            self.edit_text(m.id, text)

    @work(thread=True, group="write")
    def edit_text(self, mid: str, text: str) -> None:
        """A text change re-embeds, which may load the model: never on the UI thread."""
        try:
            with self.background() as store:
                store.edit(mid, text=text)
        except PmemError as exc:
            self.call_from_thread(self.error, str(exc))
            return
        self.call_from_thread(self._edited, mid)

    def _edited(self, mid: str) -> None:
        self.refresh_memory(mid)
        self.notify(f"edited {mid}", timeout=3)

    def action_undo(self) -> None:
        self.undo()

    @work(thread=True, group="write")
    def undo(self) -> None:
        try:
            with self.background() as store:
                op = store.undo()
        except PmemError as exc:
            self.call_from_thread(self.error, str(exc))
            return
        self.call_from_thread(self._undone, op)

    def _undone(self, op) -> None:
        self.reload()
        self.notify(f"undid {op.kind}: {render.one_line(op.summary, 60)}", markup=False, timeout=4)

    def action_reload(self) -> None:
        self.reload()

    def action_help(self) -> None:
        self.push_screen(screens().HelpScreen())

    def action_filters(self) -> None:
        def chosen(flt: Filter | None) -> None:
            if flt is not None:
                self.flt = replace(flt, scope=self.flt.scope)  # scope has its own key (S)
                self.reload()

        self.push_screen(screens().FilterScreen(self.flt), chosen)

    def action_dream(self) -> None:
        from .dream_review import DreamScreen

        def done(applied: bool | None) -> None:
            if applied:
                self.reload()

        self.push_screen(DreamScreen(), done)

    def action_conflicts(self) -> None:
        from .conflicts import ConflictsScreen

        def done(changed: bool | None) -> None:
            if changed:
                self.reload()

        self.push_screen(ConflictsScreen(), done)

    # -- search ---------------------------------------------------------------------------

    def action_search(self) -> None:
        search = self.query_one("#search", Input)
        search.display = True
        search.focus()
        self.ensure_model()

    def action_clear_search(self) -> None:
        search = self.query_one("#search", Input)
        if not search.display and not self.query_text:
            return
        search.value = ""
        search.display = False
        self.query_text = ""
        self.search_gen += 1  # anything still running is stale now
        self.table.focus()
        self.reload()

    def action_cycle_mode(self) -> None:
        self.search_mode = MODES[(MODES.index(self.search_mode) + 1) % len(MODES)]
        self.notify(f"search mode: {self.search_mode}", timeout=2)
        if self.search_mode != "keyword":
            self.ensure_model()
        if self.query_text.strip():
            self.start_search()

    @on(Input.Changed, "#search")
    def _query_changed(self, event: Input.Changed) -> None:
        self.query_text = self.query_one("#search", LiteralInput).raw
        self.search_gen += 1  # whatever is in flight answers an older query now
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        if not event.value.strip():
            self.reload()
            return
        if self.search_debounce > 0:
            self._debounce = self.set_timer(self.search_debounce, self.start_search)
        else:
            self.start_search()

    @on(Input.Submitted, "#search")
    def _query_submitted(self, event: Input.Submitted) -> None:
        self.table.focus()

    def start_search(self) -> None:
        self._debounce = None
        query = self.query_text
        if not query.strip():
            return
        self.search_gen += 1
        self.update_status()
        mode = self.search_mode if self.model_state == "ready" else "keyword"
        self.run_search(self.search_gen, query, self.flt, mode)

    @work(thread=True, exclusive=True, group="search")
    def run_search(self, gen: int, query: str, flt: Filter, mode: str) -> None:
        worker = get_current_worker()
        try:
            with self.background() as store:
                if worker.is_cancelled or gen != self.search_gen:
                    return
                # the browser shows every match: a fact and its source are both there to inspect
                hits = self.search_fn(store, query, flt, limit=self.search_limit, mode=mode, collapse=False)
        except PmemError as exc:
            self.call_from_thread(self._search_failed, gen, str(exc))
            return
        self.call_from_thread(self.show_hits, gen, hits)

    def show_hits(self, gen: int, hits: list) -> None:
        if gen != self.search_gen or not self.query_text.strip():
            return  # a newer query was typed: these results are stale
        self.shown_gen = gen
        table = self.table
        # Results of a new query: the best one (row 0) is highlighted, so `p` or `d` acts on
        # it and not on whatever was highlighted before. The same query run again (a mode change,
        # the model ready, a reload after a change) keeps the memory the person was on.
        same = self.query_text == self.shown_query
        keep = (table.current_id() or self._keep_after_search) if same else None
        self._keep_after_search = None
        self.shown_query = self.query_text
        self.hits_shown = len(hits)
        table.set_memories([h.memory for h in hits], keep_id=keep)
        self.update_status()

    def _search_failed(self, gen: int, message: str) -> None:
        if gen == self.search_gen:
            self.error(message)

    def ensure_model(self) -> None:
        """Load the embedding model in a worker the first time search is opened."""
        if self.model_state == "unloaded" and self.search_mode != "keyword":
            self.model_state = "loading"
            self.load_model()

    @work(thread=True, group="model")
    def load_model(self) -> None:
        from ..models.embed import load_embedder

        try:
            with self.background() as store:
                # kept where the store keeps its models; a running `pmem serve` answers at once
                load_embedder(store.embed_model_name(), threads=store.config.threads,
                              server=store.config.server, idle_minutes=store.config.server_idle_minutes,
                              cache=store.vectors.models)
                store.check_model()
        except PmemError as exc:
            self.call_from_thread(self._model_failed, str(exc))
            return
        self.call_from_thread(self._model_ready)

    def _model_ready(self) -> None:
        self.model_state = "ready"
        if self.query_text.strip():
            self.start_search()
        else:
            self.update_status()

    def _model_failed(self, message: str) -> None:
        self.model_state = "failed"
        self.notify(f"semantic search is off: {message}", severity="warning", markup=False, timeout=8)
        self.update_status()


def make_app(store_or_path: MemoryStore | str | Path | None = None, **options: Any) -> PmemApp:
    """The one way to build the TUI: `pmem tui`, the tests and the benchmark all come here.

    `store_or_path`: an open MemoryStore (the caller closes it), or a database path / None (the
    default database), which the app opens and closes. Options: now (fixed ISO time for ages and
    expiry, for tests), search_debounce (seconds), search_mode, page_size, search_limit, dream (a
    stand-in for `pmem.dream`), search_fn, on_ready (called after the first page is painted),
    initial_query, detail_throttle (seconds between detail redraws while the cursor moves), project
    (the project `S` narrows to; default: the working directory's), project_only (start narrowed).
    """
    if isinstance(store_or_path, MemoryStore):
        return PmemApp(store_or_path, owns_store=False, **options)
    return PmemApp(MemoryStore(store_or_path), owns_store=True, **options)

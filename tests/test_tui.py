"""The TUI: every action through Pilot, asserting what landed in the database."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import subprocess
import sys
import threading

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.store import Filter, MemoryStore  # noqa: E402

from fakes import TUI_NOW as NOW  # noqa: E402
from fakes import FakeDream  # noqa: E402

SIZE = (80, 24)


def make(store, **kw):
    from pmem.tui import make_app

    kw.setdefault("now", NOW)
    kw.setdefault("search_debounce", 0)
    kw.setdefault("detail_throttle", 0)
    return make_app(store, **kw)

async def retag(app, pilot, memory_id, value):
    """Open the tags dialog on a memory, type `value`, confirm."""
    from textual.widgets import Input

    select(app, memory_id)
    await pilot.press("t")
    await pilot.pause()
    app.screen.query_one(Input).value = value
    await pilot.press("enter")
    await pilot.pause()



def select(app, memory_id: str) -> None:
    app.table.move_cursor(row=app.table.index_of(memory_id))


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def settle(app, pilot) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def actions(store, memory_id):
    return [e.action for e, _ in store.history(memory_id)]


# -- list and detail ---------------------------------------------------------------------------

def frame_cells(update) -> list[list[tuple]]:
    """A full frame (Textual's LayoutUpdate), row by row, as (character, style) per cell."""
    return [[(ch, seg.style) for strip in row for seg in strip for ch in seg.text] for row in update.strips]


def drawn(renderable, width: int) -> list[list[tuple]]:
    """Each line's visible cells as (character, bold, dim, italic); spaces left out but counted."""
    from rich.console import Console

    console = Console(width=width, force_terminal=True, color_system="truecolor")
    lines = console.render_lines(renderable, console.options.update(width=width, height=None), pad=False)
    out = []
    for line in lines:
        cells, x = [], 0
        for seg in line:
            for ch in seg.text:
                if ch != " ":
                    style = seg.style
                    cells.append((x, ch, bool(style and style.bold), bool(style and style.dim),
                                  bool(style and style.italic)))
                x += 1
        out.append(cells)
    while out and not out[-1]:
        out.pop()
    return out


@pytest.mark.parametrize("width", [12, 19, 24, 33, 47, 77, 140])
def test_grid_draws_what_a_rich_table_grid_drew(width):
    """The detail pane's grids (render.Grid) against rich's Table.grid, the spec they replace:
    the same characters in the same cells with the same styles, wrapped and cut the same way."""
    from rich.table import Table
    from rich.text import Text

    from pmem.tui.render import Grid

    rows = [
        (Text("tier"), Text("archival")),
        (Text("created"), Text("2025-02-28T09:00:00Z (3 days ago)", style="italic")),
        (Text("scope"), Text("/home/someone/projects/a-very-long-project-directory-name/src", overflow="fold")),
        (Text("text"), Text("a longer sentence of several words that has to wrap at narrow widths, twice")),
        (Text("word"), Text("Supercalifragilisticexpialidocious-and-some-more-without-spaces")),
        (Text(""), Text("an empty key")),
        (Text("meta.source"), Text("")),
    ]
    three = [(Text("2025-02-28 09:00"), Text("create"), Text("created")),
             (Text("2025-03-01 10:30"), Text("retag"), Text("tags +work -home; tier archival → core, and more"))]
    for styles, data in ((("bold", ""), rows), (("dim", "bold", ""), three)):
        grid, table = Grid(*styles), Table.grid(padding=(0, 1))
        for style in styles[:-1]:
            table.add_column(style=style, no_wrap=True)
        table.add_column(style=styles[-1])
        for row in data:
            grid.add_row(*row)
            table.add_row(*row)
        assert drawn(grid, width) == drawn(table, width), (styles, width)


@pytest.mark.parametrize("size", [(80, 24), (130, 34)])
async def test_first_frame_is_the_settled_screen(fake_config, tmp_path, size):
    """The first frame drawn with the list in it is already what the screen settles to (the
    width's layout, both scrollbars' thumbs, the detail of the first memory); only the footer's
    keys come a frame later, in the last row."""
    store = MemoryStore(tmp_path / "many.db", config=fake_config, clock=lambda: NOW)
    store.insert([Memory(id=f"m{i:03d}", text=f"note {i}: " + "a longer line of words " * (i % 12))
                  for i in range(60)])
    app = make(store)
    first: list = []
    draw = app._display

    def display(screen, update) -> None:
        if update is not None and not first and app.table.rows_fetched:
            first.append(frame_cells(update))
        draw(screen, update)

    app._display = display  # type: ignore[method-assign]
    try:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            settled = frame_cells(app.screen._compositor.render_full_update())
            assert app.table.ids()[0] == "m059"
            assert "note 59" in screen_text(app)
    finally:
        store.close()
    assert first, "no frame with the list was drawn"
    assert len(first[0]) == size[1]
    assert first[0][:-1] == settled[:-1]


async def test_list_and_detail(tstore):
    app = make(tstore)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.table.ids() == ["a5", "a4", "a3", "a2", "a1"]
        assert app.total == 5
        select(app, "a3")
        await pilot.pause()
        text = screen_text(app)
        assert "Dana approves deploys to production" in text
        assert "slack" in text  # provenance
        assert "a3" in text


async def test_enter_opens_details_with_provenance_and_history(tstore):
    app = make(tstore)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        select(app, "a5")
        await pilot.press("enter")
        await pilot.pause()
        from pmem.tui.screens import DetailScreen

        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert "derived from" in text and "a2" in text and "cabin wifi" in text
        assert "History" in text and "import" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)


def seed_thread(store) -> None:
    """Six turns of one thread (t0..t5, inserted out of order) plus one with markup and escapes."""
    turns = [Memory(id=f"t{i}", text=f"turn number {i} of the trip chat", tier="episodic", thread="trip chat",
                    thread_pos=i, source="mcp:claude-code",
                    created_at=f"2025-02-0{i + 1}T09:00:00Z", updated_at=f"2025-02-0{i + 1}T09:00:00Z")
             for i in (3, 0, 5, 1, 4, 2)]
    store.insert(turns, kind="import", summary="thread")


def thread_id(line: str) -> str:
    """The id in a row of the thread section: `▸ #4 t3 turn number…`."""
    return line.replace("▸", " ").split()[1]


async def test_detail_shows_the_thread_around_a_memory(tstore):
    seed_thread(tstore)
    app = make(tstore)
    app.flt = Filter(tiers=("core", "archival", "episodic"))
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.pause()
        select(app, "t3")
        await pilot.pause()
        pane = app.query_one("#detail").text()
        lines = pane.splitlines()
        assert any("thread" in line and "trip chat · #4" in line for line in lines)
        assert "mcp:claude-code" in pane and "scope" in pane and "global" in pane
        rows = [line for line in lines[lines.index("Thread"):] if "turn number" in line]
        # two before and two after, in thread order, the memory itself marked
        assert [thread_id(line) for line in rows] == ["t1", "t2", "t3", "t4", "t5"]
        assert [line.lstrip().startswith("▸") for line in rows] == [False, False, True, False, False]
        select(app, "t0")  # at the start of the thread: nothing before it
        await pilot.pause()
        lines = app.query_one("#detail").text().splitlines()
        rows = [line for line in lines[lines.index("Thread"):] if "turn number" in line]
        assert [thread_id(line) for line in rows] == ["t0", "t1", "t2"]
        select(app, "a3")  # no thread: no thread section
        await pilot.pause()
        assert "Thread" not in app.query_one("#detail").text().splitlines()


async def test_thread_neighbours_are_shown_literally(tstore):
    tstore.insert([Memory(id="m0", text="[bold]x[/] \x1b[31mred\x1b[0m", thread="[red]t[/]", thread_pos=0,
                          created_at="2025-02-01T09:00:00Z", updated_at="2025-02-01T09:00:00Z"),
                   Memory(id="m1", text="plain", thread="[red]t[/]", thread_pos=1,
                          created_at="2025-02-02T09:00:00Z", updated_at="2025-02-02T09:00:00Z")], kind="import")
    app = make(tstore)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        select(app, "m1")
        await pilot.pause()
        text = screen_text(app)
        assert "[bold]x[/]" in text and "[red]t[/] · #2" in text
        assert "\x1b" not in text and "\\x1b[31mred" in text


async def test_T_lists_the_whole_thread(tstore):
    seed_thread(tstore)
    app = make(tstore)
    app.flt = Filter(tiers=("episodic",))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        select(app, "t2")
        await pilot.press("T")
        await pilot.pause()
        from pmem.tui.screens import DetailScreen

        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert "6 shown" in text
        order = [text.index(f"turn number {i} ") for i in range(6)]
        assert order == sorted(order)
        await pilot.press("escape")
        await pilot.pause()
        app.flt = Filter()
        app.reload()
        await pilot.pause()
        select(app, "a3")  # not in a thread: a note, no screen
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)


async def test_S_limits_list_and_search_to_global_and_this_project(tstore, tmp_path):
    project = str(tmp_path / "proj")
    other = str(tmp_path / "other")
    tstore.insert([Memory(id="p1", text="cabin rules for this project", scope=project,
                          created_at="2025-03-01T09:00:00Z", updated_at="2025-03-01T09:00:00Z"),
                   Memory(id="o1", text="cabin rules elsewhere", scope=other,
                          created_at="2025-03-01T10:00:00Z", updated_at="2025-03-01T10:00:00Z")], kind="import")
    app = make(tstore, project=project, search_mode="keyword")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1", "o1"}
        assert "scope" not in app.query_one("#status").render().plain
        await pilot.press("S")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1"}
        assert "scope: global + proj" in app.query_one("#status").render().plain
        select(app, "p1")
        await pilot.pause()
        assert project in "".join(app.query_one("#detail").text().split())  # the path may wrap
        await pilot.press("slash", *"rules")
        await settle(app, pilot)
        assert app.table.ids() == ["p1"]
        await pilot.press("escape", "S")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5", "p1", "o1"}
        await pilot.press("S", "f")  # the filter dialog keeps the scope
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.flt.scope == project


async def test_S_outside_a_project_shows_global_only(tstore):
    tstore.insert([Memory(id="p1", text="somewhere", scope="/some/project",
                          created_at="2025-03-01T09:00:00Z", updated_at="2025-03-01T09:00:00Z")], kind="import")
    app = make(tstore, project=None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "p1" in app.table.ids()
        await pilot.press("S")
        await pilot.pause()
        assert "p1" not in app.table.ids() and app.total == 5
        assert "scope: global only" in app.query_one("#status").render().plain


# -- actions -----------------------------------------------------------------------------------

async def test_pin_and_unpin(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("p")
        await pilot.pause()
        assert tstore.get("a3").pinned and tstore.get("a3").tier == "core"
        await pilot.press("p")
        await pilot.pause()
        assert not tstore.get("a3").pinned
        assert actions(tstore, "a3")[-2:] == ["pin", "unpin"]


async def test_expire_now(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("enter")  # the first choice: now
        await pilot.pause()
        assert tstore.get("a3").expires_at == NOW
        assert actions(tstore, "a3")[-1] == "expire"
        # The row stays, marked, so the change can be seen and undone.
        assert "a3" in app.table.ids()
        assert "expired" in screen_text(app)


async def test_expire_in_a_week_and_at_a_date(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("x", "down", "down", "enter")
        await pilot.pause()
        assert tstore.get("a3").expires_at == "2025-03-08T12:00:00Z"
        await pilot.press("x", "tab", *"2025-12-31", "enter")
        await pilot.pause()
        assert tstore.get("a3").expires_at == "2025-12-31T00:00:00Z"


async def test_expire_bad_date_changes_nothing(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("x", "tab", *"someday", "enter")
        await pilot.pause()
        assert tstore.get("a3").expires_at is None


async def test_inline_edit(tstore):
    from textual.widgets import TextArea

    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one(TextArea).text = "Dana and Lee approve deploys"
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert tstore.get("a3").text == "Dana and Lee approve deploys"
        assert actions(tstore, "a3")[-1] == "edit"
        assert "Dana and Lee" in screen_text(app)


async def test_inline_edit_cancel(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("e", "x", "escape")
        await settle(app, pilot)
        assert tstore.get("a3").text == "Dana approves deploys to production"


async def test_external_editor(tstore, monkeypatch):
    from pmem.tui.app import PmemApp

    monkeypatch.setenv("EDITOR", f"{sys.executable} -c \"import sys; p=sys.argv[1]; "
                                 f"t=open(p).read(); open(p,'w').write(t.replace('Dana', 'Robin'))\"")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setattr(PmemApp, "suspend", lambda self: contextlib.nullcontext())
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("E")
        await settle(app, pilot)
        assert tstore.get("a3").text == "Robin approves deploys to production"


async def test_tags(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await retag(app, pilot, "a3", "ops, oncall")
        assert tstore.get("a3").tags == ["oncall", "ops"]
        assert actions(tstore, "a3")[-1] == "retag"


async def test_forget_asks_first(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert tstore.get("a3").forgotten_at is None
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert tstore.get("a3").forgotten_at == NOW
        assert app.total == 4


async def test_purge_asks_first_then_erases(tstore):
    from pmem.errors import NotFound

    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("P")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert tstore.get("a3").text.startswith("Dana")
        await pilot.press("P")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        with pytest.raises(NotFound):
            tstore.get("a3")
        assert all(e.before is None and e.after is None for e, _ in tstore.history("a3"))
        assert app.total == 4 and "a3" not in screen_text(app)


async def test_restore(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("d", "y")
        await pilot.pause()
        assert tstore.get("a3").forgotten_at is not None
        await pilot.press("r")
        await pilot.pause()
        assert tstore.get("a3").forgotten_at is None
        assert actions(tstore, "a3")[-2:] == ["forget", "restore"]
        assert app.total == 5


async def test_undo(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("p")
        await pilot.pause()
        assert tstore.get("a3").pinned
        await pilot.press("u")
        await settle(app, pilot)
        assert not tstore.get("a3").pinned
        assert tstore.operations(1)[0].undone_at is not None
        assert app.table.current_id() == "a3"


async def test_action_without_selection_is_harmless(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "empty.db", config=fake_config, clock=lambda: NOW)
    app = make(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("p", "x", "d", "r", "t", "e")
        await pilot.pause()
        assert app.table.row_count == 0
    store.close()


# -- search and filters --------------------------------------------------------------------

async def test_search_narrows_the_list(tstore):
    app = make(tstore, search_mode="keyword")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"cabin")
        await settle(app, pilot)
        assert set(app.table.ids()) == {"a2", "a5"}
        assert "2 results" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.table.row_count == 5


async def test_hybrid_search_ranks_the_match_first(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("slash")
        await settle(app, pilot)  # the (fake) model loads in a worker
        assert app.model_state == "ready"
        await pilot.press(*"deploys")
        await settle(app, pilot)
        assert app.table.current_id() == "a3" or app.table.ids()[0] == "a3"


async def test_search_highlights_the_best_result_and_p_pins_it(tstore):
    """Issue 10, defect 13: the highlight used to stay on the memory highlighted before the
    search, wherever it landed in the results, and `p` then pinned that one."""
    from pmem.search import search

    ranked = [h.memory.id for h in search(tstore, "cabin", mode="keyword", collapse=False)]
    assert len(ranked) == 2
    best, other = ranked
    app = make(tstore, search_mode="keyword")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, other)  # highlighted before the search, and among its results
        await pilot.pause()
        await pilot.press("slash", *"cabin", "enter")
        await settle(app, pilot)
        assert app.table.ids() == [best, other]
        assert app.table.cursor_row == 0 and app.table.current_id() == best
        assert best in screen_text(app)  # the detail pane shows it too
        await pilot.press("p")
        await pilot.pause()
        assert tstore.get(best).pinned and not tstore.get(other).pinned
        # The same query run again (here a reload) keeps the memory the person moved to.
        await pilot.press("down")
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        assert app.table.current_id() == other


async def test_search_is_debounced(tstore):
    calls = []

    def counting(store, query, flt, **kw):
        from pmem.search import search

        calls.append(query)
        return search(store, query, flt, **kw)

    # a debounce well above Pilot's ~60 ms a key, so a busy machine cannot split the typing
    app = make(tstore, search_debounce=1.0, search_mode="keyword", search_fn=counting)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"cabin")
        await pilot.pause(1.3)
        await settle(app, pilot)
        assert calls == ["cabin"]


async def test_stale_search_results_are_dropped(tstore):
    from pmem.search import search

    started, release = threading.Event(), threading.Event()

    def slow_for_dana(store, query, flt, **kw):
        hits = search(store, query, flt, **kw)
        if query == "dana":
            started.set()
            release.wait(5)
        return hits

    app = make(tstore, search_mode="keyword", search_fn=slow_for_dana, search_debounce=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"dana")
        await pilot.pause(0.5)
        assert started.wait(5)
        # A newer query is typed while the old search is still running ...
        app.query_one("#search").value = "cabin"
        await pilot.pause()
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        # ... so the old results (a3 only) never replace the list.
        assert set(app.table.ids()) != {"a3"}
        await pilot.pause(0.5)
        await settle(app, pilot)
        assert set(app.table.ids()) == {"a2", "a5"}


async def test_filters_forgotten_and_tier_and_tag(tstore):
    from textual.widgets import Checkbox, Input

    tstore.forget("a3")
    tstore.edit("a4", tier="episodic")
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a5"}
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#include-forgotten", Checkbox).value = True
        app.screen.query_one("#tier-episodic", Checkbox).value = True
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert set(app.table.ids()) == {"a1", "a2", "a3", "a4", "a5"}
        assert "forgotten" in screen_text(app)
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#filter-tags", Input).value = "home"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert set(app.table.ids()) == {"a2"}


async def test_expired_filter(tstore):
    tstore.expire("a3", at="2025-02-01T00:00:00Z")
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "a3" not in app.table.ids()
        app.flt = Filter(include_expired=True)
        app.reload()
        await pilot.pause()
        assert "a3" in app.table.ids()


# -- literal text ------------------------------------------------------------------------------

async def test_markup_and_escapes_shown_literally(tstore):
    app = make(tstore)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        select(app, "a4")
        await pilot.pause()
        text = screen_text(app)
        assert "[bold red]x[/]" in text
        assert "\\x1b[31mred" in text
        assert "\x1b" not in text
        cell = app.table.cells("a4")[-1]
        assert "[bold red]x[/]" in cell.plain and not cell.spans


HIDDEN = ("\x1b", "\x07", "\x9b", "\u202e", "\u200b", "\U000e0041")


async def test_no_control_or_invisible_character_reaches_the_screen(tstore):
    """Issue 10, defect 5: the list, the detail pane, the dialogs (a TextArea or an Input would
    draw them raw) and the notifications show escapes instead."""
    from textual.widgets import Input, TextArea

    evil = "osc\x1b]0;owned\x07 c1\x9b2J rlo\u202eevil zw\u200bsp tag\U000e0041"
    tstore.insert([Memory(id="b1", text=evil, tags=["t\x1b[2J\u202e", "plain"],
                          created_at="2025-02-28T10:00:00Z", updated_at="2025-02-28T10:00:00Z")])
    app = make(tstore)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        select(app, "b1")
        await pilot.pause()
        shown = [screen_text(app)]
        assert "\\u202eevil" in shown[0] and "\\x1b]0;owned\\x07" in shown[0]
        await pilot.press("t")
        await pilot.pause()
        shown.append(screen_text(app))
        await pilot.press("enter")  # saved unchanged: the stored tags stay exactly as they were
        await pilot.pause()
        assert tstore.get("b1").tags == ["plain", "t\x1b[2J\u202e"]
        await pilot.press("e")
        await pilot.pause()
        shown.append(screen_text(app))
        area = app.screen.query_one(TextArea)
        area.text = area.text + " more"
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert tstore.get("b1").text == evil + " more"  # the hidden characters are kept
        app.flt = Filter(tags=("t\x1b[2J\u202e",))
        await pilot.press("f")
        await pilot.pause()
        shown.append(screen_text(app))
        assert "\x1b" not in app.screen.query_one("#filter-tags", Input).value
        await pilot.press("escape")
        app.notify("tags of b1: t\x1b[2J\u202e")
        await pilot.pause()
        shown += [n.message for n in app._notifications]  # toasts are not in the compositor's strips
        assert "tags of b1: t\\x1b[2J\\u202e" in shown
    for text in shown:
        assert not [c for c in HIDDEN if c in text], text


async def test_library_notices_become_notifications(tstore):
    from pmem import notices

    app = make(tstore)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        thread = threading.Thread(target=notices.notice,
                                  args=("the server stopped answering; loading the model in this process",))
        thread.start()  # notices come from workers
        thread.join()
        await pilot.pause(0.2)
        listening = len(notices._listeners)
        messages = [n.message for n in app._notifications]  # toasts are not in the compositor's strips
        assert messages == ["the server stopped answering; loading the model in this process"]
    assert len(notices._listeners) == listening - 1  # the app stopped listening when it ended


async def test_notification_with_markup_in_tags_does_not_crash(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await retag(app, pilot, "a3", "[bold]x[/] [/oops]")
        assert tstore.get("a3").tags == ["[/oops]", "[bold]x[/]"]


# -- large stores ------------------------------------------------------------------------------

def many(store, n: int) -> None:
    """n memories, m0000 the oldest: the list shows m{n-1} first."""
    store.insert([Memory(id=f"m{i:04d}", text=f"memory {i}",
                         created_at=f"2025-01-{1 + i // 3600:02d}T00:{i // 60 % 60:02d}:{i % 60:02d}Z")
                  for i in range(n)])


def count_lists(store) -> list:
    """Record every store.list_memories call (offset, limit, reverse) made from now on."""
    calls = []
    original = store.list_memories

    def counting(*args, **kw):
        calls.append((kw.get("offset", 0), kw.get("limit"), kw.get("reverse", False)))
        return original(*args, **kw)

    store.list_memories = counting
    return calls


async def test_pages_are_read_only_when_needed(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "big.db", config=fake_config, clock=lambda: NOW)
    many(store, 450)
    calls = count_lists(store)
    app = make(store, page_size=100)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.table.row_count == 450 and app.total == 450
        assert calls == [(0, 100, False)]  # one page for the first screen
        for _ in range(6):
            await pilot.press("pagedown")
        await pilot.pause()
        row = app.table.cursor_row
        assert 6 * 10 <= row < 100
        assert app.table.current_id() == f"m{449 - row:04d}"
        assert len(calls) == 2  # the next page, read ahead after a frame near the end of the first
        assert app.table.fetch_calls == 2 and app.table.rows_fetched == 200
        ids = app.table.ids()
        assert ids == [f"m{i:04d}" for i in range(449, 449 - len(ids), -1)]  # no gaps, no repeats
    store.close()


async def test_scrolling_far_reads_few_pages(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "far.db", config=fake_config, clock=lambda: NOW)
    many(store, 5000)
    calls = count_lists(store)
    app = make(store, page_size=100)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.table
        assert table.row_count == 5000 and "1 of 5,000 memories" in screen_text(app)
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == 4999 and table.current_id() == "m0000"
        text = screen_text(app)
        assert "memory 0 " in text and "memory 9 " in text  # the last screen is drawn ...
        assert "m0000" in text and "5,000 of 5,000 memories" in text  # ... and the detail follows
        # The first page and the last (read upwards from the end, not at offset 4,900), nothing between.
        assert len(calls) == 2 and calls[-1] == (0, 100, True)
        for _ in range(8):
            await pilot.press("pageup")
        await pilot.pause()
        assert table.cursor_row == 4999 - 8 * table.rows_visible < 4900
        assert table.current_id() == f"m{8 * table.rows_visible:04d}"
        assert len(calls) == 3 and calls[-1][2]  # the page above the last: read upwards too
        await pilot.press("home")
        await pilot.pause()
        assert table.current_id() == "m4999"
        for _ in range(50):
            await pilot.press("pagedown")
        await pilot.pause()
        step = table.rows_visible
        assert table.cursor_row == 50 * step
        assert table.current_id() == f"m{4999 - 50 * step:04d}"
        assert f"memory {4999 - 50 * step}" in screen_text(app)
        pages = 50 * step // 100 + 1
        assert len(calls) <= 3 + pages  # each page read once on the way down
        assert table.rows_fetched <= (len(calls)) * 100
        for _ in range(3):
            await pilot.press("pageup")
        await pilot.press("down", "down", "up")
        await pilot.pause()
        assert table.cursor_row == 47 * step + 1
        assert table.current_id() == f"m{4999 - 47 * step - 1:04d}"
        assert len(table._pages) <= table.max_pages  # bounded, whatever the store's size
    store.close()


async def test_scrollbar_and_wheel_scroll_without_reading_everything(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "wheel.db", config=fake_config, clock=lambda: NOW)
    many(store, 3000)
    calls = count_lists(store)
    app = make(store, page_size=100)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.table
        table.scroll_to(y=2000, animate=False)  # a dragged scrollbar: rows shown, cursor stays
        await pilot.pause()
        assert "memory 999 " in screen_text(app)
        assert table.cursor_row == 0
        assert len(calls) <= 3
        await pilot.click("#list", offset=(20, 3))  # the third row on screen
        await pilot.pause()
        assert table.cursor_row == round(table.scroll_y) + 2
        assert table.current_id() == f"m{2999 - table.cursor_row:04d}"
    store.close()


@pytest.mark.parametrize("same", [1, 7, 100, 250])
def test_pager_reads_the_same_rows_as_offsets(fake_config, tmp_path, same):
    """Keyset-like reads (after a page, before a page, from the end) give exactly the rows that
    plain offsets give, even when many memories share a timestamp across page boundaries."""
    from pmem.tui.paging import StorePager

    store = MemoryStore(tmp_path / "ties.db", config=fake_config, clock=lambda: NOW)
    store.insert([Memory(id=f"t{i:04d}", text=f"tie {i}", tags=["odd"] if i % 2 else [],
                         created_at=f"2025-01-01T00:{i // same // 60 % 60:02d}:{i // same % 60:02d}Z")
                  for i in range(730)])
    for flt in (Filter(), Filter(tags=("odd",))):
        expected = [m.id for m in store.list_memories(flt, limit=None)]
        total = len(expected)
        pager = StorePager(store, flt, total)
        down = [m.id for offset in range(0, total, 100) for m in pager(offset, 100)]
        assert down == expected
        assert set(pager.strategy[1:]) == {"after"}
        pager = StorePager(store, flt, total)
        starts = list(range(0, total, 100))[::-1]
        up = {offset: [m.id for m in pager(offset, 100)] for offset in starts}
        assert [i for offset in sorted(up) for i in up[offset]] == expected
        assert pager.strategy[0] == "from end" and set(pager.strategy[1:]) == {"before"}
        pager = StorePager(store, flt, total)
        assert [m.id for m in pager(300, 100)] == expected[300:400]
    store.close()


async def test_paging_offset_survives_forgetting(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "big.db", config=fake_config, clock=lambda: NOW)
    many(store, 150)
    app = make(store, page_size=100)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("d", "y")
        await pilot.pause()
        table = app.table
        assert app.total == 149 and table.row_count == 150  # the forgotten row stays, struck through
        rows = [table.memory_at(i).id for i in range(table.row_count)]
        assert len(rows) == 150 and len(set(rows)) == 150
        table._pages.clear()  # read again from the store: the kept row still sits in its place
        table._strips.clear()
        assert [table.memory_at(i).id for i in range(table.row_count)] == rows
        await pilot.press("r")  # restore: listed again
        await pilot.pause()
        assert app.total == 150 and table.row_count == 150
        table._pages.clear()
        assert [table.memory_at(i).id for i in range(table.row_count)] == rows
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert table.current_id() == "m0149"
    store.close()


# -- dream ------------------------------------------------------------------------------------

async def test_dream_review_accepts_and_applies(tstore):
    fake = FakeDream()
    app = make(tstore, dream=fake)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("D")
        await settle(app, pilot)
        from pmem.tui.dream_review import DreamScreen

        assert isinstance(app.screen, DreamScreen)
        assert "[bold]cabin[/]" in screen_text(app)
        await pilot.press("space")  # accept p1, move to p2 (left rejected)
        await pilot.press("y")
        await settle(app, pilot)
        assert fake.applied == {"p1"}
        assert tstore.get("a5").forgotten_at is not None
        assert tstore.get("a4").expires_at is None
        assert not isinstance(app.screen, DreamScreen)
        assert "a5" in app.table.ids() or app.total == 4


async def test_dream_review_plans_again_comparing_everything(tstore):
    fake = FakeDream()
    app = make(tstore, dream=fake)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("D")
        await settle(app, pilot)
        await pilot.press("space", "space")  # p1 and p2 accepted
        assert app.screen.accepted == {"p1", "p2"}
        await pilot.press("f")
        await settle(app, pilot)
        await pilot.press("f")  # once is enough
        await settle(app, pilot)
        assert fake.planned == [False, True]
        assert app.screen.accepted == {"p1"}  # p2 is not in the new plan
        await pilot.press("y")
        await settle(app, pilot)
        assert fake.applied == {"p1"}


async def test_list_keys_do_nothing_under_the_dream_screen(tstore):
    app = make(tstore, dream=FakeDream())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        select(app, "a3")
        await pilot.press("D")
        await settle(app, pilot)
        await pilot.press("p", "d", "x", "u")
        await settle(app, pilot)
        assert not tstore.get("a3").pinned and tstore.get("a3").forgotten_at is None
        assert tstore.operations(1)[0].kind == "import"


async def test_dream_plan_failure_is_shown(tstore):
    class Broken:
        def plan(self, *a, **k):
            raise ImportError("no dream")

    app = make(tstore, dream=Broken())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("D")
        await settle(app, pilot)
        assert "could not plan: no dream" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.table.row_count == 5


# -- the rest --------------------------------------------------------------------------------

async def test_help_lists_every_key(tstore):
    app = make(tstore)
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        text = screen_text(app)
        for word in ("pin", "expire", "$EDITOR", "tags", "forget", "restore", "undo", "details", "thread",
                     "scope", "quit"):
            assert word in text
        await pilot.press("escape")
        await pilot.pause()


async def test_no_color_is_respected(tstore):
    app = make(tstore)  # conftest sets NO_COLOR=1
    assert app.no_color


async def test_quit(tstore):
    app = make(tstore)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (0, None)


def test_make_app_opens_and_closes_a_path(fake_config, tmp_path):
    from pmem.tui import make_app

    app = make_app(tmp_path / "own.db")
    assert app.owns_store


def test_import_pmem_and_cli_do_not_load_textual():
    code = ("import sys, pmem, pmem.cli.app; "
            "bad = [m for m in ('textual', 'pmem.tui') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tui_command_needs_a_terminal(fake_config):
    r = subprocess.run([sys.executable, "-m", "pmem", "tui"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert "terminal" in r.stderr


def test_tui_command_has_help():
    r = subprocess.run([sys.executable, "-m", "pmem", "tui", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "terminal UI" in r.stdout


async def test_the_footer_follows_the_first_paint_on_the_main_screen(tstore):
    """The first paint holds the footer's row with an empty line (styling a widget per key was
    ~40 ms of it); the footer with the main screen's keys replaces it right after, on the main
    screen even when a dialog was opened before it came."""
    from textual.widgets import Footer

    at_paint = {}

    def ready(app) -> None:
        at_paint["footers"] = len(app.query(Footer))
        at_paint["slot"] = len(app.query("#keys-slot"))
        at_paint["rows"] = app.table.row_count

    app = make(tstore, on_ready=ready)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")  # the help dialog, before the footer is there
        await settle(app, pilot)
        assert at_paint["footers"] == 0 and at_paint["slot"] == 1
        assert at_paint["rows"] == 5
        main = app.screen_stack[0]
        assert app.screen is not main and len(main.query(Footer)) == 1
        assert not main.query("#keys-slot") and not app.screen.query(Footer)
        await pilot.press("escape")
        await settle(app, pilot)
        assert app.screen is main
        last = screen_text(app).splitlines()[-1]
        assert "Search" in last and "Undo" in last


def test_quitting_at_the_first_frame_is_quiet(tstore):
    """Quitting before the footer came (here from the first-paint hook) leaves no traceback."""
    import io

    out = io.StringIO()
    app = make(tstore, on_ready=lambda app: app.exit())
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        app.run(headless=True, size=SIZE)
    assert app.return_code in (0, None)
    assert "Error" not in out.getvalue() and "Traceback" not in out.getvalue()


# No async plugin is needed: each async test runs in its own event loop.
def _sync(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


for _name, _fn in list(globals().items()):
    if _name.startswith("test_") and inspect.iscoroutinefunction(_fn):
        globals()[_name] = _sync(_fn)


def test_pmem_tui_project_starts_narrowed_to_this_project(tmp_path):
    """`pmem tui --project` on a real terminal: the status line names the project scope at once."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    db = tmp_path / "t.db"
    env = {**os.environ, "PMEM_EMBED_MODEL": "fake-64", "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"}
    subprocess.run([sys.executable, "-m", "pmem", "--db", str(db), "add", "a global memory"], env=env, check=True,
                   capture_output=True, cwd=project)

    def screen(*args: str) -> str:
        main, child = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "pmem", "--db", str(db), "tui", *args], env=env,
                                stdin=child, stdout=child, stderr=child, close_fds=True, cwd=project)
        os.close(child)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"global memory" not in seen:
            if select.select([main], [], [], 0.5)[0]:
                try:
                    seen += os.read(main, 1 << 16)
                except OSError:
                    break
        time.sleep(0.5)
        while select.select([main], [], [], 0.2)[0]:
            try:
                seen += os.read(main, 1 << 16)
            except OSError:
                break
        os.write(main, b"q")
        try:
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(main)
        return seen.decode("utf-8", "replace")

    assert "scope: global + proj" in screen("--project")
    assert "scope: global" not in screen()


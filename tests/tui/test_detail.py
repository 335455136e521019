"""The main screen's list and the detail pane: provenance, history, threads."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.store import Filter  # noqa: E402

from .pilot import make, press_on, running, screen_text, select  # noqa: E402


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


async def test_list_and_detail(app):
    async with running(app, (120, 40)) as pilot:
        assert app.table.ids() == ["a5", "a4", "a3", "a2", "a1"]
        assert app.total == 5
        select(app, "a3")
        await pilot.pause()
        text = screen_text(app)
        assert "Dana approves deploys to production" in text
        assert "slack" in text  # provenance
        assert "a3" in text


async def test_enter_opens_details_with_provenance_and_history(app):
    async with running(app, (100, 40)) as pilot:
        await press_on(app, pilot, "a5", "enter")
        from pmem.tui.screens import DetailScreen

        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert "derived from" in text and "a2" in text and "cabin wifi" in text
        assert "History" in text and "import" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)


async def test_detail_shows_the_thread_around_a_memory(tstore):
    seed_thread(tstore)
    app = make(tstore)
    app.flt = Filter(tiers=("core", "archival", "episodic"))
    async with running(app, (140, 50)) as pilot:
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
    async with running(app, (140, 40)) as pilot:
        select(app, "m1")
        await pilot.pause()
        text = screen_text(app)
        assert "[bold]x[/]" in text and "[red]t[/] · #2" in text
        assert "\x1b" not in text and "\\x1b[31mred" in text


async def test_T_lists_the_whole_thread(tstore):
    seed_thread(tstore)
    app = make(tstore)
    app.flt = Filter(tiers=("episodic",))
    async with running(app, (100, 40)) as pilot:
        await press_on(app, pilot, "t2", "T")
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


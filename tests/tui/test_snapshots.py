"""Layout of the main TUI screens (pytest-textual-snapshot). Update with `pytest --snapshot-update`
after checking the new SVGs by eye. Data and "now" are fixed, so the pictures are stable."""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from fakes import TUI_NOW as NOW  # noqa: E402
from fakes import FakeDream  # noqa: E402


def app_for(store, **kw):
    from pmem.tui import make_app

    return make_app(store, now=NOW, search_debounce=0, detail_throttle=0, search_mode="keyword", **kw)


def test_main_80x24(snap_compare, tstore):
    assert snap_compare(app_for(tstore), terminal_size=(80, 24))


def test_main_wide(snap_compare, tstore):
    async def pick(pilot):
        pilot.app.table.move_cursor(row=2)
        await pilot.pause()

    assert snap_compare(app_for(tstore), terminal_size=(130, 34), run_before=pick)


def test_literal_markup_row(snap_compare, tstore):
    async def pick(pilot):
        pilot.app.table.move_cursor(row=1)  # a4: markup and escape codes
        await pilot.pause()

    assert snap_compare(app_for(tstore), terminal_size=(80, 24), run_before=pick)


def test_search_results(snap_compare, tstore):
    async def search(pilot):
        await pilot.press("slash", *"cabin")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app_for(tstore), terminal_size=(80, 24), run_before=search)


def test_help(snap_compare, tstore):
    assert snap_compare(app_for(tstore), press=["question_mark"], terminal_size=(80, 24))


def test_details(snap_compare, tstore):
    async def details(pilot):
        pilot.app.table.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(app_for(tstore), terminal_size=(80, 24), run_before=details)


def test_dream_review(snap_compare, tstore):
    async def dream(pilot):
        await pilot.press("D")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("space")
        await pilot.pause()

    assert snap_compare(app_for(tstore, dream=FakeDream()), terminal_size=(80, 24), run_before=dream)


def test_expire_dialog(snap_compare, tstore):
    assert snap_compare(app_for(tstore), press=["x"], terminal_size=(80, 24))


def test_thread_detail_wide(snap_compare, tstore):
    from pmem.records import Memory
    from pmem.store import Filter

    tstore.insert([Memory(id=f"t{i}", text=f"turn {i}: " + ("we could go to the lake" if i % 2 else "[b]sure[/b]"),
                          tier="episodic", thread="trip chat", thread_pos=i, source="mcp:claude-code",
                          created_at=f"2025-02-0{i + 1}T09:00:00Z", updated_at=f"2025-02-0{i + 1}T09:00:00Z")
                   for i in range(6)], kind="import", summary="thread")
    app = app_for(tstore)
    app.flt = Filter(tiers=("episodic",))

    async def pick(pilot):
        pilot.app.table.move_cursor(row=pilot.app.table.index_of("t3"))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(130, 34), run_before=pick)

"""The sync conflicts view (pmem/tui/conflicts.py): real conflicts from two stores synced over a
folder, both values shown literally, the losing one taken back as an edit that undoes and syncs."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from pmem import sync  # noqa: E402
from pmem.service import MemoryStore  # noqa: E402

from .pilot import make, running, screen_text, settle  # noqa: E402

LOST = "[bold red]a's wording[/] \x1b[31mred"
WON = "[i]b's wording[/i] wins"


@pytest.fixture
def pair(tstore, fake_config, tmp_path):
    """tstore (clock fixed in 2025) and b (the real clock) edit a3 at once: b's later edit wins,
    and tstore keeps its own wording as the losing value of a conflict."""
    folder, key = tmp_path / "synced", tmp_path / "sync.key"
    b = MemoryStore(tmp_path / "b" / "pmem.db", config=fake_config)
    sync.init(tstore, str(folder), key_file=str(key))
    sync.join(b, str(folder), key_file=str(key))
    tstore.edit("a3", text=LOST)
    b.edit("a3", text=WON, tags=["work", "ops"])
    sync.run(tstore)
    sync.run(b)
    assert sync.run(tstore)["conflicts"] >= 1
    yield tstore, b
    b.close()


async def open_conflicts(app, pilot) -> None:
    await pilot.press("C")
    await settle(app, pilot)


async def test_conflicts_show_both_values_literally_with_devices_and_times(pair):
    a, b = pair
    app = make(a)
    async with running(app, (120, 40)) as pilot:
        await open_conflicts(app, pilot)
        from pmem.tui.conflicts import ConflictsScreen

        assert isinstance(app.screen, ConflictsScreen)
        text = screen_text(app)
        assert "[bold red]a's wording[/]" in text  # the losing value, as typed
        assert "\\x1b[31mred" in text and "\x1b" not in text  # the escape shown, never sent
        assert "[i]b's wording[/i] wins" in text  # the winning value: the memory's text now
        assert sync.SyncLog(a).device in text and sync.SyncLog(b).device in text
        assert "2025-" in text  # a's side was written at its fixed 2025 clock
        assert "updated_at" not in [e["field"] for e in app.screen.entries]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConflictsScreen)


async def test_taking_back_the_losing_value_is_an_edit_that_undoes_and_syncs(pair):
    a, b = pair
    app = make(a)
    async with running(app, (120, 40)) as pilot:
        await open_conflicts(app, pilot)
        entry = app.screen.current()
        assert entry["field"] == "text" and entry["lost_value"] == LOST
        await pilot.press("b")
        await settle(app, pilot)
        assert a.get("a3").text == LOST
        assert a.operations(1)[0].kind == "edit"
        assert app.screen.current()["taken_back"] is True
        assert "taken back" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("u")  # undo on the list: the winning value is back
        await settle(app, pilot)
        assert a.get("a3").text == WON
        await pilot.press("C")
        await settle(app, pilot)
        await pilot.press("b")  # take it back again, and keep it this time
        await settle(app, pilot)
    assert a.get("a3").text == LOST
    sync.run(a)
    sync.run(b)
    assert b.get("a3").text == LOST  # sent like any edit, and later than b's: it wins there too
    assert sorted(b.get("a3").tags) == ["ops", "work"]  # only the field taken back changed


async def test_conflicts_view_on_a_database_that_does_not_sync(app, tstore):
    async with running(app, (120, 30)) as pilot:
        await open_conflicts(app, pilot)
        assert "does not sync" in screen_text(app)
        await pilot.press("b")
        await pilot.pause()
        assert tstore.operations(1)[0].kind == "import"

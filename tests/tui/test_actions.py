"""The main screen's keys that change a memory, and their dialogs (pmem/tui/screens.py), asserting
what landed in the database."""

from __future__ import annotations

import contextlib
import sys

import pytest

pytest.importorskip("textual")

from pmem.service import MemoryStore  # noqa: E402

from .pilot import actions, make, press_on, retag, running, screen_text, select, settle  # noqa: E402
from fakes import TUI_NOW as NOW  # noqa: E402


async def test_pin_and_unpin(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "p")
        assert tstore.get("a3").pinned and tstore.get("a3").tier == "core"
        await pilot.press("p")
        await pilot.pause()
        assert not tstore.get("a3").pinned
        assert actions(tstore, "a3")[-2:] == ["pin", "unpin"]


async def test_expire_now(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "x")
        await pilot.press("enter")  # the first choice: now
        await pilot.pause()
        assert tstore.get("a3").expires_at == NOW
        assert actions(tstore, "a3")[-1] == "expire"
        # The row stays, marked, so the change can be seen and undone.
        assert "a3" in app.table.ids()
        assert "expired" in screen_text(app)


async def test_expire_in_a_week_and_at_a_date(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "x", "down", "down", "enter")
        assert tstore.get("a3").expires_at == "2025-03-08T12:00:00Z"
        await pilot.press("x", "tab", *"2025-12-31", "enter")
        await pilot.pause()
        assert tstore.get("a3").expires_at == "2025-12-31T00:00:00Z"


async def test_expire_bad_date_changes_nothing(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "x", "tab", *"someday", "enter")
        assert tstore.get("a3").expires_at is None


async def test_inline_edit(tstore):
    from textual.widgets import TextArea

    app = make(tstore)
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "e")
        app.screen.query_one(TextArea).text = "Dana and Lee approve deploys"
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        assert tstore.get("a3").text == "Dana and Lee approve deploys"
        assert actions(tstore, "a3")[-1] == "edit"
        assert "Dana and Lee" in screen_text(app)


async def test_inline_edit_cancel(app, tstore):
    async with running(app) as pilot:
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
    async with running(app) as pilot:
        select(app, "a3")
        await pilot.press("E")
        await settle(app, pilot)
        assert tstore.get("a3").text == "Robin approves deploys to production"


async def test_tags(app, tstore):
    async with running(app) as pilot:
        await retag(app, pilot, "a3", "ops, oncall")
        assert tstore.get("a3").tags == ["oncall", "ops"]
        assert actions(tstore, "a3")[-1] == "retag"


async def test_forget_asks_first(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "d")
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
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "P")
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


async def test_restore(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "d", "y")
        assert tstore.get("a3").forgotten_at is not None
        await pilot.press("r")
        await pilot.pause()
        assert tstore.get("a3").forgotten_at is None
        assert actions(tstore, "a3")[-2:] == ["forget", "restore"]
        assert app.total == 5


async def test_undo(app, tstore):
    async with running(app) as pilot:
        await press_on(app, pilot, "a3", "p")
        assert tstore.get("a3").pinned
        await pilot.press("u")
        await settle(app, pilot)
        assert not tstore.get("a3").pinned
        assert tstore.operations(1)[0].undone_at is not None
        assert app.table.current_id() == "a3"


async def test_action_without_selection_is_harmless(fake_config, tmp_path):
    store = MemoryStore(tmp_path / "empty.db", config=fake_config, clock=lambda: NOW)
    app = make(store)
    async with running(app) as pilot:
        await pilot.press("p", "x", "d", "r", "t", "e")
        await pilot.pause()
        assert app.table.row_count == 0
    store.close()


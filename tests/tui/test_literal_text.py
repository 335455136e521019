"""Text from users and models is shown literally: no markup, escapes or invisible characters."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.store import Filter  # noqa: E402

from .pilot import make, retag, running, screen_text, select, settle  # noqa: E402


async def test_markup_and_escapes_shown_literally(app):
    async with running(app, (120, 30)) as pilot:
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
    async with running(app, (120, 30)) as pilot:
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
    async with running(app, (120, 30)) as pilot:
        thread = threading.Thread(target=notices.notice,
                                  args=("the server stopped answering; loading the model in this process",))
        thread.start()  # notices come from workers
        thread.join()
        await pilot.pause(0.2)
        messages = [n.message for n in app._notifications]  # toasts are not in the compositor's strips
        assert messages == ["the server stopped answering; loading the model in this process"]
    told = []
    app.notify = lambda message, **kw: told.append(message)  # type: ignore[method-assign]
    notices.notice("after the app ended")
    assert told == []  # the app stopped listening when it ended


async def test_notification_with_markup_in_tags_does_not_crash(app, tstore):
    async with running(app) as pilot:
        await retag(app, pilot, "a3", "[bold]x[/] [/oops]")
        assert tstore.get("a3").tags == ["[/oops]", "[bold]x[/]"]


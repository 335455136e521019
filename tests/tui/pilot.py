"""What the TUI tests do through Pilot: make the app, pick a row, read the screen, wait."""

from __future__ import annotations

import contextlib

from fakes import TUI_NOW as NOW

SIZE = (80, 24)


def make(store, **kw):
    from pmem.tui import make_app

    kw.setdefault("now", NOW)
    kw.setdefault("search_debounce", 0)
    kw.setdefault("detail_throttle", 0)
    return make_app(store, **kw)


@contextlib.asynccontextmanager
async def running(app, size=SIZE):
    """`app.run_test` at `size`, its first frame drawn: the pilot."""
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        yield pilot


async def press_on(app, pilot, memory_id: str, *keys: str) -> None:
    """Put the cursor on a memory, press `keys`, let the screen answer."""
    select(app, memory_id)
    await pilot.press(*keys)
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


async def retag(app, pilot, memory_id, value):
    """Open the tags dialog on a memory, type `value`, confirm."""
    from textual.widgets import Input

    select(app, memory_id)
    await pilot.press("t")
    await pilot.pause()
    app.screen.query_one(Input).value = value
    await pilot.press("enter")
    await pilot.pause()


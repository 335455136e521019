"""Paging the list (pmem/tui/paging.py): pages read only when needed, the same rows as offsets."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.service import MemoryStore  # noqa: E402
from pmem.store import Filter  # noqa: E402

from .pilot import make, running, screen_text  # noqa: E402
from fakes import TUI_NOW as NOW  # noqa: E402


def many(store, n: int) -> None:
    """n memories, m0000 the oldest: the list shows m{n-1} first."""
    store.insert([Memory(id=f"m{i:04d}", text=f"memory {i}",
                         created_at=f"2025-01-{1 + i // 3600:02d}T00:{i // 60 % 60:02d}:{i % 60:02d}Z")
                  for i in range(n)])


def paged(path, config, n: int):
    """A store of `n` memories whose list calls are counted (count_lists), and the TUI on it
    reading 100 rows a page."""
    store = MemoryStore(path, config=config, clock=lambda: NOW)
    many(store, n)
    return store, count_lists(store), make(store, page_size=100)


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
    store, calls, app = paged(tmp_path / "big.db", fake_config, 450)
    async with running(app) as pilot:
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


@pytest.mark.slow
async def test_scrolling_far_reads_few_pages(fake_config, tmp_path):
    store, calls, app = paged(tmp_path / "far.db", fake_config, 5000)
    async with running(app) as pilot:
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
    store.close()


async def test_scrollbar_and_wheel_scroll_without_reading_everything(fake_config, tmp_path):
    store, calls, app = paged(tmp_path / "wheel.db", fake_config, 3000)
    async with running(app) as pilot:
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
    app = make(store, page_size=10)  # 15 pages, more than the list keeps: each pass reads again from the store

    def read_twice(table):
        """Every row, twice over; the second pass reads the first pages from the store again: the
        list keeps max_pages pages, whatever the store's size."""
        first = [table.memory_at(i).id for i in range(table.row_count)]
        calls = table.fetch_calls
        assert [table.memory_at(i).id for i in range(table.row_count)] == first  # the kept row: in its place
        assert table.fetch_calls >= calls + table.row_count // 10 - table.max_pages
        return first

    async with running(app) as pilot:
        await pilot.press("d", "y")
        await pilot.pause()
        table = app.table
        assert app.total == 149 and table.row_count == 150  # the forgotten row stays, struck through
        rows = read_twice(table)
        assert len(rows) == 150 and len(set(rows)) == 150
        await pilot.press("r")  # restore: listed again
        await pilot.pause()
        assert app.total == 150 and table.row_count == 150
        assert read_twice(table) == rows
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert table.current_id() == "m0149"
    store.close()


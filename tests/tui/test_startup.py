"""Starting and leaving the TUI: the first frame, the footer, help, quitting, `pmem tui` itself."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

pytest.importorskip("textual")

from pmem.records import Memory  # noqa: E402
from pmem.service import MemoryStore  # noqa: E402

from .pilot import SIZE, make, running, screen_text, settle  # noqa: E402
from fakes import TUI_NOW as NOW  # noqa: E402


def frame_cells(update) -> list[list[tuple]]:
    """A full frame (Textual's LayoutUpdate), row by row, as (character, style) per cell."""
    return [[(ch, seg.style) for strip in row for seg in strip for ch in seg.text] for row in update.strips]


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
        async with running(app, size):
            settled = frame_cells(app.screen._compositor.render_full_update())
            assert app.table.ids()[0] == "m059"
            assert "note 59" in screen_text(app)
    finally:
        store.close()
    assert first, "no frame with the list was drawn"
    assert len(first[0]) == size[1]
    assert first[0][:-1] == settled[:-1]


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


async def test_help_lists_every_key(app):
    async with running(app, (80, 30)) as pilot:
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


async def test_quit(app):
    async with running(app) as pilot:
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


"""The TUI's search box shows what it holds literally: a query with terminal escapes (given with
`--search`, or pasted) never reaches the terminal as an escape, and rich markup in it is text.

The first test runs `python -m pmem tui --search ...` on a real pseudo-terminal and reads every
byte the terminal receives; the second drives the search box with Pilot."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUERY = "[bold]x\x1b]0;PWNED-TITLE\x07 \x1b[2J\u202e"


def _read_until(fd: int, done, seconds: float) -> bytes:
    shown = bytearray()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not done(shown):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
    return bytes(shown)


@pytest.mark.skipif(sys.platform == "win32", reason="a pty")
def test_a_search_given_on_the_command_line_reaches_the_terminal_as_text(tmp_path):
    import pty

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_HOME=str(home), PMEM_EMBED_MODEL="fake-64", PMEM_SERVER="off", TERM="xterm-256color",
               COLUMNS="120", LINES="30", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("NO_COLOR", None)
    subprocess.run([sys.executable, "-m", "pmem", "add", "x marks the spot"], env=env, check=True,
                   capture_output=True)
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "pmem", "tui", "--search", QUERY], env=env,
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        shown = _read_until(master, lambda b: b"marks the spot" in b and b"\\x1b]0;" in b, 40)
        os.write(master, b"\x1b")  # esc: leave the search box; q: quit
        time.sleep(0.5)
        os.write(master, b"q")
        shown += _read_until(master, lambda b: False, 5)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    assert b"\x1b]0;PWNED" not in shown      # the window title is not set
    assert b"PWNED-TITLE\x07" not in shown    # nor the BEL that would end the sequence
    assert "\u202e".encode() not in shown       # no right-to-left override reaches the screen
    assert b"\\x1b]0;PWNED-TITLE\\x07" in shown  # what the box holds is shown as escapes
    assert b"[bold]x" in shown                  # and markup as the text it is
    assert p.returncode == 0


def test_the_search_box_shows_escapes_and_searches_what_was_given(tstore):
    import asyncio

    from pmem.tui import make_app

    queries: list[str] = []

    def search_fn(store, query, flt, limit=50, mode="hybrid", **kw):
        queries.append(query)
        return []

    async def run() -> None:
        app = make_app(tstore, initial_query=QUERY, search_debounce=0, search_fn=search_fn)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            from textual.widgets import Input

            box = app.query_one("#search", Input)
            assert "\x1b" not in box.value and "\u202e" not in box.value
            assert box.value.startswith("[bold]x\\x1b]0;PWNED-TITLE\\x07")
            await pilot.pause(0.2)
            box.insert_text_at_cursor(" \x1b]52;c;aGk=\x07")  # as a paste arrives
            await pilot.pause(0.2)
            assert "\x1b" not in box.value and box.value.endswith("\\x1b]52;c;aGk=\\x07")

    asyncio.run(run())
    assert queries and queries[0] == QUERY  # the search itself runs on what was given, escapes and all

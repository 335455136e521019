"""Text from users is data: terminal escapes never reach a terminal, JSON stays printable, and
recall blocks carry no hidden characters into a prompt (issue 10, defect 5)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from pmem.display import json_dumps, prompt_safe, restore_hidden, visible
from pmem.records import Memory
from pmem.service import MemoryStore

# What the attack corpus wrote to terminals: OSC 52 (clipboard), OSC 0 (title), clear screen,
# cursor position report (the terminal answers on stdin), a C1 CSI, bidi overrides and isolates,
# zero-width characters, a BOM and a Unicode tag character.
SEQUENCES = {
    "osc52": "\x1b]52;c;aGVsbG8=\x07",
    "osc0": "\x1b]0;owned\x07",
    "clear": "\x1b[2J",
    "report": "\x1b[6n",
    "c1-csi": "\x9b31m",
    "del": "\x7f",
    "rlo": "\u202e",
    "lre": "\u202a",
    "fsi": "\u2068",
    "pdi": "\u2069",
    "zwsp": "\u200b",
    "zwj": "\u200d",
    "rlm": "\u200f",
    "word-joiner": "\u2060",
    "bom": "\ufeff",
    "tag-a": "\U000e0041",
}
EVIL = "safe " + " ".join(f"{name}:{seq}" for name, seq in SEQUENCES.items()) + " end"
EVIL_TAG = "tag\x1b]0;x\x07\u202e"
# What must never reach a terminal raw (as UTF-8 bytes).
RAW = [b"\x1b]", b"\x1b[2J", b"\x1b[6n", b"\x07", b"\x7f", *(s.encode() for s in SEQUENCES.values()
                                                              if not s.startswith("\x1b") and s != "\x7f")]


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_visible_shows_every_sequence_as_an_escape(name):
    seq = SEQUENCES[name]
    shown = visible(f"a{seq}b")
    assert shown.startswith("a") and shown.endswith("b")
    assert all(ch.isprintable() for ch in shown), repr(shown)
    assert "\\x" in shown or "\\u" in shown or "\\U" in shown


def test_visible_keeps_text_newlines_and_tabs():
    assert visible("line one\n\tline two ünïcödé ✓ 🏔 [bold]x[/]") == "line one\n\tline two ünïcödé ✓ 🏔 [bold]x[/]"
    assert visible("\x1b[31m") == "\\x1b[31m"
    assert visible("\u202e") == "\\u202e" and visible("\U000e0041") == "\\U000e0041"
    assert visible("\udc80") == "\\udc80"  # an undecodable byte from an argument: printable, no crash
    assert visible(visible(EVIL)) == visible(EVIL)  # shown twice is shown once


def test_prompt_safe_removes_controls_and_invisible_characters():
    cleaned = prompt_safe(EVIL + "\r\nnext\tline")
    assert all(ch.isprintable() or ch in "\n\t" for ch in cleaned), repr(cleaned)
    assert cleaned.startswith("safe osc52:]52;c;aGVsbG8= osc0:]0;owned clear:[2J")
    assert cleaned.endswith("end\nnext\tline")
    assert prompt_safe("ünïcödé ✓ 🏔 مرحبا") == "ünïcödé ✓ 🏔 مرحبا"


def test_restore_hidden_undoes_visible_only_for_what_was_there():
    original = "red is \x1b[31m here\u202e"
    assert restore_hidden(visible(original), original) == original
    assert restore_hidden(visible(original) + " more", original) == original + " more"
    # a backslash sequence the person typed, or one for a character the text did not hold, stays
    assert restore_hidden(visible(original) + " \\x07 \\x41", original) == original + " \\x07 \\x41"
    assert restore_hidden("a note about \\x1b[31m", "a note") == "a note about \\x1b[31m"


def test_json_dumps_escapes_what_a_terminal_acts_on_and_keeps_the_value():
    data = {"text": EVIL, "tags": [EVIL_TAG], "plain": "ünïcödé ✓ 🏔", "sep": "a\u2028b"}
    out = json_dumps(data, indent=2)
    assert json.loads(out) == data
    assert all(ch.isprintable() or ch in "\n" for ch in out), repr(out)
    assert "\\u009b" in out and "\\u202e" in out and "\\u001b" in out and "\\u007f" in out
    assert "\\udb40\\udc41" in out  # U+E0041 as a JSON surrogate pair
    assert "ünïcödé ✓ 🏔" in out  # readable text stays readable


# --- through the CLI, on a terminal and in a pipe ---------------------------------------------------


@pytest.fixture
def evil_db(fake_config, tmp_path):
    db = tmp_path / "evil.db"
    with MemoryStore(db, config=fake_config) as s:
        s.insert([Memory(id="e1a2b3c4", text=EVIL, tags=[EVIL_TAG, "plain"], pinned=True, tier="core",
                         meta={"note": "\u009b2J"}),
                  Memory(id="f0f0f0f0", text="cabin trip " + EVIL)])
    return db


def run_pmem(db, *args, tty: bool) -> bytes:
    """`pmem --db DB ARGS` with stdout (and stderr) on a pseudo-terminal, or on a pipe."""
    argv = [sys.executable, "-m", "pmem", "--db", str(db), *args]
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"}
    if not tty:
        proc = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                data = os.read(main, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(main)
    assert proc.wait(10) == 0, b"".join(chunks)
    return b"".join(chunks)


def assert_nothing_raw(out: bytes) -> None:
    for raw in RAW:
        assert raw not in out, (raw, out)
    assert "\x9b".encode() not in out  # the C1 CSI, as UTF-8


TERMINAL_VIEWS = [
    ("recall", "--format", "md"),
    ("recall", "cabin", "--format", "xml"),
    ("recall", "--format", "text"),
    ("stats",),
    ("list",),
    ("search", "cabin", "--mode", "keyword"),
    ("show", "e1a2"),
    ("list", "--json"),
    ("recall", "--format", "json"),
]


@pytest.mark.parametrize("args", TERMINAL_VIEWS, ids=" ".join)
def test_no_escape_reaches_a_terminal(evil_db, args):
    out = run_pmem(evil_db, *args, tty=True)
    assert_nothing_raw(out)
    assert b"safe" in out or b"tag\\x1b]0;x" in out  # stats shows the tags, not the text


def test_export_markdown_on_a_terminal_shows_escapes(evil_db):
    out = run_pmem(evil_db, "export", "--format", "md", tty=True)
    assert_nothing_raw(out)
    assert b"\\x1b]52" in out


def test_terminal_tables_show_the_escapes_as_text(evil_db):
    out = run_pmem(evil_db, "show", "e1a2", tty=True).decode()
    assert "\\x1b]52;c;aGVsbG8=\\x07" in out and "\\u202e" in out and "\\U000e0041" in out
    stats = run_pmem(evil_db, "stats", tty=True).decode()
    assert "tag\\x1b]0;x\\x07\\u202e" in stats


def test_a_pipe_gets_what_is_stored(evil_db):
    assert EVIL_TAG.encode() in run_pmem(evil_db, "stats", tty=False)
    assert EVIL.encode() in run_pmem(evil_db, "export", "--format", "md", tty=False)
    rows = json.loads(run_pmem(evil_db, "list", "--json", tty=False))
    assert {m["text"] for m in rows} == {EVIL, "cabin trip " + EVIL}


@pytest.mark.parametrize("fmt", ["md", "xml", "text", "json"])
def test_recall_blocks_carry_no_hidden_characters_in_any_format(evil_db, fmt):
    out = run_pmem(evil_db, "recall", "cabin", "--format", fmt, tty=False).decode()
    text = json.dumps(json.loads(out)) if fmt == "json" else out
    if fmt == "json":
        data = json.loads(out)
        strings = [data["core"][0]["text"], *data["core"][0]["tags"], data["core"][0]["meta"]["note"]]
        assert all(ch.isprintable() for s in strings for ch in s), strings
        assert data["core"][0]["text"] == prompt_safe(EVIL)
    else:
        assert all(ch.isprintable() or ch in "\n\t" for ch in text), repr(text)
        assert prompt_safe(EVIL) in text or prompt_safe(EVIL).replace('"', "&quot;") in text
    assert "osc52:]52;c;aGVsbG8=" in text

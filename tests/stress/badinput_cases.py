"""The bad-input corpus of tests/stress/test_badinput.py: for the whole `pmem` command line, does
every foreseeable failure end in one `pmem: error:` line and the documented exit code, without a
traceback and without losing data? (It was benchmarks/badinput.py; its figures are in
docs/decisions/0009-bad-input-cli.md and 0011-bad-input-imports.md.)

Each case runs `python -m pmem ...` as a whole process on a fresh PMEM_HOME that holds one canary
memory, with the test embedder (PMEM_EMBED_MODEL=fake-64: no model is loaded or fetched). Cases feed
bad arguments, stdin, files, environment variables, config files, damaged databases, a pty, and
SIGINT. A case passes when its exit code is the expected one (0 ok, 1 error, 2 usage, 130
interrupted), stderr holds no traceback, a failing case writes exactly one `pmem: error:` line, and
the canary is still there afterwards (not checked where the case damages the database itself).

The importers' surface: each format's valid export (tests/export_fixtures.py) with one field, at
any depth, turned into another JSON type ("import mutated ..." cases; one wrong type per field).
Such a case also passes only if a refusal stored nothing and a success stored the untouched record
whole. Huge input (a 200,000-character record, 10 MB lines, 100 MB of garbage on stdin, a 5 MB log
pasted into a chat) must be answered within `max_seconds`, and hooks and the MCP server get
garbage, wrong types and 10 MB on stdin (MCP's stdout must stay JSON-RPC, line by line).
"""

from __future__ import annotations

import json
import os
import pty
import random
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import export_fixtures as fx  # the published structures, shared with the importers' tests

ROOT = Path(__file__).resolve().parents[2]

CANARY = "canary: the spare key is under the blue flowerpot"
BIG = "9" * 20  # 99999999999999999999: past SQLite's 64-bit integers


@dataclass
class Case:
    name: str
    argv: list
    code: int | tuple = 2
    stdin: bytes | None = None
    env: dict = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # gets the case's PMEM_HOME; may write files there
    pty: bool = False  # stdin and stdout on a pseudo-terminal
    pty_input: bytes = b""
    sigint_after: float | None = None
    damages_db: bool = False
    report: bool = False  # the command reports findings on stdout and exits 1 (doctor): no error line due
    keeps: tuple = ()  # texts that must be stored when it exits 0 (an untouched record); on exit 2, nothing new
    max_seconds: float | None = None  # huge input: answered within this, or it counts as a stall
    jsonrpc: bool = False  # every stdout line must be a JSON-RPC message (the MCP server)


def write(rel: str, data: bytes | str):
    def setup(home: Path) -> None:
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return setup


def jsonl(*records) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def corrupt_db(how: str):
    """Damage the case's database; the noise is seeded, so a case damages the same bytes every run."""
    def setup(home: Path) -> None:
        noise = random.Random(f"damage {how}").randbytes
        db = home / "pmem.db"
        data = bytearray(db.read_bytes())
        if how == "truncate":
            db.write_bytes(bytes(data[: len(data) // 3]))
        elif how == "header":
            data[:16] = b"not a database!!"
            db.write_bytes(bytes(data))
        elif how == "pages":  # every page after the schema: vector and index pages become noise
            page = int.from_bytes(data[16:18], "big") or 65536
            for start in range(page * 2, len(data), page):
                data[start + 8: start + page] = noise(page - 8)
            db.write_bytes(bytes(data))
        elif how == "vectors":  # the vec0 tables' pages become noise; the schema and memories stay readable
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            roots = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE name LIKE 'memory_vec%' "
                                                "AND rootpage > 0")]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.close()
            for root in roots:
                data[(root - 1) * page: root * page] = noise(page)
            db.write_bytes(bytes(data))
        elif how == "empty":
            db.write_bytes(b"")
    return setup


def read_only(home: Path) -> None:
    """The database file and its folder cannot be written (as root, mode bits do not stop root:
    mark them immutable where chattr works)."""
    (home / "pmem.db").chmod(0o444)
    home.chmod(0o555)
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(home / "pmem.db"), str(home)], capture_output=True)


def writable_again(home: Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(home), str(home / "pmem.db")], capture_output=True)
    home.chmod(0o700)
    if (home / "pmem.db").exists():
        (home / "pmem.db").chmod(0o600)


def cases() -> list[Case]:
    deep = "[" * 100_000 + "]" * 100_000
    c: list[Case] = []
    add = c.append
    # -- global options and the command tree ------------------------------------------------
    add(Case("version", ["--version"], 0))
    add(Case("help", ["--help"], 0))
    add(Case("unknown option", ["--bogus"], 2))
    add(Case("unknown command", ["frobnicate"], 2))
    add(Case("missing command", ["--db", "x.db"], 2))
    add(Case("--db without value", ["--db"], 2))
    add(Case("--db into missing folder, list", ["--db", "{home}/missing/folder/x.db", "list"], 1))
    add(Case("--db into missing folder, search", ["--db", "{home}/missing/folder/x.db", "search", "x"], 1))
    add(Case("--db into missing folder, export", ["--db", "{home}/missing/folder/x.db", "export"], 1))
    add(Case("--db is a directory", ["--db", "/tmp", "list"], 1))
    add(Case("--db is /proc/version", ["--db", "/proc/version", "list"], 1))
    add(Case("--db is a text file", ["--db", "{home}/notes.txt", "list"], 1, setup=write("notes.txt", "hello\n" * 500)))
    add(Case("--db is /dev/null", ["--db", "/dev/null", "list"], (0, 1)))
    add(Case("--db not UTF-8", ["--db", b"/tmp/caf\xe9.db", "list"], 2))
    # -- add ------------------------------------------------------------------------------------
    add(Case("add: text not UTF-8", ["add", b"caf\xe9 au lait"], 2))
    add(Case("add: lone surrogate bytes", ["add", b"\xed\xa0\x80 surrogate"], 2))
    add(Case("add: tag not UTF-8", ["add", "fine text", "--tag", b"t\xff"], 2))
    add(Case("add: source not UTF-8", ["add", "fine text", "--source", b"s\xfe"], 2))
    add(Case("add: meta not UTF-8", ["add", "fine text", "--meta", b"k=\xff"], 2))
    add(Case("add: empty text", ["add", ""], 2))
    add(Case("add: blank text", ["add", "   \t "], 2))
    add(Case("add: empty stdin", ["add"], 2, stdin=b""))
    add(Case("add: binary stdin", ["add"], 2, stdin=b"\x00\x01\x02\x03binary"))
    add(Case("add: stdin not UTF-8", ["add", "-"], 2, stdin=b"caf\xe9"))
    add(Case("add: stdin too large", ["add"], 2, stdin=b"x" * 400_010))
    add(Case("add: text over the limit", ["add", "y" * 100_001], 2))
    add(Case("add: --ttl 9000y", ["add", "x", "--ttl", "9000y"], 2))
    add(Case("add: --ttl 99999y", ["add", "x", "--ttl", "99999y"], 2))
    add(Case("add: --ttl 0d", ["add", "x", "--ttl", "0d"], 2))
    add(Case("add: --ttl -1d", ["add", "x", "--ttl", "-1d"], 2))
    add(Case("add: --ttl forever", ["add", "x", "--ttl", "forever"], 2))
    add(Case("add: --ttl 3 months", ["add", "x", "--ttl", "3 months"], 2))
    add(Case("add: --ttl of 400 digits", ["add", "x", "--ttl", "9" * 400 + "d"], 2))
    add(Case("add: --expires 99999999d", ["add", "x", "--expires", "99999999d"], 2))
    add(Case("add: --expires year 0", ["add", "x", "--expires", "0000-01-01"], 2))
    add(Case("add: --expires year 10000", ["add", "x", "--expires", "10000-01-01"], 2))
    add(Case("add: --expires nonsense", ["add", "x", "--expires", "next blue moon"], 2))
    add(Case("add: --expires 9999-12-31T23:00-05:00", ["add", "x", "--expires", "9999-12-31T23:00:00-05:00"], 2))
    add(Case("add: --at 0001-01-01T00:00+01:00", ["add", "x", "--at", "0001-01-01T00:00:00+01:00"], 2))
    add(Case("add: --at 99999-01-01", ["add", "x", "--at", "99999-01-01"], 2))
    add(Case("add: --at year 999 (valid)", ["add", "old news", "--at", "0999-06-01"], 0))
    add(Case("add: --ttl and --expires", ["add", "x", "--ttl", "3d", "--expires", "2030-01-01"], 2))
    add(Case("add: --tier nope", ["add", "x", "--tier", "nope"], 2))
    add(Case("add: --meta without =", ["add", "x", "--meta", "novalue"], 2))
    add(Case("add: --meta JSON 50,000 deep", ["add", "x", "--meta", "k=" + "[" * 50_000 + "]" * 50_000], 2))
    add(Case("add: --meta NaN (valid)", ["add", "x", "--meta", "k=NaN"], 0))
    add(Case("add: terminal escapes (valid)", ["add", "\x1b]52;c;aGk=\x07 \x1b[2J \u202e rtl"], 0))
    add(Case("add: --extract without a chat model", ["add", "I moved to Lisbon", "--extract"], 1))
    add(Case("add: no text on a terminal", ["add"], 2, pty=True))
    add(Case("add: interrupted while reading stdin", ["add"], 130, sigint_after=1.5))
    # -- search ---------------------------------------------------------------------------------
    add(Case("search: -k 0", ["search", "x", "-k", "0"], 2))
    add(Case("search: -k -1", ["search", "x", "-k", "-1"], 2))
    add(Case("search: -k 2**64", ["search", "x", "-k", BIG], 2))
    add(Case("search: -k abc", ["search", "x", "-k", "abc"], 2))
    add(Case("search: -k 1.5", ["search", "x", "-k", "1.5"], 2))
    add(Case("search: --mode magic", ["search", "x", "--mode", "magic"], 2))
    add(Case("search: blank query", ["search", "   "], 2))
    add(Case("search: query not UTF-8", ["search", b"caf\xe9"], 2))
    add(Case("search: --tag not UTF-8", ["search", "x", "--tag", b"\xff"], 2))
    add(Case("search: --since 99999999d", ["search", "x", "--since", "99999999d"], 2))
    add(Case("search: --since year 0", ["search", "x", "--since", "0000-12-31"], 2))
    add(Case("search: --until nonsense", ["search", "x", "--until", "whenever"], 2))
    add(Case("search: --as-of year 10000", ["search", "x", "--as-of", "10000-01-01"], 2))
    add(Case("search: --tier bogus", ["search", "x", "--tier", "bogus"], (0, 2)))
    add(Case("search: FTS syntax (valid)", ["search", 'NEAR( "x" AND * OR ( col:value'], 0))
    add(Case("search: 100,000-character query", ["search", "word " * 20_000], (0, 2)))
    add(Case("search: missing query", ["search"], 2))
    add(Case("search: -k 5000 (valid)", ["search", "canary", "-k", "5000"], 0))
    add(Case("search: --tag with -k 5000 (valid)", ["search", "canary", "--tag", "x", "-k", "5000"], 0))
    # -- recall ---------------------------------------------------------------------------------
    add(Case("recall: --budget 0", ["recall", "x", "--budget", "0"], 2))
    add(Case("recall: --budget -5", ["recall", "x", "--budget", "-5"], 2))
    add(Case("recall: --budget 2**64", ["recall", "x", "--budget", BIG], 2))
    add(Case("recall: --budget abc", ["recall", "x", "--budget", "abc"], 2))
    add(Case("recall: --format yaml", ["recall", "x", "--format", "yaml"], 2))
    add(Case("recall: --as-of 99999999d", ["recall", "x", "--as-of", "99999999d"], 2))
    add(Case("recall: query not UTF-8", ["recall", b"\xc3\x28"], 2))
    # -- list -----------------------------------------------------------------------------------
    add(Case("list: -n -1", ["list", "-n", "-1"], 2))
    add(Case("list: -n 2**64", ["list", "-n", BIG], 2))
    add(Case("list: --offset -5", ["list", "--offset", "-5"], 2))
    add(Case("list: --offset 2**64", ["list", "--offset", BIG], 2))
    add(Case("list: --sort bogus", ["list", "--sort", "bogus"], 2))
    add(Case("list: --since 99999999d", ["list", "--since", "99999999d"], 2))
    add(Case("list: --until year 10000", ["list", "--until", "10000-01-01"], 2))
    add(Case("list: --as-of nonsense", ["list", "--as-of", "the day after"], 2))
    add(Case("list: --tier bogus", ["list", "--tier", "bogus"], (0, 2)))
    add(Case("list: --tag not UTF-8", ["list", "--tag", b"\x80"], 2))
    add(Case("list: extra argument", ["list", "extra"], 2))
    add(Case("list: on a terminal (valid)", ["list"], 0, pty=True))
    add(Case("list: -n 0 (valid: all)", ["list", "-n", "0"], 0))
    # -- show / edit / pin / unpin / expire / forget / restore ------------------------------------
    add(Case("show: no such id", ["show", "zzzzzzzz"], 1))
    add(Case("show: empty id", ["show", ""], (1, 2)))
    add(Case("show: LIKE wildcard id", ["show", "%"], (1, 2)))
    add(Case("show: id not UTF-8", ["show", b"\xff\xfe"], 2))
    add(Case("show: missing id", ["show"], 2))
    add(Case("edit: no such id", ["edit", "zzzzzzzz", "new text"], 1))
    add(Case("edit: text not UTF-8", ["edit", "{canary}", b"caf\xe9"], 2))
    add(Case("edit: --tag not UTF-8", ["edit", "{canary}", "--tag", b"\xff"], 2))
    add(Case("edit: --untag not UTF-8", ["edit", "{canary}", "--untag", b"\xff"], 2))
    add(Case("edit: --tier bogus", ["edit", "{canary}", "--tier", "bogus"], 2))
    add(Case("edit: --meta without =", ["edit", "{canary}", "--meta", "x"], 2))
    add(Case("edit: blank text", ["edit", "{canary}", "   "], 2))
    add(Case("edit: binary stdin", ["edit", "{canary}", "-"], 2, stdin=b"\x00\x00"))
    add(Case("edit: EDITOR fails", ["edit", "{canary}"], 2, env={"EDITOR": "false", "VISUAL": ""}))
    add(Case("edit: EDITOR missing", ["edit", "{canary}"], 2, env={"EDITOR": "/nonexistent/editor", "VISUAL": ""}))
    add(Case("edit: EDITOR empties the file", ["edit", "{canary}"], 2, env={"EDITOR": "truncate -s 0", "VISUAL": ""}))
    add(Case("pin: no such id", ["pin", "zzzzzzzz"], 1))
    add(Case("pin: id not UTF-8", ["pin", b"\xff"], 2))
    add(Case("pin: no id", ["pin"], 2))
    add(Case("unpin: no such id", ["unpin", "00000000"], 1))
    add(Case("forget: no such id", ["forget", "zzzz"], 1))
    add(Case("restore: no such id", ["restore", "zzzz"], 1))
    add(Case("expire: --in 9000y", ["expire", "{canary}", "--in", "9000y"], 2))
    add(Case("expire: --in 99999999d", ["expire", "{canary}", "--in", "99999999d"], 2))
    add(Case("expire: --at year 10000", ["expire", "{canary}", "--at", "10000-01-01"], 2))
    add(Case("expire: --at nonsense", ["expire", "{canary}", "--at", "sometime"], 2))
    add(Case("expire: --in and --now", ["expire", "{canary}", "--in", "3d", "--now"], 2))
    add(Case("expire: no such id", ["expire", "zzzz", "--now"], 1))
    # -- history / log / undo --------------------------------------------------------------------
    add(Case("history: no such id", ["history", "zzzz"], 1))
    add(Case("history: id not UTF-8", ["history", b"\xff"], 2))
    add(Case("log: -n -1", ["log", "-n", "-1"], 2))
    add(Case("log: -n 2**64", ["log", "-n", BIG], 2))
    add(Case("log: -n abc", ["log", "-n", "abc"], 2))
    add(Case("undo: extra argument", ["undo", "extra"], 2))
    # -- import ----------------------------------------------------------------------------------
    imp = lambda name, data, code=2, fmt=None: add(Case(  # noqa: E731
        f"import: {name}", ["import", "{home}/in" + (fmt or ".jsonl")], code, setup=write("in" + (fmt or ".jsonl"), data)))
    add(Case("import: missing file", ["import", "/nonexistent/in.jsonl"], 2))
    add(Case("import: a directory", ["import", "/tmp"], 2))
    add(Case("import: /proc/version", ["import", "/proc/version"], (0, 2)))
    imp("binary file", b"\x00\x01\x02\xff")
    imp("file not UTF-8", b'{"text": "caf\xe9"}\n')
    imp("broken JSON line", jsonl({"text": "fine"}, "{not json"))
    imp("JSON nested 100,000 deep", jsonl({"text": "fine"}, deep))
    imp("object nested 100,000 deep", '{"text": "x", "meta": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}\n")
    imp("record without text", jsonl({"tags": ["a"]}))
    imp("text is a number", jsonl({"text": 5}))
    imp("text is blank", jsonl({"text": "  "}))
    imp("line is null", jsonl("null"))
    imp("line is a list", jsonl("[1, 2]"))
    imp("line is a string", jsonl('"just text"'))
    imp("created_at 99999999d", jsonl({"text": "x", "created_at": "99999999d"}))
    imp("created_at year 0", jsonl({"text": "x", "created_at": "0000-01-01T00:00:00Z"}))
    imp("created_at year 10000", jsonl({"text": "x", "created_at": "10000-01-01T00:00:00Z"}))
    imp("created_at a number", jsonl({"text": "x", "created_at": 12345}))
    imp("created_at nonsense", jsonl({"text": "x", "created_at": "the other day"}))
    imp("expires_at 9000y", jsonl({"text": "x", "expires_at": "9000y"}))
    imp("tags not a list", jsonl({"text": "x", "tags": {"a": 1}}))
    imp("tags with numbers", jsonl({"text": "x", "tags": [1, 2]}))
    imp("tier bogus", jsonl({"text": "x", "tier": "bogus"}))
    imp("pinned 'yes'", jsonl({"text": "x", "pinned": "yes"}))
    imp("meta a list", jsonl({"text": "x", "meta": [1]}))
    imp("access_count 2**64", jsonl({"text": "x", "access_count": 2**64}))
    imp("access_count -1", jsonl({"text": "x", "access_count": -1}))
    imp("surrogate escape in text", '{"text": "caf\\udce9"}\n')
    imp("surrogate escape in tag", '{"text": "x", "tags": ["\\ud800"]}\n')
    imp("surrogate escape in meta", '{"text": "x", "meta": {"k": "\\udfff"}}\n')
    imp("same id twice", jsonl({"id": "dup00001", "text": "a"}, {"id": "dup00001", "text": "b"}), (0, 2))
    imp("id not a string", jsonl({"id": 7, "text": "x"}))
    imp("year 999 (valid)", jsonl({"text": "old", "created_at": "0999-06-01T00:00:00Z"}), 0)
    imp("empty file (valid)", "", 0)
    imp("markdown: broken pmem comment", "- an item <!-- pmem {not json} -->\n", 2, ".md")
    imp("markdown: deep pmem comment", "- an item <!-- pmem {\"a\": " + "[" * 100_000 + "]" * 100_000 + "} -->\n", 2, ".md")
    imp("markdown: comment with bad tier", "- an item <!-- pmem {\"tier\": \"x\"} -->\n", 2, ".md")
    imp("markdown: far-future heading (valid)", "## 99999999d\n\n- an item\n", 0, ".md")
    add(Case("import: stdin binary", ["import", "-"], 2, stdin=b"\x00\xff\x00"))
    add(Case("import: stdin not UTF-8", ["import", "-"], 2, stdin=b'{"text": "\xff"}\n'))
    add(Case("import: stdin nested 100,000 deep", ["import", "-", "--format", "jsonl"], 2, stdin=deep.encode() + b"\n"))
    add(Case("import: --format yaml", ["import", "-", "--format", "yaml"], 2, stdin=b'{"text": "x"}\n'))
    add(Case("import: --tier bogus", ["import", "-", "--tier", "bogus"], 2, stdin=b'{"text": "x"}\n'))
    add(Case("import: --tag not UTF-8", ["import", "-", "--tag", b"\xff"], 2, stdin=b'{"text": "x"}\n'))
    add(Case("import: path not UTF-8", ["import", b"/tmp/\xff.jsonl"], 2))
    # -- export ----------------------------------------------------------------------------------
    add(Case("export: -o into a missing folder", ["export", "-o", "{home}/missing/folder/out.jsonl"], 2))
    add(Case("export: -o a directory", ["export", "-o", "/tmp"], 2))
    add(Case("export: -o /proc/version", ["export", "-o", "/proc/version"], (1, 2)))  # root may open it
    add(Case("export: -o /dev/full", ["export", "-o", "/dev/full"], 1))
    add(Case("export: --format yaml", ["export", "--format", "yaml"], 2))
    add(Case("export: -o not UTF-8", ["export", "-o", b"/tmp/\xff.jsonl"], 2))
    add(Case("export: stdout closed early (valid)", ["export", "--format", "md"], 0, env={"_PIPE_HEAD": "1"}))
    # -- stats / path / reindex / doctor ---------------------------------------------------------
    add(Case("stats: extra argument", ["stats", "x"], 2))
    add(Case("path: extra argument", ["path", "x"], 2))
    add(Case("reindex: extra argument", ["reindex", "x"], 2))
    add(Case("doctor: missing chat model file", ["doctor"], 1, env={"PMEM_CHAT_MODEL": "/nonexistent/chat.gguf"},
             report=True))
    add(Case("doctor: broken config", ["doctor"], 1, setup=write("config.toml", "recall_budget = = 3\n"), report=True))
    add(Case("doctor: chat model not fetched yet (info, valid)", ["--db", "{home}/new.db", "doctor"], 0,
             env={"PMEM_CHAT_MODEL": "SmolLM2-135M-Instruct", "PMEM_EMBED_MODEL": "{home}/e.gguf"}, report=True,
             setup=write("e.gguf", b"GGUF" + bytes(60))))
    # -- dream -----------------------------------------------------------------------------------
    add(Case("dream: --only bogus", ["dream", "--only", "bogus", "--no-model"], 2))
    add(Case("dream: --max-seconds 0", ["dream", "--max-seconds", "0", "--no-model"], 2))
    add(Case("dream: --max-seconds -1", ["dream", "--max-seconds", "-1", "--no-model"], 2))
    add(Case("dream: --max-seconds nan", ["dream", "--max-seconds", "nan", "--no-model"], 2))
    add(Case("dream: --max-seconds abc", ["dream", "--max-seconds", "abc"], 2))
    add(Case("dream: --include not UTF-8", ["dream", "--include", b"\xff", "--no-model"], 2))
    add(Case("dream: --apply without a terminal", ["dream", "--apply", "--no-model"], (0, 2)))
    # -- extract / why ---------------------------------------------------------------------------
    add(Case("extract: missing file", ["extract", "/nonexistent/chat.txt"], 2))
    add(Case("extract: binary file", ["extract", "{home}/b.txt"], 2, setup=write("b.txt", b"\x00\x01")))
    add(Case("extract: file not UTF-8", ["extract", "{home}/l.txt"], 2, setup=write("l.txt", b"caf\xe9")))
    add(Case("extract: empty stdin", ["extract"], 2, stdin=b""))
    add(Case("extract: no chat model", ["extract", "--dry-run"], 1, stdin=b"Dana: I moved to Lisbon in May.\n"))
    add(Case("extract: --model missing", ["extract", "--model", "/nonexistent/m.gguf"], 1, stdin=b"Dana: hi\n"))
    add(Case("extract: --review without a terminal", ["extract", "--review"], 2, stdin=b"Dana: hi\n"))
    add(Case("extract: --at year 10000", ["extract", "--at", "10000-01-01"], 2, stdin=b"Dana: hi\n"))
    add(Case("why: no such id", ["why", "zzzz"], 1))
    # -- serve / tui -----------------------------------------------------------------------------
    add(Case("serve: --threads -1", ["serve", "--threads", "-1"], 2))
    add(Case("serve: --idle forever", ["serve", "--idle", "forever"], 2))
    add(Case("serve: --idle 99999y", ["serve", "--idle", "99999y"], 2))
    add(Case("serve: --stop and --status", ["serve", "--stop", "--status"], 2))
    add(Case("serve: --stop with none running", ["serve", "--stop"], 1))
    add(Case("serve: --status with none running", ["serve", "--status"], 1))
    add(Case("tui: not a terminal", ["tui"], 2))
    add(Case("tui: quit at once on a terminal", ["tui"], 0, pty=True, pty_input=b"q"))
    add(Case("tui: year-999 memory on a terminal", ["tui"], 0, pty=True, pty_input=b"q",
             setup=lambda home: run(["add", "old", "--at", "0999-06-01"], home)))
    # -- models / config -------------------------------------------------------------------------
    add(Case("models: pull an unknown name", ["models", "pull", "no-such-model"], (1, 2)))
    add(Case("models: list extra", ["models", "list", "extra"], 2))
    add(Case("models: unknown subcommand", ["models", "frob"], 2))
    add(Case("config: set unknown key", ["config", "set", "nonsense", "1"], 2))
    add(Case("config: set bad int", ["config", "set", "recall_budget", "lots"], 2))
    add(Case("config: set bad choice", ["config", "set", "server", "sometimes"], 2))
    add(Case("config: set value with a newline", ["config", "set", "chat_model", "a\nb"], 2))
    add(Case("config: set value not UTF-8", ["config", "set", "chat_model", b"\xff"], 2))
    add(Case("config: get unknown key", ["config", "get", "nonsense"], 2))
    add(Case("config: set with broken config.toml", ["config", "set", "recall_budget", "800"], (0, 2),
             setup=write("config.toml", "recall_budget = = 3\n")))
    add(Case("config: show with broken config.toml", ["config"], 2, setup=write("config.toml", "[[[\n")))
    add(Case("config: config.toml not UTF-8", ["config"], 2, setup=write("config.toml", b"chat_model = \"\xff\"\n")))
    add(Case("config: config.toml wrong type", ["config"], 2, setup=write("config.toml", 'recall_budget = "x"\n')))
    add(Case("config: config.toml unknown key", ["list"], 2, setup=write("config.toml", "bogus = 1\n")))
    add(Case("config: config.toml a directory", ["config"], (1, 2), setup=lambda h: (h / "config.toml").mkdir()))
    add(Case("list with broken config.toml", ["list"], 2, setup=write("config.toml", "x = [\n")))
    # -- environment variables -------------------------------------------------------------------
    add(Case("env: PMEM_DB is a directory", ["list"], 1, env={"PMEM_DB": "/tmp"}))
    add(Case("env: PMEM_DB into a missing folder", ["list"], 1, env={"PMEM_DB": "{home}/missing/folder/p.db"}))
    add(Case("env: PMEM_HOME is a file", ["list"], 1, env={"PMEM_HOME": "/proc/version"}))
    add(Case("env: PMEM_RECALL_BUDGET=lots", ["recall", "x"], 2, env={"PMEM_RECALL_BUDGET": "lots"}))
    add(Case("env: PMEM_SERVER=sometimes", ["list"], 2, env={"PMEM_SERVER": "sometimes"}))
    add(Case("env: PMEM_THREADS=-5", ["search", "x"], (0, 2), env={"PMEM_THREADS": "-5"}))
    add(Case("env: PMEM_EMBED_MODEL missing file", ["add", "new text"], 1, env={"PMEM_EMBED_MODEL": "/nonexistent/e.gguf"}))
    add(Case("env: PMEM_EMBED_MODEL unknown name", ["add", "new text"], (1, 2), env={"PMEM_EMBED_MODEL": "no-such-model"}))
    add(Case("env: PMEM_CHAT_MODEL not UTF-8", ["config"], (0, 2), env={"PMEM_CHAT_MODEL": b"\xff"}))
    add(Case("env: PYTHONIOENCODING=ascii, non-ASCII memory", ["list"], (0, 1), env={"PYTHONIOENCODING": "ascii"},
             setup=lambda home: run(["add", "café ☕"], home)))
    add(Case("env: NO_COLOR on a terminal (valid)", ["stats"], 0, env={"NO_COLOR": "1"}, pty=True))
    # -- damaged databases -----------------------------------------------------------------------
    for how in ("truncate", "header", "pages"):
        for argv in (["list"], ["search", "canary"], ["add", "more"], ["dream", "--no-model"], ["export"]):
            add(Case(f"damaged db ({how}): {argv[0]}", argv, 1, setup=corrupt_db(how), damages_db=True))
    add(Case("damaged db (empty file): list", ["list"], 0, setup=corrupt_db("empty"), damages_db=True))
    add(Case("damaged db (pages): doctor", ["doctor"], 1, setup=corrupt_db("pages"), damages_db=True, report=True))
    for argv, code in ((["list"], 0), (["search", "canary"], 0), (["search", "canary", "--mode", "keyword"], 0),
                       (["show", "{canary}"], 0), (["stats"], 0), (["export"], 0), (["recall", "canary"], 0),
                       (["add", "more"], 1), (["pin", "{canary}"], 1)):
        add(Case(f"read-only database: {' '.join(argv[:3])}", argv, code, setup=read_only))
    for argv, code in ((["list"], 0), (["search", "canary"], 1), (["search", "canary", "--mode", "keyword"], 0),
                       (["dream", "--no-model"], 1), (["add", "more"], 1), (["export"], 0)):
        add(Case(f"damaged vector pages: {' '.join(argv[:3])}", argv, code, setup=corrupt_db("vectors"),
                 damages_db=True))
    add(Case("damaged vector pages: doctor", ["doctor"], 1, setup=corrupt_db("vectors"), damages_db=True, report=True))
    c.extend(import_cases())
    c.extend(huge_cases())
    c.extend(agent_cases())
    return c


# BADINPUT_MUTATIONS=all: every wrong type of every field (about 5x the cases), else one per field
MUTATE_ALL = os.environ.get("BADINPUT_MUTATIONS") == "all"
KEPT = [("user", "The untouched conversation stays whole."), ("assistant", "It is imported as it was.")]


def _mutated(fmt: str, label: str, doc, record: tuple, name: str, keeps: tuple, dump=json.dumps,
             folder: str = "", also: Callable[[Path], None] | None = None) -> list[Case]:
    """One case per mutation of `doc` under `record`, written to `name` in the case's home (in
    `folder`, imported as that folder, when given; `also` writes the folder's other files)."""
    out = []
    for path, wrong, mutated in fx.mutations(doc, record, every=MUTATE_ALL):
        target = f"{folder}/{name}" if folder else name
        data = dump(mutated)

        def setup(home: Path, target=target, data=data) -> None:
            write(target, data)(home)
            if also:
                also(home)
        out.append(Case(f"import mutated {label}: {fx.mutation_name(path, wrong)}",
                        ["import", "{home}/" + (folder or name), "--format", fmt], (0, 2),
                        setup=setup, keeps=keeps if path else ()))
    return out


def _lines(rows) -> str:
    """JSON lines; a mutation that made the list itself something else is one line of that."""
    return "".join(json.dumps(r) + "\n" for r in rows) if isinstance(rows, list) else json.dumps(rows) + "\n"


def import_cases() -> list[Case]:
    """Every importer against its own format with a wrong type somewhere (issue 33's first item)."""
    two = [("user", "I moved to Lisbon in May."), ("assistant", "How are you finding it?")]
    c: list[Case] = []
    chats = [fx.chatgpt_conversation("c1", two, branch=False, extras=False),
             fx.chatgpt_conversation("c2", KEPT, branch=False, extras=False)]
    c += _mutated("chatgpt", "chatgpt", chats, (0,), "conversations.json",
                  ("User: " + KEPT[0][1], "ChatGPT: " + KEPT[1][1]))
    claude = [fx.claude_ai_conversation("k1", [("human", "Plan a week in Kyoto"), ("assistant", "Day one.")]),
              fx.claude_ai_conversation("k2", [("human", KEPT[0][1]), ("assistant", KEPT[1][1])])]
    claude[0]["current_leaf_message_uuid"] = "k1-1"
    for i, m in enumerate(claude[0]["chat_messages"]):
        m["parent_message_uuid"] = f"k1-{i - 1}" if i else None
    c += _mutated("claude-ai", "claude-ai", claude, (0,), "conversations.json",
                  ("User: " + KEPT[0][1], "Claude: " + KEPT[1][1]))
    session = fx.claude_code_session("s-1", "/home/sam/parser")
    other = [x for x in fx.claude_code_session("s-2", "/home/sam/other") if x.get("uuid") in ("u4", "a4")]
    c += _mutated("claude-code", "claude-code", [session[2], session[3]], (), "p/s-1.jsonl",
                  ("User: Please fix it and add a test.",), dump=_lines, folder="projects",
                  also=write("projects/q/s-2.jsonl", _lines(other)))
    mem0 = json.loads(json.dumps(fx.MEM0_GET_ALL))
    mem0["results"][1]["memory"] = "The untouched memory stays whole."
    c += _mutated("mem0", "mem0", mem0, ("results", 0), "mem0.json", ("The untouched memory stays whole.",))
    graph = [{"type": "entity", "name": "Ada", "entityType": "person", "observations": ["Prefers tea"]},
             {"type": "relation", "from": "Ada", "to": "Acme", "relationType": "works_at"},
             {"type": "entity", "name": "Bo", "entityType": "person", "observations": ["The untouched one"]}]
    for record in ((0,), (1,)):
        c += _mutated("mcp-memory", "mcp-memory", graph, record, "memory.jsonl", ("Bo: The untouched one",),
                      dump=_lines)
    mine = [{"text": "a memory", "tags": ["a"], "meta": {"k": "v"}, "created_at": "2026-01-01T00:00:00Z",
             "thread": "t", "thread_pos": 0}, {"text": "The untouched memory stays whole."}]
    c += _mutated("jsonl", "pmem jsonl", mine, (0,), "in.jsonl", ("The untouched memory stays whole.",), dump=_lines)
    # the other shapes of issue 33's imports
    turns = [("user" if i % 2 == 0 else "assistant", f"message number {i}") for i in range(700)]
    turns[599] = ("assistant", "a NUL \u0000 here")
    add = c.append
    add(Case("import: 600th message holds a NUL (valid: left out)", ["import", "{home}/conversations.json"], 0,
             setup=write("conversations.json", json.dumps([fx.chatgpt_conversation("n", turns, extras=False,
                                                                                    branch=False)])),
             keeps=("User: message number 598",)))
    add(Case("import: claude-code cwd is a list (valid: line left out)", ["import", "{home}/p/s.jsonl"], 0,
             setup=write("p/s.jsonl", _lines([{**session[2], "cwd": ["/x"]}, *session[3:]]))))
    add(Case("import: chat export, --tier bogus", ["import", "{home}/conversations.json", "--tier", "bogus"], 2,
             setup=write("conversations.json", json.dumps(chats))))

    def zipped(flag: str):
        def setup(home: Path) -> None:
            import zipfile
            path = home / "export.zip"
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("conversations.json", json.dumps(chats))
            raw = bytearray(path.read_bytes())
            local, central = 0, raw.index(b"PK\x01\x02")
            if flag == "encrypted":
                raw[local + 6] |= 1
                raw[central + 8] |= 1
            else:  # Deflate64, what Windows Explorer writes for large files
                raw[local + 8:local + 10] = (9).to_bytes(2, "little")
                raw[central + 10:central + 12] = (9).to_bytes(2, "little")
            path.write_bytes(bytes(raw))
        return setup
    add(Case("import: zip member encrypted", ["import", "{home}/export.zip"], 2, setup=zipped("encrypted")))
    add(Case("import: zip member Deflate64", ["import", "{home}/export.zip"], 2, setup=zipped("deflate64")))

    def llm_without_id(home: Path) -> None:
        db = fx.llm_db_new(home / "logs.db")
        conn = sqlite3.connect(db)
        conn.executescript("CREATE TABLE r2 AS SELECT model, prompt, response, conversation_id FROM responses;"
                           "DROP TABLE responses; ALTER TABLE r2 RENAME TO responses;")
        conn.close()
    add(Case("import: llm responses without an id column (valid)", ["import", "{home}/logs.db"], 0,
             setup=llm_without_id))
    return c


def huge_cases() -> list[Case]:
    """Huge input: refused at read time, before any model work, within a second or two."""
    big_record = json.dumps({"text": "x" * 200_000}) + "\n"
    ten_mb = json.dumps({"text": "y" * 10_000_000}) + "\n"
    garbage_line = (b"QmFzZTY0IGdhcmJhZ2U" * 5_300_000)[:100_000_000]  # 100 MB, no line end
    garbage_lines = (b"some garbage text, line after line\n" * 2_860_000)[:100_000_000]
    log = "\n".join(f"2026-01-01 12:00:{i % 60:02d} INFO worker {i} finished its step" for i in range(120_000))
    pasted = [fx.chatgpt_conversation("log", [("user", "Here is the log:\n" + log), ("assistant", "All done.")],
                                      extras=False, branch=False)]
    add: list[Case] = []
    add.append(Case("huge: JSONL record of 200,000 characters", ["import", "{home}/big.jsonl"], 2,
                    setup=write("big.jsonl", big_record), max_seconds=10))
    add.append(Case("huge: 10 MB JSONL line on stdin", ["import", "-"], 2, stdin=ten_mb.encode(), max_seconds=10))
    add.append(Case("huge: 100 MB of garbage on stdin, one line", ["import", "-"], 2, stdin=garbage_line,
                    max_seconds=10))
    add.append(Case("huge: 100 MB of garbage on stdin, many lines", ["import", "-"], 2, stdin=garbage_lines,
                    max_seconds=10))
    add.append(Case("huge: Markdown paragraph of 10 MB", ["import", "{home}/notes.md"], 2,
                    setup=write("notes.md", "one line of a note\n" * 550_000), max_seconds=10))
    add.append(Case("huge: 5 MB log pasted in a chat export (valid)", ["import", "{home}/conversations.json"], 0,
                    setup=write("conversations.json", json.dumps(pasted)), max_seconds=30,
                    keeps=("ChatGPT: All done.",)))
    add.append(Case("huge: add, 10 MB on stdin", ["add"], 2, stdin=b"z" * 10_000_000, max_seconds=10))
    add.append(Case("huge: extract, 10 MB on stdin", ["extract", "--dry-run"], 2, stdin=b"z" * 10_000_000,
                    max_seconds=10))
    return add


def agent_cases() -> list[Case]:
    """Hooks print nothing and exit 0 on any input; the MCP server keeps stdout JSON-RPC."""
    c: list[Case] = []
    for event in ("session-start", "user-prompt"):
        for label, data in (("garbage", b"\x00\xff not json at all"), ("a list", b"[1, 2, 3]"),
                            ("prompt a list", b'{"prompt": ["x"], "session_id": {"a": 1}}'),
                            ("cwd a number", b'{"prompt": "x", "cwd": 7, "session_id": "s"}'),
                            ("10 MB prompt", json.dumps({"prompt": "p " * 5_000_000, "session_id": "s"}).encode()),
                            ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000)):
            c.append(Case(f"hook claude-code {event}: {label}", ["hook", "claude-code", event], 0, stdin=data,
                          max_seconds=15))
    hello = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bad", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]

    def session(*calls) -> bytes:
        return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in (*hello, *calls)).encode()

    def call(i: int, tool: str, args) -> dict:
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": args}}

    c.append(Case("mcp: garbage lines between calls", ["mcp"], 0, jsonrpc=True,
                  stdin=session("not json", "\x1b]0;x\x07", call(2, "search", {"query": "canary"}))))
    c.append(Case("mcp: arguments of the wrong types", ["mcp"], 0, jsonrpc=True,
                  stdin=session(call(2, "remember", {"text": ["x"]}), call(3, "search", {"query": {"a": 1}}),
                                call(4, "recall", {"query": "x", "budget": "lots"}), call(5, "forget", {"id": 7}))))
    c.append(Case("mcp: a 10 MB remember", ["mcp"], 0, jsonrpc=True, max_seconds=30,
                  stdin=session(call(2, "remember", {"text": "m " * 5_000_000}))))
    return c


# -- running ---------------------------------------------------------------------------------

def base_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_HOME=str(home), PMEM_EMBED_MODEL="fake-64", PMEM_CHAT_MODEL="/nonexistent/chat-model.gguf",
               PMEM_MODELS_DIR=str(home / "models"), PMEM_SERVER="off", NO_COLOR="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


def run(args, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pmem", *args], env=base_env(home), capture_output=True,
                          timeout=60, check=True)


def make_template(root: Path) -> tuple[Path, str]:
    home = root / "template"
    home.mkdir()
    out = run(["add", CANARY, "--tag", "canary"], home)
    return home, out.stdout.decode().strip()


def canary_alive(home: Path, canary_id: str) -> bool:
    immutable = "" if os.access(home, os.W_OK) else "&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{home / 'pmem.db'}?mode=ro{immutable}", uri=True)
        try:
            row = conn.execute("SELECT text, forgotten_at FROM memories WHERE id = ?", (canary_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == CANARY and row[1] is None


def _arg(a, home: Path, canary: str):
    if isinstance(a, bytes):
        return a
    return a.replace("{home}", str(home)).replace("{canary}", canary)


def run_case(case: Case, home: Path, canary: str) -> dict:
    env = base_env(home)
    env.update({k: _arg(v, home, canary) for k, v in case.env.items() if not k.startswith("_")})
    env = {k: (os.fsdecode(v) if isinstance(v, bytes) else v) for k, v in env.items()}
    argv = [sys.executable, "-m", "pmem", *[_arg(a, home, canary) for a in case.argv]]
    started = time.monotonic()
    stdout = b""
    if case.pty:
        code, stderr = _run_pty(argv, env, case.pty_input)
        if code != 0:  # the terminal carries stdout too: keep the lines that are not the screen
            stderr = b"\n".join(line for line in stderr.replace(b"\r", b"").split(b"\n") if b"\x1b" not in line)
    elif case.sigint_after is not None:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        time.sleep(case.sigint_after)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        code, stderr = p.returncode, err
    elif "_PIPE_HEAD" in case.env:
        for i in range(3):  # enough text that `head` leaves before pmem is done
            subprocess.run([sys.executable, "-m", "pmem", "import", "-"], env=env, capture_output=True, check=True,
                           input=("\n".join(json.dumps({"text": f"filler {i}-{j} " + "x" * 200})
                                            for j in range(2000)) + "\n").encode())
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        p.stdout.read(100)
        p.stdout.close()
        stderr = p.stderr.read()
        code = p.wait(timeout=60)
    else:
        limit = case.max_seconds * 6 if case.max_seconds else 300  # a stall is stopped, and counted as one
        p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            stdout, stderr = p.communicate(case.stdin if case.stdin is not None else b"", timeout=limit)
            code = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            code = None
            stderr += f"(stopped after {limit} s)".encode()
    err = stderr.decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if line.strip()]
    expected = case.code if isinstance(case.code, tuple) else (case.code,)
    error_lines = [line for line in lines if line.startswith("pmem: error:")]
    one_line = code == 0 or (not lines if case.report else (len(error_lines) == 1 and len(lines) == 1))
    seconds = round(time.monotonic() - started, 2)
    alive = None if case.damages_db else canary_alive(home, canary)
    stored_ok = None
    if case.keeps or (isinstance(case.code, tuple) and case.name.startswith("import mutated")):
        texts = stored_texts(home)
        stored_ok = (all(k in texts for k in case.keeps) if code == 0
                     else texts == [CANARY] if code == 2 else None)
    return {"name": case.name, "exit": code, "expected": list(expected), "exit_ok": code in expected,
            "traceback": "Traceback" in err, "one_line": one_line, "canary": alive,
            "stored_ok": stored_ok, "slow": case.max_seconds is not None and seconds > case.max_seconds,
            "jsonrpc_ok": _jsonrpc(stdout) if case.jsonrpc else None,
            "seconds": seconds, "stderr": err[-600:]}


def stored_texts(home: Path) -> list[str]:
    try:
        conn = sqlite3.connect(f"file:{home / 'pmem.db'}?mode=ro", uri=True)
        try:
            return [t for (t,) in conn.execute("SELECT text FROM memories WHERE forgotten_at IS NULL")]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _jsonrpc(stdout: bytes) -> bool:
    try:
        return all(json.loads(line).get("jsonrpc") == "2.0" for line in stdout.splitlines() if line.strip())
    except (ValueError, AttributeError):
        return False


def _run_pty(argv, env, keys: bytes) -> tuple[int, bytes]:
    """stdin, stdout and stderr on a pty, as in a terminal; returns everything it showed."""
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    p = subprocess.Popen(argv, env={**env, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"},
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    deadline = time.monotonic() + (20 if keys else 30)
    sent = False
    started = time.monotonic()
    shown = bytearray()
    while time.monotonic() < deadline:
        select.select([master], [], [], 0.2)
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        shown += chunk
        if not chunk and p.poll() is not None:
            break
        if keys and not sent and time.monotonic() - started > 6:
            os.write(master, keys)
            sent = True
    if p.poll() is None:
        p.kill()
    p.wait()
    os.close(master)
    return p.returncode, bytes(shown)


def run_home(case: Case, template: Path, root: Path, i: int | str, canary: str) -> dict:
    """`case` on a copy of the template home; the copy is removed after."""
    home = root / f"case{i}"
    shutil.copytree(template, home)
    try:
        if case.setup:
            case.setup(home)
        return run_case(case, home, canary)
    finally:
        writable_again(home)
        shutil.rmtree(home, ignore_errors=True)


def missed(r: dict) -> bool:
    return not (r["exit_ok"] and not r["traceback"] and r["one_line"] and r["canary"] is not False
                and r["stored_ok"] is not False and not r["slow"] and r["jsonrpc_ok"] is not False)

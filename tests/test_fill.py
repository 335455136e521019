"""The background fill of English memories' second vectors after an import (pmem/fill.py):
a detached process, one at a time, resumable after kill -9 with nothing lost or doubled, and
search answering while it waits or runs; its state as `pmem stats` shows it. (A sync's fill and an
import's never at once: tests/sync/test_sync_vectors.py.)

The main model is a fake under e5's name (the fill never runs it); the second model is the real
MiniLM in the child process, so those tests are @pytest.mark.model."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pmem import Memory, fill, search
from pmem.integrations.importers.registry import run_import
from pmem.models.embed import FakeEmbedder
from pmem.service import MemoryStore
from pmem.store import english as en

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [f"{who} {what} on day {day} of the trip." for day in range(12)
         for who in ("Anna", "Ben", "Chloe", "Dev", "Elif")
         for what in ("bought fresh bread", "walked along the river", "wrote a long letter home",
                      "fixed the bike's chain", "called an old friend")]
RUSSIAN = "Моя сестра Лена живёт в Порту и работает архитектором."


class MainFake(FakeEmbedder):
    """A fake under e5's name: the store's vectors count as e5's, so second vectors are kept."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.name = en.MAIN


def imported(path: Path, texts: list[str]) -> None:
    """A store as `pmem import` leaves it: rows and main vectors, no second vectors yet."""
    with MemoryStore(path, embedder=MainFake(64)) as store:
        result = run_import(store, [Memory(id=f"t{i}", text=t) for i, t in enumerate(texts)], english_later=True)
        assert result.imported == len(texts)
        assert store.conn.execute("SELECT count(*) FROM memory_vec_en").fetchone()[0] == 0


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PMEM_THREADS="1")
    env.pop("PMEM_EMBED_MODEL", None)
    return env


def rows(path: Path) -> dict[int, bytes]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT seq, embedding FROM memory_vec_en"))


def english_seqs(path: Path) -> set[int]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return {s for s, t in conn.execute("SELECT seq, text FROM memories") if en.is_english(t)}


def cosine(a: bytes, b: bytes) -> float:
    x, y = struct.unpack(f"<{len(a) // 4}f", a), struct.unpack(f"<{len(b) // 4}f", b)
    return sum(p * q for p, q in zip(x, y)) / (sum(p * p for p in x) * sum(q * q for q in y)) ** 0.5


@pytest.mark.model
def test_the_fill_resumes_after_kill_9_with_nothing_lost_or_doubled(tmp_path):
    db = tmp_path / "pmem.db"
    imported(db, TEXTS + [RUSSIAN])
    want = english_seqs(db)
    assert len(want) == len(TEXTS)
    child = subprocess.Popen([sys.executable, "-m", "pmem.fill", str(db)], env=child_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not rows(db) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    part = rows(db)
    assert 0 < len(part) < len(want), "killed before its first batch or after its last"
    assert fill.running(db) is False  # the kernel dropped the dead fill's lock
    assert fill.last(db)["running"] is True  # its last word: it never finished

    done = subprocess.run([sys.executable, "-m", "pmem.fill", str(db)], env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    full = rows(db)
    assert set(full) == want  # every English memory once (seq is the key), the Russian one none
    assert all(full[s] == part[s] for s in part)  # what the killed fill committed stays
    state = fill.last(db)
    assert state["ok"] and not state["running"] and state["done"] == len(want) - len(part)

    # the vectors are MiniLM's, as the store embeds them when it writes both at once
    with MemoryStore(db, embedder=MainFake(64)) as store:
        by_text = dict(store.conn.execute("SELECT text, seq FROM memories"))
        english = [t for t in TEXTS if by_text[t] in want]  # embedded in one call, as a bulk write does
        with store.vectors.exactly():  # the fill's: float32 (no one waits for these; pmem.store.refine)
            blobs = store.vectors.english._embed(english)
        for text, blob in list(zip(english, blobs))[::17]:
            assert cosine(full[by_text[text]], blob) > 0.9999


@pytest.mark.model
def test_search_answers_while_the_fill_waits_and_one_fill_runs_at_a_time(tmp_path):
    db = tmp_path / "pmem.db"
    imported(db, TEXTS[:40])
    lock = os.open(fill.lock_file(db), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a fill already running
    try:
        assert fill.running(db)
        assert fill.kick(db)
        with MemoryStore(db, embedder=MainFake(64)) as store:
            hits = search(store, "who fixed a bike", limit=3)
            assert hits and store.english_missing() == 40
        time.sleep(1.0)
        assert rows(db) == {}  # the kicked fill waits for the running one
    finally:
        os.close(lock)
    deadline = time.monotonic() + 120
    while (not fill.last(db) or fill.last(db).get("running")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(rows(db)) == 40 and fill.last(db)["ok"]
    while fill.running(db) and time.monotonic() < deadline:  # its last word written, it ends
        time.sleep(0.05)
    assert not fill.running(db)


def test_a_sync_with_nothing_to_fill_writes_nothing_and_a_held_lock_is_busy(store):
    db = store.path
    store.add("a memory that has its vector")
    assert fill.unless_busy(store) == {"filled": 0, "busy": False, "vectors_missing": 0}
    assert fill.last(db) is None  # the last fill's record stays as it was: none
    with fill.one_at_a_time(db) as held:
        assert held and fill.running(db)
        with fill.one_at_a_time(db, wait=False) as second:
            assert second is False
        assert fill.unless_busy(store)["busy"] is True
    assert not fill.running(db)


def test_stats_shows_the_fill_while_it_runs_and_where_it_stopped(store):
    import json

    from typer.testing import CliRunner

    from pmem.cli.app import app

    db = store.path
    store.add("a memory")

    def stats(*flags: str) -> str:
        r = CliRunner().invoke(app, ["--db", str(db), "stats", *flags])
        assert r.exit_code == 0, r.output
        return r.stdout

    assert json.loads(stats("--json"))["fill"] == {"running": False, "by": None}
    assert "background fill" not in stats()
    fill.state_file(db).write_text(json.dumps({"running": True, "done": 64, "total": 1200, "by": "import"}))
    with fill.one_at_a_time(db):
        assert json.loads(stats("--json"))["fill"] == {"running": True, "by": "import", "done": 64, "total": 1200}
        assert "background fill  running (64 of 1,200 done)" in stats()
    fill.state_file(db).write_text(json.dumps({"running": False, "ok": False, "error": "no MiniLM", "by": "join",
                                               "at": "2026-12-06T17:00:00Z"}))
    assert json.loads(stats("--json"))["fill"] == {"running": False, "by": "join", "error": "no MiniLM",
                                                   "at": "2026-12-06T17:00:00Z"}
    assert "background fill  stopped: no MiniLM" in stats()

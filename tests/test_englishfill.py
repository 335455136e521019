"""The background fill of English memories' second vectors after an import (pmem/englishfill.py):
a detached process, one at a time, resumable after kill -9 with nothing lost or doubled, and
search answering while it waits or runs.

The main model is a fake under e5's name (the fill never runs it); the second model is the real
MiniLM in the child process, so these are @pytest.mark.model."""

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

from pmem import Memory, englishfill, search
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
    child = subprocess.Popen([sys.executable, "-m", "pmem.englishfill", str(db)], env=child_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not rows(db) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    part = rows(db)
    assert 0 < len(part) < len(want), "killed before its first batch or after its last"
    assert englishfill.running(db) is False  # the kernel dropped the dead fill's lock
    assert englishfill.last(db)["running"] is True  # its last word: it never finished

    done = subprocess.run([sys.executable, "-m", "pmem.englishfill", str(db)], env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    full = rows(db)
    assert set(full) == want  # every English memory once (seq is the key), the Russian one none
    assert all(full[s] == part[s] for s in part)  # what the killed fill committed stays
    state = englishfill.last(db)
    assert state["ok"] and not state["running"] and state["done"] == len(want) - len(part)

    # the vectors are MiniLM's, as the store embeds them when it writes both at once
    with MemoryStore(db, embedder=MainFake(64)) as store:
        by_text = dict(store.conn.execute("SELECT text, seq FROM memories"))
        sample = TEXTS[::17]
        for text, blob in zip(sample, store.vectors.english._embed(sample)):  # as a write embeds them
            assert cosine(full[by_text[text]], blob) > 0.9999


@pytest.mark.model
def test_search_answers_while_the_fill_waits_and_one_fill_runs_at_a_time(tmp_path):
    db = tmp_path / "pmem.db"
    imported(db, TEXTS[:40])
    lock = os.open(englishfill.lock_file(db), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a fill already running
    try:
        assert englishfill.running(db)
        assert englishfill.kick(db)
        with MemoryStore(db, embedder=MainFake(64)) as store:
            hits = search(store, "who fixed a bike", limit=3)
            assert hits and store.english_missing() == 40
        time.sleep(1.0)
        assert rows(db) == {}  # the kicked fill waits for the running one
    finally:
        os.close(lock)
    deadline = time.monotonic() + 120
    while (not englishfill.last(db) or englishfill.last(db).get("running")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(rows(db)) == 40 and englishfill.last(db)["ok"]
    while englishfill.running(db) and time.monotonic() < deadline:  # its last word written, it ends
        time.sleep(0.05)
    assert not englishfill.running(db)

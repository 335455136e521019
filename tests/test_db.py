"""The database file (pmem/db.py): driver choice, sqlite-vec, permissions, bad files, locks, pages.
The migrations are tested in tests/store/test_migrations.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from pmem import MemoryStore, db
from pmem.errors import DatabaseError


def test_driver_loads_sqlite_vec(tmp_path):
    conn = db.connect(tmp_path / "x.db")
    assert conn.execute("SELECT vec_version()").fetchone()[0].startswith("v")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_new_database_is_private(tmp_path):
    path = tmp_path / "deep" / "dir" / "p.db"
    db.connect(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_corrupt_file_is_a_clear_error(tmp_path, fake_config):
    path = tmp_path / "bad.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(DatabaseError, match="not a usable pmem database|file is not a database"):
        MemoryStore(path, config=fake_config)
    assert path.read_bytes().startswith(b"this is not sqlite")  # untouched


def test_directory_is_not_a_database(tmp_path, fake_config):
    with pytest.raises(DatabaseError):
        MemoryStore(tmp_path, config=fake_config)


def test_locked_database_gives_clear_error(tmp_path, fake_config):
    path = tmp_path / "l.db"
    with MemoryStore(path, config=fake_config) as s:
        s.add("before the lock")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pmem import db; c = db.connect(sys.argv[1]);"
         "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(30)", str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        from pmem.models.embed import FakeEmbedder

        with pytest.raises(DatabaseError, match="locked"):
            store = MemoryStore(path, config=fake_config, embedder=FakeEmbedder(64))
            store.conn.execute("PRAGMA busy_timeout = 200")
            store.add("during the lock")
    finally:
        holder.kill()
        holder.wait()
    with MemoryStore(path, config=fake_config) as s:
        assert [m.text for m in s.list_memories()] == ["before the lock"]


def test_file_databases_are_read_through_a_memory_map(tmp_path, fake_config):
    """Reads of a store go through mmap (the keyword side of a large store's search looks up
    thousands of rows); what was written reads back the same through a new mapped connection."""
    path = tmp_path / "m.db"
    with MemoryStore(path, config=fake_config) as store:
        assert store.conn.execute("PRAGMA mmap_size").fetchone()[0] > 0
        memory, _ = store.add("mapped reads still find this")
    conn = db.connect(path, create=False)
    try:
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] > 0
        assert conn.execute("SELECT text FROM memories WHERE id = ?", (memory.id,)).fetchone()[0] == memory.text
    finally:
        conn.close()


def test_a_new_store_has_larger_pages_and_an_existing_one_keeps_its_own(tmp_path, fake_config):
    """A vector row (~1.55 KB at 384-d) fills 5 of 8 KB where 4 KB held 2: new stores use 8 KB
    pages. A store made with 4 KB pages opens, reads and writes as before, with its own size."""
    with MemoryStore(tmp_path / "new.db", config=fake_config) as store:
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == db.PAGE_SIZE == 8192
        store.add("a memory in a new store")
    old = tmp_path / "old.db"
    raw = db.driver().connect(str(old))
    raw.execute("PRAGMA page_size = 4096")
    raw.execute("CREATE TABLE kept (x)")
    raw.execute("INSERT INTO kept VALUES ('still here')")
    raw.commit()
    raw.close()
    with MemoryStore(old, config=fake_config) as store:
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert store.conn.execute("SELECT x FROM kept").fetchone()[0] == "still here"
        memory, _ = store.add("a memory in a store of 4 KB pages")
        assert store.get(memory.id).text == memory.text
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

"""A database file looked at from outside a store (pmem/store/inspection.py): what `pmem doctor`
asks of a file a MemoryStore would migrate or refuse, and what `pmem purge` asks of a backup,
against real SQLite files: a store's own, a half-migrated one, one from a newer pmem, damaged ones."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3

import pytest

from pmem import Memory, MemoryStore, db
from pmem.errors import DatabaseError
from pmem.store import inspection, migrations
from pmem.store.inspection import Inspection

PAGE = db.PAGE_SIZE


def _filled(path, config, n: int = 300) -> None:
    with MemoryStore(path, config=config) as s:
        s.insert([Memory(id="", text=f"memory number {i} " * 30) for i in range(n)])
        s.checkpoint()


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_vec_version_names_the_loaded_extension():
    assert inspection.vec_version().startswith("v")


def test_a_store_answers_what_it_holds(store):
    store.insert([Memory(id="", text=f"orchid note {i}") for i in range(5)])
    store.checkpoint()
    with Inspection(store.path) as look:
        assert look.quick_check() == "ok"
        assert look.applied_migrations() == [name for name, _ in migrations.MIGRATIONS]
        assert {"memories", "events", "operations", "settings", "counts"} <= look.tables()
        assert look.setting("embed_model") == store.conn.execute(
            "SELECT value FROM settings WHERE key = 'embed_model'").fetchone()[0]
        assert look.setting("no such key") is None
        assert look.interrupted_reindex() is None
        counts = look.english_counts()
        assert counts is not None and counts.memories == 5
        pages = look.pages()
        assert pages.size == PAGE and pages.count * pages.size == store.path.stat().st_size
        assert 0 <= pages.free < pages.count


def test_an_interrupted_reindex_is_read_from_its_staging_table(store):
    store.insert([Memory(id="", text=f"note {i}") for i in range(4)])
    store.conn.execute("CREATE TABLE reindex_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
    store.conn.execute("INSERT INTO reindex_vec (seq, embedding) VALUES (1, x'00')")
    store.conn.execute("INSERT INTO settings (key, value) VALUES ('reindex_model', 'other-model')")
    with Inspection(store.path) as look:
        assert look.interrupted_reindex() == ("other-model", 1, 4)


def test_a_half_migrated_file_is_read_as_it_is_and_not_migrated(tmp_path):
    path = tmp_path / "half.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE _pmem_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES ('m001_initial')")
    conn.commit()
    conn.close()
    with Inspection(path) as look:
        assert look.quick_check() == "ok"
        assert look.applied_migrations() == ["m001_initial"]
        assert look.tables() == {"_pmem_migrations", "sqlite_autoindex__pmem_migrations_1"}
        assert look.setting("embed_model") is None  # no settings table: no answer, no error
        assert look.interrupted_reindex() is None and look.english_counts() is None
    with Inspection(path) as look:
        assert look.applied_migrations() == ["m001_initial"]  # nothing was migrated


def test_a_file_from_a_newer_pmem_is_read_where_a_store_refuses_it(tmp_path, fake_config):
    path = tmp_path / "newer.db"
    _filled(path, fake_config, n=3)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES ('m999_from_the_future')")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="newer pmem"):
        MemoryStore(path, config=fake_config)
    with Inspection(path) as look:
        assert look.applied_migrations()[-1] == "m999_from_the_future"
        assert len(look.applied_migrations()) == len(migrations.MIGRATIONS) + 1
        assert look.english_counts().memories == 3


def test_what_is_not_a_database_is_a_database_error(tmp_path):
    with pytest.raises(DatabaseError, match="no database at"):
        Inspection(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # nothing created
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all " * 200)
    with pytest.raises(DatabaseError, match="not a usable pmem database"):
        Inspection(garbage)


@pytest.mark.parametrize("where", ["last", "middle", "early"])
def test_a_damaged_file_answers_its_integrity_check_with_what_is_wrong(tmp_path, fake_config, where):
    """Pages overwritten in place: the integrity check says so (where SQLite raises while it checks,
    the error is the answer), and every other question answers or raises a DatabaseError, never
    the driver's own error."""
    good = tmp_path / "good.db"
    _filled(good, fake_config)
    pages = good.stat().st_size // PAGE
    page = {"last": pages - 2, "middle": pages // 2, "early": 20}[where]
    path = tmp_path / f"damaged-{where}.db"
    shutil.copy(good, path)
    data = bytearray(path.read_bytes())
    data[page * PAGE:page * PAGE + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))
    with Inspection(path) as look:
        result = look.quick_check()
        assert isinstance(result, str) and result != "ok"
        for ask in (look.pages, look.tables, look.applied_migrations, lambda: look.setting("embed_model"),
                    look.interrupted_reindex, look.english_counts):
            try:
                ask()
            except DatabaseError as exc:
                assert str(path) in str(exc)


def test_read_only_leaves_a_backup_byte_for_byte_and_finds_what_it_holds(tmp_path, fake_config):
    path = tmp_path / "live.db"
    backup = tmp_path / "backup.db"
    with MemoryStore(path, config=fake_config) as s:
        kept = s.add("The locker code is 4417")[0]
        gone = s.add("Temporary note")[0]
        s.forget(gone.id)
        s.copy_to(backup)
    conn = sqlite3.connect(backup)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal"  # a backup's own journal mode
    conn.close()
    before = _digest(backup)
    with Inspection(backup, read_only=True) as look:
        assert look.holds_any([kept.id]) and look.holds_any(["nothere1", gone.id])
        assert not look.holds_any(["nothere1"])
        assert look.applied_migrations() == [name for name, _ in migrations.MIGRATIONS]
    assert _digest(backup) == before
    assert not (tmp_path / "backup.db-wal").exists()

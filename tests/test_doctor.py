"""`pmem doctor` on a store: what a dream would give back, what it is doing while it reads."""

from __future__ import annotations

import pytest

from pmem import Memory, db


@pytest.mark.slow
def test_doctor_mentions_free_space_a_dream_would_give_back(store, monkeypatch):
    from pmem import doctor
    from pmem.config import load

    store.insert([Memory(id="", text=f"memory {i} about the orchids") for i in range(50)])
    store.insert([Memory(id="", text=("bulk words of an import " * 60) + str(i)) for i in range(600)])
    store.undo()
    store.checkpoint()
    monkeypatch.setattr(doctor, "UPKEEP_BYTES", 1)
    (check,) = [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"]
    assert check.ok and check.level == "info" and "pmem dream --apply" in check.fix
    store.upkeep()
    assert [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "free space"] == []


def test_doctor_says_what_it_does_while_it_reads_the_whole_database(store, monkeypatch):
    """The integrity check reads every page (15 s at 1,000,000 memories): doctor holds its `busy`
    context (the CLI's progress line) around exactly that, naming the file's size."""
    from contextlib import contextmanager

    from pmem import doctor
    from pmem.config import load

    store.add("a memory to check")
    seen: list[str] = []
    connect = db.connect

    def traced(*args, **kw):
        conn = connect(*args, **kw)
        conn.set_trace_callback(lambda sql: seen.append(sql) if "quick_check" in sql else None)
        return conn

    @contextmanager
    def busy(label):
        seen.append(label)
        yield
        seen.append("done")

    monkeypatch.setattr(db, "connect", traced)
    checks = {c.name: c for c in doctor.run_checks(load(), db_override=store.path, busy=busy)}
    assert checks["database"].ok
    mb = f"{store.path.stat().st_size / 1e6:,.0f} MB"
    assert seen == [f"checking the database ({mb})", "PRAGMA quick_check", "done"]



def _damaged(path, fake_config, page_of):
    """A real store's file with one page overwritten in place (page_of: the file's pages -> which)."""
    from pmem.service import MemoryStore

    with MemoryStore(path, config=fake_config) as s:
        s.insert([Memory(id="", text=f"memory number {i} " * 30) for i in range(300)])
        s.checkpoint()
    data = bytearray(path.read_bytes())
    page = page_of(len(data) // db.PAGE_SIZE) * db.PAGE_SIZE
    data[page:page + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))
    return path


def test_doctor_reports_a_damaged_database_and_goes_on_to_the_other_checks(tmp_path, fake_config):
    """A file whose integrity check SQLite cannot even finish (it raises "malformed" or a virtual
    table fails to start) is one failed finding with its fix, not an error that ends doctor."""
    from pmem import doctor

    for n, page_of in enumerate((lambda n: n // 2, lambda n: 20, lambda n: n - 2)):
        checks = doctor.run_checks(fake_config, db_override=_damaged(tmp_path / f"{n}.db", fake_config, page_of))
        (database,) = [c for c in checks if c.name == "database"]
        assert not database.ok and "integrity" in database.detail and database.fix.startswith("restore from a backup")
        assert {"permissions", "schema", "embed_model", "server", "agent hooks"} <= {c.name for c in checks}


def test_doctor_reads_a_file_a_store_would_refuse_or_migrate(tmp_path, fake_config):
    import sqlite3

    from pmem import doctor
    from pmem.service import MemoryStore
    from pmem.store import migrations

    half = tmp_path / "half.db"
    conn = sqlite3.connect(half)
    conn.execute("CREATE TABLE _pmem_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES ('m001_initial')")
    conn.commit()
    conn.close()
    checks = {c.name: c for c in doctor.run_checks(fake_config, db_override=half)}
    assert checks["database"].ok and checks["schema"].ok
    assert checks["schema"].detail == f"1 of {len(migrations.MIGRATIONS)} migrations"
    assert migrations.applied(sqlite3.connect(half)) == ["m001_initial"]  # doctor migrated nothing

    newer = tmp_path / "newer.db"
    MemoryStore(newer, config=fake_config).close()
    conn = sqlite3.connect(newer)
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES ('m999_from_the_future')")
    conn.commit()
    conn.close()
    checks = {c.name: c for c in doctor.run_checks(fake_config, db_override=newer)}
    assert checks["database"].ok and not checks["schema"].ok and checks["schema"].fix == "upgrade pmem"


def test_doctor_reports_a_file_that_is_no_database(tmp_path, fake_config):
    from pmem import doctor

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all " * 200)
    checks = doctor.run_checks(fake_config, db_override=garbage)
    (database,) = [c for c in checks if c.name == "database"]
    assert not database.ok and "not a usable pmem database" in database.detail
    assert database.fix == "check the path, or restore a backup"


def test_doctor_counts_memories_a_sync_stored_before_embedding(store):
    from pmem import doctor
    from pmem.config import load

    store.insert([Memory(id="", text="embedded at once")])
    store.insert([Memory(id="", text=f"arrived by sync {i}") for i in range(3)], vectors=[None] * 3)
    (check,) = [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "missing vectors"]
    assert check.ok and check.level == "info" and "3 memories" in check.detail and "pmem sync" in check.fix
    assert store.fill_missing() == 3
    assert [c for c in doctor.run_checks(load(), db_override=store.path) if c.name == "missing vectors"] == []


def test_doctor_says_how_an_import_embeds(monkeypatch):
    """int8 through ONNX Runtime by default; float32 with embed_bulk = float32, or where
    onnxruntime cannot load (and how to get it); nothing for a model with no int8 graph."""
    import sys

    from pmem import doctor
    from pmem.config import Settings
    from pmem.models import e5_int8

    def bulk(**values):
        settings = Settings().with_values(chat_model="/nonexistent/chat.gguf", **values)  # no chat model run
        found = [c for c in doctor.run_checks(settings) if c.name == "bulk embedding"]
        return found[0] if found else None

    pytest.importorskip("onnxruntime")
    shown = bulk()
    assert shown.level == "ok" and shown.detail.startswith("int8 through ONNX Runtime 1.")
    assert ("uint8 weights: this CPU has no VNNI" in shown.detail) is e5_int8.saturates()
    monkeypatch.setattr(e5_int8, "saturates", lambda: True)  # a CPU whose int8 products saturate
    assert "int8 through ONNX Runtime 1." in bulk().detail and "uint8 weights: this CPU has no VNNI" in bulk().detail
    monkeypatch.undo()
    shown = bulk(embed_bulk="float32")
    assert shown.level == "info" and shown.detail.startswith("float32 (embed_bulk = float32)")
    assert bulk(embed_model="fake") is None and bulk(embed_model="all-MiniLM-L6-v2") is None
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    e5_int8.runtime.cache_clear()
    try:
        shown = bulk()
        assert shown.level == "info" and "onnxruntime cannot be loaded" in shown.detail
        assert shown.fix == "pip install onnxruntime"
    finally:
        e5_int8.runtime.cache_clear()

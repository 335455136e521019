"""docs/explanation/storage.md names every table a store has: the page cannot fall behind a migration."""

from __future__ import annotations

from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs/explanation/storage.md"
SHADOW = ("memories_fts_", "memory_bits_", "sqlite_")


def test_storage_page_names_every_table(store):
    store.add("Deploys need approval from Dana", thread="standup")  # vectors and their tables exist now
    from pmem.store.replication import SyncLog

    SyncLog(store)  # sync's tables, made when a store first syncs
    names = [r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    tables = [n for n in names if not n.startswith(SHADOW)]
    assert "memories" in tables and "events" in tables
    text = PAGE.read_text(encoding="utf-8")
    missing = [n for n in tables if f"`{n}`" not in text]
    assert not missing, f"{missing} not described in {PAGE.name}"

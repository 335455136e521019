"""The numbered schema steps (pmem/store/migrations.py): named, ordered, idempotent; stores of
earlier schemas upgraded with their data."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pmem import Filter, Memory, MemoryStore, db
from pmem.errors import DatabaseError
from pmem.ranking.profile import DEFAULT
from pmem.search import semantic_ranks
from pmem.store import migrations, serialize
from pmem.store import vectors as store_vectors

from filled import fill, scan_count

NOW = "2026-01-01T00:00:00Z"


def test_migrations_are_named_ordered_and_idempotent(tmp_path):
    conn = db.connect(tmp_path / "m.db")
    ran = migrations.migrate(conn)
    assert ran == [name for name, _ in migrations.MIGRATIONS]
    assert migrations.migrate(conn) == []
    assert migrations.schema_version(conn) == len(migrations.MIGRATIONS)


def test_newer_database_refused(tmp_path):
    conn = db.connect(tmp_path / "n.db")
    migrations.migrate(conn)
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES ('m999_from_the_future')")
    with pytest.raises(DatabaseError, match="newer pmem"):
        migrations.migrate(conn)


def test_upgrade_from_first_schema_keeps_data(tmp_path, fake_config):
    path = tmp_path / "old.db"
    conn = db.connect(path)
    name, first = migrations.MIGRATIONS[0]
    conn.execute("CREATE TABLE _pmem_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    first(conn)
    conn.execute("INSERT INTO _pmem_migrations (name) VALUES (?)", (name,))
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO memories (id, text, created_at, updated_at) VALUES ('abcd1234', 'old', "
                 "'2020-01-01T00:00:00Z', '2020-01-01T00:00:00Z')")
    conn.close()
    with MemoryStore(path, config=fake_config) as s:
        assert [m.text for m in s.list_memories()] == ["old"]
        assert s.stats()["schema_version"] == len(migrations.MIGRATIONS)
        indexes = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "memories_created_seq" in indexes and "memories_tier" not in indexes


def test_reopen_keeps_data_and_schema(tmp_path, fake_config):
    path = tmp_path / "r.db"
    with MemoryStore(path, config=fake_config) as s:
        s.add("persisted", tags=["x"])
    with MemoryStore(path, config=fake_config) as s:
        assert [m.text for m in s.list_memories()] == ["persisted"]
        assert s.stats()["schema_version"] == len(migrations.MIGRATIONS)


def _old_store(path, fake_config, n: int):
    """A database as pmem wrote it before migration m005_binary_vectors: float32 vectors in vec0."""
    from conftest import schema_before

    from pmem.models.embed import FakeEmbedder
    from pmem.records import MEMORY_COLUMNS

    conn = schema_before(path, "m005_binary_vectors")
    e = FakeEmbedder(64)
    conn.execute("CREATE VIRTUAL TABLE memory_vec USING vec0(seq INTEGER PRIMARY KEY, "
                 "embedding float[64] distance_metric=cosine, live integer)")
    conn.execute("INSERT INTO settings VALUES ('embed_model', 'fake-64'), ('embed_dim', '64')")
    conn.execute("INSERT INTO operations (id, kind, summary, at) VALUES ('op1', 'import', '', ?)", (NOW,))
    for i in range(n):
        m = Memory(id=f"o{i:05d}", text=f"old memory {i} topic {i % 13}", tags=["t"] if i % 4 == 0 else [],
                   tier="episodic" if i % 3 == 0 else "archival", created_at=NOW, updated_at=NOW,
                   forgotten_at=NOW if i == 5 else None)
        conn.execute(f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(MEMORY_COLUMNS))})", m.to_row())
        seq = conn.execute("SELECT seq FROM memories WHERE id = ?", (m.id,)).fetchone()[0]
        conn.execute("INSERT INTO memory_vec (seq, embedding, live) VALUES (?, ?, ?)",
                     (seq, serialize(e.embed([m.text])[0]), int(i != 5)))
        conn.execute("INSERT INTO events (op_id, memory_id, action, after, at) VALUES ('op1', ?, 'import', ?, ?)",
                     (m.id, json.dumps({"text": m.text}), NOW))
    conn.close()


def test_a_store_of_the_previous_schema_is_migrated(fake_config, tmp_path, monkeypatch):
    from pmem.service import MemoryStore

    path = tmp_path / "old.db"
    _old_store(path, fake_config, 150)
    store = MemoryStore(path, config=fake_config, clock=lambda: NOW)
    try:
        q = store.conn.execute
        assert "vec0" not in q("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'").fetchone()[0].lower()
        assert q("SELECT count(*) FROM memory_vec").fetchone()[0] == 150
        assert not store.vectors.has_bits()  # 150 vectors: below BITS_FROM
        assert store.vectors.build_bits()
        assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 150
        assert store.counter("vectors") == 150 and store.counter("events") == 150
        assert store.count() == scan_count(store, Filter()) == 99
        assert store.stats()["tags"] == {"t": 38}
        query = store.query_vector("old memory 7 topic 7")
        exact = semantic_ranks(store, "", Filter(), 10, vector=query)
        assert exact[0][0] == store.db.seq("o00007")
        monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
        profile = replace(DEFAULT, bit_pool=10_000)
        store.exact_below = 0
        assert semantic_ranks(store, "", Filter(), 10, vector=query, profile=profile) == exact
        assert semantic_ranks(store, "", Filter.everything(), 150, vector=query, profile=profile)[-1][0] > 0
        _, created = store.add("a new memory after the migration")
        assert created and store.counter("vectors") == 151
    finally:
        store.close()


def test_a_store_with_one_bit_codes_is_migrated_to_two(fake_config, tmp_path, monkeypatch):
    """m008: a bit index of sign bits (as pmem wrote it before) is rebuilt with two bits per
    dimension; searching through it then answers as the exact scan does where the pool covers."""
    from pmem.service import MemoryStore

    path = tmp_path / "m007.db"
    store = MemoryStore(path, config=fake_config)
    fill(store, 200)
    q = store.conn.execute
    with store.transaction():  # as pmem left it before m008: sign bits of the centred vectors
        q("DROP TABLE memory_bits")
        q("DELETE FROM settings WHERE key IN ('bit_lo', 'bit_hi')")
        q("INSERT INTO settings (key, value) VALUES ('bit_center', ?)", (serialize([0.0] * 64).hex(),))
        q("CREATE VIRTUAL TABLE memory_bits USING vec0(seq INTEGER PRIMARY KEY, part INTEGER PARTITION KEY, "
          "bits bit[64], live INTEGER)")
        q("INSERT INTO memory_bits (seq, part, bits, live) SELECT seq, seq % 16, vec_quantize_binary(embedding), "
          "live FROM memory_vec")
        q("DELETE FROM _pmem_migrations WHERE name = 'm008_bit_levels'")
    query = store.query_vector("note 17 about topic 17")
    exact = semantic_ranks(store, "", Filter(), 10, vector=query)
    store.close()
    store = MemoryStore(path, config=fake_config)
    try:
        q = store.conn.execute
        assert "bit[128]" in q("SELECT sql FROM sqlite_master WHERE name = 'memory_bits'").fetchone()[0]
        assert q("SELECT count(*) FROM memory_bits").fetchone()[0] == 200
        assert store.setting("bit_center") is None and store.setting("bit_lo") and store.setting("bit_hi")
        monkeypatch.setattr(store_vectors, "EXACT_SCAN_MAX", 0)
        profile = replace(DEFAULT, bit_pool=10_000)
        store.exact_below = 0
        assert semantic_ranks(store, "", Filter(), 10, vector=query, profile=profile) == exact
        _, created = store.add("one more memory after the migration")
        assert created and q("SELECT count(*) FROM memory_bits").fetchone()[0] == 201
    finally:
        store.close()


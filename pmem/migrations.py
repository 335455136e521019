"""Ordered, named schema steps. Each runs once, in its own transaction; the applied names and
PRAGMA user_version record where a database stands."""

from __future__ import annotations

from typing import Callable

from .errors import DatabaseError

MIGRATIONS: list[tuple[str, Callable]] = []


def migration(fn: Callable) -> Callable:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_initial(conn) -> None:
    conn.execute("""
        CREATE TABLE memories (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            text TEXT NOT NULL,
            tier TEXT NOT NULL DEFAULT 'archival' CHECK (tier IN ('core', 'archival', 'episodic')),
            pinned INTEGER NOT NULL DEFAULT 0,
            tags TEXT NOT NULL DEFAULT '[]',
            source TEXT,
            meta TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            expires_at TEXT,
            valid_from TEXT,
            valid_to TEXT,
            superseded_by TEXT,
            derived_from TEXT NOT NULL DEFAULT '[]',
            merged_into TEXT,
            forgotten_at TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT
        )""")
    conn.execute("CREATE INDEX memories_created ON memories(created_at)")
    conn.execute("CREATE INDEX memories_tier ON memories(tier, pinned)")
    conn.execute("""
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            text, content='memories', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2')""")
    # The FTS index follows the rows inside the same transaction, whatever writes them.
    conn.execute("""
        CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, text) VALUES (new.seq, new.text);
        END""")
    conn.execute("""
        CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.seq, old.text);
        END""")
    conn.execute("""
        CREATE TRIGGER memories_au AFTER UPDATE OF text ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.seq, old.text);
            INSERT INTO memories_fts(rowid, text) VALUES (new.seq, new.text);
        END""")
    conn.execute("""
        CREATE TABLE operations (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            summary TEXT NOT NULL DEFAULT '',
            at TEXT NOT NULL,
            undone_at TEXT
        )""")
    conn.execute("""
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY,
            op_id TEXT NOT NULL REFERENCES operations(id),
            memory_id TEXT NOT NULL,
            action TEXT NOT NULL,
            before TEXT,
            after TEXT,
            before_vec BLOB,
            at TEXT NOT NULL
        )""")
    conn.execute("CREATE INDEX events_memory ON events(memory_id)")
    conn.execute("CREATE INDEX events_op ON events(op_id)")
    conn.execute("CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


@migration
def m002_list_order_index(conn) -> None:
    """Lists page newest-first by (created_at, seq). The tier index made SQLite sort every
    matching row for each page (20-60 ms on 10,000-100,000 memories); this one walks in order."""
    conn.execute("DROP INDEX IF EXISTS memories_tier")
    conn.execute("DROP INDEX IF EXISTS memories_created")
    conn.execute("CREATE INDEX memories_created_seq ON memories(created_at, seq)")


@migration
def m003_scope(conn) -> None:
    """A memory's project scope (NULL = global): every memory stored before is global."""
    conn.execute("ALTER TABLE memories ADD COLUMN scope TEXT")
    conn.execute("CREATE INDEX memories_scope ON memories(scope) WHERE scope IS NOT NULL")


def applied(conn) -> list[str]:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_pmem_migrations'").fetchone()
    if not exists:
        return []
    return [r[0] for r in conn.execute("SELECT name FROM _pmem_migrations ORDER BY rowid")]


def migrate(conn) -> list[str]:
    """Apply pending migrations; refuse a database written by a newer pmem."""
    done = applied(conn)
    known = [name for name, _ in MIGRATIONS]
    unknown = [n for n in done if n not in known]
    if unknown:
        raise DatabaseError(
            f"this database was written by a newer pmem (migration {unknown[-1]}); upgrade pmem")
    ran = []
    for index, (name, fn) in enumerate(MIGRATIONS, start=1):
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS _pmem_migrations "
                         "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
            if name in applied(conn):  # another process got there first
                conn.execute("ROLLBACK")
                continue
            fn(conn)
            conn.execute("INSERT INTO _pmem_migrations (name) VALUES (?)", (name,))
            conn.execute(f"PRAGMA user_version = {index}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        ran.append(name)
    return ran


def schema_version(conn) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]

"""Ordered, named schema steps. Each runs once, in its own transaction; the applied names and
PRAGMA user_version record where a database stands."""

from __future__ import annotations

import struct
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


BIT_PARTS = 16  # vec0 partitions per tier in memory_bits (see MemoryStore.semantic_ranks)


def create_vector_tables(conn, dim: int) -> None:
    """Float32 vectors in a plain table: a keyed read costs ~5 us, where a vec0 point read walks
    its chunk's overflow pages (~35-150 us), so rescoring can read them (see build_bits)."""
    conn.execute("CREATE TABLE IF NOT EXISTS memory_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL, "
                 "live INTEGER NOT NULL DEFAULT 1)")
    _count_triggers(conn, "memory_vec", "'vectors'")


BITS_FROM = 10_000  # vectors from which the bit index is built (smaller stores search exactly)
CENTER_SAMPLE = 4096  # vectors averaged for the centre subtracted before taking signs


def build_bits(conn) -> bool:
    """(Re)build memory_bits: the signs of each vector minus the store's mean vector, in a vec0
    bit[] table partitioned by tier and seq % BIT_PARTS, so a search reads only the tiers it wants
    and each partition's top-k stays small (vec0's top-k selection costs O(rows * k)).

    Embeddings share a common direction (all-MiniLM's, and the fake embedder's, by their
    features), so raw signs are mostly the same bits for every text; centring makes the Hamming
    distance follow the angle between what differs (recall@10 0.1 -> see benchmarks/README.md)."""
    dim_row = conn.execute("SELECT value FROM settings WHERE key = 'embed_dim'").fetchone()
    dim = int(dim_row[0]) if dim_row else 0
    conn.execute("DROP TABLE IF EXISTS memory_bits")
    conn.execute("DELETE FROM settings WHERE key = 'bit_center'")
    total = conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] if dim else 0
    if not dim or dim % 8 or not total:
        return False
    step = max(1, total // CENTER_SAMPLE)
    mean = [0.0] * dim
    count = 0
    for (blob,) in conn.execute("SELECT embedding FROM memory_vec WHERE seq % ? = 0 LIMIT ?", (step, CENTER_SAMPLE)):
        if len(blob) == 4 * dim:
            for i, v in enumerate(struct.unpack(f"<{dim}f", blob)):
                mean[i] += v
            count += 1
    center = struct.pack(f"<{dim}f", *(v / max(count, 1) for v in mean))
    conn.execute("INSERT INTO settings (key, value) VALUES ('bit_center', ?)", (center.hex(),))
    conn.execute(f"CREATE VIRTUAL TABLE memory_bits USING vec0(seq INTEGER PRIMARY KEY, "
                 f"part INTEGER PARTITION KEY, bits bit[{dim}], live INTEGER)")
    for tier_index, tier in enumerate(("core", "archival", "episodic")):
        # Sorted by partition, so consecutive inserts fill the same vec0 chunk.
        conn.execute(
            "INSERT INTO memory_bits (seq, part, bits, live) "
            "SELECT seq, part, vec_quantize_binary(vec_sub(embedding, ?)), live FROM ("
            f"SELECT v.seq, {tier_index * BIT_PARTS} + v.seq % {BIT_PARTS} AS part, v.embedding, v.live "
            "FROM memory_vec v JOIN memories m ON m.seq = v.seq WHERE m.tier = ? "
            f"ORDER BY v.seq % {BIT_PARTS}, v.seq)", (center, tier))
    return True


def bit_part(tier_index: int, seq: int) -> int:
    return tier_index * BIT_PARTS + seq % BIT_PARTS


def _count_triggers(conn, table: str, key: str) -> None:
    """Keep `counts[key]` equal to count(*) of `table` (a count(*) reads the whole table)."""
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_count_ai AFTER INSERT ON {table} BEGIN "
                 f"INSERT INTO counts (key, n) VALUES ({key}, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1; END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_count_ad AFTER DELETE ON {table} BEGIN "
                 f"UPDATE counts SET n = n - 1 WHERE key = {key}; END")


# The key of a memory in `counts`: its tier, pinned, forgotten and merged flags.
_MEM_KEY = ("'mem:' || {r}.tier || ':' || ({r}.pinned != 0) || ':' || ({r}.forgotten_at IS NOT NULL) "
            "|| ':' || ({r}.merged_into IS NOT NULL)")


@migration
def m004_binary_vectors(conn) -> None:
    """At 100,000 memories vec0's float32 KNN (a full scan, ~110 ms) and count(*) scans (stats,
    the TUI) dominated. Vectors move to a plain table plus a partitioned bit[] vec0 index;
    counts of memories, vectors, events, operations and tags are kept by triggers; partial
    indexes make 'expired now' and 'superseded now' index range scans."""
    conn.execute("CREATE TABLE counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
    old = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'").fetchone()
    if old is not None:
        dim_row = conn.execute("SELECT value FROM settings WHERE key = 'embed_dim'").fetchone()
        dim = int(dim_row[0]) if dim_row else 0
        if "vec0" in old[0].lower():
            conn.execute("CREATE TABLE memory_vec_new (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL, "
                         "live INTEGER NOT NULL DEFAULT 1)")
            conn.execute("INSERT INTO memory_vec_new (seq, embedding, live) "
                         "SELECT seq, embedding, live FROM memory_vec ORDER BY seq")
            conn.execute("DROP TABLE memory_vec")
            conn.execute("ALTER TABLE memory_vec_new RENAME TO memory_vec")
        create_vector_tables(conn, dim)
        conn.execute("INSERT INTO counts (key, n) SELECT 'vectors', count(*) FROM memory_vec")
        if conn.execute("SELECT n FROM counts WHERE key = 'vectors'").fetchone()[0] >= BITS_FROM:
            build_bits(conn)
    conn.execute(f"INSERT INTO counts (key, n) SELECT {_MEM_KEY.format(r='m')} AS k, count(*) "
                 "FROM memories m GROUP BY k")
    conn.execute("INSERT INTO counts (key, n) SELECT 'tag:' || j.value AS k, count(*) FROM memories m, "
                 "json_each(m.tags) j WHERE m.forgotten_at IS NULL GROUP BY k")
    conn.execute("INSERT INTO counts (key, n) SELECT 'events', count(*) FROM events")
    conn.execute("INSERT INTO counts (key, n) SELECT 'operations', count(*) FROM operations")
    _count_triggers(conn, "events", "'events'")
    _count_triggers(conn, "operations", "'operations'")
    new, old_ = _MEM_KEY.format(r="new"), _MEM_KEY.format(r="old")
    add_tags = ("INSERT INTO counts (key, n) SELECT 'tag:' || value, 1 FROM json_each(new.tags) "
                "WHERE new.forgotten_at IS NULL ON CONFLICT(key) DO UPDATE SET n = n + 1;")
    drop_tags = ("UPDATE counts SET n = n - 1 WHERE old.forgotten_at IS NULL AND key IN "
                 "(SELECT 'tag:' || value FROM json_each(old.tags));")
    conn.execute(f"CREATE TRIGGER memories_count_ai AFTER INSERT ON memories BEGIN "
                 f"INSERT INTO counts (key, n) VALUES ({new}, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1; "
                 f"{add_tags} END")
    conn.execute(f"CREATE TRIGGER memories_count_ad AFTER DELETE ON memories BEGIN "
                 f"UPDATE counts SET n = n - 1 WHERE key = {old_}; {drop_tags} END")
    conn.execute(f"CREATE TRIGGER memories_count_au AFTER UPDATE OF tier, pinned, forgotten_at, merged_into, tags "
                 f"ON memories BEGIN "
                 f"UPDATE counts SET n = n - 1 WHERE key = {old_}; "
                 f"INSERT INTO counts (key, n) VALUES ({new}, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1; "
                 f"{drop_tags} {add_tags} END")
    conn.execute("CREATE INDEX memories_expires ON memories(expires_at) WHERE expires_at IS NOT NULL")
    conn.execute("CREATE INDEX memories_valid_to ON memories(valid_to) WHERE valid_to IS NOT NULL")


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

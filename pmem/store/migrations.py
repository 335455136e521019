"""Ordered, named schema steps. Each runs once, in its own transaction; the applied names and
PRAGMA user_version record where a database stands. The DDL of an index and its algorithm
live with the index (keywords.py, vectors.py); the steps call them."""

from __future__ import annotations

from typing import Callable

from ..errors import DatabaseError
from .connection import count_triggers
from .english import create_tables as create_english_tables
from .keywords import KEYWORD_WINDOW, install_keyword_window
from .vectors import BITS_FROM, build_bits, create_vector_tables

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


@migration
def m004_threads(conn) -> None:
    """Threads (`thread`, `thread_pos`) and the neighbour-aware keyword index.

    Episodic memories kept from one extraction source become a thread named by that source, in
    the order they were stored; a compression summary whose members all lie in one thread stands
    at its first member's place. The FTS5 table gets a `context` column and keeps its own copy of
    the text (external content cannot be kept in step when a neighbour changes)."""
    conn.execute("ALTER TABLE memories ADD COLUMN thread TEXT")
    conn.execute("ALTER TABLE memories ADD COLUMN thread_pos INTEGER")
    conn.execute("CREATE INDEX memories_thread ON memories(thread, thread_pos, seq) WHERE thread IS NOT NULL")
    rows = conn.execute(
        "SELECT seq, source, row_number() OVER (PARTITION BY source ORDER BY created_at, seq) - 1 "
        "FROM memories WHERE tier = 'episodic' AND source IS NOT NULL AND source != 'pmem dream' "
        "AND derived_from IN ('[]', '')").fetchall()
    conn.executemany("UPDATE memories SET thread = ?, thread_pos = ? WHERE seq = ?",
                     [(source, pos, seq) for seq, source, pos in rows])
    summaries = conn.execute(
        "SELECT s.seq, min(m.thread), max(m.thread), min(m.thread_pos), count(*), count(m.thread) "
        "FROM memories s JOIN memories m ON m.merged_into = s.id "
        "WHERE s.thread IS NULL AND s.derived_from NOT IN ('[]', '') GROUP BY s.seq").fetchall()
    conn.executemany("UPDATE memories SET thread = ?, thread_pos = ? WHERE seq = ?",
                     [(lo, pos, seq) for seq, lo, hi, pos, n, threaded in summaries if lo == hi and n == threaded])
    for name in ("memories_ai", "memories_ad", "memories_au"):  # m001's external-content triggers
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE memories_fts")
    conn.execute("""
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            text, context, tokenize='porter unicode61 remove_diacritics 2')""")
    conn.execute("INSERT INTO memories_fts(rowid, text) SELECT seq, text FROM memories")
    install_keyword_window(conn, *KEYWORD_WINDOW)


# The key of a memory in `counts`: its tier, pinned, forgotten and merged flags.
_MEM_KEY = ("'mem:' || {r}.tier || ':' || ({r}.pinned != 0) || ':' || ({r}.forgotten_at IS NOT NULL) "
            "|| ':' || ({r}.merged_into IS NOT NULL)")


@migration
def m005_binary_vectors(conn) -> None:
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
    count_triggers(conn, "events", "'events'")
    count_triggers(conn, "operations", "'operations'")
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


@migration
def m006_stems(conn) -> None:
    """Keyword search beyond English: the FTS5 table gets a `stems` column, the Snowball stems of
    a memory's non-English words (stemming.index_stems, through pmem_stems registered by
    db.connect), so "машину" finds "машина"; English keeps porter on `text`."""
    for name in ("memories_ai", "memories_ai_thread", "memories_ad", "memories_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE memories_fts")
    conn.execute("""
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            text, context, stems, tokenize='porter unicode61 remove_diacritics 2')""")
    conn.execute("INSERT INTO memories_fts(rowid, text, stems) SELECT seq, text, pmem_stems(text) FROM memories")
    install_keyword_window(conn, *KEYWORD_WINDOW)


@migration
def m007_languages(conn) -> None:
    """Memories counted per language (`counts` 'lang:XX', non-English only, kept by triggers
    through pmem_lang), so search knows which stemmers a query needs; and the stems recomputed
    where the index lacks them (a store indexed before the stemmers were installed)."""
    lang = "pmem_lang({r}.text)"
    conn.execute(f"""
        CREATE TRIGGER memories_lang_ai AFTER INSERT ON memories WHEN {lang.format(r='new')} != 'en' BEGIN
            INSERT INTO counts (key, n) VALUES ('lang:' || {lang.format(r='new')}, 1)
                ON CONFLICT(key) DO UPDATE SET n = n + 1;
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_lang_ad AFTER DELETE ON memories WHEN {lang.format(r='old')} != 'en' BEGIN
            UPDATE counts SET n = n - 1 WHERE key = 'lang:' || {lang.format(r='old')};
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_lang_au AFTER UPDATE OF text ON memories WHEN old.text IS NOT new.text BEGIN
            UPDATE counts SET n = n - 1 WHERE key = 'lang:' || {lang.format(r='old')};
            INSERT INTO counts (key, n) SELECT 'lang:' || {lang.format(r='new')}, 1
                WHERE {lang.format(r='new')} != 'en' ON CONFLICT(key) DO UPDATE SET n = n + 1;
        END""")
    from ..stemming import index_language, index_stems

    per: dict[str, int] = {}
    stale = []
    for seq, text, stems in conn.execute(
            "SELECT m.seq, m.text, f.stems FROM memories m JOIN memories_fts f ON f.rowid = m.seq"):
        language = index_language(text)
        if language != "en":
            per[language] = per.get(language, 0) + 1
        if stems:
            continue  # written by m006 or a trigger with the stemmers present
        want = index_stems(text)
        if want:
            stale.append((want, seq))
    conn.executemany("INSERT INTO counts (key, n) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET n = excluded.n",
                     [(f"lang:{k}", n) for k, n in per.items()])
    conn.executemany("UPDATE memories_fts SET stems = ? WHERE rowid = ?", stale)


@migration
def m008_bit_levels(conn) -> None:
    """The bit index moves from one sign bit per dimension to two (build_bits): with
    multilingual-e5-small, the default model now, recall@10 of the fast path at 1,000,000
    memories was 0.85. Stores below BITS_FROM have no bit index, and an index m005 built just
    now already has two bits: nothing to do."""
    has_bits = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_bits'").fetchone()
    if has_bits and not conn.execute("SELECT 1 FROM settings WHERE key = 'bit_lo'").fetchone():
        build_bits(conn)


@migration
def m009_core_index(conn) -> None:
    """An index of the core tier alone: `pmem recall` lists every core memory on each call, which
    walked the whole store in date order (3.5 s cold, 0.31 s warm at 1,000,000 memories), and
    search ranks the core tier exactly through it instead of a bit-index top-k as large as the
    pool. A partial index serves only queries that name the tier literally, so lists of other
    tiers keep walking memories_created_seq (a plain tier index made SQLite sort: m002)."""
    conn.execute("CREATE INDEX IF NOT EXISTS memories_core ON memories(created_at, seq) WHERE tier = 'core'")


@migration
def m010_list_sort_indexes(conn) -> None:
    """`pmem list --sort updated` and `--sort accessed` sorted every memory for each page (2.4 s
    and 1.8 s at 1,000,000); these indexes walk in order instead. Never-accessed memories are
    NULL, the smallest value, so they come last newest-first as before. (`--sort expires` reads
    the partial index memories_expires: MemoryStore.list_memories.)"""
    conn.execute("CREATE INDEX IF NOT EXISTS memories_updated ON memories(updated_at, seq)")
    conn.execute("CREATE INDEX IF NOT EXISTS memories_accessed ON memories(last_accessed_at, seq)")


@migration
def m011_text_start(conn) -> None:
    """`pmem add` looks for an exact duplicate of the new text before storing it, twice (before
    embedding, and again under the write lock): a scan of every memory, 0.18 s each at 1,000,000
    memories, most of an add. An index of each text's length and first 32 characters finds the
    few that could be equal (built in ~1 s at 1,000,000; core SQL functions, so any SQLite that
    writes the table keeps it)."""
    conn.execute("CREATE INDEX IF NOT EXISTS memories_text_start ON memories(length(text), substr(text, 1, 32))")


@migration
def m012_english_vectors(conn) -> None:
    """A second vector for English memories (all-MiniLM-L6-v2 beside the main model, search's
    dense side for English pairs: store/english.py); empty here, filled as memories are written
    and by `pmem reindex`."""
    create_english_tables(conn)


@migration
def m013_recount_vectors(conn) -> None:
    """The kept count of vectors again equal to the table's rows: a vector written over another
    (an edit, an undo) counted one more (vectors._UPSERT now writes them), and `missing()`, which
    trusts the count, then found none missing while some were (a sync's rows without vectors)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_vec'").fetchone():
        conn.execute("INSERT INTO counts (key, n) SELECT 'vectors', count(*) FROM memory_vec WHERE true "
                     "ON CONFLICT(key) DO UPDATE SET n = excluded.n")


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

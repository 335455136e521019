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


# -- threads and the neighbour-aware keyword index ---------------------------------------------
#
# The FTS5 entry of a memory in a thread holds its text and, in a second column, the text of its
# live neighbours (not forgotten, not merged): KEYWORD_WINDOW = (before, after) of them, in thread
# order (thread_pos, then seq). A question often shares its words with the turn before or after
# the one that answers it (benchmarks/README.md: Threads). The index keeps its own copy of both
# columns, so triggers can rewrite any entry from the current rows alone: whatever writes
# `memories` (an edit, a forget, a purge, a merge, an undo), the index follows in the same
# transaction and is a pure function of the rows.

KEYWORD_WINDOW = (2, 2)
_LIVE = "n.forgotten_at IS NULL AND n.merged_into IS NULL"


def _nearest(t: str, p: str, s: str, count: int, side: int, column: str, exclude: str | None = None) -> str:
    """The `count` live members of thread `t` nearest to the key (p, s) on one side, as a subquery."""
    op, order = ("<", "DESC") if side < 0 else (">", "ASC")
    skip = f" AND n.seq != {exclude}" if exclude else ""
    return (f"SELECT {column} FROM (SELECT n.{column} FROM memories n WHERE n.thread = {t} AND {_LIVE}{skip} "
            f"AND (n.thread_pos, n.seq) {op} ({p}, {s}) ORDER BY n.thread_pos {order}, n.seq {order} "
            f"LIMIT {int(count)})")


def _context(r: str, before: int, after: int) -> str:
    """SQL for the neighbour text of the memory `r` (a row alias, new or old); NULL when it has
    none or is not live itself (a forgotten memory lends and borrows no words)."""
    parts = [_nearest(f"{r}.thread", f"{r}.thread_pos", f"{r}.seq", n, side, "text")
             for n, side in ((before, -1), (after, 1)) if n > 0]
    if not parts:
        return "NULL"
    return (f"CASE WHEN {r}.forgotten_at IS NULL AND {r}.merged_into IS NULL THEN "
            f"(SELECT group_concat(text, ' ') FROM ({' UNION ALL '.join(parts)})) END")


def _affected(r: str, before: int, after: int) -> str:
    """Seqs of the memories whose window holds the one at key `r` (old or new): the `after`
    members before it and the `before` members after it."""
    x = f"{r}.seq"
    parts = [_nearest(f"{r}.thread", f"{r}.thread_pos", x, n, side, "seq", exclude=x)
             for n, side in ((after, -1), (before, 1)) if n > 0]
    return " UNION ALL ".join(parts) or "SELECT NULL WHERE 0"


def install_keyword_window(conn, before: int, after: int) -> None:
    """(Re)create the triggers that keep memories_fts in step, for a window of `before` and
    `after` neighbours, and recompute every entry's context. Runs inside the caller's transaction."""
    for name in ("memories_ai", "memories_ai_thread", "memories_ad", "memories_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    own = _context("o", before, after)
    refresh = f"UPDATE memories_fts SET context = (SELECT {own} FROM memories o WHERE o.seq = memories_fts.rowid)"
    # Two insert triggers that never both fire, so their order cannot matter; a memory with no
    # thread costs one FTS insert, as before threads.
    conn.execute("""
        CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.thread IS NULL BEGIN
            INSERT INTO memories_fts(rowid, text) VALUES (new.seq, new.text);
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_ai_thread AFTER INSERT ON memories WHEN new.thread IS NOT NULL BEGIN
            INSERT INTO memories_fts(rowid, text, context) VALUES
                (new.seq, new.text, {_context('new', before, after)});
            {refresh} WHERE rowid IN ({_affected('new', before, after)});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
            DELETE FROM memories_fts WHERE rowid = old.seq;
            {refresh} WHERE old.thread IS NOT NULL AND rowid IN ({_affected('old', before, after)});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_au AFTER UPDATE OF text, thread, thread_pos, forgotten_at, merged_into
        ON memories WHEN old.text IS NOT new.text OR old.thread IS NOT new.thread
            OR old.thread_pos IS NOT new.thread_pos
            OR (old.forgotten_at IS NULL) != (new.forgotten_at IS NULL)
            OR (old.merged_into IS NULL) != (new.merged_into IS NULL) BEGIN
            UPDATE memories_fts SET text = new.text, context = {_context('new', before, after)}
                WHERE rowid = new.seq;
            {refresh} WHERE (old.thread IS NOT NULL OR new.thread IS NOT NULL) AND rowid IN
                ({_affected('old', before, after)} UNION {_affected('new', before, after)});
        END""")
    conn.execute(f"{refresh} WHERE rowid IN (SELECT seq FROM memories WHERE thread IS NOT NULL) "
                 "OR context IS NOT NULL")
    conn.execute("INSERT INTO settings (key, value) VALUES ('keyword_window', ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (f"{int(before)},{int(after)}",))


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

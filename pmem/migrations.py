"""Ordered, named schema steps. Each runs once, in its own transaction; the applied names and
PRAGMA user_version record where a database stands."""

from __future__ import annotations

import math
import struct
from typing import Callable

from .errors import DatabaseError
from .records import TIERS

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
    # m006 adds a `stems` column (stemming.index_stems); before it, the triggers write none.
    has_stems = any(r[1] == "stems" for r in conn.execute("PRAGMA table_info(memories_fts)"))
    sc, sv, su = (", stems", ", pmem_stems(new.text)", ", stems = pmem_stems(new.text)") if has_stems else ("", "", "")
    refresh = f"UPDATE memories_fts SET context = (SELECT {own} FROM memories o WHERE o.seq = memories_fts.rowid)"
    # Two insert triggers that never both fire, so their order cannot matter; a memory with no
    # thread costs one FTS insert, as before threads.
    conn.execute(f"""
        CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.thread IS NULL BEGIN
            INSERT INTO memories_fts(rowid, text{sc}) VALUES (new.seq, new.text{sv});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_ai_thread AFTER INSERT ON memories WHEN new.thread IS NOT NULL BEGIN
            INSERT INTO memories_fts(rowid, text, context{sc}) VALUES
                (new.seq, new.text, {_context('new', before, after)}{sv});
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
            UPDATE memories_fts SET text = new.text, context = {_context('new', before, after)}{su}
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


BIT_PARTS = 16  # vec0 partitions per tier in memory_bits (see MemoryStore.semantic_ranks)...
WHOLE_TIERS = ("core",)  # ...but one for a tier that stays small (each partition's KNN costs ~0.2 ms)


def create_vector_tables(conn, dim: int) -> None:
    """Float32 vectors in a plain table: a keyed read costs ~5 us, where a vec0 point read walks
    its chunk's overflow pages (~35-150 us), so rescoring can read them (see build_bits)."""
    conn.execute("CREATE TABLE IF NOT EXISTS memory_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL, "
                 "live INTEGER NOT NULL DEFAULT 1)")
    _count_triggers(conn, "memory_vec", "'vectors'")


BITS_FROM = 10_000  # vectors from which the bit index is built (smaller stores search exactly)
CENTER_SAMPLE = 4096  # vectors whose per-dimension mean and spread set the bit thresholds
LEVEL_Z = 0.67  # thresholds at mean -/+ 0.67 standard deviations: a normal's tertiles


def build_bits(conn) -> bool:
    """(Re)build memory_bits: two bits per dimension of each vector, in a vec0 bit[] table
    partitioned by tier and seq % BIT_PARTS (the core tier in one partition: it holds what is
    pinned, hundreds of memories), so a search reads only the tiers it wants and each partition's
    top-k stays small (vec0's top-k selection costs O(rows * k)).

    The bits are a thermometer code: for each dimension, whether the value is above its low
    threshold and whether it is above its high one (the store's mean -/+ LEVEL_Z standard
    deviations, kept as `bit_lo` / `bit_hi` in settings), so the Hamming distance between two
    codes sums how many levels apart the vectors are per dimension. Embeddings share a common
    direction, so raw signs are mostly the same bits for every text (recall@10 0.1); signs of the
    centred vector (one bit, m005) gave multilingual-e5-small recall@10 0.85 at 1,000,000, these
    three levels 0.96 (benchmarks/README.md)."""
    dim_row = conn.execute("SELECT value FROM settings WHERE key = 'embed_dim'").fetchone()
    dim = int(dim_row[0]) if dim_row else 0
    conn.execute("DROP TABLE IF EXISTS memory_bits")
    conn.execute("DELETE FROM settings WHERE key IN ('bit_center', 'bit_lo', 'bit_hi')")
    total = conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] if dim else 0
    if not dim or dim % 8 or not total:
        return False
    step = max(1, total // CENTER_SAMPLE)
    sums, squares = [0.0] * dim, [0.0] * dim
    count = 0
    for (blob,) in conn.execute("SELECT embedding FROM memory_vec WHERE seq % ? = 0 LIMIT ?", (step, CENTER_SAMPLE)):
        if len(blob) == 4 * dim:
            for i, v in enumerate(struct.unpack(f"<{dim}f", blob)):
                sums[i] += v
                squares[i] += v * v
            count += 1
    count = max(count, 1)
    means = [s / count for s in sums]
    spreads = [LEVEL_Z * math.sqrt(max(q / count - m * m, 0.0)) for q, m in zip(squares, means)]
    lo = struct.pack(f"<{dim}f", *(m - d for m, d in zip(means, spreads)))
    hi = struct.pack(f"<{dim}f", *(m + d for m, d in zip(means, spreads)))
    conn.execute("INSERT INTO settings (key, value) VALUES ('bit_lo', ?), ('bit_hi', ?)", (lo.hex(), hi.hex()))
    conn.execute(f"CREATE VIRTUAL TABLE memory_bits USING vec0(seq INTEGER PRIMARY KEY, "
                 f"part INTEGER PARTITION KEY, bits bit[{2 * dim}], live INTEGER)")
    for tier_index, tier in enumerate(TIERS):
        # Sorted by partition, so consecutive inserts fill the same vec0 chunk.
        conn.execute(
            f"INSERT INTO memory_bits (seq, part, bits, live) SELECT seq, part, {LEVELS_SQL.format(v='embedding')}, "
            "live FROM ("
            f"SELECT v.seq, {tier_index * BIT_PARTS} + v.seq % {bit_parts(tier)} AS part, v.embedding, v.live "
            "FROM memory_vec v JOIN memories m ON m.seq = v.seq WHERE m.tier = :tier "
            f"ORDER BY v.seq % {bit_parts(tier)}, v.seq)", {"lo": lo, "hi": hi, "tier": tier})
    return True


# The thermometer code of the float32 vector `v` (named parameters :lo and :hi: bit_lo, bit_hi). `||` of
# the two differences, cast back to a blob, is one float32 vector of 2 * dim values (vec_bit and
# the vec_ functions refuse a concatenation directly); vec_quantize_binary keeps a bit per value > 0.
LEVELS_SQL = "vec_quantize_binary(CAST(vec_sub({v}, :lo) || vec_sub({v}, :hi) AS BLOB))"


def bit_parts(tier: str) -> int:
    """How many partitions of memory_bits hold `tier`."""
    return 1 if tier in WHOLE_TIERS else BIT_PARTS


def bit_part(tier_index: int, seq: int) -> int:
    return tier_index * BIT_PARTS + seq % bit_parts(TIERS[tier_index])


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
    from .stemming import index_language, index_stems

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
    the partial index memories_expires: MemoryStore.list.)"""
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

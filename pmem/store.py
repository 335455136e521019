"""MemoryStore: every read and write of memories, each write an undoable event.

Writes happen inside `operation()`: one transaction, one row in `operations`, one event per
changed memory with its state before and after. `undo()` replays the last operation's events
backwards. Models are loaded only when a vector is needed.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import struct
import threading
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from . import db, migrations, paths, secretscan, timeutil
from .config import Config
from .config import load as load_config
from .errors import AmbiguousId, DatabaseError, ModelMismatch, NotFound, UsageError
from .records import MEMORY_COLUMNS, TIERS, Event, Memory, Operation

if TYPE_CHECKING:
    from .embed import Embedder
    from .thresholds import Thresholds

_COLUMNS_SQL = ", ".join(f"m.{c}" for c in MEMORY_COLUMNS)
_ID = re.compile(r"^[0-9a-z]{1,32}$")
BULK_EMBED = 256  # texts in one call above which a `pmem serve` client loads the model itself
MAX_TEXT = 100_000  # characters; longer input belongs in `pmem extract`, which chunks it
KNN_MAX = 4096  # sqlite-vec's largest k for one KNN query
EXACT_SCAN_MAX = 1000  # filtered rows below which distances are computed directly
EXACT_BELOW = 10_000  # vectors below which every search is exact (a scan costs ~1 us a row)
COMMON_SHARE = 5  # % of the memories above which a query word is common (left out of BM25)...
COMMON_MIN = 1000  # ...when it is in more than this many (and always above COMMON_MAX)
COMMON_MAX = 10_000  # (at 1,000,000 a 5% word still cost ~120 ms of BM25; 1% cost 29 ms)
PART_SLACK = 8  # rows each partition gives beyond its even share of the pool
WHOLE_EXACT_MAX = 2048  # a whole tier (core) of at most this many memories is ranked exactly
KEYWORD_FETCH = 4  # a large store's keyword side ranks 4n by BM25 before it filters (MemoryStore.keyword_ranks)
COMMON_RECENT = 5000  # rows ranked for a query made only of common words (the newest that hold them)
DATE_WINDOW = 20_000  # rows of a --since/--until window below which search ranks it whole (~1 us a row a side)...
DATE_SHARE = 20  # ...or below 1/20 of the store (a scan of 50,000 rows costs what the bit path does at 1,000,000)
UPKEEP_MIN_FREE = 0.2  # share of the file in free pages from which upkeep() runs VACUUM
MERGE_STEP = 1000  # keyword-index pages one transaction of merge_keyword_index() writes (0.3-0.4 s at 100k)
MERGE_PAUSE = 0.1  # seconds between two steps: longer than SQLite's busy handler sleeps, so a waiting writer gets in
BIT_POOL = 512  # nearest by Hamming distance rescored with float32 (at least 2n); 256: e5 recall@10 0.978 at 100k
MAX_THREAD = 500  # characters of a thread name
SIDE_READS_FROM = 10_000  # memories from which search reads its keyword side on a second connection

Progress = Callable[[int, int], None]


def _token() -> str:
    """8 random hex digits for ids (os.urandom: `secrets` costs 10 ms of import via hashlib)."""
    return os.urandom(4).hex()


def serialize(vector: Sequence[float]) -> bytes:
    """Little-endian float32, the layout sqlite-vec reads."""
    return struct.pack(f"<{len(vector)}f", *vector)


def deserialize(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


@dataclass
class Filter:
    """Which memories a list, search or recall considers. The defaults are what a user means by
    'my memories': core and archival, not forgotten, merged, expired or superseded."""

    tiers: tuple[str, ...] = ("core", "archival")
    tags: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    as_of: str | None = None
    pinned: bool | None = None
    source: str | None = None
    include_expired: bool = False
    include_forgotten: bool = False
    include_superseded: bool = False
    include_merged: bool = False
    ids: tuple[str, ...] | None = None
    # None: every scope; "global": global memories only; a project path: global plus that project's
    scope: str | None = None

    @classmethod
    def everything(cls, **kw) -> "Filter":
        return cls(tiers=TIERS, include_expired=True, include_forgotten=True,
                   include_superseded=True, include_merged=True, **kw)

    @classmethod
    def live(cls) -> "Filter":
        """Every memory not forgotten and not merged: expired and superseded ones included."""
        return cls(tiers=TIERS, include_expired=True, include_superseded=True)

    def where(self, now: str, alias: str = "m") -> tuple[str, list[Any]]:
        a = alias
        clauses: list[str] = []
        params: list[Any] = []
        for tier in self.tiers:
            if tier not in TIERS:
                raise UsageError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
        if set(self.tiers) != set(TIERS):
            # Literal names (checked above), so one tier reads `tier = 'core'` and SQLite may
            # answer it from the core tier's own index (migrations.m009_core_index).
            unique = list(dict.fromkeys(self.tiers))
            names = ", ".join(f"'{t}'" for t in unique)
            clauses.append(f"{a}.tier = {names}" if len(unique) == 1 else f"{a}.tier IN ({names})")
        for tag in self.tags:
            clauses.append(f"EXISTS (SELECT 1 FROM json_each({a}.tags) WHERE value = ?)")
            params.append(tag)
        if self.since:
            clauses.append(f"{a}.created_at >= ?")
            params.append(self.since)
        if self.until:
            clauses.append(f"{a}.created_at <= ?")
            params.append(self.until)
        if self.pinned is not None:
            clauses.append(f"{a}.pinned = ?")
            params.append(int(self.pinned))
        if self.source is not None:
            clauses.append(f"{a}.source = ?")
            params.append(self.source)
        if self.scope == "global":
            clauses.append(f"{a}.scope IS NULL")
        elif self.scope is not None:
            clauses.append(f"({a}.scope IS NULL OR {a}.scope = ?)")
            params.append(self.scope)
        if self.ids is not None:
            clauses.append(f"{a}.id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(self.ids)))
        if not self.include_forgotten:
            clauses.append(f"{a}.forgotten_at IS NULL")
        if not self.include_merged:
            clauses.append(f"{a}.merged_into IS NULL")
        if self.as_of:
            # Facts valid at that moment: begun by then, not yet ended, not yet expired.
            clauses.append(f"coalesce({a}.valid_from, {a}.created_at) <= ?")
            clauses.append(f"({a}.valid_to IS NULL OR {a}.valid_to > ?)")
            params.extend([self.as_of, self.as_of])
            if not self.include_expired:
                clauses.append(f"({a}.expires_at IS NULL OR {a}.expires_at > ?)")
                params.append(self.as_of)
        else:
            if not self.include_superseded:
                clauses.append(f"({a}.valid_to IS NULL OR {a}.valid_to > ?)")
                params.append(now)
            if not self.include_expired:
                clauses.append(f"({a}.expires_at IS NULL OR {a}.expires_at > ?)")
                params.append(now)
        return (" AND ".join(clauses) or "1"), params


def _quotes(summary: str, text: str) -> bool:
    """Whether an operation summary carries part of a memory's text (add: its first 80 chars;
    extract: the first 60 of the input)."""
    summary, text = summary.strip(), text.strip()
    if not summary or not text:
        return False
    head = text[:min(len(text), 40)]
    return head in summary or (len(summary) >= 12 and summary in text) or \
        any(len(part) >= 12 and part.strip() in text for part in summary.split(": ", 1)[1:])


def _thread_place(thread: Any, pos: Any) -> tuple[str | None, int | None]:
    """A valid (thread, thread_pos): a thread name is stripped text; no thread, no position."""
    if thread is None or (isinstance(thread, str) and not thread.strip()):
        return None, None
    if not isinstance(thread, str) or "\x00" in thread or len(thread) > MAX_THREAD:
        raise UsageError(f"a thread name is text of at most {MAX_THREAD} characters")
    if pos is not None and (not isinstance(pos, int) or isinstance(pos, bool) or pos < 0):
        raise UsageError("a thread position is a whole number, 0 or more")
    return thread.strip(), pos


def _memory_dict(m: Memory | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {f.name: getattr(m, f.name) for f in fields(Memory)}


class PartitionScan:
    """The bit-index partitions of one semantic search, each read by whichever connection is
    free: the searching store's, and a helper's (search's side reader, once its keyword side is
    done), so the two threads end together instead of one waiting (SQLite releases the GIL while
    it steps): at 1,000,000 memories a hybrid search takes 0.78-0.82 of its time without it.

    `help()` (the helper's thread) waits until the searching thread `post()`s the work or
    `close()`s the scan, then reads partitions until none is left; a partition it fails on goes
    back to the list. `run()` (the searching thread) reads the rest and waits for the helper's
    last one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._todo: builtins.list[builtins.list[Any]] = []
        self._sql = ""
        self._posted = False
        self._closed = False
        self._busy = 0
        self._rows: builtins.list[tuple[int, float]] = []

    def post(self, sql: str, jobs: builtins.list[builtins.list[Any]]) -> None:
        with self._cond:
            self._sql, self._todo, self._rows, self._posted = sql, builtins.list(jobs), [], True
            self._cond.notify_all()

    def close(self) -> None:
        """No more work: a waiting helper returns."""
        with self._cond:
            self._closed = True
            self._todo = []
            self._cond.notify_all()

    def _take(self) -> builtins.list[Any] | None:
        with self._cond:
            if self._closed or not self._todo:
                return None
            self._busy += 1
            return self._todo.pop()

    def _done(self, rows: builtins.list[tuple[int, float]] | None, job: builtins.list[Any]) -> None:
        with self._cond:
            self._busy -= 1
            if rows is None:
                self._todo.append(job)  # the searching thread reads it
            else:
                self._rows += rows
            self._cond.notify_all()

    def _read(self, conn, stop_on_error: bool) -> None:
        while (job := self._take()) is not None:
            try:
                rows = [(r[0], r[1]) for r in conn.execute(self._sql, job)]
            except BaseException:
                self._done(None, job)
                if stop_on_error:
                    return
                raise
            self._done(rows, job)

    def help(self, conn) -> None:
        with self._cond:
            while not (self._posted or self._closed):
                self._cond.wait()
        self._read(conn, stop_on_error=True)

    def run(self, conn, sql: str, jobs: builtins.list[builtins.list[Any]]) -> builtins.list[tuple[int, float]]:
        """Every job's rows, read by this thread and any helper."""
        self.post(sql, jobs)
        while True:
            self._read(conn, stop_on_error=False)
            with self._cond:
                while self._busy:
                    self._cond.wait()
                if not self._todo:  # else the helper gave one back
                    return self._rows


class MemoryStore:
    """The memory database. Open one per process; it is cheap until a model is needed."""

    _prepared: dict[str, bytes] | None = None  # vectors embedded ahead of a write (see prepared_vectors)

    def __init__(self, path: str | Path | None = None, *, config: Config | None = None,
                 embedder: "Embedder | None" = None, clock: Callable[[], str] | None = None):
        self.path = paths.db_path(path)
        self.config = config if config is not None else load_config()
        self.clock = clock or timeutil.now_iso
        self._embedder = embedder
        self._embedder_given = embedder is not None
        self._reindex_target = False  # during reindex(): embed with the configured model
        self._op: str | None = None
        self._bits: bool | None = None  # whether memory_bits exists (cached once True)
        self.exact_below = EXACT_BELOW  # vectors below which semantic search is exact
        self._side: MemoryStore | None = None  # a second connection for reads on another thread
        self._side_lock = threading.Lock()
        self._sqlite_errors = db.errors()
        self._forgiven: tuple[type[Exception], ...] = (DatabaseError, *self._sqlite_errors)  # best-effort writes
        self.conn = db.connect(self.path)
        try:
            migrations.migrate(self.conn)
        except self._sqlite_errors as exc:
            self.conn.close()
            if "readonly" in str(exc):  # a migration is a write
                raise DatabaseError(f"database {self.path} was written by an older pmem and is read-only here: "
                                    f"open it once with write access to upgrade it") from None
            raise self._db_error(exc) from None
        if self.setting("purge_pending"):  # a purge was killed before it rewrote the file
            try:
                self._finish_purge()
            except self._forgiven:
                pass  # busy or read-only: the next open tries again

    # -- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database connection; the store cannot be used afterwards."""
        with self._side_lock:
            if self._side is not None:
                self._side.close()
                self._side = None
        self.conn.close()

    @contextmanager
    def side_reader(self) -> Iterator[MemoryStore | None]:
        """A second store on the same file, for reads on another thread while this one works
        (search ranks its keyword side there while this connection ranks by meaning; SQLite
        releases the GIL while it steps). None where that could not see what this connection sees
        or would not pay: in a transaction, in memory, below SIDE_READS_FROM memories, or while
        another thread holds it. Opened once, closed with this store."""
        if self.conn.in_transaction or str(self.path) == ":memory:" or not self._side_lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._side is None and self._estimate(Filter.everything()) >= SIDE_READS_FROM:
                try:
                    self._side = MemoryStore(self.path, config=self.config, clock=self.clock)
                except self._forgiven:
                    pass  # busy, out of file handles...: this search stays on one connection
            if self._side is not None:  # it ranks as this store does, now
                self._side.clock, self._side.exact_below = self.clock, self.exact_below
            yield self._side
        finally:
            self._side_lock.release()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _db_error(self, exc: BaseException) -> DatabaseError:
        if db.is_locked_error(exc):
            return DatabaseError(f"database {self.path} is locked by another process; try again")
        return DatabaseError(f"database {self.path}: {exc}")

    def setting(self, key: str) -> str | None:
        """The value stored under `key` in the database's own settings table (the vector model and
        dimension, the keyword window), or None when unset. Not config.toml: see `pmem.config`."""
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_setting(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                          "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or join the transaction already open."""
        if self.conn.in_transaction:
            yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except self._sqlite_errors as exc:
            raise self._db_error(exc) from None
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:  # SQLite rolls back itself after some errors (disk full, I/O)
                self.conn.execute("ROLLBACK")
            raise
        try:
            self.conn.execute("COMMIT")
        except self._sqlite_errors as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise self._db_error(exc) from None

    @contextmanager
    def operation(self, kind: str, summary: str = "", op_id: str | None = None) -> Iterator[str]:
        """Group writes into one undoable operation (nested calls join the outer one).

        `op_id` joins an existing operation from a new transaction, so a long run (a dream) can
        commit proposal by proposal and still be one undo. An operation left with no events is
        removed."""
        if self._op is not None:
            yield self._op
            return
        op_id = op_id or _token()
        with self.transaction():
            if not self.conn.execute("SELECT 1 FROM operations WHERE id = ?", (op_id,)).fetchone():
                self.conn.execute("INSERT INTO operations (id, kind, summary, at) VALUES (?, ?, ?, ?)",
                                  (op_id, kind, summary[:500], self.clock()))
            self._op = op_id
            try:
                yield op_id
            finally:
                self._op = None
            n = self.conn.execute("SELECT count(*) FROM events WHERE op_id = ?", (op_id,)).fetchone()[0]
            if n == 0:
                self.conn.execute("DELETE FROM operations WHERE id = ?", (op_id,))

    def _record(self, memory_id: str, action: str, before: Memory | None, after: Memory | None,
                before_vec: bytes | None = None) -> None:
        if self._op is None:
            raise RuntimeError("writes must happen inside MemoryStore.operation()")
        self.conn.execute(
            "INSERT INTO events (op_id, memory_id, action, before, after, before_vec, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self._op, memory_id, action,
             None if before is None else json.dumps(_memory_dict(before), ensure_ascii=False),
             None if after is None else json.dumps(_memory_dict(after), ensure_ascii=False),
             before_vec, self.clock()))

    # -- vectors --------------------------------------------------------------------------

    @property
    def embedder(self) -> "Embedder":
        """The embedding model named by the store's settings, loaded on first use (or a running
        `pmem serve`). Raises ModelError when it cannot be found, fetched or loaded."""
        if self._embedder is None:
            from .embed import load_embedder

            self._embedder = load_embedder(self.embed_model_name(), threads=self.config.threads,
                                            server=self.config.server)
        return self._embedder

    def embed_model_name(self) -> str:
        """The embedding model this store embeds with: the configured one; when none is configured,
        the known model its vectors come from (a store made under the old default, MiniLM, keeps
        working until `pmem reindex`); else the default (provision.embed_model_for)."""
        from .provision import embed_model_for

        if self._reindex_target:
            return self.config.embed_model
        return embed_model_for(self.config, self.setting("embed_model"))

    def vector_model(self) -> tuple[str | None, int | None]:
        """The model and dimension the stored vectors come from (None before the first)."""
        name, dim = self.setting("embed_model"), self.setting("embed_dim")
        return name, (int(dim) if dim else None)

    def _has_vec_table(self) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_vec'").fetchone() is not None

    def _has_bits(self) -> bool:
        if not self._bits:  # only True is cached: another process may create the table
            self._bits = self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'memory_bits'").fetchone() is not None
        return self._bits

    def check_model(self) -> None:
        """Fail clearly when the configured embedder does not match the stored vectors."""
        name, dim = self.vector_model()
        if name is None:
            return
        e = self.embedder
        if name != e.name or dim != e.dim:
            staged = self.reindex_progress()
            resume = f" (to resume the interrupted one: {staged[1]} of {staged[2]} done)" \
                if staged and staged[0] == e.name else ""
            raise ModelMismatch(
                f"the stored vectors come from {name} ({dim}-d) but the configured model is "
                f"{e.name} ({e.dim}-d); run `pmem reindex` to re-embed{resume}, or configure {name} again")

    def _ensure_vec_table(self) -> None:
        if self._has_vec_table():
            return
        e = self.embedder
        migrations.create_vector_tables(self.conn, int(e.dim))
        self._bits = None
        self._set_setting("embed_model", e.name)
        self._set_setting("embed_dim", str(e.dim))

    def embed(self, texts: list[str], progress: Progress | None = None, batch: int = 64,
              query: bool = False) -> list[bytes]:
        """Vectors of memories' texts, or (query=True) of search queries, for models that embed
        the two differently (e5's "query: " / "passage: "). Vectors prepared ahead of a write answer
        queries too: those searches compare memories with memories."""
        prepared = self._prepared
        if prepared is not None and texts and all(t in prepared for t in texts):
            return [prepared[t] for t in texts]
        self.check_model()
        embedder = self.embedder
        kw = {"query": True} if query and getattr(embedder, "query_aware", False) else {}
        if len(texts) > BULK_EMBED and getattr(embedder, "remote", False):
            embedder = embedder.local()  # type: ignore[attr-defined]  # `pmem serve` is for short requests; bulk work runs here
        out: list[bytes] = []
        for start in range(0, len(texts), batch):
            chunk = texts[start:start + batch]
            out.extend(serialize(v) for v in embedder.embed(chunk, **kw))
            if progress:
                progress(min(start + batch, len(texts)), len(texts))
        return out

    def vectors(self, ids: Iterable[str]) -> dict[str, bytes]:
        """Stored vectors of these memories, by id (a keyed join, not a scan of the vec table)."""
        if not self._has_vec_table():
            return {}
        rows = self.conn.execute(
            "SELECT m.id, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq "
            "WHERE m.id IN (SELECT value FROM json_each(?))", (json.dumps(list(ids)),))
        return {r[0]: r[1] for r in rows}

    def query_vector(self, text: str) -> bytes:
        """The query embedding of `text` as little-endian float32 bytes (models with query and
        passage prefixes get the query one). Raises ModelError."""
        return self.embed([text], query=True)[0]

    @contextmanager
    def prepared_vectors(self, texts: Iterable[str]) -> Iterator[None]:
        """Embed `texts` now, in one batch, and answer `embed()` (so `insert`, `edit` and a search's
        query vector) from them until the block ends.

        A run that writes inside one operation (extract) enters this first: its model work then
        happens before the write transaction, and other processes can write meanwhile instead of
        waiting out the busy timeout. Texts not prepared are still embedded when asked for."""
        todo = [t for t in dict.fromkeys(texts) if t]
        outer = self._prepared
        self._prepared = {**(outer or {}), **dict(zip(todo, self.embed(todo)))} if todo else dict(outer or {})
        try:
            yield
        finally:
            self._prepared = outer

    def _seq(self, memory_id: str) -> int:
        return self.conn.execute("SELECT seq FROM memories WHERE id = ?", (memory_id,)).fetchone()[0]

    def _put_vec(self, seq: int, blob: bytes, m: Memory) -> None:
        self._ensure_vec_table()
        self.conn.execute("INSERT OR REPLACE INTO memory_vec (seq, embedding, live) VALUES (?, ?, ?)",
                          (seq, blob, int(self._live(m))))
        self._put_bits(seq, blob, m)

    def _put_bits(self, seq: int, blob: bytes, m: Memory) -> None:
        """The bit code of a vector, in the partition of the memory's tier."""
        if not self._has_bits():
            if self.counter("vectors") >= migrations.BITS_FROM:
                self.build_bits()  # once, when the store grows past BITS_FROM (includes this row)
            return
        self.conn.execute("DELETE FROM memory_bits WHERE seq = ?", (seq,))
        self.conn.execute("INSERT INTO memory_bits (seq, part, bits, live) "
                          f"VALUES (:seq, :part, {migrations.LEVELS_SQL.format(v=':v')}, :live)",
                          {"seq": seq, "part": migrations.bit_part(TIERS.index(m.tier), seq), "v": blob,
                           "live": int(self._live(m)), **self._levels()})

    def _levels(self) -> dict[str, bytes]:
        """The thresholds of the bit index's thermometer code (migrations.build_bits), read each
        time: another process may have rebuilt the index with new ones."""
        rows = dict(self.conn.execute("SELECT key, value FROM settings WHERE key IN ('bit_lo', 'bit_hi')"))
        return {k: bytes.fromhex(rows.get(f"bit_{k}") or "") for k in ("lo", "hi")}

    def build_bits(self) -> bool:
        """(Re)build the bit index of the vectors (done by itself past migrations.BITS_FROM)."""
        with self.transaction():
            self._bits = None
            return migrations.build_bits(self.conn)

    def _sync_vec(self, seq: int, m: Memory) -> None:
        """After a change of tier or liveness: the vector's flags and bit partition follow."""
        if not self._has_vec_table():
            return
        self.conn.execute("UPDATE memory_vec SET live = ? WHERE seq = ?", (int(self._live(m)), seq))
        blob = self._get_vec(seq)
        if blob is not None:
            self._put_bits(seq, blob, m)

    def _del_vec(self, seq: int) -> None:
        if self._has_vec_table():
            self.conn.execute("DELETE FROM memory_vec WHERE seq = ?", (seq,))
        if self._has_bits():
            self.conn.execute("DELETE FROM memory_bits WHERE seq = ?", (seq,))

    def _get_vec(self, seq: int) -> bytes | None:
        if not self._has_vec_table():
            return None
        row = self.conn.execute("SELECT embedding FROM memory_vec WHERE seq = ?", (seq,)).fetchone()
        return row[0] if row else None

    # -- reading --------------------------------------------------------------------------

    def _select(self, where: str, params: Sequence[Any], tail: str = "", index: str = "") -> list[Memory]:
        indexed = f" INDEXED BY {index}" if index else ""
        sql = f"SELECT {_COLUMNS_SQL} FROM memories m{indexed} WHERE {where} {tail}"
        return [Memory.from_row(r) for r in self.conn.execute(sql, list(params))]

    def resolve(self, prefix: str) -> str:
        """A full id from a unique prefix, like git."""
        p = prefix.strip().lower()
        if not _ID.match(p):
            raise NotFound(f"no memory with id {prefix!r}")
        rows = self.conn.execute(
            "SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT 6",
            (p, p + "\uffff")).fetchall()
        if not rows:
            raise NotFound(f"no memory with id {prefix!r}")
        if len(rows) > 1:
            exact = [r[0] for r in rows if r[0] == p]
            if exact:
                return exact[0]
            shown = ", ".join(r[0] for r in rows[:5])
            raise AmbiguousId(f"id prefix {prefix!r} matches several memories: {shown}")
        return rows[0][0]

    def get(self, memory_id: str) -> Memory:
        """The memory whose id is `memory_id` or starts with it, in any state.

        Raises NotFound when no id matches, AmbiguousId when several do."""
        full = self.resolve(memory_id)
        return self._select("m.id = ?", [full])[0]

    def get_many(self, ids: Iterable[str]) -> list[Memory]:
        """The memories with these full ids, in the order given; unknown ids are left out."""
        ids = list(ids)
        found = {m.id: m for m in self._select("m.id IN (SELECT value FROM json_each(?))", [json.dumps(ids)])}
        return [found[i] for i in ids if i in found]

    def list(self, flt: Filter | None = None, *, sort: str = "created", reverse: bool = False,
             limit: int | None = 50, offset: int = 0) -> list[Memory]:
        """Memories passing `flt` (default: the active core and archival ones), newest first.

        Args: `sort` is created, updated, accessed, expires or id; `reverse` flips the order; `limit` None
        means all. Never-accessed memories sort as the oldest access (last, newest first), and
        memories that never expire after every date (last, soonest first). Raises UsageError for an
        unknown sort or tier. Each order walks an index, so a page reads only what it shows."""
        flt = flt or Filter()
        where, params = flt.where(self.clock())
        order = {"created": "m.created_at", "updated": "m.updated_at", "accessed": "m.last_accessed_at",
                 "id": "m.id", "expires": "m.expires_at"}.get(sort)
        if order is None:
            raise UsageError(f"unknown sort {sort!r}: use created, updated, accessed, expires or id")
        direction = "ASC" if (sort in ("id", "expires")) != reverse else "DESC"
        if sort == "expires":
            return self._by_expiry(where, params, direction, limit, offset)
        tail = f"ORDER BY {order} {direction}, m.seq {direction}"
        if limit is not None:
            tail += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        # The core tier alone (recall lists it on every call) is read from its own index; without
        # statistics SQLite would walk every memory in date order instead (3.5 s cold at 1,000,000).
        whole = len(set(flt.tiers)) == 1 and flt.tiers[0] in migrations.WHOLE_TIERS and flt.ids is None
        return self._select(where, params, tail, f"memories_{flt.tiers[0]}" if whole else "")

    def _by_expiry(self, where: str, params: builtins.list[Any], direction: str, limit: int | None,
                   offset: int) -> builtins.list[Memory]:
        """`list(sort="expires")`: the memories with an expiry from their partial index
        (memories_expires), then those without, in storage order; reversed, the other way round.
        (SQLite puts NULL first in ascending order: the never-expiring came before the soonest.)"""
        parts = [("m.expires_at IS NOT NULL", f"m.expires_at {direction}, m.seq {direction}"),
                 ("m.expires_at IS NULL", f"m.seq {direction}")]
        if direction == "DESC":
            parts.reverse()
        out: builtins.list[Memory] = []
        for clause, order in parts:
            if limit is not None and len(out) >= limit:
                break
            part = f"{where} AND {clause}"
            rows = self._select(part, params, f"ORDER BY {order} LIMIT "
                                f"{-1 if limit is None else int(limit) - len(out)} OFFSET {int(offset)}")
            if offset and not rows:  # the page starts past this part: skip what it holds
                offset -= self.conn.execute(f"SELECT count(*) FROM memories m WHERE {part}", params).fetchone()[0]
            else:
                out += rows
                offset = 0
        return out

    def count(self, flt: Filter | None = None) -> int:
        """How many memories pass `flt`. Filters on tiers, pinned and status are answered from the
        kept counts and the partial indexes on expires_at and valid_to (no scan of the table)."""
        flt = flt or Filter()
        now = self.clock()
        if not (flt.tags or flt.since or flt.until or flt.as_of or flt.source is not None
                or flt.ids is not None or getattr(flt, "scope", None) is not None):
            base = self._estimate(flt)
            late = []
            if not flt.include_superseded:
                late.append("m.valid_to <= ?")
            if not flt.include_expired:
                late.append("m.expires_at <= ?")
            if not late or not base:
                return base
            where, params = replace(flt, include_expired=True, include_superseded=True).where(now)
            gone = self.conn.execute(f"SELECT count(*) FROM memories m WHERE ({' OR '.join(late)}) AND {where}",
                                     [now] * len(late) + params).fetchone()[0]
            return base - gone
        where, params = flt.where(now)
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]

    def counter(self, key: str) -> int:
        """A count kept by triggers (migration m005_binary_vectors): 'vectors', 'events', 'operations', 'tag:NAME',
        'mem:TIER:PINNED:FORGOTTEN:MERGED'."""
        row = self.conn.execute("SELECT n FROM counts WHERE key = ?", (key,)).fetchone()
        return row[0] if row else 0

    def languages(self) -> dict[str, int]:
        """Memories per guessed language other than English (kept by triggers, migration
        m007), most first: which stemmers a keyword query may need."""
        rows = self.conn.execute("SELECT substr(key, 6), n FROM counts WHERE key >= 'lang:' AND key < 'lang;' "
                                 "AND n > 0 ORDER BY n DESC, key").fetchall()
        return {r[0]: r[1] for r in rows}

    def _estimate(self, flt: Filter) -> int:
        """An upper bound of count(flt) from the kept counts; exact when `flt` filters only on
        tiers, pinned and forgotten/merged status."""
        for tier in flt.tiers:
            if tier not in TIERS:
                raise UsageError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
        keys = [f"mem:{t}:{p}:{f}:{m}" for t in flt.tiers
                for p in ((0, 1) if flt.pinned is None else (int(flt.pinned),))
                for f in ((0, 1) if flt.include_forgotten else (0,))
                for m in ((0, 1) if flt.include_merged else (0,))]
        total = self.conn.execute("SELECT coalesce(sum(n), 0) FROM counts WHERE key IN "
                                  "(SELECT value FROM json_each(?))", (json.dumps(keys),)).fetchone()[0]
        if flt.ids is not None:
            total = min(total, len(flt.ids))
        if not flt.include_forgotten:
            for tag in flt.tags:
                total = min(total, self.counter("tag:" + tag))
        return total

    def iter_all(self, batch: int = 1000) -> Iterator[Memory]:
        """Every memory in any state, in storage order, read `batch` rows at a time."""
        last = 0
        while True:
            rows = self.conn.execute(f"SELECT m.seq, {_COLUMNS_SQL} FROM memories m WHERE m.seq > ? "
                                     f"ORDER BY m.seq LIMIT ?", (last, batch)).fetchall()
            if not rows:
                return
            for r in rows:
                yield Memory.from_row(r[1:])
            last = rows[-1][0]

    def iter_list(self, flt: Filter | None = None, batch: int = 1000) -> Iterator[Memory]:
        """The memories passing `flt`, oldest first (created_at, then storage order: list()'s
        `reverse=True`), read `batch` rows at a time along the date index: constant memory
        however many there are (`pmem export --active` of 1,000,000 memories)."""
        flt = flt or Filter()
        where, params = flt.where(self.clock())
        last: tuple[str, int] = ("", 0)
        while True:
            rows = self.conn.execute(f"SELECT m.seq, {_COLUMNS_SQL} FROM memories m WHERE {where} "
                                     f"AND (m.created_at, m.seq) > (?, ?) ORDER BY m.created_at, m.seq LIMIT ?",
                                     [*params, *last, batch]).fetchall()
            if not rows:
                return
            memories = [Memory.from_row(r[1:]) for r in rows]
            yield from memories
            last = (memories[-1].created_at, rows[-1][0])

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the store as it was at the first, however
        long they take and whatever other processes write meanwhile (an export reads in batches)."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")  # nothing was written: ending the read is all

    def touch(self, ids: Iterable[str]) -> None:
        """Count an access (recall, show). Not an event: reading changes no memory."""
        ids = list(ids)
        if not ids:
            return
        try:
            with self.transaction():
                self.conn.execute(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? "
                    "WHERE id IN (SELECT value FROM json_each(?))", (self.clock(), json.dumps(ids)))
        except self._forgiven:
            pass  # a busy or read-only database must not fail a read

    def find_exact(self, text: str) -> Memory | None:
        """The oldest live (not forgotten, not merged) memory whose text is exactly `text` (stripped),
        or None."""
        text = text.strip()
        rows = self._select("length(m.text) = length(?) AND substr(m.text, 1, 32) = substr(?, 1, 32) "
                            "AND m.text = ? AND m.forgotten_at IS NULL AND m.merged_into IS NULL",
                            [text, text, text], "ORDER BY m.seq LIMIT 1")  # memories_text_start (m011)
        return rows[0] if rows else None

    # -- search support (the SQL behind pmem.search) ----------------------------------------

    def has_vectors(self) -> bool:
        """Whether any memory has been embedded yet (the vec0 table exists)."""
        return self._has_vec_table()

    def keyword_ranks(self, match: str, flt: Filter, n: int,
                      context_weight: float = 1.0) -> builtins.list[tuple[int, float]]:
        """(seq, bm25) for an FTS5 `match` expression, best first; bm25 is negative, lower is better.
        A threaded memory's neighbours' words (the `context` column) count `context_weight`."""
        where, params = flt.where(self.clock())
        weights = f"1.0, {float(context_weight)!r}"
        docs = self.conn.execute("SELECT coalesce(sum(n), 0) FROM counts "
                                 "WHERE key >= 'mem:' AND key < 'mem;'").fetchone()[0]
        large = docs >= self.exact_below
        # Under a date filter (--since / --until) on a large store, the storage range [lo, hi] of
        # the window's newest rows (_date_window) bounds what is ranked. Where those are the whole
        # window, every row of it lies in the range and the bounded query is exact; it costs what
        # the window holds where dates follow storage order (imports of a day, a history), and
        # never more than the whole query. (At 1,000,000 `--until 2021-01-01` ranked every row
        # holding "caroline", "support" or "group": 0.2 s warm, 0.39-0.43 s whole process.)
        window = self._date_window(flt, docs) if large else None
        lo, hi, complete = window if window is not None else (0, 0, False)
        span = " AND memories_fts.rowid BETWEEN ? AND ?" if complete else ""
        sql = (f"SELECT m.seq, bm25(memories_fts, {weights}) AS rank FROM memories_fts "
               f"JOIN memories m ON m.seq = memories_fts.rowid "
               f"WHERE memories_fts MATCH ?{span} AND {where} ORDER BY rank LIMIT ?")
        spanned = [lo, hi] if complete else []
        # On a large store the best KEYWORD_FETCH * n by BM25 alone are ranked first and only
        # those rows are looked up and filtered (looking up every matching row cost ~30% of the
        # keyword side at 100,000); where the filter keeps fewer than n of them and more rows
        # match than were ranked, the whole query. A filter known to keep under 1 / KEYWORD_FETCH
        # of the store (a tier, a tag), or seen to keep fewer than n of the newest rows holding
        # the words (a date), goes to the whole query at once: the first pass would rank every
        # row only to fail (at 1,000,000 an --as-of search ranked them twice, 0.4 + 0.3 s).
        selective = large and self._estimate(flt) * KEYWORD_FETCH < docs
        fetched = (f"SELECT f.rowid, f.rank, CASE WHEN m.seq IS NOT NULL AND ({where}) THEN 1 ELSE 0 END "
                   f"FROM (SELECT rowid, bm25(memories_fts, {weights}) AS rank "
                   f"FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?) f "
                   f"LEFT JOIN memories m ON m.seq = f.rowid ORDER BY f.rank")

        def ranked(expr: str, selective: bool = selective) -> builtins.list[tuple[int, float]]:
            if large and not selective and not complete:
                best = KEYWORD_FETCH * int(n)
                found = self.conn.execute(fetched, [*params, expr, best]).fetchall()
                rows = [(r[0], r[1]) for r in found if r[2]][:n]
                if len(rows) >= n or len(found) < best:  # enough, or every matching row was seen
                    return rows
            return [(r[0], r[1]) for r in self.conn.execute(sql, [expr, *spanned, *params, int(n)])]

        terms = match.split(" OR ")
        if large and window is None and (flt.since or flt.until):
            return []  # no memory in the date window
        if complete:
            return ranked(match)
        if large and (len(terms) > 1 or window is not None):
            # BM25 is computed for every row holding any query word, and a word in 20-50% of a
            # large store (a name, "make") costs ~90 ms at 100,000 while adding little to the
            # score (its IDF is near 0). Such words choose no rows when rarer ones remain; a
            # query of common words alone (under a date filter, one common word too) ranks the
            # newest COMMON_RECENT rows holding them.
            cap = max(COMMON_MIN, min(docs * COMMON_SHARE // 100, COMMON_MAX))
            rare = [t for t in terms if self.conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? LIMIT ?)",
                (t, cap + 1)).fetchone()[0] <= cap]
            # Under a date filter "newest" means the newest rows of its window (their storage
            # range); under --as-of alone, of the memories created by then (_date_window).
            newest = " AND rowid BETWEEN ? AND ?" if window is not None else ""
            recent = (f"SELECT m.seq, f.rank FROM (SELECT rowid, bm25(memories_fts, {weights}) AS rank "
                      f"FROM memories_fts "
                      f"WHERE memories_fts MATCH ?{newest} ORDER BY rowid DESC LIMIT ?) f "
                      f"JOIN memories m ON m.seq = f.rowid WHERE {where} ORDER BY f.rank LIMIT ?")
            common = " OR ".join(t for t in terms if t not in rare)
            # The rows holding a rare word, ranked with the common words counted where a row
            # holds them (a name tells whose memory it is). FTS5 has no optional phrase, so the
            # rare words are in the expression twice and count double. Against BM25 of the whole
            # query (hit@10 0.50 at 100,000 and 1,000,000), ranking by the rare words alone gave
            # 0.445 / 0.35, this 0.485 / 0.45 for +5 / +20 ms; the whole query's exact score on
            # these rows (this one's minus the rare words') gave 0.50 at 1.8 times this one's cost
            # (benchmarks/README.md: `scale.py keywords`). Halved, a score is between the rare
            # words' own and the whole query's, as search's absolute scores expect.
            if len(rare) == len(terms):
                return ranked(match)
            rows = [(seq, rank / 2) for seq, rank in ranked(f"({' OR '.join(rare)}) AND ({match})")] if rare else []
            if len(rows) >= n:
                return rows
            # Fewer rows than asked hold a rare word, so those rows are all of them: the rest come
            # from the newest rows holding the common words, ranked after them. (BM25 of the
            # whole query over every row holding a common word took 0.6-3.9 s at 1,000,000 for
            # "Caroline and Melanie ... pride fesetival", a word no memory holds.)
            seen = {seq for seq, _ in rows}
            last = rows[-1][1] if rows else None
            bounds = [lo, hi] if window is not None else []
            for seq, rank in self.conn.execute(recent, [common, *bounds, COMMON_RECENT, *params, int(n)]):
                if seq not in seen and len(rows) < n:
                    rows.append((seq, rank if last is None else max(rank, last)))
            if len(rows) >= n:
                return rows
            return ranked(match, selective=True)  # the filter keeps few of the newest: the whole query
        return ranked(match)

    def _date_window(self, flt: Filter, docs: int) -> tuple[int, int, bool] | None:
        """(lo, hi, complete) for a filter with a date: the smallest and largest seq of the newest
        memories created in its window, at most max(DATE_WINDOW, docs / DATE_SHARE) of them
        along memories_created_seq, and whether they are the whole window. --as-of alone gives
        the memories created by then, never complete. None without a date or an empty window."""
        clauses, params = [], []
        if flt.since:
            clauses.append("created_at >= ?")
            params.append(flt.since)
        if flt.until or flt.as_of:
            clauses.append("created_at <= ?")
            params.append(flt.until or flt.as_of)
        if not clauses:
            return None
        most = max(DATE_WINDOW, docs // DATE_SHARE)
        count, lo, hi = self.conn.execute(
            f"SELECT count(*), min(seq), max(seq) FROM (SELECT seq FROM memories WHERE {' AND '.join(clauses)} "
            f"ORDER BY created_at DESC, seq DESC LIMIT ?)", [*params, most]).fetchone()
        whole = count < most and bool(flt.since or flt.until)
        return None if not count else (lo, hi, whole)

    def semantic_ranks(self, vector: bytes, flt: Filter, n: int,
                       scan: PartitionScan | None = None) -> builtins.list[tuple[int, float]]:
        """(seq, cosine distance) of the `n` memories nearest to `vector` that pass `flt`, best first.

        Below `exact_below` vectors, or when the filter keeps few memories, the distance is
        computed for every filtered row (exact). Above, the bit codes of the vectors answer first
        (two bits per dimension, migrations.build_bits): vec0 finds the nearest by Hamming distance
        in each partition of the wanted tiers (live rows only unless asked), and the best
        `BIT_POOL` (at least 2n) of those are rescored with their float32 vectors and filtered.
        Where that pool holds every filtered memory, the result equals the exact one; otherwise
        it is approximate (recall in benchmarks/README.md). With a `scan`, another thread may read
        some of the partitions on its own connection (PartitionScan)."""
        if n <= 0 or not self._has_vec_table():
            return []
        where, params = flt.where(self.clock())
        total = self.counter("vectors")
        if total >= self.exact_below and self._has_bits():
            rows = self._bit_ranks(vector, flt, n, where, params, scan)
            if rows is not None:
                return rows
        sql = (f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
               f"JOIN memory_vec v ON v.seq = m.seq WHERE {where} ORDER BY distance, m.seq LIMIT ?")
        return [(r[0], r[1]) for r in self.conn.execute(sql, [vector, *params, int(n)])]

    def _bit_ranks(self, vector: bytes, flt: Filter, n: int, where: str, params: builtins.list[Any],
                   scan: PartitionScan | None = None) -> builtins.list[tuple[int, float]] | None:
        """The approximate path of `semantic_ranks`; None when the exact scan should answer."""
        live = not (flt.include_forgotten or flt.include_merged)
        rows = {t: self._estimate(Filter(tiers=(t,), include_expired=True, include_superseded=True,
                                         include_forgotten=not live, include_merged=not live))
                for t in flt.tiers}
        in_knn = sum(rows.values())
        wanted = self._estimate(flt)
        if wanted <= EXACT_SCAN_MAX or in_knn == 0:
            return None
        if flt.since or flt.until:
            # A small date window (_date_window) is scanned whole along the date index: exact, and
            # at 1,000,000 14 ms for a month (14,400) where the bit pool, which cannot know how
            # few pass, read the partitions three times (107 ms) before the same scan.
            window = self._date_window(flt, self.counter("vectors"))
            if window is None or window[2]:
                return None
        pool = max(BIT_POOL, 2 * n) * in_knn // wanted
        # A small tier kept whole (core) is ranked exactly through its own index: its bit top-k
        # had to be as large as the pool (vec0's selection costs O(chunk_size * k)).
        wanted_tiers = list(dict.fromkeys(flt.tiers))  # `--tier core --tier core` is one tier
        exact = [t for t in wanted_tiers if t in migrations.WHOLE_TIERS and rows[t] <= WHOLE_EXACT_MAX]
        whole: list[tuple[int, float]] = []
        for tier in exact:
            whole += [(r[0], r[1]) for r in self.conn.execute(
                f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
                f"INDEXED BY memories_{tier} JOIN memory_vec v ON v.seq = m.seq "
                f"WHERE m.tier = '{tier}' AND {where} ORDER BY distance, m.seq LIMIT ?", [vector, *params, int(n)])]
        tiers = [t for t in wanted_tiers if t not in exact]
        if not tiers:
            return sorted(whole, key=lambda r: (r[1], r[0]))[:n]
        # (partition, its tier's partitions, its tier's rows): each partition must be able to give
        # an even share of the pool, and never needs more than its tier holds.
        parts = [(migrations.bit_part(TIERS.index(t), p), migrations.bit_parts(t), rows[t]) for t in tiers
                 for p in range(migrations.bit_parts(t))]
        code = self.conn.execute(f"SELECT {migrations.LEVELS_SQL.format(v=':v')}",
                                 {"v": vector, **self._levels()}).fetchone()[0]
        knn = ("SELECT seq, distance FROM memory_bits WHERE bits MATCH vec_bit(?) AND k = ? AND part = ?"
               + (" AND live = 1" if live else ""))
        rescore = (f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM json_each(?) p "
                   f"JOIN memories m ON m.seq = p.value JOIN memory_vec v ON v.seq = m.seq "
                   f"WHERE {where} ORDER BY distance, m.seq LIMIT ?")
        for _ in range(3):
            # A tier kept whole is one partition: past KNN_MAX its top-k is capped (approximate),
            # where the exact scan of every tier would cost far more.
            ks = [min(-(-pool // count), tier_rows, KNN_MAX - PART_SLACK if count == 1 else tier_rows) + PART_SLACK
                  for _, count, tier_rows in parts]
            if max(ks) > KNN_MAX:
                return None
            jobs = [[code, k, p] for (p, _, _), k in zip(parts, ks)]
            lead = max(range(len(parts)), key=lambda i: parts[i][2] / parts[i][1])  # the largest partitions' first
            near = self._bounded_knn(knn, jobs, lead, pool, scan or PartitionScan())
            near.sort(key=lambda r: (r[1], r[0]))
            seqs = json.dumps([seq for seq, _ in near[:pool]])
            found = [(r[0], r[1]) for r in self.conn.execute(rescore, [vector, seqs, *params, int(n)])]
            if len(whole) + len(found) >= n:  # as when the core tier's rows were in the pool
                return sorted(whole + found, key=lambda r: (r[1], r[0]))[:n] if whole else found
            pool *= 4  # the filter kept fewer than estimated: a larger pool, then the exact scan
        return None

    def _bounded_knn(self, knn: str, jobs: builtins.list[builtins.list[Any]], lead: int, pool: int,
                     scan: PartitionScan) -> builtins.list[tuple[int, float]]:
        """Every partition's nearest rows by Hamming distance (jobs: [code, k, partition]), of which
        the best `pool` are the same as without the bound below.

        vec0 picks a chunk's k nearest in k passes over the chunk, O(chunk x k); with a bound on
        the distance, only the rows within it take part. The bound is the k-th distance of one
        partition, read first (`lead`). Each other partition then gives its k nearest that are
        within the bound: a row it leaves out is farther than every row kept. So where at least
        `pool` rows are kept, the best `pool` are those without the bound (vec0 0.1.7-0.1.9 breaks
        ties at equal distance in the same order with or without it); else the partitions are
        read again without it. It took 0.73-0.76 of vec0's time at 100,000 and 1,000,000
        memories, and no question of the benchmark needed the second reading
        (benchmarks/README.md)."""
        first = [(r[0], r[1]) for r in self.conn.execute(knn, jobs[lead])]
        rest = jobs[:lead] + jobs[lead + 1:]
        if not rest:
            return first
        if len(first) < jobs[lead][1]:  # a partition smaller than its k: no bound from it
            return first + scan.run(self.conn, knn, rest)
        bound = max(d for _, d in first)
        near = scan.run(self.conn, knn + " AND distance <= ?", [job + [bound] for job in rest])
        if len(first) + len(near) < pool:
            near = scan.run(self.conn, knn, rest)
        return first + near

    def memories_by_seq(self, seqs: Iterable[int]) -> dict[int, Memory]:
        """Memories by their row number (search results carry seqs)."""
        seqs = [int(s) for s in seqs]
        if not seqs:
            return {}
        rows = self.conn.execute(f"SELECT m.seq, {_COLUMNS_SQL} FROM memories m "
                                 f"WHERE m.seq IN (SELECT value FROM json_each(?))", (json.dumps(seqs),))
        return {r[0]: Memory.from_row(r[1:]) for r in rows}

    def thread_neighbours(self, memory: Memory, before: int = 1, after: int = 1,
                          flt: Filter | None = None) -> tuple[builtins.list[Memory], builtins.list[Memory]]:
        """Up to `before` and `after` members of `memory`'s thread next to it that pass `flt`
        (default: active ones), each list in thread order. ([], []) for a memory with no thread."""
        if memory.thread is None or (before <= 0 and after <= 0):
            return [], []
        seq = self._seq(memory.id)
        where, params = (flt or Filter(tiers=TIERS)).where(self.clock())
        key = [memory.thread, memory.thread_pos, seq]
        sides = []
        for count, op, order in ((before, "<", "DESC"), (after, ">", "ASC")):
            if count <= 0:
                sides.append([])
                continue
            sides.append(self._select(f"m.thread = ? AND (m.thread_pos, m.seq) {op} (?, ?) AND {where}",
                                      [*key, *params],
                                      f"ORDER BY m.thread_pos {order}, m.seq {order} LIMIT {int(count)}"))
        return sides[0][::-1], sides[1]

    def keyword_window(self) -> tuple[int, int]:
        """How many neighbours (before, after) each threaded memory's keyword entry holds."""
        value = self.setting("keyword_window")
        if not value:
            return migrations.KEYWORD_WINDOW
        before, after = value.split(",")
        return int(before), int(after)

    def set_keyword_window(self, before: int, after: int) -> None:
        """Change the keyword window and rewrite every threaded entry (one transaction; a
        tuning knob, not an event: no memory changes)."""
        if before < 0 or after < 0:
            raise UsageError("a keyword window counts 0 or more neighbours")
        with self.transaction():
            migrations.install_keyword_window(self.conn, before, after)

    # -- writing --------------------------------------------------------------------------

    def existing_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of these exact ids are stored (one query, for imports and id allocation)."""
        rows = self.conn.execute("SELECT id FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                                 (json.dumps(list(ids)),))
        return {r[0] for r in rows}

    def _new_id(self, taken: set[str] = frozenset()) -> str:
        # A synced store's ids come from many devices: 8 bytes (16 hex) keep them apart (8 hex
        # collide at ~1% by 10,000); the setting is written by pmem.sync, older ids keep working.
        size = int(self.setting("id_bytes") or 4)
        while True:
            candidate = os.urandom(size).hex()
            if candidate not in taken and not self.existing_ids([candidate]):
                return candidate

    @staticmethod
    def _normalize(m: Memory) -> Memory:
        text = m.text.strip() if isinstance(m.text, str) else m.text
        if not text:
            raise UsageError("a memory needs some text")
        if "\x00" in text:
            raise UsageError("memory text contains NUL bytes (binary input?)")
        if len(text) > MAX_TEXT:
            raise UsageError(f"memory text is {len(text):,} characters; the limit is {MAX_TEXT:,} "
                             "(use `pmem extract` for long text)")
        if m.tier not in TIERS:
            raise UsageError(f"unknown tier {m.tier!r}: use one of {', '.join(TIERS)}")
        tags = sorted({t.strip() for t in m.tags if t and t.strip()})
        pinned = m.pinned or m.tier == "core"
        tier = "core" if pinned else m.tier
        thread, pos = _thread_place(m.thread, m.thread_pos)
        return replace(m, text=text, tags=tags, pinned=pinned, tier=tier, thread=thread, thread_pos=pos)

    def _insert(self, m: Memory, blob: bytes | None, action: str = "add") -> Memory:
        self.conn.execute(
            f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES ({', '.join('?' * len(MEMORY_COLUMNS))})",
            m.to_row())
        if blob is not None:
            self._put_vec(self._seq(m.id), blob, m)
        self._record(m.id, action, None, m)
        return m

    def _place(self, m: Memory, ends: dict[str, int]) -> int | None:
        """The position of `m` in its thread: its own, or after the thread's last (`ends` carries
        the last positions through one write transaction)."""
        if m.thread is None:
            return None
        if m.thread not in ends:
            row = self.conn.execute("SELECT max(thread_pos) FROM memories WHERE thread = ?", (m.thread,)).fetchone()
            ends[m.thread] = -1 if row[0] is None else row[0]
        pos = ends[m.thread] + 1 if m.thread_pos is None else m.thread_pos
        ends[m.thread] = max(ends[m.thread], pos)
        return pos

    @staticmethod
    def _live(m: Memory) -> bool:
        return m.forgotten_at is None and m.merged_into is None

    def _write(self, before: Memory, after: Memory, action: str, blob: bytes | None = None) -> Memory:
        """Replace a stored memory's row with `after`, recording the change."""
        if _memory_dict(before) == _memory_dict(after) and blob is None:
            return after
        seq = self._seq(before.id)
        old_vec = None
        if blob is not None or after.text != before.text:
            old_vec = self._get_vec(seq)
        sets = ", ".join(f"{c} = ?" for c in MEMORY_COLUMNS if c != "id")
        row = after.to_row()
        self.conn.execute(f"UPDATE memories SET {sets} WHERE id = ?", (*row[1:], before.id))
        if blob is not None:
            self._put_vec(seq, blob, after)
        elif self._live(before) != self._live(after) or before.tier != after.tier:
            self._sync_vec(seq, after)
        self._record(before.id, action, before, after, old_vec)
        return after

    def new_memory(self, text: str, *, tags: Iterable[str] = (), tier: str = "archival", pinned: bool = False,
                   source: str | None = None, meta: dict | None = None, created_at: str | None = None,
                   expires_at: str | None = None, valid_from: str | None = None,
                   derived_from: Iterable[str] = (), memory_id: str | None = None,
                   scope: str | None = None, thread: str | None = None,
                   thread_pos: int | None = None) -> Memory:
        """A validated Memory that is not stored yet (see `insert`). With a `thread` and no
        `thread_pos`, storing it appends it to the thread."""
        now = self.clock()
        m = Memory(id=memory_id or "", text=text, tier=tier, pinned=pinned, tags=list(tags), source=source,
                   meta=dict(meta or {}), created_at=created_at or now, updated_at=now, expires_at=expires_at,
                   valid_from=valid_from, derived_from=list(derived_from), scope=scope, thread=thread,
                   thread_pos=thread_pos)
        return self._normalize(m)

    def add(self, text: str, *, allow_duplicate: bool = False, allow_secret: bool = False,
            **kw) -> tuple[Memory, bool]:
        """Store one memory. Returns (memory, created); an exact duplicate of an active memory
        is not stored twice unless asked: the existing one comes back with created=False.

        Text holding a machine secret (an API key, a private key...) raises SecretFound unless
        `allow_secret`."""
        m = self.new_memory(text, **kw)
        if not allow_secret:
            secretscan.refuse(m.text)
        if not allow_duplicate:
            existing = self.find_exact(m.text)
            if existing is not None:
                return existing, False
        blob = self.embed([m.text])[0]
        with self.operation("add", m.text[:80]):
            if not allow_duplicate:  # again under the write lock: a concurrent add may have stored it
                existing = self.find_exact(m.text)
                if existing is not None:
                    return existing, False
            self._ensure_vec_table()
            m = replace(m, id=self._new_id(), thread_pos=self._place(m, {}))
            self._insert(m, blob)
        return m, True

    def insert(self, memories: Sequence[Memory], *, kind: str = "import", summary: str = "",
               progress: Progress | None = None, keep_ids: bool = True,
               vectors: Sequence[bytes] | None = None, allow_secret: bool = False) -> builtins.list[Memory]:
        """Store many memories as one operation (one `undo` takes them all back).

        Memories are validated first (a machine secret in any raises SecretFound unless
        `allow_secret`) and embedded in batches; then everything is written in one transaction,
        so a failure stores nothing."""
        items = [self._normalize(m) for m in memories]
        if not allow_secret:
            for i, m in enumerate(items, start=1):
                secretscan.refuse(m.text, what=f"memory {i} of {len(items)}" + (f" (id {m.id})" if m.id else ""))
        if vectors is not None and len(vectors) != len(items):
            raise ValueError("one vector per memory")
        blobs = list(vectors) if vectors is not None else (
            self.embed([m.text for m in items], progress=progress) if items else [])
        out: list[Memory] = []
        with self.operation(kind, summary or f"{len(items)} memories"):
            if items:
                self._ensure_vec_table()
            stored = self.existing_ids(m.id for m in items if m.id) if keep_ids else set()
            taken: set[str] = set()
            ends: dict[str, int] = {}
            for m, blob in zip(items, blobs):
                mid = m.id
                if not (keep_ids and mid and _ID.match(mid) and mid not in taken and mid not in stored):
                    mid = self._new_id(taken)
                taken.add(mid)
                m = replace(m, id=mid, created_at=m.created_at or self.clock(),
                            updated_at=m.updated_at or self.clock(), thread_pos=self._place(m, ends))
                out.append(self._insert(m, blob, action=kind if kind in ("import", "extract") else "add"))
        return out

    def edit(self, memory_id: str, *, text: str | None = None, tags: Iterable[str] | None = None,
             add_tags: Iterable[str] = (), remove_tags: Iterable[str] = (), tier: str | None = None,
             meta: dict | None = None, source: str | None = None, expires_at: str | None | bool = False,
             valid_from: str | None = None, action: str | None = None, allow_secret: bool = False,
             update_meta: dict | None = None) -> Memory:
        """Change a memory; a text change re-embeds it (the old vector is kept for undo).
        `meta` replaces the metadata, `update_meta` sets some keys in it. A new text holding a
        machine secret raises SecretFound unless `allow_secret`.

        The changes apply to the row as it is inside the write transaction, so concurrent edits
        (two processes adding tags) both land and each event's `before` is exact."""
        add_tags, remove_tags = list(add_tags), set(remove_tags)
        tags = None if tags is None else list(tags)

        def change(before: Memory) -> Memory:
            new_tags = list(before.tags if tags is None else tags)
            after = replace(before, tags=[t for t in new_tags if t not in remove_tags] + add_tags)
            if text is not None:
                after = replace(after, text=text)
            if tier is not None:
                after = replace(after, tier=tier, pinned=tier == "core")
            if meta is not None:
                after = replace(after, meta=meta)
            if update_meta:
                after = replace(after, meta={**after.meta, **update_meta})
            if source is not None:
                after = replace(after, source=source)
            if expires_at is not False:
                after = replace(after, expires_at=expires_at)
            if valid_from is not None:
                after = replace(after, valid_from=valid_from)
            return self._normalize(after)

        if text is not None and not allow_secret:
            secretscan.refuse(text, what="the new text")
        seen = self.get(memory_id)  # read once outside the lock: embed before taking it
        guess = change(seen)
        if _memory_dict(guess) == _memory_dict(seen):
            return seen
        vectors: dict[str, bytes] = {}
        if guess.text != seen.text:
            vectors[guess.text] = self.embed([guess.text])[0]
        if action is None:
            changed = {k for k, v in _memory_dict(guess).items() if _memory_dict(seen)[k] != v}
            name = "retag" if changed <= {"tags"} else "edit"
        else:
            name = action
        with self.operation(name, f"{name} {seen.id}"):
            before = self._fresh(seen.id)
            after = change(before)
            if _memory_dict(after) == _memory_dict(before):
                return before
            after = replace(after, updated_at=self.clock())
            blob = None
            if after.text != before.text:  # embedding under the lock only if the text moved meanwhile
                blob = vectors.get(after.text) or self.embed([after.text])[0]
            if action is None:
                changed = {k for k, v in _memory_dict(after).items() if _memory_dict(before)[k] != v}
                name = "retag" if changed <= {"tags", "updated_at"} else "edit"
            return self._write(before, after, name, blob)

    def _fresh(self, full_id: str) -> Memory:
        """The row as it is now; call inside the write transaction, then change that."""
        rows = self._select("m.id = ?", [full_id])
        if not rows:
            raise NotFound(f"no memory with id {full_id!r}")
        return rows[0]

    def _update(self, memory_id: str, action: str, change: Callable[[Memory], Memory]) -> Memory:
        """Apply `change` to the fresh row inside the operation's write transaction."""
        full = self.resolve(memory_id)
        with self.operation(action, f"{action} {full}"):
            before = self._fresh(full)
            after = change(before)
            if _memory_dict(after) == _memory_dict(before):
                return before
            return self._write(before, replace(after, updated_at=self.clock()), action)

    def set_fields(self, memory_id: str, action: str, **changes) -> Memory:
        """Change fields of a memory as one recorded `action` (pin, forget, dream's dedup...)."""
        return self._update(memory_id, action, lambda m: replace(m, **changes))

    def pin(self, memory_id: str) -> Memory:
        """Make a memory core: always recalled first."""
        return self.set_fields(memory_id, "pin", pinned=True, tier="core")

    def unpin(self, memory_id: str) -> Memory:
        """Unpin a memory (a core memory becomes archival); one undoable event. Returns the memory
        after the change. Raises NotFound / AmbiguousId."""
        return self._update(memory_id, "unpin", lambda m: replace(
            m, pinned=False, tier="archival" if m.tier == "core" else m.tier))

    def expire(self, memory_id: str, at: str | None = None) -> Memory:
        """Set when a memory expires (`at`, an ISO timestamp; now by default); one undoable event.
        Returns the memory after the change. Raises NotFound / AmbiguousId."""
        return self.set_fields(memory_id, "expire", expires_at=at or self.clock())

    def forget(self, memory_id: str) -> Memory:
        """Forget a memory (soft delete: hidden everywhere, `restore` or `undo` brings it back;
        `purge` erases it). Returns the memory after the change. Raises NotFound / AmbiguousId."""
        now = self.clock()
        return self._update(memory_id, "forget", lambda m: m if m.forgotten_at else replace(m, forgotten_at=now))

    def delete(self, memory_id: str, action: str = "delete") -> Memory:
        """Remove a memory's row and vector (dream --purge). The event keeps both, so undo restores it."""
        full = self.resolve(memory_id)
        with self.operation(action, f"{action} {full}"):
            m = self._fresh(full)
            seq = self._seq(m.id)
            vec = self._get_vec(seq)
            self._del_vec(seq)
            self.conn.execute("DELETE FROM memories WHERE seq = ?", (seq,))
            self._record(m.id, action, m, None, vec)
        return m

    def restore(self, memory_id: str) -> Memory:
        """Bring back a forgotten, expired or merged memory."""
        now = self.clock()
        return self._update(memory_id, "restore", lambda m: replace(
            m, forgotten_at=None, merged_into=None, expires_at=None if m.is_expired(now) else m.expires_at))

    def supersede(self, old_id: str, new_id: str, at: str | None = None) -> Memory:
        """Mark `old_id` as no longer true from `at`, replaced by `new_id`. It stays findable with --as-of."""
        old_full, new_full = self.resolve(old_id), self.resolve(new_id)
        if old_full == new_full:
            raise UsageError("a memory cannot supersede itself")
        with self.operation("supersede", f"{new_full} supersedes {old_full}"):
            old, new = self._fresh(old_full), self._fresh(new_full)
            at = at or new.valid_from or new.created_at
            if new.valid_from is None:
                self._write(new, replace(new, valid_from=at, updated_at=self.clock()), "supersede")
            return self._write(old, replace(old, valid_to=at, superseded_by=new.id, updated_at=self.clock()),
                               "supersede")

    def purge(self, ids: Iterable[str]) -> dict[str, Any]:
        """Erase memories for good: their text and vector leave every table.

        The rows go from `memories`, the FTS index (merged, so no segment keeps the words) and
        vec0 (the vector is zeroed before its row is deleted); every event about them keeps
        only its action and time, and the summaries of operations that quoted the text are
        replaced. `secure_delete` zeroes the freed space, VACUUM rewrites the file from the live
        rows (older free space may hold copies) and a WAL checkpoint (TRUNCATE) empties the -wal;
        `checkpointed` is False when another process held a read open so the -wal could not be
        emptied (run it again when pmem is idle). A purge killed after its commit leaves a
        `purge_pending` setting, and the next MemoryStore opened on the file finishes the rewrite.
        A purge is recorded as an operation that `undo` cannot revert and skips. Memories derived from
        these (extracted facts, merges) are separate memories, listed under `derived`, and
        backups are separate files (pmem.backup.purge_backups)."""
        wanted: list[str] = []
        for raw in ids:
            try:
                full = self.resolve(raw)
            except NotFound:  # gone from memories (undone, dream --purge) but still in events
                full = raw.strip().lower()
                if not self.conn.execute("SELECT 1 FROM events WHERE memory_id = ? LIMIT 1", (full,)).fetchone():
                    raise
            if full not in wanted:
                wanted.append(full)
        if not wanted:
            raise UsageError("purge needs at least one memory id")
        if self.conn.in_transaction:
            raise RuntimeError("purge runs its own transaction (its checkpoint cannot run inside one)")
        secure = self.conn.execute("PRAGMA secure_delete").fetchone()[0]
        self.conn.execute("PRAGMA secure_delete = ON")
        try:
            with self.operation("purge", f"purge {len(wanted)} memories"):
                texts: set[str] = set()
                for mid in wanted:
                    row = self.conn.execute("SELECT seq, text FROM memories WHERE id = ?", (mid,)).fetchone()
                    for before, after in self.conn.execute(
                            "SELECT before, after FROM events WHERE memory_id = ?", (mid,)):
                        texts.update(json.loads(state)["text"] for state in (before, after) if state)
                    if row is not None:
                        texts.add(row[1])
                        if self._has_vec_table():
                            dim = int(self.vector_model()[1] or 0)
                            self.conn.execute("UPDATE memory_vec SET embedding = ? WHERE seq = ?",
                                              (serialize([0.0] * dim), row[0]))
                            self._del_vec(row[0])
                        self.conn.execute("DELETE FROM memories WHERE seq = ?", (row[0],))
                    ops = [r[0] for r in self.conn.execute(
                        "SELECT DISTINCT op_id FROM events WHERE memory_id = ?", (mid,))]
                    self.conn.execute("UPDATE events SET before = NULL, after = NULL, before_vec = NULL "
                                      "WHERE memory_id = ?", (mid,))
                    for op_id, kind, summary in self.conn.execute(
                            "SELECT id, kind, summary FROM operations WHERE id IN (SELECT value FROM json_each(?))",
                            (json.dumps(ops),)).fetchall():
                        if any(_quotes(summary, t) for t in texts):
                            self.conn.execute("UPDATE operations SET summary = ? WHERE id = ?",
                                              (f"{kind} (text purged)", op_id))
                    self._record(mid, "purge", None, None)
                self.conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
                self._set_setting("purge_pending", self.clock())
                derived = [r[0] for r in self.conn.execute(
                    "SELECT m.id FROM memories m, json_each(m.derived_from) d "
                    "WHERE d.value IN (SELECT value FROM json_each(?))", (json.dumps(wanted),))]
            checkpointed = self._finish_purge()
        finally:
            self.conn.execute(f"PRAGMA secure_delete = {int(secure)}")
        return {"purged": wanted, "derived": sorted(set(derived)), "checkpointed": checkpointed}

    def _finish_purge(self) -> bool:
        """Rewrite the file after a purge: space freed before secure_delete was on (older pmem,
        FTS merges) may still hold copies of the text, and VACUUM rebuilds every page from the
        live rows; then empty the -wal. Returns whether the -wal could be emptied.

        The rewritten pages are checkpointed into the file before the setting goes: a kill
        between the two left the old pages, text and all, in the file until some later
        checkpoint (kill9.py: 6 of 30 killed purges once new stores had 8 KB pages, whose
        VACUUM no longer filled the 1,000 pages that made SQLite checkpoint on its own)."""
        self._vacuum(in_memory=True)  # no temporary file ever holds the purged text
        self.checkpoint()
        with self.transaction():
            self.conn.execute("DELETE FROM settings WHERE key = 'purge_pending'")
        return self.checkpoint()

    def copy_to(self, path: str | Path) -> None:
        """Write a consistent, self-contained copy of the database to `path` (an existing empty
        file) with SQLite's online backup; the copy uses a rollback journal, not WAL."""
        dest = db.driver().connect(str(path), isolation_level=None)
        try:
            self.conn.backup(dest)
            dest.execute("PRAGMA journal_mode = DELETE")
        finally:
            dest.close()

    def ids_in_history(self, ids: Iterable[str]) -> builtins.list[str]:
        """Those of `ids` that a memory or an event of this database still names."""
        return [i for i in ids if self.conn.execute(
            "SELECT 1 FROM memories WHERE id = ? UNION ALL SELECT 1 FROM events WHERE memory_id = ?",
            (i, i)).fetchone()]

    def use_rollback_journal(self) -> None:
        """Leave WAL mode, so the file stands alone again (as backups are)."""
        self.conn.execute("PRAGMA journal_mode = DELETE")

    def space(self) -> dict[str, int]:
        """The file's size and how much of it is free pages (reclaimable by VACUUM)."""
        page = self.conn.execute("PRAGMA page_size").fetchone()[0]
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return {"bytes": page * pages, "free_bytes": page * free}

    def _vacuum(self, in_memory: bool) -> None:
        """VACUUM, its temporary copy in memory or in SQLite's temporary files."""
        previous = self.conn.execute("PRAGMA temp_store").fetchone()[0]
        self.conn.execute(f"PRAGMA temp_store = {'MEMORY' if in_memory else 'DEFAULT'}")
        try:
            self.conn.execute("VACUUM")
        except self._sqlite_errors as exc:
            raise self._db_error(exc) from None
        finally:
            self.conn.execute(f"PRAGMA temp_store = {int(previous)}")

    def upkeep(self, min_free: float = UPKEEP_MIN_FREE, progress: Progress | None = None) -> dict[str, Any]:
        """Merge the keyword index into one segment (merge_keyword_index), then give back free
        space: when at least `min_free` of the file is free pages (a dream that merged and purged,
        a migration that rebuilt a table), VACUUM and empty the -wal. Atomic like any transaction
        (kill -9 leaves the old file). Other writers wait out SQLite's busy timeout and then fail
        with "locked", and a VACUUM of a large file takes longer than that, so it runs where
        nobody waits: at the end of `pmem dream --apply`.
        Returns bytes before and after, whether VACUUM ran, and the index's segments before and
        after. `progress`: the merge's (merge_keyword_index)."""
        segments = self.merge_keyword_index(progress=progress)
        before = self.space()
        if before["bytes"] == 0 or before["free_bytes"] < min_free * before["bytes"]:
            return {"ran": False, "bytes_before": before["bytes"], "bytes_after": before["bytes"],
                    "free_before": before["free_bytes"], "index_segments": segments}
        self._vacuum(in_memory=False)  # its temporary copy on disk: it can be as large as the file
        self.checkpoint()
        return {"ran": True, "bytes_before": before["bytes"], "bytes_after": self.space()["bytes"],
                "free_before": before["free_bytes"], "index_segments": segments}

    def keyword_segments(self) -> int:
        """How many segments (b-trees) the keyword index is in; each write adds one, and FTS5
        merges them only in fours."""
        try:
            return self.conn.execute("SELECT count(DISTINCT segid) FROM memories_fts_idx").fetchone()[0]
        except self._sqlite_errors as exc:
            raise self._db_error(exc) from None

    def merge_keyword_index(self, step: int = MERGE_STEP, pause: float = MERGE_PAUSE,
                            progress: Progress | None = None) -> tuple[int, int]:
        """Merge the keyword index into one segment, `step` pages a transaction with `pause`
        seconds between two, so that another writer waits about one step (SQLite's busy handler
        sleeps up to 0.1 s between its tries: without the pause it slept through every gap and
        could wait for the whole merge, 5.9 s at 1,000,000 memories, past its 5 s timeout) and
        kill -9 leaves a whole index. Inside a transaction already open it is one transaction.

        A query reads every segment's list of rows for each of its words, and BM25 counts each
        word's rows first: on one segment the keyword side took 0.84-0.85 of the time at 100,000
        memories (5 segments) and 0.75 at 1,000,000 (12) (benchmarks/README.md). `progress` is
        called with (pages written, about how many there are: the index's own). Returns the
        segments before and after."""
        import time

        before = self.keyword_segments()
        if before < 2:
            return before, before
        total = done = 0
        if progress:
            total = self.conn.execute("SELECT count(*) FROM memories_fts_data").fetchone()[0]
            progress(0, total)
        # A negative step puts every segment on one level and starts merging them; positive
        # steps go on with that merge (and leave a segment written meanwhile for later) until a
        # step changes nothing (FTS5's documented way to optimize incrementally).
        sql = "INSERT INTO memories_fts(memories_fts, rank) VALUES ('merge', ?)"
        pages = -abs(int(step))
        while True:
            changes = self.conn.total_changes
            with self.transaction():
                try:
                    self.conn.execute(sql, (pages,))
                except self._sqlite_errors as exc:
                    raise self._db_error(exc) from None
            if self.conn.total_changes - changes < 2:
                break
            if progress:
                done = min(done + abs(pages), total - 1)  # the last step says when it is done
                progress(done, total)
            pages = abs(pages)
            time.sleep(pause)
        if progress:
            progress(total, total)
        return before, self.keyword_segments()

    def checkpoint(self, attempts: int = 5) -> bool:
        """Copy the -wal into the database file and truncate it to 0 bytes; False if readers kept it."""
        import time

        for attempt in range(attempts):
            try:
                busy = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except self._sqlite_errors:
                busy = 1
            if not busy:
                return True
            time.sleep(0.05 * (attempt + 1))
        return False

    # -- history and undo -----------------------------------------------------------------

    def _event(self, row) -> Event:
        return Event(seq=row[0], op_id=row[1], memory_id=row[2], action=row[3],
                     before=json.loads(row[4]) if row[4] else None,
                     after=json.loads(row[5]) if row[5] else None, at=row[6])

    def history(self, memory_id: str) -> builtins.list[tuple[Event, Operation]]:
        """Every event of one memory with its operation, oldest first. Takes an id prefix, or the full
        id of a memory that no longer exists (an undone add leaves its history)."""
        try:
            full = self.resolve(memory_id)
        except NotFound:
            full = memory_id.strip().lower()  # an undone add leaves only its history
        rows = self.conn.execute(
            "SELECT e.seq, e.op_id, e.memory_id, e.action, e.before, e.after, e.at, "
            "o.id, o.kind, o.summary, o.at, o.undone_at FROM events e JOIN operations o ON o.id = e.op_id "
            "WHERE e.memory_id = ? ORDER BY e.seq", (full,)).fetchall()
        if not rows:
            raise NotFound(f"no memory with id {memory_id!r}")
        return [(self._event(r[:7]), Operation(*r[7:])) for r in rows]

    def operations(self, limit: int = 20) -> builtins.list[Operation]:
        """The latest `limit` operations, newest first, with their event counts."""
        rows = self.conn.execute(
            "SELECT o.id, o.kind, o.summary, o.at, o.undone_at, "
            "(SELECT count(*) FROM events e WHERE e.op_id = o.id) FROM operations o "
            "ORDER BY o.rowid DESC LIMIT ?", (limit,)).fetchall()
        return [Operation(*r) for r in rows]

    def get_operation(self, op_id: str) -> Operation | None:
        """The operation with this exact id, or None."""
        row = self.conn.execute(
            "SELECT o.id, o.kind, o.summary, o.at, o.undone_at, "
            "(SELECT count(*) FROM events e WHERE e.op_id = o.id) FROM operations o WHERE o.id = ?",
            (op_id,)).fetchone()
        return Operation(*row) if row else None

    def events(self, op_id: str) -> builtins.list[Event]:
        """The events of one operation, in the order they were recorded."""
        rows = self.conn.execute("SELECT seq, op_id, memory_id, action, before, after, at FROM events "
                                 "WHERE op_id = ? ORDER BY seq", (op_id,)).fetchall()
        return [self._event(r) for r in rows]

    def undo(self, op_id: str | None = None) -> Operation:
        """Revert the last operation not yet undone (or `op_id`, if it is that one), exactly.

        The operation is chosen and claimed inside the write transaction, so two concurrent
        undos revert two operations (or the second finds nothing), never one twice."""
        with self.transaction():
            return self._undo_locked(op_id)

    def _undo_locked(self, op_id: str | None) -> Operation:
        row = self.conn.execute("SELECT id, kind, summary, at, undone_at FROM operations "
                                "WHERE undone_at IS NULL AND kind != 'purge' "
                                "ORDER BY rowid DESC LIMIT 1").fetchone()
        if row is None:
            raise NotFound("nothing to undo")
        if op_id is not None and row[0] != op_id:
            raise UsageError(f"operation {op_id} is not the latest; undo goes back one operation at a time")
        op = Operation(*row)
        rows = self.conn.execute("SELECT seq, op_id, memory_id, action, before, after, at, before_vec "
                                 "FROM events WHERE op_id = ? ORDER BY seq DESC", (op.id,)).fetchall()
        # Old events kept no vector: re-embed those texts (rare; the lock is held meanwhile).
        needs_vec = [json.loads(r[4]) for r in rows if r[4] and r[7] is None and r[5]
                     and json.loads(r[4])["text"] != json.loads(r[5])["text"]]
        blobs = dict(zip([d["text"] for d in needs_vec], self.embed([d["text"] for d in needs_vec]))) \
            if needs_vec else {}
        for r in rows:
            mid, before_json, before_vec = r[2], r[4], r[7]
            exists = self.conn.execute("SELECT seq FROM memories WHERE id = ?", (mid,)).fetchone()
            if before_json is None:  # the operation created it
                if exists:
                    self._del_vec(exists[0])
                    self.conn.execute("DELETE FROM memories WHERE seq = ?", (exists[0],))
                continue
            before = Memory(**json.loads(before_json))
            if exists and not {"thread", "thread_pos"} <= json.loads(before_json).keys():
                # an event older than threads: the memory keeps the thread the migration gave it
                now = self._select("m.id = ?", [mid])[0]
                before = replace(before, thread=now.thread, thread_pos=now.thread_pos)
            if exists:
                sets = ", ".join(f"{c} = ?" for c in MEMORY_COLUMNS if c != "id")
                self.conn.execute(f"UPDATE memories SET {sets} WHERE id = ?", (*before.to_row()[1:], mid))
                seq = exists[0]
            else:
                self.conn.execute(f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES "
                                  f"({', '.join('?' * len(MEMORY_COLUMNS))})", before.to_row())
                seq = self._seq(mid)
            blob = before_vec if before_vec is not None else blobs.get(before.text)
            if blob is not None and (self.vector_model()[1] or 0) * 4 == len(blob):
                self._put_vec(seq, blob, before)
            else:
                self._sync_vec(seq, before)
        if rows:
            self._pull_dream_mark(min(r[0] for r in rows) - 1)
        self.conn.execute("UPDATE operations SET undone_at = ? WHERE id = ?", (self.clock(), op.id))
        op.undone_at = self.clock()
        op.events = len(rows)
        return op

    # -- maintenance ----------------------------------------------------------------------

    def reindex(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Re-embed every memory with the configured model (after changing models).

        Resumable: an interrupted reindex to the same model continues where it stopped (see
        `_stage_reindex`). The stored vectors change in one transaction at the end, so searches
        never mix two models' vectors.

        The target is the configured model, or the default when none is configured (a store
        still on an earlier default's model moves to the current one)."""
        if not self._embedder_given:
            self._embedder = None
        self._reindex_target = True
        try:
            return self._reindex(progress, batch)
        finally:
            self._reindex_target = False
            if not self._embedder_given and self._embedder is not None \
                    and self.vector_model()[0] not in (None, self._embedder.name):
                self._embedder = None  # interrupted: the stored vectors' model answers again

    def _reindex(self, progress: Progress | None, batch: int) -> int:
        rows, blobs = self._stage_reindex(progress, batch)
        with self.transaction():
            self.conn.execute("DROP TABLE IF EXISTS memory_vec")
            self.conn.execute("DROP TABLE IF EXISTS memory_bits")
            self.conn.execute("DELETE FROM counts WHERE key = 'vectors'")
            self.conn.execute("DELETE FROM settings WHERE key IN ('bit_lo', 'bit_hi')")
            self.conn.execute("DELETE FROM settings WHERE key IN ('embed_model', 'embed_dim')")
            self._bits = None
            self._ensure_vec_table()
            by_seq = self.memories_by_seq(seq for seq, _ in rows)
            for (seq, _), blob in zip(rows, blobs):
                self._put_vec(seq, blob, by_seq[seq])
            self._end_reindex()
        return len(rows)

    def stats(self) -> dict[str, Any]:
        """Counts of the store, from the kept counts and indexes (no scan of the tables)."""
        now = self.clock()
        q = self.conn.execute
        mem: dict[tuple[str, int, int, int], int] = {}
        for key, n in q("SELECT key, n FROM counts WHERE key >= 'mem:' AND key < 'mem;'"):
            tier, pinned, forgotten, merged = key[4:].split(":")
            mem[(tier, int(pinned), int(forgotten), int(merged))] = n
        model, dim = self.vector_model()
        return {
            "path": str(self.path),
            "size_bytes": self.path.stat().st_size if self.path.exists() else 0,
            "schema_version": migrations.schema_version(self.conn),
            "memories": sum(mem.values()),
            "active": self.count(Filter(tiers=TIERS)),
            "by_tier": {t: sum(n for (tier, _, f, m), n in mem.items() if tier == t and not f and not m)
                        for t in TIERS},
            "pinned": sum(n for (_, p, f, _m), n in mem.items() if p and not f),
            "expired": q("SELECT count(*) FROM memories WHERE expires_at <= ? AND forgotten_at IS NULL",
                         (now,)).fetchone()[0],
            "superseded": q("SELECT count(*) FROM memories WHERE valid_to <= ?", (now,)).fetchone()[0],
            "merged": sum(n for (_, _p, _f, m), n in mem.items() if m),
            "forgotten": sum(n for (_, _p, f, _m), n in mem.items() if f),
            "operations": self.counter("operations"),
            "events": self.counter("events"),
            "embed_model": model,
            "embed_dim": dim,
            "tags": dict(q("SELECT substr(key, 5), n FROM counts WHERE key >= 'tag:' AND key < 'tag;' "
                           "AND n > 0 ORDER BY n DESC, key LIMIT 20").fetchall()),
            "languages": self.languages(),
        }

    # -- added for pmem.dream (kept at the end of the class: other branches edit above) ----------

    # -- a resumable reindex: vectors staged batch by batch (kept apart from the others' hunks) ----

    def _stage_reindex(self, progress: Progress | None,
                       batch: int) -> tuple[builtins.list[tuple[int, None]], builtins.list[bytes]]:
        """Embed every memory with the configured model into the staging table `reindex_vec`,
        one committed transaction per batch, skipping the memories staged by an earlier,
        interrupted run for the same model (settings reindex_model / reindex_dim); staging for
        another model is thrown away. Triggers drop a staged vector when its memory is deleted or
        its text changes, so what is staged always matches the text. Returns (seq, None) rows
        and their vectors, in seq order, for the final swap."""
        e = self.embedder
        with self.transaction():
            if (self.setting("reindex_model"), self.setting("reindex_dim")) != (e.name, str(e.dim)):
                self._end_reindex()
                self.conn.execute("CREATE TABLE reindex_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
                self.conn.execute("CREATE TRIGGER reindex_vec_gone AFTER DELETE ON memories "
                                  "BEGIN DELETE FROM reindex_vec WHERE seq = old.seq; END")
                self.conn.execute("CREATE TRIGGER reindex_vec_text AFTER UPDATE OF text ON memories "
                                  "WHEN old.text IS NOT new.text "
                                  "BEGIN DELETE FROM reindex_vec WHERE seq = old.seq; END")
                self._set_setting("reindex_model", e.name)
                self._set_setting("reindex_dim", str(e.dim))
        total = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        done = self.conn.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
        if progress and done:
            progress(done, total)  # resumed
        while True:
            todo = self.conn.execute(
                "SELECT m.seq, m.text FROM memories m WHERE NOT EXISTS "
                "(SELECT 1 FROM reindex_vec r WHERE r.seq = m.seq) ORDER BY m.seq LIMIT ?", (batch,)).fetchall()
            if not todo:
                break
            vectors = e.embed([t for _, t in todo])
            with self.transaction():  # only where the text is still the one embedded
                self.conn.executemany(
                    "INSERT OR REPLACE INTO reindex_vec (seq, embedding) SELECT ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM memories WHERE seq = ? AND text = ?)",
                    [(seq, serialize(v), seq, text) for (seq, text), v in zip(todo, vectors)])
            total = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
            done = self.conn.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
            if progress:
                progress(min(done, total), total)
        staged = self.conn.execute("SELECT m.seq, r.embedding FROM memories m JOIN reindex_vec r ON r.seq = m.seq "
                                   "ORDER BY m.seq").fetchall()
        return [(seq, None) for seq, _ in staged], [blob for _, blob in staged]

    def _end_reindex(self) -> None:
        """Drop the staging of a reindex (finished, or for another model)."""
        self.conn.execute("DROP TRIGGER IF EXISTS reindex_vec_gone")
        self.conn.execute("DROP TRIGGER IF EXISTS reindex_vec_text")
        self.conn.execute("DROP TABLE IF EXISTS reindex_vec")
        self.conn.execute("DELETE FROM settings WHERE key IN ('reindex_model', 'reindex_dim')")

    def reindex_progress(self) -> tuple[str, int, int] | None:
        """(target model, memories staged, memories) of an interrupted reindex, else None."""
        model = self.setting("reindex_model")
        if model is None or not self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'reindex_vec'").fetchone():
            return None
        staged = self.conn.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
        return model, staged, self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]

    def thresholds(self) -> "Thresholds":
        """The cosine thresholds of the model the stored vectors come from (the configured one
        before the first vector), with the user's dedup/merge settings (pmem.thresholds)."""
        from .thresholds import effective

        return effective(self.vector_model()[0] or self.config.embed_model, self.config)

    # -- what a dream reads on a large store (pmem.dream: only what changed) -----------------

    def event_mark(self) -> int:
        """The number of the newest event: any later change to a memory gets a larger one."""
        return self.conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]

    def changed_since(self, event: int, fields: Sequence[str | tuple[str, ...]] | None = None) -> builtins.list[Memory]:
        """Live memories (not forgotten, not merged) that an event after `event` touched: stored,
        edited, restored, or changed by a dream. With `fields` (names of Memory's fields, or a
        tuple of names for the first of them that is set), only those that an event stored or
        changed one of these of."""
        where, params = Filter.live().where(self.clock())
        events, extra = "SELECT memory_id FROM events WHERE seq > ?", [int(event)]
        if fields:
            names = [(f,) if isinstance(f, str) else f for f in fields]
            paths = [f"$.{n}" for group in names for n in group]

            def values(side: str) -> str:  # json_array of each group's first value that is set
                calls = [[f"json_extract({side}, ?)"] * len(group) for group in names]
                return "json_array(" + ", ".join(c[0] if len(c) == 1 else f"coalesce({', '.join(c)})"
                                                 for c in calls) + ")"

            events += f" AND (before IS NULL OR after IS NULL OR {values('before')} IS NOT {values('after')})"
            extra += paths + paths
        return self._select(f"{where} AND m.id IN ({events})", [*params, *extra], "ORDER BY m.seq")

    def expired_live(self, now: str) -> builtins.list[Memory]:
        """Live memories whose expires_at has passed by `now` (from the index on expires_at)."""
        where, params = Filter.live().where(now)
        return self._select(f"{where} AND m.expires_at IS NOT NULL AND m.expires_at <= ?", [*params, now],
                            "ORDER BY m.seq", "memories_expires")

    def facts_starting_with(self, words: Sequence[str], upto: int | None = None) -> builtins.list[Memory]:
        """Live memories outside the episodic tier (stored up to row `upto`) whose text begins
        with these words (the keyword index, with its stemming): the facts of one subject ("my
        car is ...")."""
        if not words:
            return []
        phrase = '^"' + " ".join(w.replace('"', '""') for w in words) + '"'
        where, params = Filter.live().where(self.clock())
        if upto is not None:
            where, params = f"{where} AND m.seq <= ?", [*params, int(upto)]
        return self._select(f"{where} AND m.tier != 'episodic' AND m.seq IN "
                            f"(SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?)",
                            [*params, f"text : {phrase}"], "ORDER BY m.seq")

    def vector_blocks(self, size: int = 16384, upto: int | None = None) -> Iterator[tuple[builtins.list[int], bytes]]:
        """Every stored vector of the store's dimension (of rows up to `upto`), `size` at a time
        in row order: (their seqs, the float32 vectors joined), so that a caller holds one block,
        not the store."""
        _, dim = self.vector_model()
        if not dim or not self._has_vec_table():
            return
        last = -1
        bound, upper = ("", ()) if upto is None else (" AND seq <= ?", (int(upto),))
        while True:
            rows = self.conn.execute(f"SELECT seq, embedding FROM memory_vec WHERE seq > ?{bound} "
                                     "ORDER BY seq LIMIT ?", (last, *upper, int(size))).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            rows = [r for r in rows if len(r[1]) == dim * 4]
            yield [r[0] for r in rows], b"".join(r[1] for r in rows)

    def live_after(self, seq: int, limit: int) -> builtins.list[tuple[int, Memory]]:
        """Up to `limit` live memories stored after row `seq`, in storage order, with their row
        numbers (a dream's first comparison of a large store goes through them in slices)."""
        where, params = Filter.live().where(self.clock())
        rows = self.conn.execute(f"SELECT m.seq, {_COLUMNS_SQL} FROM memories m WHERE {where} AND m.seq > ? "
                                 f"ORDER BY m.seq LIMIT ?", [*params, int(seq), int(limit)])
        return [(r[0], Memory.from_row(r[1:])) for r in rows]

    def count_live_after(self, seq: int) -> int:
        """How many live memories were stored after row `seq`."""
        where, params = Filter.live().where(self.clock())
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where} AND m.seq > ?",
                                 [*params, int(seq)]).fetchone()[0]

    def dream_mark(self) -> dict[str, Any] | None:
        """What the last finished dream had dealt with (pmem.dream): {"event": the newest event it
        had seen, and the dream's own keys}, or None (none recorded, or not in this form)."""
        value = self.setting("dream_mark")
        try:
            mark = json.loads(value) if value else None
        except ValueError:
            return None
        return mark if isinstance(mark, dict) and isinstance(mark.get("event"), int) else None

    def undone_count(self) -> int:
        """How many operations have been undone (a dream notes it when it plans)."""
        return self.conn.execute("SELECT count(*) FROM operations WHERE undone_at IS NOT NULL").fetchone()[0]

    def set_dream_mark(self, mark: dict[str, Any], undone: int | None = None) -> None:
        """Record `mark` (its "event" an event number), unless a mark of a later event is
        recorded already (another dream finished after this one planned). `undone`: how many
        operations had been undone when the dream planned; an undo since then put memories back
        without events, so the mark goes to before the first event of what it undid."""
        with self.transaction():
            mark = dict(mark)
            late = self.undone_count() - undone if undone is not None else 0
            if late > 0:
                row = self.conn.execute(
                    "SELECT min(e.seq) FROM events e WHERE e.op_id IN (SELECT id FROM operations "
                    "WHERE undone_at IS NOT NULL ORDER BY undone_at DESC, rowid ASC LIMIT ?)", (late,)).fetchone()
                if row[0] is not None:
                    mark["event"] = min(int(mark["event"]), row[0] - 1)
            current = self.dream_mark()
            if current is None or int(mark["event"]) >= int(current["event"]) or late > 0:
                self._set_setting("dream_mark", json.dumps(mark))

    def _pull_dream_mark(self, event: int) -> None:
        """An undo puts memories back without events of its own: the dream mark goes back to
        before the undone operation, so the next dream looks at what it changed again."""
        mark = self.dream_mark()
        if mark is not None and int(mark["event"]) > event:
            self._set_setting("dream_mark", json.dumps({**mark, "event": event}))

    def storage_order(self, ids: Iterable[str]) -> dict[str, int]:
        """The order memories were stored in, for breaking ties between equal `created_at`.

        Args:
            ids: memory ids (unknown ids are left out of the answer).

        Returns:
            id -> an integer that grows with insertion order (comparable only between memories
            of this store).
        """
        rows = self.conn.execute("SELECT id, seq FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                                 (json.dumps(list(ids)),)).fetchall()
        return {r[0]: r[1] for r in rows}

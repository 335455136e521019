"""Storage: the memories' rows, their indexes and their events over one connection.

It opens one connection and hands it to its parts: `vectors` (a VectorIndex), `keywords` (a
KeywordIndex) and `journal`; it reads memories, and it is the one place that writes a memory row
and tells the indexes and the journal (`_insert`, `_insert_many`, `_write`, `_delete`, `_revert`).
Writes happen inside `operation()`: one transaction, one row in `operations`, one event per
changed memory with its state before and after. What may be written, when and how, is the
service's (pmem.service.MemoryStore, the class users open): the verbs, undo, secret and duplicate
checks, and embedding before a write. Models are loaded only when a vector is needed.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from .. import paths, timeutil
from ..config import Config
from ..config import load as load_config
from ..errors import DatabaseError, NotFound, UsageError
from ..ranking.profile import DEFAULT
from ..records import MEMORY_COLUMNS, TIERS, Event, Memory, Operation
from . import erase, migrations
from .connection import Connection, Progress, token
from .dreamreads import DreamReads
from .filter import LIVE_SQL, Filter, estimate, is_live
from .journal import Journal, memory_dict
from .keywords import MERGE_PAUSE, MERGE_STEP, KeywordIndex
from .vectors import WHOLE_TIERS, VectorIndex

if TYPE_CHECKING:
    from ..models.cache import ModelCache
    from ..models.embed import Embedder

SIDE_READS_FROM = 10_000  # memories from which search reads its keyword side on a second connection
_INSERT_SQL = f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES ({', '.join('?' * len(MEMORY_COLUMNS))})"
_UPDATE_SQL = f"UPDATE memories SET {', '.join(f'{c} = ?' for c in MEMORY_COLUMNS if c != 'id')} WHERE id = ?"
_SORTS = {"created": "m.created_at", "updated": "m.updated_at", "accessed": "m.last_accessed_at",
          "id": "m.id", "expires": "m.expires_at"}


# Storage.questions: what may follow a question mark (stored texts are stripped); the marks
# themselves are the ranking profile's (pmem.ranking.profile: question_marks)
_CLOSING = " \t\r\n\"')]}»\u201d\u2019"


S = TypeVar("S", bound="Storage")


class Storage(DreamReads):
    """The memory database's storage: rows, indexes, events, transactions, raw ranks. Open
    pmem.service.MemoryStore, which is this with the verbs; it is cheap until a model is needed.

    `models`: where the models it loads are kept (pmem.models.cache.ModelCache; default: the
    process's own, shared by every store of the process)."""

    def __init__(self, path: str | Path | None = None, *, config: Config | None = None,
                 embedder: "Embedder | None" = None, clock: Callable[[], str] | None = None,
                 models: "ModelCache | None" = None):
        self.path = paths.db_path(path)
        self._config = config if config is not None else load_config()
        self.db = Connection(self.path, clock or timeutil.now_iso)
        self.vectors = VectorIndex(self.db, self._config, embedder, models)
        self.keywords = KeywordIndex(self.db)
        self.journal = Journal(self.db)
        self._side: Storage | None = None  # a second connection for reads on another thread
        self._side_lock = threading.Lock()
        try:
            migrations.migrate(self.conn)
        except self.db.errors as exc:
            self.conn.close()
            if "readonly" in str(exc):  # a migration is a write
                raise DatabaseError(f"database {self.path} was written by an older pmem and is read-only here: "
                                    f"open it once with write access to upgrade it") from None
            raise self.db.error(exc) from None
        if self.setting("purge_pending"):  # a purge was killed before it rewrote the file
            try:
                erase.finish_purge(self.db)
            except self.db.forgiven:
                pass  # busy or read-only: the next open tries again

    # -- the connection -------------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The settings this store and its vector index use (replaceable: `with_values`)."""
        return self._config

    @config.setter
    def config(self, value: Config) -> None:
        self._config = self.vectors.config = value

    @property
    def conn(self):
        """The SQLite connection itself (Connection.conn)."""
        return self.db.conn

    @conn.setter
    def conn(self, value) -> None:
        self.db.conn = value

    @property
    def clock(self) -> Callable[[], str]:
        """What "now" is for this store (tests set a fixed one)."""
        return self.db.clock

    @clock.setter
    def clock(self, value: Callable[[], str]) -> None:
        self.db.clock = value

    @property
    def exact_below(self) -> int:
        """Memories from which search approximates: the bit index, the keyword side's plans."""
        return self.db.exact_below

    @exact_below.setter
    def exact_below(self, value: int) -> None:
        self.db.exact_below = value

    def close(self) -> None:
        """Close the database connection; the store cannot be used afterwards."""
        with self._side_lock:
            if self._side is not None:
                self._side.close()
                self._side = None
        self.db.close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def side_reader(self: S) -> Iterator[S | None]:
        """A second store on the same file, for reads on another thread while this one works
        (search ranks its keyword side there while this connection ranks by meaning). None where
        that could not see what this connection sees or would not pay: in a transaction, in
        memory, below SIDE_READS_FROM memories, or while another thread holds it. Opened once,
        closed with this store."""
        if self.conn.in_transaction or str(self.path) == ":memory:" or not self._side_lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._side is None and estimate(self.db, Filter.everything()) >= SIDE_READS_FROM:
                try:
                    self._side = type(self)(self.path, config=self.config, clock=self.clock,
                                            models=self.vectors.models)
                except self.db.forgiven:
                    pass  # busy, out of file handles...: this search stays on one connection
            if self._side is not None:  # it ranks as this store does, now
                self._side.clock, self._side.exact_below = self.clock, self.exact_below
            yield self._side  # type: ignore[misc]  # type(self) opened it
        finally:
            self._side_lock.release()

    def setting(self, key: str) -> str | None:
        """The value stored under `key` in the database's own settings table (the vector model and
        dimension, the keyword window), or None when unset. Not config.toml: see `pmem.config`."""
        return self.db.setting(key)

    def set_setting(self, key: str, value: str) -> None:
        """Keep `value` under `key` in the database's settings table (an importer's marks of the
        files it read: pmem.integrations.importers.discover.FileMarks). Not undone by `pmem undo`."""
        with self.transaction():
            self.db.set_setting(key, value)

    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT, or join the transaction already open."""
        return self.db.transaction()

    def busy_wait(self, seconds: float):
        """Inside, wait at most `seconds` for another process's write lock: an agent's call has a
        deadline."""
        return self.db.busy_wait(seconds)

    def snapshot(self):
        """One read transaction: every read inside sees the store as it was at the first."""
        return self.db.snapshot()

    def operation(self, kind: str, summary: str = "", op_id: str | None = None):
        """Group writes into one undoable operation (Journal.operation)."""
        return self.journal.operation(kind, summary, op_id)

    def checkpoint(self, attempts: int = 5) -> bool:
        """Copy the -wal into the database file and truncate it to 0 bytes; False if readers kept it."""
        return self.db.checkpoint(attempts)

    def counter(self, key: str) -> int:
        """A count kept by triggers: 'vectors', 'events', 'operations', 'tag:NAME', 'mem:...'."""
        return self.db.counter(key)

    def vector_model(self) -> tuple[str | None, int | None]:
        """The model and dimension the stored vectors come from (None before the first)."""
        return self.vectors.model()

    # -- reading --------------------------------------------------------------------------

    def resolve(self, prefix: str, min_prefix: int = 1) -> str:
        """A full id from a unique prefix, like git; at least `min_prefix` characters of it
        (SAFE_PREFIX for agents and destructive verbs) unless it is a whole id."""
        return self.db.resolve(prefix, min_prefix)

    def get(self, memory_id: str) -> Memory:
        """The memory whose id is `memory_id` or starts with it, in any state.

        Raises NotFound when no id matches, AmbiguousId when several do."""
        return self.db.select("m.id = ?", [self.resolve(memory_id)])[0]

    def get_many(self, ids: Iterable[str]) -> list[Memory]:
        """The memories with these full ids, in the order given; unknown ids are left out."""
        ids = list(ids)
        found = {m.id: m for m in self.db.select("m.id IN (SELECT value FROM json_each(?))", [json.dumps(ids)])}
        return [found[i] for i in ids if i in found]

    def memories_by_seq(self, seqs: Iterable[int]) -> dict[int, Memory]:
        """Memories by their row number (search results carry seqs)."""
        return self.db.by_seq(seqs)

    def questions(self, seqs: Iterable[int], marks: Sequence[str] = DEFAULT.question_marks) -> set[int]:
        """Which of these memories are a question themselves: the text ends with a question mark
        (?, the full-width ？ or the Arabic ؟), closing quotes and brackets aside. One read, by
        row number, of each text's last characters only (pmem.search.asking)."""
        wanted = list(seqs)
        if not wanted:
            return set()
        rows = self.conn.execute("SELECT seq, substr(text, -8) FROM memories"
                                 " WHERE seq IN (SELECT value FROM json_each(?))", (json.dumps(wanted),)).fetchall()
        return {seq for seq, end in rows if end.rstrip(_CLOSING).endswith(tuple(marks))}

    def existing_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of these exact ids are stored (one query, for imports and id allocation)."""
        return self.db.existing_ids(ids)

    def storage_order(self, ids: Iterable[str]) -> dict[str, int]:
        """id -> an integer that grows with insertion order (the row's seq), for breaking ties
        between equal `created_at`; unknown ids are left out."""
        rows = self.conn.execute("SELECT id, seq FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                                 (json.dumps(list(ids)),)).fetchall()
        return {r[0]: r[1] for r in rows}

    def list_memories(self, flt: Filter | None = None, *, sort: str = "created", reverse: bool = False,
                      limit: int | None = 50, offset: int = 0) -> list[Memory]:
        """Memories passing `flt` (default: the active core and archival ones), newest first.

        Args: `sort` is created, updated, accessed, expires or id; `reverse` flips the order; `limit` None
        means all. Never-accessed memories sort as the oldest access (last, newest first), and
        memories that never expire after every date (last, soonest first). Raises UsageError for an
        unknown sort or tier. Each order walks an index, so a page reads only what it shows."""
        flt = flt or Filter()
        where, params = flt.where(self.clock())
        order = _SORTS.get(sort)
        if order is None:
            raise UsageError(f"unknown sort {sort!r}: use created, updated, accessed, expires or id")
        direction = "ASC" if (sort in ("id", "expires")) != reverse else "DESC"
        if sort == "expires":
            return self._by_expiry(where, params, direction, limit, offset)
        tail = f"ORDER BY {order} {direction}, m.seq {direction}"
        if limit is not None:
            tail += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        # The core tier alone (recall lists it on every call) is read from its own index; without
        # statistics SQLite would walk every memory in date order instead (docs/decisions/0026-scale-sixth-round.md).
        whole = len(set(flt.tiers)) == 1 and flt.tiers[0] in WHOLE_TIERS and flt.ids is None
        return self.db.select(where, params, tail, f"memories_{flt.tiers[0]}" if whole else "")

    def _by_expiry(self, where: str, params: list[Any], direction: str, limit: int | None,
                   offset: int) -> list[Memory]:
        """`list_memories(sort="expires")`: the memories with an expiry from their partial index
        (memories_expires), then those without, in storage order; reversed, the other way round.
        (SQLite puts NULL first in ascending order: the never-expiring came before the soonest.)"""
        parts = [("m.expires_at IS NOT NULL", f"m.expires_at {direction}, m.seq {direction}"),
                 ("m.expires_at IS NULL", f"m.seq {direction}")]
        if direction == "DESC":
            parts.reverse()
        out: list[Memory] = []
        for clause, order in parts:
            if limit is not None and len(out) >= limit:
                break
            part = f"{where} AND {clause}"
            rows = self.db.select(part, params, f"ORDER BY {order} LIMIT "
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
            base = estimate(self.db, flt)
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

    def iter_all(self, batch: int = 1000) -> Iterator[Memory]:
        """Every memory in any state, in storage order, read `batch` rows at a time."""
        last = 0
        while True:
            rows = self.db.rows("m.seq > ?", [last], f"ORDER BY m.seq LIMIT {int(batch)}")
            if not rows:
                return
            for _, m in rows:
                yield m
            last = rows[-1][0]

    def iter_list(self, flt: Filter | None = None, batch: int = 1000) -> Iterator[Memory]:
        """The memories passing `flt`, oldest first (created_at, then storage order:
        list_memories()'s `reverse=True`), read `batch` rows at a time along the date index:
        constant memory however many there are (`pmem export --active` of 1,000,000 memories)."""
        flt = flt or Filter()
        where, params = flt.where(self.clock())
        last: tuple[str, int] = ("", 0)
        while True:
            rows = self.db.rows(f"{where} AND (m.created_at, m.seq) > (?, ?)", [*params, *last],
                                f"ORDER BY m.created_at, m.seq LIMIT {int(batch)}")
            if not rows:
                return
            yield from (m for _, m in rows)
            last = (rows[-1][1].created_at, rows[-1][0])

    def touch(self, ids: Iterable[str], *, wait: bool = True) -> bool:
        """Count an access (recall, show). Not an event: reading changes no memory. With
        `wait=False` it gives up at once while another process holds the write lock (an agent
        hook must not wait on a writer). True when the accesses were counted."""
        ids = list(ids)
        if not ids:
            return True
        try:
            with self.db.busy_wait(0) if not wait else nullcontext(), self.transaction():
                self.conn.execute(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? "
                    "WHERE id IN (SELECT value FROM json_each(?))", (self.clock(), json.dumps(ids)))
        except self.db.forgiven:
            return False  # a busy or read-only database must not fail a read
        return True

    def find_exact(self, text: str) -> Memory | None:
        """The oldest live (not forgotten, not merged) memory whose text is exactly `text` (stripped),
        or None."""
        text = text.strip()
        rows = self.db.select("length(m.text) = length(?) AND substr(m.text, 1, 32) = substr(?, 1, 32) "
                              f"AND m.text = ? AND {LIVE_SQL.format(a='m')}",
                              [text, text, text], "ORDER BY m.seq LIMIT 1")  # memories_text_start (m011)
        return rows[0] if rows else None

    def thread_neighbours(self, memory: Memory, before: int = 1, after: int = 1,
                          flt: Filter | None = None) -> tuple[list[Memory], list[Memory]]:
        """Up to `before` and `after` members of `memory`'s thread next to it that pass `flt`
        (default: active ones), each list in thread order. ([], []) for a memory with no thread."""
        if memory.thread is None or (before <= 0 and after <= 0):
            return [], []
        seq = self.db.seq(memory.id)
        where, params = (flt or Filter(tiers=TIERS)).where(self.clock())
        key = [memory.thread, memory.thread_pos, seq]
        sides: list[list[Memory]] = []
        for count, op, order in ((before, "<", "DESC"), (after, ">", "ASC")):
            if count <= 0:
                sides.append([])
                continue
            sides.append(self.db.select(f"m.thread = ? AND (m.thread_pos, m.seq) {op} (?, ?) AND {where}",
                                        [*key, *params],
                                        f"ORDER BY m.thread_pos {order}, m.seq {order} LIMIT {int(count)}"))
        return sides[0][::-1], sides[1]

    # -- what a dream reads on a large store: DreamReads (dreamreads.py), and --------------

    def event_mark(self) -> int:
        """The number of the newest event: any later change to a memory gets a larger one."""
        return self.journal.event_mark()

    def changed_since(self, event: int, fields: Sequence[str | tuple[str, ...]] | None = None) -> list[Memory]:
        """Live memories that an event after `event` touched (Journal.changed_since)."""
        return self.journal.changed_since(event, fields)

    def dream_mark(self) -> dict[str, Any] | None:
        """What the last finished dream had dealt with (Journal.dream_mark)."""
        return self.journal.dream_mark()

    def set_dream_mark(self, mark: dict[str, Any], undone: int | None = None) -> None:
        """Record what a dream dealt with (Journal.set_dream_mark)."""
        self.journal.set_dream_mark(mark, undone)

    def undone_count(self) -> int:
        """How many operations have been undone (a dream notes it when it plans)."""
        return self.journal.undone_count()

    # -- writing --------------------------------------------------------------------------

    def _new_id(self, taken: set[str] = frozenset()) -> str:
        # A synced store's ids come from many devices: 8 bytes (16 hex) keep them apart (8 hex
        # collide at ~1% by 10,000); pmem.sync writes the setting, older ids keep working.
        size = int(self.setting("id_bytes") or 4)
        while True:
            candidate = token(size)
            if candidate not in taken and not self.existing_ids([candidate]):
                return candidate

    def _insert_row(self, m: Memory) -> int:
        """Write a new memory row; its seq."""
        return self.conn.execute(_INSERT_SQL, m.to_row()).lastrowid

    def _update_row(self, m: Memory) -> None:
        self.conn.execute(_UPDATE_SQL, (*m.to_row()[1:], m.id))

    def _insert(self, m: Memory, blob: bytes | None, action: str = "add") -> Memory:
        seq = self._insert_row(m)
        if blob is not None:
            self.vectors.put(seq, blob, m.tier, is_live(m))
        self.journal.record(m.id, action, None, m)
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

    def _write(self, before: Memory, after: Memory, action: str, blob: bytes | None = None) -> Memory:
        """Replace a stored memory's row with `after`, recording the change."""
        if memory_dict(before) == memory_dict(after) and blob is None:
            return after
        seq = self.db.seq(before.id)
        old_vec = None
        if blob is not None or after.text != before.text:
            old_vec = self.vectors.get(seq)
        self._update_row(after)
        if blob is not None:
            self.vectors.put(seq, blob, after.tier, is_live(after))
        elif is_live(before) != is_live(after) or before.tier != after.tier:
            self.vectors.sync(seq, after.tier, is_live(after))
        self.journal.record(before.id, action, before, after, old_vec)
        return after

    def _insert_many(self, items: Sequence[Memory], blobs: Sequence[bytes | None], action: str) -> None:
        """`_insert` for many, one statement per table: rows, then vectors, then events. A
        statement between two row inserts triples each insert's cost (its FTS5 and count
        triggers); docs/decisions/0046-sync-100k.md."""
        if not items:
            return
        self.conn.executemany(_INSERT_SQL, [m.to_row() for m in items])
        seqs = self.db.seqs([m.id for m in items])
        self.vectors.put_many([(seqs[m.id], blob, m.tier, is_live(m)) for m, blob in zip(items, blobs)
                               if blob is not None])
        self.journal.record_new(items, action)

    def _delete(self, m: Memory, action: str) -> None:
        """Remove a memory's row and vector; the event keeps both, so undo restores it."""
        seq = self.db.seq(m.id)
        vec = self.vectors.get(seq)
        self.vectors.delete(seq)
        self.conn.execute("DELETE FROM memories WHERE seq = ?", (seq,))
        self.journal.record(m.id, action, m, None, vec)

    def _fresh(self, full_id: str) -> Memory:
        """The row as it is now; call inside the write transaction, then change that."""
        rows = self.db.select("m.id = ?", [full_id])
        if not rows:
            raise NotFound(f"no memory with id {full_id!r}")
        return rows[0]

    # -- erasure and upkeep (erase.py) ------------------------------------------------------

    def upkeep(self, min_free: float = erase.UPKEEP_MIN_FREE, progress: Progress | None = None) -> dict[str, Any]:
        """Merge the keyword index into one segment (KeywordIndex.merge), then give back free
        space: when at least `min_free` of the file is free pages (a dream that merged and purged,
        a migration that rebuilt a table), VACUUM and empty the -wal. Atomic like any transaction
        (kill -9 leaves the old file). Other writers wait out SQLite's busy timeout and then fail
        with "locked", and a VACUUM of a large file takes longer than that, so it runs where
        nobody waits: at the end of `pmem dream --apply`.
        Returns bytes before and after, whether VACUUM ran, and the index's segments before and
        after. `progress`: the merge's."""
        return erase.upkeep(self.db, self.keywords, min_free, progress)

    def merge_keyword_index(self, step: int = MERGE_STEP, pause: float = MERGE_PAUSE,
                            progress: Progress | None = None) -> tuple[int, int]:
        """Merge the keyword index into one segment, `step` pages a transaction (KeywordIndex.merge)."""
        return self.keywords.merge(step, pause, progress)

    def space(self) -> dict[str, int]:
        """The file's size and how much of it is free pages (reclaimable by VACUUM)."""
        return erase.space(self.db)

    def copy_to(self, path: str | Path) -> None:
        """Write a consistent, self-contained copy of the database to `path` (erase.copy_to)."""
        erase.copy_to(self.db, path)

    def use_rollback_journal(self) -> None:
        """Leave WAL mode, so the file stands alone again (as backups are)."""
        self.conn.execute("PRAGMA journal_mode = DELETE")

    # -- history and undo -----------------------------------------------------------------

    def history(self, memory_id: str) -> list[tuple[Event, Operation]]:
        """Every event of one memory with its operation, oldest first. Takes an id prefix, or the full
        id of a memory that no longer exists (an undone add leaves its history)."""
        try:
            full = self.resolve(memory_id)
        except NotFound:
            full = memory_id.strip().lower()  # an undone add leaves only its history
        rows = self.journal.history(full)
        if not rows:
            raise NotFound(f"no memory with id {memory_id!r}")
        return rows

    def operations(self, limit: int = 20) -> list[Operation]:
        """The latest `limit` operations, newest first, with their event counts."""
        return self.journal.operations(limit)

    def get_operation(self, op_id: str) -> Operation | None:
        """The operation with this exact id, or None."""
        return self.journal.get_operation(op_id)

    def ids_in_history(self, ids: Iterable[str]) -> list[str]:
        """Those of `ids` that a memory or an event of this database still names."""
        return self.journal.ids_in_history(ids)

    def _revert(self, rows: Sequence[tuple], blobs: dict[str, bytes]) -> None:
        """Put back each event's `before` state, newest first (Journal.undo_events' rows); `blobs`:
        the vectors, by text, of the states whose events kept none (the service embeds them)."""
        for r in rows:
            mid, before_json, before_vec = r[2], r[4], r[7]
            exists = self.conn.execute("SELECT seq FROM memories WHERE id = ?", (mid,)).fetchone()
            if before_json is None:  # the operation created it
                if exists:
                    self.vectors.delete(exists[0])
                    self.conn.execute("DELETE FROM memories WHERE seq = ?", (exists[0],))
                continue
            before = Memory(**json.loads(before_json))
            if exists and not {"thread", "thread_pos"} <= json.loads(before_json).keys():
                # an event older than threads: the memory keeps the thread the migration gave it
                now = self.db.select("m.id = ?", [mid])[0]
                before = replace(before, thread=now.thread, thread_pos=now.thread_pos)
            if exists:
                self._update_row(before)
                seq = exists[0]
            else:
                seq = self._insert_row(before)
            blob = before_vec if before_vec is not None else blobs.get(before.text)
            if blob is not None and (self.vector_model()[1] or 0) * 4 == len(blob):
                if before_vec is not None:  # a kept vector may be an import's int8 one: made float32 again
                    self.vectors.may_be_int8([blob])
                self.vectors.put(seq, blob, before.tier, is_live(before))
            else:
                self.vectors.sync(seq, before.tier, is_live(before))

    # -- counts ---------------------------------------------------------------------------

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
            "languages": self.keywords.languages(),
        }


class Verbs(Protocol):
    """What the store's replication (SyncLog) is handed: the storage with the verbs of the service
    over it (pmem.service.MemoryStore). Other devices' changes are applied through the verbs, as a
    command's are, and the store never imports the service."""

    clock: Callable[[], str]
    vectors: VectorIndex

    @property
    def conn(self) -> Any: ...

    def transaction(self) -> Any: ...

    def operation(self, kind: str, summary: str = "", op_id: str | None = None) -> Any: ...

    def get(self, memory_id: str) -> Memory: ...

    def get_many(self, ids: Iterable[str]) -> list[Memory]: ...

    def existing_ids(self, ids: Iterable[str]) -> set[str]: ...

    def iter_all(self, batch: int = 1000) -> Iterator[Memory]: ...

    def add(self, text: str, *, allow_duplicate: bool = False, allow_secret: bool = False,
            **kw: Any) -> tuple[Memory, bool]: ...

    def insert(self, memories: Sequence[Memory], *, kind: str = "import", summary: str = "",
               progress: Progress | None = None, keep_ids: bool = True,
               vectors: Sequence[bytes | None] | None = None, allow_secret: bool = False) -> list[Memory]: ...

    def edit(self, memory_id: str, *, text: str | None = None, action: str | None = None,
             allow_secret: bool = False) -> Memory: ...

    def set_fields(self, memory_id: str, action: str, **changes: Any) -> Memory: ...

    def delete(self, memory_id: str, action: str = "delete") -> Memory: ...

    def purge(self, ids: Iterable[str]) -> dict[str, Any]: ...

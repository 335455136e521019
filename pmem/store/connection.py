"""The one connection a store's parts share: transactions, snapshots, settings, kept counts,
id resolution and memory rows read by id or seq."""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from .. import db
from ..errors import AmbiguousId, DatabaseError, NotFound, UsageError
from ..records import MEMORY_COLUMNS, Memory

ID = re.compile(r"^[0-9a-z]{1,32}$")
SAFE_PREFIX = 4  # characters of an id prefix an agent or a destructive verb must give, as git's minimum
EXACT_BELOW = 10_000  # vectors below which every search is exact (a scan costs ~1 us a row)
# The columns of a memory row, in Memory.from_row's order, after the row's seq.
_ROW_SQL = "SELECT m.seq, " + ", ".join(f"m.{c}" for c in MEMORY_COLUMNS)

Progress = Callable[[int, int], None]


def token(size: int = 4) -> str:
    """2 * `size` random hex digits for ids (os.urandom: `secrets` costs 10 ms of import via hashlib)."""
    return os.urandom(size).hex()


class Connection:
    """The SQLite connection of one store, and what every part of it reads through it."""

    def __init__(self, path: Path, clock: Callable[[], str]):
        self.path = path
        self.clock = clock
        self.exact_below = EXACT_BELOW  # memories from which search approximates (a large store)
        self.errors = db.errors()
        self.forgiven: tuple[type[Exception], ...] = (DatabaseError, *self.errors)  # best-effort writes
        self.conn = db.connect(path)

    def close(self) -> None:
        self.conn.close()

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params)

    def error(self, exc: BaseException) -> DatabaseError:
        """The DatabaseError a user sees for an SQLite error."""
        if db.is_locked_error(exc):
            return DatabaseError(f"database {self.path} is locked by another process; try again")
        return DatabaseError(f"database {self.path}: {exc}")

    # -- transactions ---------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or join the transaction already open."""
        if self.conn.in_transaction:
            yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except self.errors as exc:
            raise self.error(exc) from None
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:  # SQLite rolls back itself after some errors (disk full, I/O)
                self.conn.execute("ROLLBACK")
            raise
        try:
            self.conn.execute("COMMIT")
        except self.errors as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise self.error(exc) from None

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

    def checkpoint(self, attempts: int = 5) -> bool:
        """Copy the -wal into the database file and truncate it to 0 bytes; False if readers kept it."""
        import time

        for attempt in range(attempts):
            try:
                busy = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except self.errors:
                busy = 1
            if not busy:
                return True
            time.sleep(0.05 * (attempt + 1))
        return False

    @contextmanager
    def busy_wait(self, seconds: float) -> Iterator[None]:
        """Inside, wait at most `seconds` for another process's write lock (SQLite's busy timeout,
        5 s by default), then give the usual "locked" error: an agent's call has a deadline."""
        before = self.conn.execute("PRAGMA busy_timeout").fetchone()[0]
        self.conn.execute(f"PRAGMA busy_timeout = {max(1, int(seconds * 1000))}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(before)}")

    # -- settings and kept counts -----------------------------------------------------------

    def setting(self, key: str) -> str | None:
        """The value stored under `key` in the database's own settings table, or None when unset."""
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_setting(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                          "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def counter(self, key: str) -> int:
        """A count kept by triggers (migration m005_binary_vectors): 'vectors', 'events', 'operations', 'tag:NAME',
        'mem:TIER:PINNED:FORGOTTEN:MERGED'."""
        row = self.conn.execute("SELECT n FROM counts WHERE key = ?", (key,)).fetchone()
        return row[0] if row else 0

    def memory_count(self) -> int:
        """Every stored memory, in any state, from the kept counts."""
        return self.conn.execute("SELECT coalesce(sum(n), 0) FROM counts "
                                 "WHERE key >= 'mem:' AND key < 'mem;'").fetchone()[0]

    def has_table(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    # -- ids and rows ---------------------------------------------------------------------

    def resolve(self, prefix: str, min_prefix: int = 1) -> str:
        """A full id from a unique prefix, like git. A prefix shorter than `min_prefix` that is not
        a whole id raises UsageError: what an agent or a destructive verb names asks for
        SAFE_PREFIX, so "1" cannot forget whichever memory happens to be the only one to match."""
        p = prefix.strip().lower()
        if not ID.match(p):
            raise NotFound(f"no memory with id {prefix!r}")
        if len(p) < min_prefix:
            if self.conn.execute("SELECT 1 FROM memories WHERE id = ?", (p,)).fetchone():
                return p
            raise UsageError(f"id prefix {prefix!r} is too short: give at least {min_prefix} characters of the id")
        rows = self.conn.execute(
            "SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT 6",
            (p, p + "\uffff")).fetchall()
        if not rows:
            raise NotFound(f"no memory with id {prefix!r}")
        if len(rows) > 1:
            exact = [r[0] for r in rows if r[0] == p]
            if exact:
                return exact[0]
            shown = ", ".join(r[0] for r in rows[:5]) + (" and more" if len(rows) > 5 else "")
            raise AmbiguousId(f"id prefix {prefix!r} matches several memories: {shown}; give more of the id")
        return rows[0][0]

    def seq(self, memory_id: str) -> int:
        """The row number of the memory with this full id."""
        return self.conn.execute("SELECT seq FROM memories WHERE id = ?", (memory_id,)).fetchone()[0]

    def seqs(self, ids: Iterable[str]) -> dict[str, int]:
        """The row numbers of these full ids (one query)."""
        return dict(self.conn.execute("SELECT id, seq FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                                      (json.dumps(list(ids)),)))

    def existing_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of these exact ids are stored (one query, for imports and id allocation)."""
        rows = self.conn.execute("SELECT id FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                                 (json.dumps(list(ids)),))
        return {r[0] for r in rows}

    def rows(self, where: str, params: Sequence[Any], tail: str = "", index: str = "") -> list[tuple[int, Memory]]:
        """(seq, Memory) of the rows of `memories m` that pass `where`; `index` names one to read by."""
        indexed = f" INDEXED BY {index}" if index else ""
        sql = f"{_ROW_SQL} FROM memories m{indexed} WHERE {where} {tail}"
        return [(r[0], Memory.from_row(r[1:])) for r in self.conn.execute(sql, list(params))]

    def select(self, where: str, params: Sequence[Any], tail: str = "", index: str = "") -> list[Memory]:
        """The memories of `rows()`, without their seqs."""
        return [m for _, m in self.rows(where, params, tail, index)]

    def by_seq(self, seqs: Iterable[int]) -> dict[int, Memory]:
        """Memories by their row number (search results carry seqs)."""
        seqs = [int(s) for s in seqs]
        if not seqs:
            return {}
        return dict(self.rows("m.seq IN (SELECT value FROM json_each(?))", [json.dumps(seqs)]))


def count_triggers(conn, table: str, key: str) -> None:
    """Keep `counts[key]` equal to count(*) of `table` (a count(*) reads the whole table)."""
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_count_ai AFTER INSERT ON {table} BEGIN "
                 f"INSERT INTO counts (key, n) VALUES ({key}, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1; END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {table}_count_ad AFTER DELETE ON {table} BEGIN "
                 f"UPDATE counts SET n = n - 1 WHERE key = {key}; END")

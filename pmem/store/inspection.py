"""A database file looked at from outside a store: what `pmem doctor` asks of a file that may be
damaged, half-migrated or written by a newer pmem, which a MemoryStore would refuse to open or
would migrate, and what `pmem purge` asks of each backup. It opens the file as the store does
(pmem/db.py: sqlite-vec loaded, WAL on, nothing created), or strictly read-only, then only reads:
no migration, no change to a table. An SQLite error becomes a DatabaseError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from .. import db
from ..errors import DatabaseError
from .migrations import applied


class Pages(NamedTuple):
    """The file's pages: bytes each, how many, and how many of them are free."""

    size: int
    count: int
    free: int


class Reindex(NamedTuple):
    """An interrupted `pmem reindex`: the model it embeds with, memories done, memories in all."""

    model: str | None
    done: int
    total: int


class EnglishCounts(NamedTuple):
    """Memories in all, those counted under a language other than English, and English second
    vectors stored (pmem/store/english.py)."""

    memories: int
    not_english: int
    english_vectors: int


def vec_version() -> str:
    """sqlite-vec's version, from a connection in memory: whether this driver loads it at all
    (raises ExtensionError, with its fix, when it does not)."""
    conn = db.connect(":memory:")
    try:
        return conn.execute("SELECT vec_version()").fetchone()[0]
    finally:
        conn.close()


class Inspection:
    """One connection to a database file that is only read. Raises DatabaseError where the file
    is missing, is no database, or SQLite fails to read what is asked."""

    def __init__(self, path: Path, *, read_only: bool = False):
        """`read_only`: opened by the driver alone with mode=ro and without sqlite-vec (a backup,
        of which nothing may change, its journal mode included: db.connect would turn WAL on)."""
        self.path = path
        self.errors = db.errors()
        if not read_only:
            self.conn = db.connect(path, create=False)
            return
        import urllib.parse

        uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"
        with self._reading():
            self.conn = db.driver().connect(uri, uri=True)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Inspection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except self.errors as exc:
            if db.is_locked_error(exc):
                raise DatabaseError(f"database {self.path} is locked by another process; try again") from None
            raise DatabaseError(f"{self.path} is not a usable pmem database: {exc}") from None

    def _one(self, sql: str, params: Any = ()) -> Any:
        with self._reading():
            return self.conn.execute(sql, params).fetchone()

    def quick_check(self) -> str:
        """SQLite's `PRAGMA quick_check`: "ok", or what is wrong; it reads every page of the file
        (15 s at 1,000,000 memories). A file too damaged to be checked answers with the error."""
        try:
            return self.conn.execute("PRAGMA quick_check").fetchone()[0]
        except self.errors as exc:
            if db.is_locked_error(exc):
                raise DatabaseError(f"database {self.path} is locked by another process; try again") from None
            return str(exc)

    def pages(self) -> Pages:
        return Pages(*(self._one(f"PRAGMA {name}")[0] for name in ("page_size", "page_count", "freelist_count")))

    def tables(self) -> set[str]:
        """The names of its tables, indexes, views and triggers."""
        with self._reading():
            return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master")}

    def applied_migrations(self) -> list[str]:
        """The names of the schema steps applied to it, in order (pmem/store/migrations.py)."""
        with self._reading():
            return applied(self.conn)

    def setting(self, key: str) -> str | None:
        """The value under `key` in its settings table; None when unset or it has no such table."""
        if "settings" not in self.tables():
            return None
        row = self._one("SELECT value FROM settings WHERE key = ?", (key,))
        return row[0] if row else None

    def interrupted_reindex(self) -> Reindex | None:
        """How far a `pmem reindex` that stopped got (its staging table is left until it ends)."""
        if "reindex_vec" not in self.tables():
            return None
        return Reindex(*self._one("SELECT (SELECT value FROM settings WHERE key = 'reindex_model'), "
                                  "(SELECT count(*) FROM reindex_vec), (SELECT count(*) FROM memories)"))

    def english_counts(self) -> EnglishCounts | None:
        """What it takes to tell how many English memories lack their second vector, from the
        kept counts (`lang:` counts every memory not guessed English); None without those tables."""
        tables = self.tables()
        if not {"memories", "counts"} <= tables:
            return None
        total, other = self._one("SELECT (SELECT count(*) FROM memories), (SELECT coalesce(sum(n), 0) FROM counts "
                                 "WHERE key >= 'lang:' AND key < 'lang;')")
        have = self._one("SELECT count(*) FROM memory_vec_en")[0] if "memory_vec_en" in tables else 0
        return EnglishCounts(total, other, have)

    def missing_vectors(self) -> int:
        """Memories stored without a vector yet (a sync's rows come first: pmem/fill.py)."""
        tables = self.tables()
        if "memories" not in tables:
            return 0
        if "memory_vec" not in tables:
            return self._one("SELECT count(*) FROM memories")[0]
        return self._one("SELECT count(*) FROM memories m WHERE NOT EXISTS "
                         "(SELECT 1 FROM memory_vec v WHERE v.seq = m.seq)")[0]

    def int8_vectors(self) -> int:
        """Vectors made in int8 that the fill has still to make in float32 (pmem.store.refine)."""
        from .refine import TABLE

        return self._one(f"SELECT count(*) FROM {TABLE}")[0] if TABLE in self.tables() else 0

    def holds_any(self, ids: list[str]) -> bool:
        """Whether any of these memories is in it: its row, or an event that kept its text."""
        q = json.dumps(list(ids))
        return self._one("SELECT 1 FROM memories WHERE id IN (SELECT value FROM json_each(?)) "
                         "UNION ALL SELECT 1 FROM events WHERE memory_id IN (SELECT value FROM json_each(?)) "
                         "AND (before IS NOT NULL OR after IS NOT NULL) LIMIT 1", (q, q)) is not None

"""What a dream reads on a large store (pmem.dream: only what changed): live memories by expiry,
by the words they start with, and in storage order after a row. A part of MemoryStore."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from ..records import Memory
from .filter import Filter

if TYPE_CHECKING:
    import sqlite3

    from .connection import Connection
    from .keywords import KeywordIndex


class DreamReads:
    """MemoryStore's queries for pmem.dream; they need its connection, keyword index and clock."""

    if TYPE_CHECKING:
        db: Connection
        keywords: KeywordIndex

        @property
        def conn(self) -> sqlite3.Connection: ...

        @property
        def clock(self) -> Callable[[], str]: ...

    def expired_live(self, now: str) -> list[Memory]:
        """Live memories whose expires_at has passed by `now` (from the index on expires_at)."""
        where, params = Filter.live().where(now)
        return self.db.select(f"{where} AND m.expires_at IS NOT NULL AND m.expires_at <= ?", [*params, now],
                              "ORDER BY m.seq", "memories_expires")

    def facts_starting_with(self, words: Sequence[str], upto: int | None = None) -> list[Memory]:
        """Live memories outside the episodic tier (stored up to row `upto`) whose text begins
        with these words (the keyword index, with its stemming): the facts of one subject ("my
        car is ...")."""
        if not words:
            return []
        where, params = Filter.live().where(self.clock())
        if upto is not None:
            where, params = f"{where} AND m.seq <= ?", [*params, int(upto)]
        return self.db.select(f"{where} AND m.tier != 'episodic' AND m.seq IN "
                              f"(SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?)",
                              [*params, self.keywords.starting_with(list(words))], "ORDER BY m.seq")

    def live_after(self, seq: int, limit: int) -> list[tuple[int, Memory]]:
        """Up to `limit` live memories stored after row `seq`, in storage order, with their row
        numbers (a dream's first comparison of a large store goes through them in slices)."""
        where, params = Filter.live().where(self.clock())
        return self.db.rows(f"{where} AND m.seq > ?", [*params, int(seq)], f"ORDER BY m.seq LIMIT {int(limit)}")

    def count_live_after(self, seq: int) -> int:
        """How many live memories were stored after row `seq`."""
        where, params = Filter.live().where(self.clock())
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where} AND m.seq > ?",
                                 [*params, int(seq)]).fetchone()[0]

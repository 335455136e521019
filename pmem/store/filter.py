"""Which memories a read considers: `Filter`, its WHERE clause, its estimate from the kept
counts, and the storage range of a date window."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import UsageError
from ..records import TIERS, Memory
from .connection import Connection

DATE_WINDOW = 20_000  # rows of a --since/--until window below which search ranks it whole (~1 us a row a side)...
DATE_SHARE = 20  # ...or below 1/20 of the store (a scan of 50,000 rows costs what the bit path does at 1,000,000)
# A live memory is neither forgotten nor merged: search, dream and the bit index's `live` flag
# leave the others out (expired and superseded memories are live).
LIVE_SQL = "{a}.forgotten_at IS NULL AND {a}.merged_into IS NULL"


def is_live(m: Memory) -> bool:
    return m.forgotten_at is None and m.merged_into is None


def check_tiers(tiers: Iterable[str]) -> None:
    for tier in tiers:
        if tier not in TIERS:
            raise UsageError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")


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

    @property
    def live_only(self) -> bool:
        """Whether it keeps live memories only (neither forgotten nor merged)."""
        return not (self.include_forgotten or self.include_merged)

    def where(self, now: str, alias: str = "m") -> tuple[str, list[Any]]:
        a = alias
        clauses: list[str] = []
        params: list[Any] = []
        check_tiers(self.tiers)
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
        if self.live_only:
            clauses.append(LIVE_SQL.format(a=a))
        elif not self.include_forgotten:
            clauses.append(f"{a}.forgotten_at IS NULL")
        elif not self.include_merged:
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


def estimate(db: Connection, flt: Filter) -> int:
    """An upper bound of count(flt) from the kept counts; exact when `flt` filters only on
    tiers, pinned and forgotten/merged status."""
    check_tiers(flt.tiers)
    keys = [f"mem:{t}:{p}:{f}:{m}" for t in flt.tiers
            for p in ((0, 1) if flt.pinned is None else (int(flt.pinned),))
            for f in ((0, 1) if flt.include_forgotten else (0,))
            for m in ((0, 1) if flt.include_merged else (0,))]
    total = db.execute("SELECT coalesce(sum(n), 0) FROM counts WHERE key IN "
                       "(SELECT value FROM json_each(?))", (json.dumps(keys),)).fetchone()[0]
    if flt.ids is not None:
        total = min(total, len(flt.ids))
    if not flt.include_forgotten:
        for tag in flt.tags:
            total = min(total, db.counter("tag:" + tag))
    return total


def date_window(db: Connection, flt: Filter, docs: int) -> tuple[int, int, bool] | None:
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
    count, lo, hi = db.execute(
        f"SELECT count(*), min(seq), max(seq) FROM (SELECT seq FROM memories WHERE {' AND '.join(clauses)} "
        f"ORDER BY created_at DESC, seq DESC LIMIT ?)", [*params, most]).fetchone()
    whole = count < most and bool(flt.since or flt.until)
    return None if not count else (lo, hi, whole)

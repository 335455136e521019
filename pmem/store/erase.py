"""Erasure and upkeep: purge (text and vector out of every table, page and -wal), finishing a
purge that was killed, VACUUM, free space, and a standalone copy of the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .. import db as sqlite
from ..errors import NotFound, UsageError
from .connection import Connection, Progress
from .journal import Journal
from .keywords import KeywordIndex
from .vectors import VectorIndex

UPKEEP_MIN_FREE = 0.2  # share of the file in free pages from which upkeep() runs VACUUM


def _quotes(summary: str, text: str) -> bool:
    """Whether an operation summary carries part of a memory's text (add: its first 80 chars;
    extract: the first 60 of the input)."""
    summary, text = summary.strip(), text.strip()
    if not summary or not text:
        return False
    head = text[:min(len(text), 40)]
    return head in summary or (len(summary) >= 12 and summary in text) or \
        any(len(part) >= 12 and part.strip() in text for part in summary.split(": ", 1)[1:])


def purge(db: Connection, journal: Journal, vectors: VectorIndex, keywords: KeywordIndex,
          ids: Iterable[str]) -> dict[str, Any]:
    """MemoryStore.purge: erase these memories for good."""
    wanted: list[str] = []
    for raw in ids:
        try:
            full = db.resolve(raw)
        except NotFound:  # gone from memories (undone, dream --purge) but still in events
            full = raw.strip().lower()
            if not journal.mentions(full):
                raise
        if full not in wanted:
            wanted.append(full)
    if not wanted:
        raise UsageError("purge needs at least one memory id")
    if db.conn.in_transaction:
        raise RuntimeError("purge runs its own transaction (its checkpoint cannot run inside one)")
    secure = db.execute("PRAGMA secure_delete").fetchone()[0]
    db.execute("PRAGMA secure_delete = ON")
    try:
        with journal.operation("purge", f"purge {len(wanted)} memories"):
            texts: set[str] = set()
            for mid in wanted:
                row = db.execute("SELECT seq, text FROM memories WHERE id = ?", (mid,)).fetchone()
                for before, after in db.execute("SELECT before, after FROM events WHERE memory_id = ?", (mid,)):
                    texts.update(json.loads(state)["text"] for state in (before, after) if state)
                if row is not None:
                    texts.add(row[1])
                    vectors.delete(row[0], zero=True)
                    db.execute("DELETE FROM memories WHERE seq = ?", (row[0],))
                ops = [r[0] for r in db.execute("SELECT DISTINCT op_id FROM events WHERE memory_id = ?", (mid,))]
                db.execute("UPDATE events SET before = NULL, after = NULL, before_vec = NULL "
                           "WHERE memory_id = ?", (mid,))
                for op_id, kind, summary in db.execute(
                        "SELECT id, kind, summary FROM operations WHERE id IN (SELECT value FROM json_each(?))",
                        (json.dumps(ops),)).fetchall():
                    if any(_quotes(summary, t) for t in texts):
                        db.execute("UPDATE operations SET summary = ? WHERE id = ?", (f"{kind} (text purged)", op_id))
                journal.record(mid, "purge", None, None)
            keywords.optimize()
            db.set_setting("purge_pending", db.clock())
            derived = [r[0] for r in db.execute(
                "SELECT m.id FROM memories m, json_each(m.derived_from) d "
                "WHERE d.value IN (SELECT value FROM json_each(?))", (json.dumps(wanted),))]
        checkpointed = finish_purge(db)
    finally:
        db.execute(f"PRAGMA secure_delete = {int(secure)}")
    return {"purged": wanted, "derived": sorted(set(derived)), "checkpointed": checkpointed}


def finish_purge(db: Connection) -> bool:
    """Rewrite the file after a purge: space freed before secure_delete was on (older pmem,
    FTS merges) may still hold copies of the text, and VACUUM rebuilds every page from the
    live rows; then empty the -wal. Returns whether the -wal could be emptied.

    The rewritten pages are checkpointed into the file before the setting goes: a kill between
    the two left the old pages, text and all, in the file (docs/decisions/0008-trust-concurrency-kill9.md)."""
    vacuum(db, in_memory=True)  # no temporary file ever holds the purged text
    db.checkpoint()
    with db.transaction():
        db.execute("DELETE FROM settings WHERE key = 'purge_pending'")
    return db.checkpoint()


def vacuum(db: Connection, in_memory: bool) -> None:
    """VACUUM, its temporary copy in memory or in SQLite's temporary files."""
    previous = db.execute("PRAGMA temp_store").fetchone()[0]
    db.execute(f"PRAGMA temp_store = {'MEMORY' if in_memory else 'DEFAULT'}")
    try:
        db.execute("VACUUM")
    except db.errors as exc:
        raise db.error(exc) from None
    finally:
        db.execute(f"PRAGMA temp_store = {int(previous)}")


def space(db: Connection) -> dict[str, int]:
    """The file's size and how much of it is free pages (reclaimable by VACUUM)."""
    page = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return {"bytes": page * pages, "free_bytes": page * free}


def upkeep(db: Connection, keywords: KeywordIndex, min_free: float = UPKEEP_MIN_FREE,
           progress: Progress | None = None) -> dict[str, Any]:
    """MemoryStore.upkeep: merge the keyword index, then VACUUM where enough of the file is free."""
    segments = keywords.merge(progress=progress)
    before = space(db)
    if before["bytes"] == 0 or before["free_bytes"] < min_free * before["bytes"]:
        return {"ran": False, "bytes_before": before["bytes"], "bytes_after": before["bytes"],
                "free_before": before["free_bytes"], "index_segments": segments}
    vacuum(db, in_memory=False)  # its temporary copy on disk: it can be as large as the file
    db.checkpoint()
    return {"ran": True, "bytes_before": before["bytes"], "bytes_after": space(db)["bytes"],
            "free_before": before["free_bytes"], "index_segments": segments}


def copy_to(db: Connection, path: str | Path) -> None:
    """Write a consistent, self-contained copy of the database to `path` (an existing empty
    file) with SQLite's online backup; the copy uses a rollback journal, not WAL."""
    dest = sqlite.driver().connect(str(path), isolation_level=None)
    try:
        db.conn.backup(dest)
        dest.execute("PRAGMA journal_mode = DELETE")
    finally:
        dest.close()

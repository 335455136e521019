"""A read-only look at a store's file from a command that is done with its store: what autosync
(pmem/autosync.py) asks after every write command, so it costs what a stat costs. The standard
library's sqlite3 (no sqlite-vec: these tables need none), no migration, a short busy timeout,
and nothing else of pmem imported (docs/decisions/0047-sync-compact-auto.md)."""

from __future__ import annotations

import os
import sqlite3

# Whether any event past the last one sent came from this device (operations of kind `sync` came
# from elsewhere and are never sent back: pmem/store/replication.py, SyncLog.pending_events).
_CHANGES_TO_SEND = (
    "SELECT EXISTS (SELECT 1 FROM events e JOIN operations o ON o.id = e.op_id WHERE e.seq > "
    "(SELECT coalesce((SELECT CAST(value AS INTEGER) FROM sync_state WHERE key = 'exported'), 0)) "
    "AND o.kind != 'sync')")


def _uri(path: str | os.PathLike) -> str:
    """A read-only SQLite URI of `path`: '%', '?' and '#' would otherwise end or escape its path."""
    text = str(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    return f"file:{text}?mode=ro"


class Glance:
    """One read-only connection to a database file. Its answers are False where it cannot tell
    (no file, locked past the timeout, not a database, no sync tables): the next command asks again."""

    def __init__(self, path: str | os.PathLike, timeout: float = 1.0):
        try:
            self.conn: sqlite3.Connection | None = sqlite3.connect(_uri(path), uri=True, timeout=timeout)
        except sqlite3.Error:
            self.conn = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __enter__(self) -> Glance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def changes_to_send(self) -> bool:
        """Whether this database holds changes of its own that sync has not sent (False when it
        does not sync: it has no sync tables)."""
        if self.conn is None:
            return False
        try:
            row = self.conn.execute(_CHANGES_TO_SEND).fetchone()
        except sqlite3.Error:
            return False
        return bool(row and row[0])

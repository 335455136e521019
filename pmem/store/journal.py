"""The journal: operations and their events (each change of a memory with its state before and
after), history, undo's bookkeeping, and the marks that say what a dream has seen."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, Iterable, Iterator, Sequence

from ..records import Event, Memory, Operation
from .connection import Connection, token
from .filter import Filter


def memory_dict(m: Memory | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {f.name: getattr(m, f.name) for f in fields(Memory)}


def _event(row) -> Event:
    return Event(seq=row[0], op_id=row[1], memory_id=row[2], action=row[3],
                 before=json.loads(row[4]) if row[4] else None,
                 after=json.loads(row[5]) if row[5] else None, at=row[6])


_OPERATION_SQL = ("SELECT o.id, o.kind, o.summary, o.at, o.undone_at, "
                  "(SELECT count(*) FROM events e WHERE e.op_id = o.id) FROM operations o")


class Journal:
    """Operations and events over the store's connection."""

    def __init__(self, db: Connection):
        self.db = db
        self.current: str | None = None  # the id of the operation being written

    @contextmanager
    def operation(self, kind: str, summary: str = "", op_id: str | None = None) -> Iterator[str]:
        """Group writes into one undoable operation (nested calls join the outer one).

        `op_id` joins an existing operation from a new transaction, so a long run (a dream) can
        commit proposal by proposal and still be one undo. An operation left with no events is
        removed."""
        if self.current is not None:
            yield self.current
            return
        op_id = op_id or token()
        db = self.db
        with db.transaction():
            if not db.execute("SELECT 1 FROM operations WHERE id = ?", (op_id,)).fetchone():
                db.execute("INSERT INTO operations (id, kind, summary, at) VALUES (?, ?, ?, ?)",
                           (op_id, kind, summary[:500], db.clock()))
            self.current = op_id
            try:
                yield op_id
            finally:
                self.current = None
            n = db.execute("SELECT count(*) FROM events WHERE op_id = ?", (op_id,)).fetchone()[0]
            if n == 0:
                db.execute("DELETE FROM operations WHERE id = ?", (op_id,))

    def record(self, memory_id: str, action: str, before: Memory | None, after: Memory | None,
               before_vec: bytes | None = None) -> None:
        """One event of the current operation."""
        if self.current is None:
            raise RuntimeError("writes must happen inside MemoryStore.operation()")
        self.db.execute(
            "INSERT INTO events (op_id, memory_id, action, before, after, before_vec, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.current, memory_id, action,
             None if before is None else json.dumps(memory_dict(before), ensure_ascii=False),
             None if after is None else json.dumps(memory_dict(after), ensure_ascii=False),
             before_vec, self.db.clock()))

    def record_new(self, memories: Sequence[Memory], action: str) -> None:
        """One event per newly stored memory (`record` with no before), in one statement."""
        if self.current is None:
            raise RuntimeError("writes must happen inside MemoryStore.operation()")
        self.db.conn.executemany(
            "INSERT INTO events (op_id, memory_id, action, before, after, before_vec, at) "
            "VALUES (?, ?, ?, NULL, ?, NULL, ?)",
            [(self.current, m.id, action, json.dumps(memory_dict(m), ensure_ascii=False), self.db.clock())
             for m in memories])

    # -- reading ----------------------------------------------------------------------------

    def history(self, full_id: str) -> list[tuple[Event, Operation]]:
        """Every event of one memory with its operation, oldest first."""
        rows = self.db.execute(
            "SELECT e.seq, e.op_id, e.memory_id, e.action, e.before, e.after, e.at, "
            "o.id, o.kind, o.summary, o.at, o.undone_at FROM events e JOIN operations o ON o.id = e.op_id "
            "WHERE e.memory_id = ? ORDER BY e.seq", (full_id,)).fetchall()
        return [(_event(r[:7]), Operation(*r[7:])) for r in rows]

    def operations(self, limit: int = 20) -> list[Operation]:
        """The latest `limit` operations, newest first, with their event counts."""
        rows = self.db.execute(f"{_OPERATION_SQL} ORDER BY o.rowid DESC LIMIT ?", (limit,)).fetchall()
        return [Operation(*r) for r in rows]

    def get_operation(self, op_id: str) -> Operation | None:
        """The operation with this exact id, or None."""
        row = self.db.execute(f"{_OPERATION_SQL} WHERE o.id = ?", (op_id,)).fetchone()
        return Operation(*row) if row else None

    def mentions(self, memory_id: str) -> bool:
        """Whether an event names this full id (a memory gone from `memories` keeps its events)."""
        return self.db.execute("SELECT 1 FROM events WHERE memory_id = ? LIMIT 1", (memory_id,)).fetchone() is not None

    def ids_in_history(self, ids: Iterable[str]) -> list[str]:
        """Those of `ids` that a memory or an event of this database still names."""
        return [i for i in ids if self.db.execute(
            "SELECT 1 FROM memories WHERE id = ? UNION ALL SELECT 1 FROM events WHERE memory_id = ?",
            (i, i)).fetchone()]

    # -- undo's bookkeeping -----------------------------------------------------------------

    def last_undoable(self) -> Operation | None:
        """The last operation not yet undone (a purge is never undone); call inside the write
        transaction that undoes it, so two concurrent undos never revert one twice."""
        row = self.db.execute("SELECT id, kind, summary, at, undone_at FROM operations "
                              "WHERE undone_at IS NULL AND kind != 'purge' "
                              "ORDER BY rowid DESC LIMIT 1").fetchone()
        return None if row is None else Operation(*row)

    def undo_events(self, op_id: str) -> list[tuple]:
        """The events of one operation, newest first, as (seq, op_id, memory_id, action, before,
        after, at, before_vec)."""
        return self.db.execute("SELECT seq, op_id, memory_id, action, before, after, at, before_vec "
                               "FROM events WHERE op_id = ? ORDER BY seq DESC", (op_id,)).fetchall()

    def finish_undo(self, op: Operation, rows: Sequence[tuple]) -> Operation:
        if rows:
            self.pull_dream_mark(min(r[0] for r in rows) - 1)
        self.db.execute("UPDATE operations SET undone_at = ? WHERE id = ?", (self.db.clock(), op.id))
        op.undone_at = self.db.clock()
        op.events = len(rows)
        return op

    def undone_count(self) -> int:
        """How many operations have been undone (a dream notes it when it plans)."""
        return self.db.execute("SELECT count(*) FROM operations WHERE undone_at IS NOT NULL").fetchone()[0]

    # -- what changed since a mark (pmem.dream: only what changed) ---------------------------

    def event_mark(self) -> int:
        """The number of the newest event: any later change to a memory gets a larger one."""
        return self.db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]

    def changed_since(self, event: int, fields: Sequence[str | tuple[str, ...]] | None = None) -> list[Memory]:
        """Live memories (not forgotten, not merged) that an event after `event` touched: stored,
        edited, restored, or changed by a dream. With `fields` (names of Memory's fields, or a
        tuple of names for the first of them that is set), only those that an event stored or
        changed one of these of."""
        where, params = Filter.live().where(self.db.clock())
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
        return self.db.select(f"{where} AND m.id IN ({events})", [*params, *extra], "ORDER BY m.seq")

    def dream_mark(self) -> dict[str, Any] | None:
        """What the last finished dream had dealt with (pmem.dream): {"event": the newest event it
        had seen, and the dream's own keys}, or None (none recorded, or not in this form)."""
        value = self.db.setting("dream_mark")
        try:
            mark = json.loads(value) if value else None
        except ValueError:
            return None
        return mark if isinstance(mark, dict) and isinstance(mark.get("event"), int) else None

    def set_dream_mark(self, mark: dict[str, Any], undone: int | None = None) -> None:
        """Record `mark` (its "event" an event number), unless a mark of a later event is
        recorded already (another dream finished after this one planned). `undone`: how many
        operations had been undone when the dream planned; an undo since then put memories back
        without events, so the mark goes to before the first event of what it undid."""
        with self.db.transaction():
            mark = dict(mark)
            late = self.undone_count() - undone if undone is not None else 0
            if late > 0:
                row = self.db.execute(
                    "SELECT min(e.seq) FROM events e WHERE e.op_id IN (SELECT id FROM operations "
                    "WHERE undone_at IS NOT NULL ORDER BY undone_at DESC, rowid ASC LIMIT ?)", (late,)).fetchone()
                if row[0] is not None:
                    mark["event"] = min(int(mark["event"]), row[0] - 1)
            current = self.dream_mark()
            if current is None or int(mark["event"]) >= int(current["event"]) or late > 0:
                self.db.set_setting("dream_mark", json.dumps(mark))

    def pull_dream_mark(self, event: int) -> None:
        """An undo puts memories back without events of its own: the dream mark goes back to
        before the undone operation, so the next dream looks at what it changed again."""
        mark = self.dream_mark()
        if mark is not None and int(mark["event"]) > event:
            self.db.set_setting("dream_mark", json.dumps({**mark, "event": event}))

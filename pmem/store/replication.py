"""The sync journal: operations out of the event log, operations from other devices in.

It keeps its own tables in the store's database (created on first use, all named `sync_*`),
runs its SQL over the store's connection (a part of the store, beside the journal it reads) and makes every
change to memories through the store's public methods, inside one `sync` operation per pull:
what another device did is applied whole or not at all, and it is recorded in history like any
change. Operations of kind `sync` came from elsewhere and are never sent back.

An operation holds the memory's id, its kind, the fields it set and their values after, a
hybrid logical clock (pmem/hlc.py) and, per field, the clock of the value it replaced (`b`: how a
concurrent change is told from a later one). Never the value before.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..errors import NotFound, UsageError
from ..hlc import Clock, ms, undo_key
from ..records import MEMORY_COLUMNS, Memory
from . import refine
from .english import DIM as ENGLISH_DIM
from .english import MODEL as ENGLISH_MODEL
from .vectors import pack_half, unpack_half

if TYPE_CHECKING:
    from .memories import Verbs

# What travels: every column a change to a memory can set. Access counts are local reads, not
# changes; `_exists` is the memory itself (a create sets it, an undone create clears it).
SYNC_FIELDS = tuple(c for c in MEMORY_COLUMNS if c not in ("id", "access_count", "last_accessed_at"))
EXISTS = "_exists"
KINDS_BY_ACTION = {"forget": "forget", "restore": "restore", "supersede": "supersede"}
_MEMORY_FIELDS = {f.name for f in fields(Memory)}

# New memories stored per `insert` call while applying (one embedding call, one statement per
# table each): a join of 100,000 holds 2,000 vectors at a time, not all of them, and its progress
# counts memories stored. Still one transaction: nothing is applied half.
FLUSH_EVERY = 2000

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sync_state (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # per other device: the last changeset applied (seq) and the last operation number in it
    "CREATE TABLE IF NOT EXISTS sync_cursors (device TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
    "op INTEGER NOT NULL)",
    # per memory: the clock key of each field's value ("*": of every field not named)
    "CREATE TABLE IF NOT EXISTS sync_clocks (memory_id TEXT PRIMARY KEY, keys TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sync_tombstones (memory_id TEXT PRIMARY KEY, key TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sync_undos (op_id TEXT PRIMARY KEY) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sync_conflicts (id INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, "
    "field TEXT NOT NULL, kept_key TEXT NOT NULL, lost_key TEXT NOT NULL, lost_value TEXT, at TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS sync_conflicts_memory ON sync_conflicts(memory_id)",
    # changesets sealed and committed here but not yet written to the remote (a kill between the
    # two writes them at the next sync; written ones are deleted)
    "CREATE TABLE IF NOT EXISTS sync_outbox (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
)

# Tables of the hash chain and the erasure jobs (pmem/sync/engine.py, "Rollback, deletion and
# erasure"); created at the first sync after an upgrade too, so a device that synced before keeps syncing.
CHAIN_SCHEMA = (
    # this device's own sealed changesets, kept after they are written: the remote is repaired
    # from them. state 0: not written yet; 1: written, and `stat` is its file's size, times and
    # inode as last checked (a file changed since, or gone, is compared and written again)
    "CREATE TABLE IF NOT EXISTS sync_own (device TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL, "
    "digest TEXT NOT NULL, state INTEGER NOT NULL DEFAULT 0, stat TEXT NOT NULL DEFAULT '', "
    "PRIMARY KEY (device, seq))",
    # per other device: the digest of the last changeset applied here (the next one must name it)
    "CREATE TABLE IF NOT EXISTS sync_heads (device TEXT PRIMARY KEY, seq INTEGER NOT NULL, digest TEXT NOT NULL)",
    # per other device: the newest changeset some device vouched it applied (a remote that holds
    # fewer was rolled back or cut), and the newest whose vouches were read here
    "CREATE TABLE IF NOT EXISTS sync_known (device TEXT PRIMARY KEY, seq INTEGER NOT NULL, by TEXT NOT NULL, "
    "read INTEGER NOT NULL DEFAULT 0)",
    # erasure still to finish: 'erase' a memory here, 'redact' this device's own changesets,
    # 'steward' the files of the retired devices this one retired; each row goes when it is done
    "CREATE TABLE IF NOT EXISTS sync_jobs (kind TEXT NOT NULL, memory_id TEXT NOT NULL, "
    "PRIMARY KEY (kind, memory_id)) WITHOUT ROWID",
)
CHAIN_VERSION = 2


def _value(m: Memory | dict[str, Any] | None, field: str) -> Any:
    if m is None:
        return None
    if isinstance(m, dict):
        return m.get(field)
    return getattr(m, field)


def _key_device(key: str) -> str:
    """The device of a clock key (an undo's key ends with its own clock: pmem/hlc.py)."""
    parts = key.rsplit("+", 1)[-1].split("-", 2)
    return parts[2] if len(parts) == 3 else ""


def _key_time(key: str) -> str:
    """The wall time of a clock key, as an ISO time."""
    try:
        wall = int(key.rsplit("+", 1)[-1].split("-", 1)[0])
    except ValueError:
        return ""
    return datetime.fromtimestamp(wall / 1000, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _takeable(field: str, m: Memory | None) -> bool:
    """Whether a losing value can be written back: a field of a memory held here (whether a
    memory exists is `pmem restore`'s and `pmem undo`'s, not a field to set)."""
    return m is not None and (field in ("id", "text") or field in _MEMORY_FIELDS and field not in _LOCAL_FIELDS)


_LOCAL_FIELDS = ("id", "access_count", "last_accessed_at")


class SyncLog:
    """Sync's state and bookkeeping over one store's connection."""

    def __init__(self, store: "Verbs"):
        self.store = store
        self.conn = store.conn
        self._given: dict[str, bytes] = {}  # vectors that came with the texts being applied (apply)

    # -- state ------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sync_state'").fetchone() is not None \
            and self.get("device") is not None

    def create_tables(self) -> None:
        with self.store.transaction():
            for sql in SCHEMA + CHAIN_SCHEMA:
                self.conn.execute(sql)
            self.put("chain", CHAIN_VERSION)

    def upgrade(self) -> bool:
        """Create the chain's tables on a database that synced before them; True when it did
        (its own changesets on the remote are then adopted as its kept copies)."""
        if self.number("chain") >= CHAIN_VERSION:
            return False
        self.create_tables()
        return True

    def get(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM sync_state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: Any) -> None:
        self.conn.execute("INSERT INTO sync_state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                          "SET value = excluded.value", (key, str(value)))

    def number(self, key: str) -> int:
        return int(self.get(key) or 0)

    @property
    def device(self) -> str:
        return self.get("device") or ""

    def clock(self) -> Clock:
        return Clock.parse(self.get("hlc") or "", self.device)

    def lengthen_ids(self) -> None:
        """New memories get 16 hex digits (MemoryStore._new_id reads this setting): ids made on
        several devices must not collide."""
        self.conn.execute("INSERT INTO settings (key, value) VALUES ('id_bytes', '8') "
                          "ON CONFLICT(key) DO UPDATE SET value = excluded.value")

    def outbox_add(self, seq: int, blob: bytes) -> None:
        self.conn.execute("INSERT INTO sync_outbox (seq, blob) VALUES (?, ?)", (seq, blob))

    def outbox(self) -> list[tuple[int, bytes]]:
        return [(seq, bytes(blob)) for seq, blob in
                self.conn.execute("SELECT seq, blob FROM sync_outbox ORDER BY seq")]

    def outbox_done(self, seq: int) -> None:
        with self.store.transaction():
            self.outbox_drop(seq)

    def outbox_drop(self, seq: int) -> None:
        """Within the caller's transaction: the old outbox's row, once its changeset is kept."""
        self.conn.execute("DELETE FROM sync_outbox WHERE seq = ?", (seq,))

    @contextmanager
    def secure_delete(self) -> Iterator[None]:
        """SQLite zeroes what is deleted or rewritten meanwhile (a purge's old sealed copies)."""
        before = self.conn.execute("PRAGMA secure_delete").fetchone()[0]
        self.conn.execute("PRAGMA secure_delete = ON")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA secure_delete = {int(before)}")

    # -- the chain: own copies, heads, vouches, jobs -----------------------------------

    def own_add(self, device: str, seq: int, blob: bytes, digest: str, state: int = 0) -> None:
        """Keep (or replace, after a purge's rewrite) a sealed changeset of this device's; its
        file on the remote is compared at the next sync."""
        self.conn.execute("INSERT INTO sync_own (device, seq, blob, digest, state, stat) VALUES (?, ?, ?, ?, ?, '') "
                          "ON CONFLICT(device, seq) DO UPDATE SET blob = excluded.blob, digest = excluded.digest, "
                          "state = excluded.state, stat = ''", (device, seq, blob, digest, state))

    def own_index(self, device: str) -> list[tuple[int, int, str]]:
        """(seq, state, stat) of every kept copy of `device`'s changesets, in order."""
        return [(s, st, sig) for s, st, sig in self.conn.execute(
            "SELECT seq, state, stat FROM sync_own WHERE device = ? ORDER BY seq", (device,))]

    def own_blob(self, device: str, seq: int) -> tuple[bytes, str] | None:
        row = self.conn.execute("SELECT blob, digest FROM sync_own WHERE device = ? AND seq = ?",
                                (device, seq)).fetchone()
        return (bytes(row[0]), row[1]) if row else None

    def own_digest(self, device: str, seq: int) -> str | None:
        row = self.conn.execute("SELECT digest FROM sync_own WHERE device = ? AND seq = ?", (device, seq)).fetchone()
        return row[0] if row else None

    def own_checked(self, device: str, seq: int, stat: str) -> None:
        """The remote holds this copy, as `stat` shows its file now."""
        self.conn.execute("UPDATE sync_own SET state = 1, stat = ? WHERE device = ? AND seq = ?", (stat, device, seq))

    def own_forget(self, device: str) -> None:
        self.conn.execute("DELETE FROM sync_own WHERE device = ?", (device,))

    def heads(self) -> dict[str, tuple[int, str]]:
        return {d: (s, h) for d, s, h in self.conn.execute("SELECT device, seq, digest FROM sync_heads")}

    def seen(self) -> dict[str, list[Any]]:
        """What this device has applied of each other one: {device: [seq, digest]} (the digest
        is empty for what was applied before the chain)."""
        heads = self.heads()
        return {d: [s, heads[d][1] if d in heads and heads[d][0] == s else ""]
                for d, (s, _) in sorted(self.cursors().items()) if s > 0}

    def known(self) -> dict[str, tuple[int, str, int]]:
        """Per other device: (the newest seq vouched for, by whom, the newest seq whose vouches were read)."""
        return {d: (s, by, r) for d, s, by, r in self.conn.execute("SELECT device, seq, by, read FROM sync_known")}

    def set_known(self, device: str, seq: int, by: str, read: int) -> None:
        """Never lower: a device vouched for stays vouched for, whatever the remote shows later."""
        self.conn.execute("INSERT INTO sync_known (device, seq, by, read) VALUES (?, ?, ?, ?) ON CONFLICT(device) "
                          "DO UPDATE SET by = CASE WHEN excluded.seq > seq THEN excluded.by ELSE by END, "
                          "seq = max(seq, excluded.seq), read = max(read, excluded.read)", (device, seq, by, read))

    def purged_ids(self) -> list[str]:
        """Every memory purged here or learnt to be purged: vouched for in each changeset."""
        return [r[0] for r in self.conn.execute("SELECT memory_id FROM sync_tombstones ORDER BY memory_id")]

    def tombstone_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM sync_tombstones").fetchone()[0]

    def add_jobs(self, kind: str, ids: Iterable[str]) -> None:
        self.conn.executemany("INSERT OR IGNORE INTO sync_jobs (kind, memory_id) VALUES (?, ?)",
                              [(kind, m) for m in ids])

    def jobs(self, kind: str) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT memory_id FROM sync_jobs WHERE kind = ? ORDER BY memory_id",
                                                (kind,))]

    def job_done(self, kind: str, ids: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM sync_jobs WHERE kind = ? AND memory_id = ?", [(kind, m) for m in ids])

    def cursors(self) -> dict[str, tuple[int, int]]:
        return {d: (s, o) for d, s, o in self.conn.execute("SELECT device, seq, op FROM sync_cursors")}

    def set_cursor(self, device: str, seq: int, op: int) -> None:
        """Mark `device`'s changesets as applied up to `seq` (a rejoined device's own old ones)."""
        self.conn.execute("INSERT INTO sync_cursors (device, seq, op) VALUES (?, ?, ?) ON CONFLICT(device) "
                          "DO UPDATE SET seq = excluded.seq, op = excluded.op", (device, seq, op))

    def mark_retired(self, device: str, note: dict[str, Any]) -> None:
        """Remember a device's retirement note (status reads it without the key or the network)."""
        self.put(f"retired:{device}", json.dumps(note, sort_keys=True))

    def retired(self) -> dict[str, dict[str, Any]]:
        """The retired devices seen so far, with their notes (who retired each, when)."""
        return {k.split(":", 1)[1]: json.loads(v) for k, v in
                self.conn.execute("SELECT key, value FROM sync_state WHERE key LIKE 'retired:%'")}

    def tombstoned(self, ids: Iterable[str]) -> set[str]:
        return {r[0] for r in self.conn.execute(
            "SELECT memory_id FROM sync_tombstones WHERE memory_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),))}

    def conflicts(self, limit: int = 100) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT memory_id, field, kept_key, lost_key, lost_value, at FROM sync_conflicts "
                                 "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [{"memory_id": m, "field": f, "kept": k, "lost": lk, "lost_value": json.loads(v) if v else None,
                 "at": at, "lost_device": lk.split("+")[0].split("-", 2)[2]} for m, f, k, lk, v, at in rows]

    def conflict_entries(self, limit: int = 500) -> list[dict[str, Any]]:
        """The conflicts kept here, newest first, each with what the conflicts view shows: the
        memory as it is now, the field's winning value (its value now) and the losing one, and
        the device and time of each side."""
        rows = self.conn.execute("SELECT id, memory_id, field, kept_key, lost_key, lost_value, at FROM sync_conflicts "
                                 "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        held = {m.id: m for m in self.store.get_many({r[1] for r in rows})} if rows else {}
        out = []
        for cid, mid, field, kept, lost, value, at in rows:
            m = held.get(mid)
            lost_value = json.loads(value) if value else None
            if field == EXISTS:
                now: Any = m is not None
            elif field == "id":
                now = m.text if m else None
            else:
                now = _value(m, field) if m is not None and field in _MEMORY_FIELDS else None
            out.append({"id": cid, "memory_id": mid, "memory": m, "field": field, "kept_value": now,
                        "lost_value": lost_value, "kept_device": _key_device(kept), "kept_at": _key_time(kept),
                        "lost_device": _key_device(lost), "lost_at": _key_time(lost), "at": at,
                        "taken_back": m is not None and field not in (EXISTS, "id") and now == lost_value,
                        "can_take_back": _takeable(field, m)})
        return out

    def take_back(self, conflict_id: int) -> str:
        """Make a conflict's losing value the field's value again, as a new local edit: one
        undoable operation that the next `pmem sync` sends like any edit (and that wins over the
        value it replaces, being later). For a memory id two devices both made, the losing
        memory's text is stored as a new memory. Returns the id of the memory written."""
        row = self.conn.execute("SELECT memory_id, field, lost_value FROM sync_conflicts WHERE id = ?",
                                (conflict_id,)).fetchone()
        if row is None:
            raise NotFound(f"no sync conflict {conflict_id}")
        mid, field, value = row
        lost = json.loads(value) if value else None
        store = self.store
        try:
            m: Memory | None = store.get(mid)
        except NotFound:
            m = None
        if not _takeable(field, m):
            raise UsageError(f"the losing value of {field!r} cannot be taken back here"
                             + (f": memory {mid} is not held on this device" if m is None else
                                f": `pmem restore {mid}` or `pmem undo` bring a memory back"))
        assert m is not None
        with store.operation("edit", f"take back the losing {field} of {mid} (sync conflict {conflict_id})"):
            if field == "id":
                return store.add(str(lost or ""), allow_duplicate=True, allow_secret=True)[0].id
            if field == "text":
                store.edit(mid, text=str(lost or ""), allow_secret=True, action="edit")
            else:
                store.set_fields(mid, "edit", **{field: lost})
        return mid

    def conflict_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM sync_conflicts").fetchone()[0]

    def pending_events(self) -> int:
        return self.conn.execute("SELECT count(*) FROM events e JOIN operations o ON o.id = e.op_id "
                                 "WHERE e.seq > ? AND o.kind != 'sync'", (self.number("exported"),)).fetchone()[0]

    def _keys(self, cache: dict[str, dict[str, str]], memory_id: str) -> dict[str, str]:
        if memory_id not in cache:
            row = self.conn.execute("SELECT keys FROM sync_clocks WHERE memory_id = ?", (memory_id,)).fetchone()
            cache[memory_id] = json.loads(row[0]) if row else {}
        return cache[memory_id]

    def _load_keys(self, cache: dict[str, dict[str, str]], ids: set[str]) -> None:
        for memory_id, keys in self.conn.execute(
                "SELECT memory_id, keys FROM sync_clocks WHERE memory_id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(ids)),)):
            cache.setdefault(memory_id, json.loads(keys))
        for memory_id in ids:
            cache.setdefault(memory_id, {})  # none kept: a memory new here

    def _save_keys(self, cache: dict[str, dict[str, str]]) -> None:
        self.conn.executemany("INSERT INTO sync_clocks (memory_id, keys) VALUES (?, ?) ON CONFLICT(memory_id) "
                              "DO UPDATE SET keys = excluded.keys",
                              [(m, json.dumps(k, sort_keys=True, separators=(",", ":"))) for m, k in cache.items()
                               if k])

    @staticmethod
    def _key(keys: dict[str, str], field: str) -> str:
        return keys.get(field) or keys.get("*", "")

    # -- out --------------------------------------------------------------------------

    def _op(self, clock: Clock, memory_id: str, kind: str, at_ms: int) -> dict[str, Any]:
        n = self.number("op") + 1
        self.put("op", n)
        return {"id": f"{clock.device}-{n}", "n": n, "m": memory_id, "k": kind, "c": clock.tick(at_ms)}

    def export_existing(self, clock: Clock) -> list[dict[str, Any]]:
        """Every memory this store holds, as creates: what a device had before it joined. Its
        history and undone operations stay local."""
        cache: dict[str, dict[str, str]] = {}
        ops = []
        for m in self.store.iter_all():
            op = self._op(clock, m.id, "create", ms(m.updated_at))
            op["f"] = {f: getattr(m, f) for f in SYNC_FIELDS} | {EXISTS: True}
            cache[m.id] = {"*": op["c"]}
            ops.append(op)
        self._save_keys(cache)
        self.put("exported", self.conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
        self.conn.execute("INSERT OR IGNORE INTO sync_undos (op_id) SELECT id FROM operations "
                          "WHERE undone_at IS NOT NULL")
        self.put("hlc", clock.key())
        return ops

    def export(self, clock: Clock) -> tuple[list[dict[str, Any]], list[str]]:
        """This device's changes since the last export, as operations (call inside a transaction),
        and the memories it purged meanwhile."""
        cursor = self.number("exported")
        cache: dict[str, dict[str, str]] = {}
        ops = self._export_undos(clock, cursor, cache)
        purged: list[str] = []
        last = cursor
        rows = self.conn.execute(
            "SELECT e.seq, e.op_id, e.memory_id, e.action, e.before, e.after, e.at, o.kind, o.undone_at "
            "FROM events e JOIN operations o ON o.id = e.op_id WHERE e.seq > ? ORDER BY e.seq", (cursor,)).fetchall()
        handled = {r[0] for r in self.conn.execute("SELECT op_id FROM sync_undos")} if rows else set()
        tomb = self.tombstoned({r[2] for r in rows}) if rows else set()
        for seq, op_id, mid, action, before_json, after_json, at, op_kind, undone in rows:
            last = seq
            if op_kind == "sync" or op_id in handled:
                continue
            if undone:  # undone before it was ever sent: it never happened for the others
                self.conn.execute("INSERT OR IGNORE INTO sync_undos (op_id) VALUES (?)", (op_id,))
                handled.add(op_id)
                continue
            if mid in tomb:
                continue
            if action == "purge":
                op = self._op(clock, mid, "purge", ms(at))
                self._tombstone(mid, op["c"])
                tomb.add(mid)
                cache.pop(mid, None)
                purged.append(mid)
                ops.append(op)
                continue
            if before_json is None and after_json is None:
                continue  # history of a memory purged since: nothing of it is sent
            keys = self._keys(cache, mid)
            before = json.loads(before_json) if before_json else None
            after = json.loads(after_json) if after_json else None
            if before is None:
                op = self._op(clock, mid, "create", ms(at))
                op["f"] = {f: after.get(f) for f in SYNC_FIELDS if f in after} | {EXISTS: True}
                keys.clear()
                keys["*"] = op["c"]
            elif after is None:
                op = self._op(clock, mid, "delete", ms(at))
                op["f"], op["b"] = {EXISTS: False}, {EXISTS: self._key(keys, EXISTS)}
                keys[EXISTS] = op["c"]
            else:
                changed = [f for f in SYNC_FIELDS if f in after and before.get(f) != after.get(f)]
                if not changed:
                    continue
                op = self._op(clock, mid, KINDS_BY_ACTION.get(action, "change"), ms(at))
                op["f"] = {f: after[f] for f in changed}
                op["b"] = {f: self._key(keys, f) for f in changed}
                for f in changed:
                    keys[f] = op["c"]
            ops.append(op)
        self._save_keys(cache)
        self.put("exported", last)
        self.put("hlc", clock.key())
        return ops, purged

    def _export_undos(self, clock: Clock, cursor: int, cache: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
        """Compensating operations for each undone operation the others have seen: the fields it
        had set, back to their values now, each keyed just above the value it reverts."""
        ops: list[dict[str, Any]] = []
        undone = self.conn.execute(
            "SELECT o.id, o.undone_at FROM operations o WHERE o.undone_at IS NOT NULL AND o.kind != 'purge' "
            "AND o.id NOT IN (SELECT op_id FROM sync_undos) AND EXISTS (SELECT 1 FROM events e "
            "WHERE e.op_id = o.id AND (e.seq <= ? OR o.kind = 'sync'))", (cursor,)).fetchall()
        for op_id, undone_at in undone:
            self.conn.execute("INSERT OR IGNORE INTO sync_undos (op_id) VALUES (?)", (op_id,))
            touched: dict[str, set[str]] = {}
            for mid, before_json, after_json in self.conn.execute(
                    "SELECT memory_id, before, after FROM events WHERE op_id = ? ORDER BY seq", (op_id,)):
                before = json.loads(before_json) if before_json else None
                after = json.loads(after_json) if after_json else None
                if before is None and after is None:
                    continue
                names = touched.setdefault(mid, set())
                if before is None or after is None:
                    names.update(SYNC_FIELDS)
                    names.add(EXISTS)
                else:
                    names.update(f for f in SYNC_FIELDS if before.get(f) != after.get(f))
            tomb = self.tombstoned(touched)
            for mid, names in touched.items():
                if mid in tomb or not names:
                    continue
                try:
                    now: Memory | None = self.store.get(mid)
                except NotFound:
                    now = None
                keys = self._keys(cache, mid)
                op = self._op(clock, mid, "undo", ms(undone_at))
                ordered = sorted(names)
                if now is None:
                    op["f"] = {EXISTS: False}
                    ordered = [EXISTS]
                else:
                    op["f"] = {f: getattr(now, f) for f in ordered if f != EXISTS}
                    if EXISTS in names:
                        op["f"][EXISTS] = True
                op["b"] = {f: self._key(keys, f) for f in ordered}
                op["u"] = {f: undo_key(op["b"][f], op["c"]) for f in ordered}
                keys.update(op["u"])
                ops.append(op)
        return ops

    def carry_vectors(self, ops: list[dict[str, Any]]) -> None:
        """Each operation that sets a memory's text carries that memory's stored vectors, where
        the text is the memory's text now (a text changed since never carries a stale vector):
        `v` = {"e": [model, dim, float16 base64], "n": [MiniLM's, the same], "r": the parts made in
        int8 and not yet again in float32, ["e", "n"] or fewer (pmem.store.refine; absent when none)},
        inside the sealed payload. The receiver takes them only for the same model (`_arrived`); purged, the
        operation is rewritten without its values, vectors included (sync/repair.py)."""
        wanted = {op["m"] for op in ops if isinstance((op.get("f") or {}).get("text"), str)}
        name, dim = self.store.vectors.model()
        if not wanted or not name or not dim or not self.store.vectors.exists():
            return
        rows = {mid: (seq, text, blob) for mid, seq, text, blob in self.conn.execute(
            "SELECT m.id, m.seq, m.text, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq "
            "WHERE m.id IN (SELECT value FROM json_each(?))", (json.dumps(sorted(wanted)),))}
        english = self.store.vectors.english.of(seq for seq, _, _ in rows.values())
        seqs = [seq for seq, _, _ in rows.values()]
        rough = {part: refine.marked(self.store.vectors.db, side, seqs)
                 for part, side in (("e", "main"), ("n", "english"))}
        for op in ops:
            row = rows.get(op["m"])
            if row is None or (op.get("f") or {}).get("text") != row[1] or len(row[2]) != 4 * dim:
                continue
            packed = pack_half(row[2])
            if packed is None:
                continue
            op["v"] = {"e": [name, dim, packed]}
            second = english.get(row[0])
            packed = pack_half(second) if second is not None and len(second) == 4 * ENGLISH_DIM else None
            if packed is not None:
                op["v"]["n"] = [ENGLISH_MODEL, ENGLISH_DIM, packed]
            int8 = [part for part in ("e", "n") if part in op["v"] and row[0] in rough[part]]
            if int8:
                op["v"]["r"] = int8

    def _arrived(self, ops: list[dict[str, Any]]) -> tuple[dict[str, bytes], dict[str, bytes], list[bytes]]:
        """The vectors that came with these operations' texts, by text, parsed totally: bytes
        from another device (trusted, but maybe of another version or model) are taken only with
        this store's model and dimension, the exact length, finite values; anything else is
        ignored, and that memory is embedded here later (VectorIndex.fill). Each op's `v` is
        dropped as it is read. Also the vectors its sender made in int8 (`r`), to be made again
        in float32 here too (pmem.store.refine)."""
        main: dict[str, bytes] = {}
        english: dict[str, bytes] = {}
        rough: list[bytes] = []
        ident: tuple[str | None, int | None] | None = None
        for op in ops:
            v = op.pop("v", None)
            text = op["f"].get("text")
            if not isinstance(v, dict) or not isinstance(text, str):
                continue
            if ident is None:
                ident = self._identity()
            for part, want, out in (("e", ident, main), ("n", (ENGLISH_MODEL, ENGLISH_DIM), english)):
                carried = v.get(part)
                if not (isinstance(carried, list) and len(carried) == 3 and want[0] is not None
                        and carried[0] == want[0] and type(carried[1]) is int and carried[1] == want[1]):
                    continue
                blob = unpack_half(carried[2], carried[1])
                if blob is not None:
                    out[text] = blob
                    int8 = v.get("r")
                    if isinstance(int8, list) and len(int8) <= 2 and part in int8:
                        rough.append(blob)
        return main, english, rough

    def _identity(self) -> tuple[str | None, int | None]:
        """The model and dimension this store's vectors come from; before the first, the model it
        would embed with (loaded to know its dimension); (None, None) where it cannot be loaded."""
        name, dim = self.store.vectors.model()
        if name is not None:
            return name, dim
        try:
            e = self.store.vectors.embedder
        except Exception:  # noqa: BLE001 - no model here now: the memories are embedded later
            return None, None
        return e.name, int(e.dim)

    def _tombstone(self, memory_id: str, key: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO sync_tombstones (memory_id, key) VALUES (?, ?)", (memory_id, key))
        self.conn.execute("DELETE FROM sync_clocks WHERE memory_id = ?", (memory_id,))

    def forget_conflicts(self, memory_id: str) -> int:
        """Drop the conflicts kept about a purged memory (they may quote its text)."""
        return self.conn.execute("DELETE FROM sync_conflicts WHERE memory_id = ?", (memory_id,)).rowcount

    # -- in ---------------------------------------------------------------------------

    def apply(self, changesets: list[tuple[str, int, list[dict[str, Any]]]], clock: Clock,
              progress: Callable[[int, int], None] | None = None, purged: Iterable[str] = (),
              heads: dict[str, tuple[int, str]] | None = None,
              known: dict[str, tuple[int, str, int]] | None = None) -> dict[str, Any]:
        """Apply other devices' changesets (device, seq, operations) in one transaction, in clock
        order, and move each device's cursor. `purged`: memories other devices vouch were purged
        (tombstoned first, so no operation of a changeset put back from before the purge stores
        them); `heads` and `known`: the chain's digests and vouches read with them. Returns counts
        and the ids purged; erasing them (a purge rewrites the file, so after the commit) is
        recorded as jobs in the same transaction, and done by the caller."""
        cursors = self.cursors()
        todo: list[dict[str, Any]] = []
        for device, seq, ops in changesets:
            done_op = cursors.get(device, (0, 0))[1]
            todo.extend(op for op in ops if int(op.get("n", 0)) > done_op)
            last_n = max([int(op.get("n", 0)) for op in ops] + [done_op])
            cursors[device] = (seq, last_n)
        todo.sort(key=lambda op: (op["c"], op["id"]))
        stats: dict[str, Any] = {"applied": 0, "dropped": 0, "conflicts": 0, "purge": []}
        cache: dict[str, dict[str, str]] = {}
        pending: dict[str, Memory] = {}  # creates of new memories, stored in batches (_flush)
        store = self.store
        with store.operation("sync", f"sync: {len(todo)} operations from {len(changesets)} changesets"):
            tomb = self.tombstoned({op["m"] for op in todo})
            vouched = set(purged) - self.tombstoned(purged)
            for mid in sorted(vouched):
                self._tombstone(mid, "vouched")
                tomb.add(mid)
                stats["purge"].append(mid)
            # Two queries up front instead of two per operation: a first join is mostly creates
            # of memories not held here, which need neither a row nor clocks looked up.
            held = store.existing_ids({op["m"] for op in todo})
            self._load_keys(cache, {op["m"] for op in todo} - tomb)
            main, english, rough = self._arrived([op for op in todo if op["m"] not in tomb])
            self._given = main
            try:
                with store.vectors.arriving(main, english, rough):
                    self._apply_all(todo, tomb, cache, pending, held, stats, clock, progress)
            finally:
                self._given = {}
            self._save_keys(cache)
            self.conn.executemany("INSERT INTO sync_cursors (device, seq, op) VALUES (?, ?, ?) ON CONFLICT(device) "
                                  "DO UPDATE SET seq = excluded.seq, op = excluded.op",
                                  [(d, s, o) for d, (s, o) in cursors.items()])
            self.conn.executemany("INSERT INTO sync_heads (device, seq, digest) VALUES (?, ?, ?) ON CONFLICT(device) "
                                  "DO UPDATE SET seq = excluded.seq, digest = excluded.digest",
                                  [(d, s, h) for d, (s, h) in (heads or {}).items()])
            for device, (seq, by, read) in (known or {}).items():
                self.set_known(device, seq, by, read)
            for kind in ("erase", "redact", "steward"):
                self.add_jobs(kind, stats["purge"])
            self.put("hlc", clock.key())
        return stats

    def _apply_all(self, todo: list[dict[str, Any]], tomb: set[str], cache: dict[str, dict[str, str]],
                   pending: dict[str, Memory], held: set[str], stats: dict[str, Any], clock: Clock,
                   progress: Callable[[int, int], None] | None) -> None:
        for i, op in enumerate(todo, start=1):
            if progress and i % 500 == 0:
                progress(i, len(todo))
            clock.observe(op["c"])
            mid = op["m"]
            if op["k"] == "redacted" or mid in tomb:
                stats["dropped"] += 1
                continue
            if mid in pending:
                self._flush(pending)
            if op["k"] == "purge":
                self._tombstone(mid, op["c"])
                cache.pop(mid, None)
                tomb.add(mid)
                stats["purge"].append(mid)
                continue
            stats["applied"] += 1
            stats["conflicts"] += self._apply_one(op, self._keys(cache, mid), pending, held)
            if len(pending) >= FLUSH_EVERY:
                self._flush(pending)
        self._flush(pending)

    def _apply_one(self, op: dict[str, Any], keys: dict[str, str], pending: dict[str, Memory],
                   held: set[str]) -> int:
        store = self.store
        mid = op["m"]
        row: Memory | None = None
        if mid in held:
            try:
                row = store.get(mid)
            except NotFound:
                pass
        base = op.get("b") or {}
        wins: dict[str, Any] = {}
        conflicts = 0
        if op["k"] == "create" and row is not None and keys:
            # two devices made the same id before they synced (8-hex ids of memories that
            # predate sync): kept apart as a conflict, never merged into one memory
            return self._conflict(mid, "id", self._key(keys, EXISTS), op["c"], op["f"].get("text"))
        for f, value in op["f"].items():
            new = (op.get("u") or {}).get(f) or op["c"]
            old = self._key(keys, f)
            concurrent = bool(old) and base.get(f, "") != old
            if new <= old:
                if concurrent:
                    conflicts += self._conflict(mid, f, old, new, value)
                continue
            if concurrent:
                conflicts += self._conflict(mid, f, new, old, _value(row, f) if f != EXISTS else row is not None)
            wins[f] = value
            keys[f] = new
        if wins.get(EXISTS) is False:
            if row is not None:
                store.delete(mid, action="sync")
            return conflicts
        if row is None:
            if wins.get(EXISTS):
                values = {f: op["f"].get(f) for f in SYNC_FIELDS if f in op["f"] and f in _MEMORY_FIELDS}
                pending[mid] = Memory(id=mid, **values)
                held.add(mid)  # stored at the next flush, before any later operation on it
            return conflicts
        changes = {f: v for f, v in wins.items() if f in _MEMORY_FIELDS and _value(row, f) != v}
        if changes:
            self._change(row, changes)
        return conflicts

    def _change(self, row: Memory, changes: dict[str, Any]) -> None:
        """Set fields through the store, its clock held at the memory's new updated_at (the store
        stamps every write with its clock; the value that travelled is the origin's)."""
        store = self.store
        stamp = changes.get("updated_at", row.updated_at)
        own_clock = store.clock
        store.clock = lambda: stamp
        try:
            if "text" in changes:
                store.edit(row.id, text=changes["text"], allow_secret=True, action="sync")
            rest = {f: v for f, v in changes.items() if f not in ("text", "updated_at")}
            if rest or "updated_at" in changes:
                store.set_fields(row.id, "sync", **rest)
        finally:
            store.clock = own_clock

    def _flush(self, pending: dict[str, Memory]) -> None:
        """Store new memories with the vectors that came with them; the others without one, for
        VectorIndex.fill after the commit (a join is searchable by words when it returns)."""
        if pending:
            items = list(pending.values())
            self.store.insert(items, kind="sync", keep_ids=True, allow_secret=True,
                              vectors=[self._given.get(m.text) for m in items])
            pending.clear()

    def _conflict(self, memory_id: str, field: str, kept: str, lost: str, lost_value: Any) -> int:
        self.conn.execute("INSERT INTO sync_conflicts (memory_id, field, kept_key, lost_key, lost_value, at) "
                          "VALUES (?, ?, ?, ?, ?, ?)",
                          (memory_id, field, kept, lost, json.dumps(lost_value, ensure_ascii=False),
                           self.store.clock()))
        return 1

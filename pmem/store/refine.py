"""Vectors made in int8, to be made again in float32: which they are, by row and side.

An import, a join's fill and a reindex run their many texts through the int8 graphs
(pmem.models.e5_int8, bert_int8: 2-4 times as fast), whose vectors sit within 1 - cosine ~0.0002 of
the float32 model's. That is close, not equal: a question on the edge between two memories can
rank them the other way (decision 0070). So each vector a call of several texts may have made in
int8 is marked here when it is written (VectorIndex.put_many, EnglishVectors.put and fill), and
the background fill that follows an import or a join (pmem/fill.py) embeds the marked ones again
in float32, a committed batch at a time, and drops their marks: a person waits for the int8 pass
only, and the store ends with the vectors a float32 run would have stored. `embed_bulk =
int8-only` keeps the int8 vectors (no marks); `float32` makes none.

`refine_vec` (side, seq): side `main` (the memory's vector, memory_vec) or `english` (its second
vector, memory_vec_en). Created with the first mark; triggers drop a row's marks when the row goes
or its text changes (the new text's vector is marked, or not, by the write that stores it).
Figures: docs/decisions/0071-int8-then-exact.md.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .connection import Connection

TABLE = "refine_vec"
ROUGH_MAX = 50_000  # int8 vectors remembered until written and marked (references to the caller's bytes;
# a store.insert of more at once leaves the oldest unmarked, in int8; pmem import writes 512 a batch)
MARKED: set[str] = set()  # databases this process marked vectors in (a command then starts the fill)


def int8_calls(model: Any) -> int | None:
    """How many calls of this model's engine ran in int8 so far (None: it cannot say, a `pmem
    serve` client): a call that moved it made int8 vectors (pmem.store.refine)."""
    return getattr(getattr(model, "inner", model), "int8_calls", None)


def made_int8(model: Any, calls: int | None, texts: int) -> bool:
    """Whether the call just made (`calls`: int8_calls before it) may have run in int8: a served
    model's call of several texts may have (the server's engine decides); a model without int8 never."""
    if calls is not None:
        return int8_calls(model) != calls
    return bool(getattr(model, "remote", False)) and texts > 1


def remember(rough: dict[bytes, None], blobs: Iterable[bytes]) -> None:
    """Add int8 vectors to `rough` (a dict used as an ordered set), the oldest dropped past ROUGH_MAX."""
    rough.update(dict.fromkeys(blobs))
    while len(rough) > ROUGH_MAX:
        del rough[next(iter(rough))]


def create_table(db: Connection) -> None:
    db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (side TEXT NOT NULL, seq INTEGER NOT NULL, "
               "PRIMARY KEY (side, seq)) WITHOUT ROWID")
    db.execute(f"CREATE TRIGGER IF NOT EXISTS {TABLE}_gone AFTER DELETE ON memories "
               f"BEGIN DELETE FROM {TABLE} WHERE seq = old.seq; END")
    db.execute(f"CREATE TRIGGER IF NOT EXISTS {TABLE}_text AFTER UPDATE OF text ON memories "
               f"WHEN old.text IS NOT new.text BEGIN DELETE FROM {TABLE} WHERE seq = old.seq; END")


def mark(db: Connection, side: str, rough: Iterable[int], exact: Iterable[int] = ()) -> None:
    """Inside the write that stores them: `rough` rows' vectors of `side` came from int8 (marked),
    `exact` rows' did not (a mark of an earlier vector goes)."""
    rough, exact = list(rough), list(exact)
    if rough:
        create_table(db)
        MARKED.add(str(db.path))
        db.conn.executemany(f"INSERT OR IGNORE INTO {TABLE} (side, seq) VALUES (?, ?)", [(side, s) for s in rough])
    if exact and db.has_table(TABLE):
        db.conn.executemany(f"DELETE FROM {TABLE} WHERE side = ? AND seq = ?", [(side, s) for s in exact])


def written(db: Connection, side: str, rows: Sequence[tuple[int, bytes]], rough: dict[bytes, None],
            keep: bool = False) -> None:
    """Inside the write that stored these (seq, vector) rows of `side`: mark those whose vector is
    in `rough` (made in int8), unmark the others; forget the written ones unless `keep` (a sync's
    vector may be written to two rows)."""
    mark(db, side, [seq for seq, blob in rows if blob in rough], [seq for seq, blob in rows if blob not in rough])
    if not keep:
        for _, blob in rows:
            rough.pop(blob, None)


def todo(db: Connection, side: str, vectors: str, after: int, limit: int) -> list[tuple[int, str]]:
    """(seq, text) of up to `limit` marked rows of `side` past `after`, in seq order, whose vector
    is in the table `vectors` still (a mark whose vector went is dropped by `unmark`)."""
    if not db.has_table(TABLE):
        return []
    return db.execute(f"SELECT r.seq, m.text FROM {TABLE} r JOIN memories m ON m.seq = r.seq "
                      f"WHERE r.side = ? AND r.seq > ? AND EXISTS (SELECT 1 FROM {vectors} v WHERE v.seq = r.seq) "
                      "ORDER BY r.seq LIMIT ?", (side, after, limit)).fetchall()


def unmark_gone(db: Connection, side: str, vectors: str) -> None:
    """Drop the marks of `side` whose vector is gone (a purge, a sync's delete of the vector)."""
    if db.has_table(TABLE) and db.has_table(vectors):
        db.execute(f"DELETE FROM {TABLE} WHERE side = ? AND NOT EXISTS "
                   f"(SELECT 1 FROM {vectors} v WHERE v.seq = {TABLE}.seq)", (side,))


def count(db: Connection, side: str | None = None) -> int:
    """Marked vectors (of `side`, or of both): what the fill has still to make in float32."""
    if not db.has_table(TABLE):
        return 0
    if side is None:
        return db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    return db.execute(f"SELECT count(*) FROM {TABLE} WHERE side = ?", (side,)).fetchone()[0]


def marked(db: Connection, side: str, seqs: Iterable[int]) -> set[int]:
    """Which of these rows' vectors of `side` are marked (a sync sends that with them)."""
    if not db.has_table(TABLE):
        return set()
    import json

    return {r[0] for r in db.execute(f"SELECT seq FROM {TABLE} WHERE side = ? AND seq IN "
                                     "(SELECT value FROM json_each(?))", (side, json.dumps(list(seqs))))}

"""Concurrent writers on one store lose nothing: N processes (the way shells, editors' hooks and
`pmem serve` clients meet one file) each run M operations on one database, chosen at random
(seeded) from:

- add a note of their own (a text no one else writes);
- add one of 10 texts that every writer adds too (the duplicate check must store each once);
- tag the one shared memory (every writer edits the same row: the lost-update case);
- pin or unpin one of 5 shared memories;
- undo (about one operation in 15).

Every library call that raises counts as an error a user would have seen. Afterwards the parent
checks, from the database itself:

- lost adds: a writer's add succeeded, its operation was not undone, the memory is missing;
- lost tags: a tag a writer added to the shared memory by an operation not undone is missing;
- duplicate texts: the same shared text stored more than once;
- double undos: one operation reported undone by two writers;
- PRAGMA integrity_check, and FTS5 and vec0 rows matching the memories.

It was benchmarks/concurrency.py; its figures (lock waits, and what the fixes changed) are in
docs/decisions/0008-trust-concurrency-kill9.md. Bounded here to 4 writers x 150 operations.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.stress, pytest.mark.slow]

WORKER = r"""
import json, random, sys, time
from pmem.errors import NotFound
from pmem.service import MemoryStore

db, shared, pins = sys.argv[1], sys.argv[5], sys.argv[6].split(",")
w, ops, seed = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = MemoryStore(db)
waits = []


class Timed:
    # Times BEGIN IMMEDIATE: how long this writer waited for the others.
    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, *args):
        if sql == "BEGIN IMMEDIATE":
            t = time.perf_counter()
            try:
                return self._conn.execute(sql, *args)
            finally:
                waits.append(time.perf_counter() - t)
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


store.conn = Timed(store.conn)
rng = random.Random(seed * 1000 + w)
log = {"adds": [], "tags": [], "undone": [], "errors": [], "latency": []}
sys.stdin.read()  # start together
for i in range(ops):
    r = rng.random()
    t = time.perf_counter()
    try:
        if r < 0.25:
            m, _ = store.add(f"writer {w} note {i}: {rng.random():.6f}")
            log["adds"].append(m.id)
        elif r < 0.40:
            store.add(f"the shared reminder number {rng.randrange(10)}")
        elif r < 0.75:
            tag = f"w{w}-{i}"
            store.edit(shared, add_tags=[tag])
            log["tags"].append(tag)
        elif r < 0.933:
            mid = rng.choice(pins)
            (store.pin if rng.random() < 0.5 else store.unpin)(mid)
        else:
            try:
                log["undone"].append(store.undo().id)
            except NotFound:
                pass
    except Exception as exc:  # anything a user would have seen
        log["errors"].append(f"{type(exc).__name__}: {exc}")
    log["latency"].append(time.perf_counter() - t)
log["waits"] = waits
print(json.dumps(log))
"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run(tmp: Path, writers: int, ops: int, seed: int, embed_model: str) -> dict:
    """Start the writers together on one store in `tmp`; what the database says afterwards."""
    env = {**os.environ, "PMEM_EMBED_MODEL": embed_model,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    from pmem.service import MemoryStore
    from pmem.store import Filter

    db = Path(tmp) / "pmem.db"
    store = MemoryStore(db)
    shared, _ = store.add("the one memory every writer tags")
    pins = [store.add(f"pinned and unpinned by everyone, number {i}")[0].id for i in range(5)]
    store.close()
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), str(ops), str(seed), shared.id,
                               ",".join(pins)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for w in range(writers)]
    time.sleep(1.0)  # let every writer import pmem and open the store
    for p in procs:
        p.stdin.close()
        p.stdin = None
    logs, crashed = [], []
    for p in procs:
        out, err = p.communicate(timeout=240)
        if p.returncode != 0:
            crashed.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
            continue
        logs.append(json.loads(out))
    wall = time.perf_counter() - start

    store = MemoryStore(db)
    q = store.conn.execute
    undone_ops = {r[0] for r in q("SELECT id FROM operations WHERE undone_at IS NOT NULL")}

    def op_of(memory_id: str, action: str) -> str | None:
        row = q("SELECT op_id FROM events WHERE memory_id = ? AND action = ? ORDER BY seq LIMIT 1",
                (memory_id, action)).fetchone()
        return row[0] if row else None

    present = store.existing_ids(a for log in logs for a in log["adds"])
    lost_adds = [a for log in logs for a in log["adds"]
                 if a not in present and op_of(a, "add") not in undone_ops]
    final_tags = set(store.get(shared.id).tags)
    tag_ops = {}
    for e, op in store.history(shared.id):
        if e.before and e.after:
            for t in set(e.after["tags"]) - set(e.before["tags"]):
                tag_ops.setdefault(t, op)
    lost_tags = [t for log in logs for t in log["tags"]
                 if t not in final_tags and (t not in tag_ops or tag_ops[t].undone_at is None)]
    dup = q("SELECT text, count(*) FROM memories WHERE text LIKE 'the shared reminder number %' "
            "GROUP BY text HAVING count(*) > 1").fetchall()
    undone = [u for log in logs for u in log["undone"]]
    double_undos = len(undone) - len(set(undone))
    integrity = q("PRAGMA integrity_check").fetchone()[0]
    try:
        q("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
        fts_ok = True
    except Exception:
        fts_ok = False
    vec_ok = q("SELECT count(*) FROM memory_vec").fetchone()[0] == q("SELECT count(*) FROM memories").fetchone()[0]
    errors = [e for log in logs for e in log["errors"]]
    waits = [x for log in logs for x in log["waits"]]
    latency = [x for log in logs for x in log["latency"]]
    result = {
        "writers": writers, "ops_per_writer": ops, "seed": seed, "embed_model": embed_model,
        "operations": writers * ops, "wall_s": round(wall, 2),
        "crashed_writers": crashed, "errors_shown": len(errors), "error_samples": errors[:5],
        "lost_adds": len(lost_adds), "lost_tags": len(lost_tags), "tags_added": sum(len(log["tags"]) for log in logs),
        "duplicate_texts": len(dup), "undos": len(undone), "double_undos": double_undos,
        "integrity_check": integrity, "fts_ok": fts_ok, "vectors_match_rows": vec_ok,
        "memories": store.count(Filter.everything()),
        "lock_wait_ms": {"p50": round(pct(waits, 0.5) * 1000, 1), "p99": round(pct(waits, 0.99) * 1000, 1),
                         "max": round(max(waits, default=0) * 1000, 1), "n": len(waits)},
        "op_latency_ms": {"p50": round(statistics.median(latency) * 1000, 1) if latency else 0,
                          "p99": round(pct(latency, 0.99) * 1000, 1)},
    }
    store.close()
    return result


def test_concurrent_writers_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PMEM_EMBED_MODEL", "fake-384")  # no model load, so the writers contend harder
    r = run(tmp_path, writers=4, ops=150, seed=1, embed_model="fake-384")
    assert r["crashed_writers"] == [], r["crashed_writers"]
    assert r["errors_shown"] == 0, r["error_samples"]
    assert r["tags_added"] > 100 and r["undos"] > 0  # the race was run
    assert (r["lost_adds"], r["lost_tags"], r["duplicate_texts"], r["double_undos"]) == (0, 0, 0, 0), r
    assert r["integrity_check"] == "ok" and r["fts_ok"] and r["vectors_match_rows"], r
